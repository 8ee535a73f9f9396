package telemetry_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"cxlpool/appliance"
	"cxlpool/dcd"
	"cxlpool/fabric/cci"
	"cxlpool/fabric/serial"
	"cxlpool/hmu"
	"cxlpool/hmu/agg"
	"cxlpool/hmu/stream"
	"cxlpool/hmu/telemetry"
	"cxlpool/sim"
	"cxlpool/sim/chmu"
)

const telMiB = uint64(1) << 20

// waitTel polls cond: the pipeline runs on its own goroutines (drain
// period, sim tick), which a test observes but does not drive.
func waitTel(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func openTelApp(t *testing.T, cfg appliance.Config) *appliance.Appliance {
	t.Helper()
	app, stop := startTelApp(t, cfg)
	t.Cleanup(stop)
	return app
}

// startTelApp opens and starts an appliance; stop (idempotent) shuts it down.
func startTelApp(t *testing.T, cfg appliance.Config) (*appliance.Appliance, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if cfg.Device == "" {
		cfg.Device = appliance.DeviceSim
		cfg.Sim = sim.DefaultConfig()
		cfg.Sim.Capacity = 16 << 30
	}
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	app, err := appliance.Open(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := app.Start(ctx); err != nil {
		cancel()
		app.Close()
		t.Fatal(err)
	}
	var once sync.Once
	return app, func() { once.Do(func() { cancel(); app.Manager.Wait(); app.Close() }) }
}

// telGrant reserves size bytes and grants them to hosts, returning each
// host's extents.
func telGrant(t *testing.T, app *appliance.Appliance, size uint64, sharable bool, hosts ...dcd.HostID) []cci.Extent {
	t.Helper()
	ctx := context.Background()
	region := 0
	if sharable {
		region = 1
	}
	c, err := app.Manager.Reserve(ctx, dcd.ReserveRequest{Size: size, Region: region, Sharable: sharable})
	if err != nil {
		t.Fatal(err)
	}
	var exts []cci.Extent
	for _, h := range hosts {
		g, err := app.Manager.Grant(ctx, c.ID, h)
		if err != nil {
			t.Fatal(err)
		}
		exts = g.Extents
	}
	return exts
}

func hotAtDPA(hot []agg.Hot, dpa uint64) bool {
	return slices.ContainsFunc(hot, func(h agg.Hot) bool { return h.DPA == dpa })
}

func TestParseCHMUAndWorkload(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want telemetry.CHMULocation
		ok   bool
	}{
		{"/sys/bus/pci/devices/0000:0d:00.0/resource2", telemetry.CHMULocation{Path: "/sys/bus/pci/devices/0000:0d:00.0/resource2"}, true},
		{"/dev/bar@0x10000", telemetry.CHMULocation{Path: "/dev/bar", Offset: 0x10000}, true},
		{"bar@4096", telemetry.CHMULocation{Path: "bar", Offset: 4096}, true},
		{"bar@-1", telemetry.CHMULocation{}, false},
		{"bar@lots", telemetry.CHMULocation{}, false},
		{"@16", telemetry.CHMULocation{}, false},
		{"pci:0000:ff:ff.7", telemetry.CHMULocation{}, false}, // no such function
	} {
		got, err := telemetry.ParseCHMU(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseCHMU(%q): got %+v, %v; want %+v, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{{"", "none", true}, {"none", "none", true}, {"mixed", "mixed", true}, {"kvcache", "kvcache", true}, {"zipf", "zipf", true}, {"busy", "", false}} {
		got, err := telemetry.ParseSimWorkload(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseSimWorkload(%q): got %q, %v; want %q, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// TestTelemetryOnVirtualBox runs the pipeline on the in-process box: hot
// units of each host's private and shared capacity, hints, a host's
// stream frames masked to what it holds, and an administrator's CHMU
// configuration that survives a restart.
func TestTelemetryOnVirtualBox(t *testing.T) {
	data := t.TempDir()
	app, stop := startTelApp(t, appliance.Config{DataDir: data, Telemetry: telemetry.Tuning{FrameInterval: 20 * time.Millisecond}})
	defer stop()
	tel := app.Telemetry
	if tel == nil {
		t.Fatal("no telemetry on the virtual box")
	}
	caps, n := tel.CHMUCaps()
	got, enabled, err := tel.CHMUConfig()
	if err != nil {
		t.Fatal(err)
	}
	want := telemetry.DefaultCHMUConfig(caps)
	if diff := cmp.Diff(want, got); diff != "" || !enabled || n != 1 || caps.HotlistSize != 1024 {
		t.Errorf("initial CHMU: enabled %v, %d instances, ring %d (-want +got):\n%s", enabled, n, caps.HotlistSize, diff)
	}

	priv0 := telGrant(t, app, 256*telMiB, false, 0)
	priv1 := telGrant(t, app, 256*telMiB, false, 1)
	shared := telGrant(t, app, 256*telMiB, true, 0, 1)
	waitTel(t, "the layout to follow the grants", func() bool { return len(tel.Extents(agg.Shared)) > 0 })

	box := app.Box
	hot0, hot1, hotS := priv0[0].DPA+5*4096, priv1[0].DPA+9*4096, shared[0].DPA+2*4096
	read := func(h int, dpa uint64) {
		if _, err := box.Host(h).ReadAt(make([]byte, 64*8), dpa); err != nil { // 8 lines: hot at threshold 4
			t.Fatal(err)
		}
	}
	waitTel(t, "hot units of both hosts and the shared prefix", func() bool {
		read(0, hot0)
		read(1, hot1)
		read(0, hotS)
		return hotAtDPA(tel.Top(0, 10), hot0) && hotAtDPA(tel.Top(1, 10), hot1) && hotAtDPA(tel.Top(agg.Shared, 10), hotS)
	})
	if hotAtDPA(tel.Top(0, 10), hot1) || hotAtDPA(tel.Top(1, 10), hot0) {
		t.Error("a host's top-K holds the other host's unit")
	}
	// The KV store's eviction heat (kv/evict.Heat): the hot unit and the
	// block around it are warm, a range nobody touched is cold.
	var heat interface {
		HeatOf(dpa, length uint64) float64
	} = tel
	if got := heat.HeatOf(hot0, 4096); got <= 0 {
		t.Errorf("HeatOf(hot unit %#x): got %v, want > 0", hot0, got)
	}
	if unit, block := heat.HeatOf(hot0, 4096), heat.HeatOf(hot0&^(64<<10-1), 64<<10); block < unit {
		t.Errorf("HeatOf: the 64 KiB block around a hot unit (%v) is colder than the unit (%v)", block, unit)
	}
	if got := heat.HeatOf(priv0[0].End()-64<<10, 64<<10); got != 0 {
		t.Errorf("HeatOf(an untouched block): got %v, want 0", got)
	}
	if h := tel.Hints(0, 4); !hotAtDPA(h.Promote, hot0) || h.HeldBytes != 512*telMiB {
		t.Errorf("host 0 hints: promote %+v, held %d; want %#x promoted, 512 MiB held", h.Promote, h.HeldBytes, hot0)
	}
	rep := tel.Report()
	if rep.UnitSize != 4096 || rep.Stats.Records == 0 || len(rep.Scopes) != 8+2 {
		t.Errorf("report: unit %d, %d records, %d scopes", rep.UnitSize, rep.Stats.Records, len(rep.Scopes))
	}

	// Host 1's stream: its heatmap shows only cells it holds, its top-K
	// only its units, and the shared units it holds.
	hub := tel.Stream(1)
	sub := hub.Subscribe()
	defer sub.Close()
	var hm stream.Heatmap
	var own, sh stream.TopK
	for hm.Cells == nil || own.Entries == nil || sh.Entries == nil {
		f := <-sub.C()
		hd, err := stream.DecodeHeader(f)
		if err != nil {
			t.Fatal(err)
		}
		switch hd.Kind {
		case stream.KindHeatmap:
			hm, err = stream.DecodeHeatmap(f)
		case stream.KindTopK:
			var k stream.TopK
			k, err = stream.DecodeTopK(f)
			if k.Scope == 1 {
				own = k
			} else if k.Scope == agg.Shared {
				sh = k
			} else {
				t.Errorf("host 1's stream carries scope %d", k.Scope)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	cell := uint64(1) << hm.CellShift
	for i, q := range hm.Cells {
		lo, hi := uint64(i)*cell, uint64(i+1)*cell
		inside := slices.ContainsFunc(append(slices.Clone(priv1), shared...), func(e cci.Extent) bool { return lo >= e.DPA && hi <= e.End() })
		if q != 0 && !inside {
			t.Errorf("host 1 heatmap cell %d [%#x, %#x) shows heat outside host 1's extents", i, lo, hi)
		}
	}
	if c := hot1 / cell; hm.Cells[c] == 0 {
		t.Errorf("host 1 heatmap cell %d of its hot unit is cold", c)
	}
	for _, e := range own.Entries {
		if e.Unit<<own.UnitShift < priv1[0].DPA || e.Unit<<own.UnitShift >= priv1[0].End() {
			t.Errorf("host 1 top-K unit %#x outside its extent", e.Unit<<own.UnitShift)
		}
	}
	if !slices.ContainsFunc(sh.Entries, func(e stream.Entry) bool { return e.Unit<<sh.UnitShift == hotS }) {
		t.Errorf("host 1 shared top-K %+v lacks the shared hot unit %#x", sh.Entries, hotS)
	}

	// An administrator's configuration: validated, applied, kept.
	bad := want
	bad.UnitSize = 3000
	if err := tel.SetCHMU(context.Background(), bad, true); !errors.Is(err, hmu.ErrUnsupported) {
		t.Errorf("unit size 3000: got %v, want ErrUnsupported", err)
	}
	next := want
	next.Threshold, next.UnitSize, next.Epoch = 16, 8192, hmu.Epoch{Scale: 5, Multiplier: 2}
	if err := tel.SetCHMU(context.Background(), next, false); err != nil {
		t.Fatal(err)
	}
	if got, enabled, _ := tel.CHMUConfig(); !cmp.Equal(next, got) || enabled {
		t.Errorf("after SetCHMU: enabled %v, %s", enabled, cmp.Diff(next, got))
	}
	if _, err := os.Stat(filepath.Join(data, telemetry.CHMUFile)); err != nil {
		t.Errorf("configuration not saved: %v", err)
	}
	stop()
	again := openTelApp(t, appliance.Config{DataDir: data})
	if got, enabled, _ := again.Telemetry.CHMUConfig(); !cmp.Equal(next, got) || enabled {
		t.Errorf("after a restart: enabled %v, %s", enabled, cmp.Diff(next, got))
	}
}

// TestSimWorkloadFollowsGrants: with a workload configured, hosts run it
// once they hold capacity (KV-cache where they share) and stop when they
// hold nothing; the pool sees the accesses without anyone reading.
func TestSimWorkloadFollowsGrants(t *testing.T) {
	app := openTelApp(t, appliance.Config{SimWorkload: telemetry.SimWorkloadMixed})
	box := app.Box
	if len(box.Workloads()) != 0 {
		t.Fatalf("workloads before any grant: %v", box.Workloads())
	}
	telGrant(t, app, 256*telMiB, true, 0, 1)
	telGrant(t, app, 256*telMiB, false, 2)
	telGrant(t, app, 256*telMiB, false, 3)
	want := map[int]sim.WorkloadKind{0: sim.WorkloadKVCache, 1: sim.WorkloadKVCache, 2: sim.WorkloadZipf, 3: sim.WorkloadHotSet}
	waitTel(t, "workloads on the hosts holding capacity", func() bool { return cmp.Equal(want, box.Workloads()) })
	waitTel(t, "hot units in the pool", func() bool { return len(app.Telemetry.Top(agg.Pool, 1)) > 0 })

	gs, err := app.Ledger.Grants(context.Background(), dcd.GrantFilter{Host: telPtr(dcd.HostID(3)), Active: true})
	if err != nil || len(gs) != 1 {
		t.Fatalf("host 3 grants: %v, %v", gs, err)
	}
	if _, err := app.Manager.Release(context.Background(), gs[0].ID); err != nil {
		t.Fatal(err)
	}
	delete(want, 3)
	waitTel(t, "host 3's workload to stop", func() bool { return cmp.Equal(want, box.Workloads()) })
}

func telPtr[T any](v T) *T { return &v }

// TestTelemetryOverMMIO is the real-device path: the daemon reaches the
// box over a socket and its CHMU through --chmu, a file at an offset that
// a mirror keeps in step with the box's CHMU, as a mapped BAR would be.
func TestTelemetryOverMMIO(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	scfg := sim.DefaultConfig()
	scfg.Capacity = 16 << 30
	box, err := sim.New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	sock := "unix:" + filepath.Join(t.TempDir(), "box.sock")
	l, err := serial.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go box.ServeListener(ctx, l)

	const off = 4096
	bar := filepath.Join(t.TempDir(), "resource2")
	size := int(off + box.CHMU().Size())
	f, err := os.Create(bar)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(int64(size)); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	m, err := chmu.NewMirror(box.CHMU(), mem[off:])
	if err != nil {
		t.Fatal(err)
	}
	mctx, stopMirror := context.WithCancel(ctx)
	mirrored := make(chan struct{})
	go func() { defer close(mirrored); m.Run(mctx, 200*time.Microsecond) }()
	defer func() { stopMirror(); <-mirrored }()

	// Without --chmu a real device has no telemetry.
	plain, stopPlain := startTelApp(t, appliance.Config{Device: sock})
	if plain.Telemetry != nil {
		t.Error("telemetry without --chmu on a real device")
	}
	stopPlain()

	app := openTelApp(t, appliance.Config{Device: sock, CHMU: bar + "@4096"})
	tel := app.Telemetry
	if tel == nil {
		t.Fatal("no telemetry with --chmu")
	}
	if _, enabled, err := tel.CHMUConfig(); err != nil || !enabled {
		t.Fatalf("CHMU over mmio: enabled %v, %v", enabled, err)
	}
	exts := telGrant(t, app, 256*telMiB, false, 4)
	hot := exts[0].DPA + 7*4096
	waitTel(t, "a hot unit of host 4 through the mapped registers", func() bool {
		if _, err := box.Host(4).ReadAt(make([]byte, 64*8), hot); err != nil {
			t.Fatal(err)
		}
		return hotAtDPA(tel.Top(4, 4), hot)
	})

}
