package chmu

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/fabric/cci"
	"cxlpool/hmu"
)

const mib = 1 << 20

func ext(dpa, length uint64) cci.Extent { return cci.Extent{DPA: dpa, Length: length} }

func TestSplit(t *testing.T) {
	e := ext(100*mib, 100*mib)
	tests := []struct {
		name          string
		overl         []cci.Extent
		outside, insd []cci.Extent
	}{
		{"none", nil, []cci.Extent{e}, nil},
		{"middle", []cci.Extent{ext(120*mib, 10*mib)}, []cci.Extent{ext(100*mib, 20*mib), ext(130*mib, 70*mib)}, []cci.Extent{ext(120*mib, 10*mib)}},
		{"overlapping pieces merge", []cci.Extent{ext(150*mib, 50*mib), ext(140*mib, 20*mib)}, []cci.Extent{ext(100*mib, 40*mib)}, []cci.Extent{ext(140*mib, 60*mib)}},
		{"whole", []cci.Extent{e}, nil, []cci.Extent{e}},
	}
	for _, tt := range tests {
		out, in := split(e, tt.overl)
		if diff := cmp.Diff(tt.outside, out); diff != "" {
			t.Errorf("%s: outside (-want +got):\n%s", tt.name, diff)
		}
		if diff := cmp.Diff(tt.insd, in); diff != "" {
			t.Errorf("%s: inside (-want +got):\n%s", tt.name, diff)
		}
	}
}

func TestSpaceDPA(t *testing.T) {
	s := newSpace([]cci.Extent{ext(0, 8192), ext(1*mib, 4096), ext(2*mib, 100)}, 4096)
	if s.Units() != 3 {
		t.Fatalf("units: got %d, want 3 (a sub-unit extent adds none)", s.Units())
	}
	got := []uint64{s.DPA(0), s.DPA(1), s.DPA(2)}
	if want := []uint64{0, 4096, mib}; !cmp.Equal(want, got) {
		t.Errorf("DPAs: got %v, want %v", got, want)
	}
}

func TestScatterIsABijection(t *testing.T) {
	for _, n := range []uint64{1, 2, 1000, 1024, 4099} {
		seen := make(map[uint64]bool, n)
		for r := range n {
			u := scatter(r, n)
			if u >= n || seen[u] {
				t.Fatalf("n=%d: rank %d → %d (repeat or out of range)", n, r, u)
			}
			seen[u] = true
		}
	}
}

func TestPatterns(t *testing.T) {
	priv := []cci.Extent{ext(0, 64*mib), ext(512*mib, 64*mib)}
	shared := []cci.Extent{ext(1024*mib, 16*mib)}
	v := View{Private: newSpace(priv, 4096), Shared: newSpace(shared, 4096)}
	in := func(es []cci.Extent, dpa uint64) bool {
		for _, e := range es {
			if dpa >= e.DPA && dpa < e.End() {
				return true
			}
		}
		return false
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const n = 20000
	tests := []struct {
		name  string
		p     Pattern
		check func(t *testing.T, counts map[uint64]int, writes map[uint64]int, r *rand.Rand)
	}{
		{"zipf concentrates on few units", &Zipf{Skew: 1.3}, func(t *testing.T, counts, _ map[uint64]int, _ *rand.Rand) {
			top := 0
			for _, c := range counts {
				top = max(top, c)
			}
			// P(rank 0) = 1/H(n, 1.3) ≈ 0.27 for 36 Ki units.
			if top < n/5 {
				t.Errorf("hottest unit: got %d of %d accesses, want ≥ %d", top, n, n/5)
			}
		}},
		{"hot set gets its share", &HotSet{Units: 16, Hot: 0.9, Period: time.Hour}, func(t *testing.T, counts, _ map[uint64]int, _ *rand.Rand) {
			var cs []int
			for _, c := range counts {
				cs = append(cs, c)
			}
			slices.Sort(cs)
			hot := 0
			for _, c := range cs[max(0, len(cs)-16):] {
				hot += c
			}
			if hot < n*85/100 {
				t.Errorf("hot window: got %d of %d accesses, want ≥ 85%%", hot, n)
			}
		}},
		{"kv reads shared prefixes, writes its own tail", &KVCache{PrefixSkew: 1.2, ReadShared: 0.7, TailUnits: 4, AppendEvery: 100},
			func(t *testing.T, counts, writes map[uint64]int, _ *rand.Rand) {
				for dpa, c := range counts {
					w := writes[dpa]
					if in(shared, dpa) && w != 0 {
						t.Errorf("shared unit %#x written %d times, want reads only", dpa, w)
					}
					if in(priv, dpa) && w != c {
						t.Errorf("private unit %#x: %d writes of %d accesses, want writes only", dpa, w, c)
					}
				}
				if c := counts[shared[0].DPA]; c < n/10 {
					t.Errorf("first prefix unit: got %d reads, want ≥ %d", c, n/10)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			counts, writes := map[uint64]int{}, map[uint64]int{}
			for range n {
				dpa, w, ok := tt.p.Next(r, &v, t0)
				if !ok {
					t.Fatal("no access generated")
				}
				if !in(priv, dpa) && !in(shared, dpa) {
					t.Fatalf("access at %#x outside what the host holds", dpa)
				}
				counts[dpa]++
				if w {
					writes[dpa]++
				}
			}
			tt.check(t, counts, writes, r)
		})
	}
}

func TestHotSetMoves(t *testing.T) {
	v := View{Private: newSpace([]cci.Extent{ext(0, 64*mib)}, 4096)}
	p := &HotSet{Units: 8, Hot: 1, Period: time.Second}
	r := rand.New(rand.NewPCG(3, 4))
	window := func(now time.Time) map[uint64]bool {
		set := map[uint64]bool{}
		for range 1000 {
			dpa, _, _ := p.Next(r, &v, now)
			set[dpa/4096] = true
		}
		return set
	}
	t0 := time.Unix(1000, 0)
	a, b := window(t0), window(t0.Add(time.Second))
	if len(a) != 8 || len(b) != 8 {
		t.Fatalf("window sizes: got %d and %d, want 8", len(a), len(b))
	}
	for u := range a {
		if b[u] {
			t.Errorf("unit %d hot in both periods, want the window to move", u)
		}
	}
}

// TestWorkloadFeedsDevice runs two hosts sharing one range and checks the
// CHMU only ever reports units inside what some host holds, and that the
// shared range is seen as such.
func TestWorkloadFeedsDevice(t *testing.T) {
	dev, clk := newDevice(t, Config{HotlistSize: 1024})
	d, err := hmu.Open(dev, hmu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	in, _ := d.Instance(0)
	if err := in.Start(context.Background(), hmu.Config{Access: hmu.AccessReadWrite, Threshold: 1, UnitSize: 4096,
		Epoch: hmu.Epoch{Scale: 5, Multiplier: 1}}); err != nil {
		t.Fatal(err)
	}
	sharedExt := ext(1024*mib, 4*mib)
	held := map[int][]cci.Extent{
		0: {ext(0, 8*mib), sharedExt},
		1: {ext(256*mib, 8*mib), sharedExt},
	}
	w := NewWorkload(dev, WorkloadConfig{Seed: 9, Clock: clk.Now},
		HostLoad{Host: 0, Extents: func() []cci.Extent { return held[0] }, Pattern: &Zipf{Skew: 1.2}},
		HostLoad{Host: 1, Extents: func() []cci.Extent { return held[1] }, Pattern: &KVCache{PrefixSkew: 1.2, ReadShared: 0.5, TailUnits: 8, AppendEvery: 50}},
	)
	if got := w.views[1].Shared.Units(); got != sharedExt.Length/4096 {
		t.Fatalf("host 1 shared units: got %d, want %d", got, sharedExt.Length/4096)
	}
	w.Step(2000)
	clk.Advance(time.Second)
	w.Step(0)
	recs, _, err := in.Drain(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) == 0 {
		t.Fatal("no hot units reported")
	}
	for _, r := range recs {
		ok := false
		for _, es := range held {
			for _, e := range es {
				ok = ok || (r.DPA >= e.DPA && r.DPA < e.End())
			}
		}
		if !ok {
			t.Errorf("record at %#x outside every host's extents", r.DPA)
		}
	}
	if st := dev.Stats(); st.Accesses != 4000 || st.Epochs != 1 {
		t.Errorf("device stats: got %+v, want 4000 accesses, 1 epoch", st)
	}
}
