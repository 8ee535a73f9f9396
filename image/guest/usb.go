package guest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// USBModule reports whether a module belongs to the USB serial device
// link (host controller, USB core, usbserial, ftdi_sio). They load in the
// late stage unless the device link is a USB bridge (device = usb:…),
// when the daemon cannot start without them.
func USBModule(name string) bool {
	switch name {
	case "usb_common", "usbcore", "xhci_hcd", "xhci_pci", "xhci_pci_renesas", "ehci_hcd", "ehci_pci", "usbserial", "ftdi_sio":
		return true
	}
	return false
}

// FindUSBDevice returns the sysfs name (e.g. "1-1") of the first USB
// device under root (normally /sys/bus/usb/devices) with vendor and
// product IDs vid:pid, or "" when none is there (yet).
func FindUSBDevice(root string, vid, pid uint16) string {
	ids, _ := filepath.Glob(filepath.Join(root, "*", "idVendor"))
	for _, p := range ids {
		dir := filepath.Dir(p)
		if readHex(p) == int(vid) && readHex(filepath.Join(dir, "idProduct")) == int(pid) {
			return filepath.Base(dir)
		}
	}
	return ""
}

// readHex reads a sysfs hexadecimal ID; -1 when it cannot.
func readHex(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 16, 16)
	if err != nil {
		return -1
	}
	return int(n)
}
