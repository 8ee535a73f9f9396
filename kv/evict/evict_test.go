package evict

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// op is one step of a scripted test: add, touch, remove or advance the
// clock.
type op struct {
	kind byte // 'a' add, 't' touch, 'r' remove, 'c' clock +d
	id   uint64
	size uint64
	dpa  uint64
	d    time.Duration
}

func add(id, size, dpa uint64) op { return op{kind: 'a', id: id, size: size, dpa: dpa} }
func touch(id uint64) op          { return op{kind: 't', id: id} }
func remove(id uint64) op         { return op{kind: 'r', id: id} }
func advance(d time.Duration) op  { return op{kind: 'c', d: d} }
func skipSet(ids ...uint64) func(uint64) bool {
	m := map[uint64]bool{}
	for _, id := range ids {
		m[id] = true
	}
	return func(id uint64) bool { return m[id] }
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func run(p Policy, c *clock, ops []op) {
	for _, o := range ops {
		switch o.kind {
		case 'a':
			p.Add(o.id, o.size, []Range{{DPA: o.dpa, Len: o.size}})
		case 't':
			p.Touch(o.id)
		case 'r':
			p.Remove(o.id)
		case 'c':
			c.t = c.t.Add(o.d)
		}
	}
}

// heatMap is a fake CHMU: a density (decayed reads per 4 KiB unit) per
// block-aligned DPA; HeatOf returns density × units, as the CHMU sums.
type heatMap map[uint64]float64

func (h heatMap) HeatOf(dpa, length uint64) float64 {
	return h[dpa] * float64((length+unit-1)/unit)
}

const blk = 64 << 10 // 16 units

func TestLRU(t *testing.T) {
	three := []op{add(1, 10, 0), add(2, 10, 0), add(3, 10, 0)}
	tests := []struct {
		name string
		ops  []op
		need uint64
		skip func(uint64) bool
		want []uint64
		len  int
	}{
		{name: "empty", need: 10, want: nil},
		{name: "need zero", ops: three, need: 0, want: nil, len: 3},
		{name: "oldest first", ops: three, need: 15, want: []uint64{1, 2}, len: 3},
		{name: "exact fit", ops: three, need: 10, want: []uint64{1}, len: 3},
		{name: "touch moves to recent end", ops: append(three, touch(1)), need: 15, want: []uint64{2, 3}, len: 3},
		{name: "touch of unknown id ignored", ops: append(three, touch(9)), need: 15, want: []uint64{1, 2}, len: 3},
		{name: "pinned skipped", ops: three, need: 15, skip: skipSet(1), want: []uint64{2, 3}, len: 3},
		{name: "more than it has", ops: three, need: 100, skip: skipSet(2), want: []uint64{1, 3}, len: 3},
		{name: "removed gone", ops: append(three, remove(1), remove(7)), need: 15, want: []uint64{2, 3}, len: 2},
		{name: "re-add counts as use", ops: append(three, add(1, 10, 0)), need: 15, want: []uint64{2, 3}, len: 3},
		{name: "sizes differ", ops: []op{add(1, 5, 0), add(2, 50, 0), add(3, 5, 0)}, need: 6, want: []uint64{1, 2}, len: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewLRU()
			run(p, &clock{}, tt.ops)
			if got := p.Victims(tt.need, tt.skip); !cmp.Equal(got, tt.want) {
				t.Errorf("Victims(%d) = %v, want %v", tt.need, got, tt.want)
			}
			if got := p.Len(); got != tt.len {
				t.Errorf("Len() = %d, want %d", got, tt.len)
			}
		})
	}
}

func TestHot(t *testing.T) {
	// Blocks 1…4 at DPA 0, blk, 2·blk, 3·blk, added in that order.
	four := []op{add(1, blk, 0), advance(time.Second), add(2, blk, blk), advance(time.Second), add(3, blk, 2*blk), advance(time.Second), add(4, blk, 3*blk)}
	tests := []struct {
		name     string
		ops      []op
		heat     heatMap
		cfg      HotConfig
		need     uint64
		skip     func(uint64) bool
		want     []uint64
		promoted uint64
		after    []uint64 // Victims(everything) after the first call: the new order
	}{
		{name: "no heat is LRU", ops: four, need: 2 * blk, want: []uint64{1, 2}, after: []uint64{1, 2, 3, 4}},
		{name: "hot tail block promoted, not evicted", ops: four, heat: heatMap{0: 3}, need: blk, want: []uint64{2}, promoted: 1, after: []uint64{2, 3, 4, 1}},
		{
			name: "a block read only through DAX mappings is kept",
			ops:  append(four, touch(2)), heat: heatMap{0: 1.5}, need: blk,
			want: []uint64{3}, promoted: 1, after: []uint64{3, 4, 2, 1},
		},
		{
			// Below HotAt: not promoted, but within the window the warm
			// block scores above an equally old cold one.
			name: "warm beats cold within the window",
			ops:  []op{add(1, blk, 0), add(2, blk, blk), add(3, blk, 2*blk)}, heat: heatMap{0: 0.005}, need: blk,
			want: []uint64{2}, after: []uint64{1, 2, 3},
		},
		{
			name: "pinned never, even when cold",
			ops:  four, heat: heatMap{blk: 5}, need: blk, skip: skipSet(1),
			want: []uint64{3}, promoted: 1, after: []uint64{1, 3, 4, 2},
		},
		{
			name: "all hot: the least hot go when need demands",
			ops:  four, heat: heatMap{0: 9, blk: 2, 2 * blk: 4, 3 * blk: 3}, need: 2 * blk,
			want: []uint64{2, 4}, promoted: 4, after: []uint64{1, 2, 3, 4},
		},
		{
			name: "MaxScan bounds the look-ups, the rest by recency",
			ops:  four, heat: heatMap{0: 9, blk: 9, 2 * blk: 9, 3 * blk: 9}, cfg: HotConfig{MaxScan: 2}, need: blk,
			want: []uint64{3}, promoted: 2, after: []uint64{3, 4, 1, 2},
		},
		{
			name: "more than it has",
			ops:  four, need: 100 * blk, skip: skipSet(3),
			want: []uint64{1, 2, 4}, after: []uint64{1, 2, 3, 4},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: time.Unix(1_000_000, 0)}
			var h Heat
			if tt.heat != nil {
				h = tt.heat
			}
			p := NewHotConfig(h, c.now, tt.cfg)
			run(p, c, tt.ops)
			if got := p.Victims(tt.need, tt.skip); !cmp.Equal(got, tt.want) {
				t.Errorf("Victims(%d) = %v, want %v", tt.need, got, tt.want)
			}
			if got := p.Stats().Promoted; got != tt.promoted {
				t.Errorf("promoted %d, want %d", got, tt.promoted)
			}
			// The order the first call left, read with the CHMU silent.
			p.heat = nil
			if got := p.Victims(1<<62, nil); !cmp.Equal(got, tt.after) {
				t.Errorf("order after = %v, want %v", got, tt.after)
			}
		})
	}
}

func TestDensityUnits(t *testing.T) {
	tests := []struct {
		name  string
		where []Range
		heat  float64 // HeatOf's answer per range
		want  float64
	}{
		{name: "aligned", where: []Range{{DPA: 0, Len: 8 * unit}}, heat: 16, want: 2},
		{name: "straddles a unit at both ends", where: []Range{{DPA: unit / 2, Len: unit}}, heat: 4, want: 2},
		{name: "two ranges", where: []Range{{DPA: 0, Len: unit}, {DPA: 10 * unit, Len: 3 * unit}}, heat: 4, want: 2},
		{name: "empty range ignored", where: []Range{{DPA: 0, Len: 0}, {DPA: 0, Len: unit}}, heat: 3, want: 3},
		{name: "no ranges", where: nil, heat: 3, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewHotConfig(HeatFunc(func(_, _ uint64) float64 { return tt.heat }), nil, HotConfig{})
			p.Add(1, 1, tt.where)
			if got := p.density(p.l.nodes[1]); got != tt.want {
				t.Errorf("density = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestHotWithoutHeatIsLRU drives both policies with the same random
// operations: with no heat and a clock that only moves forward, Hot's
// score is monotone in recency, so it must choose exactly what LRU does.
func TestHotWithoutHeatIsLRU(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	c := &clock{t: time.Unix(0, 0)}
	lru, hot := NewLRU(), NewHot(nil, c.now)
	pinned := map[uint64]bool{}
	skip := func(id uint64) bool { return pinned[id] }
	var next uint64
	for i := range 20000 {
		c.t = c.t.Add(time.Duration(r.IntN(3)) * time.Millisecond)
		switch x := r.IntN(10); {
		case x < 4:
			next++
			sz := uint64(1 + r.IntN(8))
			for _, p := range []Policy{lru, hot} {
				p.Add(next, sz, []Range{{DPA: next * blk, Len: sz}})
			}
		case x < 7 && next > 0:
			id := 1 + r.Uint64N(next)
			lru.Touch(id)
			hot.Touch(id)
		case x < 8 && next > 0:
			id := 1 + r.Uint64N(next)
			pinned[id] = !pinned[id]
		default:
			need := uint64(1 + r.IntN(20))
			got, want := hot.Victims(need, skip), lru.Victims(need, skip)
			if !cmp.Equal(got, want) {
				t.Fatalf("step %d: Hot.Victims(%d) = %v, LRU %v", i, need, got, want)
			}
			for _, id := range want[:len(want)/2] {
				lru.Remove(id)
				hot.Remove(id)
			}
		}
		if lru.Len() != hot.Len() {
			t.Fatalf("step %d: Len %d vs %d", i, hot.Len(), lru.Len())
		}
	}
}

// TestVictimsCoverNeed checks the contract on random states: the victims
// are distinct, known, not skipped, coldest-first prefix covering need,
// or every unskipped block when they cannot.
func TestVictimsCoverNeed(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	c := &clock{t: time.Unix(0, 0)}
	heat := heatMap{}
	for _, mk := range []struct {
		name string
		p    Policy
	}{{"lru", NewLRU()}, {"hot", NewHotConfig(heat, c.now, HotConfig{MaxScan: 8, Window: 4})}} {
		t.Run(mk.name, func(t *testing.T) {
			p := mk.p
			sizes := map[uint64]uint64{}
			for id := uint64(1); id <= 300; id++ {
				sizes[id] = uint64(1 + r.IntN(5))
				p.Add(id, sizes[id], []Range{{DPA: id * blk, Len: blk}})
				heat[id*blk] = float64(r.IntN(3))
			}
			for range 500 {
				c.t = c.t.Add(time.Millisecond)
				skip := func(id uint64) bool { return id%7 == 0 }
				need := uint64(r.IntN(2000))
				got := p.Victims(need, skip)
				var sum, avail uint64
				seen := map[uint64]bool{}
				for _, id := range got {
					if seen[id] || skip(id) || sizes[id] == 0 {
						t.Fatalf("Victims(%d) = %v: bad id %d", need, got, id)
					}
					seen[id] = true
					sum += sizes[id]
				}
				for id, s := range sizes {
					if !skip(id) {
						avail += s
					}
				}
				if sum < min(need, avail) {
					t.Fatalf("Victims(%d) sum %d, available %d", need, sum, avail)
				}
				if len(got) > 0 && sum-sizes[got[len(got)-1]] >= need {
					t.Fatalf("Victims(%d) = %v: more than needed (sum %d)", need, got, sum)
				}
				p.Touch(1 + r.Uint64N(300))
			}
		})
	}
}
