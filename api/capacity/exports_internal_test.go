package capacity

import (
	"testing"
	"time"
)

func TestParseISODuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"PT1H", time.Hour, true},
		{"PT90M", 90 * time.Minute, true},
		{"P1DT2H3M4S", 26*time.Hour + 3*time.Minute + 4*time.Second, true},
		{"P2D", 48 * time.Hour, true},
		{"PT0.5S", 500 * time.Millisecond, true},
		{"PT1.5H", 90 * time.Minute, true},
		{"", 0, false},
		{"P", 0, false},
		{"PT", 0, false},
		{"P1DT", 0, false},
		{"PT0S", 0, false},
		{"1H", 0, false},
		{"PT1S1H", 0, false},
		{"PT1H1H", 0, false},
		{"P1H", 0, false},
		{"PT1D", 0, false},
		{"PTT1H", 0, false},
		{"PT.H", 0, false},
		{"PT1..5S", 0, false},
		{"PT-1S", 0, false},
		{"PT1e3S", 0, false},
		{"P36600D", 36600 * 24 * time.Hour, true},
		{"P36601D", 0, false},
		{"PT9999999999999999H", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseISODuration(tt.in)
		if got != tt.want && ok || ok != tt.ok {
			t.Errorf("parseISODuration(%q): got %s, %v; want %s, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzParseISODuration(f *testing.F) {
	for _, s := range []string{"PT1H", "P1DT2H3M4S", "PT0.5S", "P", "PT1S1H", "P36601D", "PT.S"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := parseISODuration(s)
		if ok && (d <= 0 || d > maxExportTTL) {
			t.Fatalf("parseISODuration(%q) = %s, accepted outside (0, %s]", s, d, maxExportTTL)
		}
	})
}

func TestValidClientName(t *testing.T) {
	for _, tt := range []struct {
		name string
		want bool
	}{
		{"rack7", true}, {"rack-8.b_c", true}, {"7", true}, {"Pool", false}, {"pool", true},
		{"", false}, {"-rack", false}, {".rack", false}, {"a/b", false}, {"a b", false}, {"ä", false},
		{string(make([]byte, 65)), false},
	} {
		if got := validClientName(tt.name); got != tt.want {
			t.Errorf("validClientName(%q): got %v, want %v", tt.name, got, tt.want)
		}
	}
}
