// Package usblink carries the device link's DSP0253 byte stream over an
// FTDI-compatible USB serial bridge (FT232-class, VID 0403 PID 6001 by
// default, as QEMU's usb-serial emulates), driven from user space with
// libusb through github.com/google/gousb (shared/specs/ftdi-usb.md).
//
// Only Open, which needs libusb, is behind the usb build tag (and cgo):
// the default build, and so go build, go test -race and make test on a
// machine with Go and gcc alone, leaves gousb and libusb out. The package
// still builds then (the protocol helpers and Port remain, so go vet and
// the tests run everywhere), but Open answers ErrNoUSB, which names the
// build that has USB links: -tags usb with cgo, as make image builds the
// box's daemon and make test-usb tests it. Port does the FTDI part:
// the vendor control requests that set the chip up (reset, baud divisor,
// 8N1, flow control, DTR/RTS, latency timer), stripping the two modem
// status bytes that head every wMaxPacketSize chunk of a bulk IN
// transfer, and presenting the data as an io.ReadWriteCloser that
// serial.NewLink frames MCTP packets on.
//
// Open logs the bridge it opened (its sysfs interface name, e.g. 1-1:1.0)
// and the kernel driver it detached (ftdi_sio), read from
// /sys/bus/usb/devices before the claim; the box's image is built with
// the usb tag and cgo for it (image/README.md, "The USB device link").
//
// Building with -tags usb needs libusb-1.0 headers (Debian:
// libusb-1.0-0-dev, pkg-config) and, at run time, write access to
// /dev/bus/usb/BBB/DDD.
package usblink
