package appliance

import "testing"

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{"1TiB", 1 << 40, false},
		{"256MiB", 256 << 20, false},
		{"4G", 4 << 30, false},
		{"4096", 4096, false},
		{" 2 GiB ", 2 << 30, false},
		{"0", 0, false},
		{"", 0, true},
		{"MiB", 0, true},
		{"-1", 0, true},
		{"1.5GiB", 0, true},
		{"99999999999TiB", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseSize(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseSize(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestFormatSize(t *testing.T) {
	tests := []struct {
		in   uint64
		want string
	}{
		{1 << 40, "1 TiB"},
		{512 << 30, "512 GiB"},
		{256 << 20, "256 MiB"},
		{1536 << 20, "1536 MiB"},
		{100, "100 B"},
	}
	for _, tt := range tests {
		if got := FormatSize(tt.in); got != tt.want {
			t.Errorf("FormatSize(%d) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
