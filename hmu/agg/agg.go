// Package agg turns the CHMU's hotlist into what admins and hosts use: per
// host, for sharable capacity and for the whole pool, the top-K hot units
// (Space-Saving, hmu/topk) with decay across epochs; a heatmap of the DPA
// space at a configurable granularity; cold capacity per host; and
// placement hints — the units a host should keep close and the
// allocations that have gone cold (candidates to shrink).
//
// The Collector drains an hmu.Instance (any Source) periodically or when
// kicked by the CHMU notification, and maps each DPA to a host through a
// function it is given (Layout.HostOf built from the ledger's grants or
// from per-host extent lists). Its memory is fixed at construction: k
// counters per scope and one float per heatmap cell; nothing grows with
// the number of distinct pages.
package agg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"slices"
	"sync"
	"time"

	"cxlpool/fabric/cci"
	"cxlpool/hmu"
	"cxlpool/hmu/topk"
)

// Pool is the scope of the whole pool in Top, Hints and reports.
const Pool = -2

// Source is where records come from; *hmu.Instance is one.
type Source interface {
	Drain(dst []hmu.Record) ([]hmu.Record, hmu.DrainStatus, error)
}

// Config configures a Collector. Zero fields take the defaults noted.
type Config struct {
	// Source is drained by Run; Ingest works without one.
	Source Source
	// HostOf maps a DPA to the host holding it (Shared for capacity held
	// by several); ok=false means nobody holds it. Required.
	HostOf func(dpa uint64) (host int, ok bool)
	// Extents lists what a host holds, for cold capacity and shrink hints.
	// Nil means no host holds anything (no cold capacity, no hints).
	Extents func(host int) []cci.Extent
	// Hosts: host IDs are 0 … Hosts−1 (default 8).
	Hosts int
	// Capacity is the DPA span of the heatmap (default 1 TiB).
	Capacity uint64
	// UnitSize is the CHMU unit in bytes (default 4096); a drain that
	// reports another size (a reconfiguration) resets the trackers.
	UnitSize uint64
	// HostK and PoolK are the Space-Saving counters per host (and for
	// Shared) and for the pool (defaults 1024 and 8192).
	HostK, PoolK int
	// CellSize is the heatmap granularity, a power of two (default 256 MiB).
	CellSize uint64
	// Decay multiplies every count and heat at each epoch end (default 0.5,
	// i.e. a half-life of one epoch). 1 disables decay.
	Decay float64
	// Epoch is the decay period (default 1 s).
	Epoch time.Duration
	// Poll is Run's drain period (default 100 ms).
	Poll time.Duration
	// ColdBelow: a heatmap cell whose decayed heat is below it is cold
	// (default 1: no counted access in about the last epoch).
	ColdBelow float64
	// ShrinkFraction: an allocation at least this cold (by bytes) is a
	// shrink candidate (default 0.9).
	ShrinkFraction float64
	Clock          func() time.Time
	Logger         *slog.Logger
}

func (c *Config) defaults() error {
	if c.HostOf == nil {
		return errors.New("agg: config: HostOf is required")
	}
	set := func(p *uint64, v uint64) {
		if *p == 0 {
			*p = v
		}
	}
	set(&c.Capacity, 1<<40)
	set(&c.UnitSize, 4096)
	set(&c.CellSize, 256<<20)
	if c.Hosts <= 0 {
		c.Hosts = 8
	}
	if c.HostK <= 0 {
		c.HostK = 1024
	}
	if c.PoolK <= 0 {
		c.PoolK = 8192
	}
	if c.Decay <= 0 || c.Decay > 1 {
		c.Decay = 0.5
	}
	if c.Epoch <= 0 {
		c.Epoch = time.Second
	}
	if c.Poll <= 0 {
		c.Poll = 100 * time.Millisecond
	}
	if c.ColdBelow <= 0 {
		c.ColdBelow = 1
	}
	if c.ShrinkFraction <= 0 || c.ShrinkFraction > 1 {
		c.ShrinkFraction = 0.9
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	for _, v := range []struct {
		name string
		v    uint64
	}{{"unit size", c.UnitSize}, {"cell size", c.CellSize}} {
		if bits.OnesCount64(v.v) != 1 {
			return fmt.Errorf("agg: config: %s %d is not a power of two", v.name, v.v)
		}
	}
	if cells := c.Capacity / c.CellSize; cells == 0 || cells > 1<<24 {
		return fmt.Errorf("agg: config: %d heatmap cells (capacity %d / cell %d), want 1…2^24", cells, c.Capacity, c.CellSize)
	}
	return nil
}

// Hot is one hot unit.
type Hot struct {
	DPA   uint64
	Size  uint64 // unit size
	Count uint64 // decayed access estimate (never below the true decayed count, up to rounding)
	Err   uint64 // the estimate exceeds the true count by at most Err
}

// Stats counts the collector's work.
type Stats struct {
	Records     uint64 // records ingested
	Weight      uint64 // accesses they carried
	Unmapped    uint64 // records at DPA no host holds
	Drains      uint64
	DrainErrors uint64
	Overflows   uint64 // drains that found the ring had overflowed (records lost)
	Epochs      uint64 // decays applied
	Resets      uint64 // unit-size changes
}

// Collector aggregates CHMU records. Its methods are safe for concurrent use.
type Collector struct {
	cfg  Config
	kick chan struct{}

	mu        sync.Mutex
	unitShift uint
	cellShift uint
	hosts     []*topk.Summary // by host ID; index Hosts is Shared
	pool      *topk.Summary
	heat      []float64 // per cell, decayed
	weight    []float64 // per scope (hosts, Shared), decayed accesses
	lastDecay time.Time
	stats     Stats
	scratch   struct { // ingestBatch's fixed working space
		scope  []int16
		sorted []keyWeight
		counts []int
		starts []int
		next   []int
	}
}

// ingestBatch processes records in runs of this many.
const ingestBatch = 1024

type keyWeight struct{ key, w uint64 }

// New builds a collector.
func New(cfg Config) (*Collector, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	c := &Collector{
		cfg:       cfg,
		kick:      make(chan struct{}, 1),
		unitShift: uint(bits.TrailingZeros64(cfg.UnitSize)),
		cellShift: uint(bits.TrailingZeros64(cfg.CellSize)),
		pool:      topk.New(cfg.PoolK),
		heat:      make([]float64, cfg.Capacity/cfg.CellSize),
		weight:    make([]float64, cfg.Hosts+1),
		lastDecay: cfg.Clock(),
	}
	for range cfg.Hosts + 1 {
		c.hosts = append(c.hosts, topk.New(cfg.HostK))
	}
	c.scratch.scope = make([]int16, ingestBatch)
	c.scratch.sorted = make([]keyWeight, ingestBatch)
	c.scratch.counts = make([]int, cfg.Hosts+1)
	c.scratch.starts = make([]int, cfg.Hosts+1)
	c.scratch.next = make([]int, cfg.Hosts+1)
	return c, nil
}

// scope maps a host (or Shared) to its tracker index; -1 if out of range.
func (c *Collector) scope(host int) int {
	switch {
	case host == Shared:
		return c.cfg.Hosts
	case host >= 0 && host < c.cfg.Hosts:
		return host
	}
	return -1
}

// summary returns the tracker of a scope (a host, Shared or Pool).
func (c *Collector) summary(scope int) *topk.Summary {
	if scope == Pool {
		return c.pool
	}
	if i := c.scope(scope); i >= 0 {
		return c.hosts[i]
	}
	return nil
}

// Ingest adds records. A record's count is its weight (0 counts as 1).
func (c *Collector) Ingest(recs []hmu.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ingest(recs)
}

func (c *Collector) ingest(recs []hmu.Record) {
	for len(recs) > 0 {
		n := min(len(recs), ingestBatch)
		c.ingestBatch(recs[:n])
		recs = recs[n:]
	}
}

// ingestBatch is the hot path. It makes two passes so each Space-Saving
// summary's memory is touched in one run rather than interleaved with
// the others: the first pass updates the pool summary and the heatmap and
// sorts the records by host scope (counting sort into fixed scratch
// space); the second feeds each host's summary its run.
func (c *Collector) ingestBatch(recs []hmu.Record) {
	hostOf := c.cfg.HostOf
	heat := c.heat
	scopes := c.scratch.scope[:len(recs)]
	counts := c.scratch.counts
	clear(counts)
	var weight, unmapped uint64
	for i, r := range recs {
		w := max(r.Count, 1)
		weight += w
		c.pool.Add(r.DPA>>c.unitShift, w)
		if cell := r.DPA >> c.cellShift; cell < uint64(len(heat)) {
			heat[cell] += float64(w)
		}
		scopes[i] = -1
		h, ok := hostOf(r.DPA)
		if !ok {
			unmapped++
			continue
		}
		if sc := c.scope(h); sc >= 0 {
			scopes[i] = int16(sc)
			counts[sc]++
		}
	}
	// Prefix sums → each scope's start in the sorted scratch.
	starts := c.scratch.starts
	at := 0
	for sc, n := range counts {
		starts[sc] = at
		at += n
	}
	sorted := c.scratch.sorted[:at]
	next := c.scratch.next
	copy(next, starts)
	for i, sc := range scopes {
		if sc >= 0 {
			sorted[next[sc]] = keyWeight{recs[i].DPA >> c.unitShift, max(recs[i].Count, 1)}
			next[sc]++
		}
	}
	for sc, n := range counts {
		s := c.hosts[sc]
		for _, kw := range sorted[starts[sc] : starts[sc]+n] {
			s.Add(kw.key, kw.w)
			c.weight[sc] += float64(kw.w)
		}
	}
	c.stats.Records += uint64(len(recs))
	c.stats.Weight += weight
	c.stats.Unmapped += unmapped
}

// Decay ends an epoch now: every count and heat is multiplied by the
// decay factor.
func (c *Collector) Decay() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.decay(1)
	c.lastDecay = c.cfg.Clock()
}

func (c *Collector) decay(epochs int) {
	f := 1.0
	for range epochs {
		f *= c.cfg.Decay
	}
	if f == 1 {
		return
	}
	c.pool.Decay(f)
	for i, s := range c.hosts {
		s.Decay(f)
		c.weight[i] *= f
	}
	for i := range c.heat {
		c.heat[i] *= f
	}
	c.stats.Epochs += uint64(epochs)
}

// decayByClock applies the epochs that have ended since the last decay.
func (c *Collector) decayByClock() {
	now := c.cfg.Clock()
	n := now.Sub(c.lastDecay) / c.cfg.Epoch
	if n <= 0 {
		return
	}
	c.lastDecay = c.lastDecay.Add(n * c.cfg.Epoch)
	c.decay(int(min(n, 64))) // 0.5^64 is zero for any count
}

// Kick asks Run to drain now; wire it to the CHMU notification.
func (c *Collector) Kick() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// DrainOnce drains the source once, ingests what it got and applies the
// epochs the clock says have ended.
func (c *Collector) DrainOnce(buf []hmu.Record) ([]hmu.Record, error) {
	recs, ds, err := c.cfg.Source.Drain(buf[:0])
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.Drains++
	if err != nil {
		c.stats.DrainErrors++
	}
	if ds.Overflow {
		c.stats.Overflows++
	}
	if ds.UnitSize != 0 && ds.UnitSize != 1<<c.unitShift && bits.OnesCount64(ds.UnitSize) == 1 {
		c.cfg.Logger.Info("chmu unit size changed; tracking restarts", "from", uint64(1)<<c.unitShift, "to", ds.UnitSize)
		c.unitShift = uint(bits.TrailingZeros64(ds.UnitSize))
		c.pool.Reset()
		for _, s := range c.hosts {
			s.Reset()
		}
		c.stats.Resets++
	}
	c.ingest(recs)
	c.decayByClock()
	return recs, err
}

// Run drains every Poll and whenever kicked, until ctx ends. Drain errors
// are logged and counted, not fatal: the next drain retries.
func (c *Collector) Run(ctx context.Context) error {
	if c.cfg.Source == nil {
		return errors.New("agg: run: no source")
	}
	t := time.NewTicker(c.cfg.Poll)
	defer t.Stop()
	buf := make([]hmu.Record, 0, 4096)
	for {
		var err error
		if buf, err = c.DrainOnce(buf); err != nil {
			c.cfg.Logger.Warn("chmu drain failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-c.kick:
		}
	}
}

// Top returns the n hottest units of a scope: a host ID, Shared or Pool.
func (c *Collector) Top(scope, n int) []Hot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.top(scope, n)
}

func (c *Collector) top(scope, n int) []Hot {
	s := c.summary(scope)
	if s == nil {
		return nil
	}
	size := uint64(1) << c.unitShift
	var out []Hot
	for _, it := range s.Top(nil, n) {
		if it.Count == 0 {
			break // decayed away
		}
		out = append(out, Hot{DPA: it.Key << c.unitShift, Size: size, Count: it.Count, Err: it.Err})
	}
	return out
}

// HeatOf is the decayed access count of the units covering
// [dpa, dpa+length), summed, from the pool's summary (every record is
// counted there whoever holds the DPA); 0 where nothing is tracked. A
// count is the Space-Saving estimate Top reports: never below the true
// decayed count, above it by at most the unit's Err. It takes the lock
// once and costs at most min(units in the range, PoolK) steps, so an
// eviction policy may call it per block.
func (c *Collector) HeatOf(dpa, length uint64) float64 {
	if length == 0 {
		return 0
	}
	end := dpa + length - 1
	if end < dpa {
		end = ^uint64(0) // the range runs past the top of the DPA space
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return float64(c.pool.SumRange(dpa>>c.unitShift, end>>c.unitShift))
}

// Heatmap is a snapshot of decayed access counts per cell.
type Heatmap struct {
	CellSize uint64
	Cells    []float64 // cell i covers [i·CellSize, (i+1)·CellSize)
}

// Heatmap returns a copy of the heatmap.
func (c *Collector) Heatmap() Heatmap {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Heatmap{CellSize: c.cfg.CellSize, Cells: slices.Clone(c.heat)}
}

// coldBytes is how much of [start, end) lies in cold cells.
func (c *Collector) coldBytes(start, end uint64) uint64 {
	var cold uint64
	for at := start; at < end; {
		cell := at >> c.cellShift
		next := min((cell+1)<<c.cellShift, end)
		if cell >= uint64(len(c.heat)) || c.heat[cell] < c.cfg.ColdBelow {
			cold += next - at
		}
		at = next
	}
	return cold
}

// ColdCapacity is how many of the bytes host holds lie in cold heatmap
// cells. A cell shared with a hotter neighbour counts as hot: the answer
// is at the heatmap's granularity.
func (c *Collector) ColdCapacity(host int) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var cold uint64
	for _, e := range c.extents(host) {
		cold += c.coldBytes(e.DPA, e.End())
	}
	return cold
}

func (c *Collector) extents(host int) []cci.Extent {
	if c.cfg.Extents == nil {
		return nil
	}
	return c.cfg.Extents(host)
}

// ColdAllocation is capacity under one tag that has gone cold.
type ColdAllocation struct {
	Tag       cci.Tag
	Bytes     uint64 // what the host holds under the tag
	ColdBytes uint64
	Extents   []cci.Extent
}

// Hints are placement advice for one host.
type Hints struct {
	Host      int
	Promote   []Hot            // hottest units: keep them close (host DRAM, nearest tier)
	Shrink    []ColdAllocation // allocations at least ShrinkFraction cold, coldest first
	HeldBytes uint64
	ColdBytes uint64
}

// Hints returns up to n units to promote and every shrink candidate of
// host (a host ID or Shared).
func (c *Collector) Hints(host, n int) Hints {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := Hints{Host: host, Promote: c.top(host, n)}
	byTag := map[cci.Tag]*ColdAllocation{}
	var order []cci.Tag
	for _, e := range c.extents(host) {
		cold := c.coldBytes(e.DPA, e.End())
		h.HeldBytes += e.Length
		h.ColdBytes += cold
		a := byTag[e.Tag]
		if a == nil {
			a = &ColdAllocation{Tag: e.Tag}
			byTag[e.Tag] = a
			order = append(order, e.Tag)
		}
		a.Bytes += e.Length
		a.ColdBytes += cold
		a.Extents = append(a.Extents, e)
	}
	for _, t := range order {
		a := byTag[t]
		if a.Bytes > 0 && float64(a.ColdBytes) >= c.cfg.ShrinkFraction*float64(a.Bytes) {
			h.Shrink = append(h.Shrink, *a)
		}
	}
	slices.SortStableFunc(h.Shrink, func(a, b ColdAllocation) int { return cmp.Compare(b.ColdBytes, a.ColdBytes) })
	return h
}

// ScopeReport sums up one scope for metric reports.
type ScopeReport struct {
	Scope      int     // host ID, Shared or Pool
	Accesses   float64 // decayed accesses counted in the scope
	HeldBytes  uint64  // hosts only
	ColdBytes  uint64  // hosts only
	Monitored  int     // units tracked
	ErrorBound uint64  // no unit's count is off by more than this (Space-Saving min)
}

// Report sums up every host, Shared and the pool.
type Report struct {
	UnitSize uint64
	Scopes   []ScopeReport
	Stats    Stats
}

// Report returns the current summary.
func (c *Collector) Report() Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := Report{UnitSize: 1 << c.unitShift, Stats: c.stats}
	for i, s := range c.hosts {
		sr := ScopeReport{Scope: i, Accesses: c.weight[i], Monitored: s.Len(), ErrorBound: s.Min()}
		if i == c.cfg.Hosts {
			sr.Scope = Shared
		}
		for _, e := range c.extents(sr.Scope) {
			sr.HeldBytes += e.Length
			sr.ColdBytes += c.coldBytes(e.DPA, e.End())
		}
		r.Scopes = append(r.Scopes, sr)
	}
	r.Scopes = append(r.Scopes, ScopeReport{Scope: Pool, Accesses: float64(c.pool.N()), Monitored: c.pool.Len(), ErrorBound: c.pool.Min()})
	return r
}

// Stats returns the counters.
func (c *Collector) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}
