package chmu

import (
	"cmp"
	"context"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"cxlpool/fabric/cci"
)

// Space is a list of DPA ranges seen as consecutive units of one size.
type Space struct {
	ranges []cci.Extent
	first  []uint64 // unit number of each range's first unit
	units  uint64
	unit   uint64
}

func newSpace(ranges []cci.Extent, unit uint64) Space {
	s := Space{unit: unit}
	for _, r := range ranges {
		n := r.Length / unit
		if n == 0 {
			continue
		}
		s.ranges = append(s.ranges, r)
		s.first = append(s.first, s.units)
		s.units += n
	}
	return s
}

// Units is the number of units in the space.
func (s *Space) Units() uint64 { return s.units }

// DPA returns the address of unit i (i < Units).
func (s *Space) DPA(i uint64) uint64 {
	j, found := slices.BinarySearch(s.first, i)
	if !found {
		j--
	}
	return s.ranges[j].DPA + (i-s.first[j])*s.unit
}

// View is what one host holds, split into the capacity it alone holds and
// the capacity it shares with other hosts of the workload.
type View struct {
	Private, Shared Space
}

// Pattern generates one host's accesses. Patterns keep state (a cursor, a
// cached distribution) and are not shared between hosts.
type Pattern interface {
	// Next returns the next access, or ok=false when the view offers the
	// pattern nothing to touch.
	Next(r *rand.Rand, v *View, now time.Time) (dpa uint64, write bool, ok bool)
}

// zipfOver caches a Zipf sampler for a space of n units.
type zipfOver struct {
	z *rand.Zipf
	r *rand.Rand
	n uint64
}

func (c *zipfOver) rank(r *rand.Rand, skew float64, n uint64) uint64 {
	if c.z == nil || c.n != n || c.r != r {
		c.z, c.n, c.r = rand.NewZipf(r, max(skew, 1.0001), 1, n-1), n, r
	}
	if n == 1 {
		return 0
	}
	return c.z.Uint64()
}

// scatter spreads ranks over n units so the hot ones are not neighbours:
// multiplication by an odd constant modulo n when that is a bijection
// (n a power of two), else a stride coprime with n.
func scatter(rank, n uint64) uint64 {
	if n&(n-1) == 0 {
		return rank * 0x9e3779b97f4a7c15 & (n - 1)
	}
	stride := uint64(0x9e3779b97f4a7c15) % n
	for gcd(stride, n) != 1 {
		stride++
	}
	hi, lo := bits.Mul64(rank, stride)
	return bits.Rem64(hi, lo, n)
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Zipf touches all the host holds (private and shared) with Zipf(Skew)
// popularity; Skew must be > 1 (math/rand/v2's sampler), smaller values
// are raised to just above 1.
type Zipf struct {
	Skew   float64
	Writes float64 // fraction of accesses that are writes
	z      zipfOver
}

// Next implements Pattern.
func (p *Zipf) Next(r *rand.Rand, v *View, _ time.Time) (uint64, bool, bool) {
	np, ns := v.Private.Units(), v.Shared.Units()
	n := np + ns
	if n == 0 {
		return 0, false, false
	}
	i := scatter(p.z.rank(r, p.Skew, n), n)
	w := r.Float64() < p.Writes
	if i < np {
		return v.Private.DPA(i), w, true
	}
	return v.Shared.DPA(i - np), w, true
}

// HotSet sends Hot of the accesses to a window of Units consecutive
// private units that moves to the next window every Period, and the rest
// uniformly over everything private.
type HotSet struct {
	Units  uint64
	Hot    float64
	Period time.Duration
	Writes float64
}

// Next implements Pattern.
func (p *HotSet) Next(r *rand.Rand, v *View, now time.Time) (uint64, bool, bool) {
	n := v.Private.Units()
	if n == 0 {
		return 0, false, false
	}
	w := r.Float64() < p.Writes
	if r.Float64() >= p.Hot || p.Units == 0 {
		return v.Private.DPA(r.Uint64N(n)), w, true
	}
	size := min(p.Units, n)
	var start uint64
	if p.Period > 0 {
		start = uint64(now.UnixNano()/int64(p.Period)) * size % n
	}
	return v.Private.DPA((start + r.Uint64N(size)) % n), w, true
}

// KVCache is an inference server's KV cache: reads of prompt prefixes
// shared by every host (Zipf over the shared space, rank 0 first: the
// start of a prefix is common to more requests than its end) and writes
// of the host's own newest tokens at a tail that advances through its
// private space, one unit every AppendEvery writes, with writes spread
// over the last TailUnits units.
type KVCache struct {
	PrefixSkew  float64
	ReadShared  float64 // fraction of accesses that read the shared prefix
	TailUnits   uint64
	AppendEvery int
	z           zipfOver
	cursor      uint64
	writes      int
}

// Next implements Pattern.
func (p *KVCache) Next(r *rand.Rand, v *View, _ time.Time) (uint64, bool, bool) {
	ns, np := v.Shared.Units(), v.Private.Units()
	if ns > 0 && (np == 0 || r.Float64() < p.ReadShared) {
		return v.Shared.DPA(p.z.rank(r, p.PrefixSkew, ns)), false, true
	}
	if np == 0 {
		return 0, false, false
	}
	if p.writes++; p.AppendEvery > 0 && p.writes%p.AppendEvery == 0 {
		p.cursor = (p.cursor + 1) % np
	}
	back := r.Uint64N(max(min(p.TailUnits, np), 1))
	return v.Private.DPA((p.cursor%np + np - back) % np), true, true
}

// HostLoad is one host's workload.
type HostLoad struct {
	Host    int
	Extents func() []cci.Extent // what the host holds now, e.g. sim.Box.Host(ld).Extents
	Pattern Pattern
}

// WorkloadConfig configures a Workload.
type WorkloadConfig struct {
	UnitSize uint64 // granularity of generated addresses (default 4096)
	Seed     uint64
	Clock    func() time.Time // default time.Now; patterns see it
}

// Workload feeds a Device with the accesses of several hosts. Each host
// aims only at DPA inside the extents it holds; capacity held by more than
// one host of the workload is its shared space.
type Workload struct {
	dev   *Device
	cfg   WorkloadConfig
	mu    sync.Mutex
	rng   *rand.Rand
	loads []HostLoad
	views []View
}

// NewWorkload builds a workload and reads the hosts' extents once.
func NewWorkload(dev *Device, cfg WorkloadConfig, loads ...HostLoad) *Workload {
	if cfg.UnitSize == 0 {
		cfg.UnitSize = 4096
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	w := &Workload{dev: dev, cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x776b6c64)), loads: loads}
	w.Refresh()
	return w
}

// Refresh re-reads every host's extents (call it after grants change).
func (w *Workload) Refresh() {
	per := make([][]cci.Extent, len(w.loads))
	for i, l := range w.loads {
		per[i] = l.Extents()
	}
	views := make([]View, len(w.loads))
	for i, es := range per {
		var priv, shared []cci.Extent
		for _, e := range es {
			var overl []cci.Extent
			for j, other := range per {
				if j == i {
					continue
				}
				for _, o := range other {
					if s, t := max(e.DPA, o.DPA), min(e.End(), o.End()); s < t {
						overl = append(overl, cci.Extent{DPA: s, Length: t - s, Tag: e.Tag})
					}
				}
			}
			p, s := split(e, overl)
			priv, shared = append(priv, p...), append(shared, s...)
		}
		views[i] = View{Private: newSpace(priv, w.cfg.UnitSize), Shared: newSpace(shared, w.cfg.UnitSize)}
	}
	w.mu.Lock()
	w.views = views
	w.mu.Unlock()
}

// split cuts e into the parts outside and inside the union of overl.
func split(e cci.Extent, overl []cci.Extent) (outside, inside []cci.Extent) {
	slices.SortFunc(overl, func(a, b cci.Extent) int { return cmp.Compare(a.DPA, b.DPA) })
	at := e.DPA
	piece := func(s, t uint64) cci.Extent {
		return cci.Extent{DPA: s, Length: t - s, Tag: e.Tag, SharedSeq: e.SharedSeq}
	}
	for i := 0; i < len(overl); {
		s, t := overl[i].DPA, overl[i].End()
		for i++; i < len(overl) && overl[i].DPA <= t; i++ {
			t = max(t, overl[i].End())
		}
		if s > at {
			outside = append(outside, piece(at, s))
		}
		inside = append(inside, piece(max(s, at), t))
		at = max(at, t)
	}
	if at < e.End() {
		outside = append(outside, piece(at, e.End()))
	}
	return outside, inside
}

// Step issues n accesses per host, interleaved round-robin, then closes
// the epochs the clock says have ended.
func (w *Workload) Step(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.cfg.Clock()
	for range n {
		for i, l := range w.loads {
			if dpa, write, ok := l.Pattern.Next(w.rng, &w.views[i], now); ok {
				w.dev.Access(dpa, write, 1)
			}
		}
	}
	w.dev.Tick()
}

// Run steps every interval with n accesses per host and refreshes the
// extents every refresh (0: never) until ctx ends.
func (w *Workload) Run(ctx context.Context, interval time.Duration, n int, refresh time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if refresh > 0 && now.Sub(last) >= refresh {
				w.Refresh()
				last = now
			}
			w.Step(n)
		}
	}
}
