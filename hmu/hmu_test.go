package hmu

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// v17 is the V17 configuration (vectors.md).
var v17 = Config{
	Access:      AccessReadWrite,
	OverflowIRQ: true,
	LevelIRQ:    true,
	Threshold:   100,
	UnitSize:    4096,
	Mode:        ModeEpoch,
	Epoch:       Epoch{Scale: 4, Multiplier: 10},
}

func TestV17(t *testing.T) {
	const cfg0, cfg1 = 0x0000006400010606, 0x00a400000000000c
	if got := v17.CFG0(true, false); got != cfg0 {
		t.Errorf("CFG0: got %#016x, want %#016x", got, uint64(cfg0))
	}
	if got := v17.CFG1(); got != cfg1 {
		t.Errorf("CFG1: got %#016x, want %#016x", got, uint64(cfg1))
	}
	got, enable, reset := DecodeConfig(cfg0, cfg1, 0)
	if diff := cmp.Diff(v17, got); diff != "" || !enable || reset {
		t.Errorf("DecodeConfig(V17): enable %v reset %v (-want +got):\n%s", enable, reset, diff)
	}
	if d := got.Epoch.Duration(); d != time.Second {
		t.Errorf("epoch: got %v, want 1s", d)
	}
}

func TestCodecRoundTrips(t *testing.T) {
	caps := []Caps{
		{},
		{MsgNum: 15, OverflowIRQ: true, LevelIRQ: true, EpochType: 1, Tracks: 0x3f, MaxEpoch: Epoch{5, 100}, MinEpoch: Epoch{2, 1},
			HotlistSize: 1024, UnitSizes: 0x30, DownSampling: 0x2, EpochMode: true, AlwaysOn: true, RandomDS: true, Overlapping: true, PostponedIns: true,
			BitmapOffset: 0x70, HotlistOffset: 0x270},
	}
	for _, c := range caps {
		c0, c1 := c.Encode()
		if diff := cmp.Diff(c, DecodeCaps(c0, c1, c.BitmapOffset, c.HotlistOffset)); diff != "" {
			t.Errorf("caps round trip (-want +got):\n%s", diff)
		}
	}
	for _, s := range []Status{{}, {Enabled: true, Op: OpResetting, CounterWidth: 16, Overflow: true, Level: true}} {
		if got := DecodeStatus(s.Encode()); got != s {
			t.Errorf("status round trip: got %+v, want %+v", got, s)
		}
	}
	cc := CommonCaps{Version: 1, Instances: 3, InstanceLen: 0x2270}
	if got := DecodeCommonCaps(cc.Encode()); got != cc {
		t.Errorf("common caps round trip: got %+v, want %+v", got, cc)
	}
	if got, want := cc.InstanceOffset(2), uint64(0x10+2*0x2270); got != want {
		t.Errorf("InstanceOffset(2): got %#x, want %#x", got, want)
	}
}

func TestEntry(t *testing.T) {
	tests := []struct {
		name  string
		e     Entry
		width uint8
		raw   uint64
		back  Entry
	}{
		{"16-bit count", Entry{Unit: 0x1234, Count: 200}, 16, 0x1234<<16 | 200, Entry{Unit: 0x1234, Count: 200}},
		{"count saturates", Entry{Unit: 1, Count: 70000}, 16, 1<<16 | 0xffff, Entry{Unit: 1, Count: 0xffff}},
		{"width 0 is all count", Entry{Count: 5}, 0, 5, Entry{Count: 5}},
		{"width 8", Entry{Unit: 0xabcdef, Count: 3}, 8, 0xabcdef03, Entry{Unit: 0xabcdef, Count: 3}},
	}
	for _, tt := range tests {
		if got := tt.e.Encode(tt.width); got != tt.raw {
			t.Errorf("%s: Encode: got %#x, want %#x", tt.name, got, tt.raw)
		}
		if got := DecodeEntry(tt.raw, tt.width); got != tt.back {
			t.Errorf("%s: Decode: got %+v, want %+v", tt.name, got, tt.back)
		}
	}
}

func TestAccessTypeCounts(t *testing.T) {
	tests := []struct {
		a                AccessType
		r, w, teeR, teeW bool
	}{
		{AccessNonTEERead, true, false, false, false},
		{AccessNonTEEWrite, false, true, false, false},
		{AccessNonTEEReadWrite, true, true, false, false},
		{AccessRead, true, false, true, false},
		{AccessWrite, false, true, false, true},
		{AccessReadWrite, true, true, true, true},
		{0, false, false, false, false},
	}
	for _, tt := range tests {
		got := [4]bool{tt.a.Counts(false, false), tt.a.Counts(true, false), tt.a.Counts(false, true), tt.a.Counts(true, true)}
		if want := [4]bool{tt.r, tt.w, tt.teeR, tt.teeW}; got != want {
			t.Errorf("%v: got %v, want %v", tt.a, got, want)
		}
	}
}

func TestCapsQueries(t *testing.T) {
	c := Caps{Tracks: 0b100100, UnitSizes: 1<<4 | 1<<13, BitmapOffset: 0x70, HotlistOffset: 0x270}
	tests := []struct {
		name string
		got  bool
		want bool
	}{
		{"track R/W", c.CanTrack(AccessReadWrite), true},
		{"track non-TEE R/W", c.CanTrack(AccessNonTEEReadWrite), true},
		{"track read", c.CanTrack(AccessRead), false},
		{"track 0", c.CanTrack(0), false},
		{"4 KiB", c.SupportsUnit(4096), true},
		{"2 MiB", c.SupportsUnit(2 << 20), true},
		{"8 KiB", c.SupportsUnit(8192), false},
		{"3 KiB", c.SupportsUnit(3072), false},
		{"huge", c.SupportsUnit(1 << 63), false},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	if got := c.BitmapBits(); got != 0x200*8 {
		t.Errorf("BitmapBits: got %d, want %d", got, 0x200*8)
	}
}

// regs is a bare register file for driver edge cases the simulator never
// produces (corrupt indices, missing instances).
type regs map[uint64]uint64

func (r regs) Read64(off uint64) (uint64, error) { return r[off], nil }
func (r regs) Write64(off, v uint64) error       { r[off] = v; return nil }
func (r regs) Read16(off uint64) (uint16, error) {
	return uint16(r[off&^7] >> (off % 8 * 8)), nil
}
func (r regs) Write16(off uint64, v uint16) error {
	sh := off % 8 * 8
	r[off&^7] = r[off&^7]&^(0xffff<<sh) | uint64(v)<<sh
	return nil
}

func validBlock() regs {
	r := regs{}
	r[RegCommonCap0], r[RegCommonCap1] = CommonCaps{Version: 1, Instances: 1, InstanceLen: 0x70 + 8 + 16*8}.Encode()
	c := Caps{Tracks: 0x3f, HotlistSize: 16, UnitSizes: 1 << 4, DownSampling: 1, EpochMode: true,
		MinEpoch: Epoch{2, 1}, MaxEpoch: Epoch{5, 10}, BitmapOffset: 0x70, HotlistOffset: 0x78}
	r[InstanceBase+RegCap0], r[InstanceBase+RegCap1] = c.Encode()
	r[InstanceBase+RegBitmapOffset], r[InstanceBase+RegHotlistOffset] = c.BitmapOffset, c.HotlistOffset
	r[InstanceBase+RegStatus] = Status{CounterWidth: 16}.Encode()
	r[InstanceBase+RegCfg1] = v17.CFG1()
	return r
}

func TestOpenErrors(t *testing.T) {
	tests := []struct {
		name string
		edit func(regs)
		inst int
		want error
	}{
		{"no instances", func(r regs) { r[RegCommonCap0] = 1 }, 0, ErrDevice},
		{"instance too short", func(r regs) { r[RegCommonCap1] = 0x20 }, 0, ErrDevice},
		{"hotlist past instance", func(r regs) { r[InstanceBase+RegHotlistOffset] = 0x1000 }, 0, ErrDevice},
		{"one-entry ring", func(r regs) { r[InstanceBase+RegCap0] &^= 0xffff << 48; r[InstanceBase+RegCap0] |= 1 << 48 }, 0, ErrDevice},
		{"instance out of range", func(regs) {}, 1, ErrRange},
	}
	for _, tt := range tests {
		r := validBlock()
		tt.edit(r)
		d, err := Open(r, Options{})
		if err == nil {
			_, err = d.Instance(tt.inst)
		}
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
	}
}

func TestDrainCorruptIndices(t *testing.T) {
	tests := []struct {
		name       string
		head, tail uint16
		cfg1       uint64
		want       error
	}{
		{"head beyond ring", 16, 0, v17.CFG1(), ErrDevice},
		{"tail beyond ring", 0, 300, v17.CFG1(), ErrDevice},
		{"unit size field 64", 0, 1, 64, ErrDevice},
		{"valid", 14, 1, v17.CFG1(), nil},
	}
	for _, tt := range tests {
		r := validBlock()
		r[InstanceBase+RegHead] = uint64(tt.head) | uint64(tt.tail)<<16
		r[InstanceBase+RegCfg1] = tt.cfg1
		d, err := Open(r, Options{})
		if err != nil {
			t.Fatal(err)
		}
		in, err := d.Instance(0)
		if err != nil {
			t.Fatal(err)
		}
		recs, _, err := in.Drain(nil)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
		if tt.want == nil && len(recs) != 3 { // 14, 15, 0: wraps
			t.Errorf("%s: got %d records, want 3", tt.name, len(recs))
		}
	}
}

func TestHandshakeHonoursContext(t *testing.T) {
	r := validBlock()
	r[InstanceBase+RegStatus] = Status{Op: OpEnabling, CounterWidth: 16}.Encode() // stuck
	d, _ := Open(r, Options{OpTimeout: time.Hour})
	in, _ := d.Instance(0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := in.Disable(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Disable with a cancelled context: got %v, want context.Canceled", err)
	}
}

func FuzzDecodeConfig(f *testing.F) {
	f.Add(uint64(0x0000006400010606), uint64(0x00a400000000000c), uint64(512))
	f.Add(uint64(0), uint64(0), uint64(0))
	f.Fuzz(func(t *testing.T, cfg0, cfg1, cfg2 uint64) {
		c, enable, reset := DecodeConfig(cfg0, cfg1, cfg2)
		// Re-encoding keeps every defined field.
		const cfg0Mask = 0xffffffff_000307ff
		if got := c.CFG0(enable, reset); got != cfg0&cfg0Mask {
			t.Errorf("CFG0 round trip: got %#x, want %#x", got, cfg0&cfg0Mask)
		}
		const cfg1Mask = 0xffffff0f_ffffffff
		if lg := cfg1 & 0xffffffff; lg < 64 {
			if got := c.CFG1(); got != cfg1&cfg1Mask {
				t.Errorf("CFG1 round trip: got %#x, want %#x", got, cfg1&cfg1Mask)
			}
		}
		if got := c.CFG2(); got != cfg2&0xffff {
			t.Errorf("CFG2 round trip: got %#x, want %#x", got, cfg2&0xffff)
		}
	})
}

func FuzzDecodeCaps(f *testing.F) {
	c0, c1 := Caps{Tracks: 0x3f, HotlistSize: 1024, UnitSizes: 0x30, MaxEpoch: Epoch{5, 100}, MinEpoch: Epoch{4, 1}, EpochMode: true}.Encode()
	f.Add(c0, c1)
	f.Add(uint64(0), uint64(0))
	f.Fuzz(func(t *testing.T, cap0, cap1 uint64) {
		c := DecodeCaps(cap0, cap1, 0x70, 0x270)
		g0, g1 := c.Encode()
		const cap0Mask, cap1Mask = ^uint64(0xc000), 0x001fffff_ffffffff // reserved bits dropped
		if g0 != cap0&cap0Mask || g1 != cap1&cap1Mask {
			t.Errorf("caps round trip: got %#x %#x, want %#x %#x", g0, g1, cap0&cap0Mask, cap1&cap1Mask)
		}
	})
}

func FuzzDecodeStatusEntry(f *testing.F) {
	f.Add(Status{Enabled: true, CounterWidth: 16, Overflow: true}.Encode(), uint64(0x1234<<16|200))
	f.Fuzz(func(t *testing.T, status, entry uint64) {
		s := DecodeStatus(status)
		const mask = 0x3ff_ffff0001
		if got := s.Encode(); got != status&mask {
			t.Errorf("status round trip: got %#x, want %#x", got, status&mask)
		}
		e := DecodeEntry(entry, s.CounterWidth)
		if got := e.Encode(s.CounterWidth); got != entry {
			t.Errorf("entry round trip (width %d): got %#x, want %#x", s.CounterWidth, got, entry)
		}
	})
}
