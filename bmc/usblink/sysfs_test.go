package usblink

import (
	"os"
	"path/filepath"
	"testing"
)

func TestInterfaceName(t *testing.T) {
	tests := []struct {
		bus          int
		path         []int
		config, intf int
		want         string
	}{
		{1, []int{1}, 1, 0, "1-1:1.0"},
		{3, []int{2, 4}, 1, 1, "3-2.4:1.1"},
	}
	for _, tt := range tests {
		if got := InterfaceName(tt.bus, tt.path, tt.config, tt.intf); got != tt.want {
			t.Errorf("InterfaceName(%d, %v, %d, %d): got %q, want %q", tt.bus, tt.path, tt.config, tt.intf, got, tt.want)
		}
	}
}

func TestKernelDriver(t *testing.T) {
	root := t.TempDir()
	drv := filepath.Join(root, "drivers", "ftdi_sio")
	for _, d := range []string{drv, filepath.Join(root, "1-1:1.0"), filepath.Join(root, "2-1:1.0")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(drv, filepath.Join(root, "1-1:1.0", "driver")); err != nil {
		t.Fatal(err)
	}
	for intf, want := range map[string]string{"1-1:1.0": "ftdi_sio", "2-1:1.0": "", "9-9:1.0": ""} {
		if got := KernelDriver(root, intf); got != want {
			t.Errorf("KernelDriver(%q): got %q, want %q", intf, got, want)
		}
	}
}
