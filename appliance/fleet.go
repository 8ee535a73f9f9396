package appliance

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cxlpool/fleet"
	fleetnats "cxlpool/fleet/nats"
)

// FleetConfig says how the box joins the fleet plane (fleet, fleet/nats).
type FleetConfig struct {
	// Enabled turns the plane on. With no URLs the daemon runs an
	// embedded NATS server with JetStream in DATA/fleet (loopback only
	// unless Listen says otherwise); with URLs it joins that cluster.
	Enabled bool
	URLs    []string
	// CredsFile and CAFile authenticate to an external cluster
	// (fleet/nats.Config); no anonymous access.
	CredsFile, CAFile string
	// CertFile and KeyFile are the box's client certificate for servers
	// that verify clients.
	CertFile, KeyFile string
	// Listen is the embedded server's client address (default
	// 127.0.0.1:4222); ClusterListen and Routes form a cluster among
	// boxes' embedded servers, authenticated by ClusterSecretFile.
	Listen, ClusterListen string
	Routes                []string
	ClusterSecretFile     string
	// API is the box's Redfish root URL in its record.
	API string
	// TTL is the record's life after the box's last write (default 30 s);
	// the heartbeat rewrites it every TTL/3.
	TTL      time.Duration
	Replicas int
	// RetryMax bounds the backoff between attempts to join (default 30 s).
	RetryMax time.Duration
	// HotnessInterval is how often each KV namespace's hotness summary
	// is published (fleet.KVHotness; default 30 s, negative: never).
	HotnessInterval time.Duration
}

// FleetCredsFile, in the data directory, holds the embedded server's
// credentials (USER:PASSWORD, mode 0600): poolctl fleet --creds reads it.
const FleetCredsFile = "fleet.creds"

// States of the fleet plane (FleetState.State).
const (
	FleetJoining      = "Joining"      // the first attempt is under way
	FleetRetrying     = "Retrying"     // an attempt failed; the next one waits its backoff
	FleetConnected    = "Connected"    // joined and connected to a server
	FleetDisconnected = "Disconnected" // joined, but the connection is down (the client reconnects by itself)
)

// FleetState is the plane's state for people and for the Manager's
// Status: a box that is not in its fleet serves its hosts all the same,
// but says so.
type FleetState struct {
	State    string
	Box      fleet.BoxID
	Servers  string // where the plane is (connected server, or the configured ones)
	Embedded bool   // the box runs the server itself
	// LastError is why the last attempt to join failed (empty once joined).
	LastError string
	Attempts  int
	// Since is when the plane entered State; Next is when the next attempt
	// is due (Retrying only).
	Since, Next time.Time
	// Queued events wait for the stream; Dropped were lost to the queue's
	// bound while the plane was unreachable.
	Queued  int
	Dropped uint64
}

// Fleet is the running plane: the publisher from the start, and the
// connection and the embedded server once the box has joined. Joining
// runs in the background, retrying with backoff, so that a fleet that is
// slow or unreachable (a port another process holds, JetStream still
// electing a leader) never keeps the box from serving its hosts; events
// meanwhile wait in the Service's bounded queue.
type Fleet struct {
	Service *fleet.Service

	log    *slog.Logger
	clock  func() time.Time
	plane  atomic.Pointer[fleetnats.Plane]
	joined chan struct{}

	mu    sync.Mutex
	state FleetState
	emb   *fleetnats.Embedded
}

var _ fleet.Plane = (*Fleet)(nil)

// Plane is the connection once joined; nil before.
func (f *Fleet) Plane() *fleetnats.Plane { return f.plane.Load() }

// Joined is closed once the box has joined the plane.
func (f *Fleet) Joined() <-chan struct{} { return f.joined }

// Embedded is the box's own server once it runs; nil before or when the
// box joins an external cluster.
func (f *Fleet) Embedded() *fleetnats.Embedded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.emb
}

// State is the plane's state now.
func (f *Fleet) State() FleetState {
	f.mu.Lock()
	st := f.state
	f.mu.Unlock()
	if p := f.plane.Load(); p != nil {
		if p.Conn().IsConnected() {
			st.State, st.Servers = FleetConnected, p.Conn().ConnectedUrlRedacted()
		} else {
			st.State = FleetDisconnected
		}
	}
	st.Queued, st.Dropped = f.Service.Backlog()
	return st
}

// PutInventory writes through the plane once joined (fleet.Plane).
func (f *Fleet) PutInventory(ctx context.Context, inv fleet.Inventory) error {
	p := f.plane.Load()
	if p == nil {
		return fleet.ErrNotJoined
	}
	return p.PutInventory(ctx, inv)
}

// Publish publishes through the plane once joined (fleet.Plane).
func (f *Fleet) Publish(ctx context.Context, e fleet.Envelope) (uint64, error) {
	p := f.plane.Load()
	if p == nil {
		return 0, fleet.ErrNotJoined
	}
	return p.Publish(ctx, e)
}

func (f *Fleet) setState(st string, err error, next time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state.State != st {
		f.state.Since = f.clock()
	}
	f.state.State, f.state.Next = st, next
	f.state.LastError = ""
	if err != nil {
		f.state.LastError = err.Error()
	}
}

// fleetRetryMax bounds the backoff between attempts to join.
const fleetRetryMax = 30 * time.Second

// startFleet starts the publisher once the Manager knows the device (the
// box's identity is its serial) and joins the plane in the background.
// Only a configuration that cannot work fails Start (a cluster secret
// file others can read); what may get better by itself (a port that is
// taken, a cluster not up yet) is retried with backoff and shown in
// State.
func (a *Appliance) startFleet(ctx context.Context) error {
	fc := a.cfg.Fleet
	if !fc.Enabled {
		return nil
	}
	log := a.cfg.Logger.With("component", "fleet")
	box := fleet.BoxIDFromSerial(a.Manager.Box().Identity.Serial)
	pcfg := fleetnats.Config{URLs: fc.URLs, CredsFile: fc.CredsFile, CAFile: fc.CAFile, CertFile: fc.CertFile, KeyFile: fc.KeyFile, Name: string(box),
		TTL: fc.TTL, Replicas: fc.Replicas, Logger: log}
	var ecfg *fleetnats.EmbeddedConfig
	servers := strings.Join(fc.URLs, ",")
	if len(fc.URLs) == 0 {
		if !fleetnats.HaveEmbedded {
			// A build for a small image: it has no server to run, so
			// the box stays out of the fleet unless --fleet names one.
			log.Warn("fleet plane off: this build has no embedded server; join a cluster with --fleet", "err", fleetnats.ErrNoEmbedded)
			return nil
		}
		ecfg = &fleetnats.EmbeddedConfig{Dir: filepath.Join(a.cfg.DataDir, "fleet"), Listen: fc.Listen, Name: string(box),
			CredsFile:     filepath.Join(a.cfg.DataDir, FleetCredsFile),
			ClusterListen: fc.ClusterListen, Routes: fc.Routes, Logger: log}
		if fc.ClusterListen != "" {
			if fc.ClusterSecretFile == "" {
				return fmt.Errorf("appliance: fleet: a cluster among boxes needs a shared secret file")
			}
			s, err := readSecret(fc.ClusterSecretFile)
			if err != nil {
				return fmt.Errorf("appliance: fleet: %w", err)
			}
			ecfg.ClusterSecret = s
		}
		servers = "nats://" + cmp.Or(fc.Listen, fleetnats.DefaultListen)
	}
	ttl := cmp.Or(fc.TTL, 30*time.Second)
	f := &Fleet{log: log, clock: a.cfg.Clock, joined: make(chan struct{}),
		state: FleetState{State: FleetJoining, Box: box, Servers: servers, Embedded: ecfg != nil, Since: a.cfg.Clock()}}
	svc, err := fleet.NewService(fleet.Config{Manager: a.Manager, Plane: f, Logger: log, Clock: a.cfg.Clock,
		API: fc.API, Heartbeat: ttl / 3, Export: func() string {
			if a.ExportAddr == nil {
				return ""
			}
			return "tcp://" + a.ExportAddr.String()
		}})
	if err != nil {
		return fmt.Errorf("appliance: fleet: %w", err)
	}
	f.Service = svc
	a.Fleet = f
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); svc.Run(rctx) }()
	go func() {
		defer wg.Done()
		if kve := f.join(rctx, a, pcfg, ecfg, cmp.Or(fc.RetryMax, fleetRetryMax)); kve != nil && fc.HotnessInterval >= 0 {
			a.publishHotness(rctx, kve, cmp.Or(fc.HotnessInterval, 30*time.Second), log)
		}
	}()
	a.closers = append(a.closers, func() error {
		cancel()
		wg.Wait()
		// In reverse of joining: KV events stop, the connection drains,
		// the server stops.
		a.kvEv.setPublisher(nil)
		if p := f.plane.Load(); p != nil {
			p.Close()
		}
		if e := f.Embedded(); e != nil {
			e.Close()
		}
		return nil
	})
	return nil
}

// join starts the embedded server (when the box runs one) and connects,
// retrying each with backoff from a second up to retryMax until it has
// joined or ctx ends. It returns the box's KV publisher once joined.
func (f *Fleet) join(ctx context.Context, a *Appliance, pcfg fleetnats.Config, ecfg *fleetnats.EmbeddedConfig, retryMax time.Duration) *fleetnats.KVEvents {
	wait := min(time.Second, retryMax)
	for attempt := 1; ; attempt++ {
		f.mu.Lock()
		f.state.Attempts = attempt
		f.mu.Unlock()
		p, err := f.tryJoin(ctx, pcfg, ecfg)
		if err == nil {
			f.plane.Store(p)
			f.setState(FleetConnected, nil, time.Time{})
			close(f.joined)
			// The KV store's block events go on the plane from now on
			// (kv.go), after the state the index holds (Cleared, then
			// Stored: a router that followed this box before learns
			// what is there now).
			kve := p.NewKVEvents(a.Manager.Box().Identity.Serial)
			a.kvEv.setPublisher(kve)
			a.KV.Ix.Resync()
			f.Service.Kick()
			f.log.Info("fleet plane up", "box", f.Service.Box(), "servers", pcfg.URLs, "embedded", ecfg != nil, "attempts", attempt)
			return kve
		}
		if ctx.Err() != nil {
			return nil
		}
		next := f.clock().Add(wait)
		f.setState(FleetRetrying, err, next)
		f.log.Warn("fleet plane not joined; the box serves its hosts and retries", "err", err, "attempt", attempt, "retry", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		wait = min(2*wait, retryMax)
	}
}

// hotTop is how many hot blocks a namespace's summary lists.
const hotTop = 8

// publishHotness publishes every KV namespace's hotness summary each
// interval until ctx ends (fleet.KVHotness: counts from the index, hot
// blocks by the CHMU's heat). A summary that fails is logged and the
// next one follows: they are periodic, not a record.
func (a *Appliance) publishHotness(ctx context.Context, kve *fleetnats.KVEvents, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := a.cfg.Clock()
		for _, h := range a.KV.Ix.Hotness(a.kvHeat.HeatOf, hotTop) {
			s := fleet.KVHotness{Namespace: h.Namespace, Time: now, IntervalSeconds: every.Seconds(), Blocks: h.Blocks, Bytes: h.Bytes,
				Hits: h.Hits, Misses: h.Misses, Top: make([]fleet.KVHotBlock, 0, len(h.Top))}
			for _, b := range h.Top {
				s.Top = append(s.Top, fleet.KVHotBlock{BlockHash: b.Hash, Length: b.Length, Heat: b.Heat})
			}
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := kve.PublishHotness(pctx, s)
			cancel()
			if err != nil && ctx.Err() == nil {
				log.Debug("fleet: KV hotness summary not published", "namespace", h.Namespace, "err", err)
			}
		}
	}
}

// tryJoin is one attempt: the server if it does not run yet, then the
// connection and the JetStream assets (bounded, so that a cluster that
// never elects a leader is retried instead of waited for).
func (f *Fleet) tryJoin(ctx context.Context, pcfg fleetnats.Config, ecfg *fleetnats.EmbeddedConfig) (*fleetnats.Plane, error) {
	if ecfg != nil {
		emb := f.Embedded()
		if emb == nil {
			var err error
			if emb, err = fleetnats.StartEmbedded(*ecfg); err != nil {
				return nil, err
			}
			f.mu.Lock()
			f.emb = emb
			f.mu.Unlock()
		}
		pcfg.URLs, pcfg.User, pcfg.Password = []string{emb.URL}, emb.User, emb.Password
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return fleetnats.Connect(cctx, pcfg)
}

// readSecret reads a shared secret file that only its owner may read.
func readSecret(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s is readable by others (mode %#o): chmod 600 it", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}

// URLs says where the plane is, for people: the servers, and whether
// the box runs them.
func (f *Fleet) URLs() string {
	st := f.State()
	s := st.Servers
	if st.Embedded {
		s += " (embedded)"
	}
	return s
}
