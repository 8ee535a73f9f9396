// Package hmutest is the CHMU driver contract: one suite of behaviour
// tests that every register-file implementation must pass with the hmu
// Driver on top — the simulated CHMU directly, and the mmio register file
// over a file that a simulated device keeps updated. Keeping the suite in
// one place is what makes "the driver works on the simulator" evidence for
// "the driver works on the MMIO path".
package hmutest

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"cxlpool/hmu"
)

// Device is the activity side of a fixture.
type Device interface {
	// Access counts n accesses to the unit holding dpa.
	Access(dpa uint64, write bool, n uint64)
	// Advance moves the device clock by d and closes the epochs that ended.
	Advance(d time.Duration)
	// Sync returns once the register view reflects every device change made
	// before the call (a no-op for a direct register file).
	Sync(t testing.TB)
}

// Fixture is one fresh device: its registers and its activity side. The
// device must offer at least: one instance, a ring of ≥ 16 entries, 4 KiB
// units, every access type, epoch mode with 1 s epochs, always-on mode,
// down-sampling factor 4 and a range bitmap of ≥ 2 ranges.
type Fixture struct {
	Regs   hmu.Registers
	Device Device
}

// Clock is a manual clock for fixtures.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock starts a clock at a fixed instant.
func NewClock() *Clock { return &Clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// V17 values (vectors.md): the configuration base() produces with enable set.
const (
	V17CFG0 = 0x0000006400010606
	V17CFG1 = 0x00a400000000000c
)

// base is the V17 configuration: all R/W, both interrupts, threshold 100,
// 4 KiB units, epoch mode, 100 ms × 10.
func base() hmu.Config {
	return hmu.Config{
		Access:      hmu.AccessReadWrite,
		OverflowIRQ: true,
		LevelIRQ:    true,
		Threshold:   100,
		UnitSize:    4096,
		Mode:        hmu.ModeEpoch,
		Epoch:       hmu.Epoch{Scale: 4, Multiplier: 10},
	}
}

const epoch = time.Second // base().Epoch

func open(t *testing.T, f Fixture) (*hmu.Driver, *hmu.Instance) {
	t.Helper()
	// Generous bound: under -race with a polling mirror an op takes a few
	// mirror rounds; the bound only matters when something is broken.
	d, err := hmu.Open(f.Regs, hmu.Options{PollInterval: 10 * time.Microsecond, OpTimeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	in, err := d.Instance(0)
	if err != nil {
		t.Fatalf("Instance(0): %v", err)
	}
	return d, in
}

func start(t *testing.T, f Fixture, c hmu.Config) *hmu.Instance {
	t.Helper()
	_, in := open(t, f)
	if err := in.Start(context.Background(), c); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return in
}

// unit returns the DPA of 4 KiB unit u.
func unit(u uint64) uint64 { return u * 4096 }

func drain(t *testing.T, f Fixture, in *hmu.Instance) ([]hmu.Record, hmu.DrainStatus) {
	t.Helper()
	f.Device.Sync(t)
	recs, ds, err := in.Drain(nil)
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	return recs, ds
}

func sortByDPA(r []hmu.Record) []hmu.Record {
	slices.SortFunc(r, func(a, b hmu.Record) int { return cmp.Compare(a.DPA, b.DPA) })
	return r
}

// Run runs the contract against fresh fixtures.
func Run(t *testing.T, newFixture func(t *testing.T) Fixture) {
	ctx := context.Background()

	t.Run("capabilities", func(t *testing.T) {
		d, in := open(t, newFixture(t))
		if d.Instances() < 1 {
			t.Fatalf("got %d instances, want ≥ 1", d.Instances())
		}
		c := in.Caps()
		checks := []struct {
			name string
			ok   bool
		}{
			{"ring ≥ 16 entries", c.HotlistSize >= 16},
			{"4 KiB units", c.SupportsUnit(4096)},
			{"all R/W", c.CanTrack(hmu.AccessReadWrite)},
			{"epoch mode", c.EpochMode},
			{"bitmap ≥ 2 ranges", c.BitmapBits() >= 2},
			{"overflow and level interrupts", c.OverflowIRQ && c.LevelIRQ},
		}
		for _, ch := range checks {
			if !ch.ok {
				t.Errorf("capability %s: got false, want true (caps %+v)", ch.name, c)
			}
		}
	})

	t.Run("start writes V17", func(t *testing.T) {
		f := newFixture(t)
		in := start(t, f, base())
		f.Device.Sync(t)
		off := uint64(hmu.InstanceBase) // instance 0
		for _, r := range []struct {
			name string
			off  uint64
			want uint64
		}{{"CFG0", hmu.RegCfg0, V17CFG0}, {"CFG1", hmu.RegCfg1, V17CFG1}} {
			got, err := f.Regs.Read64(off + r.off)
			if err != nil || got != r.want {
				t.Errorf("%s: got %#016x (%v), want %#016x", r.name, got, err, r.want)
			}
		}
		st, err := in.Status()
		if err != nil || !st.Enabled || st.Op != hmu.OpNone {
			t.Errorf("status after Start: got %+v (%v), want enabled, no op", st, err)
		}
		want := base()
		want.FillThreshold = in.Caps().HotlistSize / 2
		got, err := in.Config()
		if err != nil {
			t.Fatalf("Config: %v", err)
		}
		if diff := gocmp.Diff(want, got); diff != "" {
			t.Errorf("config read back (-want +got):\n%s", diff)
		}
	})

	t.Run("configure needs a disabled instance", func(t *testing.T) {
		f := newFixture(t)
		in := start(t, f, base())
		if err := in.Configure(ctx, base()); !errors.Is(err, hmu.ErrEnabled) {
			t.Fatalf("Configure while enabled: got %v, want ErrEnabled", err)
		}
		if err := in.Disable(ctx); err != nil {
			t.Fatalf("Disable: %v", err)
		}
		c := base()
		c.Threshold = 7
		c.Ranges = []uint64{1}
		if err := in.Configure(ctx, c); err != nil {
			t.Fatalf("Configure while disabled: %v", err)
		}
		got, err := in.Config()
		if err != nil {
			t.Fatalf("Config: %v", err)
		}
		if diff := gocmp.Diff(c, got); diff != "" {
			t.Errorf("config read back (-want +got):\n%s", diff)
		}
	})

	t.Run("unsupported configurations", func(t *testing.T) {
		f := newFixture(t)
		_, in := open(t, f)
		caps := in.Caps()
		tests := []struct {
			name string
			edit func(*hmu.Config)
		}{
			{"unit not a power of two", func(c *hmu.Config) { c.UnitSize = 5000 }},
			{"unit below 256 B", func(c *hmu.Config) { c.UnitSize = 128 }},
			{"access type 0", func(c *hmu.Config) { c.Access = 0 }},
			{"access type 7", func(c *hmu.Config) { c.Access = 7 }},
			{"epoch scale 0", func(c *hmu.Config) { c.Epoch = hmu.Epoch{} }},
			{"epoch above max", func(c *hmu.Config) {
				c.Epoch = hmu.Epoch{Scale: 5, Multiplier: 4095}
				if caps.MaxEpoch.Duration() >= c.Epoch.Duration() {
					c.UnitSize = 3 // keep the case failing on a device without a max
				}
			}},
			{"fill threshold = ring size", func(c *hmu.Config) { c.FillThreshold = caps.HotlistSize }},
			{"range beyond bitmap", func(c *hmu.Config) { c.Ranges = []uint64{caps.BitmapBits()} }},
			{"mode 7", func(c *hmu.Config) { c.Mode = 7 }},
			{"down-sampling 2^15", func(c *hmu.Config) { c.DSFactor = 15 }},
		}
		for _, tt := range tests {
			c := base()
			tt.edit(&c)
			if err := in.Configure(ctx, c); !errors.Is(err, hmu.ErrUnsupported) {
				t.Errorf("%s: got %v, want ErrUnsupported", tt.name, err)
			}
		}
	})

	t.Run("epoch reports hot units with counts", func(t *testing.T) {
		f := newFixture(t)
		in := start(t, f, base())
		f.Device.Access(unit(5), false, 150)
		f.Device.Access(unit(5), true, 50)
		f.Device.Access(unit(9), true, 150)
		f.Device.Access(unit(12), false, 99) // below the threshold
		f.Device.Advance(epoch / 2)
		if recs, _ := drain(t, f, in); len(recs) != 0 {
			t.Fatalf("mid-epoch drain: got %v, want nothing", recs)
		}
		f.Device.Advance(epoch / 2)
		recs, ds := drain(t, f, in)
		want := []hmu.Record{{DPA: unit(5), Count: 200}, {DPA: unit(9), Count: 150}}
		if diff := gocmp.Diff(want, sortByDPA(recs)); diff != "" {
			t.Errorf("records (-want +got):\n%s", diff)
		}
		if ds.Entries != 2 || ds.Overflow || ds.UnitSize != 4096 {
			t.Errorf("drain status: got %+v, want 2 entries, no overflow, 4096-byte units", ds)
		}
		if recs, _ := drain(t, f, in); len(recs) != 0 {
			t.Errorf("second drain: got %v, want nothing", recs)
		}
	})

	t.Run("ring wraps", func(t *testing.T) {
		f := newFixture(t)
		c := base()
		c.Threshold = 1
		c.FillThreshold = 1
		in := start(t, f, c)
		size := uint64(in.Caps().HotlistSize)
		per := size/3 + 1
		next := uint64(0)
		for e := range 5 { // 5·(size/3+1) > size entries in all: the ring wraps
			for u := range per {
				f.Device.Access(unit(next+u), false, 1)
			}
			f.Device.Advance(epoch)
			recs, _ := drain(t, f, in)
			var want []hmu.Record
			for u := range per {
				want = append(want, hmu.Record{DPA: unit(next + u), Count: 1})
			}
			if diff := gocmp.Diff(want, sortByDPA(recs)); diff != "" {
				t.Fatalf("epoch %d (-want +got):\n%s", e, diff)
			}
			next += per
		}
	})

	t.Run("overflow", func(t *testing.T) {
		f := newFixture(t)
		c := base()
		c.Threshold = 1
		in := start(t, f, c)
		size := int(in.Caps().HotlistSize)
		for u := range size + 10 {
			f.Device.Access(unit(uint64(u)), false, 1)
		}
		f.Device.Advance(epoch)
		recs, ds := drain(t, f, in)
		if len(recs) != size-1 || !ds.Overflow {
			t.Errorf("full ring: got %d entries, overflow %v; want %d, true", len(recs), ds.Overflow, size-1)
		}
		if _, ds := drain(t, f, in); ds.Overflow || ds.Entries != 0 {
			t.Errorf("after clearing: got %+v, want no overflow, no entries", ds)
		}
	})

	t.Run("level crossed", func(t *testing.T) {
		f := newFixture(t)
		c := base()
		c.Threshold = 1
		c.FillThreshold = 4
		in := start(t, f, c)
		for u := range uint64(3) {
			f.Device.Access(unit(u), false, 1)
		}
		f.Device.Advance(epoch)
		if _, ds := drain(t, f, in); ds.Level || ds.Entries != 3 {
			t.Errorf("3 entries: got %+v, want no level, 3 entries", ds)
		}
		for u := range uint64(5) {
			f.Device.Access(unit(u), false, 1)
		}
		f.Device.Advance(epoch)
		if _, ds := drain(t, f, in); !ds.Level || ds.Entries != 5 {
			t.Errorf("5 entries: got %+v, want level, 5 entries", ds)
		}
		if _, ds := drain(t, f, in); ds.Level {
			t.Errorf("after clearing: got %+v, want no level", ds)
		}
	})

	t.Run("disable stops counting, enable resumes", func(t *testing.T) {
		f := newFixture(t)
		c := base()
		c.Threshold = 1
		in := start(t, f, c)
		if err := in.Disable(ctx); err != nil {
			t.Fatalf("Disable: %v", err)
		}
		if st, _ := in.Status(); st.Enabled {
			t.Fatalf("status after Disable: got enabled, want disabled")
		}
		f.Device.Access(unit(1), false, 10)
		f.Device.Advance(epoch)
		if recs, _ := drain(t, f, in); len(recs) != 0 {
			t.Fatalf("disabled: got %v, want nothing", recs)
		}
		if err := in.Enable(ctx); err != nil {
			t.Fatalf("Enable: %v", err)
		}
		f.Device.Access(unit(2), false, 10)
		f.Device.Advance(epoch)
		want := []hmu.Record{{DPA: unit(2), Count: 10}}
		if recs, _ := drain(t, f, in); !gocmp.Equal(want, recs) {
			t.Errorf("re-enabled: got %v, want %v", recs, want)
		}
	})

	t.Run("reset empties the ring", func(t *testing.T) {
		f := newFixture(t)
		c := base()
		c.Threshold = 1
		in := start(t, f, c)
		for u := range uint64(3) {
			f.Device.Access(unit(u), false, 1)
		}
		f.Device.Advance(epoch)
		f.Device.Sync(t)
		if err := in.Reset(ctx); err != nil {
			t.Fatalf("Reset: %v", err)
		}
		f.Device.Sync(t)
		for _, off := range []uint64{hmu.RegHead, hmu.RegTail} {
			if v, err := f.Regs.Read16(hmu.InstanceBase + off); err != nil || v != 0 {
				t.Errorf("register %#x after reset: got %d (%v), want 0", off, v, err)
			}
		}
		if st, _ := in.Status(); !st.Enabled {
			t.Errorf("reset of an enabled instance: got disabled, want enabled")
		}
		if recs, _ := drain(t, f, in); len(recs) != 0 {
			t.Errorf("after reset: got %v, want nothing", recs)
		}
	})

	t.Run("filters", func(t *testing.T) {
		tests := []struct {
			name string
			edit func(*hmu.Config)
			do   func(Device)
			want []hmu.Record
		}{
			{"range bitmap", func(c *hmu.Config) { c.Ranges = []uint64{1} }, func(d Device) {
				d.Access(unit(1), false, 5)
				d.Access(hmu.RangeGranule+unit(1), false, 5)
			}, []hmu.Record{{DPA: hmu.RangeGranule + unit(1), Count: 5}}},
			{"empty range bitmap tracks nothing", func(c *hmu.Config) { c.Ranges = []uint64{} }, func(d Device) {
				d.Access(unit(1), false, 5)
			}, nil},
			{"writes only", func(c *hmu.Config) { c.Access = hmu.AccessWrite }, func(d Device) {
				d.Access(unit(1), false, 5)
				d.Access(unit(2), true, 6)
			}, []hmu.Record{{DPA: unit(2), Count: 6}}},
			{"non-TEE reads only", func(c *hmu.Config) { c.Access = hmu.AccessNonTEERead }, func(d Device) {
				d.Access(unit(1), false, 5)
				d.Access(unit(2), true, 6)
			}, []hmu.Record{{DPA: unit(1), Count: 5}}},
			{"down-sampling 1 in 4", func(c *hmu.Config) { c.DSFactor = 2 }, func(d Device) {
				d.Access(unit(3), false, 400)
			}, []hmu.Record{{DPA: unit(3), Count: 100}}},
			{"2 MiB units", func(c *hmu.Config) { c.UnitSize = 2 << 20 }, func(d Device) {
				d.Access(2<<20+unit(1), false, 3)
				d.Access(2<<20+unit(7), false, 4)
			}, []hmu.Record{{DPA: 2 << 20, Count: 7}}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				f := newFixture(t)
				c := base()
				c.Threshold = 1
				tt.edit(&c)
				in := start(t, f, c)
				tt.do(f.Device)
				f.Device.Advance(epoch)
				recs, _ := drain(t, f, in)
				if diff := gocmp.Diff(tt.want, sortByDPA(recs)); diff != "" {
					t.Errorf("records (-want +got):\n%s", diff)
				}
			})
		}
	})

	t.Run("always-on mode", func(t *testing.T) {
		f := newFixture(t)
		c := base()
		c.Mode = hmu.ModeAlwaysOn
		c.Threshold = 10
		in := start(t, f, c)
		for range 25 {
			f.Device.Access(unit(4), false, 1)
		}
		recs, _ := drain(t, f, in)
		want := []hmu.Record{{DPA: unit(4), Count: 1}, {DPA: unit(4), Count: 1}}
		if diff := gocmp.Diff(want, recs); diff != "" {
			t.Errorf("records (-want +got):\n%s", diff)
		}
	})
}
