package chmu

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"cxlpool/hmu"
)

// Mirror keeps a memory image of the register block — typically a shared
// mapping of a file that hmu/mmio maps as well — in step with a Device. A
// plain file cannot trap register writes, so the mirror polls: each round
// it forwards to the device every software-writable word that changed
// since it last wrote it, then copies the device's registers back. Writable
// words are copied back with compare-and-swap, so a write software makes
// during the round is never overwritten; it is forwarded next round.
//
// This is how the real MMIO path is exercised without hardware, and how
// the simulator can expose its CHMU to a driver in another process. Its
// one blind spot: a software write of exactly the value the mirror last
// wrote is invisible, which is harmless for CHMU registers (such a write
// changes nothing, and STATUS always carries the counter width, so an
// RW1C write never equals it).
type Mirror struct {
	dev      *Device
	mem      []byte
	writable []bool   // per 8-byte word
	shadow   []uint64 // what the mirror last saw or wrote, per word

	mu     sync.Mutex
	rounds uint64
	done   chan struct{} // closed when the current round completes
}

// NewMirror writes the device's registers into mem (at least dev.Size()
// bytes, 8-byte aligned) and returns the mirror.
func NewMirror(dev *Device, mem []byte) (*Mirror, error) {
	size := dev.Size()
	if uint64(len(mem)) < size {
		return nil, fmt.Errorf("chmu: mirror: %d-byte image for a %d-byte block: %w", len(mem), size, hmu.ErrRange)
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(mem)))%8 != 0 {
		return nil, fmt.Errorf("chmu: mirror: image not 8-byte aligned: %w", hmu.ErrRange)
	}
	m := &Mirror{
		dev:      dev,
		mem:      mem[:size],
		writable: make([]bool, size/8),
		shadow:   make([]uint64, size/8),
		done:     make(chan struct{}),
	}
	for i := range dev.insts {
		base := hmu.InstanceBase + uint64(i)*dev.instLen
		for _, off := range []uint64{hmu.RegCfg0, hmu.RegCfg1, hmu.RegCfg2, hmu.RegStatus, hmu.RegHead} {
			m.writable[(base+off)/8] = true
		}
		for off := dev.bitmapOff; off < dev.hotlistOff; off += 8 {
			m.writable[(base+off)/8] = true
		}
	}
	for w := range m.shadow {
		v, err := dev.Read64(uint64(w) * 8)
		if err != nil {
			return nil, err
		}
		atomic.StoreUint64(m.word(w), v)
		m.shadow[w] = v
	}
	return m, nil
}

func (m *Mirror) cfg0Word(inst int) int {
	return int((hmu.InstanceBase + uint64(inst)*m.dev.instLen + hmu.RegCfg0) / 8)
}

func (m *Mirror) isCfg0(w int) bool {
	off := uint64(w) * 8
	return off >= hmu.InstanceBase && (off-hmu.InstanceBase)%m.dev.instLen == hmu.RegCfg0
}

func (m *Mirror) word(w int) *uint64 { return (*uint64)(unsafe.Pointer(&m.mem[w*8])) }

// Run runs rounds every interval until ctx ends.
func (m *Mirror) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		m.Round()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Round forwards software writes to the device and copies the device's
// registers back, once. Rounds must not run concurrently (Run owns them).
func (m *Mirror) Round() {
	// CFG0 starts operations, and a device ignores configuration writes
	// once one is under way, so software's order must survive: load every
	// CFG0 first, forward the other words, then the CFG0s. Whatever
	// software wrote before a CFG0 value seen in the first pass is visible
	// to the second (the loads and stores are sequentially consistent).
	cfg0 := make([]uint64, len(m.dev.insts))
	for i := range cfg0 {
		cfg0[i] = atomic.LoadUint64(m.word(m.cfg0Word(i)))
	}
	for w, ok := range m.writable {
		if !ok || m.isCfg0(w) {
			continue
		}
		if cur := atomic.LoadUint64(m.word(w)); cur != m.shadow[w] {
			m.forward(uint64(w)*8, cur, m.shadow[w])
			m.shadow[w] = cur
		}
	}
	for i, cur := range cfg0 {
		if w := m.cfg0Word(i); cur != m.shadow[w] {
			_ = m.dev.Write64(uint64(w)*8, cur)
			m.shadow[w] = cur
		}
	}
	for w := range m.shadow {
		v, _ := m.dev.Read64(uint64(w) * 8) // in range by construction
		if !m.writable[w] {
			atomic.StoreUint64(m.word(w), v)
			m.shadow[w] = v
		} else if atomic.CompareAndSwapUint64(m.word(w), m.shadow[w], v) {
			m.shadow[w] = v
		}
	}
	m.mu.Lock()
	m.rounds++
	close(m.done)
	m.done = make(chan struct{})
	m.mu.Unlock()
}

// forward replays a software write found in the image. HEAD and TAIL share
// a word; each half that changed becomes its own 16-bit write.
func (m *Mirror) forward(off, cur, old uint64) {
	rel := (off - hmu.InstanceBase) % m.dev.instLen
	if rel == hmu.RegHead {
		if uint16(cur) != uint16(old) {
			_ = m.dev.Write16(off, uint16(cur))
		}
		if uint16(cur>>16) != uint16(old>>16) {
			_ = m.dev.Write16(off+2, uint16(cur>>16))
		}
		return
	}
	_ = m.dev.Write64(off, cur)
}

// Sync waits until a whole round has run after the call, so the image
// reflects every device change made before it.
func (m *Mirror) Sync(ctx context.Context) error {
	m.mu.Lock()
	target := m.rounds + 2 // the round in progress may have started before the call
	m.mu.Unlock()
	for {
		m.mu.Lock()
		n, ch := m.rounds, m.done
		m.mu.Unlock()
		if n >= target {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}
