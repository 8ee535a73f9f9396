package rdma

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Memory is the device memory as the export path reaches it: mapped, so a
// load or store through a returned slice is a load or store to the device
// (in the virtual box, to the memfd the simulated hosts read and write;
// on hardware, to the pool behind a DAX device). Transports then move
// bytes between the network and the device without staging copies, and
// atomics are plain CPU atomics on the mapped words.
type Memory interface {
	// Bytes returns the n bytes at device physical address dpa. The slice
	// stays valid until the Memory is closed; its capacity is n.
	Bytes(dpa, n uint64) ([]byte, error)
}

// Mapping is a Memory over a shared mapping of a file: the virtual box's
// memfd (sim/dram) or a DAX character device. Byte 0 of the file is device
// physical address Base.
type Mapping struct {
	base uint64

	mu  sync.Mutex
	mem []byte // nil once closed
}

// MapFile maps size bytes of f, shared and read-write, as device physical
// addresses [base, base+size). f may be closed afterwards: the mapping
// holds its own reference. Pages are reserved lazily (MAP_NORESERVE), so a
// 1 TiB sparse memfd maps at the cost of its page tables only.
func MapFile(f *os.File, base, size uint64) (*Mapping, error) {
	if size == 0 || size > 1<<50 || base+size < base {
		return nil, fmt.Errorf("rdma: map %s: size %#x at %#x out of range: %w", f.Name(), size, base, ErrInvalid)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("rdma: mmap %s (%#x bytes): %w", f.Name(), size, err)
	}
	return &Mapping{base: base, mem: mem}, nil
}

// Base is the device physical address of the first mapped byte.
func (m *Mapping) Base() uint64 { return m.base }

// Size is the mapped length in bytes.
func (m *Mapping) Size() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return uint64(len(m.mem))
}

// Bytes implements Memory.
func (m *Mapping) Bytes(dpa, n uint64) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mem == nil {
		return nil, fmt.Errorf("rdma: memory is closed: %w", ErrInvalid)
	}
	size := uint64(len(m.mem))
	if dpa < m.base || dpa-m.base > size || n > size-(dpa-m.base) {
		return nil, fmt.Errorf("rdma: %#x bytes at DPA %#x outside the mapped %#x+%#x: %w", n, dpa, m.base, size, ErrRange)
	}
	o := dpa - m.base
	return m.mem[o : o+n : o+n], nil
}

// Zeroer is a Memory that can zero a range without writing every byte
// (a sparse memfd gives its pages back).
type Zeroer interface {
	Zero(dpa, n uint64) error
}

// Zero implements Zeroer: the range's pages are removed from a memfd or
// tmpfs file (they read zero afterwards and cost nothing), or written with
// zeros where the file cannot drop them (a DAX device).
func (m *Mapping) Zero(dpa, n uint64) error {
	b, err := m.Bytes(dpa, n)
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if err := unix.Madvise(b, unix.MADV_REMOVE); err != nil {
		clear(b)
	}
	return nil
}

// Close unmaps the memory. The caller must have revoked every export that
// uses it first (Service.Close): a slice used after Close faults.
func (m *Mapping) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mem == nil {
		return nil
	}
	err := unix.Munmap(m.mem)
	m.mem = nil
	if err != nil {
		return fmt.Errorf("rdma: munmap: %w", err)
	}
	return nil
}
