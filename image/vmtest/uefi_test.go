package vmtest

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"cxlpool/image/disk"
	"cxlpool/image/update"
)

// OVMF's files in Debian's ovmf package (2 MiB flash: the code and the
// variable store template; the 4M ones are the same firmware, larger).
const (
	ovmfCode = "/usr/share/OVMF/OVMF_CODE.fd"
	ovmfVars = "/usr/share/OVMF/OVMF_VARS.fd"
)

// firmware is a UEFI firmware build and the variable store its boots
// start from (a fresh copy each: no boot entries).
type firmware struct {
	code, vars string
	// secure: OVMF's Secure Boot builds need SMM and a variable store
	// only SMM writes.
	secure bool
}

// plainOVMF is OVMF without Secure Boot.
var plainOVMF = firmware{code: ovmfCode, vars: ovmfVars}

// bootUEFI starts QEMU with fw and a fresh copy of its variables: the
// firmware finds the disk's EFI system partition and runs
// \EFI\BOOT\BOOTX64.EFI, the loader stage.
func (e *env) bootUEFI(t *testing.T, diskPath, name string, fw firmware) *VM {
	t.Helper()
	vars := filepath.Join(e.dir, name+".OVMF_VARS.fd")
	copyFile(t, fw.vars, vars)
	log, _ := os.Create(filepath.Join(e.dir, name+".console"))
	vm, err := Start(Options{Dir: e.dir, Disk: diskPath, UEFICode: fw.code, UEFIVars: vars, SecureBoot: fw.secure,
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

// TestUEFI boots the disk image through UEFI firmware (OVMF) with no
// boot entries: the firmware runs the loader stage from the ESP, which
// picks slot A and kexecs into it; the daemon answers with the image's
// version. It then compares a restart booted directly (the host-side
// loader, as TestVM) with one through UEFI. It runs only with
// CXLPOOL_VMTEST_UEFI=1 (make vmtest-uefi), to keep CI's VM stage lean.
func TestUEFI(t *testing.T) {
	if os.Getenv("CXLPOOL_VMTEST_UEFI") != "1" {
		t.Skip("set CXLPOOL_VMTEST_UEFI=1 (make vmtest-uefi) to boot through OVMF")
	}
	for _, f := range []string{ovmfCode, ovmfVars} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("OVMF not installed (apt-get install ovmf): %v", err)
		}
	}
	e := setup(t)
	version := e.imageManifest(t).Version
	diskPath := filepath.Join(e.dir, "disk.img")
	copyFile(t, filepath.Join(e.img, "disk.img"), diskPath)
	if d, err := update.Open(diskPath); err != nil {
		t.Fatal(err)
	} else {
		_, err := disk.Find(d.Partitions(), disk.ESPName)
		d.Close()
		if err != nil {
			t.Skipf("image %s has no EFI system partition (built before it): %v", e.img, err)
		}
	}
	waitFor := func(vm *VM, re *regexp.Regexp) []string {
		t.Helper()
		return e.waitConsole(t, vm, re, 3*time.Minute)
	}
	kexec := func(vm *VM) (string, time.Duration) {
		t.Helper()
		m := waitFor(vm, kexecRE)
		return m[1], time.Since(vm.Started)
	}

	// First boot through UEFI: the first start (the daemon's first-start
	// work is not in the comparison below).
	vm := e.bootUEFI(t, diskPath, "uefi1", plainOVMF)
	if slot, _ := kexec(vm); slot != update.SlotA {
		t.Fatalf("UEFI boot: the loader chose slot %s, want a", slot)
	}
	e.waitAPI(vm)
	// The loader ran as the UKI: its command line is the one built in.
	if !strings.Contains(vm.Console(), "console=ttyS0,115200") {
		t.Errorf("UEFI boot: the loader's kernel did not show the UKI's command line; console:\n%s", tail(vm.Console(), 4000))
	}
	pw := waitFor(vm, passwordRE)[1]
	// The daemon may restart once the data partition's settings are read
	// (boxinit); ask again within a bounded deadline.
	var mgr map[string]any
	for deadline := time.Now().Add(time.Minute); ; {
		st, m, _, err := e.client(pw).doContext(e.ctx, http.MethodGet, "/redfish/v1/Managers/FM", nil)
		if err == nil && st == http.StatusOK {
			mgr = m
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("UEFI boot: GET Managers/FM: status %d, %v; console:\n%s", st, err, tail(vm.Console(), 6000))
		}
		t.Logf("UEFI boot: GET Managers/FM: status %d, %v; again", st, err)
		time.Sleep(time.Second) // a poll interval, not a wait for an event
	}
	if got := mgr["FirmwareVersion"]; got != version {
		t.Errorf("UEFI boot: Manager FirmwareVersion: got %v, want %s", got, version)
	}
	vm.Kill()

	// The same restart, directly and through UEFI.
	vmD, b := e.boot(diskPath, "direct")
	if b.Slot != update.SlotA {
		t.Fatalf("direct boot: slot %s, want a", b.Slot)
	}
	direct := e.waitAPI(vmD)
	vmD.Kill()
	vm = e.bootUEFI(t, diskPath, "uefi2", plainOVMF)
	_, handover := kexec(vm)
	viaUEFI := e.waitAPI(vm)
	vm.Kill()
	t.Logf("boot to API 200: direct %v, through OVMF and the loader stage %v: UEFI adds %v (the loader hands over %v after QEMU starts)",
		direct.Round(10*time.Millisecond), viaUEFI.Round(10*time.Millisecond), (viaUEFI - direct).Round(10*time.Millisecond),
		handover.Round(10*time.Millisecond))
}
