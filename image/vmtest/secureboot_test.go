package vmtest

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"cxlpool/image/build"
	"cxlpool/image/manifest"
	"cxlpool/image/update"
)

// OVMF built for Secure Boot (it needs SMM) and a variable store with
// Debian's snakeoil test key enrolled as PK, KEK and db: Secure Boot is
// on, and the image's development key (image/build.DevSecureBoot) is
// trusted.
const (
	ovmfSecureCode   = "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd"
	ovmfSnakeoilVars = "/usr/share/OVMF/OVMF_VARS_4M.snakeoil.fd"
)

// secureOVMF is OVMF with Secure Boot on and the snakeoil key trusted.
var secureOVMF = firmware{code: ovmfSecureCode, vars: ovmfSnakeoilVars, secure: true}

// TestSecureBoot boots the disk image with UEFI Secure Boot on: the
// firmware verifies the signed loader UKI, the loader's kernel locks
// itself down, the loader hands the slot's signed kernel to
// kexec_file_load and the daemon answers with the image's version. Then
// a trial of a slot whose kernel is not signed (its bundle signed as any
// other, so the update gate passes it): the loader's kernel refuses that
// kernel, the loader marks the slot bad and boots the other. It runs with
// CXLPOOL_VMTEST_UEFI=1, as TestUEFI.
func TestSecureBoot(t *testing.T) {
	if os.Getenv("CXLPOOL_VMTEST_UEFI") != "1" {
		t.Skip("set CXLPOOL_VMTEST_UEFI=1 (make vmtest-uefi) to boot through OVMF")
	}
	for _, f := range []string{ovmfSecureCode, ovmfSnakeoilVars, build.DevSecureBootCert} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("OVMF's Secure Boot files are not installed (apt-get install ovmf): %v", err)
		}
	}
	for _, tool := range []string{"sbverify", "sbattach"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (apt-get install sbsigntool)", tool)
		}
	}
	e := setup(t)
	if err := exec.Command("sbverify", "--cert", build.DevSecureBootCert, filepath.Join(e.img, build.LoaderEFI)).Run(); err != nil {
		t.Skipf("the image's %s is not signed with the development key (%v): built without it", build.LoaderEFI, err)
	}
	m := e.imageManifest(t)
	if _, ok := m.Part(update.PartSignedKernel); !ok {
		t.Skipf("the image's bundle has no %s (built before the Secure Boot path)", update.PartSignedKernel)
	}
	diskPath := filepath.Join(e.dir, "disk.img")
	copyFile(t, filepath.Join(e.img, "disk.img"), diskPath)
	waitFor := func(vm *VM, re *regexp.Regexp) []string {
		t.Helper()
		return e.waitConsole(t, vm, re, 4*time.Minute)
	}
	state := func() update.State { return diskState(t, diskPath) }

	vm := e.bootUEFI(t, diskPath, "secure1", secureOVMF)
	waitFor(vm, regexp.MustCompile(`Secure boot enabled`))
	waitFor(vm, regexp.MustCompile(`boxloader: kexec into slot a at [^\n]*kexec_file_load of the signed kernel, lockdown integrity`))
	e.waitAPI(vm)
	pw := waitFor(vm, passwordRE)[1]
	var mgr map[string]any
	for deadline := time.Now().Add(time.Minute); ; {
		st, got, _, err := e.client(pw).doContext(e.ctx, http.MethodGet, "/redfish/v1/Managers/FM", nil)
		if err == nil && st == http.StatusOK {
			mgr = got
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Secure Boot: GET Managers/FM: status %d, %v; console:\n%s", st, err, tail(vm.Console(), 6000))
		}
		time.Sleep(time.Second) // a poll interval, not a wait for an event
	}
	if got := mgr["FirmwareVersion"]; got != m.Version {
		t.Errorf("Secure Boot: Manager FirmwareVersion: got %v, want %s", got, m.Version)
	}
	vm.Kill()

	// A trial of slot B whose kernel carries no signature.
	unsigned := filepath.Join(e.dir, "vmlinuz-unsigned.efi")
	copyFile(t, "/boot/vmlinuz-"+m.Kernel, unsigned)
	if b, err := exec.Command("sbattach", "--remove", unsigned).CombinedOutput(); err != nil {
		t.Fatalf("sbattach --remove: %v: %s", err, b)
	}
	bundle := e.sign(t, "0.2.0-sbtest", 2, filepath.Join(e.img, update.PartInitramfs),
		manifest.BundlePart{Name: update.PartSignedKernel, Path: unsigned})
	d, err := update.Open(diskPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Apply(e.ctx, bytes.NewReader(bundle), e.keys, update.ApplyOptions{}); err != nil {
		d.Close()
		t.Fatal(err)
	}
	d.Close()
	vm = e.bootUEFI(t, diskPath, "secure-unsigned", secureOVMF)
	waitFor(vm, regexp.MustCompile(`boxloader: kexec load of slot b: [^\n]*refused the signed kernel`))
	if got := waitFor(vm, kexecRE)[1]; got != update.SlotA {
		t.Fatalf("unsigned trial: the loader chose slot %s, want a", got)
	}
	e.waitAPI(vm)
	if st := state(); st.Active != update.SlotA || st.Trial != "" || st.B.State != update.StateBad {
		t.Errorf("after the unsigned trial: boot control %+v, want a active, no trial, b bad", st)
	}
	t.Logf("Secure Boot: booted slot a through kexec_file_load; the unsigned trial of slot b was refused and marked bad (%s)", state().B.Error)
	vm.Kill()
}
