package vmtest

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"cxlpool/image/update"
)

// usbDevice is the device address the box is configured with: QEMU's
// usb-serial emulates an FTDI FT232 with these IDs.
const usbDevice = "usb:0403:6001"

// TestUSB boots the image with the device link on an emulated USB serial
// adapter (QEMU's usb-serial, an FTDI FT232 on an xHCI controller, its
// chardev connected to the cxlsim on the host) instead of virtio-serial,
// the box configured on the kernel command line (cxlpool.device=usb:…).
// In the guest boxinit loads the USB modules early and waits for the
// bridge, ftdi_sio binds it, and the daemon (built with cgo and -tags usb) opens it
// through libusb (bmc/usblink, gousb), detaching ftdi_sio; the test then
// checks the 8 heads and a 256 MiB grant to Host0 over Redfish.
func TestUSB(t *testing.T) {
	e := setup(t)
	waitFor := func(vm *VM, re string) []string {
		t.Helper()
		ctx, cancel := context.WithTimeout(e.ctx, 3*time.Minute)
		defer cancel()
		m, _, err := vm.WaitConsole(ctx, regexp.MustCompile(re), 0)
		if err != nil {
			t.Fatalf("%v; console:\n%s", err, tail(vm.Console(), 3000))
		}
		return m
	}

	// The bare kernel+u-root boot on the same machine, for the ratio.
	bareDisk := filepath.Join(e.dir, "bare.img")
	if err := os.WriteFile(bareDisk, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	vm, err := Start(Options{Dir: e.dir, Kernel: filepath.Join(e.img, "vmlinux"), Initrd: filepath.Join(e.img, update.PartInitramfs),
		Disk: bareDisk, Append: "cxlpool.bare=1", DeviceAddr: e.simAddr, DeviceUSB: true, APIPort: e.port})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(vm, `bare boot at`)
	bare := time.Since(vm.Started)
	vm.Kill()

	disk := filepath.Join(e.dir, "disk.img")
	copyFile(t, filepath.Join(e.img, "disk.img"), disk)
	vm = e.bootUSB(disk, "usb")
	apiUp := e.waitAPI(vm)
	t.Logf("boot to shell (bare kernel+u-root): %v; first boot to API 200 over the USB link: %v; ratio %.2f",
		bare.Round(10*time.Millisecond), apiUp.Round(10*time.Millisecond), float64(apiUp)/float64(bare))
	for _, l := range regexp.MustCompile(`\[ *[0-9.]+\] (cxlpool: (usb:|device link)[^\n]*|[^\n]*usblink[^\n]*)`).FindAllString(vm.Console(), -1) {
		t.Logf("guest: %s", strings.TrimSpace(l))
	}
	m := waitFor(vm, passwordRE.String())
	c := e.client(m[1])

	t.Run("link", func(t *testing.T) {
		// boxinit found the bridge with ftdi_sio bound; the daemon claimed
		// it through libusb, detaching ftdi_sio.
		waitFor(vm, `cxlpool: device link: USB 0403:6001 at \S+ after \S+ \(kernel driver ftdi_sio;`)
		m := waitFor(vm, `msg="usblink: bridge open"[^\n]* usb=0403:6001 interface=(\S+)[^\n]* detached=(\S*)`)
		if m[2] != "ftdi_sio" {
			t.Errorf("daemon's USB open: detached %q, want ftdi_sio", m[2])
		}
		waitFor(vm, `cxlpool: starting /bin/cxlpoold --device `+regexp.QuoteMeta(usbDevice)+` `)
		if strings.Contains(vm.Console(), "cxlpoold exited") {
			t.Errorf("the daemon exited at least once: %s", tail(vm.Console(), 3000))
		}
	})

	t.Run("heads", func(t *testing.T) {
		sys, _ := c.must(http.MethodGet, systemsURI, nil, http.StatusOK)
		if got := sys["Members@odata.count"]; got != float64(8) {
			t.Errorf("Systems: got %v members, want 8 (one per head)", got)
		}
		dev, _ := c.must(http.MethodGet, dcdURI, nil, http.StatusOK)
		cxl, _ := dev["CXLDevice"].(map[string]any)
		if got := cxl["MaxNumberLogicalDevices"]; got != float64(8) {
			t.Errorf("DCD MaxNumberLogicalDevices: got %v, want 8", got)
		}
	})

	t.Run("grant", func(t *testing.T) {
		grant := grantHost0(t, c)
		conn, _ := c.must(http.MethodGet, grant, nil, http.StatusOK)
		t.Logf("Host0 granted 256 MiB over the USB link: %s (%v)", grant, conn["Name"])
	})
}

// bootUSB is boot with the device link on the emulated USB serial
// adapter and the box told so on its command line.
func (e *env) bootUSB(disk, name string) *VM {
	e.t.Helper()
	d, err := update.Open(disk)
	if err != nil {
		e.t.Fatal(err)
	}
	dir := filepath.Join(e.dir, name)
	os.MkdirAll(dir, 0o755)
	b, err := d.SelectBoot(e.keys, dir)
	d.Close()
	if err != nil {
		e.t.Fatalf("%s: boot loader: %v", name, err)
	}
	log, _ := os.Create(filepath.Join(e.dir, name+".console"))
	vm, err := Start(Options{Dir: e.dir, Kernel: b.Kernel, Initrd: b.Initramfs, Disk: disk,
		Append: "cxlpool.slot=" + b.Slot + " cxlpool.device=" + usbDevice, DeviceAddr: e.simAddr, DeviceUSB: true,
		APIPort: e.port, Log: log})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		if !vm.Exited() {
			vm.Kill()
		}
		log.Close()
	})
	return vm
}

// grantHost0 (TestVM and TestUSB) creates a 256 MiB chunk, connects it to Host0, follows the
// task and returns the Connection's URI.
func grantHost0(t *testing.T, c *client) string {
	t.Helper()
	_, h := c.must(http.MethodPost, chunksURI, map[string]any{"MemoryChunkSizeMiB": 256}, http.StatusCreated)
	chunk := h.Get("Location")
	if u, err := urlPath(chunk); err == nil {
		chunk = u
	}
	body := map[string]any{
		"ConnectionType":  "Memory",
		"MemoryChunkInfo": []any{map[string]any{"MemoryChunk": map[string]any{"@odata.id": chunk}}},
		"Links":           map[string]any{"InitiatorEndpoints": []any{map[string]any{"@odata.id": endpointsURI + "/Host0"}}},
	}
	_, h = c.must(http.MethodPost, connectionsURI, body, http.StatusAccepted, http.StatusCreated)
	mon, _ := urlPath(h.Get("Location"))
	for i := 0; ; i++ {
		st, res, h, err := c.do(http.MethodGet, mon, nil)
		if err != nil {
			t.Fatal(err)
		}
		if st == http.StatusAccepted && i < 600 {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if st != http.StatusCreated && st != http.StatusOK {
			t.Fatalf("grant task: status %d: %v", st, res)
		}
		grant, _ := urlPath(h.Get("Location"))
		if id, ok := res["@odata.id"].(string); ok && strings.HasPrefix(id, connectionsURI+"/") {
			grant = id
		}
		if !strings.HasPrefix(grant, connectionsURI+"/") {
			t.Fatalf("grant: no Connection URI (got %q)", grant)
		}
		return grant
	}
}
