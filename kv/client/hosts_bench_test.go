package client_test

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cxlpool/dcd"
	"cxlpool/fabric/cci"
	"cxlpool/host"
	"cxlpool/internal/redistest"
	"cxlpool/kv"
	"cxlpool/kv/client"
	"cxlpool/kv/wire"
)

// The 8-host benchmark runs every host as its own process: this test
// binary re-executed (TestHostProcess), told what to do by these
// variables and, round by round, by lines on its stdin.
const (
	envHost      = "CXLPOOL_KV_BENCH_HOST" // "ld hosts blocks size"
	envHostAddr  = "CXLPOOL_KV_BENCH_ADDR"
	envHostTok   = "CXLPOOL_KV_BENCH_TOKEN"
	envHostTag   = "CXLPOOL_KV_BENCH_TAG"
	envHostRedis = "CXLPOOL_KV_BENCH_REDIS"
)

// BenchmarkHosts: 8 host processes on one shared namespace. Each process
// maps the namespace's chunk from one shared memory file (memfd, passed
// to every process: what the virtual box's hosts map, and what a DAX
// device is on a real host) and talks to the index (in this process,
// with its write-ahead log and fsync, over loopback TCP) as a host on the
// box's heads does. A round, for every contender, is all 8 hosts at once
// moving 16 MiB each (64 × 256 KiB or 8 × 2 MiB blocks), timed by the
// wall clock from the order to the last host's answer:
//
//   - put: PutBatch of the host's new keys (PUT of all, the copies into
//     the mapping, COMMIT of all: two round trips, the second durable);
//   - get: GetBatchInto of the keys the next host put (GET with PIN, the
//     copies out of the mapping into the process's buffers, the UNPIN
//     posted: one round trip waited for);
//   - memcpy: the same processes copying the same bytes into and out of
//     the same kind of shared memory (a second memfd, at the same sizes);
//   - redis: SET and GET of the same blocks, pipelined, one connection a
//     host, to one redis-server on loopback (skipped if not installed).
//
// The contenders take turns, who goes first rotating per round, so that a
// change of load falls on all alike. Reported: MB/s of each and the
// ratios (goal: ≥ 0.5 of memcpy, ≥ 3 of Redis).
func BenchmarkHosts(b *testing.B) {
	for _, size := range []int{256 << 10, 2 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) { benchHosts(b, 8, size, 16<<20/size) })
	}
}

// memfd is a shared memory file of size bytes.
func memfd(tb testing.TB, name string, size int) *os.File {
	fd, err := unix.MemfdCreate(name, 0)
	if err != nil {
		tb.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), name)
	tb.Cleanup(func() { f.Close() })
	if err := f.Truncate(int64(size)); err != nil {
		tb.Fatal(err)
	}
	// Write every page once: a fresh page's first write costs more still
	// (it is allocated and zeroed), and a DAX device's memory is there
	// from the start. The pool and the memcpy baseline's memory alike.
	b, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		tb.Fatal(err)
	}
	for i := 0; i < len(b); i += 4096 {
		b[i] = 0
	}
	if err := unix.Munmap(b); err != nil {
		tb.Fatal(err)
	}
	return f
}

type hostProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func (p *hostProc) send(cmd string) error {
	_, err := io.WriteString(p.in, cmd+"\n")
	return err
}

func (p *hostProc) wait() error {
	line, err := p.out.ReadString('\n')
	if err != nil {
		return fmt.Errorf("host process: %w", err)
	}
	if line = strings.TrimSpace(line); line != "ok" {
		return errors.New(line)
	}
	return nil
}

func benchHosts(b *testing.B, hosts, size, blocks int) {
	per := blocks * size
	chunk := 2 * hosts * per // one round's blocks live at a time, twice over
	ix, err := kv.OpenIndex(kv.IndexConfig{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ix.Close() })
	tag := cci.Tag{0xbe, 0x7c, 8}
	tok := [wire.TokenSize]byte{0x42}
	if err := ix.CreateNamespace("hosts", uint64(chunk), uint64(chunk)); err != nil {
		b.Fatal(err)
	}
	if err := ix.AddChunk("hosts", kv.ChunkInfo{ID: 1, Tag: tag, Size: uint64(chunk)}); err != nil {
		b.Fatal(err)
	}
	for h := range hosts {
		if err := ix.SetMember("hosts", dcd.HostID(h), tok); err != nil {
			b.Fatal(err)
		}
	}
	srv, err := kv.NewServer(kv.ServerConfig{Index: ix})
	if err != nil {
		b.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(l)
	b.Cleanup(func() { srv.Close() })
	redisAddr, err := redistest.Start(b)
	if err != nil {
		b.Logf("skipping the Redis comparison: %v", err)
	}
	pool := memfd(b, "kv-pool", chunk)
	scratch := memfd(b, "memcpy-baseline", hosts*per)

	procs := make([]*hostProc, hosts)
	for h := range hosts {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHostProcess$", "-test.bench=^$")
		cmd.Env = append(os.Environ(),
			envHost+"="+fmt.Sprintf("%d %d %d %d", h, hosts, blocks, size),
			envHostAddr+"="+l.Addr().String(), envHostTok+"="+hex.EncodeToString(tok[:]),
			envHostTag+"="+tag.String(), envHostRedis+"="+redisAddr)
		cmd.ExtraFiles = []*os.File{pool, scratch} // fds 3 and 4
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		procs[h] = &hostProc{cmd: cmd, in: in, out: bufio.NewReader(out)}
		b.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	}
	// all runs one order on every host at once and returns the wall time
	// to the last answer.
	all := func(order string) time.Duration {
		t0 := time.Now()
		for _, p := range procs {
			if err := p.send(order); err != nil {
				b.Fatal(err)
			}
		}
		for h, p := range procs {
			if err := p.wait(); err != nil {
				b.Fatalf("host %d, %s: %v", h, order, err)
			}
		}
		return time.Since(t0)
	}
	all("ready") // every host dialled, mapped and filled its values
	type contender struct {
		name  string
		order string
		d     time.Duration
	}
	put, mput, rset := &contender{name: "put", order: "put"}, &contender{name: "memcpy-in", order: "memput"}, &contender{name: "redis-set", order: "rset"}
	get, mget, rget := &contender{name: "get", order: "get"}, &contender{name: "memcpy-out", order: "memget"}, &contender{name: "redis-get", order: "rget"}
	puts, gets := []*contender{put, mput}, []*contender{get, mget}
	if redisAddr != "" {
		puts, gets = append(puts, rset), append(gets, rget)
	}
	// Round 0 is untimed (first touch of every page, the index's first
	// log records) and checks the bytes every host got.
	round := func(r int, timed bool) {
		for j := range puts {
			c := puts[(r+j)%len(puts)]
			if d := all(fmt.Sprintf("%s %d", c.order, r)); timed {
				c.d += d
			}
		}
		for j := range gets {
			c := gets[(r+j)%len(gets)]
			if d := all(fmt.Sprintf("%s %d", c.order, r)); timed {
				c.d += d
			}
		}
		if !timed {
			all(fmt.Sprintf("verify %d", r))
		}
		all(fmt.Sprintf("del %d", r))
	}
	round(0, false)
	b.ResetTimer()
	for r := range b.N {
		round(r+1, true)
	}
	b.StopTimer()
	for _, p := range procs {
		_ = p.send("quit")
	}
	mb := float64(b.N) * float64(hosts*per) / 1e6
	rate := func(c *contender) float64 { return mb / c.d.Seconds() }
	b.ReportMetric(rate(put), "put-MB/s")
	b.ReportMetric(rate(get), "get-MB/s")
	b.ReportMetric(rate(mput), "memcpy-in-MB/s")
	b.ReportMetric(rate(mget), "memcpy-out-MB/s")
	b.ReportMetric(rate(put)/rate(mput), "put/memcpy")
	b.ReportMetric(rate(get)/rate(mget), "get/memcpy")
	if redisAddr != "" {
		b.ReportMetric(rate(rset), "redis-set-MB/s")
		b.ReportMetric(rate(rget), "redis-get-MB/s")
		b.ReportMetric(rate(put)/rate(rset), "put/redis")
		b.ReportMetric(rate(get)/rate(rget), "get/redis")
	}
}

// pageSink takes mapShared's page sums.
var pageSink atomic.Uint32

// fdMapper maps the shared memory file at fd 3 as the one chunk's
// capacity.
type fdMapper struct {
	tag  string
	f    *os.File
	size int
}

type fdMapping struct{ b []byte }

func (m fdMapping) Bytes() []byte { return m.b }
func (m fdMapping) Close() error  { return unix.Munmap(m.b) }

func (m fdMapper) Map(_ context.Context, tag string) (host.Mapping, error) {
	if tag != m.tag {
		return nil, fmt.Errorf("no chunk %s here", tag)
	}
	b, err := mapShared(m.f, 0, m.size)
	if err != nil {
		return nil, err
	}
	return fdMapping{b}, nil
}

// mapShared maps size bytes of f at off, shared, and touches every page
// before it is used: on this virtual machine a process's first access to
// a page costs tens of µs, MADV_POPULATE_WRITE or not, and a serving
// process has long touched its DAX mapping (with large pages, on a real
// host); the memcpy baseline's mappings are made alike.
func mapShared(f *os.File, off, size int) ([]byte, error) {
	b, err := unix.Mmap(int(f.Fd()), int64(off), size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	var sum byte
	for i := 0; i < len(b); i += 4096 {
		sum += b[i]
	}
	pageSink.Store(uint32(sum)) // keeps the loop from being optimised away
	return b, nil
}

// blockByte is byte k of block i of host h: every host's blocks differ.
func blockByte(h, i, k int) byte { return byte(h*131 + i*7 + k) }

// TestHostProcess is one host of BenchmarkHosts (it does nothing unless
// the benchmark started it).
func TestHostProcess(t *testing.T) {
	spec := os.Getenv(envHost)
	if spec == "" {
		t.Skip("a host process of BenchmarkHosts")
	}
	if err := hostProcess(spec, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stdout, "error:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func hostProcess(spec string, stdin io.Reader, stdout io.Writer) error {
	var ld, hosts, blocks, size int
	if _, err := fmt.Sscan(spec, &ld, &hosts, &blocks, &size); err != nil {
		return fmt.Errorf("spec %q: %w", spec, err)
	}
	var tok [wire.TokenSize]byte
	if _, err := hex.Decode(tok[:], []byte(os.Getenv(envHostTok))); err != nil {
		return err
	}
	per := blocks * size
	pool, scratch := os.NewFile(3, "pool"), os.NewFile(4, "scratch")
	st, err := pool.Stat()
	if err != nil {
		return err
	}
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Config{Addr: os.Getenv(envHostAddr), Namespace: "hosts", Host: uint16(ld), Token: tok,
		Lease:  5 * time.Minute, // a loaded machine's setup outlasts the default's idle limit
		Mapper: fdMapper{tag: os.Getenv(envHostTag), f: pool, size: int(st.Size())}})
	if err != nil {
		return err
	}
	defer c.Close()
	if dir := os.Getenv("CXLPOOL_KV_BENCH_PROFILE"); dir != "" {
		f, err := os.Create(fmt.Sprintf("%s/host%d.pprof", dir, ld))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	mine, err := mapShared(scratch, ld*per, per)
	if err != nil {
		return err
	}
	next := (ld + 1) % hosts
	theirs, err := mapShared(scratch, next*per, per)
	if err != nil {
		return err
	}
	var rc *redistest.Conn
	if addr := os.Getenv(envHostRedis); addr != "" {
		if rc, err = redistest.Dial(addr); err != nil {
			return err
		}
		defer rc.Close()
	}
	vals, dsts := make([][]byte, blocks), make([][]byte, blocks)
	for i := range blocks {
		vals[i], dsts[i] = make([]byte, size), make([]byte, size)
		for k := range vals[i] {
			vals[i][k] = blockByte(ld, i, k)
		}
		copy(dsts[i], vals[i]) // first touch, outside the timing
	}
	keys := func(h, r int) [][]byte {
		ks := make([][]byte, blocks)
		for i := range ks {
			ks[i] = fmt.Appendf(nil, "h%d-r%d-b%d", h, r, i)
		}
		return ks
	}
	redisKeys := func(h int) [][]byte {
		ks := make([][]byte, blocks)
		for i := range ks {
			ks[i] = fmt.Appendf(nil, "h%d-b%d", h, i)
		}
		return ks
	}
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		r := 0
		if len(f) > 1 {
			r, _ = strconv.Atoi(f[1])
		}
		err := func() error {
			switch f[0] {
			case "ready": // the chunk is mapped by round 0's put, untimed
				return nil
			case "quit":
				return io.EOF
			case "put":
				errs, err := c.PutBatch(ctx, keys(ld, r), vals)
				return errors.Join(append(errs, err)...)
			case "get":
				lens, errs, err := c.GetBatchInto(ctx, keys(next, r), dsts)
				if err := errors.Join(append(errs, err)...); err != nil {
					return err
				}
				if i := slices.IndexFunc(lens, func(n int) bool { return n != size }); i >= 0 {
					return fmt.Errorf("get: block %d is %d bytes, want %d", i, lens[i], size)
				}
				return nil
			case "memput":
				for i, v := range vals {
					copy(mine[i*size:], v)
				}
				return nil
			case "memget":
				for i, d := range dsts {
					copy(d, theirs[i*size:(i+1)*size])
				}
				return nil
			case "rset":
				return rc.SetMany(redisKeys(ld), vals)
			case "rget":
				return rc.GetMany(redisKeys(next), dsts)
			case "verify":
				lens, errs, err := c.GetBatchInto(ctx, keys(next, r), dsts)
				if err := errors.Join(append(errs, err)...); err != nil {
					return err
				}
				for i, d := range dsts {
					for k := range lens[i] {
						if d[k] != blockByte(next, i, k) {
							return fmt.Errorf("verify: block %d of host %d: byte %d is %#x, want %#x", i, next, k, d[k], blockByte(next, i, k))
						}
					}
				}
				return nil
			case "del":
				errs, err := c.Delete(ctx, keys(ld, r))
				return errors.Join(append(errs, err)...)
			}
			return fmt.Errorf("unknown order %q", f[0])
		}()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := io.WriteString(stdout, "ok\n"); err != nil {
			return err
		}
	}
	return sc.Err()
}
