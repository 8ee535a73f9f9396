package trace

import (
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/kv/evict"
)

// small is a trace that runs in a second under -race.
var small = Config{Seed: 7, Requests: 800, SystemPrompts: 12, Sessions: 48}

func TestBlockSize(t *testing.T) {
	if got, want := BytesPerToken, 320<<10; got != want {
		t.Errorf("BytesPerToken = %d, want %d (Llama-3-70B: 80 × 8 × 128 × 2 × 2)", got, want)
	}
	if got, want := BlockBytes, 80<<20; got != want {
		t.Errorf("BlockBytes = %d, want %d (256 tokens)", got, want)
	}
}

func TestGenerateDeterministic(t *testing.T) {
	a, err := Generate(small)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate(small)
	// reflect, not cmp: the trace is large and cmp's reporter slow.
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different traces")
	}
	other := small
	other.Seed++
	c, _ := Generate(other)
	if reflect.DeepEqual(a.Requests, c.Requests) {
		t.Error("another seed gave the same trace")
	}
}

func TestGenerateShape(t *testing.T) {
	tr, err := Generate(small)
	if err != nil {
		t.Fatal(err)
	}
	cfg := tr.Config
	hosts := map[int]int{}
	sharedBy := map[Key]map[uint64]bool{} // system prompt blocks: sessions using them
	var prev time.Duration
	turns := map[uint64][]Request{}
	for i, r := range tr.Requests {
		if r.At < prev {
			t.Fatalf("request %d at %v before %v", i, r.At, prev)
		}
		prev = r.At
		hosts[r.Host]++
		if got, want := len(r.Blocks), r.Tokens/BlockTokens; got != want {
			t.Fatalf("request %d: %d blocks for %d tokens, want %d", i, got, r.Tokens, want)
		}
		if r.Tokens > cfg.MaxContext {
			t.Fatalf("request %d: %d tokens over MaxContext %d", i, r.Tokens, cfg.MaxContext)
		}
		for _, k := range r.Blocks[:r.Shared] {
			if sharedBy[k] == nil {
				sharedBy[k] = map[uint64]bool{}
			}
			sharedBy[k][r.Session] = true
		}
		turns[r.Session] = append(turns[r.Session], r)
	}
	if len(hosts) != cfg.Hosts {
		t.Errorf("requests on %d hosts, want all %d", len(hosts), cfg.Hosts)
	}
	// Each later turn's prompt has the previous one's blocks as its prefix.
	multi := 0
	for id, ts := range turns {
		for j := 1; j < len(ts); j++ {
			p, q := ts[j-1].Blocks, ts[j].Blocks
			if len(q) < len(p) || !cmp.Equal(q[:len(p)], p) {
				t.Fatalf("session %d turn %d does not extend turn %d", id, j, j-1)
			}
			multi++
		}
	}
	if multi < len(tr.Requests)/2 {
		t.Errorf("%d of %d requests continue a session, want most", multi, len(tr.Requests))
	}
	widest := 0
	for _, s := range sharedBy {
		widest = max(widest, len(s))
	}
	if widest < 10 {
		t.Errorf("the most shared system-prompt block is used by %d sessions, want many", widest)
	}
	if live, distinct := tr.Live(), tr.Distinct(); live <= 0 || live > distinct {
		t.Errorf("Live() = %d, Distinct() = %d", live, distinct)
	}
}

func TestGenerateRejects(t *testing.T) {
	for _, c := range []Config{
		{Hosts: -1},
		{SystemMin: 10, SystemMax: 5},
		{MaxContext: 100},
		{Sticky: 2},
	} {
		if _, err := Generate(c); err == nil {
			t.Errorf("Generate(%+v) accepted", c)
		}
	}
}

// TestSimulate checks the simulator's accounting and the cases where the
// answer is known without running a policy.
func TestSimulate(t *testing.T) {
	tr, err := Generate(small)
	if err != nil {
		t.Fatal(err)
	}
	half := uint64(tr.Live()) * BlockBytes / 2
	ample := SimConfig{Capacity: tr.WorkingSet()}
	tests := []struct {
		name string
		cfg  SimConfig
	}{
		{"ample", ample},
		{"half live, DAX re-reads", SimConfig{Capacity: half}},
		{"half live, index sees all", SimConfig{Capacity: half, Locations: -1}},
		{"half live, bounded locations", SimConfig{Capacity: half, Locations: 64}},
		{"half live, writes counted", SimConfig{Capacity: half, CountWrites: true}},
	}
	results := map[string]map[string]Result{}
	for _, tt := range tests {
		results[tt.name] = map[string]Result{}
		for _, p := range []struct {
			name string
			f    Factory
		}{{"lru", LRU}, {"hot", Hot}} {
			r, err := Simulate(tr, tt.cfg, p.name, p.f)
			if err != nil {
				t.Fatal(err)
			}
			results[tt.name][p.name] = r
			if r.MaxUsed > r.Capacity {
				t.Errorf("%s/%s: used %d over capacity %d", tt.name, p.name, r.MaxUsed, r.Capacity)
			}
			if got, want := r.BytesReused+r.BytesRecomputed, uint64(r.Blocks)*BlockBytes; got != want {
				t.Errorf("%s/%s: reused+recomputed %d, want %d", tt.name, p.name, got, want)
			}
			if r.DAXRereads > r.Hits || r.Unstored != 0 {
				t.Errorf("%s/%s: %+v", tt.name, p.name, r)
			}
			t.Logf("%s: %v", tt.name, r)
		}
	}
	// With room for everything nothing is evicted and both policies miss
	// only first uses.
	a := results["ample"]
	if a["lru"].Evictions != 0 || a["lru"].HitRate != a["hot"].HitRate {
		t.Errorf("ample: %v / %v", a["lru"], a["hot"])
	}
	if got, want := a["lru"].Blocks-a["lru"].Hits, tr.Distinct(); got != want {
		t.Errorf("ample: %d misses, want %d (first uses)", got, want)
	}
	for name, r := range results {
		if name != "ample" && r["lru"].HitRate >= a["lru"].HitRate {
			t.Errorf("%s: LRU hit rate %v not below the ample %v: no pressure", name, r["lru"].HitRate, a["lru"].HitRate)
		}
	}
	// The point: with re-reads the index does not see, heat wins.
	d := results["half live, DAX re-reads"]
	if d["hot"].HitRate <= d["lru"].HitRate {
		t.Errorf("DAX re-reads: hot %v not above LRU %v", d["hot"].HitRate, d["lru"].HitRate)
	}
}

// TestSimulateNoHeatIsLRU: without a CHMU, Hot orders by recency alone
// and must reproduce LRU exactly, whatever the trace.
func TestSimulateNoHeatIsLRU(t *testing.T) {
	tr, err := Generate(small)
	if err != nil {
		t.Fatal(err)
	}
	cfg := SimConfig{Capacity: uint64(tr.Live()) * BlockBytes / 2, CHMU: CHMUConfig{Disabled: true}}
	l, _ := Simulate(tr, cfg, "x", LRU)
	h, _ := Simulate(tr, cfg, "x", Hot)
	if diff := cmp.Diff(l, h); diff != "" {
		t.Errorf("Hot without heat differs from LRU (-lru +hot):\n%s", diff)
	}
}

func TestSimulateRejectsTinyCapacity(t *testing.T) {
	tr, _ := Generate(small)
	if _, err := Simulate(tr, SimConfig{Capacity: BlockBytes - 1}, "lru", LRU); err == nil {
		t.Error("a capacity below one block was accepted")
	}
}

func TestCHMUHeat(t *testing.T) {
	const mb2 = 2 << 20
	tests := []struct {
		name     string
		accesses [][2]uint64 // dpa, length
		epochs   int         // closed after the accesses
		dpa, len uint64
		want     float64
	}{
		{name: "one full read of two units", accesses: [][2]uint64{{0, 2 * mb2}}, dpa: 0, len: 2 * mb2, want: 1024},
		{name: "half a unit asked", accesses: [][2]uint64{{0, mb2}}, dpa: 0, len: mb2 / 2, want: 256},
		{name: "a 4 KiB read is one", accesses: [][2]uint64{{mb2, 4096}}, dpa: mb2, len: mb2, want: 1},
		{name: "decays by half per epoch", accesses: [][2]uint64{{0, mb2}, {0, mb2}}, epochs: 2, dpa: 0, len: mb2, want: 256},
		{name: "untracked is zero", accesses: [][2]uint64{{0, mb2}}, dpa: 8 * mb2, len: mb2, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCHMU(CHMUConfig{})
			for _, a := range tt.accesses {
				c.access(a[0], a[1])
			}
			c.advance(time.Duration(tt.epochs) * time.Second)
			if got := c.HeatOf(tt.dpa, tt.len); got != tt.want {
				t.Errorf("HeatOf = %v, want %v", got, tt.want)
			}
		})
	}
	var _ evict.Heat = (*CHMU)(nil)
}
