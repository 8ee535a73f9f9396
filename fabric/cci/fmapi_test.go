package cci

import (
	"errors"
	"testing"
)

func fmapiSamples() []roundTripCase {
	return []roundTripCase{
		{name: "mld", v: &BindVPPBReq{VCSID: 1, VPPBID: 2, PortID: 3, LDID: 0x0004}},
		{name: "ld info", v: &GetLDInfoResp{MemorySize: 1 << 40, LDCount: 16, QoSCaps: 3}},
		{name: "page", v: &GetLDAllocationsReq{StartLD: 2, Limit: 4}},
		{name: "allocations", v: &GetLDAllocationsResp{NumLDs: 16, Granularity: Granularity1GB, StartLD: 2,
			Entries: []LDAllocation{{Range1: 4, Range2: 0}, {Range1: 0x1234, Range2: 0xffffffffffffffff}}}},
		{name: "no allocations", v: &GetLDAllocationsResp{NumLDs: 1}},
	}
}

func TestFMAPIRoundTrip(t *testing.T) { runRoundTrip(t, fmapiSamples()) }

func TestFMAPIGolden(t *testing.T) {
	runGolden(t, []goldenCase{
		{name: "V16", want: &BindVPPBReq{VCSID: 0, VPPBID: 1, PortID: 4, LDID: LDIDNone}, hex: "00 01 04 00 ff ff"},
		{name: "ld info", want: &GetLDInfoResp{MemorySize: 0x100_0000_0000, LDCount: 8, QoSCaps: 1},
			hex: "00 00 00 00 00 01 00 00 08 00 01"},
		{name: "allocations", want: &GetLDAllocationsResp{NumLDs: 8, Granularity: Granularity256MB, StartLD: 1,
			Entries: []LDAllocation{{Range1: 2, Range2: 3}}},
			hex: "08 00 01 01 02 00 00 00 00 00 00 00 03 00 00 00 00 00 00 00"},
	})
}

func TestFMAPIDecodeErrors(t *testing.T) {
	if err := new(GetLDAllocationsResp).UnmarshalBinary(unhex(t, "08 00 00 02 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00")); !errors.Is(err, ErrPayloadLength) {
		t.Errorf("UnmarshalBinary(list length 2, one entry): got error %v, want ErrPayloadLength", err)
	}
}

func FuzzFMAPI(f *testing.F) {
	samples := fmapiSamples()
	seedCodecs(f, samples)
	f.Add(unhex(f, "00 01 04 00 ff ff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzDecoders(t, data, protos(samples))
	})
}
