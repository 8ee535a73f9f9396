package bytesize

import (
	"flag"
	"io"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{"1TiB", 1 << 40, false},
		{"256MiB", 256 << 20, false},
		{"64G", 64 << 30, false},
		{"4096", 4096, false},
		{"4096B", 4096, false},
		{" 2 gib ", 2 << 30, false},
		{"0", 0, false},
		{"", 0, true},
		{"MiB", 0, true},
		{"-1", 0, true},
		{"1.5GiB", 0, true},
		{"256MB", 0, true},
		{"16777216TiB", 0, true},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("Parse(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if got != tt.want {
			t.Errorf("Parse(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestFormat(t *testing.T) {
	tests := []struct {
		in   uint64
		want string
	}{
		{1 << 40, "1 TiB"},
		{512 << 30, "512 GiB"},
		{256 << 20, "256 MiB"},
		{1536 << 20, "1536 MiB"},
		{100, "100 B"},
		{0, "0 B"},
	}
	for _, tt := range tests {
		if got := Format(tt.in); got != tt.want {
			t.Errorf("Format(%d) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestValueFlag(t *testing.T) {
	v := Value(1 << 30)
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(&v, "size", "")
	if err := fs.Parse([]string{"--size", "2TiB"}); err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got, want := uint64(v), uint64(2<<40); got != want {
		t.Errorf("flag value = %d, want %d", got, want)
	}
	if err := fs.Parse([]string{"--size", "lots"}); err == nil {
		t.Errorf("Parse(--size lots) succeeded, want an error")
	}
}
