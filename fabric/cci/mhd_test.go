package cci

import (
	"errors"
	"testing"
)

func mhdSamples() []roundTripCase {
	return []roundTripCase{
		{name: "page", v: &GetMultiHeadedInfoReq{StartLD: 0, Limit: 8}},
		{name: "eight heads", v: &GetMultiHeadedInfoResp{NumLDs: 8, NumHeads: 8, StartLD: 0,
			LDMap: []uint8{0, 1, 2, 3, 4, 5, 6, LDUnassigned}}},
		{name: "empty map", v: &GetMultiHeadedInfoResp{NumLDs: 8, NumHeads: 8, StartLD: 8}},
		{name: "heads", v: &GetHeadInfoReq{StartHead: 2, Count: 3}},
		{name: "two heads", v: &GetHeadInfoResp{Heads: []HeadInfo{
			{Port: 0, MaxWidth: 16, NegotiatedWidth: 8, SpeedsVector: 0x3f, MaxSpeed: 6, CurrentSpeed: 5, LTSSM: LTSSML0, FirstLane: 0, LaneReversal: true},
			{Port: 1, MaxWidth: 16, LTSSM: LTSSMDetect, FirstLane: 8, PERST: true},
		}}},
		{name: "no heads", v: &GetHeadInfoResp{}},
	}
}

func TestMHDRoundTrip(t *testing.T) { runRoundTrip(t, mhdSamples()) }

func TestMHDGolden(t *testing.T) {
	runGolden(t, []goldenCase{
		{name: "multi-headed info", want: &GetMultiHeadedInfoResp{NumLDs: 8, NumHeads: 8, StartLD: 2, LDMap: []uint8{2, 3, 0xff}},
			hex: "08 08 00 00 02 03 00 00 02 03 ff"},
		{name: "head info", want: &GetHeadInfoResp{Heads: []HeadInfo{
			{Port: 3, MaxWidth: 16, NegotiatedWidth: 16, SpeedsVector: 0x1f, MaxSpeed: 5, CurrentSpeed: 5, LTSSM: LTSSML0, FirstLane: 0, LaneReversal: false, PERST: true},
		}}, hex: "01 00 00 00 03 10 10 1f 05 05 04 00 02"},
	})
}

func TestMHDDecode(t *testing.T) {
	// Reserved bits 7:6 of the width and speed fields are ignored.
	var h GetHeadInfoResp
	if err := h.UnmarshalBinary(unhex(t, "01 00 00 00 03 d0 d0 df c5 c5 04 00 03")); err != nil {
		t.Fatalf("UnmarshalBinary: got error %v, want nil", err)
	}
	want := HeadInfo{Port: 3, MaxWidth: 16, NegotiatedWidth: 16, SpeedsVector: 0x1f, MaxSpeed: 5, CurrentSpeed: 5, LTSSM: LTSSML0, LaneReversal: true, PERST: true}
	if len(h.Heads) != 1 || h.Heads[0] != want {
		t.Errorf("UnmarshalBinary: got %+v, want [%+v]", h.Heads, want)
	}
	if err := new(GetMultiHeadedInfoResp).UnmarshalBinary(unhex(t, "08 08 00 00 00 04 00 00 00 01 02")); !errors.Is(err, ErrPayloadLength) {
		t.Errorf("UnmarshalBinary(map length 4, 3 bytes): got error %v, want ErrPayloadLength", err)
	}
}

func FuzzMHD(f *testing.F) {
	samples := mhdSamples()
	seedCodecs(f, samples)
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzDecoders(t, data, protos(samples))
	})
}
