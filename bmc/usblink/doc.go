// Package usblink carries the device link's DSP0253 byte stream over an
// FTDI-compatible USB serial bridge (FT232-class, VID 0403 PID 6001 by
// default, as QEMU's usb-serial emulates), driven from user space with
// libusb through github.com/google/gousb (shared/specs/ftdi-usb.md).
//
// Only Open, which needs libusb, is behind the cgo build constraint; with
// CGO_ENABLED=0 the package still builds (the protocol helpers and Port
// remain, so go vet and the tests run everywhere) but offers no way to
// open real hardware, and nothing links libusb. Port does the FTDI part:
// the vendor control requests that set the chip up (reset, baud divisor,
// 8N1, flow control, DTR/RTS, latency timer), stripping the two modem
// status bytes that head every wMaxPacketSize chunk of a bulk IN
// transfer, and presenting the data as an io.ReadWriteCloser that
// serial.NewLink frames MCTP packets on.
//
// Open logs the bridge it opened (its sysfs interface name, e.g. 1-1:1.0)
// and the kernel driver it detached (ftdi_sio), read from
// /sys/bus/usb/devices before the claim; the box's image is built with
// cgo for it (image/README.md, "The USB device link").
//
// Building Open needs libusb-1.0 headers (Debian: libusb-1.0-0-dev,
// pkg-config) and, at run time, write access to /dev/bus/usb/BBB/DDD.
package usblink
