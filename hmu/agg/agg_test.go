package agg

import (
	stdcmp "cmp"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/dcd"
	"cxlpool/fabric/cci"
	"cxlpool/hmu"
	"cxlpool/hmu/hmutest"
)

const (
	mib   = uint64(1) << 20
	block = 256 * mib
)

func ext(dpa, length uint64, tag byte) cci.Extent {
	return cci.Extent{DPA: dpa, Length: length, Tag: cci.Tag{tag}}
}

func TestLayout(t *testing.T) {
	per := map[int][]cci.Extent{
		0: {ext(0, 2*block, 1), ext(8*block, block, 9)},
		1: {ext(2*block, block, 2), ext(8*block, block, 9)},
		3: {ext(4*block, block, 3)},
	}
	// Unaligned extents force the binary-search path.
	odd := map[int][]cci.Extent{0: {ext(0x800, 0x800, 1)}, 1: {ext(0x1000, 0x1800, 2)}}
	tests := []struct {
		name  string
		l     *Layout
		dpa   uint64
		host  int
		ok    bool
		table bool
	}{
		{"host 0 first block", NewLayout(per), 0, 0, true, true},
		{"host 0 last byte", NewLayout(per), 2*block - 1, 0, true, true},
		{"host 1", NewLayout(per), 2*block + 5, 1, true, true},
		{"gap", NewLayout(per), 3 * block, 0, false, true},
		{"host 3", NewLayout(per), 4*block + 4096, 3, true, true},
		{"shared", NewLayout(per), 8*block + 1, Shared, true, true},
		{"past the end", NewLayout(per), 100 * block, 0, false, true},
		{"odd: before", NewLayout(odd), 0x7ff, 0, false, false},
		{"odd: host 0", NewLayout(odd), 0x800, 0, true, false},
		{"odd: host 1", NewLayout(odd), 0x27ff, 1, true, false},
		{"odd: after", NewLayout(odd), 0x2800, 0, false, false},
		{"empty", NewLayout(nil), 0, 0, false, false},
	}
	for _, tt := range tests {
		h, ok := tt.l.HostOf(tt.dpa)
		if h != tt.host || ok != tt.ok {
			t.Errorf("%s: HostOf(%#x) = %d, %v; want %d, %v", tt.name, tt.dpa, h, ok, tt.host, tt.ok)
		}
		if (tt.l.table != nil) != tt.table {
			t.Errorf("%s: direct table used %v, want %v", tt.name, tt.l.table != nil, tt.table)
		}
	}
	l := NewLayout(per)
	if diff := cmp.Diff([]int{0, 1, 3}, l.Hosts()); diff != "" {
		t.Errorf("Hosts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]cci.Extent{ext(8*block, block, 9)}, l.Extents(Shared)); diff != "" {
		t.Errorf("Extents(Shared) (-want +got):\n%s", diff)
	}
}

func TestLayoutFromGrants(t *testing.T) {
	grants := []dcd.Grant{
		{Host: 2, State: dcd.GrantGranted, Extents: []cci.Extent{ext(0, block, 1)}},
		{Host: 2, State: dcd.GrantReleased, Extents: []cci.Extent{ext(block, block, 2)}},
		{Host: 5, State: dcd.GrantReleasing, Extents: []cci.Extent{ext(2*block, block, 3)}},
		{Host: 6, State: dcd.GrantFailed, Extents: []cci.Extent{ext(3*block, block, 4)}},
	}
	l := LayoutFromGrants(grants)
	for _, tt := range []struct {
		dpa  uint64
		host int
		ok   bool
	}{{0, 2, true}, {block, 0, false}, {2 * block, 5, true}, {3 * block, 0, false}} {
		if h, ok := l.HostOf(tt.dpa); h != tt.host || ok != tt.ok {
			t.Errorf("HostOf(%#x) = %d, %v; want %d, %v", tt.dpa, h, ok, tt.host, tt.ok)
		}
	}
	live := NewLiveLayout(nil)
	if _, ok := live.HostOf(0); ok {
		t.Error("empty live layout: HostOf(0) ok, want not held")
	}
	live.Store(l)
	if h, ok := live.HostOf(0); h != 2 || !ok {
		t.Errorf("live layout after Store: got %d, %v; want 2, true", h, ok)
	}
}

// fixture: host 0 holds a hot chunk (tag 1, blocks 0–1) and a cold one
// (tag 2, blocks 2–3); host 1 holds block 4; block 8 is shared.
func newCollector(t *testing.T, mod func(*Config)) (*Collector, *hmutest.Clock) {
	t.Helper()
	per := map[int][]cci.Extent{
		0: {ext(0, 2*block, 1), ext(2*block, 2*block, 2)},
		1: {ext(4*block, block, 3)},
		2: {ext(8*block, block, 9)},
		3: {ext(8*block, block, 9)},
	}
	l := NewLayout(per)
	clk := hmutest.NewClock()
	cfg := Config{HostOf: l.HostOf, Extents: l.Extents, Capacity: 16 * block, Clock: clk.Now, HostK: 16, PoolK: 32}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, clk
}

func TestIngestTopAndHeat(t *testing.T) {
	c, _ := newCollector(t, nil)
	c.Ingest([]hmu.Record{
		{DPA: 4096, Count: 500},
		{DPA: 8192, Count: 300},
		{DPA: 4*block + 4096, Count: 200},
		{DPA: 8 * block, Count: 100},
		{DPA: 12 * block, Count: 50}, // nobody holds it
		{DPA: 4096, Count: 0},        // counts as 1
	})
	tests := []struct {
		scope int
		want  []Hot
	}{
		{0, []Hot{{DPA: 4096, Size: 4096, Count: 501}, {DPA: 8192, Size: 4096, Count: 300}}},
		{1, []Hot{{DPA: 4*block + 4096, Size: 4096, Count: 200}}},
		{Shared, []Hot{{DPA: 8 * block, Size: 4096, Count: 100}}},
		{Pool, []Hot{{DPA: 4096, Size: 4096, Count: 501}, {DPA: 8192, Size: 4096, Count: 300}, {DPA: 4*block + 4096, Size: 4096, Count: 200}}},
		{7, nil},
		{99, nil},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, c.Top(tt.scope, 3)); diff != "" {
			t.Errorf("Top(%d) (-want +got):\n%s", tt.scope, diff)
		}
	}
	hm := c.Heatmap()
	if hm.CellSize != block || len(hm.Cells) != 16 {
		t.Fatalf("heatmap: cell %d × %d, want %d × 16", hm.CellSize, len(hm.Cells), block)
	}
	wantCells := map[int]float64{0: 801, 4: 200, 8: 100, 12: 50}
	for i, v := range hm.Cells {
		if v != wantCells[i] {
			t.Errorf("cell %d: got %v, want %v", i, v, wantCells[i])
		}
	}
	if st := c.Stats(); st.Records != 6 || st.Weight != 1151 || st.Unmapped != 1 {
		t.Errorf("stats: got %+v, want 6 records, 1151 weight, 1 unmapped", st)
	}
}

func TestColdCapacityAndHints(t *testing.T) {
	c, _ := newCollector(t, nil)
	c.Ingest([]hmu.Record{{DPA: 4096, Count: 500}, {DPA: block + 4096, Count: 10}, {DPA: 8 * block, Count: 5}})
	if got, want := c.ColdCapacity(0), 2*block; got != want {
		t.Errorf("ColdCapacity(0): got %d, want %d (tag 2's blocks)", got, want)
	}
	if got, want := c.ColdCapacity(1), block; got != want {
		t.Errorf("ColdCapacity(1): got %d, want %d", got, want)
	}
	h := c.Hints(0, 1)
	want := Hints{
		Host:      0,
		Promote:   []Hot{{DPA: 4096, Size: 4096, Count: 500}},
		Shrink:    []ColdAllocation{{Tag: cci.Tag{2}, Bytes: 2 * block, ColdBytes: 2 * block, Extents: []cci.Extent{ext(2*block, 2*block, 2)}}},
		HeldBytes: 4 * block,
		ColdBytes: 2 * block,
	}
	if diff := cmp.Diff(want, h); diff != "" {
		t.Errorf("Hints(0) (-want +got):\n%s", diff)
	}
	if h := c.Hints(Shared, 5); len(h.Shrink) != 0 || h.HeldBytes != block {
		t.Errorf("Hints(Shared): got %+v, want no shrink, %d held", h, block)
	}
	// Decay makes the lukewarm block cold: block 1's 10 accesses fade below 1
	// after 4 halvings, block 0's 500 do not.
	for range 4 {
		c.Decay()
	}
	if got, want := c.ColdCapacity(0), 3*block; got != want {
		t.Errorf("after 4 decays: ColdCapacity(0) got %d, want %d", got, want)
	}
	for range 6 {
		c.Decay()
	}
	if got, want := c.ColdCapacity(0), 4*block; got != want {
		t.Errorf("after 10 decays: ColdCapacity(0) got %d, want %d", got, want)
	}
	if h := c.Hints(0, 5); len(h.Shrink) != 2 || len(h.Promote) != 0 {
		t.Errorf("after 10 decays: got %d shrink, %d promote; want 2, 0", len(h.Shrink), len(h.Promote))
	}
}

// fakeSource hands out queued batches and reports each drain.
type fakeSource struct {
	mu      sync.Mutex
	batches [][]hmu.Record
	unit    uint64
	err     error
	drained chan struct{}
}

func (s *fakeSource) Drain(dst []hmu.Record) ([]hmu.Record, hmu.DrainStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() {
		if s.drained != nil {
			select {
			case s.drained <- struct{}{}:
			default:
			}
		}
	}()
	ds := hmu.DrainStatus{UnitSize: s.unit}
	if s.err != nil {
		return dst, ds, s.err
	}
	if len(s.batches) > 0 {
		dst = append(dst, s.batches[0]...)
		ds.Entries = len(s.batches[0])
		s.batches = s.batches[1:]
	}
	return dst, ds, nil
}

func TestDrainDecaysByClock(t *testing.T) {
	src := &fakeSource{unit: 4096, batches: [][]hmu.Record{{{DPA: 0, Count: 800}}, {{DPA: 0, Count: 8}}}}
	c, clk := newCollector(t, func(c *Config) { c.Source = src })
	if _, err := c.DrainOnce(nil); err != nil {
		t.Fatal(err)
	}
	clk.Advance(3*time.Second + time.Millisecond) // three 1 s epochs
	if _, err := c.DrainOnce(nil); err != nil {
		t.Fatal(err)
	}
	if got := c.Top(0, 1); len(got) != 1 || got[0].Count != (800+8)/8 {
		t.Errorf("after 3 epochs: got %+v, want count %d", got, (800+8)/8)
	}
	if st := c.Stats(); st.Epochs != 3 || st.Drains != 2 {
		t.Errorf("stats: got %+v, want 3 epochs, 2 drains", st)
	}
}

func TestUnitSizeChangeResets(t *testing.T) {
	src := &fakeSource{unit: 4096, batches: [][]hmu.Record{{{DPA: 0, Count: 5}}}}
	c, _ := newCollector(t, func(c *Config) { c.Source = src })
	c.DrainOnce(nil)
	src.unit = 2 * mib
	src.batches = [][]hmu.Record{{{DPA: 2 * mib, Count: 7}}}
	c.DrainOnce(nil)
	want := []Hot{{DPA: 2 * mib, Size: 2 * mib, Count: 7}}
	if diff := cmp.Diff(want, c.Top(0, 5)); diff != "" {
		t.Errorf("Top after unit change (-want +got):\n%s", diff)
	}
	if r := c.Report(); r.UnitSize != 2*mib || r.Stats.Resets != 1 {
		t.Errorf("report: unit %d, resets %d; want %d, 1", r.UnitSize, r.Stats.Resets, 2*mib)
	}
}

func TestRunDrainsOnKick(t *testing.T) {
	src := &fakeSource{unit: 4096, drained: make(chan struct{}, 1)}
	c, _ := newCollector(t, func(c *Config) { c.Source = src; c.Poll = time.Hour })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	<-src.drained // the first drain happens at start
	src.mu.Lock()
	src.batches = [][]hmu.Record{{{DPA: 4096, Count: 3}}}
	src.mu.Unlock()
	c.Kick()
	<-src.drained
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := c.Top(0, 1); len(got) != 1 || got[0].Count != 3 {
		t.Errorf("after kick: got %+v, want one unit with count 3", got)
	}
}

func TestDrainErrorsCounted(t *testing.T) {
	src := &fakeSource{err: errors.New("bus error")}
	c, _ := newCollector(t, func(c *Config) { c.Source = src })
	if _, err := c.DrainOnce(nil); err == nil {
		t.Fatal("DrainOnce: got nil error, want the source's")
	}
	if st := c.Stats(); st.DrainErrors != 1 {
		t.Errorf("drain errors: got %d, want 1", st.DrainErrors)
	}
}

func TestConfigErrors(t *testing.T) {
	host := func(uint64) (int, bool) { return 0, false }
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no HostOf", Config{}},
		{"unit not a power of two", Config{HostOf: host, UnitSize: 3000}},
		{"cell not a power of two", Config{HostOf: host, CellSize: 3 * mib}},
		{"too many cells", Config{HostOf: host, CellSize: 4096}},
	}
	for _, tt := range tests {
		if _, err := New(tt.cfg); err == nil {
			t.Errorf("%s: got nil error", tt.name)
		}
	}
	c, _ := New(Config{HostOf: host})
	if err := c.Run(context.Background()); err == nil {
		t.Error("Run without a source: got nil error")
	}
}

func TestReport(t *testing.T) {
	c, _ := newCollector(t, func(c *Config) { c.Hosts = 4 })
	c.Ingest([]hmu.Record{{DPA: 4096, Count: 10}, {DPA: 8 * block, Count: 4}})
	r := c.Report()
	if len(r.Scopes) != 6 { // 4 hosts, Shared, Pool
		t.Fatalf("scopes: got %d, want 6", len(r.Scopes))
	}
	want := []ScopeReport{
		{Scope: 0, Accesses: 10, HeldBytes: 4 * block, ColdBytes: 3 * block, Monitored: 1},
		{Scope: 1, HeldBytes: block, ColdBytes: block},
		{Scope: 2, HeldBytes: block},
		{Scope: 3, HeldBytes: block},
		{Scope: Shared, Accesses: 4, HeldBytes: block, Monitored: 1},
		{Scope: Pool, Accesses: 14, Monitored: 2},
	}
	if diff := cmp.Diff(want, r.Scopes); diff != "" {
		t.Errorf("scopes (-want +got):\n%s", diff)
	}
}

// TestHeatOf: the heat of a range is the decayed counts of the units
// covering it, summed, whoever holds them; 0 where nothing is tracked;
// it decays with the collector; and it is safe beside ingestion.
func TestHeatOf(t *testing.T) {
	c, _ := newCollector(t, nil)
	c.Ingest([]hmu.Record{
		{DPA: 4096, Count: 500},
		{DPA: 8192, Count: 300},
		{DPA: 8 * block, Count: 100}, // shared
		{DPA: 12 * block, Count: 50}, // nobody holds it: the pool still counts it
	})
	tests := []struct {
		name        string
		dpa, length uint64
		want        float64
	}{
		{"one unit", 4096, 4096, 500},
		{"a byte of a unit", 4096 + 17, 1, 500},
		{"straddling two units", 8191, 2, 800},
		{"a block of both", 0, 64 << 10, 800},
		{"shared", 8 * block, 4096, 100},
		{"held by nobody", 12 * block, block, 50},
		{"untracked", 3 * block, block, 0},
		{"empty", 4096, 0, 0},
		{"the whole space", 0, ^uint64(0), 950},
		{"past the top", ^uint64(0) - 4095, 1 << 20, 0},
	}
	for _, tt := range tests {
		if got := c.HeatOf(tt.dpa, tt.length); got != tt.want {
			t.Errorf("%s: HeatOf(%#x, %#x): got %v, want %v", tt.name, tt.dpa, tt.length, got, tt.want)
		}
	}
	c.Decay()
	if got, want := c.HeatOf(4096, 4096), 250.0; got != want {
		t.Errorf("after a decay: got %v, want %v", got, want)
	}

	var wg sync.WaitGroup
	wg.Go(func() {
		for range 200 {
			c.Ingest([]hmu.Record{{DPA: 4096, Count: 1}, {DPA: 16384, Count: 2}})
		}
	})
	for range 200 {
		if got := c.HeatOf(0, 1<<20); got < 250 {
			t.Fatalf("heat while ingesting: got %v, want ≥ 250", got)
		}
	}
	wg.Wait()
}

// TestLayoutWithout: taking a grant's extents out of a layout answers as
// the layout built anew from what is left, at every edge and between
// them, on random layouts (blocks and unaligned ranges, shared capacity,
// adjacent grants of one host); and it takes the fast path whenever no
// shared capacity lies under the extents.
func TestLayoutWithout(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	fast, tries := 0, 0
	for range 2000 {
		unit := uint64(block)
		if rng.IntN(4) == 0 {
			unit = 0x800 // unaligned: the binary-search path
		}
		// grants[h] are host h's grants, each a list of extents.
		grants := map[int][][]cci.Extent{}
		shared := false
		for i := range 4 + rng.IntN(40) {
			h := rng.IntN(4)
			var g []cci.Extent
			for range 1 + rng.IntN(2) {
				at := uint64(rng.IntN(64))
				if rng.IntN(8) == 0 {
					shared = true // may overlap another host's
				} else {
					at = uint64(64 + i*4 + len(g)*2)
				}
				// One tag for all: a shared range's tag is its chunk's,
				// and NewLayout takes it from whichever holder it meets.
				g = append(g, ext(at*unit, unit*uint64(1+rng.IntN(2)), 1))
			}
			grants[h] = append(grants[h], g)
		}
		perOf := func(skipHost, skipGrant int) map[int][]cci.Extent {
			per := map[int][]cci.Extent{}
			for h, gs := range grants {
				for i, g := range gs {
					if h != skipHost || i != skipGrant {
						per[h] = append(per[h], g...)
					}
				}
			}
			return per
		}
		var host int
		for host = range grants {
			break
		}
		gi := rng.IntN(len(grants[host]))
		l := NewLayout(perOf(-1, -1))
		want := NewLayout(perOf(host, gi))
		tries++
		got, ok := l.Without(host, grants[host][gi])
		if !ok {
			if !shared {
				t.Fatalf("Without refused a layout with no shared capacity: %v", grants)
			}
			continue
		}
		fast++
		if d := cmp.Diff(layoutAnswers(want), layoutAnswers(got)); d != "" {
			t.Fatalf("Without(%d, %v) of %v (-anew +without):\n%s", host, grants[host][gi], grants, d)
		}
		for _, sg := range l.segs {
			for _, dpa := range []uint64{sg.start - 1, sg.start, (sg.start + sg.end) / 2, sg.end - 1, sg.end} {
				gh, gok := got.HostOf(dpa)
				wh, wok := want.HostOf(dpa)
				if gh != wh || gok != wok {
					t.Fatalf("HostOf(%#x) = %d, %v after Without; %d, %v built anew (%v)", dpa, gh, gok, wh, wok, grants)
				}
			}
		}
	}
	if fast < tries/2 {
		t.Errorf("Without took the fast path %d times in %d", fast, tries)
	}
}

// layoutAnswers is what a layout says about hosts and their extents,
// extents at one DPA in length order (NewLayout sorts by DPA alone).
func layoutAnswers(l *Layout) map[int][]cci.Extent {
	v := map[int][]cci.Extent{}
	for _, h := range append(l.Hosts(), Shared) {
		es := slices.Clone(l.Extents(h))
		slices.SortStableFunc(es, func(a, b cci.Extent) int {
			return stdcmp.Or(stdcmp.Compare(a.DPA, b.DPA), stdcmp.Compare(a.Length, b.Length))
		})
		v[h] = es
	}
	return v
}
