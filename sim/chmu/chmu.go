// Package chmu is the virtual box's CXL Hotness Monitoring Unit: a register
// file with the semantics of shared/specs/cxl-wire.md §5 that implements
// hmu.Registers, so the real driver runs against it unchanged.
//
// What it models, per instance: CAP/CFG/STATUS registers; the
// operation-in-progress handshake (an enable, disable or reset stays "in
// progress" for Config.OpLatency STATUS reads, so a driver that does not
// poll is caught); a per-unit counter table filtered by access type, range
// bitmap and down-sampling; epochs timed by an injectable clock (closed by
// Tick or by the next access); the hotlist ring with head/tail, overflow
// and level-crossed RW1C status bits; and a notification callback standing
// in for the MSI. Accesses come from the workload generators in this
// package (see Workload), which aim at the extents each simulated host
// holds.
//
// Writes a real device would reject are ignored, as hardware does: CFG0
// while an operation is in progress, CFG1/CFG2/bitmap while enabled, TAIL
// while enabled, read-only registers always. Out-of-block or misaligned
// accesses return hmu.ErrRange (a bus error).
package chmu

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"cxlpool/hmu"
)

// Config describes the simulated CHMU. Zero fields take the defaults noted.
type Config struct {
	Instances    int    // default 1
	HotlistSize  uint16 // ring entries, default 1024 (as the QEMU RFC)
	CounterWidth uint8  // N, default 16
	// Capacity is the DPA space the range bitmap covers (default 1 TiB,
	// rounded up to 64 × 256 MiB).
	Capacity     uint64
	UnitSizes    uint32 // CAP1 bitmask, default 4 KiB … 2 MiB (bits 4–13)
	DownSampling uint16 // CAP1 bitmask, default 2^0 … 2^4
	MinEpoch     hmu.Epoch
	MaxEpoch     hmu.Epoch // default 1 ms … 100 s
	NoAlwaysOn   bool      // clear the always-on capability
	// OpLatency is how many STATUS reads an operation stays in progress
	// (default 1; negative means 0: instantaneous, as the QEMU RFC).
	OpLatency int
	// Clock drives epochs (default time.Now).
	Clock func() time.Time
	// Notify stands in for the instance's MSI: called (without locks held)
	// when STATUS overflow or level goes from 0 to 1 and its interrupt is
	// enabled in CFG0.
	Notify func(instance int)
	// Seed seeds randomized down-sampling.
	Seed uint64
}

func (c *Config) defaults() error {
	if c.Instances == 0 {
		c.Instances = 1
	}
	if c.Instances < 0 || c.Instances > 255 {
		return fmt.Errorf("chmu: config: %d instances", c.Instances)
	}
	if c.HotlistSize == 0 {
		c.HotlistSize = 1024
	}
	if c.HotlistSize < 2 {
		return fmt.Errorf("chmu: config: hotlist of %d entries", c.HotlistSize)
	}
	if c.CounterWidth == 0 {
		c.CounterWidth = 16
	}
	if c.CounterWidth >= 64 {
		return fmt.Errorf("chmu: config: counter width %d", c.CounterWidth)
	}
	if c.Capacity == 0 {
		c.Capacity = 1 << 40
	}
	const chunk = 64 * hmu.RangeGranule // one bitmap word
	c.Capacity = (c.Capacity + chunk - 1) / chunk * chunk
	if c.UnitSizes == 0 {
		c.UnitSizes = 0x3ff << 4
	}
	if c.DownSampling == 0 {
		c.DownSampling = 0x1f
	}
	if c.MinEpoch == (hmu.Epoch{}) {
		c.MinEpoch = hmu.Epoch{Scale: 2, Multiplier: 1}
	}
	if c.MaxEpoch == (hmu.Epoch{}) {
		c.MaxEpoch = hmu.Epoch{Scale: 5, Multiplier: 100}
	}
	if c.OpLatency == 0 {
		c.OpLatency = 1
	}
	if c.OpLatency < 0 {
		c.OpLatency = 0
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	return nil
}

// Stats counts what the device did.
type Stats struct {
	Accesses uint64 // accesses counted (after filters and down-sampling)
	Inserted uint64 // entries written into rings
	Dropped  uint64 // entries lost to a full ring
	Epochs   uint64 // epochs closed
}

// Device is the simulated CHMU register block. It is safe for concurrent use.
type Device struct {
	cfg         Config
	instLen     uint64
	bitmapOff   uint64
	hotlistOff  uint64
	bitmapWords int

	mu    sync.Mutex
	insts []*instance
	rng   *rand.Rand
	stats Stats
}

type instance struct {
	idx    int
	cfg0   uint64 // as last written, with the control bits the device owns
	cfg1   uint64
	cfg2   uint64
	bitmap []uint64
	ring   []uint64

	enabled       bool
	op            hmu.Op
	opReads       int // STATUS reads left before op completes
	overflow      bool
	level         bool
	head, tail    uint16
	counts        map[uint64]uint64 // unit index → accesses this epoch
	epochStart    time.Time
	dsCount       uint64 // deterministic down-sampling phase
	pendingNotify bool
}

// New builds a disabled device with empty rings.
func New(cfg Config) (*Device, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	d := &Device{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x63686d75))}
	d.bitmapWords = int(cfg.Capacity / hmu.RangeGranule / 64)
	d.bitmapOff = hmu.RegsEnd
	d.hotlistOff = d.bitmapOff + uint64(d.bitmapWords)*8
	d.instLen = d.hotlistOff + uint64(cfg.HotlistSize)*8
	if d.instLen >= 1<<16 {
		return nil, fmt.Errorf("chmu: config: instance length %#x does not fit the 16-bit field", d.instLen)
	}
	for i := range cfg.Instances {
		d.insts = append(d.insts, &instance{
			idx:    i,
			bitmap: make([]uint64, d.bitmapWords),
			ring:   make([]uint64, cfg.HotlistSize),
			counts: make(map[uint64]uint64),
		})
	}
	return d, nil
}

// Size is the register block length in bytes.
func (d *Device) Size() uint64 { return hmu.InstanceBase + uint64(len(d.insts))*d.instLen }

// Stats returns the counters.
func (d *Device) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

func (d *Device) caps(i int) hmu.Caps {
	return hmu.Caps{
		MsgNum:        uint8(i),
		OverflowIRQ:   true,
		LevelIRQ:      true,
		Tracks:        0x3f,
		MaxEpoch:      d.cfg.MaxEpoch,
		MinEpoch:      d.cfg.MinEpoch,
		HotlistSize:   d.cfg.HotlistSize,
		UnitSizes:     d.cfg.UnitSizes,
		DownSampling:  d.cfg.DownSampling,
		EpochMode:     true,
		AlwaysOn:      !d.cfg.NoAlwaysOn,
		RandomDS:      true,
		BitmapOffset:  d.bitmapOff,
		HotlistOffset: d.hotlistOff,
	}
}

// locate splits a block offset into an instance and an instance-relative
// offset; inst is -1 for the common header.
func (d *Device) locate(off uint64, size uint64) (inst int, rel uint64, err error) {
	if off%size != 0 || off+size > d.Size() {
		return 0, 0, fmt.Errorf("chmu: %d-byte access at %#x: %w", size, off, hmu.ErrRange)
	}
	if off < hmu.InstanceBase {
		return -1, off, nil
	}
	off -= hmu.InstanceBase
	return int(off / d.instLen), off % d.instLen, nil
}

// Read64 implements hmu.Registers.
func (d *Device) Read64(off uint64) (uint64, error) {
	i, rel, err := d.locate(off, 8)
	if err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if i < 0 {
		c0, c1 := hmu.CommonCaps{Version: 1, Instances: len(d.insts), InstanceLen: d.instLen}.Encode()
		if rel == hmu.RegCommonCap0 {
			return c0, nil
		}
		return c1, nil
	}
	in := d.insts[i]
	switch {
	case rel == hmu.RegCap0:
		c0, _ := d.caps(i).Encode()
		return c0, nil
	case rel == hmu.RegCap1:
		_, c1 := d.caps(i).Encode()
		return c1, nil
	case rel == hmu.RegBitmapOffset:
		return d.bitmapOff, nil
	case rel == hmu.RegHotlistOffset:
		return d.hotlistOff, nil
	case rel == hmu.RegCfg0:
		return in.cfg0, nil
	case rel == hmu.RegCfg1:
		return in.cfg1, nil
	case rel == hmu.RegCfg2:
		return in.cfg2, nil
	case rel == hmu.RegStatus:
		v := d.status(in)
		d.advanceOp(in)
		return v, nil
	case rel == hmu.RegHead:
		return uint64(in.head) | uint64(in.tail)<<16, nil
	case rel >= d.bitmapOff && rel < d.hotlistOff:
		return in.bitmap[(rel-d.bitmapOff)/8], nil
	case rel >= d.hotlistOff:
		return in.ring[(rel-d.hotlistOff)/8], nil
	}
	return 0, nil // reserved
}

// Read16 implements hmu.Registers. Only HEAD and TAIL are 16-bit
// registers; other offsets read the matching quarter of their word.
func (d *Device) Read16(off uint64) (uint16, error) {
	i, rel, err := d.locate(off, 2)
	if err != nil {
		return 0, err
	}
	if i >= 0 && (rel == hmu.RegHead || rel == hmu.RegTail) {
		d.mu.Lock()
		defer d.mu.Unlock()
		if rel == hmu.RegHead {
			return d.insts[i].head, nil
		}
		return d.insts[i].tail, nil
	}
	v, err := d.Read64(off &^ 7)
	return uint16(v >> (off % 8 * 8)), err
}

// Write16 implements hmu.Registers: HEAD always, TAIL while disabled;
// any other 16-bit write is ignored.
func (d *Device) Write16(off uint64, v uint16) error {
	i, rel, err := d.locate(off, 2)
	if err != nil {
		return err
	}
	if i < 0 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	in := d.insts[i]
	switch rel {
	case hmu.RegHead:
		if v < d.cfg.HotlistSize {
			in.head = v
		}
	case hmu.RegTail:
		if !in.enabled && in.op == hmu.OpNone && v < d.cfg.HotlistSize {
			in.tail = v
		}
	}
	return nil
}

// Write64 implements hmu.Registers.
func (d *Device) Write64(off uint64, v uint64) error {
	i, rel, err := d.locate(off, 8)
	if err != nil {
		return err
	}
	if i < 0 {
		return nil
	}
	d.mu.Lock()
	in := d.insts[i]
	locked := in.enabled || in.op != hmu.OpNone
	switch {
	case rel == hmu.RegCfg0:
		d.writeCfg0(in, v)
	case rel == hmu.RegCfg1:
		if !locked {
			in.cfg1 = v
		}
	case rel == hmu.RegCfg2:
		if !locked {
			in.cfg2 = v & 0xffff
		}
	case rel == hmu.RegStatus:
		if v&hmu.StatusOverflow != 0 {
			in.overflow = false
		}
		if v&hmu.StatusLevel != 0 {
			in.level = false
		}
	case rel == hmu.RegHead:
		// An 8-byte write of the HEAD/TAIL word: HEAD takes the low half.
		if h := uint16(v); h < d.cfg.HotlistSize {
			in.head = h
		}
	case rel >= d.bitmapOff && rel < d.hotlistOff:
		if !locked {
			in.bitmap[(rel-d.bitmapOff)/8] = v
		}
	}
	d.mu.Unlock()
	return nil
}

// writeCfg0 applies a CFG0 write: the configuration fields always, and at
// most one operation: reset takes precedence over an enable change.
func (d *Device) writeCfg0(in *instance, v uint64) {
	if in.op != hmu.OpNone {
		return
	}
	const ctl = hmu.Cfg0Enable | hmu.Cfg0Reset
	in.cfg0 = v&^ctl | in.cfg0&hmu.Cfg0Enable
	switch {
	case v&hmu.Cfg0Reset != 0:
		in.cfg0 |= hmu.Cfg0Reset
		d.beginOp(in, hmu.OpResetting)
	case v&hmu.Cfg0Enable != 0 && !in.enabled:
		in.cfg0 |= hmu.Cfg0Enable
		d.beginOp(in, hmu.OpEnabling)
	case v&hmu.Cfg0Enable == 0 && in.enabled:
		in.cfg0 &^= hmu.Cfg0Enable
		d.beginOp(in, hmu.OpDisabling)
	}
}

func (d *Device) beginOp(in *instance, op hmu.Op) {
	in.op, in.opReads = op, d.cfg.OpLatency
	if in.opReads == 0 {
		d.finishOp(in)
	}
}

// advanceOp counts one STATUS read against the operation in progress.
func (d *Device) advanceOp(in *instance) {
	if in.op == hmu.OpNone {
		return
	}
	if in.opReads--; in.opReads <= 0 {
		d.finishOp(in)
	}
}

func (d *Device) finishOp(in *instance) {
	switch in.op {
	case hmu.OpEnabling:
		in.enabled = true
		in.epochStart = d.cfg.Clock()
		clear(in.counts)
	case hmu.OpDisabling:
		in.enabled = false
	case hmu.OpResetting:
		// As the QEMU RFC: counters, ring and indices start over.
		clear(in.counts)
		clear(in.ring)
		in.head, in.tail = 0, 0
		in.overflow, in.level = false, false
		in.cfg0 &^= hmu.Cfg0Reset
		if in.enabled {
			in.epochStart = d.cfg.Clock()
		}
	}
	in.op = hmu.OpNone
}

func (d *Device) status(in *instance) uint64 {
	return hmu.Status{Enabled: in.enabled, Op: in.op, CounterWidth: d.cfg.CounterWidth, Overflow: in.overflow, Level: in.level}.Encode()
}

// Access counts n accesses (reads, or writes when write is set) to the unit
// holding dpa, in every enabled instance whose filters accept it. It also
// closes epochs that have ended by the clock.
func (d *Device) Access(dpa uint64, write bool, n uint64) {
	d.mu.Lock()
	for _, in := range d.insts {
		d.closeEpochs(in)
		d.count(in, dpa, write, n)
	}
	d.unlockNotify()
}

// AccessRange counts the accesses of one transfer of the bytes [dpa, end):
// one per line of line bytes, split at every multiple of grain into the
// units Access would be given, under one lock and one look at the clock.
// A large transfer (an export's 1 MiB READ is 4096 grains of 256 bytes)
// so costs one lock, not one per grain, on the path of the transfer.
func (d *Device) AccessRange(dpa, end uint64, write bool, grain, line uint64) {
	if end <= dpa || grain == 0 || line == 0 {
		return
	}
	d.mu.Lock()
	for _, in := range d.insts {
		d.closeEpochs(in)
		for at := dpa; at < end; {
			next := min((at/grain+1)*grain, end)
			d.count(in, at, write, (next-1)/line-at/line+1)
			at = next
		}
	}
	d.unlockNotify()
}

// Tick closes the epochs that have ended by the clock.
func (d *Device) Tick() {
	d.mu.Lock()
	for _, in := range d.insts {
		d.closeEpochs(in)
	}
	d.unlockNotify()
}

// unlockNotify releases mu and runs the notifications raised meanwhile.
func (d *Device) unlockNotify() {
	var fire []int
	for _, in := range d.insts {
		if in.pendingNotify {
			in.pendingNotify = false
			fire = append(fire, in.idx)
		}
	}
	d.mu.Unlock()
	if d.cfg.Notify != nil {
		for _, i := range fire {
			d.cfg.Notify(i)
		}
	}
}

func (d *Device) count(in *instance, dpa uint64, write bool, n uint64) {
	if !in.enabled || n == 0 {
		return
	}
	c, _, _ := hmu.DecodeConfig(in.cfg0, in.cfg1, in.cfg2)
	if !c.Access.Counts(write, false) || c.UnitSize == 0 {
		return
	}
	if r := dpa / hmu.RangeGranule; r >= uint64(len(in.bitmap))*64 || in.bitmap[r/64]>>(r%64)&1 == 0 {
		return
	}
	if c.DSFactor > 0 {
		// Keep 1 in 2^f accesses: every 2^f-th, or each with probability
		// 2^-f under randomized down-sampling.
		f := uint64(1) << c.DSFactor
		var kept uint64
		if c.RandomDS {
			for range n {
				if d.rng.Uint64N(f) == 0 {
					kept++
				}
			}
		} else {
			kept = (in.dsCount%f + n) / f
			in.dsCount += n
		}
		if n = kept; n == 0 {
			return
		}
	}
	unit := dpa / c.UnitSize
	d.stats.Accesses += n
	v := in.counts[unit] + n
	if c.Mode == hmu.ModeAlwaysOn {
		if v >= uint64(c.Threshold) {
			// Reported as soon as it crosses; the count field is invalid.
			d.insert(in, hmu.Entry{Unit: unit})
			v = 0
		}
	}
	if v == 0 {
		delete(in.counts, unit)
		return
	}
	in.counts[unit] = v
}

// closeEpochs ends every epoch that has elapsed. After a long idle gap
// only the first epoch has counts; the rest are skipped without a loop.
func (d *Device) closeEpochs(in *instance) {
	if !in.enabled {
		return
	}
	c, _, _ := hmu.DecodeConfig(in.cfg0, in.cfg1, in.cfg2)
	length := c.Epoch.Duration()
	if c.Mode != hmu.ModeEpoch || length <= 0 {
		return
	}
	now := d.cfg.Clock()
	el := now.Sub(in.epochStart)
	if el < length {
		return
	}
	d.endEpoch(in, c)
	n := el / length
	in.epochStart = in.epochStart.Add(n * length)
	d.stats.Epochs += uint64(n)
}

// endEpoch pushes every unit at or above the threshold into the ring,
// hottest first (so a ring that fills keeps the hottest), and clears the
// counters.
func (d *Device) endEpoch(in *instance, c hmu.Config) {
	hot := make([]hmu.Entry, 0, len(in.counts))
	for u, n := range in.counts {
		if n >= uint64(c.Threshold) {
			hot = append(hot, hmu.Entry{Unit: u, Count: n})
		}
	}
	slices.SortFunc(hot, func(a, b hmu.Entry) int {
		if r := cmp.Compare(b.Count, a.Count); r != 0 {
			return r
		}
		return cmp.Compare(a.Unit, b.Unit)
	})
	for _, e := range hot {
		d.insert(in, e)
	}
	clear(in.counts)
}

// insert writes one entry at the tail. The overflow status is raised when
// the ring becomes full (as the QEMU RFC) and whenever an entry is lost;
// the level status when the fill reaches CFG2's threshold.
func (d *Device) insert(in *instance, e hmu.Entry) {
	size := d.cfg.HotlistSize
	c, _, _ := hmu.DecodeConfig(in.cfg0, in.cfg1, in.cfg2)
	if (in.tail+1)%size == in.head {
		d.stats.Dropped++
		d.raise(in, &in.overflow, c.OverflowIRQ)
		return
	}
	in.ring[in.tail] = e.Encode(d.cfg.CounterWidth)
	in.tail = (in.tail + 1) % size
	d.stats.Inserted++
	fill := (in.tail + size - in.head) % size
	if c.FillThreshold > 0 && fill >= c.FillThreshold {
		d.raise(in, &in.level, c.LevelIRQ)
	}
	if (in.tail+1)%size == in.head {
		d.raise(in, &in.overflow, c.OverflowIRQ)
	}
}

func (d *Device) raise(in *instance, bit *bool, irq bool) {
	if *bit {
		return
	}
	*bit = true
	if irq {
		in.pendingNotify = true
	}
}
