package hmu

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Options tune the driver. The zero value is usable.
type Options struct {
	// PollInterval is the pause between STATUS reads while an operation is
	// in progress (default 20 µs: the ops are expected to take a few
	// register reads, not milliseconds).
	PollInterval time.Duration
	// OpTimeout bounds each enable/disable/reset handshake (default 1 s).
	OpTimeout time.Duration
	Logger    *slog.Logger
}

// Driver is an open CHMU register block.
type Driver struct {
	regs   Registers
	opts   Options
	common CommonCaps
}

// Open reads the block header and checks it describes at least one
// instance.
func Open(regs Registers, opts Options) (*Driver, error) {
	if opts.PollInterval <= 0 {
		opts.PollInterval = 20 * time.Microsecond
	}
	if opts.OpTimeout <= 0 {
		opts.OpTimeout = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c0, err := regs.Read64(RegCommonCap0)
	if err != nil {
		return nil, fmt.Errorf("hmu: open: %w", err)
	}
	c1, err := regs.Read64(RegCommonCap1)
	if err != nil {
		return nil, fmt.Errorf("hmu: open: %w", err)
	}
	cc := DecodeCommonCaps(c0, c1)
	if cc.Instances == 0 || cc.InstanceLen < RegsEnd || cc.InstanceLen%8 != 0 {
		return nil, fmt.Errorf("hmu: open: %d instances of %d bytes: %w", cc.Instances, cc.InstanceLen, ErrDevice)
	}
	return &Driver{regs: regs, opts: opts, common: cc}, nil
}

// CommonCaps returns the block header read at Open.
func (d *Driver) CommonCaps() CommonCaps { return d.common }

// Instances is the number of instances in the block.
func (d *Driver) Instances() int { return d.common.Instances }

// Instance reads instance i's capabilities and returns a handle to it.
func (d *Driver) Instance(i int) (*Instance, error) {
	if i < 0 || i >= d.common.Instances {
		return nil, fmt.Errorf("hmu: instance %d of %d: %w", i, d.common.Instances, ErrRange)
	}
	in := &Instance{d: d, idx: i, base: d.common.InstanceOffset(i)}
	var v [4]uint64
	for j, off := range []uint64{RegCap0, RegCap1, RegBitmapOffset, RegHotlistOffset} {
		var err error
		if v[j], err = d.regs.Read64(in.base + off); err != nil {
			return nil, fmt.Errorf("hmu: instance %d: capabilities: %w", i, err)
		}
	}
	in.caps = DecodeCaps(v[0], v[1], v[2], v[3])
	hl := in.caps.HotlistOffset + uint64(in.caps.HotlistSize)*8
	if in.caps.HotlistSize < 2 || in.caps.HotlistOffset%8 != 0 || in.caps.HotlistOffset < RegsEnd || hl > d.common.InstanceLen ||
		in.caps.BitmapOffset%8 != 0 {
		return nil, fmt.Errorf("hmu: instance %d: hotlist of %d entries at %#x, bitmap at %#x, instance length %#x: %w",
			i, in.caps.HotlistSize, in.caps.HotlistOffset, in.caps.BitmapOffset, d.common.InstanceLen, ErrDevice)
	}
	return in, nil
}

// Instance is one hotness tracker. Its methods are safe for concurrent
// use: each runs its register sequence alone (a drain waits for a
// reconfiguration's handshake and vice versa), so the collector can drain
// while an administrator changes the configuration.
type Instance struct {
	d    *Driver
	idx  int
	base uint64
	caps Caps
	mu   sync.Mutex
}

// Index is the instance number.
func (in *Instance) Index() int { return in.idx }

// Caps returns the capabilities read when the handle was made.
func (in *Instance) Caps() Caps { return in.caps }

func (in *Instance) read(off uint64) (uint64, error) { return in.d.regs.Read64(in.base + off) }

func (in *Instance) write(off, v uint64) error { return in.d.regs.Write64(in.base+off, v) }

// Status reads STATUS.
func (in *Instance) Status() (Status, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.status()
}

func (in *Instance) status() (Status, error) {
	v, err := in.read(RegStatus)
	if err != nil {
		return Status{}, fmt.Errorf("hmu: instance %d: status: %w", in.idx, err)
	}
	return DecodeStatus(v), nil
}

// Config reads the configuration back, including the range bitmap.
func (in *Instance) Config() (Config, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	var v [3]uint64
	for j, off := range []uint64{RegCfg0, RegCfg1, RegCfg2} {
		var err error
		if v[j], err = in.read(off); err != nil {
			return Config{}, fmt.Errorf("hmu: instance %d: config: %w", in.idx, err)
		}
	}
	c, _, _ := DecodeConfig(v[0], v[1], v[2])
	nbits := in.caps.BitmapBits()
	c.Ranges = []uint64{} // none: distinct from nil (all)
	for w := uint64(0); w < nbits/64; w++ {
		word, err := in.read(in.caps.BitmapOffset + w*8)
		if err != nil {
			return Config{}, fmt.Errorf("hmu: instance %d: range bitmap: %w", in.idx, err)
		}
		for b := range uint64(64) {
			if word>>b&1 == 1 {
				c.Ranges = append(c.Ranges, w*64+b)
			}
		}
	}
	if uint64(len(c.Ranges)) == nbits {
		c.Ranges = nil // everything: the canonical form
	}
	return c, nil
}

// Validate checks c against the instance's capabilities.
func (in *Instance) Validate(c Config) error {
	cp := in.caps
	bad := func(format string, a ...any) error {
		return fmt.Errorf("hmu: instance %d: %s: %w", in.idx, fmt.Sprintf(format, a...), ErrUnsupported)
	}
	switch {
	case !cp.CanTrack(c.Access):
		return bad("access type %v", c.Access)
	case !cp.SupportsUnit(c.UnitSize):
		return bad("unit size %d", c.UnitSize)
	case c.DSFactor >= 16 || cp.DownSampling>>c.DSFactor&1 == 0:
		return bad("down-sampling factor 2^%d", c.DSFactor)
	case c.RandomDS && !cp.RandomDS:
		return bad("randomized down-sampling")
	case c.OverflowIRQ && !cp.OverflowIRQ:
		return bad("overflow interrupt")
	case c.LevelIRQ && !cp.LevelIRQ:
		return bad("level interrupt")
	case c.FillThreshold >= cp.HotlistSize:
		return bad("fill threshold %d with a %d-entry ring", c.FillThreshold, cp.HotlistSize)
	}
	switch c.Mode {
	case ModeEpoch:
		if !cp.EpochMode {
			return bad("epoch mode")
		}
		d, lo, hi := c.Epoch.Duration(), cp.MinEpoch.Duration(), cp.MaxEpoch.Duration()
		if d == 0 || d < lo || (hi > 0 && d > hi) {
			return bad("epoch %v outside %v…%v", d, lo, hi)
		}
	case ModeAlwaysOn:
		if !cp.AlwaysOn {
			return bad("always-on mode")
		}
	default:
		return bad("mode %d", c.Mode)
	}
	nbits := in.caps.BitmapBits()
	for _, r := range c.Ranges {
		if r >= nbits {
			return bad("range %d beyond the %d-bit bitmap", r, nbits)
		}
	}
	return nil
}

// Configure writes a validated configuration into a disabled instance:
// CFG1, the range bitmap, CFG2, then CFG0 with the enable bit clear.
func (in *Instance) Configure(ctx context.Context, c Config) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if err := in.Validate(c); err != nil {
		return err
	}
	st, err := in.waitIdle(ctx, "configure")
	if err != nil {
		return err
	}
	if st.Enabled {
		return fmt.Errorf("hmu: instance %d: configure: %w", in.idx, ErrEnabled)
	}
	return in.writeConfig(c, false)
}

// writeConfig writes CFG1, the bitmap, CFG2 and CFG0 (with enable as given).
func (in *Instance) writeConfig(c Config, enable bool) error {
	if err := in.write(RegCfg1, c.CFG1()); err != nil {
		return fmt.Errorf("hmu: instance %d: write CFG1: %w", in.idx, err)
	}
	if err := in.writeBitmap(c.Ranges); err != nil {
		return err
	}
	if err := in.write(RegCfg2, c.CFG2()); err != nil {
		return fmt.Errorf("hmu: instance %d: write CFG2: %w", in.idx, err)
	}
	if err := in.write(RegCfg0, c.CFG0(enable, false)); err != nil {
		return fmt.Errorf("hmu: instance %d: write CFG0: %w", in.idx, err)
	}
	return nil
}

func (in *Instance) writeBitmap(ranges []uint64) error {
	nbits := in.caps.BitmapBits()
	words := make([]uint64, nbits/64)
	if ranges == nil {
		for i := range words {
			words[i] = ^uint64(0)
		}
	}
	for _, r := range ranges {
		words[r/64] |= 1 << (r % 64)
	}
	for i, w := range words {
		if err := in.write(in.caps.BitmapOffset+uint64(i)*8, w); err != nil {
			return fmt.Errorf("hmu: instance %d: write range bitmap: %w", in.idx, err)
		}
	}
	return nil
}

// Start is the Linux RFC start sequence: reset the counters, wait for the
// device to go idle, write CFG1 and the range bitmap, write CFG2 (the fill
// threshold; the RFC uses half the ring, which is the default here when
// c.FillThreshold is 0), then enable through CFG0 and wait for STATUS to
// show the instance enabled. An enabled instance is disabled first.
func (in *Instance) Start(ctx context.Context, c Config) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if c.FillThreshold == 0 {
		c.FillThreshold = in.caps.HotlistSize / 2
	}
	if err := in.Validate(c); err != nil {
		return err
	}
	st, err := in.waitIdle(ctx, "start")
	if err != nil {
		return err
	}
	if st.Enabled {
		if err := in.disable(ctx); err != nil {
			return err
		}
	}
	if err := in.reset(ctx); err != nil {
		return err
	}
	// CFG0 is written last, with enable, so the device never counts under
	// a half-written configuration.
	if err := in.writeConfig(c, true); err != nil {
		return err
	}
	return in.handshake(ctx, "enable", func(st Status, cfg0 uint64) bool { return st.Enabled })
}

// Enable sets CFG0's enable bit and waits until STATUS shows the instance
// enabled.
func (in *Instance) Enable(ctx context.Context) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.control(ctx, "enable", func(v uint64) uint64 { return v&^Cfg0Reset | Cfg0Enable },
		func(st Status, _ uint64) bool { return st.Enabled })
}

// Disable clears CFG0's enable bit and waits until STATUS shows the
// instance disabled.
func (in *Instance) Disable(ctx context.Context) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.disable(ctx)
}

func (in *Instance) disable(ctx context.Context) error {
	return in.control(ctx, "disable", func(v uint64) uint64 { return v &^ (Cfg0Reset | Cfg0Enable) },
		func(st Status, _ uint64) bool { return !st.Enabled })
}

// Reset sets CFG0's reset-counters bit and waits until the device has
// cleared it (it is self-clearing) with no operation in progress. A reset
// empties the counters and the ring.
func (in *Instance) Reset(ctx context.Context) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.reset(ctx)
}

func (in *Instance) reset(ctx context.Context) error {
	return in.control(ctx, "reset", func(v uint64) uint64 { return v | Cfg0Reset },
		func(_ Status, cfg0 uint64) bool { return cfg0&Cfg0Reset == 0 })
}

// control waits for the device to be idle, rewrites CFG0 through edit
// (keeping the configuration fields) and runs the handshake until done.
func (in *Instance) control(ctx context.Context, name string, edit func(uint64) uint64, done func(Status, uint64) bool) error {
	if _, err := in.waitIdle(ctx, name); err != nil {
		return err
	}
	v, err := in.read(RegCfg0)
	if err != nil {
		return fmt.Errorf("hmu: instance %d: %s: %w", in.idx, name, err)
	}
	// Writing enable=current keeps the state; only the bits edit changes
	// start an operation.
	if err := in.write(RegCfg0, edit(v)); err != nil {
		return fmt.Errorf("hmu: instance %d: %s: %w", in.idx, name, err)
	}
	return in.handshake(ctx, name, done)
}

// handshake polls STATUS (and CFG0) until no operation is in progress and
// done holds. Checking the end state, not only "op idle", makes the wait
// correct for a device that has not yet noticed the write (it still shows
// idle and the old state).
func (in *Instance) handshake(ctx context.Context, name string, done func(Status, uint64) bool) error {
	return in.poll(ctx, name, func() (bool, error) {
		st, err := in.status()
		if err != nil || st.Op != OpNone {
			return false, err
		}
		cfg0, err := in.read(RegCfg0)
		if err != nil {
			return false, err
		}
		return done(st, cfg0), nil
	})
}

// waitIdle polls STATUS until no operation is in progress.
func (in *Instance) waitIdle(ctx context.Context, name string) (Status, error) {
	var st Status
	err := in.poll(ctx, name, func() (bool, error) {
		var err error
		st, err = in.status()
		return err == nil && st.Op == OpNone, err
	})
	return st, err
}

// poll runs check until it reports true, an error, the context ends or
// the bounded wait (Options.OpTimeout) runs out.
func (in *Instance) poll(ctx context.Context, name string, check func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, in.d.opts.OpTimeout)
	defer cancel()
	var t *time.Timer
	for n := 0; ; n++ {
		ok, err := check()
		if err != nil {
			return fmt.Errorf("hmu: instance %d: %s: %w", in.idx, name, err)
		}
		if ok {
			if n > 0 {
				in.d.opts.Logger.Debug("chmu operation complete", "instance", in.idx, "op", name, "polls", n)
			}
			return nil
		}
		if t == nil {
			t = time.NewTimer(in.d.opts.PollInterval)
			defer t.Stop()
		} else {
			t.Reset(in.d.opts.PollInterval)
		}
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				st, _ := in.status()
				return fmt.Errorf("hmu: instance %d: %s: op %v after %d polls: %w", in.idx, name, st.Op, n+1, ErrTimeout)
			}
			return fmt.Errorf("hmu: instance %d: %s: %w", in.idx, name, ctx.Err())
		case <-t.C:
		}
	}
}

// DrainStatus tells what a Drain saw.
type DrainStatus struct {
	Entries  int    // records appended
	Overflow bool   // the ring overflowed since the last drain: entries were lost
	Level    bool   // the fill level crossed the notification threshold
	UnitSize uint64 // bytes per unit under the current configuration
}

// Drain appends the ring's entries to dst and hands the slots back to the
// device. It first clears the RW1C status bits it saw, so an overflow or
// level crossing that happens while draining raises them (and the
// interrupt) again instead of being lost; then it copies head..tail
// (wrapping), and finally writes HEAD = tail.
func (in *Instance) Drain(dst []Record) ([]Record, DrainStatus, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	var ds DrainStatus
	sv, err := in.read(RegStatus)
	if err != nil {
		return dst, ds, fmt.Errorf("hmu: instance %d: drain: %w", in.idx, err)
	}
	st := DecodeStatus(sv)
	ds.Overflow, ds.Level = st.Overflow, st.Level
	if w := sv & StatusRW1C; w != 0 {
		if err := in.write(RegStatus, w); err != nil {
			return dst, ds, fmt.Errorf("hmu: instance %d: clear status: %w", in.idx, err)
		}
	}
	cfg1, err := in.read(RegCfg1)
	if err != nil {
		return dst, ds, fmt.Errorf("hmu: instance %d: drain: %w", in.idx, err)
	}
	c, _, _ := DecodeConfig(0, cfg1, 0)
	ds.UnitSize = c.UnitSize
	head, err := in.d.regs.Read16(in.base + RegHead)
	if err != nil {
		return dst, ds, fmt.Errorf("hmu: instance %d: read head: %w", in.idx, err)
	}
	tail, err := in.d.regs.Read16(in.base + RegTail)
	if err != nil {
		return dst, ds, fmt.Errorf("hmu: instance %d: read tail: %w", in.idx, err)
	}
	size := in.caps.HotlistSize
	if head >= size || tail >= size {
		return dst, ds, fmt.Errorf("hmu: instance %d: head %d, tail %d in a %d-entry ring: %w", in.idx, head, tail, size, ErrDevice)
	}
	if c.UnitSize == 0 {
		return dst, ds, fmt.Errorf("hmu: instance %d: CFG1 unit size field %#x: %w", in.idx, cfg1&0xffffffff, ErrDevice)
	}
	if bulk, ok := in.d.regs.(BulkReader); ok {
		dst, err = in.drainBulk(bulk, dst, head, tail, st.CounterWidth, c, &ds)
	} else {
		for i := head; i != tail; i = (i + 1) % size {
			var v uint64
			if v, err = in.read(in.caps.HotlistOffset + uint64(i)*8); err != nil {
				err = fmt.Errorf("hmu: instance %d: read hotlist[%d]: %w", in.idx, i, err)
				break
			}
			dst = append(dst, entryRecord(v, st.CounterWidth, c))
			ds.Entries++
		}
	}
	if err != nil {
		return dst, ds, err
	}
	if head != tail {
		if err := in.d.regs.Write16(in.base+RegHead, tail); err != nil {
			return dst, ds, fmt.Errorf("hmu: instance %d: write head: %w", in.idx, err)
		}
	}
	return dst, ds, nil
}

// entryRecord decodes a raw hotlist entry under configuration c.
func entryRecord(v uint64, width uint8, c Config) Record {
	e := DecodeEntry(v, width)
	r := Record{DPA: e.Unit * c.UnitSize, Count: e.Count}
	if c.Mode == ModeAlwaysOn {
		r.Count = 1
	}
	return r
}

// drainBulk copies the ring's entries head..tail (wrapping) in runs of up
// to len(buf) registers and decodes them.
func (in *Instance) drainBulk(bulk BulkReader, dst []Record, head, tail uint16, width uint8, c Config, ds *DrainStatus) ([]Record, error) {
	var buf [256]uint64
	size := in.caps.HotlistSize
	for i := head; i != tail; {
		end := tail
		if tail < i {
			end = size // up to the ring's end, then from 0
		}
		n := min(int(end-i), len(buf))
		if err := bulk.ReadRange64(in.base+in.caps.HotlistOffset+uint64(i)*8, buf[:n]); err != nil {
			return dst, fmt.Errorf("hmu: instance %d: read hotlist[%d:%d]: %w", in.idx, i, int(i)+n, err)
		}
		for _, v := range buf[:n] {
			dst = append(dst, entryRecord(v, width, c))
		}
		ds.Entries += n
		i = uint16((int(i) + n) % int(size))
	}
	return dst, nil
}
