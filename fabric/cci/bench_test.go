package cci

import "testing"

// BenchmarkEncodeDecode measures a full encode/decode cycle of the two
// payloads the FM handles most: a typical add request and a page of 16
// extents.
func BenchmarkEncodeDecode(b *testing.B) {
	cases := []struct {
		name string
		v    codec
	}{
		{"InitiateDCAdd/free", &InitiateDCAddReq{HostID: 3, Policy: AddPolicyFree, Region: 0, Length: 1 << 30, Tag: testTag(1)}},
		{"InitiateDCAdd/prescriptive4", &InitiateDCAddReq{HostID: 3, Policy: AddPolicyPrescriptive, Extents: sampleExtents(4)}},
		{"GetDCRegionExtentLists/16", &GetDCRegionExtentListsResp{HostID: 3, Total: 16, Generation: 7, Extents: sampleExtents(16)}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			dec := zeroOf(tc.v)
			b.ReportAllocs()
			for b.Loop() {
				p, err := tc.v.MarshalBinary()
				if err != nil {
					b.Fatal(err)
				}
				if err := dec.UnmarshalBinary(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
