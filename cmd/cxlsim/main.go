// Command cxlsim runs the virtual memory box: a multi-headed Dynamic
// Capacity Device with simulated hosts, answering the Fabric Manager over a
// DSP0253-framed MCTP byte stream on a TCP or Unix socket.
//
//	cxlsim --listen tcp://127.0.0.1:0 --host-policy 3=reject,5=part:1
//	cxlsim --listen tcp://127.0.0.1:0 --sanitize-on-release none --sor-configurable 1
//	cxlsim --listen unix:/run/cxlsim.sock --external-host 3=unix:/run/cxlsim-host3.sock
//
// --external-host hands a head to a host process outside the box (the
// cxlhost agent with its virtual-box backend): the head's host mailbox and
// the memory file are served on that socket (sim/external.go) and the
// head's built-in policy stays silent; the other heads keep theirs. Any
// of the 8 heads may be handed out (repeat the flag or separate with
// commas); then start one agent per such head, signed in as the HostUser
// account bound to that head's System (HostN for head N):
//
//	cxlsim --listen unix:/run/cxlsim.sock --external-host 0=unix:/run/h0.sock,7=unix:/run/h7.sock
//	cxlpoold --device unix:/run/cxlsim.sock ...
//	CXLHOST_PASSWORD=... cxlhost --box https://BOX:8443 --user h0 --device vbox:unix:/run/h0.sock --listen /run/cxlhost0.sock
//	CXLHOST_PASSWORD=... cxlhost --box https://BOX:8443 --user h7 --device vbox:unix:/run/h7.sock --listen /run/cxlhost7.sock
//
// The agent reports each tag's state to the box; `poolctl host --agent
// /run/cxlhost0.sock attach 1GiB` then runs against head 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"cxlpool/fabric/mctp"
	"cxlpool/fabric/serial"
	"cxlpool/internal/bytesize"
	"cxlpool/sim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "cxlsim:", err)
		os.Exit(1)
	}
}

// run parses args, starts the box and serves until ctx ends. It prints the
// address it listens on (with the real port when port 0 was asked for).
func run(ctx context.Context, args []string, stdout io.Writer) error {
	def := sim.DefaultConfig()
	fs := flag.NewFlagSet("cxlsim", flag.ContinueOnError)
	fs.SetOutput(stdout)
	listen := fs.String("listen", "", "address to serve: tcp://HOST:PORT or unix:PATH (required)")
	heads := fs.Int("heads", def.Heads, "number of host heads (LDs)")
	capacity := bytesize.Value(def.Capacity)
	fs.Var(&capacity, "capacity", "dynamic capacity, e.g. 1TiB, 64GiB or bytes")
	blockSize := bytesize.Value(def.BlockSize)
	fs.Var(&blockSize, "block-size", "initial DC block size, e.g. 256MiB")
	regions := fs.Int("regions", def.Regions, "number of DC regions (region 0 not sharable, the others sharable)")
	serialNo := fs.String("serial", fmt.Sprintf("%#x", def.Serial), "device serial number")
	eid := fs.Uint("eid", uint(def.EID), "MCTP endpoint ID of the box")
	policies := policyValue{}
	fs.Var(&policies, "host-policy", "host answer policy LD=MODE[:N][@DELAY], MODE accept|part|reject|never; repeatable or comma separated")
	sor := regionSet{all: true}
	fs.Var(&sor, "sanitize-on-release", "regions whose Sanitize on Release starts on: all, none or a list such as 0,2")
	sorConf := regionSet{all: true}
	fs.Var(&sorConf, "sor-configurable", "regions whose Sanitize on Release the FM may change (5602h): all, none or a list")
	external := sim.ExternalHosts{}
	fs.Var(&external, "external-host", "hand head LD to an external host process: LD=unix:PATH; repeatable or comma separated")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *listen == "" {
		return errors.New("--listen is required")
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	sn, err := strconv.ParseUint(*serialNo, 0, 64)
	if err != nil {
		return fmt.Errorf("--serial: %w", err)
	}
	if *eid > 0xfe {
		return fmt.Errorf("--eid %d out of range", *eid)
	}

	cfg := def
	cfg.Heads = *heads
	cfg.Capacity = uint64(capacity)
	cfg.BlockSize = uint64(blockSize)
	cfg.Regions = *regions
	if cfg.SanitizeOnRelease, err = sor.perRegion(*regions); err != nil {
		return fmt.Errorf("--sanitize-on-release: %w", err)
	}
	if cfg.SoRConfigurable, err = sorConf.perRegion(*regions); err != nil {
		return fmt.Errorf("--sor-configurable: %w", err)
	}
	cfg.Serial = sn
	cfg.EID = mctp.EID(*eid)
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	box, err := sim.New(cfg)
	if err != nil {
		return err
	}
	defer box.Close()
	for ld, p := range policies {
		h := box.Host(ld)
		if h == nil {
			return fmt.Errorf("--host-policy: no host %d (heads: %d)", ld, cfg.Heads)
		}
		h.SetPolicy(p)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wait, err := box.ServeExternalHosts(ctx, external)
	if err != nil {
		return fmt.Errorf("--external-host: %w", err)
	}
	defer wait() // after cancel (deferred later, runs first)
	defer cancel()
	for _, ld := range slices.Sorted(maps.Keys(external)) {
		fmt.Fprintf(stdout, "cxlsim head %d external host on %s\n", ld, external[ld])
	}
	l, err := serial.Listen(*listen)
	if err != nil {
		return err
	}
	addr := l.Addr()
	if addr.Network() == "unix" {
		fmt.Fprintf(stdout, "cxlsim listening on unix:%s\n", addr)
	} else {
		fmt.Fprintf(stdout, "cxlsim listening on %s://%s\n", addr.Network(), addr)
	}
	cfg.Logger.Info("box ready", "heads", cfg.Heads, "capacity", cfg.Capacity, "regions", cfg.Regions, "eid", cfg.EID)
	return box.ServeListener(ctx, l)
}

// policyValue collects --host-policy settings by LD.
type policyValue map[int]sim.Policy

func (p policyValue) String() string {
	var parts []string
	for ld, pol := range p {
		parts = append(parts, fmt.Sprintf("%d=%s", ld, pol.Mode))
	}
	return strings.Join(parts, ",")
}

func (p policyValue) Set(v string) error {
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		ld, pol, err := parsePolicy(item)
		if err != nil {
			return err
		}
		p[ld] = pol
	}
	return nil
}

// parsePolicy reads LD=MODE[:N][@DELAY].
func parsePolicy(s string) (int, sim.Policy, error) {
	var pol sim.Policy
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return 0, pol, fmt.Errorf("host policy %q: want LD=MODE", s)
	}
	ld, err := strconv.Atoi(k)
	if err != nil || ld < 0 {
		return 0, pol, fmt.Errorf("host policy %q: bad LD %q", s, k)
	}
	if m, d, ok := strings.Cut(v, "@"); ok {
		if pol.Delay, err = time.ParseDuration(d); err != nil || pol.Delay < 0 {
			return 0, pol, fmt.Errorf("host policy %q: bad delay %q", s, d)
		}
		v = m
	}
	mode, arg, hasArg := strings.Cut(v, ":")
	switch mode {
	case "accept", "all":
		pol.Mode = sim.AcceptAll
	case "part":
		pol.Mode = sim.AcceptPart
		pol.AcceptN = 1
		if hasArg {
			if pol.AcceptN, err = strconv.Atoi(arg); err != nil || pol.AcceptN < 1 {
				return 0, pol, fmt.Errorf("host policy %q: part needs N >= 1", s)
			}
		}
		hasArg = false
	case "reject":
		pol.Mode = sim.Reject
	case "never":
		pol.Mode = sim.NeverAnswer
	default:
		return 0, pol, fmt.Errorf("host policy %q: unknown mode %q (accept, part, reject, never)", s, mode)
	}
	if hasArg {
		return 0, pol, fmt.Errorf("host policy %q: mode %s takes no argument", s, mode)
	}
	return ld, pol, nil
}

// regionSet is a set of DC regions on the command line: all, none, or a
// comma-separated list of region indices.
type regionSet struct {
	all     bool
	regions []int
}

func (r *regionSet) String() string {
	if r.all {
		return "all"
	}
	if len(r.regions) == 0 {
		return "none"
	}
	parts := make([]string, len(r.regions))
	for i, n := range r.regions {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

func (r *regionSet) Set(v string) error {
	*r = regionSet{}
	switch v = strings.TrimSpace(v); v {
	case "all":
		r.all = true
		return nil
	case "none", "":
		return nil
	}
	for _, item := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(item))
		if err != nil || n < 0 {
			return fmt.Errorf("region %q: want all, none or region numbers such as 0,2", item)
		}
		r.regions = append(r.regions, n)
	}
	return nil
}

// perRegion is the set as sim.Config's per-region flags for n regions.
func (r *regionSet) perRegion(n int) ([]bool, error) {
	out := make([]bool, max(n, 0))
	for i := range out {
		out[i] = r.all
	}
	for _, idx := range r.regions {
		if idx >= n {
			return nil, fmt.Errorf("no region %d (regions: %d)", idx, n)
		}
		out[idx] = true
	}
	return out, nil
}
