package cci

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func dcdMgmtSamples() []roundTripCase {
	nonPrescriptive := []int{0x1c, 0x1d, 0x1e, 0x1f}
	return []roundTripCase{
		{name: "two regions", v: &GetDCDInfoResp{NumHosts: 8, NumRegions: 2,
			AddPolicies:     1<<AddPolicyFree | 1<<AddPolicyContiguous | 1<<AddPolicyPrescriptive,
			ReleasePolicies: 1<<ReleasePolicyTagBased | 1<<ReleasePolicyPrescriptive, SoRConfigurable: 0x02,
			TotalCapacity: 4096, BlockSizeMasks: []uint64{1 << 21, 1<<21 | 1<<30}}},
		{name: "eight regions", v: &GetDCDInfoResp{NumHosts: 1, NumRegions: 8, BlockSizeMasks: []uint64{1, 2, 3, 4, 5, 6, 7, 8}}},
		{name: "host 5", v: &GetHostDCRegionConfigReq{HostID: 5, RegionCount: 2, StartRegion: 1}},
		{name: "two regions", v: &GetHostDCRegionConfigResp{HostID: 5, AvailableRegions: 2,
			Regions: []DCRegionConfig{
				{Base: 0, DecodeLength: 512 << 30, Length: 512 << 30, BlockSize: 2 << 20, Attributes1: AttrSharable | AttrHWCoherency, SanitizeOnRelease: true},
				{Base: 512 << 30, DecodeLength: 512 << 30, Length: 256 << 30, BlockSize: 1 << 30, Attributes1: AttrNonVolatile | AttrReadOnly | AttrInterconnect},
			},
			SupportedExtents: 512, AvailableExtents: 511, SupportedTags: 128, AvailableTags: 127}},
		{name: "no regions", v: &GetHostDCRegionConfigResp{HostID: 1, AvailableRegions: 2, SupportedTags: 9}},
		{name: "set", v: &SetDCRegionConfigReq{Region: 7, BlockSize: 1 << 30, SanitizeOnRelease: true}},
		{name: "echoed", v: &SetDCRegionConfigResp{Echoed: true, Config: SetDCRegionConfigReq{Region: 1, BlockSize: 2 << 20}}, otherOK: []int{0}},
		{name: "empty", v: &SetDCRegionConfigResp{}},
		{name: "page", v: &GetDCRegionExtentListsReq{HostID: 7, Count: 16, Start: 48}},
		{name: "extents", v: &GetDCRegionExtentListsResp{HostID: 7, Start: 48, Total: 70, Generation: 0xabcdef01, Extents: sampleExtents(4)}},
		{name: "totals", v: &GetDCRegionExtentListsResp{HostID: 7, Total: 70, Generation: 3}},
		{name: "free", v: &InitiateDCAddReq{HostID: 3, Policy: AddPolicyFree, Region: 1, Length: 1 << 30, Tag: testTag(0x10)}, shortOK: nonPrescriptive},
		{name: "shared", v: &InitiateDCAddReq{HostID: 4, Policy: AddPolicySharedAccess, Region: 1, Tag: testTag(0x10)}, shortOK: nonPrescriptive},
		{name: "prescriptive", v: &InitiateDCAddReq{HostID: 3, Policy: AddPolicyPrescriptive, Extents: sampleExtents(3)}},
		{name: "prescriptive empty", v: &InitiateDCAddReq{HostID: 3, Policy: AddPolicyPrescriptive}},
		{name: "tag forced sanitize", v: &InitiateDCReleaseReq{HostID: 2, Policy: ReleasePolicyTagBased, Forced: true, Sanitize: true,
			Length: 2 << 30, Tag: testTag(0x77)}, shortOK: nonPrescriptive},
		{name: "prescriptive", v: &InitiateDCReleaseReq{HostID: 2, Policy: ReleasePolicyPrescriptive, Sanitize: true, Extents: sampleExtents(2)}},
		{name: "add ref", v: &DCAddReferenceReq{Tag: testTag(0xa0)}},
		{name: "remove ref", v: &DCRemoveReferenceReq{Tag: testTag(0xb0)}},
		{name: "page", v: &ListTagsReq{Start: 10, Max: 5}},
		{name: "two tags", v: &ListTagsResp{Generation: 17, Total: 30, Validity: TagsReferenceValid | TagsPendingValid,
			Tags: []TagEntry{
				{Tag: testTag(1), FMReference: true, Accepted: [32]byte{0: 0x05}, Pending: [32]byte{0: 0x02}},
				{Tag: testTag(2), Accepted: [32]byte{31: 0x80}},
			}}},
		{name: "generation only", v: &ListTagsResp{Generation: 17, Total: 30}},
	}
}

func TestDCDMgmtRoundTrip(t *testing.T) { runRoundTrip(t, dcdMgmtSamples()) }

func TestDCDMgmtGolden(t *testing.T) {
	tag := testTag(0x10)
	tagHex := "10 11 12 13 14 15 16 17 18 19 1a 1b 1c 1d 1e 1f"
	ext := Extent{DPA: 0x1_0000_0000, Length: 0x20_0000, Tag: tag, SharedSeq: 1}
	extHex := "00 00 00 00 01 00 00 00 00 00 20 00 00 00 00 00 " + tagHex + " 01 00 00 00 00 00 00 00"
	runGolden(t, []goldenCase{
		{name: "V5", want: &GetDCDInfoResp{NumHosts: 8, NumRegions: 2, AddPolicies: 1 << AddPolicyPrescriptive,
			ReleasePolicies: 1<<ReleasePolicyTagBased | 1<<ReleasePolicyPrescriptive, SoRConfigurable: 0x03,
			TotalCapacity: 64, BlockSizeMasks: []uint64{2 << 20, 2 << 20}},
			hex: "08 02 00 00 04 00 00 00 03 00 03 00" +
				"40 00 00 00 00 00 00 00" +
				"00 00 20 00 00 00 00 00" +
				"00 00 20 00 00 00 00 00" +
				"00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00" +
				"00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00" +
				"00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"},
		{name: "V12", want: &GetDCRegionExtentListsReq{HostID: 3, Count: 16, Start: 0}, hex: "03 00 00 00 10 00 00 00 00 00 00 00"},
		{name: "V13", want: &GetHostDCRegionConfigReq{HostID: 3, RegionCount: 8, StartRegion: 0}, hex: "03 00 08 00"},
		{name: "V14", want: &SetDCRegionConfigReq{Region: 1, BlockSize: 2 << 20, SanitizeOnRelease: true},
			hex: "01 00 00 00 00 00 20 00 00 00 00 00 01 00 00 00"},
		{name: "V14 echoed response", want: &SetDCRegionConfigResp{Echoed: true, Config: SetDCRegionConfigReq{Region: 1, BlockSize: 2 << 20, SanitizeOnRelease: true}},
			hex: "01 00 00 00 00 00 20 00 00 00 00 00 01 00 00 00"},
		{name: "empty 5602h response", want: &SetDCRegionConfigResp{}, hex: ""},
		{name: "host region config", want: &GetHostDCRegionConfigResp{HostID: 3, AvailableRegions: 2,
			Regions: []DCRegionConfig{{Base: 0x1000_0000, DecodeLength: 0x3000_0000, Length: 0x2000_0000, BlockSize: 0x20_0000,
				Attributes1: AttrSharable, SanitizeOnRelease: true}},
			SupportedExtents: 0x200, AvailableExtents: 0x1ff, SupportedTags: 0x40, AvailableTags: 0x3f},
			hex: "03 00 02 01" +
				"00 00 00 10 00 00 00 00 03 00 00 00 00 00 00 00" + // base, decode length ×256 MB
				"00 00 00 20 00 00 00 00 00 00 20 00 00 00 00 00" + // length, block size
				"08 00 00 00 01 00 00 00" + // Attributes1, Attributes2
				"00 02 00 00 ff 01 00 00 40 00 00 00 3f 00 00 00"}, // trailer at 4 + 28h·R
		{name: "extent lists", want: &GetDCRegionExtentListsResp{HostID: 3, Start: 0, Total: 1, Generation: 5, Extents: []Extent{ext}},
			hex: "03 00 00 00 00 00 00 00 01 00 00 00 01 00 00 00 05 00 00 00 00 00 00 00 " + extHex},
		{name: "add free", want: &InitiateDCAddReq{HostID: 3, Policy: AddPolicyFree, Region: 1, Length: 0x4000_0000, Tag: tag},
			hex: "03 00 00 01 00 00 00 40 00 00 00 00 " + tagHex + " 00 00 00 00"},
		{name: "add prescriptive", want: &InitiateDCAddReq{HostID: 3, Policy: AddPolicyPrescriptive, Extents: []Extent{ext}},
			hex: "03 00 02 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 " + extHex},
		{name: "release tag forced sanitize", want: &InitiateDCReleaseReq{HostID: 3, Policy: ReleasePolicyTagBased, Forced: true, Sanitize: true,
			Length: 0x20_0000, Tag: tag},
			hex: "03 00 30 00 00 00 20 00 00 00 00 00 " + tagHex + " 00 00 00 00"},
		{name: "add reference", want: &DCAddReferenceReq{Tag: tag}, hex: tagHex},
		{name: "remove reference", want: &DCRemoveReferenceReq{Tag: tag}, hex: tagHex},
		{name: "list tags req", want: &ListTagsReq{Start: 1, Max: 2}, hex: "01 00 00 00 02 00 00 00"},
		{name: "list tags", want: &ListTagsResp{Generation: 2, Total: 1, Validity: 3,
			Tags: []TagEntry{{Tag: tag, FMReference: true, Accepted: [32]byte{0: 0x09}, Pending: [32]byte{0: 0x04}}}},
			hex: "02 00 00 00 01 00 00 00 01 00 00 00 03 00 00 00 " + tagHex + " 01 00 00 00" +
				" 09 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00" +
				" 04 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"},
	})
}

// TestInitiateDCAddShortForms checks the 5604h length rules of
// cxl-wire.md §3.8: 1Ch bytes suffice without the prescriptive policy, the
// count is ignored then, and the prescriptive policy needs the count and
// exactly the counted list.
func TestInitiateDCAddShortForms(t *testing.T) {
	tag := testTag(0x10)
	free := unhex(t, "03 00 00 01 00 00 00 40 00 00 00 00 10 11 12 13 14 15 16 17 18 19 1a 1b 1c 1d 1e 1f")
	var got InitiateDCAddReq
	if err := got.UnmarshalBinary(free); err != nil {
		t.Fatalf("UnmarshalBinary(1Ch free): got error %v, want nil", err)
	}
	want := InitiateDCAddReq{HostID: 3, Policy: AddPolicyFree, Region: 1, Length: 0x4000_0000, Tag: tag}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("UnmarshalBinary(1Ch free) mismatch (-want +got):\n%s", diff)
	}
	// A stray count without a list is reserved for non-prescriptive policies.
	withCount := append(append([]byte(nil), free...), 5, 0, 0, 0)
	if err := got.UnmarshalBinary(withCount); err != nil {
		t.Fatalf("UnmarshalBinary(free with count 5): got error %v, want nil", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("UnmarshalBinary(free with count 5) mismatch (-want +got):\n%s", diff)
	}
	// Reserved policy bits 7:4 are ignored.
	high := append([]byte(nil), free...)
	high[2] = 0xf0 | AddPolicyContiguous
	if err := got.UnmarshalBinary(high); err != nil || got.Policy != AddPolicyContiguous {
		t.Errorf("UnmarshalBinary(policy byte F1h): got policy %d, error %v, want %d, nil", got.Policy, err, AddPolicyContiguous)
	}

	presc := append([]byte(nil), free...)
	presc[2] = AddPolicyPrescriptive
	tests := []struct {
		name string
		b    []byte
	}{
		{"prescriptive without count", presc},
		{"prescriptive count 1 without list", append(append([]byte(nil), presc...), 1, 0, 0, 0)},
		{"prescriptive count 0 with trailing extent", append(append(append([]byte(nil), presc...), 0, 0, 0, 0), make([]byte, ExtentLen)...)},
		{"prescriptive count 2^32-1", append(append([]byte(nil), presc...), 0xff, 0xff, 0xff, 0xff)},
		{"too short", free[:0x1b]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := new(InitiateDCAddReq).UnmarshalBinary(tc.b); !errors.Is(err, ErrPayloadLength) {
				t.Errorf("InitiateDCAddReq.UnmarshalBinary: got error %v, want ErrPayloadLength", err)
			}
			b := append([]byte(nil), tc.b...)
			if len(b) > 2 {
				b[2] = ReleasePolicyPrescriptive
			}
			if err := new(InitiateDCReleaseReq).UnmarshalBinary(b); !errors.Is(err, ErrPayloadLength) {
				t.Errorf("InitiateDCReleaseReq.UnmarshalBinary: got error %v, want ErrPayloadLength", err)
			}
		})
	}
}

func TestDCDMgmtDecodeErrors(t *testing.T) {
	info := make([]byte, GetDCDInfoRespLen)
	info[1] = 9
	region, err := (&GetHostDCRegionConfigResp{Regions: []DCRegionConfig{{}}}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	extents := make([]byte, 0x18)
	extents[8] = 1
	tags := make([]byte, 0x10+TagEntryLen-1)
	tags[8] = 1
	tests := []struct {
		name string
		v    codec
		b    []byte
	}{
		{"dcd info 9 regions", &GetDCDInfoResp{}, info},
		{"dcd info short", &GetDCDInfoResp{}, make([]byte, GetDCDInfoRespLen-1)},
		{"region count exceeds payload", &GetHostDCRegionConfigResp{}, append([]byte{0, 0, 0, 2}, region[4:]...)},
		{"region missing trailer", &GetHostDCRegionConfigResp{}, region[:len(region)-dcTrailerLen]},
		{"extent count exceeds payload", &GetDCRegionExtentListsResp{}, extents},
		{"tag entry truncated", &ListTagsResp{}, tags},
		{"5602h response of 8 bytes", &SetDCRegionConfigResp{}, make([]byte, 8)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.v.UnmarshalBinary(tc.b); !errors.Is(err, ErrPayloadLength) {
				t.Errorf("UnmarshalBinary: got error %v, want ErrPayloadLength", err)
			}
		})
	}
}

func TestDCDMgmtMarshalErrors(t *testing.T) {
	tests := []struct {
		name string
		v    codec
	}{
		{"masks disagree with region count", &GetDCDInfoResp{NumRegions: 2, BlockSizeMasks: []uint64{1}}},
		{"nine regions", &GetDCDInfoResp{NumRegions: 9, BlockSizeMasks: make([]uint64, 9)}},
		{"decode length not 256 MB multiple", &GetHostDCRegionConfigResp{Regions: []DCRegionConfig{{DecodeLength: 1 << 20}}}},
		{"extents with free policy", &InitiateDCAddReq{Policy: AddPolicyFree, Extents: sampleExtents(1)}},
		{"add policy beyond 4 bits", &InitiateDCAddReq{Policy: 0x12}},
		{"extents with tag-based release", &InitiateDCReleaseReq{Policy: ReleasePolicyTagBased, Extents: sampleExtents(1)}},
		{"release policy beyond 4 bits", &InitiateDCReleaseReq{Policy: 0x10}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.v.MarshalBinary(); err == nil {
				t.Errorf("MarshalBinary: got nil error, want an error")
			}
		})
	}
}

func FuzzDCDMgmt(f *testing.F) {
	samples := dcdMgmtSamples()
	seedCodecs(f, samples)
	f.Add(unhex(f, "03 00 00 00 10 00 00 00 00 00 00 00"))
	f.Add(unhex(f, "03 00 08 00"))
	f.Add(unhex(f, "01 00 00 00 00 00 20 00 00 00 00 00 01 00 00 00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzDecoders(t, data, protos(samples))
	})
}
