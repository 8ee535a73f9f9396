package cci

import (
	"errors"
	"testing"
)

func sampleExtents(n int) []Extent {
	es := make([]Extent, n)
	for i := range es {
		es[i] = Extent{
			DPA:       0x1_0000_0000 + uint64(i)*0x20_0000,
			Length:    0x20_0000,
			Tag:       testTag(byte(i)),
			SharedSeq: uint16(i),
		}
	}
	return es
}

func hostDCDSamples() []roundTripCase {
	return []roundTripCase{
		{name: "regions", v: &GetDCConfigReq{RegionCount: 8, StartRegion: 1}},
		{name: "two regions", v: &GetDCConfigResp{
			AvailableRegions: 2,
			Regions: []HostRegionConfig{
				{Base: 0, DecodeLength: 512 << 30, Length: 512 << 30, BlockSize: 2 << 20, DSMADHandle: 7, SanitizeOnRelease: true},
				{Base: 512 << 30, DecodeLength: 256 << 20, Length: 128 << 20, BlockSize: 1 << 30, DSMADHandle: 0xdeadbeef},
			},
			SupportedExtents: 512, AvailableExtents: 500, SupportedTags: 64, AvailableTags: 60,
		}},
		{name: "no regions", v: &GetDCConfigResp{AvailableRegions: 2, SupportedExtents: 1}},
		{name: "page", v: &GetDCExtentListReq{Count: 16, Start: 32}},
		{name: "extents", v: &GetDCExtentListResp{Total: 40, Generation: 9, Extents: sampleExtents(3)}},
		{name: "totals only", v: &GetDCExtentListResp{Total: 40, Generation: 9}},
		{name: "accept two", v: &AddDCResponseReq{More: true, Extents: []ExtentRange{{0x1_0000_0000, 0x1000_0000}, {0x2_0000_0000, 0x20_0000}}}},
		{name: "reject all", v: &AddDCResponseReq{}},
		{name: "release one", v: &ReleaseDCReq{Extents: []ExtentRange{{0x40, 0x80}}}},
		{name: "release empty", v: &ReleaseDCReq{More: true}},
	}
}

func TestHostDCDRoundTrip(t *testing.T) { runRoundTrip(t, hostDCDSamples()) }

func TestHostDCDGolden(t *testing.T) {
	v6 := "01 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 00 00 10 00 00 00 00 00 00 00 00 00 00 00 00"
	one := []ExtentRange{{DPA: 0x1_0000_0000, Length: 0x1000_0000}}
	runGolden(t, []goldenCase{
		{name: "V6", want: &AddDCResponseReq{Extents: one}, hex: v6},
		{name: "V7", want: &AddDCResponseReq{}, hex: "00 00 00 00 00 00 00 00"},
		{name: "V11", want: &GetDCExtentListReq{}, hex: "00 00 00 00 00 00 00 00"},
		{name: "V15", want: &ReleaseDCReq{Extents: one}, hex: v6},
		{name: "get dc config", want: &GetDCConfigReq{RegionCount: 2, StartRegion: 0}, hex: "02 00"},
		{name: "dc config one region", want: &GetDCConfigResp{
			AvailableRegions: 1,
			Regions:          []HostRegionConfig{{Base: 0x1000_0000, DecodeLength: 0x2000_0000, Length: 0x1000_0000, BlockSize: 0x20_0000, DSMADHandle: 3, SanitizeOnRelease: true}},
			SupportedExtents: 1, AvailableExtents: 2, SupportedTags: 3, AvailableTags: 4,
		}, hex: "01 01 00 00 00 00 00 00" +
			"00 00 00 10 00 00 00 00 02 00 00 00 00 00 00 00" + // base, decode length ×256 MB
			"00 00 00 10 00 00 00 00 00 00 20 00 00 00 00 00" + // length, block size
			"03 00 00 00 01 00 00 00" + // DSMAD handle, SoR flag
			"01 00 00 00 02 00 00 00 03 00 00 00 04 00 00 00"},
	})
}

func TestReleaseDCValidate(t *testing.T) {
	if err := (&ReleaseDCReq{}).Validate(); !errors.Is(err, InvalidInput) {
		t.Errorf("Validate(no extents): got error %v, want InvalidInput", err)
	}
	if err := (&ReleaseDCReq{Extents: []ExtentRange{{0, 0x40}}}).Validate(); err != nil {
		t.Errorf("Validate(one extent): got error %v, want nil", err)
	}
}

func TestHostDCDDecodeErrors(t *testing.T) {
	huge := unhex(t, "ff ff ff ff 00 00 00 00")
	long := unhex(t, "00 00 00 00 00 00 00 00 00")
	cfg, err := (&GetDCConfigResp{Regions: []HostRegionConfig{{}}}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	cfg[8+0x0f] = 0xff // decode length in 256 MB units overflows 64 bits
	noTrailer := make([]byte, 8+RegionConfigLen)
	noTrailer[1] = 1
	tests := []struct {
		name string
		v    codec
		b    []byte
	}{
		{"count 2^32-1", &AddDCResponseReq{}, huge},
		{"trailing byte", &AddDCResponseReq{}, long},
		{"release count 2^32-1", &ReleaseDCReq{}, huge},
		{"extent list count 2^32-1", &GetDCExtentListResp{}, append(append([]byte(nil), huge...), make([]byte, 8)...)},
		{"decode length overflow", &GetDCConfigResp{}, cfg},
		{"missing trailer", &GetDCConfigResp{}, noTrailer},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.v.UnmarshalBinary(tc.b); !errors.Is(err, ErrPayloadLength) {
				t.Errorf("UnmarshalBinary: got error %v, want ErrPayloadLength", err)
			}
		})
	}
}

func TestHostDCDMarshalErrors(t *testing.T) {
	bad := &GetDCConfigResp{Regions: []HostRegionConfig{{DecodeLength: 0x1000}}}
	if _, err := bad.MarshalBinary(); err == nil {
		t.Errorf("MarshalBinary(decode length not a 256 MB multiple): got nil error, want an error")
	}
}

func FuzzHostDCD(f *testing.F) {
	samples := hostDCDSamples()
	seedCodecs(f, samples)
	f.Add(unhex(f, "01 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 00 00 10 00 00 00 00 00 00 00 00 00 00 00 00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzDecoders(t, data, protos(samples))
	})
}
