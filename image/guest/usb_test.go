package guest

import (
	"os"
	"path/filepath"
	"testing"
)

func TestUSBModule(t *testing.T) {
	for name, want := range map[string]bool{"usbcore": true, "xhci_pci": true, "ftdi_sio": true, "usbserial": true,
		"virtio_console": false, "cxl_pci": false, "e1000e": false} {
		if got := USBModule(name); got != want {
			t.Errorf("USBModule(%q): got %v, want %v", name, got, want)
		}
	}
}

func TestFindUSBDevice(t *testing.T) {
	root := t.TempDir()
	for dev, ids := range map[string][2]string{"usb1": {"1d6b", "0002"}, "1-1": {"0403", "6001"}, "1-2": {"0403", "6010"}} {
		d := filepath.Join(root, dev)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(d, "idVendor"), []byte(ids[0]+"\n"), 0o644)
		os.WriteFile(filepath.Join(d, "idProduct"), []byte(ids[1]+"\n"), 0o644)
	}
	tests := []struct {
		vid, pid uint16
		want     string
	}{
		{0x0403, 0x6001, "1-1"},
		{0x0403, 0x6010, "1-2"},
		{0x0403, 0x6015, ""},
	}
	for _, tt := range tests {
		if got := FindUSBDevice(root, tt.vid, tt.pid); got != tt.want {
			t.Errorf("FindUSBDevice(%04x:%04x): got %q, want %q", tt.vid, tt.pid, got, tt.want)
		}
	}
}
