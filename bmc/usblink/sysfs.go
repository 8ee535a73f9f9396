package usblink

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// SysfsUSB is where Linux lists USB devices and interfaces.
const SysfsUSB = "/sys/bus/usb/devices"

// InterfaceName is the kernel's name of a USB interface: bus, the port
// path from the root hub, configuration and interface number, as in
// "1-1.4:1.0" (bus 1, port 4 of the hub on root port 1).
func InterfaceName(bus int, path []int, config, intf int) string {
	ports := make([]string, len(path))
	for i, p := range path {
		ports[i] = strconv.Itoa(p)
	}
	return strconv.Itoa(bus) + "-" + strings.Join(ports, ".") + ":" + strconv.Itoa(config) + "." + strconv.Itoa(intf)
}

// KernelDriver names the kernel driver bound to a USB interface (under
// root, normally SysfsUSB): "ftdi_sio" when the kernel owns the bridge,
// "usbfs" once a libusb program has claimed it, "" when none is.
func KernelDriver(root, intf string) string {
	target, err := os.Readlink(filepath.Join(root, intf, "driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(target)
}
