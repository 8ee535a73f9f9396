package cci

import (
	"errors"
	"testing"
)

func memdevSamples() []roundTripCase {
	return []roundTripCase{
		{name: "full", v: &IdentifyMemoryDeviceResp{
			FWRevision: "cxlpool 1.2.3", TotalCapacity: 4096, VolatileOnly: 4096, PersistentOnly: 0, PartitionAlign: 1,
			InfoLogSize: 64, WarnLogSize: 32, FailLogSize: 16, FatalLogSize: 8, LSASize: 0x20000,
			PoisonListMax: 0xabcdef, InjectPoisonLimit: 0x1234, PoisonCaps: 0x5a, QoSCaps: 0x3, DCEventLogSize: 0x200,
		}, shortOK: []int{0x43, 0x44}},
		{name: "16-byte revision", v: &IdentifyMemoryDeviceResp{FWRevision: "0123456789abcdef", TotalCapacity: 1}, shortOK: []int{0x43, 0x44}},
	}
}

func TestMemdevRoundTrip(t *testing.T) { runRoundTrip(t, memdevSamples()) }

func TestMemdevGolden(t *testing.T) {
	runGolden(t, []goldenCase{{
		name: "identify memory device",
		want: &IdentifyMemoryDeviceResp{FWRevision: "FW1", TotalCapacity: 0x1000, VolatileOnly: 0x1000,
			InfoLogSize: 1, WarnLogSize: 2, FailLogSize: 3, FatalLogSize: 4, LSASize: 0x100,
			PoisonListMax: 0x030201, InjectPoisonLimit: 5, PoisonCaps: 6, QoSCaps: 7, DCEventLogSize: 0x0908},
		hex: "46 57 31 00 00 00 00 00 00 00 00 00 00 00 00 00" + // 00h FW revision
			"00 10 00 00 00 00 00 00 00 10 00 00 00 00 00 00" + // 10h total, 18h volatile
			"00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00" + // 20h persistent, 28h alignment
			"01 00 02 00 03 00 04 00 00 01 00 00 01 02 03 05" + // 30h log sizes, 38h LSA, 3Ch poison max, 3Fh inject
			"00 06 07 08 09", // 40h inject hi, 41h poison caps, 42h QoS, 43h DC log size
	}})
}

func TestMemdevMarshalErrors(t *testing.T) {
	tests := []struct {
		name string
		v    IdentifyMemoryDeviceResp
	}{
		{"revision too long", IdentifyMemoryDeviceResp{FWRevision: "0123456789abcdefX"}},
		{"revision with NUL", IdentifyMemoryDeviceResp{FWRevision: "a\x00b"}},
		{"poison max beyond 24 bits", IdentifyMemoryDeviceResp{PoisonListMax: 1 << 24}},
	}
	for _, tc := range tests {
		if _, err := tc.v.MarshalBinary(); err == nil {
			t.Errorf("%s: MarshalBinary: got nil error, want an error", tc.name)
		}
	}
	if err := new(IdentifyMemoryDeviceResp).UnmarshalBinary(make([]byte, 0x42)); !errors.Is(err, ErrPayloadLength) {
		t.Errorf("UnmarshalBinary(42h bytes): got error %v, want ErrPayloadLength", err)
	}
}

func FuzzMemdev(f *testing.F) {
	samples := memdevSamples()
	seedCodecs(f, samples)
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzDecoders(t, data, protos(samples))
	})
}
