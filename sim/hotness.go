package sim

import (
	"context"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"time"

	"cxlpool/sim/chmu"
)

// The box's CXL Hotness Monitoring Unit (sim/chmu) and the workloads that
// feed it. The CHMU counts what the hosts touch: every Host.ReadAt and
// WriteAt (one access per 64-byte line, as the device sees M2S requests)
// and the synthetic accesses of the workloads started with StartWorkload,
// which aim only at the extents each host holds. A background tick closes
// the CHMU's epochs on time, as the hardware's timer does, and steps the
// workloads; the workloads' aggregate rate is the DIMM load the board's
// thermal model sees.

// accessLine is the span of one counted access: a cache line.
const accessLine = 64

// FullLoadRate is the aggregate workload rate, in accesses per second over
// every host, that the board model takes as 100 % DIMM utilisation.
const FullLoadRate = 1_000_000

// maxWorkloadRate bounds one host's workload rate (accesses per second):
// the generator runs on the daemon's CPU.
const maxWorkloadRate = 1_000_000

// defaultWorkloadTick is how often the background tick runs.
const defaultWorkloadTick = 10 * time.Millisecond

// maxStep bounds the time one step makes up for, so a stalled process
// does not answer with a burst.
const maxStep = 100 * time.Millisecond

// WorkloadKind names a workload pattern.
type WorkloadKind string

// Workload kinds.
const (
	// WorkloadZipf touches everything the host holds with Zipf popularity.
	WorkloadZipf WorkloadKind = "zipf"
	// WorkloadHotSet sends most accesses to a window of the host's private
	// capacity that moves on every Period.
	WorkloadHotSet WorkloadKind = "hotset"
	// WorkloadKVCache reads prompt prefixes in capacity the host shares
	// with other hosts and writes its own newest tokens at a tail that
	// advances through its private capacity.
	WorkloadKVCache WorkloadKind = "kvcache"
)

// WorkloadKinds lists the kinds, for flag help and validation.
var WorkloadKinds = []WorkloadKind{WorkloadZipf, WorkloadHotSet, WorkloadKVCache}

// WorkloadParams tune a workload. Zero fields take the defaults noted.
type WorkloadParams struct {
	// Rate is the host's accesses per second (default 20 000, at most
	// 1 000 000).
	Rate int
	// Skew is the Zipf skew (zipf) or the prefix popularity skew
	// (kvcache); default 1.1.
	Skew float64
	// Writes is the fraction of accesses that write (zipf, hotset;
	// default 0.3).
	Writes float64
	// HotUnits is the hot window in 4 KiB units (hotset; default 256).
	HotUnits uint64
	// HotFraction is the share of accesses sent to the window (hotset;
	// default 0.9).
	HotFraction float64
	// Period is how long the window stays in place (hotset; default 5 s).
	Period time.Duration
	// ReadShared is the fraction of accesses that read the shared prefix
	// (kvcache; default 0.7).
	ReadShared float64
	// TailUnits is how many units the tail writes spread over (kvcache;
	// default 16).
	TailUnits uint64
	// AppendEvery is how many writes fill one unit of the tail (kvcache;
	// default 64).
	AppendEvery int
}

func (p *WorkloadParams) defaults() error {
	if p.Rate == 0 {
		p.Rate = 20_000
	}
	if p.Rate < 0 || p.Rate > maxWorkloadRate {
		return fmt.Errorf("sim: workload rate %d not in 1…%d", p.Rate, maxWorkloadRate)
	}
	setF := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	setF(&p.Skew, 1.1)
	setF(&p.Writes, 0.3)
	setF(&p.HotFraction, 0.9)
	setF(&p.ReadShared, 0.7)
	if p.HotUnits == 0 {
		p.HotUnits = 256
	}
	if p.Period == 0 {
		p.Period = 5 * time.Second
	}
	if p.TailUnits == 0 {
		p.TailUnits = 16
	}
	if p.AppendEvery == 0 {
		p.AppendEvery = 64
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"writes", p.Writes}, {"hot fraction", p.HotFraction}, {"shared reads", p.ReadShared}} {
		if f.v < 0 || f.v > 1 {
			return fmt.Errorf("sim: workload %s %g not in 0…1", f.name, f.v)
		}
	}
	return nil
}

func (p WorkloadParams) pattern(kind WorkloadKind) (chmu.Pattern, error) {
	switch kind {
	case WorkloadZipf:
		return &chmu.Zipf{Skew: p.Skew, Writes: p.Writes}, nil
	case WorkloadHotSet:
		return &chmu.HotSet{Units: p.HotUnits, Hot: p.HotFraction, Period: p.Period, Writes: p.Writes}, nil
	case WorkloadKVCache:
		return &chmu.KVCache{PrefixSkew: p.Skew, ReadShared: p.ReadShared, TailUnits: p.TailUnits, AppendEvery: p.AppendEvery}, nil
	}
	return nil, fmt.Errorf("sim: workload kind %q: want one of %v", kind, WorkloadKinds)
}

// hostWorkload is one host's running workload.
type hostWorkload struct {
	kind    WorkloadKind
	params  WorkloadParams
	pattern chmu.Pattern
}

// workloads is the box's workload state; the tick owns the generator.
type workloads struct {
	hosts map[int]*hostWorkload
	gen   uint64 // bumped by every start and stop

	// Owned by the step (under stepMu).
	w       *chmu.Workload
	built   uint64 // gen the generator was built for
	extents uint64 // extent generation it last read
	owed    float64
	maxRate int
}

// newCHMU builds the box's CHMU from cfg.CHMU with the box's capacity and
// clock as defaults.
func (b *Box) newCHMU() error {
	ccfg := b.cfg.CHMU
	if ccfg.Capacity == 0 {
		ccfg.Capacity = b.cfg.Capacity
	}
	if ccfg.Clock == nil {
		ccfg.Clock = b.cfg.Clock
	}
	if ccfg.UnitSizes == 0 {
		ccfg.UnitSizes = 0x3ff << 4 // 4 KiB … 2 MiB, as chmu's default
	}
	user := ccfg.Notify
	ccfg.Notify = func(inst int) {
		if user != nil {
			user(inst)
		}
		if f := b.chmuNotify.Load(); f != nil {
			(*f)(inst)
		}
	}
	dev, err := chmu.New(ccfg)
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	b.chmu = dev
	// Host accesses are counted per smallest unit the CHMU offers, so
	// every unit size sees the right count.
	b.chmuGrain = 256 << bits.TrailingZeros32(ccfg.UnitSizes)
	b.wl.hosts = map[int]*hostWorkload{}
	return nil
}

// CHMU returns the box's CXL Hotness Monitoring Unit: the register block
// the hmu driver runs against (hmu.Open(box.CHMU(), …)).
func (b *Box) CHMU() *chmu.Device { return b.chmu }

// SetCHMUNotify sets the function the CHMU's interrupt calls (an overflow
// or fill-level crossing whose interrupt CFG0 enables), standing in for
// the MSI; nil removes it. Config.CHMU.Notify, if set, is called as well.
// f runs on the goroutine that made the access and must not block.
func (b *Box) SetCHMUNotify(f func(instance int)) {
	if f == nil {
		b.chmuNotify.Store(nil)
		return
	}
	b.chmuNotify.Store(&f)
}

// countAccess tells the CHMU that n bytes at dpa were read or written:
// one access per cache line, split at CHMU unit boundaries.
func (b *Box) countAccess(dpa uint64, n int, write bool) {
	end := dpa + uint64(max(n, 0))
	for at := dpa; at < end; {
		next := min((at/b.chmuGrain+1)*b.chmuGrain, end)
		b.chmu.Access(at, write, (next-1)/accessLine-at/accessLine+1)
		at = next
	}
}

// CountAccess counts n bytes at device address dpa that something other
// than a host moved (the export server's READs and WRITEs for remote
// racks, rdma.Config.CountAccess): the CHMU sees them as the device would,
// one access per line.
func (b *Box) CountAccess(dpa, n uint64, write bool) {
	b.chmu.AccessRange(dpa, dpa+min(n, 1<<30), write, b.chmuGrain, accessLine)
}

// StartWorkload starts (or replaces) host ld's synthetic workload. It
// aims at whatever the host holds, following grants and releases; a host
// holding nothing generates nothing. A head handed to an external host
// (SetExternal) gets none: its memory is that host's program's, and the
// call only logs so.
func (b *Box) StartWorkload(ld int, kind WorkloadKind, p WorkloadParams) error {
	if ld < 0 || ld >= len(b.hosts) {
		return fmt.Errorf("sim: workload: no host %d", ld)
	}
	if b.External(ld) {
		b.log.Debug("workload not started: the head has an external host", "host", ld, "kind", kind)
		return nil
	}
	if err := p.defaults(); err != nil {
		return err
	}
	pat, err := p.pattern(kind)
	if err != nil {
		return err
	}
	b.wlMu.Lock()
	b.wl.hosts[ld] = &hostWorkload{kind: kind, params: p, pattern: pat}
	b.wl.gen++
	b.wlMu.Unlock()
	b.log.Info("workload started", "host", ld, "kind", kind, "rate", p.Rate)
	b.updateLoad()
	return nil
}

// StopWorkload stops host ld's workload, if it runs one.
func (b *Box) StopWorkload(ld int) {
	b.wlMu.Lock()
	_, ok := b.wl.hosts[ld]
	delete(b.wl.hosts, ld)
	b.wl.gen++
	b.wlMu.Unlock()
	if ok {
		b.log.Info("workload stopped", "host", ld)
		b.updateLoad()
	}
}

// Workloads returns the kind of workload each host runs.
func (b *Box) Workloads() map[int]WorkloadKind {
	b.wlMu.Lock()
	defer b.wlMu.Unlock()
	out := make(map[int]WorkloadKind, len(b.wl.hosts))
	for h, w := range b.wl.hosts {
		out[h] = w.kind
	}
	return out
}

// updateLoad drives the board's DIMM load from the workloads' rates.
func (b *Box) updateLoad() {
	b.wlMu.Lock()
	var sum int
	for _, w := range b.wl.hosts {
		sum += w.params.Rate
	}
	b.wlMu.Unlock()
	b.board.SetLoad(float64(sum) / FullLoadRate)
}

// StepWorkloads closes the CHMU epochs that have ended and runs the
// workloads for elapsed (each host issues its rate × elapsed accesses,
// at most maxStep's worth). The background tick calls it; tests that turn
// the tick off (Config.WorkloadTick < 0) call it themselves.
func (b *Box) StepWorkloads(elapsed time.Duration) {
	b.stepMu.Lock()
	defer b.stepMu.Unlock()
	b.chmu.Tick()
	b.wlMu.Lock()
	gen := b.wl.gen
	var running []int
	rates := map[int]int{}
	pats := map[int]chmu.Pattern{}
	if gen != b.wl.built {
		for h, w := range b.wl.hosts {
			running = append(running, h)
			rates[h], pats[h] = w.params.Rate, w.pattern
		}
	}
	b.wlMu.Unlock()
	if gen != b.wl.built {
		b.rebuildWorkload(running, rates, pats)
		b.wl.built = gen
	}
	if b.wl.w == nil {
		return
	}
	if g := b.extentGen(); g != b.wl.extents {
		b.wl.w.Refresh()
		b.wl.extents = g
	}
	b.wl.owed += float64(b.wl.maxRate) * min(elapsed, maxStep).Seconds()
	n := int(b.wl.owed)
	b.wl.owed -= float64(n)
	if n > 0 {
		b.wl.w.Step(n)
	}
}

// rebuildWorkload makes a generator over every host, so capacity shared
// with any other host is seen as shared; hosts without a workload stay
// idle, the others are thinned to their rate.
func (b *Box) rebuildWorkload(running []int, rates map[int]int, pats map[int]chmu.Pattern) {
	b.wl.w, b.wl.maxRate, b.wl.owed = nil, 0, 0
	if len(running) == 0 {
		return
	}
	for _, r := range rates {
		b.wl.maxRate = max(b.wl.maxRate, r)
	}
	var loads []chmu.HostLoad
	for _, h := range b.hosts {
		var p chmu.Pattern = idle{}
		if pat, ok := pats[h.ld]; ok {
			p = &thinned{p: pat, keep: float64(rates[h.ld]) / float64(b.wl.maxRate)}
		}
		loads = append(loads, chmu.HostLoad{Host: h.ld, Extents: h.Extents, Pattern: p})
	}
	slices.Sort(running)
	b.wl.w = chmu.NewWorkload(b.chmu, chmu.WorkloadConfig{Seed: uint64(running[0]), Clock: b.cfg.Clock}, loads...)
	b.wl.extents = b.extentGen()
}

// extentGen changes whenever any host's extent list does.
func (b *Box) extentGen() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var g uint64
	for _, l := range b.lds {
		g += uint64(l.gen)
	}
	return g
}

// runWorkloads is the background tick.
func (b *Box) runWorkloads(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			b.StepWorkloads(now.Sub(last))
			last = now
		}
	}
}

// idle is the pattern of a host without a workload.
type idle struct{}

func (idle) Next(*rand.Rand, *chmu.View, time.Time) (uint64, bool, bool) { return 0, false, false }

// thinned issues a fraction keep of its pattern's steps, so hosts with
// different rates share one generator.
type thinned struct {
	p    chmu.Pattern
	keep float64
}

func (t *thinned) Next(r *rand.Rand, v *chmu.View, now time.Time) (uint64, bool, bool) {
	if t.keep < 1 && r.Float64() >= t.keep {
		return 0, false, false
	}
	return t.p.Next(r, v, now)
}
