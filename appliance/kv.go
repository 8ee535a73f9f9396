package appliance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"cxlpool/fleet"
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
	a.kvEv.log = a.cfg.Logger.With("component", "kv-events")
	var exporter kv.Exporter
	if a.Exports != nil { // a nil *rdma.Service must stay a nil interface
		exporter = a.Exports
	}
	svc, err := kv.NewService(kv.ServiceConfig{Capacity: a.Manager, Logger: a.cfg.Logger.With("component", "kv"), Exporter: exporter,
		Index: kv.IndexConfig{Dir: filepath.Join(a.cfg.DataDir, KVDir), Clock: a.cfg.Clock, NewEvictor: newEvictor,
			Events: a.kvEv.sink, ResyncLater: true}})
	if err != nil {
		return fmt.Errorf("appliance: %w", err)
	}
	a.KV = svc
	a.closers = append(a.closers, svc.Close)
	return nil
}

// startKV frees namespace chunks a crash left outside the index, forgets
// those whose capacity is lost (with their blocks), starts
// the lease reaper and the protocol servers (KVListen, KVSocket).
func (a *Appliance) startKV(ctx context.Context) error {
	if a.Telemetry != nil {
		a.kvHeat.t.Store(a.Telemetry)
	}
	if err := a.KV.Sweep(ctx); err != nil {
		a.cfg.Logger.Warn("kv: sweep of stray namespace chunks", "err", err)
	}
	// Reconcile has marked lost what the device no longer holds (all of
	// it after a restart on the in-process virtual box, whose memory died
	// with the daemon): no client may be told those blocks' locations.
	if err := a.KV.DropLost(ctx); err != nil {
		a.cfg.Logger.Warn("kv: dropping namespace chunks whose capacity is lost", "err", err)
	}
	a.KV.Ix.Resync() // what each namespace holds now (openKV deferred it)
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
	a.kvSrv = srv
	a.closers = append(a.closers, srv.Close)
	return nil
}

// kvQuiesceWait bounds Close's QuiesceKV.
const kvQuiesceWait = 5 * time.Second

// QuiesceKV is the first step of a clean stop: the KV protocol servers
// stop (no new change; those in flight finish), then every block event
// of the changes before is delivered: published on the fleet plane and
// taken by each subscriber (the API's feed has published it to SSE once
// it takes the marker after it). The daemon calls it before the API
// stops its streams; Close calls it too. It returns ctx's error if the
// plane or a subscriber does not keep up.
func (a *Appliance) QuiesceKV(ctx context.Context) error {
	if a.kvSrv != nil {
		_ = a.kvSrv.Close()
	}
	if err := a.KV.Ix.FlushEvents(ctx); err != nil {
		return err
	}
	return a.kvEv.flushSubscribers(ctx)
}

// flushSubscribers sends each subscriber a marker (an Event of Kind 0,
// which subscribers skip) behind what it was given and waits until it has
// taken it: a subscriber that handles its events one at a time has then
// finished every earlier one.
func (k *kvEvents) flushSubscribers(ctx context.Context) error {
	k.mu.Lock()
	subs := make([]chan kv.Event, 0, len(k.subs))
	for ch := range k.subs {
		subs = append(subs, ch)
	}
	k.mu.Unlock()
	for _, ch := range subs {
		select {
		case ch <- kv.Event{}:
		case <-ctx.Done():
			return fmt.Errorf("appliance: a kv event subscriber does not take its events: %w", ctx.Err())
		}
	}
	for _, ch := range subs {
		for len(ch) > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("appliance: a kv event subscriber does not take its events: %w", ctx.Err())
			case <-time.After(time.Millisecond): // the subscriber's pace, bounded by ctx
			}
		}
	}
	return nil
}

// kvEvents fans the KV index's block events out (on the index's dispatch
// goroutine, in order): to the fleet plane's publisher once the plane is
// up, and to every subscriber (the API's event service: SSE). A
// subscriber that does not keep up loses events; a publish that fails is
// logged and dropped (the router resynchronises from the Cleared and
// Stored events the box sends when it joins the plane).
type kvEvents struct {
	log  *slog.Logger
	pub  atomic.Pointer[fleetKV]
	mu   sync.Mutex
	subs map[chan kv.Event]struct{}
}

type fleetKV struct{ p fleet.KVEventPublisher }

// kvPublishTimeout bounds one event's publish: a plane that does not
// answer holds the queue up this long per event, never the index.
const kvPublishTimeout = 5 * time.Second

func (k *kvEvents) sink(ctx context.Context, e kv.Event) {
	if f := k.pub.Load(); f != nil {
		pctx, cancel := context.WithTimeout(ctx, kvPublishTimeout)
		err := publishKV(pctx, f.p, e)
		cancel()
		if err != nil && ctx.Err() == nil {
			k.log.Warn("kv event not published on the fleet plane", "namespace", e.Namespace, "kind", e.Kind, "err", err)
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for ch := range k.subs {
		select {
		case ch <- e:
		default:
		}
	}
}

// publishKV is one kv.Event as the fleet's KV-event calls. The box knows
// a block by its key and what its client told of its sequence (kv.Seq):
// the block hash is kv.KeyHash(key), parent_hash the parent the client
// gave the event's first block (null if none: a sequence's first, or not
// told; each Stored event is one chain), and the tokens hash the block
// hash again (clients tell the box how many tokens a block holds, not
// which; Dynamo's event has no token count, the SSE form carries it).
func publishKV(ctx context.Context, p fleet.KVEventPublisher, e kv.Event) error {
	switch e.Kind {
	case kv.EventStored:
		bs := make([]fleet.StoredBlock, len(e.Blocks))
		for i, b := range e.Blocks {
			bs[i] = fleet.StoredBlock{BlockHash: b.Hash, TokensHash: b.Hash}
		}
		return p.BlockStored(ctx, e.Namespace, e.Parent, bs)
	case kv.EventRemoved:
		hs := make([]uint64, len(e.Blocks))
		for i, b := range e.Blocks {
			hs[i] = b.Hash
		}
		return p.BlockRemoved(ctx, e.Namespace, hs)
	case kv.EventCleared:
		return p.AllBlocksCleared(ctx, e.Namespace)
	}
	return errors.New("appliance: unknown kv event")
}

// setPublisher starts (or, nil, stops) publishing on the fleet plane.
func (k *kvEvents) setPublisher(p fleet.KVEventPublisher) {
	if p == nil {
		k.pub.Store(nil)
		return
	}
	k.pub.Store(&fleetKV{p: p})
}

// SubscribeKVEvents delivers the KV store's block events (stored,
// removed, cleared) until cancel; a full channel loses events. An Event
// of Kind 0 is QuiesceKV's flush marker: skip it (handle events one at a
// time, so that taking it means the ones before are done).
func (a *Appliance) SubscribeKVEvents(buf int) (<-chan kv.Event, func()) {
	ch := make(chan kv.Event, buf)
	k := &a.kvEv
	k.mu.Lock()
	if k.subs == nil {
		k.subs = map[chan kv.Event]struct{}{}
	}
	k.subs[ch] = struct{}{}
	k.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			k.mu.Lock()
			delete(k.subs, ch)
			k.mu.Unlock()
		})
	}
}
