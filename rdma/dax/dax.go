// Package dax is the rdma.Memory of a real box: the pool's capacity as
// the management computer reaches it through a device-DAX character
// device (/dev/daxX.Y), mapped shared so that exports load and store the
// pool's bytes directly, exactly as the virtual box's memfd is mapped.
//
// A regular file works too (an fsdax file, or a fixture in tests); its
// size is the file's.
package dax

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"cxlpool/rdma"
)

// Config names the device.
type Config struct {
	// Path is the device (or file) to map.
	Path string
	// Base is the device physical address of the device's first byte:
	// the DPA where the DC region it exposes starts.
	Base uint64
	// Size limits the mapping; 0 maps the whole device.
	Size uint64
	// Sysfs is where sysfs is mounted ["/sys"].
	Sysfs string
}

// Memory is a mapped DAX device.
type Memory struct {
	*rdma.Mapping
	path  string
	align uint64
}

// Open maps the device read-write. A device-DAX mapping must be a
// multiple of the device's alignment (its "align" attribute, 2 MiB by
// default), so Size is checked against it.
func Open(cfg Config) (*Memory, error) {
	if cfg.Sysfs == "" {
		cfg.Sysfs = "/sys"
	}
	f, err := os.OpenFile(cfg.Path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("dax: %w", err)
	}
	defer f.Close() // the mapping keeps its own reference
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("dax: stat %s: %w", cfg.Path, err)
	}
	var size, align uint64
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		dir := filepath.Join(cfg.Sysfs, "dev", "char", fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)))
		if size, align, err = attributes(dir); err != nil {
			return nil, fmt.Errorf("dax: %s: %w", cfg.Path, err)
		}
	case unix.S_IFREG:
		size, align = uint64(st.Size), uint64(os.Getpagesize())
	default:
		return nil, fmt.Errorf("dax: %s is neither a character device nor a file: %w", cfg.Path, rdma.ErrInvalid)
	}
	if cfg.Size != 0 {
		if cfg.Size > size {
			return nil, fmt.Errorf("dax: %s holds %#x bytes, %#x asked for: %w", cfg.Path, size, cfg.Size, rdma.ErrInvalid)
		}
		size = cfg.Size
	}
	if size == 0 || size%align != 0 {
		return nil, fmt.Errorf("dax: %s: size %#x is not a positive multiple of the alignment %#x: %w", cfg.Path, size, align, rdma.ErrInvalid)
	}
	m, err := rdma.MapFile(f, cfg.Base, size)
	if err != nil {
		return nil, fmt.Errorf("dax: %w", err)
	}
	return &Memory{Mapping: m, path: cfg.Path, align: align}, nil
}

// Path is the mapped device.
func (m *Memory) Path() string { return m.path }

// Align is the device's mapping alignment.
func (m *Memory) Align() uint64 { return m.align }

// attributes reads a device-DAX instance's size and alignment from its
// sysfs directory (/sys/dev/char/MAJ:MIN, a link to .../daxX.Y). Kernels
// before 5.10 have no "align" file; their device-DAX aligns to 2 MiB.
func attributes(dir string) (size, align uint64, err error) {
	size, err = readUint(filepath.Join(dir, "size"))
	if err != nil {
		return 0, 0, fmt.Errorf("not a device-DAX instance: %w", err)
	}
	align, err = readUint(filepath.Join(dir, "align"))
	if errors.Is(err, os.ErrNotExist) {
		align, err = 2<<20, nil
	}
	if err != nil {
		return 0, 0, err
	}
	if align == 0 || align&(align-1) != 0 {
		return 0, 0, fmt.Errorf("alignment %d is not a power of two: %w", align, rdma.ErrInvalid)
	}
	return size, align, nil
}

func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 0, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}
