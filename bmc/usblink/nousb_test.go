//go:build !usb || !cgo

package usblink

import (
	"errors"
	"strings"
	"testing"
)

// TestOpenWithoutUSBBuild: a build without the usb tag refuses every
// bridge with ErrNoUSB, whose text names the build that has USB links.
func TestOpenWithoutUSBBuild(t *testing.T) {
	p, err := Open(Config{VID: DefaultVID, PID: DefaultPID})
	if p != nil || !errors.Is(err, ErrNoUSB) {
		t.Fatalf("Open: got %v, %v, want nil, ErrNoUSB", p, err)
	}
	if !strings.Contains(err.Error(), "-tags usb") {
		t.Errorf("ErrNoUSB = %q, want it to name the build tag", err)
	}
}
