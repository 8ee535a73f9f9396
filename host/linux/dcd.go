package linux

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"cxlpool/host"
)

// The Dynamic Capacity path follows the Linux DCD series v10's layout (not
// in any released kernel; tested against a fake tree only): the CXL DAX
// region of a dynamic-RAM region, /sys/bus/cxl/devices/regionN/
// dax_regionN, holds the accepted extents as extentN.M/{offset,length,
// uuid}; its dax_region/ attributes (seed, create, delete) make DAX
// devices, and a device whose uuid is a tag takes that tag's extents.

const dcdExtents = "region[0-9]*/dax_region[0-9]*/extent[0-9]*.[0-9]*"

// dcdExtent is one extent the kernel shows, with the DAX region it is in.
type dcdExtent struct {
	daxRegion string // path under sysfs, e.g. bus/cxl/devices/region0/dax_region0
	host.Extent
}

// dcdExtents are the extents of tag, in offset order (their order in the
// region, which the series keeps in shared-sequence order).
func (b *Backend) dcdExtents(tag string) []dcdExtent {
	m, _ := filepath.Glob(filepath.Join(b.fs.path(cxlDevices), dcdExtents))
	var out []dcdExtent
	for _, p := range m {
		rel, _ := filepath.Rel(b.fs.root, p)
		u, err := b.fs.read(rel, "uuid")
		if err != nil || !strings.EqualFold(u, tag) {
			continue
		}
		off, err1 := b.fs.readUint(rel, "offset")
		n, err2 := b.fs.readUint(rel, "length")
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, dcdExtent{daxRegion: filepath.Dir(rel), Extent: host.Extent{DPA: off, Offset: off, Length: n}})
	}
	return out
}

// hasDCD is whether this kernel shows any DAX region of dynamic capacity.
func (b *Backend) hasDCD() bool {
	m, _ := filepath.Glob(filepath.Join(b.fs.path(cxlDevices), "region[0-9]*/dax_region[0-9]*/dax_region"))
	for _, p := range m {
		rel, _ := filepath.Rel(b.fs.root, filepath.Dir(filepath.Dir(p)))
		if mode, _ := b.fs.read(rel, "mode"); strings.HasPrefix(mode, "dynamic_ram") {
			return true
		}
	}
	return false
}

// waitDCD waits for the kernel to show tag's extents, checks the series'
// rules (2 MiB alignment, one DAX region per tag) and makes the tag's DAX
// device.
func (b *Backend) waitDCD(ctx context.Context, tag string) (host.Capacity, error) {
	if !b.hasDCD() {
		return host.Capacity{}, fmt.Errorf("linux: tag %s: %w", tag, ErrNoDCD)
	}
	var exts []dcdExtent
	if err := b.fs.until(ctx, "the extents of tag "+tag, func() (bool, error) {
		exts = b.dcdExtents(tag)
		return len(exts) > 0, nil
	}); err != nil {
		return host.Capacity{}, err
	}
	c := &capacity{tag: tag, mode: DevDAX, node: -1, maps: map[*mapping]struct{}{}}
	for _, e := range exts {
		if e.Offset%DCDAlign != 0 || e.Length%DCDAlign != 0 {
			return host.Capacity{}, fmt.Errorf("linux: tag %s: extent at %#x of %d bytes is not 2 MiB aligned (DCD rule): %w", tag, e.Offset, e.Length, ErrAlign)
		}
		if e.daxRegion != exts[0].daxRegion {
			return host.Capacity{}, fmt.Errorf("linux: tag %s spans %s and %s: one tag is one DAX device of one region", tag, exts[0].daxRegion, e.daxRegion)
		}
		c.extents = append(c.extents, e.Extent)
		c.size += e.Length
	}
	c.region = exts[0].daxRegion
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.tags[tag]; ok {
		return b.surface(old), nil
	}
	if err := b.makeDCDDevice(ctx, c); err != nil {
		return host.Capacity{}, err
	}
	b.tags[tag] = c
	b.log.Info("dynamic capacity surfaced", "tag", tag, "dax", c.dax, "size", c.size, "extents", len(c.extents))
	return b.surface(c), nil
}

// makeDCDDevice makes the tag's DAX device from the region's seed: the
// tag into uuid, the tag's size into size, bound to device_dax.
func (b *Backend) makeDCDDevice(ctx context.Context, c *capacity) error {
	seed, err := b.fs.read(c.region, "dax_region/seed")
	if err != nil {
		return err
	}
	if err := b.fs.set(c.tag, daxDevices, seed, "uuid"); err != nil {
		return err
	}
	if err := b.fs.set(strconv.FormatUint(c.size, 10), daxDevices, seed, "size"); err != nil {
		_ = b.fs.set("\n", daxDevices, seed, "uuid")
		return err
	}
	c.dax = seed
	if err := b.fs.set(seed, "bus/dax/drivers/device_dax/bind"); err != nil && b.fs.driver(daxDevices, seed) != "device_dax" {
		_ = b.deleteDCDDevice(ctx, c)
		return err
	}
	return b.fs.until(ctx, "/dev/"+seed, func() (bool, error) {
		_, err := os.Stat(filepath.Join(b.cfg.Dev, seed))
		return err == nil, nil
	})
}

// deleteDCDDevice gives the tag's extents back to the kernel: unbind the
// DAX device, size 0, delete; the kernel then answers the device's
// release of the whole tag.
func (b *Backend) deleteDCDDevice(_ context.Context, c *capacity) error {
	if c.dax == "" {
		return nil
	}
	if b.fs.driver(daxDevices, c.dax) != "" {
		if err := b.fs.set(c.dax, daxDevices, c.dax, "driver/unbind"); err != nil {
			return err
		}
	}
	if err := b.fs.set("0", daxDevices, c.dax, "size"); err != nil {
		return err
	}
	if err := b.fs.set(c.dax, c.region, "dax_region/delete"); err != nil {
		return err
	}
	c.dax = ""
	return nil
}
