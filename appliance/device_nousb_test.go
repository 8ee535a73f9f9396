//go:build !usb || !cgo

package appliance_test

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cxlpool/appliance"
	"cxlpool/bmc/usblink"
)

// TestUSBDeviceNeedsUSBBuild: the default build (no usb tag) refuses a
// usb: device at start with usblink.ErrNoUSB, whose text says which build
// has USB links, and leaves the data directory without a ledger.
func TestUSBDeviceNeedsUSBBuild(t *testing.T) {
	data := t.TempDir()
	_, err := appliance.Open(context.Background(), appliance.Config{Device: "usb:0403:6001", DataDir: data, Logger: slog.New(slog.DiscardHandler)})
	if !errors.Is(err, usblink.ErrNoUSB) {
		t.Fatalf("Open(usb:0403:6001) = %v, want usblink.ErrNoUSB", err)
	}
	for _, want := range []string{"usb:0403:6001", "-tags usb"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(data, appliance.LedgerFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ledger after the refused start: %v, want none", err)
	}
}
