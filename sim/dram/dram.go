// Package dram is the virtual box's memory: one sparse anonymous memory file
// (memfd) the size of the device's capacity. Untouched pages cost nothing,
// so a 1 TiB box runs on a laptop; Zero punches holes, which both clears the
// bytes and gives the pages back to the kernel, and is how the box sanitizes
// released capacity. The file descriptor is exposed so another component can
// mmap the same memory.
package dram

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// ErrRange reports an access outside the memory.
var ErrRange = errors.New("dram: access outside the memory")

// DRAM is a sparse memory file. Methods are safe for concurrent use (they
// map to pread, pwrite and fallocate, which the kernel serialises per page).
type DRAM struct {
	f    *os.File
	size uint64
}

// New creates a memory of size bytes. No page is allocated until written.
func New(size uint64) (*DRAM, error) {
	if size == 0 || size > 1<<62 {
		return nil, fmt.Errorf("dram: size %d out of range", size)
	}
	fd, err := unix.MemfdCreate("cxlsim-dram", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("dram: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("dram: ftruncate to %d bytes: %w", size, err)
	}
	return &DRAM{f: os.NewFile(uintptr(fd), "cxlsim-dram"), size: size}, nil
}

// Size returns the memory size in bytes.
func (d *DRAM) Size() uint64 { return d.size }

func (d *DRAM) check(off uint64, n int) error {
	if off > d.size || uint64(n) > d.size-off {
		return fmt.Errorf("dram: %d bytes at %#x, size %#x: %w", n, off, d.size, ErrRange)
	}
	return nil
}

// ReadAt reads len(p) bytes at off. Never-written bytes read as zero.
func (d *DRAM) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("dram: negative offset %d: %w", off, ErrRange)
	}
	if err := d.check(uint64(off), len(p)); err != nil {
		return 0, err
	}
	n, err := d.f.ReadAt(p, off)
	if err == io.EOF && n == len(p) {
		err = nil
	}
	if err != nil {
		return n, fmt.Errorf("dram: read: %w", err)
	}
	return n, nil
}

// WriteAt writes p at off.
func (d *DRAM) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("dram: negative offset %d: %w", off, ErrRange)
	}
	if err := d.check(uint64(off), len(p)); err != nil {
		return 0, err
	}
	n, err := d.f.WriteAt(p, off)
	if err != nil {
		return n, fmt.Errorf("dram: write: %w", err)
	}
	return n, nil
}

// Zero clears length bytes at off and frees the pages behind them. Partial
// pages at the edges are zeroed by the kernel too, so the range reads as
// zero afterwards whatever its alignment.
func (d *DRAM) Zero(off, length uint64) error {
	if length == 0 {
		return nil
	}
	if off > d.size || length > d.size-off {
		return fmt.Errorf("dram: zero %d bytes at %#x, size %#x: %w", length, off, d.size, ErrRange)
	}
	err := unix.Fallocate(int(d.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(off), int64(length))
	if err != nil {
		return fmt.Errorf("dram: punch hole %#x+%#x: %w", off, length, err)
	}
	return nil
}

// Resident returns the bytes of memory currently backed by pages.
func (d *DRAM) Resident() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(d.f.Fd()), &st); err != nil {
		return 0, fmt.Errorf("dram: fstat: %w", err)
	}
	return uint64(st.Blocks) * 512, nil
}

// Fd returns the memory file descriptor, valid until Close.
func (d *DRAM) Fd() uintptr { return d.f.Fd() }

// File returns the memory file, valid until Close.
func (d *DRAM) File() *os.File { return d.f }

// Close releases the memory.
func (d *DRAM) Close() error {
	if err := d.f.Close(); err != nil {
		return fmt.Errorf("dram: close: %w", err)
	}
	return nil
}
