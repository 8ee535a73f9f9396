package appliance

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"cxlpool/kv"
	"cxlpool/kv/evict"
)

// KVDir is the KV index's directory inside the data directory.
const KVDir = "kv"

// kvHeat is the CHMU's heat for the KV store's eviction: the telemetry
// pipeline starts after the index opens (and not at all on a device
// without a CHMU, where eviction is then plain recency).
type kvHeat struct{ t atomic.Pointer[Telemetry] }

func (h *kvHeat) HeatOf(dpa, length uint64) float64 {
	if t := h.t.Load(); t != nil {
		return t.HeatOf(dpa, length)
	}
	return 0
}

// openKV opens the KV-cache store's index over the capacity Manager;
// each namespace evicts by recency combined with the CHMU's hot-page
// counts for its blocks' device addresses (kv/evict.Hot).
func (a *Appliance) openKV() error {
	newEvictor := func(string) kv.Evictor {
		return kv.Adapt[evict.Range](evict.NewHot(&a.kvHeat, a.cfg.Clock))
	}
	var exporter kv.Exporter
	if a.Exports != nil { // a nil *rdma.Service must stay a nil interface
		exporter = a.Exports
	}
	svc, err := kv.NewService(kv.ServiceConfig{Capacity: a.Manager, Logger: a.cfg.Logger.With("component", "kv"), Exporter: exporter,
		Index: kv.IndexConfig{Dir: filepath.Join(a.cfg.DataDir, KVDir), Clock: a.cfg.Clock, NewEvictor: newEvictor}})
	if err != nil {
		return fmt.Errorf("appliance: %w", err)
	}
	a.KV = svc
	a.closers = append(a.closers, svc.Close)
	return nil
}

// startKV frees namespace chunks a crash left outside the index, starts
// the lease reaper and the protocol servers (KVListen, KVSocket).
func (a *Appliance) startKV(ctx context.Context) error {
	if a.Telemetry != nil {
		a.kvHeat.t.Store(a.Telemetry)
	}
	if err := a.KV.Sweep(ctx); err != nil {
		a.cfg.Logger.Warn("kv: sweep of stray namespace chunks", "err", err)
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); a.KV.RunReaper(rctx, time.Second) }()
	a.closers = append(a.closers, func() error { cancel(); <-done; return nil })
	if a.cfg.KVListen == "" && a.cfg.KVSocket == "" {
		return nil
	}
	srv, err := kv.NewServer(kv.ServerConfig{Index: a.KV.Ix, Logger: a.cfg.Logger.With("component", "kv-server")})
	if err != nil {
		return fmt.Errorf("appliance: kv server: %w", err)
	}
	var lns []net.Listener
	if a.cfg.KVListen != "" {
		ln, err := net.Listen("tcp", a.cfg.KVListen)
		if err != nil {
			return fmt.Errorf("appliance: kv server: %w", err)
		}
		a.KVAddr = ln.Addr()
		lns = append(lns, ln)
	}
	if p := a.cfg.KVSocket; p != "" {
		_ = os.Remove(p) // a socket left by a killed daemon
		ln, err := net.Listen("unix", p)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return fmt.Errorf("appliance: kv server: %w", err)
		}
		// Hosts' clients run as other users; the token is the access check.
		_ = os.Chmod(p, 0o666)
		lns = append(lns, ln)
	}
	for _, ln := range lns {
		go srv.Serve(ln)
	}
	a.closers = append(a.closers, srv.Close)
	return nil
}
