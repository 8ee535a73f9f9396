package chmu

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/hmu"
	"cxlpool/hmu/hmutest"
)

// direct is the fixture activity side for a device used as the register
// file itself.
type direct struct {
	dev *Device
	clk *hmutest.Clock
}

func (d direct) Access(dpa uint64, write bool, n uint64) { d.dev.Access(dpa, write, n) }
func (d direct) Advance(dt time.Duration)                { d.clk.Advance(dt); d.dev.Tick() }
func (d direct) Sync(testing.TB)                         {}

func newDevice(t testing.TB, cfg Config) (*Device, *hmutest.Clock) {
	t.Helper()
	clk := hmutest.NewClock()
	cfg.Clock = clk.Now
	if cfg.Capacity == 0 {
		cfg.Capacity = 4 << 30 // small bitmap: fast mirrors and tests
	}
	if cfg.HotlistSize == 0 {
		cfg.HotlistSize = 64
	}
	dev, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return dev, clk
}

func TestContract(t *testing.T) {
	hmutest.Run(t, func(t *testing.T) hmutest.Fixture {
		dev, clk := newDevice(t, Config{})
		return hmutest.Fixture{Regs: dev, Device: direct{dev, clk}}
	})
}

// TestContractInstantOps runs the contract against a device whose
// operations complete at once (the QEMU RFC behaviour).
func TestContractInstantOps(t *testing.T) {
	hmutest.Run(t, func(t *testing.T) hmutest.Fixture {
		dev, clk := newDevice(t, Config{OpLatency: -1, HotlistSize: 1024, Capacity: 1 << 40})
		return hmutest.Fixture{Regs: dev, Device: direct{dev, clk}}
	})
}

func TestContractMirror(t *testing.T) {
	hmutest.Run(t, func(t *testing.T) hmutest.Fixture {
		dev, clk := newDevice(t, Config{OpLatency: 3})
		img := make([]uint64, dev.Size()/8) // uint64 backing: 8-byte aligned
		mem := unsafeBytes(img)
		m, err := NewMirror(dev, mem)
		if err != nil {
			t.Fatalf("NewMirror: %v", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); m.Run(ctx, 20*time.Microsecond) }()
		t.Cleanup(func() { cancel(); <-done })
		return hmutest.Fixture{Regs: &memRegs{mem: mem}, Device: mirrored{direct{dev, clk}, m}}
	})
}

type mirrored struct {
	direct
	m *Mirror
}

func (d mirrored) Sync(t testing.TB) {
	if err := d.m.Sync(context.Background()); err != nil {
		t.Fatalf("mirror sync: %v", err)
	}
}

func TestNotify(t *testing.T) {
	tests := []struct {
		name       string
		cfg        func(*hmu.Config)
		units      int
		wantNotify int
		wantStatus hmu.Status
	}{
		{"level with interrupt", func(c *hmu.Config) { c.FillThreshold = 4 }, 5, 1, hmu.Status{Level: true}},
		{"level without interrupt", func(c *hmu.Config) { c.FillThreshold = 4; c.LevelIRQ = false }, 5, 0, hmu.Status{Level: true}},
		{"below level", func(c *hmu.Config) { c.FillThreshold = 10 }, 5, 0, hmu.Status{}},
		{"overflow and level: one notification per drain", func(c *hmu.Config) { c.FillThreshold = 10 }, 100, 1, hmu.Status{Level: true, Overflow: true}},
		{"overflow only", func(c *hmu.Config) { c.FillThreshold = 10; c.LevelIRQ = false }, 100, 1, hmu.Status{Level: true, Overflow: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			notified := make(chan int, 16)
			dev, clk := newDevice(t, Config{Notify: func(i int) { notified <- i }})
			d, err := hmu.Open(dev, hmu.Options{})
			if err != nil {
				t.Fatal(err)
			}
			in, _ := d.Instance(0)
			c := hmu.Config{Access: hmu.AccessReadWrite, OverflowIRQ: true, LevelIRQ: true, Threshold: 1, UnitSize: 4096,
				Epoch: hmu.Epoch{Scale: 5, Multiplier: 1}}
			tt.cfg(&c)
			if err := in.Start(context.Background(), c); err != nil {
				t.Fatal(err)
			}
			for u := range tt.units {
				dev.Access(uint64(u)*4096, false, 1)
			}
			clk.Advance(time.Second)
			dev.Tick()
			if got := len(notified); got != tt.wantNotify {
				t.Errorf("notifications: got %d, want %d", got, tt.wantNotify)
			}
			st, _ := in.Status()
			got := hmu.Status{Overflow: st.Overflow, Level: st.Level}
			if got != tt.wantStatus {
				t.Errorf("status bits: got %+v, want %+v", got, tt.wantStatus)
			}
		})
	}
}

func TestOpHandshakeVisible(t *testing.T) {
	dev, _ := newDevice(t, Config{OpLatency: 2})
	base := uint64(hmu.InstanceBase)
	cfg := hmu.Config{Access: hmu.AccessReadWrite, UnitSize: 4096, Epoch: hmu.Epoch{Scale: 5, Multiplier: 1}}
	if err := dev.Write64(base+hmu.RegCfg0, cfg.CFG0(true, false)); err != nil {
		t.Fatal(err)
	}
	var got []hmu.Status
	for range 3 {
		v, _ := dev.Read64(base + hmu.RegStatus)
		st := hmu.DecodeStatus(v)
		got = append(got, hmu.Status{Enabled: st.Enabled, Op: st.Op})
	}
	want := []hmu.Status{{Op: hmu.OpEnabling}, {Op: hmu.OpEnabling}, {Enabled: true}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("STATUS reads (-want +got):\n%s", diff)
	}
	// A CFG0 write during an operation is ignored.
	if err := dev.Write64(base+hmu.RegCfg0, cfg.CFG0(false, false)); err != nil {
		t.Fatal(err)
	}
	if err := dev.Write64(base+hmu.RegCfg0, cfg.CFG0(true, false)); err != nil {
		t.Fatal(err)
	}
	v, _ := dev.Read64(base + hmu.RegCfg0)
	if v&hmu.Cfg0Enable != 0 {
		t.Errorf("CFG0 after a write during disabling: got enable set, want clear")
	}
}

func TestRegisterAccessErrors(t *testing.T) {
	dev, _ := newDevice(t, Config{})
	tests := []struct {
		name string
		err  error
	}{
		{"misaligned 64", func() error { _, err := dev.Read64(3); return err }()},
		{"past the end 64", func() error { _, err := dev.Read64(dev.Size()); return err }()},
		{"misaligned 16", dev.Write16(hmu.InstanceBase+hmu.RegHead+1, 0)},
		{"past the end write", dev.Write64(dev.Size(), 0)},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, hmu.ErrRange) {
			t.Errorf("%s: got %v, want ErrRange", tt.name, tt.err)
		}
	}
}

func TestDriverTimeout(t *testing.T) {
	// A device stuck in an operation: the driver gives up after its bound.
	dev, _ := newDevice(t, Config{OpLatency: 1 << 30})
	d, err := hmu.Open(dev, hmu.Options{OpTimeout: time.Millisecond, PollInterval: 100 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	in, _ := d.Instance(0)
	if err := in.Enable(context.Background()); !errors.Is(err, hmu.ErrTimeout) {
		t.Fatalf("Enable on a stuck device: got %v, want ErrTimeout", err)
	}
}

// TestConcurrentDrainAndReconfigure: an administrator restarting the
// instance with a new configuration while the collector drains is safe
// (run with -race) and every drain either succeeds or is cleanly refused.
func TestConcurrentDrainAndReconfigure(t *testing.T) {
	dev, clk := newDevice(t, Config{OpLatency: 2})
	d, err := hmu.Open(dev, hmu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	in, _ := d.Instance(0)
	ctx := context.Background()
	cfg := hmu.Config{Access: hmu.AccessReadWrite, Threshold: 1, UnitSize: 4096, Epoch: hmu.Epoch{Scale: 5, Multiplier: 1}}
	if err := in.Start(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	drained := make(chan error, 1)
	go func() {
		var buf []hmu.Record
		for {
			select {
			case <-stop:
				drained <- nil
				return
			default:
			}
			var err error
			if buf, _, err = in.Drain(buf[:0]); err != nil {
				drained <- err
				return
			}
		}
	}()
	for i := range 20 {
		dev.Access(uint64(i)*4096, false, 1)
		clk.Advance(time.Second)
		dev.Tick()
		cfg.Threshold = uint32(1 + i%3)
		if err := in.Start(ctx, cfg); err != nil {
			t.Fatalf("Start %d: %v", i, err)
		}
	}
	close(stop)
	if err := <-drained; err != nil {
		t.Fatalf("Drain: %v", err)
	}
}
