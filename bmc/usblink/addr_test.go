package usblink

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParseAddr(t *testing.T) {
	tests := []struct {
		in      string
		want    Config
		wantErr bool
	}{
		{"usb:", Config{}, false},
		{"usb:0403:6001", Config{VID: 0x0403, PID: 0x6001}, false},
		{"usb:0403:6015?serial=FT1234&baud=3000000&latency=1&rtscts=1",
			Config{VID: 0x0403, PID: 0x6015, Serial: "FT1234", Baud: 3000000, LatencyMs: 1, RTSCTS: true}, false},
		{"usb:?serial=A", Config{Serial: "A"}, false},
		{"tty:/dev/ttyUSB0", Config{}, true},
		{"usb:0403", Config{}, true},
		{"usb:xyz:6001", Config{}, true},
		{"usb:0403:6001?baud=fast", Config{}, true},
		{"usb:0403:6001?latency=0", Config{}, true},
		{"usb:0403:6001?colour=blue", Config{}, true},
	}
	for _, tt := range tests {
		got, err := ParseAddr(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseAddr(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(Config{}, "Logger")); !tt.wantErr && diff != "" {
			t.Errorf("ParseAddr(%q) mismatch (-want +got):\n%s", tt.in, diff)
		}
	}
}
