package mmio

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"cxlpool/hmu"
	"cxlpool/hmu/hmutest"
	"cxlpool/sim/chmu"
)

// blockOffset puts the block at an offset that is not page aligned, as a
// register locator may (64 KiB units, but this also covers odd ones).
const blockOffset = 0x10000 + 0x800

// fileDevice is the fixture's activity side: a simulated CHMU whose
// registers a mirror goroutine keeps in step with the file.
type fileDevice struct {
	dev *chmu.Device
	clk *hmutest.Clock
	m   *chmu.Mirror
}

func (d fileDevice) Access(dpa uint64, write bool, n uint64) { d.dev.Access(dpa, write, n) }
func (d fileDevice) Advance(dt time.Duration)                { d.clk.Advance(dt); d.dev.Tick() }
func (d fileDevice) Sync(t testing.TB) {
	if err := d.m.Sync(context.Background()); err != nil {
		t.Fatalf("mirror sync: %v", err)
	}
}

// newFileFixture makes a file holding a CHMU block at blockOffset, a device
// mapping of it driven by a mirror, and a driver-side Regs from Open.
func newFileFixture(t *testing.T) (hmutest.Fixture, *Regs) {
	t.Helper()
	clk := hmutest.NewClock()
	dev, err := chmu.New(chmu.Config{Clock: clk.Now, Capacity: 4 << 30, HotlistSize: 64, OpLatency: 3})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "resource2")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(blockOffset + int64(dev.Size()) + 4096); err != nil {
		t.Fatal(err)
	}
	page := int64(os.Getpagesize())
	start := int64(blockOffset) &^ (page - 1)
	devMap, err := unix.Mmap(int(f.Fd()), start, int(blockOffset-start)+int(dev.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	m, err := chmu.NewMirror(dev, devMap[blockOffset-start:])
	if err != nil {
		t.Fatal(err)
	}
	regs, err := Open(path, blockOffset, 0)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx, 20*time.Microsecond) }()
	t.Cleanup(func() {
		cancel()
		<-done
		regs.Close()
		unix.Munmap(devMap)
	})
	return hmutest.Fixture{Regs: regs, Device: fileDevice{dev, clk, m}}, regs
}

func TestContractFile(t *testing.T) {
	hmutest.Run(t, func(t *testing.T) hmutest.Fixture {
		f, _ := newFileFixture(t)
		return f
	})
}

func TestOpenSizesFromHeader(t *testing.T) {
	_, regs := newFileFixture(t)
	c0, err := regs.Read64(hmu.RegCommonCap0)
	if err != nil {
		t.Fatal(err)
	}
	c1, _ := regs.Read64(hmu.RegCommonCap1)
	cc := hmu.DecodeCommonCaps(c0, c1)
	if got, want := uint64(regs.Size()), cc.InstanceOffset(cc.Instances); got != want {
		t.Errorf("mapped size: got %d, want %d", got, want)
	}
}

func TestAccessErrors(t *testing.T) {
	_, regs := newFileFixture(t)
	size := uint64(regs.Size())
	tests := []struct {
		name string
		err  error
	}{
		{"misaligned read64", func() error { _, err := regs.Read64(4); return err }()},
		{"read64 past end", func() error { _, err := regs.Read64(size); return err }()},
		{"write64 past end", regs.Write64(size-4, 0)},
		{"misaligned read16", func() error { _, err := regs.Read16(1); return err }()},
		{"write16 past end", regs.Write16(size, 0)},
		{"huge offset wraps", func() error { _, err := regs.Read64(^uint64(7)); return err }()},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, hmu.ErrRange) {
			t.Errorf("%s: got %v, want ErrRange", tt.name, tt.err)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, make([]byte, 64), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		path         string
		offset, size int64
		want         error
	}{
		{"missing file", filepath.Join(dir, "nope"), 0, 8, os.ErrNotExist},
		{"zero header", empty, 0, 0, hmu.ErrDevice},
		{"past the end", empty, 32, 64, hmu.ErrRange},
		{"negative offset", empty, -8, 8, hmu.ErrRange},
	}
	for _, tt := range tests {
		if _, err := Open(tt.path, tt.offset, tt.size); !errors.Is(err, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
	}
}

// configSpace builds a 4 KiB config space with an unrelated extended
// capability followed by a Register Locator listing blocks.
func configSpace(blocks []RegisterBlock) []byte {
	cfg := make([]byte, 4096)
	put := binary.LittleEndian.PutUint32
	// AER (0001h) at 100h → next 140h.
	put(cfg[0x100:], 0x0001|1<<16|0x140<<20)
	length := regLocEntries + 8*len(blocks)
	put(cfg[0x140:], extCapDVSEC|1<<16|0<<20)
	put(cfg[0x144:], cxlVendor|0<<16|uint32(length)<<20)
	put(cfg[0x148:], dvsecRegLoc)
	for i, b := range blocks {
		e := 0x140 + regLocEntries + 8*i
		put(cfg[e:], uint32(b.BAR)|uint32(b.ID)<<8|uint32(b.Offset)&0xffff0000)
		put(cfg[e+4:], uint32(b.Offset>>32))
	}
	return cfg
}

func TestParseRegisterLocator(t *testing.T) {
	blocks := []RegisterBlock{
		{BAR: 0, ID: BlockComponent, Offset: 0},
		{BAR: 2, ID: BlockDevice, Offset: 0x10000},
		{BAR: 2, ID: BlockCHMU, Offset: 0x1_0003_0000},
	}
	got, err := ParseRegisterLocator(configSpace(blocks))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(blocks, got); diff != "" {
		t.Errorf("blocks (-want +got):\n%s", diff)
	}
	if _, err := ParseRegisterLocator(make([]byte, 4096)); !errors.Is(err, ErrNoLocator) {
		t.Errorf("empty config: got %v, want ErrNoLocator", err)
	}
	loop := make([]byte, 4096)
	binary.LittleEndian.PutUint32(loop[0x100:], 0x0001|0x100<<20) // points at itself
	if _, err := ParseRegisterLocator(loop); !errors.Is(err, ErrNoLocator) {
		t.Errorf("looping list: got %v, want ErrNoLocator", err)
	}
}

func TestFindCHMU(t *testing.T) {
	sysfs := t.TempDir()
	const bdf = "0000:0d:00.0"
	dir := filepath.Join(sysfs, "bus/pci/devices", bdf)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := configSpace([]RegisterBlock{{BAR: 2, ID: BlockDevice}, {BAR: 2, ID: BlockCHMU, Offset: 0x30000}, {BAR: 4, ID: BlockCHMU, Offset: 0x50000}})
	if err := os.WriteFile(filepath.Join(dir, "config"), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		n      int
		path   string
		offset int64
		err    error
	}{
		{0, filepath.Join(dir, "resource2"), 0x30000, nil},
		{1, filepath.Join(dir, "resource4"), 0x50000, nil},
		{2, "", 0, ErrNoLocator},
	}
	for _, tt := range tests {
		path, off, err := FindCHMU(sysfs, bdf, tt.n)
		if path != tt.path || off != tt.offset || !errors.Is(err, tt.err) {
			t.Errorf("FindCHMU(%d): got %q, %#x, %v; want %q, %#x, %v", tt.n, path, off, err, tt.path, tt.offset, tt.err)
		}
	}
}

func FuzzParseRegisterLocator(f *testing.F) {
	f.Add(configSpace([]RegisterBlock{{BAR: 2, ID: BlockCHMU, Offset: 0x30000}}))
	f.Add(make([]byte, 300))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, cfg []byte) {
		blocks, err := ParseRegisterLocator(cfg)
		if err == nil && len(blocks) > len(cfg)/8 {
			t.Errorf("%d blocks from %d bytes", len(blocks), len(cfg))
		}
	})
}
