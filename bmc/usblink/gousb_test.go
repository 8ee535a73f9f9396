//go:build usb && cgo

package usblink

import (
	"errors"
	"testing"
)

// TestOpenNoSuchBridge: with libusb linked in (make test-usb), Open looks
// for the bridge and fails with the reason (no such device, or libusb
// unable to start on this machine), never ErrNoUSB and never a panic.
func TestOpenNoSuchBridge(t *testing.T) {
	p, err := Open(Config{VID: 0xffff, PID: 0xfffe, Serial: "cxlpool-test-no-such-bridge"})
	if p != nil {
		p.Close()
		t.Fatal("Open found a bridge that does not exist")
	}
	if err == nil || errors.Is(err, ErrNoUSB) {
		t.Fatalf("Open: got %v, want the libusb reason it found no bridge", err)
	}
	t.Logf("Open: %v", err)
}
