package agent_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/host"
	"cxlpool/host/agent"
)

func TestEnvLines(t *testing.T) {
	tests := []struct {
		name string
		c    host.Capacity
		want []string
	}{
		{"dax device", host.Capacity{Path: "/dev/dax0.1", Kind: "devdax", Size: 1 << 30,
			Extents: []host.Extent{{Offset: 0, Length: 1 << 30}}},
			[]string{"CXLPOOL_DAX_PATH=/dev/dax0.1", "CXLPOOL_DAX_SIZE=1073741824"}},
		{"sim, one extent", host.Capacity{Path: "/proc/1/fd/7", Kind: "simfile", Size: 256 << 20,
			Extents: []host.Extent{{DPA: 1 << 30, Offset: 1 << 30, Length: 256 << 20}}},
			[]string{"CXLPOOL_DAX_PATH=/proc/1/fd/7", "CXLPOOL_DAX_SIZE=268435456", "CXLPOOL_DAX_OFFSET=1073741824"}},
		{"sim, two extents", host.Capacity{Path: "/proc/1/fd/7", Kind: "simfile", Size: 3 << 20,
			Extents: []host.Extent{{Offset: 4 << 20, Length: 2 << 20}, {Offset: 0, Length: 1 << 20}}},
			[]string{"CXLPOOL_DAX_PATH=/proc/1/fd/7", "CXLPOOL_DAX_SIZE=3145728", "CXLPOOL_DAX_EXTENTS=4194304:2097152,0:1048576"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, agent.EnvLines(tt.c)); diff != "" {
				t.Errorf("EnvLines() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGCXLID(t *testing.T) {
	got := host.Identity{Serial: 0x0123456789abcdef, LD: 3}.GCXLID()
	if want := "01-23-45-67-89-AB-CD-EF:0003"; got != want {
		t.Errorf("GCXLID() = %q, want %q", got, want)
	}
}
