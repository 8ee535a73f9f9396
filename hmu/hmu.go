// Package hmu drives the CXL Hotness Monitoring Unit (CHMU, CXL 3.2 §8.2.8;
// register layout in shared/specs/cxl-wire.md §5): it declares the register
// layout and field codecs, the small Registers interface every register file
// implements (the mapped PCI BAR in hmu/mmio, the simulated CHMU in
// sim/chmu), and the Driver that configures an instance, runs the
// enable/disable/reset handshake and consumes the hotlist ring.
//
// The CHMU has no CCI command set: it is a host-MMIO register block, so the
// driver only ever sees 8- and 2-byte register accesses. Everything above
// the ring (top-K, heatmaps, hints) lives in hmu/topk and hmu/agg, and the
// pipeline that runs them for the daemon in hmu/telemetry.
package hmu

import (
	"errors"
	"fmt"
	"math/bits"
	"time"
)

// Domain errors.
var (
	// ErrTimeout: an enable/disable/reset did not finish within the bounded wait.
	ErrTimeout = errors.New("operation did not complete")
	// ErrEnabled: the instance must be disabled for this (configuration
	// registers are not to be changed while counting).
	ErrEnabled = errors.New("instance is enabled")
	// ErrUnsupported: the configuration asks for something the instance's
	// capabilities do not offer.
	ErrUnsupported = errors.New("not supported by the instance")
	// ErrDevice: the register block holds values no conforming device
	// produces (a head or tail outside the ring, zero instances, …).
	ErrDevice = errors.New("device register state is invalid")
	// ErrRange: a register access outside the block or misaligned.
	ErrRange = errors.New("register access out of range")
)

// Registers is a CHMU register block. Offsets are bytes from the start of
// the block (Common CAP0). 64-bit accesses must be 8-byte aligned, 16-bit
// ones 2-byte aligned. Implementations must make each access a single
// device access: HEAD and TAIL share one 8-byte word and the device owns
// TAIL, so a 16-bit write must never become a read-modify-write of the word.
type Registers interface {
	Read64(off uint64) (uint64, error)
	Write64(off uint64, v uint64) error
	Read16(off uint64) (uint16, error)
	Write16(off uint64, v uint16) error
}

// BulkReader is a register block that can copy a run of 64-bit registers
// in one call, as a mapped BAR can: Drain uses it for the hotlist ring
// when the block offers it (one bounds check and no interface call per
// entry), and Read64 per entry otherwise. Each register must still be
// one 8-byte load. hmu/mmio implements it.
type BulkReader interface {
	ReadRange64(off uint64, dst []uint64) error
}

// Block-level register offsets.
const (
	RegCommonCap0 = 0x00 // [3:0] version, [15:8] number of instances
	RegCommonCap1 = 0x08 // [15:0] instance length
	InstanceBase  = 0x10 // instance i starts at InstanceBase + i·length
)

// Instance-relative register offsets.
const (
	RegCap0          = 0x00
	RegCap1          = 0x08
	RegBitmapOffset  = 0x10 // offset of the range bitmap from the instance base
	RegHotlistOffset = 0x18 // offset of the hotlist ring from the instance base
	RegCfg0          = 0x40
	RegCfg1          = 0x48
	RegCfg2          = 0x50
	RegStatus        = 0x60
	RegHead          = 0x68 // 16-bit, software consumer index
	RegTail          = 0x6A // 16-bit, device producer index
	// RegsEnd is the first offset after the fixed registers; the QEMU RFC
	// places the range bitmap here.
	RegsEnd = 0x70
)

// RangeGranule is the DPA span one range-bitmap bit covers (256 MiB).
const RangeGranule = 256 << 20

// CFG0 and STATUS bits.
const (
	cfg0RandomDS    = 1 << 8
	cfg0OverflowIRQ = 1 << 9
	cfg0LevelIRQ    = 1 << 10
	Cfg0Enable      = 1 << 16
	Cfg0Reset       = 1 << 17

	StatusEnabled  = 1 << 0
	StatusOverflow = 1 << 40 // RW1C
	StatusLevel    = 1 << 41 // RW1C
	// StatusRW1C are the write-1-to-clear bits of STATUS.
	StatusRW1C = StatusOverflow | StatusLevel
)

// field extracts bits [lo, lo+width) of v.
func field(v uint64, lo, width uint) uint64 { return v >> lo & (1<<width - 1) }

// place puts x into bits [lo, lo+width); excess bits of x are dropped.
func place(x uint64, lo, width uint) uint64 { return (x & (1<<width - 1)) << lo }

func bit(v uint64, n uint) bool { return v>>n&1 == 1 }

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// CommonCaps is the block header.
type CommonCaps struct {
	Version     uint8
	Instances   int
	InstanceLen uint64
}

// DecodeCommonCaps decodes Common CAP0 and CAP1.
func DecodeCommonCaps(cap0, cap1 uint64) CommonCaps {
	return CommonCaps{
		Version:     uint8(field(cap0, 0, 4)),
		Instances:   int(field(cap0, 8, 8)),
		InstanceLen: field(cap1, 0, 16),
	}
}

// Encode returns Common CAP0 and CAP1.
func (c CommonCaps) Encode() (cap0, cap1 uint64) {
	return place(uint64(c.Version), 0, 4) | place(uint64(c.Instances), 8, 8), place(c.InstanceLen, 0, 16)
}

// InstanceOffset is the block offset of instance i.
func (c CommonCaps) InstanceOffset(i int) uint64 { return InstanceBase + uint64(i)*c.InstanceLen }

// AccessType is the M2S request type an instance counts (CFG0 [7:0]).
type AccessType uint8

// Access types. TEE variants count both TEE and non-TEE requests.
const (
	AccessNonTEERead      AccessType = 1
	AccessNonTEEWrite     AccessType = 2
	AccessNonTEEReadWrite AccessType = 3
	AccessRead            AccessType = 4
	AccessWrite           AccessType = 5
	AccessReadWrite       AccessType = 6
)

// Counts reports whether the type counts a read (write=false) or a write
// from a non-TEE or TEE requester.
func (a AccessType) Counts(write, tee bool) bool {
	if tee && a <= AccessNonTEEReadWrite {
		return false
	}
	switch a {
	case AccessNonTEERead, AccessRead:
		return !write
	case AccessNonTEEWrite, AccessWrite:
		return write
	case AccessNonTEEReadWrite, AccessReadWrite:
		return true
	}
	return false
}

func (a AccessType) String() string {
	switch a {
	case AccessNonTEERead:
		return "non-TEE read"
	case AccessNonTEEWrite:
		return "non-TEE write"
	case AccessNonTEEReadWrite:
		return "non-TEE read/write"
	case AccessRead:
		return "read"
	case AccessWrite:
		return "write"
	case AccessReadWrite:
		return "read/write"
	}
	return fmt.Sprintf("access type %d", uint8(a))
}

// Epoch is an epoch length: Multiplier × the unit named by Scale
// (1 = 100 µs, 2 = 1 ms, 3 = 10 ms, 4 = 100 ms, 5 = 1 s).
type Epoch struct {
	Scale      uint8
	Multiplier uint16
}

var epochUnits = [...]time.Duration{1: 100 * time.Microsecond, 2: time.Millisecond, 3: 10 * time.Millisecond, 4: 100 * time.Millisecond, 5: time.Second}

// Duration is the epoch length, or 0 for an undefined scale.
func (e Epoch) Duration() time.Duration {
	if int(e.Scale) >= len(epochUnits) {
		return 0
	}
	return epochUnits[e.Scale] * time.Duration(e.Multiplier)
}

// Mode is the reporting mode (CFG1 [47:40]).
type Mode uint8

// Reporting modes.
const (
	ModeEpoch    Mode = 0 // hot units are reported at the end of each epoch with their count
	ModeAlwaysOn Mode = 1 // a unit is reported when it crosses the threshold; counts are invalid
)

// Caps are an instance's capabilities (CAP0, CAP1, and the two offset
// registers).
type Caps struct {
	MsgNum        uint8 // MSI/MSI-X message number
	OverflowIRQ   bool
	LevelIRQ      bool
	EpochType     uint8  // 0 global, 1 per counter
	Tracks        uint8  // bit i set ⇒ AccessType(i+1) can be tracked
	MaxEpoch      Epoch  //
	MinEpoch      Epoch  //
	HotlistSize   uint16 // ring entries
	UnitSizes     uint32 // bit n ⇒ unit size 256·2^n bytes
	DownSampling  uint16 // bit n ⇒ factor 2^n
	EpochMode     bool
	AlwaysOn      bool
	RandomDS      bool
	Overlapping   bool // overlapping address ranges between instances
	PostponedIns  bool // postponed insert on overflow
	BitmapOffset  uint64
	HotlistOffset uint64
}

// DecodeCaps decodes CAP0, CAP1 and the bitmap and hotlist offsets.
func DecodeCaps(cap0, cap1, bitmapOff, hotlistOff uint64) Caps {
	return Caps{
		MsgNum:        uint8(field(cap0, 0, 4)),
		OverflowIRQ:   bit(cap0, 4),
		LevelIRQ:      bit(cap0, 5),
		EpochType:     uint8(field(cap0, 6, 2)),
		Tracks:        uint8(field(cap0, 8, 6)),
		MaxEpoch:      Epoch{Scale: uint8(field(cap0, 16, 4)), Multiplier: uint16(field(cap0, 20, 12))},
		MinEpoch:      Epoch{Scale: uint8(field(cap0, 32, 4)), Multiplier: uint16(field(cap0, 36, 12))},
		HotlistSize:   uint16(field(cap0, 48, 16)),
		UnitSizes:     uint32(field(cap1, 0, 32)),
		DownSampling:  uint16(field(cap1, 32, 16)),
		EpochMode:     bit(cap1, 48),
		AlwaysOn:      bit(cap1, 49),
		RandomDS:      bit(cap1, 50),
		Overlapping:   bit(cap1, 51),
		PostponedIns:  bit(cap1, 52),
		BitmapOffset:  bitmapOff,
		HotlistOffset: hotlistOff,
	}
}

// Encode returns CAP0 and CAP1 (the offsets are registers of their own).
func (c Caps) Encode() (cap0, cap1 uint64) {
	cap0 = place(uint64(c.MsgNum), 0, 4) | b2u(c.OverflowIRQ)<<4 | b2u(c.LevelIRQ)<<5 |
		place(uint64(c.EpochType), 6, 2) | place(uint64(c.Tracks), 8, 6) |
		place(uint64(c.MaxEpoch.Scale), 16, 4) | place(uint64(c.MaxEpoch.Multiplier), 20, 12) |
		place(uint64(c.MinEpoch.Scale), 32, 4) | place(uint64(c.MinEpoch.Multiplier), 36, 12) |
		place(uint64(c.HotlistSize), 48, 16)
	cap1 = uint64(c.UnitSizes) | uint64(c.DownSampling)<<32 | b2u(c.EpochMode)<<48 | b2u(c.AlwaysOn)<<49 |
		b2u(c.RandomDS)<<50 | b2u(c.Overlapping)<<51 | b2u(c.PostponedIns)<<52
	return cap0, cap1
}

// CanTrack reports whether access type a is trackable.
func (c Caps) CanTrack(a AccessType) bool {
	return a >= 1 && a <= 6 && c.Tracks>>(a-1)&1 == 1
}

// SupportsUnit reports whether unit size (bytes) is supported.
func (c Caps) SupportsUnit(size uint64) bool {
	if size < 256 || bits.OnesCount64(size) != 1 {
		return false
	}
	n := bits.TrailingZeros64(size) - 8
	return n < 32 && c.UnitSizes>>n&1 == 1
}

// BitmapBits is how many 256 MiB ranges the bitmap covers: the bytes
// between the bitmap and the hotlist when the hotlist follows it (the
// layout of the QEMU RFC), else 0 (unknown; nothing is written).
func (c Caps) BitmapBits() uint64 {
	if c.HotlistOffset <= c.BitmapOffset {
		return 0
	}
	return (c.HotlistOffset - c.BitmapOffset) * 8
}

// Config is an instance configuration (CFG0 without its control bits, CFG1,
// CFG2 and the range bitmap).
type Config struct {
	Access        AccessType
	RandomDS      bool   // randomized down-sampling
	OverflowIRQ   bool   // interrupt when the ring overflows
	LevelIRQ      bool   // interrupt when the ring fill reaches FillThreshold
	Threshold     uint32 // accesses per epoch that make a unit hot
	UnitSize      uint64 // bytes, a power of two ≥ 256
	DSFactor      uint8  // down-sampling: count 1 in 2^DSFactor accesses
	Mode          Mode
	Epoch         Epoch
	FillThreshold uint16 // ring entries that raise the level status
	// Ranges lists the 256 MiB DPA ranges to track, as bitmap bit numbers
	// (bit n covers [n·256 MiB, (n+1)·256 MiB)). Nil tracks every range
	// the bitmap covers; an empty non-nil list tracks none.
	Ranges []uint64
}

// CFG0 encodes CFG0 with the given control bits.
func (c Config) CFG0(enable, reset bool) uint64 {
	return uint64(c.Access) | b2u(c.RandomDS)<<8 | b2u(c.OverflowIRQ)<<9 | b2u(c.LevelIRQ)<<10 |
		b2u(enable)<<16 | b2u(reset)<<17 | uint64(c.Threshold)<<32
}

// CFG1 encodes CFG1. The unit size is written as log2(bytes), as the Linux
// and QEMU RFCs do (cxl-wire.md §10 item 4).
func (c Config) CFG1() uint64 {
	var lg uint64
	if c.UnitSize != 0 {
		lg = uint64(bits.TrailingZeros64(c.UnitSize))
	}
	return lg | place(uint64(c.DSFactor), 32, 4) | place(uint64(c.Mode), 40, 8) |
		place(uint64(c.Epoch.Scale), 48, 4) | place(uint64(c.Epoch.Multiplier), 52, 12)
}

// CFG2 encodes CFG2.
func (c Config) CFG2() uint64 { return uint64(c.FillThreshold) }

// DecodeConfig decodes CFG0–CFG2 (not the bitmap) and CFG0's control bits.
// A unit-size field of 64 or more decodes as UnitSize 0.
func DecodeConfig(cfg0, cfg1, cfg2 uint64) (c Config, enable, reset bool) {
	c = Config{
		Access:        AccessType(field(cfg0, 0, 8)),
		RandomDS:      bit(cfg0, 8),
		OverflowIRQ:   bit(cfg0, 9),
		LevelIRQ:      bit(cfg0, 10),
		Threshold:     uint32(cfg0 >> 32),
		DSFactor:      uint8(field(cfg1, 32, 4)),
		Mode:          Mode(field(cfg1, 40, 8)),
		Epoch:         Epoch{Scale: uint8(field(cfg1, 48, 4)), Multiplier: uint16(field(cfg1, 52, 12))},
		FillThreshold: uint16(cfg2),
	}
	if lg := field(cfg1, 0, 32); lg < 64 {
		c.UnitSize = 1 << lg
	}
	return c, bit(cfg0, 16), bit(cfg0, 17)
}

// Op is the operation in progress (STATUS [31:16]).
type Op uint16

// Operations.
const (
	OpNone      Op = 0
	OpEnabling  Op = 1
	OpDisabling Op = 2
	OpResetting Op = 3
)

func (o Op) String() string {
	switch o {
	case OpNone:
		return "none"
	case OpEnabling:
		return "enabling"
	case OpDisabling:
		return "disabling"
	case OpResetting:
		return "resetting"
	}
	return fmt.Sprintf("op %d", uint16(o))
}

// Status is the STATUS register.
type Status struct {
	Enabled      bool
	Op           Op
	CounterWidth uint8 // N: the low N bits of an entry are the count
	Overflow     bool
	Level        bool
}

// DecodeStatus decodes STATUS.
func DecodeStatus(v uint64) Status {
	return Status{
		Enabled:      bit(v, 0),
		Op:           Op(field(v, 16, 16)),
		CounterWidth: uint8(field(v, 32, 8)),
		Overflow:     bit(v, 40),
		Level:        bit(v, 41),
	}
}

// Encode returns the STATUS value.
func (s Status) Encode() uint64 {
	return b2u(s.Enabled) | uint64(s.Op)<<16 | uint64(s.CounterWidth)<<32 | b2u(s.Overflow)<<40 | b2u(s.Level)<<41
}

// Record is one hotlist entry as the driver hands it out.
type Record struct {
	DPA   uint64 // unit index × unit size
	Count uint64 // accesses in the epoch; 1 in always-on mode, where the device count is invalid
}

// Entry is a raw hotlist entry: [63:N] unit index, [N−1:0] count.
type Entry struct {
	Unit  uint64
	Count uint64
}

// DecodeEntry splits a raw entry for counter width n (0 < n < 64; other
// widths are taken as 64, all count).
func DecodeEntry(v uint64, n uint8) Entry {
	if n == 0 || n >= 64 {
		return Entry{Count: v}
	}
	return Entry{Unit: v >> n, Count: v & (1<<n - 1)}
}

// Encode packs the entry for counter width n; the count saturates at
// 2^n − 1 and unit bits that do not fit are dropped.
func (e Entry) Encode(n uint8) uint64 {
	if n == 0 || n >= 64 {
		return e.Count
	}
	c := min(e.Count, 1<<n-1)
	return e.Unit<<n | c
}
