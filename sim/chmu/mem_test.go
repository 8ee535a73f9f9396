package chmu

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"cxlpool/hmu"
)

// memRegs is a register file over plain memory, the in-process stand-in
// for a mapped BAR (hmu/mmio does the same over a real mapping).
type memRegs struct{ mem []byte }

func unsafeBytes(w []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), len(w)*8)
}

func (r *memRegs) check(off, size uint64) error {
	if off%size != 0 || off+size > uint64(len(r.mem)) {
		return fmt.Errorf("mem: %d bytes at %#x: %w", size, off, hmu.ErrRange)
	}
	return nil
}

func (r *memRegs) Read64(off uint64) (uint64, error) {
	if err := r.check(off, 8); err != nil {
		return 0, err
	}
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&r.mem[off]))), nil
}

func (r *memRegs) Write64(off, v uint64) error {
	if err := r.check(off, 8); err != nil {
		return err
	}
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&r.mem[off])), v)
	return nil
}

func (r *memRegs) Read16(off uint64) (uint16, error) {
	if err := r.check(off, 2); err != nil {
		return 0, err
	}
	// Read the aligned 32-bit word atomically and pick the half: Go has no
	// 16-bit atomics, and a read has no side effect on plain memory.
	w := atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.mem[off&^3])))
	return uint16(w >> (off % 4 * 8)), nil
}

func (r *memRegs) Write16(off uint64, v uint16) error {
	if err := r.check(off, 2); err != nil {
		return err
	}
	// CAS loop on the aligned 32-bit word: an atomic 16-bit store for the
	// race detector's sake; the mirror never lets it clobber TAIL.
	p := (*uint32)(unsafe.Pointer(&r.mem[off&^3]))
	sh := off % 4 * 8
	for {
		old := atomic.LoadUint32(p)
		nw := old&^(0xffff<<sh) | uint32(v)<<sh
		if atomic.CompareAndSwapUint32(p, old, nw) {
			return nil
		}
	}
}
