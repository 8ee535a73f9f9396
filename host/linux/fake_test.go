package linux

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeKernel is a sysfs tree in a temp dir and the part of the kernel
// that acts on its stores, as far as the backend uses them: CXL region
// creation on a root decoder (create_ram_region, kernel ≥ 6.3), its DAX
// device appearing on bind, device_dax ↔ kmem with memory blocks, and
// the DCD series' extents and tagged DAX devices. A DAX device's "media"
// is a file that outlives the device (as device memory does), so that a
// backend which forgot to zero would be caught.
type fakeKernel struct {
	t        *testing.T
	sys, dev string
	media    string
	mu       sync.Mutex
	regions  int
	base     uint64 // the window's base address
	block    uint64 // memory block size
	pinned   map[string]bool
	writes   []string // every store, "rel=value", in order
}

const (
	fakeWindow = 1 << 30
	fakeAlign  = 4 << 20 // the fake kernel's region granule
	fakeBlock  = 2 << 20
	fakeSerial = 0x1000
)

func newFakeKernel(t *testing.T) *fakeKernel {
	t.Helper()
	dir := t.TempDir()
	k := &fakeKernel{t: t, sys: filepath.Join(dir, "sys"), dev: filepath.Join(dir, "dev"), media: filepath.Join(dir, "media"),
		base: 0x10_0000_0000, block: fakeBlock, pinned: map[string]bool{}}
	for _, d := range []string{k.dev, k.media} {
		k.mkdir(d)
	}
	cxl := filepath.Join(k.sys, cxlDevices)
	k.attrs(filepath.Join(cxl, "mem0"), map[string]string{"serial": fmt.Sprintf("%#x", fakeSerial), "ram/size": fmt.Sprintf("%#x", fakeWindow), "pmem/size": "0x0"})
	k.attrs(filepath.Join(cxl, "endpoint2"), nil)
	k.symlink(filepath.Join(cxl, "mem0"), filepath.Join(cxl, "endpoint2", "uport"))
	for i := range 2 {
		k.attrs(filepath.Join(cxl, "endpoint2", fmt.Sprintf("decoder2.%d", i)), map[string]string{"size": "0x0", "dpa_size": "0x0", "mode": "none", "dpa_resource": fmt.Sprintf("%#x", uint64(i)<<28)})
	}
	k.attrs(filepath.Join(cxl, "root0", "decoder0.0"), map[string]string{
		"size": fmt.Sprintf("%#x", fakeWindow), "interleave_granularity": "256", "create_ram_region": "region0", "delete_region": "",
	})
	// /sys/bus/cxl/devices links every device by name, wherever it sits.
	for _, d := range []string{"endpoint2/decoder2.0", "endpoint2/decoder2.1", "root0/decoder0.0"} {
		k.symlink(filepath.Join(cxl, d), filepath.Join(cxl, filepath.Base(d)))
	}
	k.attrs(filepath.Join(k.sys, memBlocks), map[string]string{"block_size_bytes": strconv.FormatUint(k.block, 16)})
	for _, d := range []string{"device_dax", "kmem"} {
		k.attrs(filepath.Join(k.sys, "bus/dax/drivers", d), map[string]string{"new_id": "", "remove_id": "", "bind": ""})
	}
	k.attrs(filepath.Join(k.sys, "bus/cxl/drivers/cxl_region"), nil)
	k.attrs(filepath.Join(k.sys, "bus/cxl"), map[string]string{"drivers_probe": ""})
	return k
}

func (k *fakeKernel) mkdir(d string) {
	if err := os.MkdirAll(d, 0o755); err != nil {
		k.t.Fatal(err)
	}
}

func (k *fakeKernel) attrs(dir string, a map[string]string) {
	k.mkdir(dir)
	for name, v := range a {
		p := filepath.Join(dir, name)
		k.mkdir(filepath.Dir(p))
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			k.t.Fatal(err)
		}
	}
}

func (k *fakeKernel) symlink(target, link string) {
	_ = os.Remove(link)
	if err := os.Symlink(target, link); err != nil {
		k.t.Fatal(err)
	}
}

func (k *fakeKernel) get(rel string) string {
	b, _ := os.ReadFile(filepath.Join(k.sys, rel))
	return strings.TrimSpace(string(b))
}

func (k *fakeKernel) backend(t *testing.T, cfg Config) *Backend {
	t.Helper()
	cfg.Sys, cfg.Dev, cfg.Proc = k.sys, k.dev, "/proc"
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.fs.write = k.store
	b.regionAlign = fakeAlign
	return b
}

// store is the kernel's side of a sysfs write.
func (k *fakeKernel) store(path, value string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	rel, err := filepath.Rel(k.sys, path)
	if err != nil || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("fake kernel: write outside sysfs: %s", path)
	}
	v := strings.TrimSpace(value)
	k.writes = append(k.writes, rel+"="+v)
	dir, attr := filepath.Dir(rel), filepath.Base(rel)
	switch {
	case attr == "create_ram_region" || attr == "create_pmem_region":
		if v != k.get(rel) {
			return unix.EINVAL
		}
		k.attrs(filepath.Join(k.sys, cxlDevices, v), map[string]string{
			"uuid": "", "interleave_granularity": "0", "interleave_ways": "0", "size": "0x0", "target0": "", "commit": "0",
			"resource": fmt.Sprintf("%#x", k.base+uint64(k.regions)*fakeWindow/8), "mode": strings.TrimSuffix(strings.TrimPrefix(attr, "create_"), "_region"),
		})
		k.regions++
		return k.put(rel, fmt.Sprintf("region%d", k.regions))
	case attr == "delete_region":
		if k.get(filepath.Join(cxlDevices, v, "commit")) == "1" {
			return unix.EBUSY
		}
		return os.RemoveAll(filepath.Join(k.sys, cxlDevices, v))
	case rel == "bus/cxl/drivers_probe":
		r := filepath.Join(cxlDevices, v)
		if k.get(r+"/commit") != "1" || k.get(r+"/target0") == "" {
			return unix.ENXIO
		}
		k.symlink(filepath.Join(k.sys, "bus/cxl/drivers/cxl_region"), filepath.Join(k.sys, r, "driver"))
		if k.get(r+"/mode") == "pmem" {
			k.addNDRegion(v)
			return nil
		}
		// The media is the endpoint decoder's DPA range: a later region
		// over the same decoder sees the same bytes.
		return k.addDAX(strings.TrimPrefix(v, "region"), k.get(r+"/resource"), k.get(r+"/size"), "dpa-"+k.get(r+"/target0"))
	case strings.HasSuffix(rel, "/driver/unbind"):
		devRel := strings.TrimSuffix(rel, "/driver/unbind")
		name := filepath.Base(devRel)
		if strings.HasPrefix(devRel, cxlDevices+"/region") {
			for _, d := range k.daxOf(name) {
				k.removeDAX(d)
			}
			_ = os.RemoveAll(filepath.Join(k.sys, ndDevices, "region1"))
		}
		if strings.HasPrefix(devRel, ndDevices+"/dax") {
			k.removeDAX(name)
		}
		if strings.HasPrefix(devRel, daxDevices) {
			if k.driverOf(devRel) == "kmem" {
				if err := k.removeBlocks(name); err != nil {
					return err
				}
			}
			k.hide(name)
		}
		return os.Remove(filepath.Join(k.sys, devRel, "driver"))
	case strings.HasPrefix(rel, "bus/dax/drivers/") && (attr == "new_id" || attr == "bind"):
		drv := filepath.Base(dir)
		dev := filepath.Join(daxDevices, v)
		if k.driverOf(dev) != "" {
			return unix.EBUSY
		}
		k.symlink(filepath.Join(k.sys, dir), filepath.Join(k.sys, dev, "driver"))
		if drv == "kmem" {
			return k.addBlocks(v)
		}
		return k.show(v)
	case rel == "bus/nd/drivers_probe":
		return k.bindNDDax(v)
	case strings.HasPrefix(rel, "devices/system/memory/memory") && attr == "state":
		blk := filepath.Base(dir)
		switch v {
		case "online_movable", "online":
			return k.put(rel, "online")
		case "offline":
			if k.pinned[blk] {
				return unix.EBUSY
			}
			return k.put(rel, "offline")
		}
		return unix.EINVAL
	case strings.HasPrefix(rel, daxDevices) && attr == "size" && v != "0":
		// A DCD seed sized: its media is the tag's extents.
		n, err := parseUint(v)
		if err != nil {
			return unix.EINVAL
		}
		media := filepath.Join(k.media, k.get(filepath.Join(dir, "media")))
		if f, err := os.OpenFile(media, os.O_CREATE|os.O_RDWR, 0o644); err == nil {
			_ = f.Close()
		}
		if err := os.Truncate(media, int64(n)); err != nil {
			return err
		}
		return k.put(rel, v)
	case strings.HasSuffix(rel, "dax_region/delete"):
		k.removeDAX(v)
		k.dcdSeed(v)
		return nil
	}
	if _, err := os.Stat(path); err != nil {
		return unix.ENOENT
	}
	return k.put(rel, v)
}

func (k *fakeKernel) put(rel, v string) error {
	return os.WriteFile(filepath.Join(k.sys, rel), []byte(v+"\n"), 0o644)
}

func (k *fakeKernel) driverOf(devRel string) string {
	t, err := os.Readlink(filepath.Join(k.sys, devRel, "driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(t)
}

// addDAX makes the DAX device of a region (cxl_dax_region's probe): the
// whole region, bound to device_dax.
func (k *fakeKernel) addDAX(id, resource, size, mediaName string) error {
	return k.addDAXNamed("dax"+id+".0", resource, size, mediaName, "region"+id)
}

func (k *fakeKernel) addDAXNamed(name, resource, size, mediaName, region string) error {
	dev := filepath.Join(k.sys, daxDevices, name)
	k.attrs(dev, map[string]string{"resource": resource, "size": size, "target_node": "1", "region": region, "media": mediaName})
	k.symlink(filepath.Join(k.sys, "bus/dax/drivers/device_dax"), filepath.Join(dev, "driver"))
	n, err := parseUint(size)
	if err != nil {
		return err
	}
	media := filepath.Join(k.media, mediaName)
	if _, err := os.Stat(media); err != nil {
		f, err := os.Create(media)
		if err != nil {
			return err
		}
		_ = f.Close()
	}
	if err := os.Truncate(media, int64(n)); err != nil {
		return err
	}
	return k.show(name)
}

func (k *fakeKernel) daxOf(region string) []string {
	var out []string
	m, _ := filepath.Glob(filepath.Join(k.sys, daxDevices, "dax*"))
	for _, d := range m {
		if k.get(filepath.Join(daxDevices, filepath.Base(d), "region")) == region {
			out = append(out, filepath.Base(d))
		}
	}
	return out
}

func (k *fakeKernel) removeDAX(name string) {
	k.hide(name)
	_ = os.RemoveAll(filepath.Join(k.sys, daxDevices, name))
}

// show and hide are devtmpfs: /dev/daxX.Y exists while device_dax is
// bound; the media stays.
func (k *fakeKernel) show(name string) error {
	media := filepath.Join(k.media, k.get(filepath.Join(daxDevices, name, "media")))
	if _, err := os.Stat(media); err != nil {
		return nil
	}
	return os.Rename(media, filepath.Join(k.dev, name))
}

func (k *fakeKernel) hide(name string) {
	_ = os.Rename(filepath.Join(k.dev, name), filepath.Join(k.media, k.get(filepath.Join(daxDevices, name, "media"))))
}

func (k *fakeKernel) blockNames(name string) []string {
	start, _ := parseUint(k.get(filepath.Join(daxDevices, name, "resource")))
	size, _ := parseUint(k.get(filepath.Join(daxDevices, name, "size")))
	var out []string
	for i := (start + k.block - 1) / k.block; (i+1)*k.block <= start+size; i++ {
		out = append(out, "memory"+strconv.FormatUint(i, 10))
	}
	return out
}

// addBlocks is kmem's probe: the memory blocks are added offline
// (MEMORY_HOTPLUG_DEFAULT_ONLINE is off, as in Debian).
func (k *fakeKernel) addBlocks(name string) error {
	for _, b := range k.blockNames(name) {
		k.attrs(filepath.Join(k.sys, memBlocks, b), map[string]string{"state": "offline"})
	}
	return nil
}

// removeBlocks is kmem's remove: it fails while a block is online.
func (k *fakeKernel) removeBlocks(name string) error {
	for _, b := range k.blockNames(name) {
		if k.get(filepath.Join(memBlocks, b, "state")) == "online" {
			return unix.EBUSY
		}
	}
	for _, b := range k.blockNames(name) {
		_ = os.RemoveAll(filepath.Join(k.sys, memBlocks, b))
	}
	return nil
}

// addDCD makes region0 a dynamic-RAM region with its CXL DAX region, as
// the DCD series v10 lays it out, with an empty seed DAX device.
func (k *fakeKernel) addDCD() {
	r := filepath.Join(k.sys, cxlDevices, "region0")
	k.attrs(r, map[string]string{"mode": "dynamic_ram_a", "resource": fmt.Sprintf("%#x", k.base)})
	k.attrs(filepath.Join(r, "dax_region0", "dax_region"), map[string]string{"seed": "dax0.1", "delete": ""})
	k.dcdSeed("dax0.1")
}

func (k *fakeKernel) dcdSeed(name string) {
	k.attrs(filepath.Join(k.sys, daxDevices, name), map[string]string{"uuid": "", "size": "0", "media": "dcd-" + name,
		"resource": fmt.Sprintf("%#x", k.base), "target_node": "1"})
}

// grantDCD is the kernel accepting the device's extents of tag.
func (k *fakeKernel) grantDCD(tag string, exts ...[2]uint64) {
	for i, e := range exts {
		k.attrs(filepath.Join(k.sys, cxlDevices, "region0/dax_region0", fmt.Sprintf("extent0.%d", i)), map[string]string{
			"offset": fmt.Sprintf("%#x", e[0]), "length": fmt.Sprintf("%#x", e[1]), "uuid": tag})
	}
}

// releaseDCD is the kernel giving the tag's extents back to the device.
func (k *fakeKernel) releaseDCD() {
	m, _ := filepath.Glob(filepath.Join(k.sys, cxlDevices, "region0/dax_region0/extent*"))
	for _, p := range m {
		_ = os.RemoveAll(p)
	}
}

// addNDRegion is cxl_pmem's part on kernel 6.1: the libnvdimm region of a
// committed pmem region, with its namespace and dax seeds.
func (k *fakeKernel) addNDRegion(cxlRegion string) {
	r := filepath.Join(cxlDevices, cxlRegion)
	k.attrs(filepath.Join(k.sys, ndDevices, "region1"), map[string]string{
		"resource": k.get(r + "/resource"), "size": k.get(r + "/size"), "available_size": k.get(r + "/size"),
		"align": "0x200000", "namespace_seed": "namespace1.0", "dax_seed": "dax1.0", "cxl": cxlRegion,
	})
	k.attrs(filepath.Join(k.sys, ndDevices, "namespace1.0"), map[string]string{"uuid": "", "alt_name": "", "size": "0"})
	k.attrs(filepath.Join(k.sys, ndDevices, "dax1.0"), map[string]string{"uuid": "", "mode": "", "align": "", "namespace": ""})
	k.attrs(filepath.Join(k.sys, "bus/nd/drivers/dax_pmem"), nil)
}

// bindNDDax is dax_pmem's probe: the DAX device over the namespace, less
// the 2 MiB the page map and info block take at its start.
func (k *fakeKernel) bindNDDax(name string) error {
	nd := filepath.Join(ndDevices, name)
	ns := k.get(nd + "/namespace")
	if ns == "" || k.get(nd+"/align") != "2097152" || k.get(nd+"/mode") != "pmem" {
		return unix.ENXIO
	}
	size, err := parseUint(k.get(filepath.Join(ndDevices, ns, "size")))
	if err != nil || size <= 2<<20 {
		return unix.ENXIO
	}
	start, _ := parseUint(k.get(ndDevices + "/region1/resource"))
	k.symlink(filepath.Join(k.sys, "bus/nd/drivers/dax_pmem"), filepath.Join(k.sys, nd, "driver"))
	cxlRegion := k.get(ndDevices + "/region1/cxl")
	return k.addDAXNamed(name, fmt.Sprintf("%#x", start+2<<20), strconv.FormatUint(size-2<<20, 10),
		"dpa-"+k.get(filepath.Join(cxlDevices, cxlRegion, "target0")), cxlRegion)
}
