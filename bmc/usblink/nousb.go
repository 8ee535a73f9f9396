//go:build !usb || !cgo

package usblink

// Open fails in builds without the usb tag (or without cgo): libusb is
// not linked in. The error says which build has it.
func Open(Config) (*Port, error) { return nil, ErrNoUSB }
