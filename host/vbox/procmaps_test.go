package vbox

import (
	"testing"

	"cxlpool/fabric/cci"
)

func TestParseMaps(t *testing.T) {
	maps := []byte(`55d0c0a00000-55d0c0a21000 r--p 00000000 fd:01 1234 /usr/bin/prog
7f0000000000-7f0010000000 rw-s 40000000 00:01 4242 /memfd:cxlsim-memory (deleted)
7f0020000000-7f0020001000 rw-s 00000000 00:01 9999 /memfd:other (deleted)
7f0030000000-7f0030001000 rw-s 00000000 00:02 4242 /elsewhere
`)
	id := fileID{major: 0, minor: 1, ino: 4242}
	got := parseMaps(maps, id)
	if len(got) != 1 || got[0] != (fileRange{off: 0x40000000, end: 0x50000000}) {
		t.Fatalf("parseMaps() = %+v, want the one memfd mapping 0x40000000-0x50000000", got)
	}
	tests := []struct {
		name string
		e    cci.Extent
		want bool
	}{
		{"inside", cci.Extent{DPA: 0x48000000, Length: 0x1000}, true},
		{"just before", cci.Extent{DPA: 0x30000000, Length: 0x10000000}, false},
		{"straddles the end", cci.Extent{DPA: 0x4fff0000, Length: 0x20000}, true},
		{"just after", cci.Extent{DPA: 0x50000000, Length: 0x1000}, false},
	}
	for _, tt := range tests {
		if got := overlaps(got, []cci.Extent{tt.e}); got != tt.want {
			t.Errorf("%s: overlaps() = %v, want %v", tt.name, got, tt.want)
		}
	}
}
