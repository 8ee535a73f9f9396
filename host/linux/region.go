package linux

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"cxlpool/host"
)

// regionAlign is the kernel's granule of a CXL region's size (HPA is
// allocated from a window in 256 MiB units).
const regionAlign = 256 << 20

const (
	ndDevices  = "bus/nd/devices"
	daxDevices = "bus/dax/devices"
	memBlocks  = "devices/system/memory"
)

// build makes c's region and DAX device, recording each step in c as it
// is made so that teardown undoes exactly what exists. b.mu is held.
func (b *Backend) build(ctx context.Context, c *capacity, size uint64) error {
	if size == 0 || size%b.regionAlign != 0 {
		return fmt.Errorf("linux: static capacity of %d bytes: a CXL region is a multiple of %d MiB: %w", size, b.regionAlign>>20, ErrAlign)
	}
	mem, _, err := b.memdev()
	if err != nil {
		return err
	}
	rtype, err := b.regionType(mem)
	if err != nil {
		return err
	}
	c.rtype = rtype
	ep, err := b.freeEndpointDecoder(mem)
	if err != nil {
		return err
	}
	root, err := b.rootDecoder(rtype, size)
	if err != nil {
		return err
	}
	create := "create_" + string(rtype) + "_region"
	// Reading create_X_region names the next region; writing that name
	// back creates it (cxl create-region does the same).
	name, err := b.fs.read(cxlDevices, root, create)
	if err != nil {
		return err
	}
	if err := b.fs.set(name, cxlDevices, root, create); err != nil {
		return err
	}
	c.root, c.region = root, name
	gran, err := b.fs.read(cxlDevices, root, "interleave_granularity")
	if err != nil {
		return err
	}
	steps := []struct{ attr, val string }{
		{"interleave_granularity", gran},
		{"interleave_ways", "1"},
	}
	if rtype == RegionPMEM {
		// The region's uuid is the tag, so a restarted agent could find
		// its regions again.
		steps = append(steps, struct{ attr, val string }{"uuid", c.tag})
	}
	steps = append(steps, struct{ attr, val string }{"size", strconv.FormatUint(size, 10)})
	for _, s := range steps {
		if err := b.fs.set(s.val, cxlDevices, name, s.attr); err != nil {
			return err
		}
	}
	if err := b.fs.set("0", cxlDevices, ep, "dpa_size"); err != nil {
		return err
	}
	if err := b.fs.set(string(rtype), cxlDevices, ep, "mode"); err != nil {
		return err
	}
	c.epDecoder = ep
	if err := b.fs.set(strconv.FormatUint(size, 10), cxlDevices, ep, "dpa_size"); err != nil {
		return err
	}
	if err := b.fs.set(ep, cxlDevices, name, "target0"); err != nil {
		return err
	}
	if err := b.fs.set("1", cxlDevices, name, "commit"); err != nil {
		return err
	}
	if err := b.fs.set(name, "bus/cxl/drivers_probe"); err != nil {
		return err
	}
	if err := b.fs.until(ctx, name+" to bind to cxl_region", func() (bool, error) {
		return b.fs.driver(cxlDevices, name) != "", nil
	}); err != nil {
		return err
	}
	start, err := b.fs.readUint(cxlDevices, name, "resource")
	if err != nil {
		return err
	}
	if rtype == RegionPMEM {
		if err := b.buildNamespace(ctx, c, start, size); err != nil {
			return err
		}
	}
	if err := b.findDAX(ctx, c, start, size); err != nil {
		return err
	}
	// The device address of the DAX device's first byte: the endpoint
	// decoder's DPA base plus where the device starts in the region.
	if dpa, err := b.fs.readUint(cxlDevices, ep, "dpa_resource"); err == nil {
		c.dpa = dpa + (c.start - start)
	}
	return nil
}

// regionType is the configured type, or the one this kernel and device
// can do: ram where root decoders offer create_ram_region and the device
// has volatile capacity, else pmem.
func (b *Backend) regionType(mem string) (RegionType, error) {
	ram, _ := b.fs.readUint(cxlDevices, mem, "ram/size")
	pmem, _ := b.fs.readUint(cxlDevices, mem, "pmem/size")
	canRAM := len(b.fs.list(cxlDevices, "decoder*/create_ram_region")) > 0
	switch b.cfg.Region {
	case RegionRAM:
		if !canRAM || ram == 0 {
			return "", fmt.Errorf("linux: ram region: kernel offers create_ram_region: %v, %s volatile capacity %d bytes (kernel 6.1 has no ram regions): %w", canRAM, mem, ram, ErrNoWindow)
		}
		return RegionRAM, nil
	case RegionPMEM:
		return RegionPMEM, nil
	}
	if canRAM && ram > 0 {
		return RegionRAM, nil
	}
	if pmem > 0 {
		return RegionPMEM, nil
	}
	return "", fmt.Errorf("linux: %s has %d bytes volatile, %d persistent, and the kernel ram regions: %v: %w", mem, ram, pmem, canRAM, ErrNoWindow)
}

// freeEndpointDecoder is the memory device's first endpoint decoder
// that decodes nothing yet (as cxl create-region picks).
func (b *Backend) freeEndpointDecoder(mem string) (string, error) {
	ep := b.endpoint(mem)
	if ep == "" {
		return "", fmt.Errorf("linux: %s has no endpoint port (is cxl_mem loaded and the port enumerated?): %w", mem, ErrNoDecoder)
	}
	for _, d := range b.fs.list(filepath.Join(cxlDevices, ep), "decoder[0-9]*.[0-9]*") {
		size, err := b.fs.readUint(cxlDevices, d, "size")
		if err != nil {
			return "", err
		}
		dpa, err := b.fs.readUint(cxlDevices, d, "dpa_size")
		if err != nil {
			return "", err
		}
		if size == 0 && dpa == 0 {
			return d, nil
		}
	}
	return "", fmt.Errorf("linux: %s (%s): %w", mem, ep, ErrNoDecoder)
}

// endpoint is the memory device's endpoint port: the one whose uport is
// the device (libcxl matches them the same way).
func (b *Backend) endpoint(mem string) string {
	for _, ep := range b.fs.list(cxlDevices, "endpoint[0-9]*") {
		if t, err := os.Readlink(b.fs.path(cxlDevices, ep, "uport")); err == nil && filepath.Base(t) == mem {
			return ep
		}
	}
	return ""
}

// rootDecoder is the first root decoder (CXL Fixed Memory Window) that
// can create regions of type rtype; its window must be at least size.
func (b *Backend) rootDecoder(rtype RegionType, size uint64) (string, error) {
	var seen []string
	for _, root := range b.fs.list(cxlDevices, "root[0-9]*") {
		for _, d := range b.fs.list(filepath.Join(cxlDevices, root), "decoder[0-9]*.[0-9]*") {
			if !b.fs.exists(cxlDevices, d, "create_"+string(rtype)+"_region") {
				continue
			}
			w, err := b.fs.readUint(cxlDevices, d, "size")
			if err != nil {
				return "", err
			}
			if w >= size {
				return d, nil
			}
			seen = append(seen, fmt.Sprintf("%s (%d bytes)", d, w))
		}
	}
	return "", fmt.Errorf("linux: %s region of %d bytes (windows: %s): %w", rtype, size, strings.Join(seen, ", "), ErrNoWindow)
}

// buildNamespace turns a persistent region into a devdax namespace
// (kernel 6.1 has no DEV_DAX_CXL): the libnvdimm region cxl_pmem made
// for it, its namespace seed sized to the whole region, its dax seed
// pointed at the namespace and bound to dax_pmem.
func (b *Backend) buildNamespace(ctx context.Context, c *capacity, start, size uint64) error {
	if err := b.fs.until(ctx, "the libnvdimm region of "+c.region, func() (bool, error) {
		for _, r := range b.fs.list(ndDevices, "region[0-9]*") {
			if res, err := b.fs.readUint(ndDevices, r, "resource"); err == nil && res == start {
				c.ndRegion = r
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return err
	}
	var ns, dax string
	if err := b.fs.until(ctx, c.ndRegion+"'s namespace and dax seeds", func() (bool, error) {
		ns, _ = b.fs.read(ndDevices, c.ndRegion, "namespace_seed")
		dax, _ = b.fs.read(ndDevices, c.ndRegion, "dax_seed")
		return ns != "" && dax != "", nil
	}); err != nil {
		return err
	}
	align, err := b.fs.readUint(ndDevices, c.ndRegion, "align")
	if err != nil || align == 0 {
		align = daxAlign
	}
	avail, err := b.fs.readUint(ndDevices, c.ndRegion, "available_size")
	if err != nil {
		return err
	}
	nsSize := min(avail, size) / align * align
	if err := b.fs.set(newUUID(), ndDevices, ns, "uuid"); err != nil {
		return err
	}
	// alt_name shows the tag to `ndctl list`.
	if err := b.fs.set("cxlpool:"+c.tag, ndDevices, ns, "alt_name"); err != nil {
		return err
	}
	if err := b.fs.set(strconv.FormatUint(nsSize, 10), ndDevices, ns, "size"); err != nil {
		return err
	}
	c.namespace = ns
	for _, s := range []struct{ attr, val string }{
		{"uuid", newUUID()},
		{"mode", "pmem"}, // the page map lives on the device (ndctl --map=dev)
		{"align", strconv.Itoa(daxAlign)},
		{"namespace", ns},
	} {
		if err := b.fs.set(s.val, ndDevices, dax, s.attr); err != nil {
			return err
		}
	}
	c.ndDax = dax
	if err := b.fs.set(dax, "bus/nd/drivers_probe"); err != nil {
		return err
	}
	return b.fs.until(ctx, dax+" to bind to dax_pmem", func() (bool, error) {
		return b.fs.driver(ndDevices, dax) != "", nil
	})
}

// findDAX waits for the DAX bus device inside [start, start+size) and its
// character device.
func (b *Backend) findDAX(ctx context.Context, c *capacity, start, size uint64) error {
	if err := b.fs.until(ctx, "the DAX device of "+c.region, func() (bool, error) {
		for _, d := range b.fs.list(daxDevices, "dax[0-9]*.[0-9]*") {
			res, err := b.fs.readUint(daxDevices, d, "resource")
			if err != nil || res < start || res >= start+size {
				continue
			}
			n, err := b.fs.readUint(daxDevices, d, "size")
			if err != nil || n == 0 {
				continue
			}
			c.dax, c.start, c.size = d, res, n/daxAlign*daxAlign
			return true, nil
		}
		return false, nil
	}); err != nil {
		return err
	}
	if node, err := b.fs.read(daxDevices, c.dax, "target_node"); err == nil {
		c.node, _ = strconv.Atoi(node)
	}
	return b.fs.until(ctx, "/dev/"+c.dax, func() (bool, error) {
		if b.fs.driver(daxDevices, c.dax) != "device_dax" {
			return false, nil
		}
		var st unix.Stat_t
		return unix.Stat(filepath.Join(b.cfg.Dev, c.dax), &st) == nil, nil
	})
}

// blocks are the memory blocks wholly inside the DAX device (kmem adds
// only those).
func (b *Backend) blocks(c *capacity) ([]string, error) {
	bs, err := b.fs.read(memBlocks, "block_size_bytes")
	if err != nil {
		return nil, err
	}
	size, err := strconv.ParseUint(strings.TrimPrefix(bs, "0x"), 16, 64)
	if err != nil || size == 0 {
		return nil, fmt.Errorf("linux: block_size_bytes %q: %v", bs, err)
	}
	var out []string
	for i := (c.start + size - 1) / size; (i+1)*size <= c.start+c.size; i++ {
		out = append(out, "memory"+strconv.FormatUint(i, 10))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("linux: %s (%d bytes at %#x) holds no whole %d-byte memory block: %w", c.dax, c.size, c.start, size, ErrAlign)
	}
	return out, nil
}

// toSystemRAM rebinds the DAX device from device_dax to kmem and onlines
// its memory blocks movable (daxctl reconfigure-device -m system-ram).
func (b *Backend) toSystemRAM(ctx context.Context, c *capacity) error {
	blocks, err := b.blocks(c)
	if err != nil {
		return err
	}
	if err := b.rebind(ctx, c.dax, "device_dax", "kmem"); err != nil {
		return err
	}
	c.mode = SystemRAM
	if err := b.fs.until(ctx, "the memory blocks of "+c.dax, func() (bool, error) {
		return b.fs.exists(memBlocks, blocks[len(blocks)-1], "state"), nil
	}); err != nil {
		return err
	}
	for _, blk := range blocks {
		state, err := b.fs.read(memBlocks, blk, "state")
		if err != nil {
			return err
		}
		if state == "online" {
			continue
		}
		if err := b.fs.set("online_movable", memBlocks, blk, "state"); err != nil {
			return err
		}
	}
	if node, err := b.fs.read(daxDevices, c.dax, "target_node"); err == nil {
		c.node, _ = strconv.Atoi(node)
	}
	return nil
}

// toDevDAX offlines the memory blocks (ErrBusy where the kernel cannot
// migrate their pages away; the blocks offlined so far are onlined
// again) and rebinds the DAX device to device_dax.
func (b *Backend) toDevDAX(ctx context.Context, c *capacity) error {
	blocks, err := b.blocks(c)
	if err != nil {
		return err
	}
	var done []string
	for _, blk := range blocks {
		state, err := b.fs.read(memBlocks, blk, "state")
		if err != nil {
			return err
		}
		if state == "offline" {
			continue
		}
		if err := b.fs.set("offline", memBlocks, blk, "state"); err != nil {
			for _, d := range done {
				_ = b.fs.set("online_movable", memBlocks, d, "state")
			}
			if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EAGAIN) {
				return fmt.Errorf("linux: tag %s: the kernel cannot offline %s of NUMA node %d (pages in use): %w: %w", c.tag, blk, c.node, err, host.ErrBusy)
			}
			return err
		}
		done = append(done, blk)
	}
	if err := b.rebind(ctx, c.dax, "kmem", "device_dax"); err != nil {
		return err
	}
	c.mode = DevDAX
	return b.fs.until(ctx, "/dev/"+c.dax, func() (bool, error) {
		var st unix.Stat_t
		return unix.Stat(filepath.Join(b.cfg.Dev, c.dax), &st) == nil, nil
	})
}

// rebind moves a DAX device from one driver to another: unbind, then
// new_id on the target driver (the dax bus matches drivers by device
// name), and remove_id on the old one so it does not claim it back.
func (b *Backend) rebind(ctx context.Context, dev, from, to string) error {
	if d := b.fs.driver(daxDevices, dev); d != "" {
		if err := b.fs.set(dev, daxDevices, dev, "driver/unbind"); err != nil {
			return err
		}
	}
	if b.fs.exists("bus/dax/drivers", from, "remove_id") {
		_ = b.fs.set(dev, "bus/dax/drivers", from, "remove_id") // absent ids are no error worth stopping for
	}
	if err := b.fs.set(dev, "bus/dax/drivers", to, "new_id"); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	if b.fs.driver(daxDevices, dev) != to {
		if err := b.fs.set(dev, "bus/dax/drivers", to, "bind"); err != nil && !errors.Is(err, unix.EBUSY) {
			return err
		}
	}
	return b.fs.until(ctx, dev+" to bind to "+to, func() (bool, error) {
		return b.fs.driver(daxDevices, dev) == to, nil
	})
}

// zero clears the DAX device through a mapping of it.
func (b *Backend) zero(c *capacity) error {
	mem, err := b.mmap(c)
	if err != nil {
		return err
	}
	clear(mem)
	return unix.Munmap(mem)
}

// teardown undoes build (and system-ram) in reverse, skipping the steps
// that were never made; b.mu is held.
func (b *Backend) teardown(ctx context.Context, c *capacity) error {
	if c.dax != "" {
		if c.mode == SystemRAM {
			if err := b.toDevDAX(ctx, c); err != nil {
				return err
			}
		}
		if !b.cfg.KeepContents && !c.zeroed && b.fs.driver(daxDevices, c.dax) == "device_dax" {
			if err := b.zero(c); err != nil {
				return fmt.Errorf("linux: zeroing %s before release: %w", c.dax, err)
			}
		}
		if c.rtype == RegionRAM && b.fs.driver(daxDevices, c.dax) != "" {
			// The ram region's DAX device goes with its cxl_dax_region
			// when the region unbinds; unbinding first ends the mappings.
			if err := b.fs.set(c.dax, daxDevices, c.dax, "driver/unbind"); err != nil {
				return err
			}
		}
		c.dax = ""
	}
	if c.ndDax != "" {
		if b.fs.driver(ndDevices, c.ndDax) != "" {
			if err := b.fs.set(c.ndDax, ndDevices, c.ndDax, "driver/unbind"); err != nil {
				return err
			}
		}
		if err := b.fs.set("\n", ndDevices, c.ndDax, "namespace"); err != nil {
			return err
		}
		c.ndDax = ""
	}
	if c.namespace != "" {
		// Size 0 deletes the namespace's labels.
		if err := b.fs.set("0", ndDevices, c.namespace, "size"); err != nil {
			return err
		}
		c.namespace = ""
	}
	if c.region != "" {
		if b.fs.driver(cxlDevices, c.region) != "" {
			if err := b.fs.set(c.region, cxlDevices, c.region, "driver/unbind"); err != nil {
				return err
			}
		}
		if v, _ := b.fs.read(cxlDevices, c.region, "commit"); v == "1" {
			if err := b.fs.set("0", cxlDevices, c.region, "commit"); err != nil {
				return err
			}
		}
		if v, _ := b.fs.read(cxlDevices, c.region, "target0"); v != "" {
			if err := b.fs.set("\n", cxlDevices, c.region, "target0"); err != nil {
				return err
			}
		}
	}
	if c.epDecoder != "" {
		if err := b.fs.set("0", cxlDevices, c.epDecoder, "dpa_size"); err != nil {
			return err
		}
		c.epDecoder = ""
	}
	if c.region != "" {
		if err := b.fs.set(c.region, cxlDevices, c.root, "delete_region"); err != nil {
			return err
		}
		c.region = ""
	}
	return nil
}
