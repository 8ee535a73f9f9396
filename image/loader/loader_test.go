package loader

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/image/disk"
	"cxlpool/image/manifest"
	"cxlpool/image/update"
)

func TestSplitCmdline(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"  console=ttyS0   panic=-1\n", []string{"console=ttyS0", "panic=-1"}},
		{`a uroot.uinitargs="-v -x" b`, []string{"a", `uroot.uinitargs="-v -x"`, "b"}},
		{`"quoted word" x`, []string{`"quoted word"`, "x"}},
	} {
		if diff := cmp.Diff(tc.want, SplitCmdline(tc.in)); diff != "" {
			t.Errorf("SplitCmdline(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestNextCmdline(t *testing.T) {
	for _, tc := range []struct {
		own, slot, disk, want string
	}{
		{"console=ttyS0 panic=-1", "a", "/dev/vda", "console=ttyS0 panic=-1 cxlpool.slot=a cxlpool.disk=/dev/vda"},
		// The loader's own words and stale slot/disk settings go; the rest stays in order.
		{`BOOT_IMAGE=/loader initrd=/l.cpio console=ttyS0,115200 cxlpool.loader.wait=5s uroot.uinitargs="-v -x" cxlpool.slot=b cxlpool.disk=/dev/sdz quiet cxlpool.net.address=10.0.0.2/24`,
			"b", "/dev/nvme0n1", "console=ttyS0,115200 quiet cxlpool.net.address=10.0.0.2/24 cxlpool.slot=b cxlpool.disk=/dev/nvme0n1"},
		{"", "a", "", "cxlpool.slot=a"},
	} {
		if got := NextCmdline(tc.own, tc.slot, tc.disk); got != tc.want {
			t.Errorf("NextCmdline(%q): got %q, want %q", tc.own, got, tc.want)
		}
	}
}

func TestParseOptions(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Options
		wantErr string
	}{
		{"console=ttyS0", Options{Wait: DefaultWait}, ""},
		{"cxlpool.loader.disk=/dev/sdb cxlpool.loader.wait=30s cxlpool.slot=a", Options{Disk: "/dev/sdb", Wait: 30 * time.Second}, ""},
		{"cxlpool.loader.wait=soon", Options{Wait: DefaultWait}, "want a duration"},
		{"cxlpool.loader.colour=blue", Options{Wait: DefaultWait}, "unknown setting cxlpool.loader.colour"},
	} {
		got, err := ParseOptions(tc.in)
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParseOptions(%q) (-want +got):\n%s", tc.in, diff)
		}
		if gotErr := errString(err); !strings.Contains(gotErr, tc.wantErr) || (tc.wantErr == "") != (err == nil) {
			t.Errorf("ParseOptions(%q): got error %q, want one containing %q", tc.in, gotErr, tc.wantErr)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestBootParams(t *testing.T) {
	orig := make([]byte, 4096)
	for i := range orig {
		orig[i] = byte(i)
	}
	got, err := BootParams(orig, 0x1_2345_6000, 0x00d0_0000, 0x0009_1000)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	for _, f := range []struct {
		name string
		off  int
		want uint32
	}{
		{"ramdisk_image", 0x218, 0x2345_6000},
		{"ext_ramdisk_image", 0x0c0, 0x1},
		{"ramdisk_size", 0x21c, 0x00d0_0000},
		{"ext_ramdisk_size", 0x0c4, 0},
		{"cmd_line_ptr", 0x228, 0x0009_1000},
		{"ext_cmd_line_ptr", 0x0c8, 0},
		{"setup_data low", 0x250, 0},
		{"setup_data high", 0x254, 0},
	} {
		if v := le.Uint32(got[f.off:]); v != f.want {
			t.Errorf("%s: got %#x, want %#x", f.name, v, f.want)
		}
	}
	if got[0x1ef] != 0 {
		t.Errorf("sentinel: got %#x, want 0", got[0x1ef])
	}
	// Everything else (e820 map at 0x2d0, ACPI RSDP at 0x070, EFI info) is
	// passed on as the running kernel got it.
	for _, off := range []int{0x070, 0x1e8, 0x2d0, 0x2d0 + 20*127} {
		if got[off] != orig[off] {
			t.Errorf("byte %#x: got %#x, want the original %#x", off, got[off], orig[off])
		}
	}
	if _, err := BootParams(orig[:100], 0, 0, 0); err == nil {
		t.Errorf("BootParams of 100 bytes: got no error, want one")
	}
}

// fakeSystem records what the loader asks of the kernel. Loading the
// module named appear makes the disk show up (as a driver would).
type fakeSystem struct {
	loaded   []string
	appear   string
	onLoad   func()
	kexec    []string // kernel, initramfs, cmdline of the last KexecLoad or KexecFileLoad
	failFor  string   // loading fails for kernels whose content has this
	lockdown string   // what Lockdown says
	reboots  int
}

func (f *fakeSystem) LoadModule(path string) error {
	f.loaded = append(f.loaded, filepath.Base(path))
	if filepath.Base(path) == f.appear && f.onLoad != nil {
		f.onLoad()
	}
	return nil
}

func (f *fakeSystem) KexecLoad(kernel, initramfs, cmdline string) error {
	b, err := os.ReadFile(kernel)
	if err != nil {
		return err
	}
	if f.failFor != "" && bytes.Contains(b, []byte(f.failFor)) {
		return errors.New("kexec_load: invalid argument")
	}
	f.kexec = []string{string(b), readString(initramfs), cmdline}
	return nil
}

// KexecFileLoad refuses kernels with failFor as the kernel refuses a bad
// signature.
func (f *fakeSystem) KexecFileLoad(kernel, initramfs, cmdline string) error {
	b, err := os.ReadFile(kernel)
	if err != nil {
		return err
	}
	if f.failFor != "" && bytes.Contains(b, []byte(f.failFor)) {
		return errors.New("kexec_file_load: key was rejected by service")
	}
	f.kexec = []string{string(b), readString(initramfs), cmdline}
	return nil
}

func (f *fakeSystem) Lockdown() string { return f.lockdown }

func (f *fakeSystem) KexecReboot() error { f.reboots++; return nil }

func readString(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

var testKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{5}, ed25519.SeedSize))

// bundle is a signed bundle whose kernel (gzipped) reads "kernel VERSION"
// and whose signed PE kernel reads "signed kernel VERSION".
func bundle(t *testing.T, version string, sv uint64) []byte {
	t.Helper()
	return bundleOf(t, version, sv, true)
}

// bundleOf is bundle, without the signed kernel when signed is false (a
// bundle built before the Secure Boot path).
func bundleOf(t *testing.T, version string, sv uint64, signed bool) []byte {
	t.Helper()
	dir := t.TempDir()
	var kz bytes.Buffer
	zw := gzip.NewWriter(&kz)
	zw.Write([]byte("kernel " + version))
	zw.Close()
	files := []manifest.BundlePart{{Name: update.PartKernel, Path: filepath.Join(dir, "k")}, {Name: update.PartInitramfs, Path: filepath.Join(dir, "i")}}
	os.WriteFile(files[0].Path, kz.Bytes(), 0o644)
	os.WriteFile(files[1].Path, []byte("initramfs "+version), 0o644)
	if signed {
		files = append(files, manifest.BundlePart{Name: update.PartSignedKernel, Path: filepath.Join(dir, "s")})
		os.WriteFile(files[2].Path, []byte("signed kernel "+version), 0o644)
	}
	m := &manifest.Manifest{Product: "cxlpool", Version: version, SecurityVersion: sv, Created: time.Unix(1700000000, 0)}
	for _, f := range files {
		p, err := manifest.HashFile(f.Name, f.Path)
		if err != nil {
			t.Fatal(err)
		}
		m.Parts = append(m.Parts, p)
	}
	mb, sig, err := manifest.Sign(m, testKey)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := manifest.WriteBundle(&buf, mb, sig, m, files); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// box is a fake machine: /sys/class/block and /dev in a directory, a
// box disk with 1.0 in slot A, the trusted key and the driver groups.
type box struct {
	t                   *testing.T
	sys, dev, keys, mod string
	image               string // the disk's content, kept outside dev until "plugged"
	unsigned            bool   // apply writes bundles without a signed kernel
}

func newBox(t *testing.T) *box {
	t.Helper()
	root := t.TempDir()
	b := &box{t: t, sys: filepath.Join(root, "sys"), dev: filepath.Join(root, "dev"), keys: filepath.Join(root, "keys"),
		mod: filepath.Join(root, "loader-modules"), image: filepath.Join(root, "disk.img")}
	for _, d := range []string{b.sys, b.dev, b.keys} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pub, err := manifest.MarshalPublicKey(testKey.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(b.keys, "signing.pub"), pub, 0o644)
	os.WriteFile(b.mod, []byte("kernel/virtio.ko kernel/virtio_pci.ko kernel/virtio_blk.ko\nkernel/nvme-core.ko kernel/nvme.ko\n"), 0o644)
	l := disk.Layout{SlotSize: 1 << 20, DataSize: 1 << 20, BootSize: 1 << 20}
	parts, size, err := l.Partitions()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(b.image)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Truncate(size)
	if err := disk.WriteTable(f, size, parts, 1); err != nil {
		t.Fatal(err)
	}
	d, err := update.New(f, size)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Install(context.Background(), update.SlotA, bytes.NewReader(bundle(t, "1.0", 1)), b.trusted()); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *box) trusted() manifest.Keys {
	k := manifest.Keys{}
	k.Add(testKey.Public().(ed25519.PublicKey))
	return k
}

// plug makes the disk appear as name (vda, nvme0n1) with a partition entry
// beside it, as sysfs shows them; and a disk without our table as sda.
func (b *box) plug(name string) {
	b.t.Helper()
	os.MkdirAll(filepath.Join(b.sys, name), 0o755)
	os.MkdirAll(filepath.Join(b.sys, name+"1"), 0o755)
	os.WriteFile(filepath.Join(b.sys, name+"1", "partition"), []byte("1\n"), 0o644)
	if err := os.Symlink(b.image, filepath.Join(b.dev, name)); err != nil {
		b.t.Fatal(err)
	}
}

func (b *box) loader(sys *fakeSystem, out *bytes.Buffer, opt Options) *Loader {
	if opt.Wait == 0 {
		opt.Wait = 50 * time.Millisecond
	}
	return New(Config{Out: out, System: sys, Cmdline: "console=ttyS0 panic=-1 cxlpool.loader.wait=1s", Options: opt,
		KeysDir: b.keys, ModulesFile: b.mod, ModulesDir: "/lib/modules/test", SysBlock: b.sys, DevDir: b.dev,
		WorkDir: filepath.Join(b.t.TempDir(), "work"), Uptime: func() time.Duration { return time.Second }, Poll: time.Millisecond})
}

func (b *box) state() update.State {
	b.t.Helper()
	d, err := update.Open(b.image)
	if err != nil {
		b.t.Fatal(err)
	}
	defer d.Close()
	st, err := d.State()
	if err != nil {
		b.t.Fatal(err)
	}
	return st
}

// apply installs version into the inactive slot as the pending trial and
// returns where that slot's bytes start.
func (b *box) apply(version string, sv uint64) (int64, update.State) {
	b.t.Helper()
	d, err := update.Open(b.image)
	if err != nil {
		b.t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Apply(context.Background(), bytes.NewReader(bundleOf(b.t, version, sv, !b.unsigned)), b.trusted(), update.ApplyOptions{}); err != nil {
		b.t.Fatal(err)
	}
	st, _ := d.State()
	p, err := disk.Find(d.Partitions(), disk.SlotBName)
	if err != nil {
		b.t.Fatal(err)
	}
	return p.Offset, st
}

func (b *box) flip(off int64) {
	b.t.Helper()
	f, err := os.OpenFile(b.image, os.O_RDWR, 0)
	if err != nil {
		b.t.Fatal(err)
	}
	defer f.Close()
	c := make([]byte, 1)
	f.ReadAt(c, off)
	c[0] ^= 0xff
	f.WriteAt(c, off)
}

func TestParseLockdown(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"[none] integrity confidentiality\n", "none"},
		{"none [integrity] confidentiality\n", "integrity"},
		{"none integrity [confidentiality]", "confidentiality"},
		{"", ""},
		{"none integrity", ""},
	} {
		if got := ParseLockdown(tc.in); got != tc.want {
			t.Errorf("ParseLockdown(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestFindDiskLoadsDriversUntilTheDiskAppears(t *testing.T) {
	b := newBox(t)
	// A disk without the box's partitions is passed over.
	os.MkdirAll(filepath.Join(b.sys, "sda"), 0o755)
	os.WriteFile(filepath.Join(b.dev, "sda"), make([]byte, 1<<20), 0o644)
	sys := &fakeSystem{appear: "virtio_blk.ko"}
	sys.onLoad = func() { b.plug("vdb") }
	var out bytes.Buffer
	got, err := b.loader(sys, &out, Options{}).FindDisk(context.Background())
	if err != nil {
		t.Fatalf("FindDisk: %v\n%s", err, out.String())
	}
	if want := filepath.Join(b.dev, "vdb"); got != want {
		t.Errorf("FindDisk: got %s, want %s", got, want)
	}
	// The NVMe group is not needed once the virtio disk is there.
	if diff := cmp.Diff([]string{"virtio.ko", "virtio_pci.ko", "virtio_blk.ko"}, sys.loaded); diff != "" {
		t.Errorf("modules loaded (-want +got):\n%s", diff)
	}
}

func TestFindDiskNoDisk(t *testing.T) {
	b := newBox(t)
	sys := &fakeSystem{}
	var out bytes.Buffer
	_, err := b.loader(sys, &out, Options{}).FindDisk(context.Background())
	if !errors.Is(err, ErrNoDisk) {
		t.Fatalf("FindDisk with no disk: got %v, want ErrNoDisk", err)
	}
	if diff := cmp.Diff([]string{"virtio.ko", "virtio_pci.ko", "virtio_blk.ko", "nvme-core.ko", "nvme.ko"}, sys.loaded); diff != "" {
		t.Errorf("modules loaded (-want +got):\n%s", diff)
	}
}

func TestCandidates(t *testing.T) {
	root := t.TempDir()
	sys, dev := filepath.Join(root, "sys"), filepath.Join(root, "dev")
	for _, n := range []string{"vda", "vda1", "nvme0n1", "nvme0n1p2", "loop0", "sr0", "dm-0", "sdb"} {
		os.MkdirAll(filepath.Join(sys, n), 0o755)
	}
	for _, n := range []string{"vda1", "nvme0n1p2"} {
		os.WriteFile(filepath.Join(sys, n, "partition"), nil, 0o644)
	}
	os.MkdirAll(dev, 0o755)
	for _, n := range []string{"sdc", "sdc1", "vda", "tty0"} {
		os.WriteFile(filepath.Join(dev, n), nil, 0o644)
	}
	want := []string{filepath.Join(dev, "nvme0n1"), filepath.Join(dev, "sdb"), filepath.Join(dev, "sdc"), filepath.Join(dev, "vda")}
	if diff := cmp.Diff(want, Candidates(sys, dev)); diff != "" {
		t.Errorf("Candidates (-want +got):\n%s", diff)
	}
}

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		// prepare changes the box before the boot.
		prepare   func(b *box, sys *fakeSystem)
		wantErr   error
		wantBoot  []string // kernel, initramfs, cmdline handed to kexec
		wantState func(st update.State) string
		wantOut   string
	}{
		{
			name:     "slot a",
			prepare:  func(b *box, sys *fakeSystem) {},
			wantBoot: []string{"kernel 1.0", "initramfs 1.0", "console=ttyS0 panic=-1 cxlpool.slot=a cxlpool.disk=DEV"},
			wantState: func(st update.State) string {
				return check(st.Active == update.SlotA && st.Trial == "", "a active, no trial")
			},
			wantOut: "kexec into slot a",
		},
		{
			name: "trial of b",
			prepare: func(b *box, sys *fakeSystem) {
				b.apply("2.0", 2)
			},
			wantBoot: []string{"kernel 2.0", "initramfs 2.0", "console=ttyS0 panic=-1 cxlpool.slot=b cxlpool.disk=DEV"},
			wantState: func(st update.State) string {
				return check(st.Active == update.SlotA && st.Trial == update.SlotB && st.TrialBooted, "a active, b's trial booted")
			},
			wantOut: "trial boot",
		},
		{
			name: "corrupt trial falls back to a",
			prepare: func(b *box, sys *fakeSystem) {
				off, st := b.apply("2.0", 2)
				b.flip(off + st.B.Size/2)
			},
			wantBoot: []string{"kernel 1.0", "initramfs 1.0", "console=ttyS0 panic=-1 cxlpool.slot=a cxlpool.disk=DEV"},
			wantState: func(st update.State) string {
				return check(st.Active == update.SlotA && st.Trial == "" && st.B.State == update.StateBad && st.MinSecurityVersion == 1,
					"a active, no trial, b bad, minimum security version 1")
			},
			wantOut: "does not match its manifest",
		},
		{
			name: "trial kernel that does not load falls back to a",
			prepare: func(b *box, sys *fakeSystem) {
				b.apply("2.0", 2)
				sys.failFor = "kernel 2.0"
			},
			wantBoot: []string{"kernel 1.0", "initramfs 1.0", "console=ttyS0 panic=-1 cxlpool.slot=a cxlpool.disk=DEV"},
			wantState: func(st update.State) string {
				return check(st.Active == update.SlotA && st.Trial == "" && st.B.State == update.StateBad, "a active, no trial, b bad")
			},
			wantOut: "trial of slot b was not committed",
		},
		{
			name: "locked down: the signed kernel through kexec_file_load",
			prepare: func(b *box, sys *fakeSystem) {
				sys.lockdown = "integrity"
			},
			wantBoot: []string{"signed kernel 1.0", "initramfs 1.0", "console=ttyS0 panic=-1 cxlpool.slot=a cxlpool.disk=DEV"},
			wantState: func(st update.State) string {
				return check(st.Active == update.SlotA && st.Trial == "", "a active, no trial")
			},
			wantOut: "kexec_file_load of the signed kernel, lockdown integrity",
		},
		{
			name: "locked down: a trial kernel whose signature is refused falls back to a",
			prepare: func(b *box, sys *fakeSystem) {
				sys.lockdown = "integrity"
				b.apply("2.0", 2)
				sys.failFor = "signed kernel 2.0"
			},
			wantBoot: []string{"signed kernel 1.0", "initramfs 1.0", "console=ttyS0 panic=-1 cxlpool.slot=a cxlpool.disk=DEV"},
			wantState: func(st update.State) string {
				return check(st.Active == update.SlotA && st.Trial == "" && st.B.State == update.StateBad, "a active, no trial, b bad")
			},
			wantOut: "refused the signed kernel",
		},
		{
			name: "locked down: a trial bundle without a signed kernel falls back to a",
			prepare: func(b *box, sys *fakeSystem) {
				sys.lockdown = "confidentiality"
				b.unsigned = true
				b.apply("2.0", 2)
			},
			wantBoot: []string{"signed kernel 1.0", "initramfs 1.0", "console=ttyS0 panic=-1 cxlpool.slot=a cxlpool.disk=DEV"},
			wantState: func(st update.State) string {
				return check(st.Active == update.SlotA && st.Trial == "" && st.B.State == update.StateBad, "a active, no trial, b bad")
			},
			wantOut: "the bundle has no signed kernel (vmlinuz.efi)",
		},
		{
			name: "lockdown none: kexec_load of the ELF as before",
			prepare: func(b *box, sys *fakeSystem) {
				sys.lockdown = "none"
			},
			wantBoot: []string{"kernel 1.0", "initramfs 1.0", "console=ttyS0 panic=-1 cxlpool.slot=a cxlpool.disk=DEV"},
			wantState: func(st update.State) string {
				return check(st.Active == update.SlotA, "a active")
			},
			wantOut: "(loaded in",
		},
		{
			name: "nothing bootable",
			prepare: func(b *box, sys *fakeSystem) {
				d, _ := update.Open(b.image)
				p, _ := disk.Find(d.Partitions(), disk.SlotAName)
				st, _ := d.State()
				d.Close()
				b.flip(p.Offset + st.A.Size/2)
			},
			wantErr: update.ErrNoBootable,
			wantState: func(st update.State) string {
				return check(st.A.State == update.StateBad, "a bad")
			},
			wantOut: "slot a: slot a: sha256",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBox(t)
			sys := &fakeSystem{}
			tc.prepare(b, sys)
			b.plug("vda")
			var out bytes.Buffer
			err := b.loader(sys, &out, Options{}).Run(context.Background())
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Run: got error %v, want %v\n%s", err, tc.wantErr, out.String())
			}
			var want []string
			if tc.wantBoot != nil {
				want = append(tc.wantBoot[:2:2], strings.ReplaceAll(tc.wantBoot[2], "DEV", filepath.Join(b.dev, "vda")))
			}
			if diff := cmp.Diff(want, sys.kexec); diff != "" {
				t.Errorf("kexec (-want +got):\n%s", diff)
			}
			if wantReboots := len(want) / 3; sys.reboots != wantReboots {
				t.Errorf("kexec reboots: got %d, want %d", sys.reboots, wantReboots)
			}
			if msg := tc.wantState(b.state()); msg != "" {
				t.Errorf("boot control %+v: want %s", b.state(), msg)
			}
			if !strings.Contains(out.String(), tc.wantOut) {
				t.Errorf("console:\n%s\nwant a line with %q", out.String(), tc.wantOut)
			}
		})
	}
}

func check(ok bool, want string) string {
	if ok {
		return ""
	}
	return want
}

// FuzzCmdline: the parsers never panic, and whatever the loader's own
// command line holds, the box's ends with exactly the slot and disk the
// loader chose.
func FuzzCmdline(f *testing.F) {
	for _, s := range []string{"console=ttyS0 panic=-1", `a uroot.uinitargs="-v -x" b`, `x" cxlpool.slot=b`, "cxlpool.loader.wait=1s cxlpool.loader.disk=/dev/sda", "\"\"\t\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, own string) {
		_, _ = ParseOptions(own)
		words := SplitCmdline(NextCmdline(own, "a", "/dev/vda"))
		n := len(words)
		if n < 2 || words[n-2] != "cxlpool.slot=a" || words[n-1] != "cxlpool.disk=/dev/vda" {
			t.Fatalf("NextCmdline(%q) splits into %q, want it to end with the slot and disk", own, words)
		}
		for _, w := range words[:n-2] {
			if strings.HasPrefix(w, "cxlpool.slot=") || strings.HasPrefix(w, "cxlpool.loader.") {
				t.Fatalf("NextCmdline(%q) keeps %q", own, w)
			}
		}
	})
}

// TestWithoutEFI: boot_params from a UEFI boot lose efi_info and gain
// the ACPI root pointer from the EFI system table; a BIOS/PVH boot's are
// left alone.
func TestWithoutEFI(t *testing.T) {
	rsdp := ParseEFISystab("SMBIOS=0x7f9a0000\nACPI=0x7f77e000\nACPI20=0x7f77e014\n")
	if got, want := rsdp, uint64(0x7f77e014); got != want {
		t.Errorf("ParseEFISystab: got %#x, want %#x", got, want)
	}
	if got := ParseEFISystab("ACPI=0x10\n"); got != 0x10 {
		t.Errorf("ParseEFISystab without ACPI20: got %#x, want 0x10", got)
	}
	if got := ParseEFISystab(""); got != 0 {
		t.Errorf("ParseEFISystab(\"\"): got %#x, want 0", got)
	}

	b := make([]byte, bpSize)
	copy(b[bpEFIInfo:], "EL64")
	b[bpEFIInfo+8] = 0x42
	if !WithoutEFI(b, rsdp) {
		t.Fatal("WithoutEFI of a UEFI boot's boot_params: got false, want true")
	}
	want := make([]byte, bpSize)
	binary.LittleEndian.PutUint64(want[bpACPIRSDP:], rsdp)
	if diff := cmp.Diff(want, b); diff != "" {
		t.Errorf("boot_params (-want +got):\n%s", diff)
	}
	bios := make([]byte, bpSize)
	if WithoutEFI(bios, rsdp) || !cmp.Equal(bios, make([]byte, bpSize)) {
		t.Errorf("WithoutEFI of a BIOS boot's boot_params changed them")
	}
}
