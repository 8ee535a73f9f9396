// Package mmio is the CHMU register file over a memory-mapped PCI BAR: it
// maps /sys/bus/pci/devices/<bdf>/resource<N> (or any file, which is how
// it is tested) at the CHMU block's offset and implements hmu.Registers
// with single loads and stores of the access width, as MMIO needs. It also
// finds that offset from the CXL Register Locator DVSEC in the device's
// config space.
package mmio

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"cxlpool/hmu"
)

// Regs is a mapped CHMU register block. Its methods are safe for concurrent
// use; Close must not race with them.
type Regs struct {
	mapping []byte // the whole mapping, page aligned
	mem     []byte // the block inside it
}

// Open maps size bytes of the file at path starting at offset (any
// alignment: the mapping starts at the page below). A size of 0 reads the
// block header first and maps the whole block it describes.
func Open(path string, offset int64, size int64) (*Regs, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_SYNC, 0)
	if err != nil {
		return nil, fmt.Errorf("mmio: open: %w", err)
	}
	defer f.Close() // the mapping outlives the descriptor
	if offset < 0 || size < 0 {
		return nil, fmt.Errorf("mmio: offset %d, size %d: %w", offset, size, hmu.ErrRange)
	}
	if size == 0 {
		var hdr [16]byte
		if _, err := f.ReadAt(hdr[:], offset); err != nil {
			return nil, fmt.Errorf("mmio: read block header: %w", err)
		}
		cc := hmu.DecodeCommonCaps(le64(hdr[0:]), le64(hdr[8:]))
		if cc.Instances == 0 || cc.InstanceLen == 0 {
			return nil, fmt.Errorf("mmio: block header: %d instances of %d bytes: %w", cc.Instances, cc.InstanceLen, hmu.ErrDevice)
		}
		size = int64(cc.InstanceOffset(cc.Instances))
	}
	page := int64(os.Getpagesize())
	start := offset &^ (page - 1)
	delta := offset - start
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && offset+size > fi.Size() {
		return nil, fmt.Errorf("mmio: %d bytes at %#x past the end of a %d-byte file: %w", size, offset, fi.Size(), hmu.ErrRange)
	}
	m, err := unix.Mmap(int(f.Fd()), start, int(delta+size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmio: mmap %s: %w", path, err)
	}
	return &Regs{mapping: m, mem: m[delta : delta+size]}, nil
}

func le64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// Close unmaps the block.
func (r *Regs) Close() error {
	if r.mapping == nil {
		return nil
	}
	err := unix.Munmap(r.mapping)
	r.mapping, r.mem = nil, nil
	return err
}

// Size is the mapped block length.
func (r *Regs) Size() int { return len(r.mem) }

func (r *Regs) at(off, size uint64) (unsafe.Pointer, error) {
	if off%size != 0 || off+size > uint64(len(r.mem)) || off+size < off {
		return nil, fmt.Errorf("mmio: %d-byte access at %#x of a %d-byte block: %w", size, off, len(r.mem), hmu.ErrRange)
	}
	p := unsafe.Pointer(&r.mem[off])
	if uintptr(p)%uintptr(size) != 0 {
		return nil, fmt.Errorf("mmio: block mapped at a misaligned address: %w", hmu.ErrRange)
	}
	return p, nil
}

// Read64 is one 8-byte load.
func (r *Regs) Read64(off uint64) (uint64, error) {
	p, err := r.at(off, 8)
	if err != nil {
		return 0, err
	}
	return atomic.LoadUint64((*uint64)(p)), nil
}

// Write64 is one 8-byte store.
func (r *Regs) Write64(off, v uint64) error {
	p, err := r.at(off, 8)
	if err != nil {
		return err
	}
	atomic.StoreUint64((*uint64)(p), v)
	return nil
}

// ReadRange64 copies len(dst) consecutive 64-bit registers from off, each
// one 8-byte load (hmu.BulkReader): the ring drain's path.
func (r *Regs) ReadRange64(off uint64, dst []uint64) error {
	n := uint64(len(dst)) * 8
	if off%8 != 0 || off+n > uint64(len(r.mem)) || off+n < off {
		return fmt.Errorf("mmio: %d-byte read at %#x of a %d-byte block: %w", n, off, len(r.mem), hmu.ErrRange)
	}
	if n == 0 {
		return nil
	}
	p := unsafe.Pointer(&r.mem[off])
	if uintptr(p)%8 != 0 {
		return fmt.Errorf("mmio: block mapped at a misaligned address: %w", hmu.ErrRange)
	}
	src := unsafe.Slice((*uint64)(p), len(dst))
	for i := range src {
		dst[i] = atomic.LoadUint64(&src[i])
	}
	return nil
}

// Read16 is one 2-byte load. Go has no 16-bit atomics; the pointer load
// compiles to a single 16-bit MOV, which is what an MMIO register needs.
func (r *Regs) Read16(off uint64) (uint16, error) {
	p, err := r.at(off, 2)
	if err != nil {
		return 0, err
	}
	return *(*uint16)(p), nil
}

// Write16 is one 2-byte store: never a read-modify-write of the word, which
// would race the device's TAIL next to HEAD.
func (r *Regs) Write16(off uint64, v uint16) error {
	p, err := r.at(off, 2)
	if err != nil {
		return err
	}
	*(*uint16)(p) = v
	return nil
}

// ResourcePath is the sysfs file of BAR bar of PCI function bdf
// ("0000:0d:00.0").
func ResourcePath(sysfs, bdf string, bar int) string {
	return filepath.Join(sysfs, "bus/pci/devices", bdf, fmt.Sprintf("resource%d", bar))
}

// Register Locator DVSEC (CXL 3.2 §8.1.9): PCIe extended capability 0023h
// (DVSEC) with vendor 1E98h and DVSEC ID 0008h; entries of 8 bytes from
// +0Ch: low dword [2:0] BAR indicator, [15:8] block identifier,
// [31:16] offset bits 31:16; high dword offset bits 63:32.
const (
	extCapStart   = 0x100
	extCapDVSEC   = 0x0023
	cxlVendor     = 0x1e98
	dvsecRegLoc   = 0x0008
	regLocEntries = 0x0c
)

// Block identifiers in the Register Locator.
const (
	BlockComponent = 1
	BlockDevice    = 3
	BlockCPMU      = 4
	BlockCHMU      = 5 // QEMU CHMU RFC RBI_CXL_CHMU_REG
)

// RegisterBlock is one Register Locator entry.
type RegisterBlock struct {
	BAR    uint8
	ID     uint8
	Offset uint64
}

// ErrNoLocator: the config space has no Register Locator DVSEC.
var ErrNoLocator = errors.New("no CXL register locator")

// ParseRegisterLocator walks the extended capability list of a PCI config
// space image and returns the Register Locator's entries.
func ParseRegisterLocator(cfg []byte) ([]RegisterBlock, error) {
	le32 := func(off int) uint32 {
		return uint32(cfg[off]) | uint32(cfg[off+1])<<8 | uint32(cfg[off+2])<<16 | uint32(cfg[off+3])<<24
	}
	seen := 0
	for off := extCapStart; off != 0; {
		if off%4 != 0 || off < extCapStart || off+12 > len(cfg) || seen > 1024 {
			break
		}
		seen++
		hdr := le32(off)
		if hdr == 0 || hdr == 0xffffffff {
			break
		}
		next := int(hdr >> 20)
		if hdr&0xffff == extCapDVSEC {
			h1, h2 := le32(off+4), le32(off+8)
			length := int(h1 >> 20)
			if h1&0xffff == cxlVendor && h2&0xffff == dvsecRegLoc {
				if length < regLocEntries || off+length > len(cfg) {
					return nil, fmt.Errorf("mmio: register locator of %d bytes at %#x: %w", length, off, hmu.ErrDevice)
				}
				var out []RegisterBlock
				for e := off + regLocEntries; e+8 <= off+length; e += 8 {
					lo, hi := le32(e), le32(e+4)
					out = append(out, RegisterBlock{
						BAR:    uint8(lo & 7),
						ID:     uint8(lo >> 8),
						Offset: uint64(hi)<<32 | uint64(lo&0xffff0000),
					})
				}
				return out, nil
			}
		}
		if next <= off {
			break // the list only moves forward; anything else is a loop
		}
		off = next
	}
	return nil, fmt.Errorf("mmio: %w", ErrNoLocator)
}

// FindCHMU reads the config space of PCI function bdf under sysfs (usually
// "/sys") and returns the resource file and offset of its n-th CHMU block.
func FindCHMU(sysfs, bdf string, n int) (path string, offset int64, err error) {
	cfg, err := os.ReadFile(filepath.Join(sysfs, "bus/pci/devices", bdf, "config"))
	if err != nil {
		return "", 0, fmt.Errorf("mmio: %w", err)
	}
	blocks, err := ParseRegisterLocator(cfg)
	if err != nil {
		return "", 0, err
	}
	for _, b := range blocks {
		if b.ID != BlockCHMU {
			continue
		}
		if n == 0 {
			return ResourcePath(sysfs, bdf, int(b.BAR)), int64(b.Offset), nil
		}
		n--
	}
	return "", 0, fmt.Errorf("mmio: %s: CHMU block: %w", bdf, ErrNoLocator)
}
