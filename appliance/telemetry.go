package appliance

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"cxlpool/dcd"
	"cxlpool/fabric/cci"
	"cxlpool/hmu"
	"cxlpool/hmu/agg"
	"cxlpool/hmu/mmio"
	"cxlpool/hmu/stream"
	"cxlpool/sim"
)

// Telemetry is the hot-page pipeline: the CHMU's register block (the
// virtual box's in-process CHMU, or a real device's BAR mapped with
// hmu/mmio), the hmu driver over it, an agg.Collector that drains the
// hotlist into per-host and pool top-K, heatmap and hints — mapping DPA to
// hosts through a Layout rebuilt from the ledger's active grants on every
// capacity change — and stream hubs that carry heatmap and top-K frames to
// WebSocket clients at a fixed rate: one hub with every scope for the
// appliance's consoles and one per host with only what that host holds.
//
// On the virtual box the CHMU's notification (its MSI) kicks a drain; a
// real device is polled (a user-space daemon has no MSI without VFIO).

// TelemetryConfig tunes the pipeline. Zero fields take the defaults noted.
type TelemetryConfig struct {
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
}

func (c *TelemetryConfig) defaults() {
	if c.FrameInterval <= 0 {
		c.FrameInterval = 100 * time.Millisecond
	}
	if c.TopN <= 0 {
		c.TopN = 64
	}
}

// Sim workload names for Config.SimWorkload besides the sim kinds.
const (
	// SimWorkloadNone starts no workload.
	SimWorkloadNone = "none"
	// SimWorkloadMixed runs a KV-cache workload on hosts that share
	// capacity and Zipf or moving-hot-set workloads on the others.
	SimWorkloadMixed = "mixed"
)

// CHMUFile is the persisted CHMU configuration inside the data directory.
const CHMUFile = "chmu.json"

// ParseSimWorkload checks a --sim-workload value.
func ParseSimWorkload(s string) (string, error) {
	switch s {
	case "", SimWorkloadNone:
		return SimWorkloadNone, nil
	case SimWorkloadMixed:
		return s, nil
	}
	if slices.Contains(sim.WorkloadKinds, sim.WorkloadKind(s)) {
		return s, nil
	}
	return "", fmt.Errorf("workload %q: want none, mixed or one of %v", s, sim.WorkloadKinds)
}

// CHMULocation is where a real device's CHMU register block is.
type CHMULocation struct {
	Path   string // a PCI BAR resource file (or any file, for tests)
	Offset int64  // the block's offset in it
}

// ParseCHMU reads --chmu: PATH[@OFFSET] (offset decimal or 0x-hex), or
// pci:BDF to find the block through the device's Register Locator under
// /sys.
func ParseCHMU(s string) (CHMULocation, error) {
	if bdf, ok := strings.CutPrefix(s, "pci:"); ok {
		path, off, err := mmio.FindCHMU("/sys", bdf, 0)
		if err != nil {
			return CHMULocation{}, err
		}
		return CHMULocation{Path: path, Offset: off}, nil
	}
	path, offs, hasOff := strings.Cut(s, "@")
	if path == "" {
		return CHMULocation{}, fmt.Errorf("chmu %q: want PATH[@OFFSET] or pci:BDF", s)
	}
	var off int64
	if hasOff {
		v, err := strconv.ParseInt(offs, 0, 64)
		if err != nil || v < 0 {
			return CHMULocation{}, fmt.Errorf("chmu %q: offset %q is not a non-negative number", s, offs)
		}
		off = v
	}
	return CHMULocation{Path: path, Offset: off}, nil
}

// persisted is the CHMUFile content.
type persisted struct {
	Enabled bool
	Config  hmu.Config
}

// Telemetry is the running pipeline. Its methods are safe for concurrent
// use.
type Telemetry struct {
	log     *slog.Logger
	cfg     TelemetryConfig
	mgr     *dcd.Manager
	box     *sim.Box // the virtual box, for workloads; nil on hardware
	file    string   // CHMUFile path
	hosts   int
	insts   []*hmu.Instance
	coll    *agg.Collector
	layout  *agg.LiveLayout
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

// telemetryDeps are what newTelemetry needs from the appliance.
type telemetryDeps struct {
	regs     hmu.Registers
	closeReg func() error
	mgr      *dcd.Manager
	box      *sim.Box
	dataDir  string
	workload string
	cfg      TelemetryConfig
	clock    func() time.Time
	log      *slog.Logger
}

// startTelemetry opens the CHMU the device offers and starts the pipeline;
// without one (a real device and no --chmu) it logs why and leaves
// a.Telemetry nil.
func (a *Appliance) startTelemetry(ctx context.Context) error {
	log := a.cfg.Logger.With("component", "telemetry")
	d := telemetryDeps{mgr: a.Manager, box: a.Box, dataDir: a.cfg.DataDir, workload: a.cfg.SimWorkload,
		cfg: a.cfg.Telemetry, clock: a.cfg.Clock, log: log}
	switch {
	case a.Box != nil:
		d.regs = a.Box.CHMU()
	case a.cfg.CHMU != "":
		loc, err := ParseCHMU(a.cfg.CHMU)
		if err != nil {
			return fmt.Errorf("appliance: telemetry: %w", err)
		}
		regs, err := mmio.Open(loc.Path, loc.Offset, 0)
		if err != nil {
			return fmt.Errorf("appliance: telemetry: %w", err)
		}
		d.regs, d.closeReg = regs, regs.Close
	default:
		log.Info("telemetry disabled: no CHMU register block given (--chmu PATH[@OFFSET] or pci:BDF)")
		return nil
	}
	t, err := newTelemetry(ctx, d)
	if err != nil {
		if d.closeReg != nil {
			_ = d.closeReg()
		}
		return fmt.Errorf("appliance: telemetry: %w", err)
	}
	a.Telemetry = t
	a.closers = append(a.closers, t.Close)
	return nil
}

func newTelemetry(ctx context.Context, d telemetryDeps) (*Telemetry, error) {
	d.cfg.defaults()
	if d.workload == "" {
		d.workload = SimWorkloadNone
	}
	drv, err := hmu.Open(d.regs, hmu.Options{Logger: d.log})
	if err != nil {
		return nil, err
	}
	box := d.mgr.Box()
	t := &Telemetry{
		log: d.log, cfg: d.cfg, mgr: d.mgr, box: d.box, file: filepath.Join(d.dataDir, CHMUFile),
		hosts: max(len(box.Heads), 1), layout: agg.NewLiveLayout(nil), all: stream.NewHub(0),
		workld: d.workload, started: map[int]sim.WorkloadKind{}, closeReg: d.closeReg,
	}
	for i := range drv.Instances() {
		in, err := drv.Instance(i)
		if err != nil {
			return nil, err
		}
		t.insts = append(t.insts, in)
	}
	for range t.hosts {
		t.perHost = append(t.perHost, stream.NewHub(0))
	}
	ccfg, enabled := t.loadConfig()
	if err := t.apply(ctx, ccfg, enabled); err != nil {
		return nil, err
	}

	var span uint64
	for _, r := range box.Regions {
		span = max(span, r.Base+r.Length)
	}
	span = max(span, 1<<20)
	cell := d.cfg.CellSize
	if cell == 0 {
		cell = max(uint64(1)<<20, pow2Ceil(span/4096))
	}
	t.coll, err = agg.New(agg.Config{
		Source: instances(t.insts), HostOf: t.layout.HostOf, Extents: t.layout.Extents,
		Hosts: t.hosts, Capacity: (span + cell - 1) / cell * cell, CellSize: cell, UnitSize: ccfg.UnitSize,
		Poll: d.cfg.Poll, Epoch: d.cfg.Epoch, Clock: d.clock, Logger: d.log,
	})
	if err != nil {
		return nil, err
	}
	if err := t.rebuildLayout(ctx); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	t.cancel = cancel
	changes, unsubscribe := d.mgr.Subscribe(256)
	if t.box != nil {
		t.box.SetCHMUNotify(func(int) { t.coll.Kick() })
	}
	t.wg.Add(3)
	go func() { defer t.wg.Done(); _ = t.coll.Run(rctx) }()
	go func() { defer t.wg.Done(); defer unsubscribe(); t.followGrants(rctx, changes) }()
	go func() { defer t.wg.Done(); t.pump(rctx) }()
	t.log.Info("telemetry running", "instances", len(t.insts), "unit", ccfg.UnitSize, "enabled", enabled,
		"heatmap cell", cell, "frames/s", float64(time.Second)/float64(d.cfg.FrameInterval), "sim workload", t.workldName())
	return t, nil
}

func (t *Telemetry) workldName() string {
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
func (t *Telemetry) Close() error {
	t.cancel()
	t.wg.Wait()
	if t.box != nil {
		t.box.SetCHMUNotify(nil)
		t.workMu.Lock()
		for h := range t.started {
			t.box.StopWorkload(h)
		}
		clear(t.started)
		t.workMu.Unlock()
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

// --- configuration ---

// DefaultCHMUConfig is the configuration the pipeline starts with: every
// read and write, 4 KiB units, 100 ms epochs, a unit is hot at 4 accesses
// in an epoch, both interrupts, the ring's level at half — each adjusted
// to what the instance offers.
func DefaultCHMUConfig(c hmu.Caps) hmu.Config {
	cfg := hmu.Config{Access: hmu.AccessReadWrite, Threshold: 4, UnitSize: 4096, Mode: hmu.ModeEpoch,
		Epoch: hmu.Epoch{Scale: 4, Multiplier: 1}, OverflowIRQ: c.OverflowIRQ, LevelIRQ: c.LevelIRQ,
		FillThreshold: c.HotlistSize / 2}
	if !c.CanTrack(cfg.Access) {
		for _, a := range []hmu.AccessType{hmu.AccessNonTEEReadWrite, hmu.AccessRead, hmu.AccessNonTEERead, hmu.AccessWrite, hmu.AccessNonTEEWrite} {
			if c.CanTrack(a) {
				cfg.Access = a
				break
			}
		}
	}
	if !c.SupportsUnit(cfg.UnitSize) && c.UnitSizes != 0 {
		cfg.UnitSize = 256 << bits.TrailingZeros32(c.UnitSizes)
	}
	if c.DownSampling&1 == 0 && c.DownSampling != 0 {
		cfg.DSFactor = uint8(bits.TrailingZeros16(c.DownSampling))
	}
	switch {
	case !c.EpochMode && c.AlwaysOn:
		cfg.Mode, cfg.Epoch = hmu.ModeAlwaysOn, hmu.Epoch{}
	case cfg.Epoch.Duration() < c.MinEpoch.Duration():
		cfg.Epoch = c.MinEpoch
	case c.MaxEpoch.Duration() > 0 && cfg.Epoch.Duration() > c.MaxEpoch.Duration():
		cfg.Epoch = c.MaxEpoch
	}
	return cfg
}

// loadConfig reads the persisted configuration, falling back to the
// default when there is none or it no longer fits the device.
func (t *Telemetry) loadConfig() (hmu.Config, bool) {
	def := DefaultCHMUConfig(t.insts[0].Caps())
	b, err := os.ReadFile(t.file)
	if errors.Is(err, os.ErrNotExist) {
		return def, true
	}
	var p persisted
	if err == nil {
		err = json.Unmarshal(b, &p)
	}
	if err == nil {
		err = t.ValidateCHMU(p.Config)
	}
	if err != nil {
		t.log.Warn("saved CHMU configuration unusable; using the default", "file", t.file, "err", err)
		return def, true
	}
	return p.Config, p.Enabled
}

// apply writes c into every instance and enables or disables counting.
func (t *Telemetry) apply(ctx context.Context, c hmu.Config, enabled bool) error {
	for _, in := range t.insts {
		if enabled {
			if err := in.Start(ctx, c); err != nil {
				return err
			}
			continue
		}
		if err := in.Disable(ctx); err != nil {
			return err
		}
		if err := in.Configure(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// CHMUConfig returns instance 0's configuration (every instance gets the
// same) and whether it is counting.
func (t *Telemetry) CHMUConfig() (hmu.Config, bool, error) {
	c, err := t.insts[0].Config()
	if err != nil {
		return hmu.Config{}, false, err
	}
	st, err := t.insts[0].Status()
	if err != nil {
		return hmu.Config{}, false, err
	}
	return c, st.Enabled, nil
}

// CHMUCaps returns instance 0's capabilities and the number of instances.
func (t *Telemetry) CHMUCaps() (hmu.Caps, int) { return t.insts[0].Caps(), len(t.insts) }

// ValidateCHMU checks c against every instance's capabilities.
func (t *Telemetry) ValidateCHMU(c hmu.Config) error {
	for _, in := range t.insts {
		if err := in.Validate(c); err != nil {
			return err
		}
	}
	return nil
}

// SetCHMU validates c, writes it into every instance (a reset: counting
// starts over), enables or disables counting, and saves it in the data
// directory so a restart keeps it. A FillThreshold of 0 means half the
// ring.
func (t *Telemetry) SetCHMU(ctx context.Context, c hmu.Config, enabled bool) error {
	if c.FillThreshold == 0 {
		c.FillThreshold = t.insts[0].Caps().HotlistSize / 2
	}
	if err := t.ValidateCHMU(c); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.apply(ctx, c, enabled); err != nil {
		return err
	}
	b, err := json.MarshalIndent(persisted{Enabled: enabled, Config: c}, "", "  ")
	if err != nil {
		return err
	}
	tmp := t.file + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("telemetry: save CHMU configuration: %w", err)
	}
	if err := os.Rename(tmp, t.file); err != nil {
		return fmt.Errorf("telemetry: save CHMU configuration: %w", err)
	}
	t.log.Info("CHMU configuration changed", "enabled", enabled, "unit", c.UnitSize, "threshold", c.Threshold,
		"epoch", c.Epoch.Duration(), "access", c.Access)
	return nil
}

// --- collector views ---

// Report is the collector's summary of every host, shared capacity and the pool.
func (t *Telemetry) Report() agg.Report { return t.coll.Report() }

// Top returns the n hottest units of a scope (a host, agg.Shared or agg.Pool).
func (t *Telemetry) Top(scope, n int) []agg.Hot { return t.coll.Top(scope, n) }

// Hints returns placement hints for a host.
func (t *Telemetry) Hints(host, n int) agg.Hints { return t.coll.Hints(host, n) }

// Heatmap returns the pool heatmap.
func (t *Telemetry) Heatmap() agg.Heatmap { return t.coll.Heatmap() }

// Extents lists what a host holds (agg.Shared: capacity held by several).
func (t *Telemetry) Extents(host int) []cci.Extent { return t.layout.Extents(host) }

// Hosts is the number of hosts the collector tracks (IDs 0 … Hosts−1).
func (t *Telemetry) Hosts() int { return t.hosts }

// Stream returns the frame hub of a scope: agg.Pool for every frame, or a
// host ID for that host's own frames. Nil for an unknown host.
func (t *Telemetry) Stream(scope int) *stream.Hub {
	if scope == agg.Pool {
		return t.all
	}
	if scope < 0 || scope >= len(t.perHost) {
		return nil
	}
	return t.perHost[scope]
}

// FrameInterval is the stream's frame period.
func (t *Telemetry) FrameInterval() time.Duration { return t.cfg.FrameInterval }

// --- layout ---

// followGrants rebuilds the layout on every capacity change, and every
// 10 s in case a burst of changes overflowed the subscription.
func (t *Telemetry) followGrants(ctx context.Context, changes <-chan dcd.Change) {
	backstop := time.NewTicker(10 * time.Second)
	defer backstop.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case c, ok := <-changes:
			if !ok {
				return
			}
			relevant := layoutChange(c)
			for drained := false; !drained; { // one rebuild for a burst
				select {
				case c := <-changes:
					relevant = relevant || layoutChange(c)
				default:
					drained = true
				}
			}
			if !relevant {
				continue
			}
		case <-backstop.C:
		}
		if err := t.rebuildLayout(ctx); err != nil && ctx.Err() == nil {
			t.log.Warn("telemetry: rebuilding the host layout", "err", err)
		}
	}
}

// layoutChange reports whether c may change which host holds which DPA:
// a reservation, a deletion, an intent to add and an intent to release
// move no extents, and rebuilding reads every active grant.
func layoutChange(c dcd.Change) bool {
	if c.Kind == dcd.ChangeChunk {
		return false
	}
	return c.Grant == nil || (c.Grant.State != dcd.GrantAdding && c.Grant.State != dcd.GrantReleasing)
}

// rebuildLayout maps DPA to hosts from the ledger's active grants and, on
// the virtual box, starts or stops the hosts' workloads to match.
func (t *Telemetry) rebuildLayout(ctx context.Context) error {
	grants, err := t.mgr.Ledger().Grants(ctx, dcd.GrantFilter{Active: true})
	if err != nil {
		return err
	}
	l := agg.LayoutFromGrants(grants)
	t.layout.Store(l)
	t.syncWorkloads(l)
	return nil
}

// syncWorkloads runs the configured workload on every host that holds
// capacity and stops it on hosts that hold none.
func (t *Telemetry) syncWorkloads(l *agg.Layout) {
	if t.box == nil || t.workld == SimWorkloadNone {
		return
	}
	t.workMu.Lock()
	defer t.workMu.Unlock()
	want := map[int]sim.WorkloadKind{}
	shared := l.Extents(agg.Shared)
	for _, h := range l.Hosts() {
		kind := sim.WorkloadKind(t.workld)
		if t.workld == SimWorkloadMixed {
			switch {
			case overlapsAny(l.Extents(h), shared):
				kind = sim.WorkloadKVCache
			case h%2 == 0:
				kind = sim.WorkloadZipf
			default:
				kind = sim.WorkloadHotSet
			}
		}
		want[h] = kind
	}
	for h, k := range want {
		if t.started[h] == k {
			continue
		}
		if err := t.box.StartWorkload(h, k, sim.WorkloadParams{}); err != nil {
			t.log.Warn("telemetry: starting a sim workload", "host", h, "err", err)
			continue
		}
		t.started[h] = k
	}
	for h := range t.started {
		if _, ok := want[h]; !ok {
			t.box.StopWorkload(h)
			delete(t.started, h)
		}
	}
}

func overlapsAny(a, b []cci.Extent) bool {
	for _, x := range a {
		for _, y := range b {
			if x.DPA < y.End() && y.DPA < x.End() {
				return true
			}
		}
	}
	return false
}

// --- frames ---

// pump renders frames at FrameInterval for every hub with clients: the
// appliance hub gets the heatmap and the top-K of every host, shared
// capacity and the pool; a host's hub gets the heatmap masked to the
// cells its extents cover and the top-K of its own and of the shared
// capacity it holds. Hubs without clients are skipped (a new client
// first gets the hub's retained frames, then fresh ones).
func (t *Telemetry) pump(ctx context.Context) {
	tick := time.NewTicker(t.cfg.FrameInterval)
	defer tick.Stop()
	scopes := make([]int, 0, t.hosts+2)
	for h := range t.hosts {
		scopes = append(scopes, h)
	}
	scopes = append(scopes, agg.Shared, agg.Pool)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		if t.all.Stats().Clients > 0 {
			for _, f := range t.all.Render(t.coll, now, scopes, t.cfg.TopN) {
				t.all.Publish(f)
			}
		}
		for h, hub := range t.perHost {
			if hub.Stats().Clients > 0 {
				for _, f := range t.hostFrames(hub, h, now) {
					hub.Publish(f)
				}
			}
		}
	}
}

// hostFrames renders one round of host h's frames with hub's sequence
// numbers: the masked heatmap, the host's top-K, and the top-K of the
// shared capacity it holds.
func (t *Telemetry) hostFrames(hub *stream.Hub, h int, now time.Time) [][]byte {
	mine := t.layout.Extents(h)
	hm := t.coll.Heatmap()
	f := stream.HeatmapFrame(hub.NextSeq(), now, hm)
	mask := coveredCells(mine, hm.CellSize, len(f.Cells))
	for i := range f.Cells {
		if !mask[i] {
			f.Cells[i] = 0
		}
	}
	out := [][]byte{stream.AppendHeatmap(nil, f)}
	rep := t.coll.Report()
	bound := map[int]uint64{}
	for _, s := range rep.Scopes {
		bound[s.Scope] = s.ErrorBound
	}
	own := stream.TopKFrame(hub.NextSeq(), now, h, rep.UnitSize, bound[h], t.coll.Top(h, t.cfg.TopN))
	out = append(out, stream.AppendTopK(nil, own))
	shared := heldOnly(t.coll.Top(agg.Shared, 4*t.cfg.TopN), mine)
	sf := stream.TopKFrame(hub.NextSeq(), now, agg.Shared, rep.UnitSize, bound[agg.Shared], shared[:min(len(shared), t.cfg.TopN)])
	return append(out, stream.AppendTopK(nil, sf))
}

// heldOnly keeps the hot units that lie in extents: a host's view of
// the shared scope, which also holds capacity other hosts share without it.
func heldOnly(hot []agg.Hot, extents []cci.Extent) []agg.Hot {
	var out []agg.Hot
	for _, u := range hot {
		if slices.ContainsFunc(extents, func(e cci.Extent) bool { return u.DPA >= e.DPA && u.DPA < e.End() }) {
			out = append(out, u)
		}
	}
	return out
}

// coveredCells marks the heatmap cells wholly inside the union of
// extents: a partly covered cell would show other hosts' heat.
func coveredCells(extents []cci.Extent, cell uint64, n int) []bool {
	mask := make([]bool, n)
	es := slices.Clone(extents)
	slices.SortFunc(es, func(a, b cci.Extent) int { return cmp.Compare(a.DPA, b.DPA) })
	mark := func(start, end uint64) {
		for c := (start + cell - 1) / cell; (c+1)*cell <= end && c < uint64(n); c++ {
			mask[c] = true
		}
	}
	var start, end uint64
	open := false
	for _, e := range es {
		if open && e.DPA <= end {
			end = max(end, e.End())
			continue
		}
		if open {
			mark(start, end)
		}
		start, end, open = e.DPA, e.End(), true
	}
	if open {
		mark(start, end)
	}
	return mask
}
