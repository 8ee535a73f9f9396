// Package telemetry is the hot-page pipeline as a service, the way
// rdma.Service is the export pipeline: the CHMU's register block (the
// virtual box's in-process CHMU, or a real device's BAR mapped with
// hmu/mmio), the hmu driver over it, an agg.Collector that drains the
// hotlist into per-host, shared and pool top-K, heatmap and hints —
// mapping DPA to hosts through a Layout rebuilt from the ledger's active
// grants on every capacity change — and stream hubs that carry heatmap
// and top-K frames to WebSocket clients at a fixed rate: one hub with
// every scope for the appliance's consoles and one per host with only
// what that host holds. It also answers HeatOf for the KV store's
// eviction (kv/evict.Heat).
//
// On the virtual box the CHMU's notification (its MSI) kicks a drain; a
// real device is polled (a user-space daemon has no MSI without VFIO).
// The Redfish view of it is api's TelemetryService; appliance only
// chooses the register block and starts the service.
//
// Files: service.go (construction, lifetime, the collector's views),
// chmu.go (the CHMU configuration, persisted), layout.go (DPA → host from
// the grants, sim workloads), frames.go (the stream pump and a host's
// masked view).
package telemetry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"path/filepath"
	"sync"
	"time"

	"cxlpool/dcd"
	"cxlpool/fabric"
	"cxlpool/fabric/cci"
	"cxlpool/hmu"
	"cxlpool/hmu/agg"
	"cxlpool/hmu/stream"
	"cxlpool/sim"
)

// Manager is what the service reads from the capacity manager: the
// device's topology (heads, regions), the ledger's active grants and its
// change notifications. *dcd.Manager satisfies it.
type Manager interface {
	Box() fabric.Box
	Ledger() dcd.Ledger
	Subscribe(buf int) (<-chan dcd.Change, func())
}

// SimBox is the virtual box's side of the pipeline: the CHMU notification
// standing in for its MSI, and the synthetic workloads of its hosts.
// *sim.Box satisfies it.
type SimBox interface {
	SetCHMUNotify(f func(instance int))
	StartWorkload(host int, kind sim.WorkloadKind, p sim.WorkloadParams) error
	StopWorkload(host int)
}

// Tuning tunes the pipeline. Zero fields take the defaults noted.
type Tuning struct {
	// FrameInterval is the stream's frame period (default 100 ms: 10 frames/s).
	FrameInterval time.Duration
	// TopN is the entries per top-K frame (default 64).
	TopN int
	// Poll is the collector's drain period (default 100 ms).
	Poll time.Duration
	// Epoch is the collector's decay period (default 1 s, half-life one epoch).
	Epoch time.Duration
	// CellSize is the heatmap granularity, a power of two (default: the
	// smallest giving at most 4096 cells over the pool, at least 1 MiB).
	CellSize uint64
	// LayoutInterval is the least time between two rebuilds of the DPA →
	// host layout during a burst of grants and releases (default 20 ms;
	// the collector drains every Poll, 100 ms, anyway).
	LayoutInterval time.Duration
	// LayoutVerify is the most time, while changes come, between two
	// reads of the ledger's active grants, which check the copy the
	// changes keep (default 1 s; followGrants).
	LayoutVerify time.Duration
}

func (c *Tuning) defaults() {
	if c.FrameInterval <= 0 {
		c.FrameInterval = 100 * time.Millisecond
	}
	if c.TopN <= 0 {
		c.TopN = 64
	}
	if c.LayoutInterval <= 0 {
		c.LayoutInterval = 20 * time.Millisecond
	}
	if c.LayoutVerify <= 0 {
		c.LayoutVerify = time.Second
	}
}

// Config is what New needs.
type Config struct {
	// Registers is the CHMU register block. Required.
	Registers hmu.Registers
	// CloseRegisters, if set, is called by Close (a mapped BAR's unmap).
	CloseRegisters func() error
	// Manager is the capacity manager whose grants map DPA to hosts. Required.
	Manager Manager
	// Sim is the virtual box, for its notification and workloads; nil on
	// hardware.
	Sim SimBox
	// DataDir holds CHMUFile. Required.
	DataDir string
	// Workload is what the virtual box's hosts run once they hold
	// capacity (ParseSimWorkload; empty: none).
	Workload string
	Tuning   Tuning
	Clock    func() time.Time
	Logger   *slog.Logger
}

// Service is the running pipeline. Its methods are safe for concurrent
// use.
type Service struct {
	log    *slog.Logger
	cfg    Tuning
	mgr    Manager
	box    SimBox // nil on hardware
	file   string // CHMUFile path
	hosts  int
	insts  []*hmu.Instance
	coll   *agg.Collector
	layout *agg.LiveLayout
	// grants is the copy of the active grants the layout is built from;
	// only the layout follower (and New before it) touches it.
	grants  map[dcd.GrantID]copied
	all     *stream.Hub
	perHost []*stream.Hub
	workld  string

	mu       sync.Mutex // configuration changes, one at a time
	workMu   sync.Mutex // the workloads started per host
	started  map[int]sim.WorkloadKind
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	closeReg func() error
}

// New opens the CHMU, applies the saved (or default) configuration, and
// starts the collector, the layout follower and the frame pump; Close
// stops them. On error nothing is left running, and CloseRegisters has
// not been called (the caller still owns the registers).
func New(ctx context.Context, c Config) (*Service, error) {
	if c.Registers == nil || c.Manager == nil || c.DataDir == "" {
		return nil, errors.New("telemetry: Registers, Manager and DataDir are required")
	}
	c.Tuning.defaults()
	if c.Workload == "" {
		c.Workload = SimWorkloadNone
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	drv, err := hmu.Open(c.Registers, hmu.Options{Logger: c.Logger})
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	box := c.Manager.Box()
	t := &Service{
		log: c.Logger, cfg: c.Tuning, mgr: c.Manager, box: c.Sim, file: filepath.Join(c.DataDir, CHMUFile),
		hosts: max(len(box.Heads), 1), layout: agg.NewLiveLayout(nil), all: stream.NewHub(0),
		workld: c.Workload, started: map[int]sim.WorkloadKind{}, closeReg: c.CloseRegisters,
	}
	for i := range drv.Instances() {
		in, err := drv.Instance(i)
		if err != nil {
			return nil, fmt.Errorf("telemetry: %w", err)
		}
		t.insts = append(t.insts, in)
	}
	for range t.hosts {
		t.perHost = append(t.perHost, stream.NewHub(0))
	}
	ccfg, enabled := t.loadConfig()
	if err := t.apply(ctx, ccfg, enabled); err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}

	var span uint64
	for _, r := range box.Regions {
		span = max(span, r.Base+r.Length)
	}
	span = max(span, 1<<20)
	cell := c.Tuning.CellSize
	if cell == 0 {
		cell = max(uint64(1)<<20, pow2Ceil(span/4096))
	}
	t.coll, err = agg.New(agg.Config{
		Source: instances(t.insts), HostOf: t.layout.HostOf, Extents: t.layout.Extents,
		Hosts: t.hosts, Capacity: (span + cell - 1) / cell * cell, CellSize: cell, UnitSize: ccfg.UnitSize,
		Poll: c.Tuning.Poll, Epoch: c.Tuning.Epoch, Clock: c.Clock, Logger: c.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	// Subscribed before the first read, so no change falls between them.
	changes, unsubscribe := c.Manager.Subscribe(256)
	if err := t.rebuildLayout(ctx); err != nil {
		unsubscribe()
		t.stopWorkloads()
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	t.cancel = cancel
	if t.box != nil {
		t.box.SetCHMUNotify(func(int) { t.coll.Kick() })
	}
	t.wg.Add(3)
	go func() { defer t.wg.Done(); _ = t.coll.Run(rctx) }()
	go func() { defer t.wg.Done(); defer unsubscribe(); t.followGrants(rctx, changes) }()
	go func() { defer t.wg.Done(); t.pump(rctx) }()
	t.log.Info("telemetry running", "instances", len(t.insts), "unit", ccfg.UnitSize, "enabled", enabled,
		"heatmap cell", cell, "frames/s", float64(time.Second)/float64(c.Tuning.FrameInterval), "sim workload", t.workldName())
	return t, nil
}

func (t *Service) workldName() string {
	if t.box == nil {
		return "n/a"
	}
	return t.workld
}

func pow2Ceil(v uint64) uint64 {
	if v <= 1 {
		return 1
	}
	return 1 << bits.Len64(v-1)
}

// Close stops the pipeline: the collector, the pump and every stream
// client (their handlers hang up). The CHMU keeps its configuration.
func (t *Service) Close() error {
	t.cancel()
	t.wg.Wait()
	if t.box != nil {
		t.box.SetCHMUNotify(nil)
		t.stopWorkloads()
	}
	t.all.Close()
	for _, h := range t.perHost {
		h.Close()
	}
	if t.closeReg != nil {
		return t.closeReg()
	}
	return nil
}

// instances drains every CHMU instance as one source.
type instances []*hmu.Instance

func (s instances) Drain(dst []hmu.Record) ([]hmu.Record, hmu.DrainStatus, error) {
	var all hmu.DrainStatus
	var errs []error
	for _, in := range s {
		var ds hmu.DrainStatus
		var err error
		dst, ds, err = in.Drain(dst)
		errs = append(errs, err)
		all.Entries += ds.Entries
		all.Overflow = all.Overflow || ds.Overflow
		all.Level = all.Level || ds.Level
		all.UnitSize = cmp.Or(all.UnitSize, ds.UnitSize)
	}
	return dst, all, errors.Join(errs...)
}

// --- collector views ---

// Report is the collector's summary of every host, shared capacity and the pool.
func (t *Service) Report() agg.Report { return t.coll.Report() }

// Top returns the n hottest units of a scope (a host, agg.Shared or agg.Pool).
func (t *Service) Top(scope, n int) []agg.Hot { return t.coll.Top(scope, n) }

// Hints returns placement hints for a host.
func (t *Service) Hints(host, n int) agg.Hints { return t.coll.Hints(host, n) }

// Heatmap returns the pool heatmap.
func (t *Service) Heatmap() agg.Heatmap { return t.coll.Heatmap() }

// HeatOf is the decayed access count of the units covering
// [dpa, dpa+length), summed; 0 where nothing is tracked. It satisfies
// kv/evict.Heat: the KV store asks it per block when it picks what to
// evict.
func (t *Service) HeatOf(dpa, length uint64) float64 { return t.coll.HeatOf(dpa, length) }

// Extents lists what a host holds (agg.Shared: capacity held by several).
func (t *Service) Extents(host int) []cci.Extent { return t.layout.Extents(host) }

// Hosts is the number of hosts the collector tracks (IDs 0 … Hosts−1).
func (t *Service) Hosts() int { return t.hosts }

// Stream returns the frame hub of a scope: agg.Pool for every frame, or a
// host ID for that host's own frames. Nil for an unknown host.
func (t *Service) Stream(scope int) *stream.Hub {
	if scope == agg.Pool {
		return t.all
	}
	if scope < 0 || scope >= len(t.perHost) {
		return nil
	}
	return t.perHost[scope]
}

// FrameInterval is the stream's frame period.
func (t *Service) FrameInterval() time.Duration { return t.cfg.FrameInterval }
