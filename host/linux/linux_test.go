package linux

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/host"
	"cxlpool/host/hosttest"
)

const tagA = "6a1f0000-0000-4000-8000-00000000000a"

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// The contract suite on static capacity over a fake 6.3+ kernel (ram
// region). Static capacity has no device side: the host carves it out of
// its own window, so Grant is Attach and Revoke is Detach (the host's own
// request to give it back, which, like a device's release request, waits
// for the last unmap). With those stand-ins every subtest applies; what
// they do not test for static capacity is a device asking: none does.
// ReleasedMemoryReadsZero holds because the backend zeroes at release
// (the fake's media outlives the region, as device memory does). The
// Dynamic Capacity path cannot run the suite: no sysfs of the DCD series
// shows the device's release request (TestDCDFakeTree covers the rest).
func TestContractStatic(t *testing.T) {
	hosttest.Run(t, func(t *testing.T) hosttest.Fixture {
		k := newFakeKernel(t)
		b := k.backend(t, Config{LD: 3})
		return hosttest.Fixture{
			Backend: b,
			Want:    host.Identity{Serial: fakeSerial, LD: 3},
			Grant: func(ctx context.Context, tag string, size uint64) error {
				_, err := b.Attach(ctx, tag, size, DevDAX)
				return err
			},
			Revoke: func(_ context.Context, tag string) error { return b.Detach(tag) },
			Block:  fakeAlign,
		}
	})
}

// The sysfs stores of an attach and its release, in the order cxl
// create-region and destroy-region make them.
func TestAttachReleaseStores(t *testing.T) {
	k := newFakeKernel(t)
	b := k.backend(t, Config{LD: 0})
	c, err := b.Attach(ctxT(t), tagA, fakeAlign, DevDAX)
	if err != nil {
		t.Fatal(err)
	}
	want := host.Capacity{Tag: tagA, Size: fakeAlign, Path: filepath.Join(k.dev, "dax0.0"), Kind: "devdax",
		Extents: []host.Extent{{Length: fakeAlign}}}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("Attach() (-want +got):\n%s", diff)
	}
	if err := b.Release(ctxT(t), tagA, false); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitGone(ctxT(t), tagA); err != nil {
		t.Fatal(err)
	}
	wantStores := []string{
		"bus/cxl/devices/decoder0.0/create_ram_region=region0",
		"bus/cxl/devices/region0/interleave_granularity=256",
		"bus/cxl/devices/region0/interleave_ways=1",
		"bus/cxl/devices/region0/size=4194304",
		"bus/cxl/devices/decoder2.0/dpa_size=0",
		"bus/cxl/devices/decoder2.0/mode=ram",
		"bus/cxl/devices/decoder2.0/dpa_size=4194304",
		"bus/cxl/devices/region0/target0=decoder2.0",
		"bus/cxl/devices/region0/commit=1",
		"bus/cxl/drivers_probe=region0",
		// release: the DAX device (after zeroing), then the region in reverse
		"bus/dax/devices/dax0.0/driver/unbind=dax0.0",
		"bus/cxl/devices/region0/driver/unbind=region0",
		"bus/cxl/devices/region0/commit=0",
		"bus/cxl/devices/region0/target0=",
		"bus/cxl/devices/decoder2.0/dpa_size=0",
		"bus/cxl/devices/decoder0.0/delete_region=region0",
	}
	if diff := cmp.Diff(wantStores, k.writes); diff != "" {
		t.Errorf("stores (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(filepath.Join(k.sys, cxlDevices, "region0")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("region0 after release: %v, want gone", err)
	}
}

// A failed step leaves nothing behind: everything made so far is undone.
func TestAttachFailureUndoes(t *testing.T) {
	k := newFakeKernel(t)
	b := k.backend(t, Config{LD: 0})
	store := b.fs.write
	b.fs.write = func(path, v string) error {
		if strings.HasSuffix(path, "/commit") && strings.TrimSpace(v) == "1" {
			return errors.New("ENXIO (the fake refuses commit)")
		}
		return store(path, v)
	}
	if _, err := b.Attach(ctxT(t), tagA, fakeAlign, DevDAX); err == nil || !strings.Contains(err.Error(), "commit") {
		t.Fatalf("Attach with a refused commit = %v, want the commit's error", err)
	}
	if _, err := os.Stat(filepath.Join(k.sys, cxlDevices, "region0")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("region0 after a failed attach: %v, want deleted", err)
	}
	if got := k.get("bus/cxl/devices/decoder2.0/dpa_size"); got != "0" {
		t.Errorf("endpoint decoder dpa_size after a failed attach = %q, want 0", got)
	}
	if list, _ := b.List(ctxT(t)); len(list) != 0 {
		t.Errorf("List() after a failed attach = %+v, want nothing", list)
	}
}

func TestAttachRefusals(t *testing.T) {
	k := newFakeKernel(t)
	b := k.backend(t, Config{LD: 0})
	if _, err := b.Attach(ctxT(t), tagA, fakeAlign, DevDAX); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tag  string
		size uint64
		mode Mode
		want error
	}{
		{"same tag twice", tagA, fakeAlign, DevDAX, ErrExists},
		{"size not a region granule", "6a1f0000-0000-4000-8000-00000000000b", fakeAlign + 1, DevDAX, ErrAlign},
		{"unknown mode", "6a1f0000-0000-4000-8000-00000000000b", fakeAlign, "fsdax", ErrMode},
		{"larger than the window", "6a1f0000-0000-4000-8000-00000000000b", 2 * fakeWindow, DevDAX, ErrNoWindow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := b.Attach(ctxT(t), tc.tag, tc.size, tc.mode); !errors.Is(err, tc.want) {
				t.Errorf("Attach() = %v, want %v", err, tc.want)
			}
		})
	}
}

// System-ram onlines the DAX device's memory blocks through kmem, and
// back; a block the kernel cannot offline keeps the tag (ErrBusy), with
// the blocks offlined before it onlined again.
func TestSystemRAM(t *testing.T) {
	k := newFakeKernel(t)
	b := k.backend(t, Config{LD: 0})
	size := uint64(2 * fakeAlign)
	if _, err := b.Attach(ctxT(t), tagA, size, SystemRAM); err != nil {
		t.Fatal(err)
	}
	blocks, _ := filepath.Glob(filepath.Join(k.sys, memBlocks, "memory*"))
	if len(blocks) != int(size/fakeBlock) {
		t.Fatalf("%d memory blocks, want %d", len(blocks), size/fakeBlock)
	}
	for _, blk := range blocks {
		if got := k.get(filepath.Join(memBlocks, filepath.Base(blk), "state")); got != "online" {
			t.Errorf("%s is %s, want online", filepath.Base(blk), got)
		}
	}
	if node, err := b.Node(tagA); err != nil || node != 1 {
		t.Errorf("Node() = %d, %v; want 1", node, err)
	}
	list, _ := b.List(ctxT(t))
	if len(list) != 1 || list[0].Kind != "system-ram" || !list[0].InUse {
		t.Errorf("List() = %+v, want one system-ram tag in use", list)
	}
	if _, err := b.Map(ctxT(t), tagA); !errors.Is(err, ErrMode) {
		t.Errorf("Map(system-ram) = %v, want ErrMode", err)
	}
	last := filepath.Base(blocks[len(blocks)-1])
	k.pinned[last] = true
	if err := b.SetMode(ctxT(t), tagA, DevDAX); !errors.Is(err, host.ErrBusy) {
		t.Fatalf("SetMode(devdax) with a pinned block = %v, want ErrBusy", err)
	}
	for _, blk := range blocks {
		if got := k.get(filepath.Join(memBlocks, filepath.Base(blk), "state")); got != "online" {
			t.Errorf("after the refusal %s is %s, want online again", filepath.Base(blk), got)
		}
	}
	k.pinned[last] = false
	if err := b.SetMode(ctxT(t), tagA, DevDAX); err != nil {
		t.Fatal(err)
	}
	m, err := b.Map(ctxT(t), tagA)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetMode(ctxT(t), tagA, SystemRAM); !errors.Is(err, host.ErrBusy) {
		t.Errorf("SetMode(system-ram) while mapped = %v, want ErrBusy", err)
	}
	_ = m.Close()
	// Release from system-ram goes back through devdax, zeroes and tears down.
	if err := b.SetMode(ctxT(t), tagA, SystemRAM); err != nil {
		t.Fatal(err)
	}
	// Releasing system-ram asks the kernel to offline it at once: its
	// refusal is the busy.
	k.pinned[last] = true
	if err := b.Release(ctxT(t), tagA, false); !errors.Is(err, host.ErrBusy) {
		t.Fatalf("Release of system-ram with a pinned block = %v, want ErrBusy", err)
	}
	k.pinned[last] = false
	if err := b.Release(ctxT(t), tagA, false); err != nil {
		t.Fatal(err)
	}
	// The box did not follow: Keep onlines it again.
	if err := b.Keep(ctxT(t), tagA); err != nil {
		t.Fatal(err)
	}
	if list, _ := b.List(ctxT(t)); len(list) != 1 || list[0].Kind != "system-ram" {
		t.Errorf("after Keep: List() = %+v, want system-ram again", list)
	}
	if err := b.Release(ctxT(t), tagA, false); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitGone(ctxT(t), tagA); err != nil {
		t.Fatal(err)
	}
	if blocks, _ := filepath.Glob(filepath.Join(k.sys, memBlocks, "memory*")); len(blocks) != 0 {
		t.Errorf("memory blocks after release: %v, want none", blocks)
	}
}

// Another process mapping the DAX device makes it busy: the backend finds
// it in /proc/PID/maps, as the kernel would not refuse the teardown.
func TestBusyOtherProcess(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("needs python3 to map the device from another process")
	}
	k := newFakeKernel(t)
	b := k.backend(t, Config{LD: 0})
	c, err := b.Attach(ctxT(t), tagA, fakeAlign, DevDAX)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctxT(t), "python3", "-c",
		"import mmap,sys;f=open(sys.argv[1],'r+b');m=mmap.mmap(f.fileno(),0);print('held',flush=True);sys.stdin.read()", c.Path)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := out.Read(buf); err != nil || string(buf[:4]) != "held" {
		t.Fatalf("holder said %q, %v", buf, err)
	}
	err = b.Release(ctxT(t), tagA, false)
	_ = in.Close()
	_ = cmd.Wait()
	if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), "process") {
		t.Fatalf("Release while another process maps = %v, want ErrBusy naming the process", err)
	}
	if err := b.Release(ctxT(t), tagA, false); err != nil {
		t.Fatalf("Release after the other process ended: %v", err)
	}
}

func TestIdentity(t *testing.T) {
	k := newFakeKernel(t)
	for _, tc := range []struct {
		name string
		cfg  Config
		want host.Identity
		err  error
	}{
		{"configured LD", Config{LD: 5}, host.Identity{Serial: fakeSerial, LD: 5}, nil},
		{"by serial", Config{LD: 0, Serial: fakeSerial}, host.Identity{Serial: fakeSerial}, nil},
		{"no LD: the kernel does not show it", Config{LD: -1}, host.Identity{}, ErrUnknownLD},
		{"another serial", Config{LD: 0, Serial: 0x2000}, host.Identity{}, ErrNoMemdev},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := k.backend(t, tc.cfg).Identity(ctxT(t))
			if !errors.Is(err, tc.err) || got != tc.want {
				t.Errorf("Identity() = %+v, %v; want %+v, %v", got, err, tc.want, tc.err)
			}
		})
	}
}

// On a kernel without the DCD series, waiting for a granted tag fails at
// once and says why.
func TestNoDCD(t *testing.T) {
	b := newFakeKernel(t).backend(t, Config{LD: 0})
	if _, err := b.Wait(ctxT(t), tagA); !errors.Is(err, ErrNoDCD) {
		t.Errorf("Wait() = %v, want ErrNoDCD", err)
	}
}

// The Dynamic Capacity path on a fake tree of the DCD series' layout (no
// released kernel has it): the tag's extents make one DAX device, mapped
// whole; release is refused while mapped, then deletes the device, and the
// tag is gone once the kernel has given the extents back.
func TestDCDFakeTree(t *testing.T) {
	k := newFakeKernel(t)
	k.addDCD()
	b := k.backend(t, Config{LD: 0})
	k.grantDCD(tagA, [2]uint64{0, DCDAlign}, [2]uint64{4 * DCDAlign, 2 * DCDAlign})
	c, err := b.Wait(ctxT(t), tagA)
	if err != nil {
		t.Fatal(err)
	}
	want := host.Capacity{Tag: tagA, Size: 3 * DCDAlign, Path: filepath.Join(k.dev, "dax0.1"), Kind: "devdax",
		Extents: []host.Extent{{Length: DCDAlign}, {DPA: 4 * DCDAlign, Offset: 4 * DCDAlign, Length: 2 * DCDAlign}}}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("Wait() (-want +got):\n%s", diff)
	}
	if got := k.get("bus/dax/devices/dax0.1/uuid"); got != tagA {
		t.Errorf("DAX device uuid = %q, want the tag", got)
	}
	m, err := b.Map(ctxT(t), tagA)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Bytes()) != 3*DCDAlign {
		t.Errorf("mapping is %d bytes, want %d", len(m.Bytes()), 3*DCDAlign)
	}
	if err := b.Release(ctxT(t), tagA, false); !errors.Is(err, host.ErrBusy) {
		t.Errorf("Release while mapped = %v, want ErrBusy", err)
	}
	_ = m.Close()
	if err := b.Release(ctxT(t), tagA, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(k.dev, "dax0.1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("/dev/dax0.1 after release: %v, want gone", err)
	}
	k.releaseDCD()
	if err := b.WaitGone(ctxT(t), tagA); err != nil {
		t.Fatal(err)
	}
	if list, _ := b.List(ctxT(t)); len(list) != 0 {
		t.Errorf("List() after the release = %+v, want nothing", list)
	}
}

func TestDCDMisaligned(t *testing.T) {
	k := newFakeKernel(t)
	k.addDCD()
	b := k.backend(t, Config{LD: 0})
	k.grantDCD(tagA, [2]uint64{0, DCDAlign + 4096})
	if _, err := b.Wait(ctxT(t), tagA); !errors.Is(err, ErrAlign) {
		t.Errorf("Wait() on a misaligned extent = %v, want ErrAlign", err)
	}
}

// Kernel 6.1's path (no ram regions, no DEV_DAX_CXL), which the VM test
// runs for real: a pmem region whose uuid is the tag, the libnvdimm
// region's namespace sized to it, its dax seed bound to dax_pmem, and all
// of it undone in reverse at release.
func TestAttachPMEM(t *testing.T) {
	k := newFakeKernel(t)
	k.attrs(filepath.Join(k.sys, cxlDevices, "mem0"), map[string]string{"ram/size": "0x0", "pmem/size": fmt.Sprintf("%#x", fakeWindow)})
	root := filepath.Join(k.sys, cxlDevices, "root0/decoder0.0")
	_ = os.Remove(filepath.Join(root, "create_ram_region"))
	k.attrs(root, map[string]string{"create_pmem_region": "region0"})
	b := k.backend(t, Config{LD: 0})
	c, err := b.Attach(ctxT(t), tagA, 2*fakeAlign, DevDAX)
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(2*fakeAlign - 2<<20); c.Size != want || c.Path != filepath.Join(k.dev, "dax1.0") {
		t.Errorf("Attach() = %d bytes at %s, want %d at dax1.0 (the namespace less its page map)", c.Size, c.Path, want)
	}
	m, err := b.Map(ctxT(t), tagA)
	if err != nil {
		t.Fatal(err)
	}
	copy(m.Bytes(), "persistent")
	_ = m.Close()
	if err := b.Release(ctxT(t), tagA, false); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitGone(ctxT(t), tagA); err != nil {
		t.Fatal(err)
	}
	var nd []string
	for _, w := range k.writes {
		if strings.Contains(w, "/nd/") || strings.HasSuffix(strings.SplitN(w, "=", 2)[0], "/uuid") {
			if i := strings.Index(w, "uuid="); i >= 0 && !strings.HasSuffix(w, tagA) {
				w = w[:i+5] + "(random)"
			}
			nd = append(nd, w)
		}
	}
	want := []string{
		"bus/cxl/devices/region0/uuid=" + tagA,
		"bus/nd/devices/namespace1.0/uuid=(random)",
		"bus/nd/devices/namespace1.0/alt_name=cxlpool:" + tagA,
		"bus/nd/devices/namespace1.0/size=8388608",
		"bus/nd/devices/dax1.0/uuid=(random)",
		"bus/nd/devices/dax1.0/mode=pmem",
		"bus/nd/devices/dax1.0/align=2097152",
		"bus/nd/devices/dax1.0/namespace=namespace1.0",
		"bus/nd/drivers_probe=dax1.0",
		"bus/nd/devices/dax1.0/driver/unbind=dax1.0",
		"bus/nd/devices/dax1.0/namespace=",
		"bus/nd/devices/namespace1.0/size=0",
	}
	if diff := cmp.Diff(want, nd); diff != "" {
		t.Errorf("libnvdimm stores (-want +got):\n%s", diff)
	}
	// The region is gone and its persistent bytes were zeroed first.
	if _, err := os.Stat(filepath.Join(k.sys, cxlDevices, "region0")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("region0 after release: %v", err)
	}
	media, err := os.ReadFile(filepath.Join(k.media, "dpa-decoder2.0"))
	if err != nil || !bytes.Equal(media[:10], make([]byte, 10)) {
		t.Errorf("media after release starts %q (%v), want zeros", media[:min(10, len(media))], err)
	}
}

// A forced release unmaps this agent's own mappings first, then tears
// down as usual.
func TestForcedRelease(t *testing.T) {
	k := newFakeKernel(t)
	b := k.backend(t, Config{LD: 0})
	if _, err := b.Attach(ctxT(t), tagA, fakeAlign, DevDAX); err != nil {
		t.Fatal(err)
	}
	m, err := b.Map(ctxT(t), tagA)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctxT(t), tagA, true); err != nil {
		t.Fatalf("forced Release while mapped: %v", err)
	}
	if m.Bytes() != nil {
		t.Error("the mapping still has bytes after a forced release")
	}
	if err := b.WaitGone(ctxT(t), tagA); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("Close after a forced release: %v", err)
	}
	if _, err := os.Stat(filepath.Join(k.dev, "dax0.0")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("/dev/dax0.0 after release: %v, want gone", err)
	}
}

func TestSeveralMemdevs(t *testing.T) {
	k := newFakeKernel(t)
	k.attrs(filepath.Join(k.sys, cxlDevices, "mem1"), map[string]string{"serial": "0x2000"})
	if _, err := k.backend(t, Config{LD: 0}).Identity(ctxT(t)); !errors.Is(err, ErrNoMemdev) || !strings.Contains(err.Error(), "serial 0x2000") {
		t.Errorf("Identity() with two devices and no serial = %v, want ErrNoMemdev listing them", err)
	}
	got, err := k.backend(t, Config{LD: 1, Serial: 0x2000}).Identity(ctxT(t))
	if want := (host.Identity{Serial: 0x2000, LD: 1}); err != nil || got != want {
		t.Errorf("Identity() by serial = %+v, %v; want %+v", got, err, want)
	}
}
