package vmtest

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"cxlpool/image/build"
	"cxlpool/image/disk"
	"cxlpool/image/manifest"
	"cxlpool/image/update"
)

// loaderInitramfs returns the loader stage's initramfs: the image's, or,
// for an image built before the loader existed, one built now (the
// loader alone, with the image's kernel release and trusted key).
func (e *env) loaderInitramfs(t *testing.T) string {
	t.Helper()
	p := filepath.Join(e.img, build.LoaderInitramfs)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	m := e.imageManifest(t)
	pub, err := os.ReadFile(filepath.Join(e.img, "signing.pub"))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(e.dir, "loader")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("no %s in %s: building the loader stage", build.LoaderInitramfs, e.img)
	res, err := build.BuildLoader(e.ctx, build.LoaderConfig{Repo: repoRoot(t), Out: out, Work: filepath.Join(out, "work"),
		Kernel: m.Kernel, PublicKey: pub, Version: m.Version})
	if err != nil {
		t.Fatal(err)
	}
	return res.Initramfs
}

// imageManifest is the built image's (unverified here: SelectBoot
// verifies the slot's own copy).
func (e *env) imageManifest(t *testing.T) *manifest.Manifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.img, manifest.ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	m, err := manifest.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// bootLoader starts QEMU the way the box boots: the loader stage's kernel
// and initramfs (the board's flash) and the disk; the loader picks the
// slot and kexecs into it.
func (e *env) bootLoader(t *testing.T, diskPath, name, initrd string) *VM {
	t.Helper()
	log, _ := os.Create(filepath.Join(e.dir, name+".console"))
	vm, err := Start(Options{Dir: e.dir, Kernel: filepath.Join(e.img, "vmlinux"), Initrd: initrd, Disk: diskPath,
		DeviceAddr: e.simAddr, APIPort: e.port, UpdateSocket: filepath.Join(e.dir, "update.sock"), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !vm.Exited() {
			vm.Kill()
		}
		log.Close()
	})
	return vm
}

// kexecRE is the loader's last line; it must be whole (the console may
// be read mid-line).
var kexecRE = regexp.MustCompile(`boxloader: kexec into slot ([ab]) at ([0-9.]+)s[^\n]*: ([^\r\n]*)\r?\n`)

// TestLoader boots the box through its loader stage: the loader finds
// the disk, verifies slot A and kexecs into it; the daemon answers with
// the right version. It compares the boot with the host-side loader's,
// then makes slot B a corrupt trial and checks that the loader falls back
// to A, and that with no good slot left it stops at a shell.
func TestLoader(t *testing.T) {
	e := setup(t)
	initrd := e.loaderInitramfs(t)
	version := e.imageManifest(t).Version
	diskPath := filepath.Join(e.dir, "disk.img")
	copyFile(t, filepath.Join(e.img, "disk.img"), diskPath)
	waitFor := func(vm *VM, re *regexp.Regexp) []string {
		t.Helper()
		return e.waitConsole(t, vm, re, 3*time.Minute)
	}
	state := func() update.State { return diskState(t, diskPath) }
	// kexec waits for the loader's hand-over and returns the slot and when
	// it happened (host clock, from QEMU's start).
	kexec := func(vm *VM) (string, time.Duration) {
		t.Helper()
		m := waitFor(vm, kexecRE)
		at := time.Since(vm.Started)
		if want := "cxlpool.slot=" + m[1] + " cxlpool.disk=/dev/vda"; !strings.Contains(m[3], want) {
			t.Errorf("box kernel command line %q: want %q in it", m[3], want)
		}
		return m[1], at
	}
	var c *client
	firmware := func(vm *VM, name string) {
		t.Helper()
		if c == nil {
			pw := waitFor(vm, passwordRE)[1]
			c = e.client(pw)
		}
		mgr, _ := c.must(http.MethodGet, "/redfish/v1/Managers/FM", nil, http.StatusOK)
		if got := mgr["FirmwareVersion"]; got != version {
			t.Errorf("%s: Manager FirmwareVersion: got %v, want %s", name, got, version)
		}
	}

	// First boot: the loader picks slot A and kexecs into it.
	vm := e.bootLoader(t, diskPath, "loader1", initrd)
	slot, _ := kexec(vm)
	if slot != update.SlotA {
		t.Fatalf("first boot: the loader chose slot %s, want a", slot)
	}
	e.waitAPI(vm)
	// The box kernel's own start shows after the loader's.
	waitFor(vm, regexp.MustCompile(`(?s)boxloader: kexec into slot a.*Command line: [^\n]*cxlpool\.slot=a`))
	firmware(vm, "first boot")
	if st := state(); st.Active != update.SlotA || st.Trial != "" || st.A.State != update.StateReady {
		t.Errorf("after the first boot: boot control %+v, want a active and ready, no trial", st)
	}
	t.Logf("first boot through the loader: slot a, Manager FirmwareVersion %s", version)
	vm.Kill()

	// The loader's cost: the same restart (not a first start) with the
	// host-side loader and through the loader stage.
	vmD, b := e.boot(diskPath, "direct")
	if b.Slot != update.SlotA {
		t.Fatalf("direct boot: slot %s, want a", b.Slot)
	}
	direct := e.waitAPI(vmD)
	vmD.Kill()
	vm = e.bootLoader(t, diskPath, "loader2", initrd)
	_, handover := kexec(vm)
	viaLoader := e.waitAPI(vm)
	guest := waitFor(vm, kexecRE)[2]
	t.Logf("boot to API 200: host-side loader %v, loader stage %v: the loader adds %v (it hands over %v after QEMU starts, at %ss of its own uptime)",
		direct.Round(10*time.Millisecond), viaLoader.Round(10*time.Millisecond), (viaLoader - direct).Round(10*time.Millisecond),
		handover.Round(10*time.Millisecond), guest)
	for _, l := range regexp.MustCompile(`\[ *[0-9.]+\] boxloader: [^\n]*`).FindAllString(vm.Console(), -1) {
		t.Logf("loader: %s", strings.TrimSpace(l))
	}
	// The box's own timeline (its kernel's uptime restarts at the kexec).
	_, after, _ := strings.Cut(vm.Console(), "boxloader: kexec into")
	for name, con := range map[string]string{"direct": vmD.Console(), "after kexec": after} {
		for _, l := range timelineRE.FindAllString(con, -1) {
			t.Logf("%s: %s", name, strings.TrimSpace(l))
		}
	}
	vm.Kill()

	// apply writes a signed bundle into the inactive slot as the pending
	// trial, as the box's updater does, and returns the slots' offsets.
	apply := func(version string, sv uint64) (map[string]int64, update.State) {
		t.Helper()
		d, err := update.Open(diskPath)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if _, err := d.Apply(e.ctx, bytes.NewReader(e.resign(t, version, sv)), e.keys, update.ApplyOptions{}); err != nil {
			t.Fatal(err)
		}
		st, err := d.State()
		if err != nil {
			t.Fatal(err)
		}
		off := map[string]int64{}
		for slot, name := range map[string]string{update.SlotA: disk.SlotAName, update.SlotB: disk.SlotBName} {
			p, err := disk.Find(d.Partitions(), name)
			if err != nil {
				t.Fatal(err)
			}
			off[slot] = p.Offset
		}
		return off, st
	}

	// A trial of slot B whose bytes rot on the disk: the loader must
	// record the trial, find B corrupt, mark it bad and boot A.
	off, st := apply("0.2.0-loadertest", 2)
	if st.Trial != update.SlotB {
		t.Fatalf("after Apply: trial %q, want b", st.Trial)
	}
	flipByte(t, diskPath, off[update.SlotB]+st.B.Size/2)
	vm = e.bootLoader(t, diskPath, "fallback", initrd)
	waitFor(vm, regexp.MustCompile(`boxloader: slot b: [^\n]*does not match`))
	if slot, _ := kexec(vm); slot != update.SlotA {
		t.Fatalf("corrupt trial: the loader chose slot %s, want a", slot)
	}
	e.waitAPI(vm)
	firmware(vm, "fallback")
	st = state()
	if st.Active != update.SlotA || st.Trial != "" || st.B.State != update.StateBad || st.MinSecurityVersion != 1 {
		t.Errorf("after the fallback: boot control %+v, want a active, no trial, b bad, minimum security version 1", st)
	}
	t.Logf("corrupt trial of slot b: marked bad (%s), booted slot a", st.B.Error)
	vm.Kill()

	// A good trial of slot B: the loader boots it once, the box commits
	// it once the daemon answers.
	apply("0.3.0-loadertest", 3)
	vm = e.bootLoader(t, diskPath, "trial", initrd)
	waitFor(vm, regexp.MustCompile(`boxloader: slot b verified[^\n]*version 0\.3\.0-loadertest \(security version 3, trial boot\)`))
	if slot, _ := kexec(vm); slot != update.SlotB {
		t.Fatalf("good trial: the loader chose slot %s, want b", slot)
	}
	e.waitAPI(vm)
	waitFor(vm, regexp.MustCompile(`slot b committed`))
	st = state()
	if st.Active != update.SlotB || st.Trial != "" || st.B.State != update.StateReady || st.MinSecurityVersion != 3 {
		t.Errorf("after the trial: boot control %+v, want b active and ready, no trial, minimum security version 3", st)
	}
	t.Logf("good trial of slot b (0.3.0-loadertest): booted through the loader and committed")
	vm.Kill()

	// Nothing bootable: both slots rot. The loader says so and keeps a
	// shell on the console instead of rebooting (QEMU runs with
	// -no-reboot and panic=-1: a reboot or a panic would end it).
	flipByte(t, diskPath, off[update.SlotA]+st.A.Size/2)
	flipByte(t, diskPath, off[update.SlotB]+st.B.Size/2)
	vm = e.bootLoader(t, diskPath, "nothing", initrd)
	waitFor(vm, regexp.MustCompile(`boxloader: the box cannot boot: [^\n]*`+regexp.QuoteMeta(update.ErrNoBootable.Error())))
	// gosh (u-root's shell, bubbline line editor) draws its prompt.
	waitFor(vm, regexp.MustCompile(`(?s)staying in the loader with a shell.*toggle key help`))
	if vm.Exited() {
		t.Fatalf("nothing bootable: QEMU exited; console:\n%s", tail(vm.Console(), 3000))
	}
	if st := state(); st.A.State != update.StateBad || st.B.State != update.StateBad {
		t.Errorf("nothing bootable: boot control %+v, want both slots bad", st)
	}
	t.Logf("nothing bootable: the loader stopped at its shell")
	vm.Kill()
}

// flipByte inverts one byte of a file (bit rot on the disk).
func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}
