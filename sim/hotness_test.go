package sim

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/fabric/cci"
	"cxlpool/hmu"
	"cxlpool/hmu/hmutest"
)

// startCHMU opens the box's CHMU with the hmu driver and starts instance 0
// counting reads and writes in 4 KiB units with 1 s epochs, threshold 1.
func startCHMU(t *testing.T, b *Box) *hmu.Instance {
	t.Helper()
	d, err := hmu.Open(b.CHMU(), hmu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	in, err := d.Instance(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Start(context.Background(), hmu.Config{Access: hmu.AccessReadWrite, Threshold: 1, UnitSize: 4096,
		Mode: hmu.ModeEpoch, Epoch: hmu.Epoch{Scale: 5, Multiplier: 1}, LevelIRQ: true}); err != nil {
		t.Fatal(err)
	}
	return in
}

func manualBox(t *testing.T) (*Box, *testFM, *hmutest.Clock) {
	t.Helper()
	clk := hmutest.NewClock()
	b, f := newBox(t, func(c *Config) { c.Clock, c.WorkloadTick = clk.Now, -1 })
	return b, f, clk
}

// TestHostAccessesReachCHMU: host reads and writes are counted per cache
// line in the unit they touch, only while the CHMU is enabled, and the
// CHMU's notification reaches SetCHMUNotify.
func TestHostAccessesReachCHMU(t *testing.T) {
	b, f, clk := manualBox(t)
	if got := b.CHMU().Size(); got == 0 {
		t.Fatal("box has no CHMU")
	}
	h := b.Host(2)
	holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 2, Policy: cci.AddPolicyPrescriptive, Extents: []cci.Extent{{DPA: 0, Length: block}}})
	if _, err := h.WriteAt(make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	if got := b.CHMU().Stats().Accesses; got != 0 {
		t.Errorf("accesses counted while disabled: got %d, want 0", got)
	}
	notified := make(chan int, 4)
	b.SetCHMUNotify(func(i int) { notified <- i })
	in := startCHMU(t, b)
	steps := []struct {
		write bool
		dpa   uint64
		n     int
	}{
		{true, 0, 64},       // unit 0: 1 line
		{false, 4000, 4196}, // unit 0: 2 lines, unit 1: 64, unit 2: 1
		{false, 3 * 4096, 1},
		{true, 3*4096 + 63, 2}, // straddles a line boundary: 2 lines
	}
	for _, s := range steps {
		p := make([]byte, s.n)
		var err error
		if s.write {
			_, err = h.WriteAt(p, s.dpa)
		} else {
			_, err = h.ReadAt(p, s.dpa)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.ReadAt(make([]byte, 64), 2*block); err == nil { // not held: not counted
		t.Fatal("read outside the host's extents succeeded")
	}
	clk.Advance(time.Second)
	b.StepWorkloads(0) // the epoch ends by the tick, without another access
	recs, _, err := in.Drain(nil)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(recs, func(a, b hmu.Record) int { return int(a.DPA>>12) - int(b.DPA>>12) })
	want := []hmu.Record{{DPA: 0, Count: 3}, {DPA: 4096, Count: 64}, {DPA: 8192, Count: 1}, {DPA: 3 * 4096, Count: 3}}
	if diff := cmp.Diff(want, recs); diff != "" {
		t.Errorf("hotlist (-want +got):\n%s", diff)
	}
	// A ring filled to the level threshold notifies.
	for u := range uint64(600) {
		if _, err := h.ReadAt(make([]byte, 1), u*4096); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(time.Second)
	b.StepWorkloads(0)
	select {
	case i := <-notified:
		if i != 0 {
			t.Errorf("notified instance: got %d, want 0", i)
		}
	default:
		t.Error("no notification after the ring passed half full")
	}
}

// TestWorkloadsFollowExtentsAndDriveLoad: workloads issue their rate,
// touch only what their hosts hold (shared capacity included), follow
// grants made after they started, and their rates are the board's load.
func TestWorkloadsFollowExtentsAndDriveLoad(t *testing.T) {
	b, f, clk := manualBox(t)
	in := startCHMU(t, b)
	psu := func() float64 {
		var w float64
		for _, v := range b.Board().Snapshot().PSUOutputWatts {
			w += v
		}
		return w
	}
	idleWatts := psu()

	for _, tc := range []struct {
		kind WorkloadKind
		p    WorkloadParams
		ok   bool
	}{
		{"bogus", WorkloadParams{}, false},
		{WorkloadZipf, WorkloadParams{Rate: -1}, false},
		{WorkloadZipf, WorkloadParams{Rate: maxWorkloadRate + 1}, false},
		{WorkloadHotSet, WorkloadParams{HotFraction: 2}, false},
	} {
		if err := b.StartWorkload(0, tc.kind, tc.p); (err == nil) != tc.ok {
			t.Errorf("StartWorkload(%q, %+v): got %v, want ok=%v", tc.kind, tc.p, err, tc.ok)
		}
	}
	if err := b.StartWorkload(8, WorkloadZipf, WorkloadParams{}); err == nil {
		t.Error("workload on host 8 of 8: got nil error")
	}

	// Started before anyone holds anything: nothing is issued.
	if err := b.StartWorkload(0, WorkloadKVCache, WorkloadParams{Rate: 1000}); err != nil {
		t.Fatal(err)
	}
	if err := b.StartWorkload(1, WorkloadKVCache, WorkloadParams{Rate: 500}); err != nil {
		t.Fatal(err)
	}
	b.StepWorkloads(100 * time.Millisecond)
	if got := b.CHMU().Stats().Accesses; got != 0 {
		t.Errorf("accesses with no capacity held: got %d, want 0", got)
	}
	if diff := cmp.Diff(map[int]WorkloadKind{0: WorkloadKVCache, 1: WorkloadKVCache}, b.Workloads()); diff != "" {
		t.Errorf("workloads (-want +got):\n%s", diff)
	}
	loaded := psu()
	if loaded <= idleWatts {
		t.Errorf("PSU output with 1500 accesses/s of workload: got %.2f W, want more than idle %.2f W", loaded, idleWatts)
	}

	tag := tagN(0x44)
	shared := holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 0, Policy: cci.AddPolicyFree, Region: 1, Length: block, Tag: tag})
	holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 1, Policy: cci.AddPolicySharedAccess, Region: 1, Tag: tag})
	priv0 := holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 0, Policy: cci.AddPolicyPrescriptive, Extents: []cci.Extent{{DPA: 0, Length: block}}})
	priv1 := holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 1, Policy: cci.AddPolicyPrescriptive, Extents: []cci.Extent{{DPA: block, Length: block}}})
	b.StepWorkloads(100 * time.Millisecond)
	got := b.CHMU().Stats().Accesses
	// Host 0 issues exactly 100 (1000/s × 0.1 s); host 1 about half.
	if got < 100 || got > 200 {
		t.Errorf("accesses in 100 ms at 1000/s + 500/s: got %d, want 100…200", got)
	}
	clk.Advance(time.Second)
	b.StepWorkloads(0)
	recs, _, err := in.Drain(nil)
	if err != nil {
		t.Fatal(err)
	}
	in2 := func(r hmu.Record, es []cci.Extent) bool {
		return slices.ContainsFunc(es, func(e cci.Extent) bool { return r.DPA >= e.DPA && r.DPA < e.End() })
	}
	var nShared, nPriv int
	for _, r := range recs {
		switch {
		case in2(r, shared):
			nShared++
		case in2(r, priv0) || in2(r, priv1):
			nPriv++
		default:
			t.Errorf("hot unit at %#x outside every held extent", r.DPA)
		}
	}
	if nShared == 0 || nPriv == 0 {
		t.Errorf("KV-cache hot units: %d in the shared prefix, %d in private tails; want both", nShared, nPriv)
	}

	b.StopWorkload(0)
	b.StopWorkload(1)
	b.StopWorkload(1) // stopping twice is harmless
	if got := psu(); got != idleWatts {
		t.Errorf("PSU output after the workloads stopped: got %.2f W, want idle %.2f W", got, idleWatts)
	}
	before := b.CHMU().Stats().Accesses
	b.StepWorkloads(100 * time.Millisecond)
	if got := b.CHMU().Stats().Accesses; got != before {
		t.Errorf("accesses after stopping: got %d more, want 0", got-before)
	}
}

// TestWorkloadBackgroundTick: with the default tick, a started workload
// feeds the CHMU without anyone stepping it.
func TestWorkloadBackgroundTick(t *testing.T) {
	b, f := newBox(t, nil)
	startCHMU(t, b)
	holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 3, Policy: cci.AddPolicyPrescriptive, Extents: []cci.Extent{{DPA: 0, Length: block}}})
	if err := b.StartWorkload(3, WorkloadZipf, WorkloadParams{Rate: 100_000}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "background workload accesses", func() bool { return b.CHMU().Stats().Accesses > 0 })
}
