//go:build !cgo

package usblink

// Open fails in builds without cgo: libusb is not linked in.
func Open(Config) (*Port, error) { return nil, ErrNoUSB }
