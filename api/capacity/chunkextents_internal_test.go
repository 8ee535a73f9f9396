package capacity

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/api/redfish"
	"cxlpool/fabric/cci"
)

func TestExtentsBody(t *testing.T) {
	const m = 1 << 20
	for _, tc := range []struct {
		name string
		in   []cci.Extent
		want []redfish.Obj
	}{
		{"none", nil, []redfish.Obj{}},
		{"one", []cci.Extent{{DPA: 512 * m, Length: 256 * m}}, []redfish.Obj{{"OffsetMiB": uint64(512), "SizeMiB": uint64(256)}}},
		{"two holders of a shared chunk: each range once",
			[]cci.Extent{{DPA: 0, Length: 256 * m}, {DPA: 1024 * m, Length: 256 * m}, {DPA: 0, Length: 256 * m}, {DPA: 1024 * m, Length: 256 * m}},
			[]redfish.Obj{{"OffsetMiB": uint64(0), "SizeMiB": uint64(256)}, {"OffsetMiB": uint64(1024), "SizeMiB": uint64(256)}}},
		{"adjacent ranges out of order: one range",
			[]cci.Extent{{DPA: 256 * m, Length: 256 * m}, {DPA: 0, Length: 256 * m}},
			[]redfish.Obj{{"OffsetMiB": uint64(0), "SizeMiB": uint64(512)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, extentsBody(tc.in)); diff != "" {
				t.Errorf("extentsBody (-want +got):\n%s", diff)
			}
		})
	}
}
