package agg_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/appliance"
	"cxlpool/dcd"
	"cxlpool/fabric/cci"
	"cxlpool/hmu"
	"cxlpool/hmu/agg"
	"cxlpool/hmu/hmutest"
	"cxlpool/sim"
	"cxlpool/sim/chmu"
)

const (
	block = uint64(256) << 20
	gib   = uint64(1) << 30
)

// TestEndToEnd runs the daemon's capacity stack on the virtual box, grants
// capacity to four hosts, feeds the simulated CHMU from per-host workloads
// aimed at what each host holds, and checks the collector's view: hot
// units land on the right host, the shared KV prefix is its own scope, and
// the allocation nobody touches is a shrink candidate.
func TestEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	app, err := appliance.Open(ctx, appliance.Config{
		Device: appliance.DeviceSim, DataDir: t.TempDir(), Sim: sim.DefaultConfig(),
		Logger: slog.New(slog.DiscardHandler), AddTimeout: 5 * time.Second, ReleaseTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatalf("appliance.Open: %v", err)
	}
	if err := app.Start(ctx); err != nil {
		app.Close()
		t.Fatalf("Start: %v", err)
	}
	defer func() { cancel(); app.Manager.Wait(); app.Close() }()

	grant := func(name string, size uint64, sharable bool, hosts ...dcd.HostID) cci.Tag {
		t.Helper()
		c, err := app.Manager.Reserve(ctx, dcd.ReserveRequest{Name: name, Size: size, Region: -1, Sharable: sharable})
		if err != nil {
			t.Fatalf("Reserve %s: %v", name, err)
		}
		for _, h := range hosts {
			if _, err := app.Manager.Grant(ctx, c.ID, h); err != nil {
				t.Fatalf("Grant %s to %d: %v", name, h, err)
			}
		}
		got, _ := app.Ledger.Chunk(ctx, c.ID)
		return got.Tag
	}
	zipfTag := grant("zipf", gib, false, 0)
	idleTag := grant("idle", gib, false, 0)
	grant("hotset", gib, false, 1)
	grant("kv-tail-2", 2*block, false, 2)
	grant("kv-tail-3", 2*block, false, 3)
	prefixTag := grant("kv-prefix", 2*block, true, 2, 3)

	// The DPA → host map from the ledger agrees with what the box's hosts hold.
	grants, err := app.Ledger.Grants(ctx, dcd.GrantFilter{Active: true})
	if err != nil {
		t.Fatal(err)
	}
	layout := agg.LayoutFromGrants(grants)
	held := map[int][]cci.Extent{}
	for h := range 4 {
		held[h] = app.Box.Host(h).Extents()
	}
	fromBox := agg.NewLayout(held)
	for _, h := range []int{0, 1, 2, 3, agg.Shared} {
		if diff := cmp.Diff(fromBox.Extents(h), layout.Extents(h)); diff != "" {
			t.Errorf("host %d extents, box vs ledger (-box +ledger):\n%s", h, diff)
		}
	}

	clk := hmutest.NewClock()
	var coll *agg.Collector
	dev, err := chmu.New(chmu.Config{Clock: clk.Now, Notify: func(int) { coll.Kick() }})
	if err != nil {
		t.Fatal(err)
	}
	drv, err := hmu.Open(dev, hmu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	in, err := drv.Instance(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Start(ctx, hmu.Config{Access: hmu.AccessReadWrite, OverflowIRQ: true, LevelIRQ: true, Threshold: 3,
		UnitSize: 4096, Epoch: hmu.Epoch{Scale: 4, Multiplier: 1}}); err != nil {
		t.Fatalf("Start: %v", err)
	}
	coll, err = agg.New(agg.Config{Source: in, HostOf: layout.HostOf, Extents: layout.Extents, Hosts: 8,
		Epoch: 100 * time.Millisecond, Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}

	withTag := func(h int, tag cci.Tag) func() []cci.Extent {
		return func() []cci.Extent {
			var out []cci.Extent
			for _, e := range app.Box.Host(h).Extents() {
				if e.Tag == tag {
					out = append(out, e)
				}
			}
			return out
		}
	}
	all := func(h int) func() []cci.Extent { return app.Box.Host(h).Extents }
	w := chmu.NewWorkload(dev, chmu.WorkloadConfig{Seed: 1, Clock: clk.Now},
		chmu.HostLoad{Host: 0, Extents: withTag(0, zipfTag), Pattern: &chmu.Zipf{Skew: 1.2}},
		chmu.HostLoad{Host: 1, Extents: all(1), Pattern: &chmu.HotSet{Units: 64, Hot: 0.9, Period: 300 * time.Millisecond}},
		chmu.HostLoad{Host: 2, Extents: all(2), Pattern: &chmu.KVCache{PrefixSkew: 1.2, ReadShared: 0.6, TailUnits: 8, AppendEvery: 200}},
		chmu.HostLoad{Host: 3, Extents: all(3), Pattern: &chmu.KVCache{PrefixSkew: 1.2, ReadShared: 0.6, TailUnits: 8, AppendEvery: 200}},
	)
	var buf []hmu.Record
	for range 10 {
		w.Step(1500)
		clk.Advance(100 * time.Millisecond)
		w.Step(0) // closes the epoch
		if buf, err = coll.DrainOnce(buf); err != nil {
			t.Fatalf("DrainOnce: %v", err)
		}
	}

	inside := func(es []cci.Extent, dpa uint64) bool {
		return slices.ContainsFunc(es, func(e cci.Extent) bool { return dpa >= e.DPA && dpa < e.End() })
	}
	for _, tt := range []struct {
		scope int
		in    []cci.Extent
	}{
		{0, withTag(0, zipfTag)()},
		{1, held[1]},
		{agg.Shared, layout.Extents(agg.Shared)},
		{2, layout.Extents(2)},
		{3, layout.Extents(3)},
	} {
		top := coll.Top(tt.scope, 20)
		if len(top) == 0 {
			t.Errorf("scope %d: no hot units", tt.scope)
		}
		for _, h := range top {
			if !inside(tt.in, h.DPA) {
				t.Errorf("scope %d: hot unit %#x outside its extents", tt.scope, h.DPA)
			}
		}
	}
	if got := layout.Extents(agg.Shared); len(got) == 0 || got[0].Tag != prefixTag {
		t.Errorf("shared extents: got %v, want the kv-prefix tag %v", got, prefixTag)
	}
	h := coll.Hints(0, 10)
	if len(h.Shrink) != 1 || h.Shrink[0].Tag != idleTag || h.Shrink[0].ColdBytes != gib {
		t.Errorf("host 0 shrink hints: got %+v, want the idle chunk (%v), %d cold bytes", h.Shrink, idleTag, gib)
	}
	if len(h.Promote) != 10 {
		t.Errorf("host 0 promote hints: got %d, want 10", len(h.Promote))
	}
	st := coll.Stats()
	if st.Unmapped != 0 || st.Records == 0 || st.Epochs != 10 {
		t.Errorf("collector stats: got %+v, want records, none unmapped, 10 epochs", st)
	}
	if ds := dev.Stats(); ds.Dropped != 0 {
		t.Errorf("device dropped %d entries, want 0 (ring sized for the load)", ds.Dropped)
	}
}
