package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"cxlpool/api/client"
	"cxlpool/internal/bytesize"
	"cxlpool/rdma"
	rclient "cxlpool/rdma/client"
)

// exportOut is an export in --json output. Token is set only by
// export create: the service shows it once.
type exportOut struct {
	ID          string `json:"id"`
	URI         string `json:"uri"`
	Chunk       string `json:"chunk"`
	Client      string `json:"client"`
	Access      string `json:"access"` // "rw", "r" or "w"
	OffsetBytes uint64 `json:"offset_bytes"`
	LengthBytes uint64 `json:"length_bytes"`
	Expiry      string `json:"expiry,omitempty"`
	Created     string `json:"created,omitempty"`
	// Server is the export server's host:port, where the client dials.
	Server string `json:"server,omitempty"`
	Token  string `json:"token,omitempty"`

	Reads        uint64 `json:"reads"`
	Writes       uint64 `json:"writes"`
	Atomics      uint64 `json:"atomics"`
	BytesRead    uint64 `json:"bytes_read"`
	BytesWritten uint64 `json:"bytes_written"`
}

func toExportOut(x client.Export) exportOut {
	o := exportOut{ID: x.ID, URI: x.ODataID, Chunk: lastSegment(x.Chunk()), Access: x.Access()}
	if p := x.Oem.CxlPool; p != nil {
		o.Client, o.OffsetBytes, o.LengthBytes, o.Expiry, o.Created, o.Token = p.Client, p.Offset, p.Length, p.Expiry, p.Created, p.Token
		if t := p.Traffic; t != nil {
			o.Reads, o.Writes, o.Atomics, o.BytesRead, o.BytesWritten = t.Reads, t.Writes, t.Atomics, t.BytesRead, t.BytesWritten
		}
	}
	return o
}

// accessWords spells out an export's access for people.
func accessWords(a string) string {
	switch a {
	case "rw":
		return "read-write"
	case "r":
		return "read-only"
	case "w":
		return "write-only"
	}
	return a
}

func cmdExport(ctx context.Context, a *app, args []string) error {
	sub := "list"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		sub, args = args[0], args[1:]
	}
	switch sub {
	case "list":
		return exportList(ctx, a, args)
	case "create":
		return exportCreate(ctx, a, args)
	case "revoke":
		return exportRevoke(ctx, a, args)
	case "bench":
		return exportBench(ctx, a, args)
	}
	return usagef("export: unknown subcommand %q (create, list, revoke, bench)", sub)
}

// exportServer is the address a remote client dials: the fabric's, with
// an unspecified host (a server listening on every address) replaced by
// the host poolctl reaches the box at.
func (a *app) exportServer(ctx context.Context, c *client.Client) (string, error) {
	f, err := c.RDMA(ctx)
	if err != nil {
		if client.IsNotFound(err) {
			return "", fmt.Errorf("%s exports no memory (no RDMA fabric)", a.g.server)
		}
		return "", explain(err)
	}
	addr := f.Address()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, nil
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		if u, err := url.Parse(a.g.server); err == nil && u.Hostname() != "" {
			return net.JoinHostPort(u.Hostname(), port), nil
		}
	}
	return addr, nil
}

// isoDuration writes d as an ISO 8601 duration, as the service takes
// expiries ("PT1H30M").
func isoDuration(d time.Duration) string {
	var b strings.Builder
	b.WriteString("PT")
	if h := d / time.Hour; h > 0 {
		fmt.Fprintf(&b, "%dH", h)
		d -= h * time.Hour
	}
	if m := d / time.Minute; m > 0 {
		fmt.Fprintf(&b, "%dM", m)
		d -= m * time.Minute
	}
	if d > 0 || b.Len() == 2 {
		b.WriteString(strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "S")
	}
	return b.String()
}

func exportCreate(ctx context.Context, a *app, args []string) error {
	fs := a.flags("export create", "CHUNK --client NAME [--read-only] [--offset N] [--length N] [--expires DURATION]")
	name := fs.String("client", "", "the remote client's `name` (its endpoint is created if new)")
	readOnly := fs.Bool("read-only", false, "allow READ only (default: read and write)")
	var offset, length bytesize.Value
	fs.Var(&offset, "offset", "export from this `size` into the chunk")
	fs.Var(&length, "length", "export this `size` (default: to the end of the chunk)")
	expires := fs.Duration("expires", 0, "revoke the export after this `duration` (default: never)")
	pos, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *name == "" {
		return usagef("export create: --client is required")
	}
	if *expires < 0 {
		return usagef("export create: --expires must be positive")
	}
	chunk, err := memberURI(client.ChunksURI, "chunk", pos[0])
	if err != nil {
		return err
	}
	req := client.ExportRequest{Chunk: chunk, Client: *name, ReadOnly: *readOnly, Offset: uint64(offset), Length: uint64(length)}
	if *expires > 0 {
		req.Expiry = isoDuration(*expires)
	}
	ctx, cancel := a.deadline(ctx, false)
	defer cancel()
	c, err := a.client()
	if err != nil {
		return err
	}
	x, err := c.CreateExport(ctx, req)
	if err != nil {
		return explain(err)
	}
	out := toExportOut(x)
	if out.Server, err = a.exportServer(ctx, c); err != nil {
		fmt.Fprintf(a.stderr, "poolctl: warning: export server address unknown: %v\n", err)
	}
	if a.g.json {
		return a.printJSON(out)
	}
	fmt.Fprintf(a.stdout, "Exported %s of chunk %s", size(out.LengthBytes), out.Chunk)
	if out.OffsetBytes != 0 {
		fmt.Fprintf(a.stdout, " at offset %s", size(out.OffsetBytes))
	}
	fmt.Fprintf(a.stdout, " to %s, %s", out.Client, accessWords(out.Access))
	if out.Expiry != "" {
		fmt.Fprintf(a.stdout, ", expires %s", out.Expiry)
	}
	fmt.Fprintln(a.stdout, ".")
	fmt.Fprintf(a.stdout, "export: %s\n", out.ID)
	fmt.Fprintf(a.stdout, "server: %s\n", orDash(out.Server))
	fmt.Fprintf(a.stdout, "token:  %s\n", out.Token)
	fmt.Fprintln(a.stdout, "The token is shown only this once: give it to the client now.")
	return nil
}

func exportList(ctx context.Context, a *app, args []string) error {
	return list(ctx, a, "export list", args,
		func(ctx context.Context, c *client.Client) ([]exportOut, error) {
			return convert(toExportOut)(c.Exports(ctx))
		},
		[]string{"ID", "CLIENT", "CHUNK", "ACCESS", "OFFSET", "LENGTH", "EXPIRES", "READ", "WRITTEN"},
		func(o exportOut) []string {
			return []string{o.ID, o.Client, o.Chunk, o.Access, size(o.OffsetBytes), size(o.LengthBytes),
				orDash(o.Expiry), size(o.BytesRead), size(o.BytesWritten)}
		})
}

func exportRevoke(ctx context.Context, a *app, args []string) error {
	fs := a.flags("export revoke", "ID")
	pos, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	uri, err := memberURI(client.RDMAConnectionsURI, "export", pos[0])
	if err != nil {
		return err
	}
	ctx, cancel := a.deadline(ctx, false)
	defer cancel()
	c, err := a.client()
	if err != nil {
		return err
	}
	if err := c.RevokeExport(ctx, uri); err != nil {
		return explain(err)
	}
	if a.g.json {
		return a.printJSON(map[string]string{"id": lastSegment(uri), "uri": uri, "state": "revoked"})
	}
	fmt.Fprintf(a.stdout, "Revoked export %s: its client can no longer reach the memory.\n", lastSegment(uri))
	return nil
}

// benchOut is export bench's --json output.
type benchOut struct {
	Export      string  `json:"export"`
	Server      string  `json:"server"`
	Op          string  `json:"op"`
	SizeBytes   int     `json:"size_bytes"`
	Conns       int     `json:"conns"`
	Ops         int     `json:"ops"`
	Bytes       int64   `json:"bytes"`
	ElapsedSec  float64 `json:"elapsed_seconds"`
	MBps        float64 `json:"mb_per_second"`
	P50Micros   float64 `json:"p50_microseconds"`
	P99Micros   float64 `json:"p99_microseconds"`
	ExportBytes uint64  `json:"export_bytes"`
}

// benchFlags is export bench's flag set: the global flags but --server,
// which names the export server here (the Redfish service is reached only
// to look the address up when --server is not given).
func (a *app) benchFlags(synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("poolctl export bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		w := fs.Output() // stdout for a help request, else io.Discard (see app.flags)
		fmt.Fprintf(w, "usage: poolctl [global flags] export bench %s\n", synopsis)
		printFlags(w, fs, func(name string) bool { return name == "server" || !isGlobal(name) })
		fmt.Fprintln(w, "global flags: see poolctl -h (--server must come before the command here)")
	}
	globals := flag.NewFlagSet("", flag.ContinueOnError)
	a.g.register(globals)
	globals.VisitAll(func(f *flag.Flag) {
		if f.Name != "server" {
			fs.Var(f.Value, f.Name, f.Usage)
		}
	})
	return fs
}

func exportBench(ctx context.Context, a *app, args []string) error {
	fs := a.benchFlags("--export ID --token T [--server ADDR] [--size 1MiB] [--duration 5s] [--conns N] [--op read|write]")
	export := fs.String("export", "", "the export's `Id` (or its Connection URI)")
	token := fs.String("token", "", "the export's `token` (visible in the process list: prefer --token-file)")
	tokenFile := fs.String("token-file", "", "read the token from the first line of `file`")
	server := fs.String("server", "", "the export server's `host:port` (default: the address the box's RDMA fabric names)")
	sz := bytesize.Value(1 << 20)
	fs.Var(&sz, "size", "bytes per operation")
	duration := fs.Duration("duration", 5*time.Second, "how long to measure")
	conns := fs.Int("conns", 0, "connections to stripe large transfers over (default: min(4, CPUs))")
	op := fs.String("op", "read", "operation: read, or write (overwrites the export's bytes)")
	poll := fs.Duration("poll", rclient.DefaultPoll, "how long a wait for a response polls the socket before it sleeps (0: sleeps at once; at most 1ms)")
	if _, err := parse(fs, args, 0, 0); err != nil {
		return err
	}
	var kind rclient.OpKind
	switch *op {
	case "read":
		kind = rclient.OpRead
	case "write":
		kind = rclient.OpWrite
	default:
		return usagef("export bench: --op must be read or write")
	}
	switch {
	case *export == "":
		return usagef("export bench: --export is required")
	case *token != "" && *tokenFile != "":
		return usagef("export bench: give --token or --token-file, not both")
	case *token == "" && *tokenFile == "":
		return usagef("export bench: --token or --token-file is required")
	case sz == 0 || uint64(sz) > 1<<30:
		return usagef("export bench: --size must be between 1 byte and 1 GiB")
	case *duration <= 0:
		return usagef("export bench: --duration must be positive")
	case *conns < 0:
		return usagef("export bench: --conns must not be negative")
	case *poll < 0 || *poll > rclient.MaxPoll:
		return usagef("export bench: --poll must be between 0 and %v", rclient.MaxPoll)
	}
	if *poll == 0 {
		*poll = -1 // the client's "never"
	}
	id := rdma.ExportID(lastSegment(*export))
	if !id.Valid() {
		return usagef("export bench: %q is not an export Id", *export)
	}
	secret := *token
	if *tokenFile != "" {
		s, err := readTokenFile(*tokenFile)
		if err != nil {
			return err
		}
		secret = s
	}
	tok, err := rdma.ParseToken(strings.TrimSpace(secret))
	if err != nil {
		return usagef("export bench: the token is not an export token")
	}
	addr := *server
	if addr == "" {
		lctx, cancel := a.deadline(ctx, false)
		defer cancel()
		c, err := a.client()
		if err != nil {
			return fmt.Errorf("%w (or give the export server with --server)", err)
		}
		if addr, err = a.exportServer(lctx, c); err != nil {
			return err
		}
		if addr == "" {
			return fmt.Errorf("the box's export server is not listening (cxlpoold --export-listen)")
		}
	}
	addr = strings.TrimPrefix(addr, "tcp://")
	cl, err := rclient.Dial(ctx, rclient.Config{Addr: addr, Export: id, Token: tok, Conns: *conns, Poll: *poll})
	if err != nil {
		if errors.Is(err, rdma.ErrDenied) {
			return fmt.Errorf("export %s at %s: refused (unknown export, wrong token, or revoked)", id, addr)
		}
		return fmt.Errorf("export %s at %s: %w", id, addr, err)
	}
	defer cl.Close()
	if uint64(sz) > cl.Size() {
		return usagef("export bench: --size %s is larger than the %s export", size(uint64(sz)), size(cl.Size()))
	}
	// Step through as much of the export as a few operations cover, so
	// reads do not all hit the same cache lines, without leaving it.
	span := min(cl.Size()/uint64(sz)*uint64(sz), 64*uint64(sz))
	r, err := cl.Bench(ctx, rclient.BenchConfig{Kind: kind, Size: int(sz), Span: span, Duration: *duration})
	if err != nil {
		return fmt.Errorf("export %s at %s: %w", id, addr, err)
	}
	out := benchOut{Export: string(id), Server: addr, Op: *op, SizeBytes: int(sz), Conns: *conns, Ops: r.Ops, Bytes: r.Bytes,
		ElapsedSec: r.Elapsed.Seconds(), MBps: r.MBps(), P50Micros: float64(r.P50) / 1e3, P99Micros: float64(r.P99) / 1e3,
		ExportBytes: cl.Size()}
	if a.g.json {
		return a.printJSON(out)
	}
	fmt.Fprintf(a.stdout, "%s of %s on export %s at %s (%s)\n", strings.ToUpper(*op), size(uint64(sz)), id, addr, size(cl.Size()))
	fmt.Fprintf(a.stdout, "operations  %d in %s\n", r.Ops, r.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(a.stdout, "throughput  %.1f MB/s\n", r.MBps())
	fmt.Fprintf(a.stdout, "latency     p50 %s, p99 %s\n", r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond))
	return nil
}

// readTokenFile reads a token from the first line of a file.
func readTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(line), nil
}
