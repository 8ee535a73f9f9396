// Package linux is the host.Backend of a Linux host cabled to the box: it
// drives the kernel's CXL and DAX drivers through sysfs and /dev/daxX.Y,
// the way ndctl's `cxl` and `daxctl` do (it writes the same attributes
// itself; nothing of ndctl need be installed).
//
// Two paths, by what the kernel supports:
//
//   - Static capacity (Attach), on upstream kernels; the pmem path below
//     runs for real on Debian's 6.1 in a QEMU guest (host/linux/vmtest,
//     make vmtest-host), the ram path only on a fake tree. A region is
//     created on a root decoder (a CXL Fixed Memory Window) over a free
//     endpoint decoder of the memory device: create_{ram,pmem}_region,
//     interleave granularity and ways (1 target), uuid (pmem), size, the
//     endpoint decoder's mode and dpa_size, target0, commit, bind. A ram
//     region (kernel 6.3 and later, CONFIG_DEV_DAX_CXL) surfaces its DAX
//     device by itself; on kernel 6.1 (Debian 12), which has neither
//     create_ram_region nor DEV_DAX_CXL, the region is persistent and
//     becomes a devdax namespace (libnvdimm: namespace seed uuid and size,
//     dax seed uuid, mode, align and namespace, bind dax_pmem), as
//     `ndctl create-namespace -m devdax` does. The DAX device is then
//     mapped from /dev/daxX.Y (devdax) or reconfigured to system-ram
//     (kmem, memory blocks onlined movable: a CPU-less NUMA node; only
//     the memory blocks wholly inside the device, so 128 MiB of a 256 MiB
//     pmem region with 128 MiB blocks) and back. Teardown runs in reverse, after zeroing the memory (Config.
//     KeepContents turns that off): persistent regions keep their bytes
//     across a reboot, and a host's data must not reach the next user.
//   - Dynamic Capacity (Wait on a tag the box granted): the layout of the
//     Linux DCD patch series v10 (not merged upstream: no released kernel
//     has it), as far as this package follows it: the device's accepted
//     extents under the CXL DAX region as dax_regionN/extentN.M/{offset,
//     length,uuid} (uuid = the tag), 2 MiB aligned; one DAX device per
//     tag, made from the region's seed by writing the tag to its uuid and
//     the tag's size to its size; a whole tag released by deleting that
//     device. Those device-creation stores are this package's reading of
//     the series, not checked against a kernel that has it. It is tested only against a fake sysfs tree; on a kernel
//     without the series Wait fails at once with ErrNoDCD. The series shows
//     no pending release request in sysfs: a device's release of a mapped
//     tag waits in the kernel (it keeps the extents), and the backend
//     learns of it only when the agent releases the tag.
//
// The kernel does not refuse to tear down a DAX device that a process has
// mapped (unbinding device_dax zaps the mappings), so the backend refuses
// first: a tag is in use while this process maps it or any process's
// /proc/PID/maps shows its /dev/daxX.Y (ErrBusy; other users' maps are
// readable by root only, which the sysfs writes need anyway). In system-ram mode the
// kernel refuses itself: memory blocks it cannot offline (EBUSY) keep the
// tag (ErrBusy), and the blocks already offlined are onlined again.
//
// Identity: the serial is the memory device's (/sys/bus/cxl/devices/memN/
// serial). No kernel shows which logical device (LD, the box's head)
// the link reaches, neither upstream nor the DCD series: Config.LD says
// it, and without it Identity fails with ErrUnknownLD.
//
// Every path is under a root given to New (Config.Sys, Dev, Proc), so the
// tests run without root on a fake tree in t.TempDir().
package linux

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"cxlpool/host"
)

// Errors of this backend (besides host's).
var (
	// ErrUnknownLD: the kernel does not show which logical device (head)
	// the host's link reaches; Config.LD (cxlhost --ld) must say.
	ErrUnknownLD = errors.New("linux: the kernel does not show the logical device (head) of the link; give it (cxlhost --ld N)")
	// ErrNoMemdev: no CXL memory device, or not the one asked for.
	ErrNoMemdev = errors.New("linux: no CXL memory device (/sys/bus/cxl/devices/memN)")
	// ErrNoDCD: the kernel has no Dynamic Capacity support (the Linux DCD
	// series is not merged upstream): only static capacity (Attach).
	ErrNoDCD = errors.New("linux: this kernel shows no Dynamic Capacity extents (the Linux DCD series v10 is not merged upstream); only static capacity (Attach) works")
	// ErrNoWindow: no root decoder (CXL Fixed Memory Window) can hold a
	// region of that type and size.
	ErrNoWindow = errors.New("linux: no CXL root decoder with room for the region")
	// ErrNoDecoder: the memory device has no free endpoint decoder.
	ErrNoDecoder = errors.New("linux: no free endpoint decoder on the memory device")
	// ErrExists: a tag already held by this host (the DCD series enforces
	// host-wide unique tags; static capacity follows the same rule).
	ErrExists = errors.New("linux: the host already holds capacity with that tag")
	// ErrMode: the capacity is not in the mode the operation needs.
	ErrMode = errors.New("linux: wrong mode for that operation")
	// ErrAlign: a size or extent that is not a multiple of the rule's unit.
	ErrAlign = errors.New("linux: misaligned size")
)

// Mode is how the host uses a tag's memory (host.Mode).
type Mode = host.Mode

const (
	// DevDAX: a character device (/dev/daxX.Y) an application maps.
	DevDAX = host.ModeDevDAX
	// SystemRAM: onlined to the page allocator as a CPU-less NUMA node.
	SystemRAM = host.ModeSystemRAM
)

// The agent switches modes through these (host.ModeSetter,
// host.NodeReporter).
var (
	_ host.ModeSetter   = (*Backend)(nil)
	_ host.NodeReporter = (*Backend)(nil)
)

// RegionType is which kind of CXL region static capacity is built on.
type RegionType string

const (
	RegionAuto RegionType = ""     // ram where the kernel can, else pmem
	RegionRAM  RegionType = "ram"  // create_ram_region: kernel ≥ 6.3 with DEV_DAX_CXL
	RegionPMEM RegionType = "pmem" // create_pmem_region → devdax namespace: kernel 6.1
)

// DCDAlign is the DCD series' alignment of extents and DAX devices.
const DCDAlign = 2 << 20

// daxAlign is the devdax alignment asked of a namespace's DAX device: the
// series' 2 MiB, and a mapping unit every x86 kernel supports.
const daxAlign = 2 << 20

// Config configures a Backend.
type Config struct {
	Sys  string // sysfs root; "" is /sys
	Dev  string // device root; "" is /dev
	Proc string // procfs root; "" is /proc
	// Serial picks the memory device by serial when the host has several
	// (0: the only one).
	Serial uint64
	// LD is the logical device (head) behind the link, which the kernel
	// does not show; negative: unknown (Identity fails with ErrUnknownLD).
	LD int
	// Region is the region type of static capacity (RegionAuto picks).
	Region RegionType
	// KeepContents skips zeroing a tag's memory before it is torn down.
	KeepContents bool
	// Poll is how often the backend looks again at sysfs while the kernel
	// probes (default 5 ms).
	Poll   time.Duration
	Logger *slog.Logger
}

// Backend is the Linux host.Backend. Its methods are safe for concurrent
// use; sysfs changes are made one at a time.
type Backend struct {
	cfg Config
	fs  *sysfs
	log *slog.Logger

	// regionAlign is the kernel's region granule (a test's fake kernel
	// may have a smaller one).
	regionAlign uint64

	mu   sync.Mutex // guards tags and serializes sysfs changes
	tags map[string]*capacity
}

// capacity is one tag the host holds and what was built for it, so that
// teardown undoes exactly that, in reverse.
type capacity struct {
	tag     string
	static  bool
	mode    Mode
	size    uint64                // the DAX device's size: what an application maps
	maps    map[*mapping]struct{} // live Mappings of this process
	release bool                  // Release or a release request: no new mappings
	forced  bool                  // released with force: other processes' mappings are zapped
	wasRAM  bool                  // system-ram before Release took it offline (Keep restores it)
	tearing bool                  // WaitGone is zeroing it without the lock: no Keep
	zeroed  bool                  // zeroed for release: teardown need not again

	// static capacity
	rtype     RegionType
	root      string // root decoder, e.g. decoder0.0
	region    string // e.g. region0
	epDecoder string // endpoint decoder, e.g. decoder2.0
	ndRegion  string // libnvdimm region (pmem), e.g. region1
	namespace string // e.g. namespace1.0
	ndDax     string // libnvdimm dax device (pmem), e.g. dax1.0
	dax       string // DAX bus device, e.g. dax1.0
	start     uint64 // its physical address
	dpa       uint64 // its device physical address
	node      int    // its target NUMA node
	// dcd capacity
	extents []host.Extent
}

// New opens the backend; it does not touch the kernel until asked.
func New(cfg Config) (*Backend, error) {
	if cfg.Sys == "" {
		cfg.Sys = "/sys"
	}
	if cfg.Dev == "" {
		cfg.Dev = "/dev"
	}
	if cfg.Proc == "" {
		cfg.Proc = "/proc"
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 5 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	switch cfg.Region {
	case RegionAuto, RegionRAM, RegionPMEM:
	default:
		return nil, fmt.Errorf("linux: region type %q: want ram or pmem", cfg.Region)
	}
	return &Backend{cfg: cfg, fs: &sysfs{root: cfg.Sys, write: writeFile, poll: cfg.Poll}, log: cfg.Logger,
		regionAlign: regionAlign, tags: map[string]*capacity{}}, nil
}

const cxlDevices = "bus/cxl/devices"

// memdev is the memory device this host uses.
func (b *Backend) memdev() (string, uint64, error) {
	names := b.fs.list(cxlDevices, "mem[0-9]*")
	if len(names) == 0 {
		return "", 0, ErrNoMemdev
	}
	var found []string
	for _, n := range names {
		s, err := b.fs.readUint(cxlDevices, n, "serial")
		if err != nil {
			return "", 0, err
		}
		if b.cfg.Serial == 0 || s == b.cfg.Serial {
			if b.cfg.Serial != 0 || len(names) == 1 {
				return n, s, nil
			}
		}
		found = append(found, fmt.Sprintf("%s serial %#x", n, s))
	}
	if b.cfg.Serial == 0 {
		return "", 0, fmt.Errorf("linux: %d CXL memory devices (%s): say which by serial: %w", len(names), strings.Join(found, ", "), ErrNoMemdev)
	}
	return "", 0, fmt.Errorf("linux: no memory device with serial %#x (%s): %w", b.cfg.Serial, strings.Join(found, ", "), ErrNoMemdev)
}

// Identity is the memory device's serial and the configured LD.
func (b *Backend) Identity(context.Context) (host.Identity, error) {
	_, serial, err := b.memdev()
	if err != nil {
		return host.Identity{}, err
	}
	if b.cfg.LD < 0 || b.cfg.LD > 0xffff {
		return host.Identity{}, fmt.Errorf("linux: memory device serial %#x: %w", serial, ErrUnknownLD)
	}
	return host.Identity{Serial: serial, LD: uint16(b.cfg.LD)}, nil
}

// Attach builds static capacity of size bytes for tag, in mode, and
// returns it surfaced. On failure nothing it built is left behind.
func (b *Backend) Attach(ctx context.Context, tag string, size uint64, mode Mode) (host.Capacity, error) {
	if mode != DevDAX && mode != SystemRAM {
		return host.Capacity{}, fmt.Errorf("linux: mode %q: want devdax or system-ram: %w", mode, ErrMode)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.tags[tag]; ok {
		return host.Capacity{}, fmt.Errorf("linux: tag %s: %w", tag, ErrExists)
	}
	c := &capacity{tag: tag, static: true, mode: DevDAX, node: -1, maps: map[*mapping]struct{}{}}
	if err := b.build(ctx, c, size); err != nil {
		if terr := b.teardown(context.WithoutCancel(ctx), c); terr != nil {
			err = errors.Join(err, fmt.Errorf("linux: undoing a failed attach: %w", terr))
		}
		return host.Capacity{}, err
	}
	if mode == SystemRAM {
		if err := b.toSystemRAM(ctx, c); err != nil {
			if terr := b.teardown(context.WithoutCancel(ctx), c); terr != nil {
				err = errors.Join(err, fmt.Errorf("linux: undoing a failed attach: %w", terr))
			}
			return host.Capacity{}, err
		}
	}
	b.tags[tag] = c
	b.log.Info("static capacity attached", "tag", tag, "region", c.region, "dax", c.dax, "size", c.size, "mode", c.mode)
	return b.surface(c), nil
}

// SetMode reconfigures a tag between devdax and system-ram (daxctl
// reconfigure-device): ErrBusy while mapped (to system-ram) or while the
// kernel cannot offline its memory (to devdax).
func (b *Backend) SetMode(ctx context.Context, tag string, mode Mode) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.tags[tag]
	if !ok {
		return fmt.Errorf("linux: tag %s: %w", tag, host.ErrUnknownTag)
	}
	if c.release {
		return fmt.Errorf("linux: tag %s: %w", tag, host.ErrReleasing)
	}
	switch {
	case c.mode == mode:
		return nil
	case mode == SystemRAM:
		if err := b.busy(c); err != nil {
			return err
		}
		return b.toSystemRAM(ctx, c)
	case mode == DevDAX:
		return b.toDevDAX(ctx, c)
	}
	return fmt.Errorf("linux: mode %q: want devdax or system-ram: %w", mode, ErrMode)
}

// Node is the NUMA node a system-ram tag's memory is onlined to.
func (b *Backend) Node(tag string) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.tags[tag]
	if !ok {
		return -1, fmt.Errorf("linux: tag %s: %w", tag, host.ErrUnknownTag)
	}
	if c.mode != SystemRAM {
		return -1, fmt.Errorf("linux: tag %s is %s, not system-ram: %w", tag, c.mode, ErrMode)
	}
	return c.node, nil
}

func (b *Backend) surface(c *capacity) host.Capacity {
	out := host.Capacity{Tag: c.tag, Size: c.size, Kind: string(c.mode), InUse: len(c.maps) > 0, Releasing: c.release}
	switch c.mode {
	case DevDAX:
		out.Path = filepath.Join(b.cfg.Dev, c.dax)
	case SystemRAM:
		out.Path = b.fs.path("devices/system/node", "node"+strconv.Itoa(c.node))
		out.InUse = true // the page allocator owns it
	}
	if c.static {
		out.Extents = []host.Extent{{DPA: c.dpa, Offset: 0, Length: c.size}}
	} else {
		out.Extents = c.extents
	}
	if len(c.maps) == 0 && c.mode == DevDAX && b.mappedElsewhere(out.Path) {
		out.InUse = true
	}
	return out
}

// Wait returns the tag's capacity: static capacity at once; Dynamic
// Capacity once the kernel shows the tag's extents (the DCD series), with
// its DAX device made.
func (b *Backend) Wait(ctx context.Context, tag string) (host.Capacity, error) {
	b.mu.Lock()
	if c, ok := b.tags[tag]; ok {
		defer b.mu.Unlock()
		return b.surface(c), nil
	}
	b.mu.Unlock()
	return b.waitDCD(ctx, tag)
}

// List is every tag this backend holds.
func (b *Backend) List(context.Context) ([]host.Capacity, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]host.Capacity, 0, len(b.tags))
	for _, c := range b.tags {
		out = append(out, b.surface(c))
	}
	return out, nil
}

type mapping struct {
	b    *Backend
	c    *capacity
	mem  []byte
	once sync.Once
}

func (m *mapping) Bytes() []byte { return m.mem }

// unmapLocked unmaps once (Close, or a forced release); b.mu is held.
func (m *mapping) unmapLocked() error {
	if m.mem == nil {
		return nil
	}
	err := unix.Munmap(m.mem)
	m.mem = nil
	delete(m.c.maps, m)
	return err
}

func (m *mapping) Close() error {
	var err error
	m.once.Do(func() {
		m.b.mu.Lock()
		defer m.b.mu.Unlock()
		err = m.unmapLocked()
	})
	return err
}

// Map maps the tag's DAX device (MAP_SHARED, whole device, as device-dax
// requires: length a multiple of its alignment, offset 0).
func (b *Backend) Map(_ context.Context, tag string) (host.Mapping, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.tags[tag]
	if !ok {
		return nil, fmt.Errorf("linux: tag %s: %w", tag, host.ErrUnknownTag)
	}
	if c.release {
		return nil, fmt.Errorf("linux: tag %s: %w", tag, host.ErrReleasing)
	}
	if c.mode != DevDAX {
		return nil, fmt.Errorf("linux: tag %s is onlined as system-ram (NUMA node %d), not a device to map: %w", tag, c.node, ErrMode)
	}
	mem, err := b.mmap(c)
	if err != nil {
		return nil, err
	}
	m := &mapping{b: b, c: c, mem: mem}
	c.maps[m] = struct{}{}
	return m, nil
}

func (b *Backend) mmap(c *capacity) ([]byte, error) {
	p := filepath.Join(b.cfg.Dev, c.dax)
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("linux: %w", err)
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, int(c.size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("linux: mmap %s (%d bytes): %w", p, c.size, err)
	}
	return mem, nil
}

// busy is ErrBusy while the tag's DAX device is mapped by this process or
// by any other (its /proc/PID/maps names the device).
func (b *Backend) busy(c *capacity) error {
	if c.mode != DevDAX {
		return nil
	}
	p := filepath.Join(b.cfg.Dev, c.dax)
	if len(c.maps) > 0 {
		return fmt.Errorf("linux: tag %s: %s is mapped by this agent (%d mappings): %w", c.tag, p, len(c.maps), host.ErrBusy)
	}
	if c.forced {
		return nil
	}
	if pids := b.mappers(p); len(pids) > 0 {
		return fmt.Errorf("linux: tag %s: %s is mapped by process %s: %w", c.tag, p, strings.Join(pids, ", "), host.ErrBusy)
	}
	return nil
}

func (b *Backend) mappedElsewhere(path string) bool { return len(b.mappers(path)) > 0 }

// mappers are the PIDs whose maps name path (as lsof would find them).
func (b *Backend) mappers(path string) []string {
	dirs, _ := filepath.Glob(filepath.Join(b.cfg.Proc, "[0-9]*"))
	var pids []string
	for _, d := range dirs {
		data, err := os.ReadFile(filepath.Join(d, "maps"))
		if err != nil {
			continue // gone, or not ours to read
		}
		for line := range strings.Lines(string(data)) {
			if strings.HasSuffix(strings.TrimRight(line, "\n"), " "+path) {
				pids = append(pids, filepath.Base(d))
				break
			}
		}
	}
	return pids
}

// Release prepares the whole tag for release: ErrBusy while in use
// unless force. Static capacity is torn down by WaitGone (the host gives
// it back itself); Dynamic Capacity's DAX device is deleted here so that
// the kernel can answer the device's release.
func (b *Backend) Release(ctx context.Context, tag string, force bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.tags[tag]
	if !ok {
		return fmt.Errorf("linux: tag %s: %w", tag, host.ErrUnknownTag)
	}
	if err := b.busy(c); err != nil {
		if !force {
			return err
		}
		// This agent's own mappings go now; other processes' are zapped
		// by the kernel when device_dax unbinds at teardown.
		b.log.Warn("forced release of a mapped tag", "tag", tag, "why", err)
		for m := range c.maps {
			_ = m.unmapLocked()
		}
		c.forced = true
	}
	if c.static && c.mode == SystemRAM {
		// The kernel's refusal to offline the memory is the busy here;
		// ask it now rather than at teardown. Keep onlines it again.
		if err := b.toDevDAX(ctx, c); err != nil {
			return err
		}
		c.wasRAM = true
	}
	c.release = true
	if !c.static {
		if err := b.deleteDCDDevice(ctx, c); err != nil {
			c.release = false
			return err
		}
	}
	return nil
}

// Keep undoes a Release whose box release failed.
func (b *Backend) Keep(ctx context.Context, tag string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.tags[tag]
	if !ok {
		return fmt.Errorf("linux: tag %s: %w", tag, host.ErrUnknownTag)
	}
	if !c.release {
		return nil
	}
	if c.tearing || c.zeroed {
		return fmt.Errorf("linux: tag %s is being torn down: %w", tag, host.ErrReleasing)
	}
	c.forced = false
	if c.wasRAM {
		if err := b.toSystemRAM(ctx, c); err != nil {
			return err
		}
		c.wasRAM = false
	}
	if !c.static {
		if err := b.makeDCDDevice(ctx, c); err != nil {
			return err
		}
	}
	c.release = false
	return nil
}

// Detach asks for a static tag back, as the device's release request
// does for Dynamic Capacity: the tag takes no new mappings, and WaitGone
// tears it down once nothing maps it.
func (b *Backend) Detach(tag string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.tags[tag]
	if !ok {
		return fmt.Errorf("linux: tag %s: %w", tag, host.ErrUnknownTag)
	}
	c.release = true
	return nil
}

// WaitGone waits until the host no longer holds tag. Static capacity is
// torn down here once it is released and unmapped (zeroed first, then in
// the reverse order of Attach); Dynamic Capacity is gone when the kernel
// no longer shows its extents.
func (b *Backend) WaitGone(ctx context.Context, tag string) error {
	return b.fs.until(ctx, "tag "+tag+" to be unmapped and released", func() (bool, error) {
		b.mu.Lock()
		defer b.mu.Unlock()
		c, ok := b.tags[tag]
		if !ok {
			return true, nil
		}
		if !c.release || c.tearing {
			return false, nil
		}
		if !c.static {
			if len(b.dcdExtents(tag)) > 0 {
				return false, nil
			}
			delete(b.tags, tag)
			return true, nil
		}
		if b.busy(c) != nil {
			return false, nil
		}
		if c.mode == SystemRAM {
			if err := b.toDevDAX(ctx, c); err != nil {
				return false, err
			}
		}
		if !b.cfg.KeepContents && !c.zeroed && c.dax != "" {
			// Zeroing takes as long as writing the whole device: do it
			// without the lock, so List and other tags are not held up.
			// The tag is released (no Map, SetMode) and tearing (no
			// Keep), so nothing changes c meanwhile.
			c.tearing = true
			b.mu.Unlock()
			err := b.zero(c)
			b.mu.Lock()
			c.tearing = false
			if err != nil {
				return false, fmt.Errorf("linux: zeroing %s before release: %w", c.dax, err)
			}
			c.zeroed = true
		}
		if err := b.teardown(ctx, c); err != nil {
			return false, err
		}
		delete(b.tags, tag)
		return true, nil
	})
}

// Close drops the backend; capacity stays as the kernel holds it.
func (b *Backend) Close() error { return nil }

func newUUID() string {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}
