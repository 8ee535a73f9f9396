package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOnImage: only a kernel command line with cxlpool.slot= means the
// daemon runs from the box image (and may offer image updates).
func TestOnImage(t *testing.T) {
	tests := []struct {
		cmdline string
		want    bool
	}{
		{"console=ttyS0 cxlpool.slot=a quiet\n", true},
		{"cxlpool.slot=b", true},
		{"console=ttyS0 quiet\n", false},
		{"console=ttyS0 xcxlpool.slot=a", false},
		{"", false},
	}
	for _, tt := range tests {
		p := filepath.Join(t.TempDir(), "cmdline")
		if err := os.WriteFile(p, []byte(tt.cmdline), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := onImage(p); got != tt.want {
			t.Errorf("onImage(%q) = %v, want %v", tt.cmdline, got, tt.want)
		}
	}
	if onImage(filepath.Join(t.TempDir(), "missing")) {
		t.Error("onImage without a command line file = true, want false")
	}
}
