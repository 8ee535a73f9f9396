package cci

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func logSamples() []roundTripCase {
	return []roundTripCase{
		{name: "cel only", v: &GetSupportedLogsResp{Entries: []LogEntry{{UUID: CELUUID, Size: 0x78}}}},
		{name: "two logs", v: &GetSupportedLogsResp{Entries: []LogEntry{{UUID: CELUUID, Size: 4}, {UUID: testTag(9), Size: 0xffffffff}}}},
		{name: "none", v: &GetSupportedLogsResp{}},
		{name: "cel slice", v: &GetLogReq{UUID: CELUUID, Offset: 0x40, Length: 0x200}},
	}
}

func TestLogsRoundTrip(t *testing.T) { runRoundTrip(t, logSamples()) }

func TestLogsGolden(t *testing.T) {
	runGolden(t, []goldenCase{
		{name: "get log", want: &GetLogReq{UUID: CELUUID, Offset: 0, Length: 0x100},
			hex: "0d a9 c0 b5 bf 41 4b 78 8f 79 96 b1 62 3b 3f 17 00 00 00 00 00 01 00 00"},
		{name: "supported logs", want: &GetSupportedLogsResp{Entries: []LogEntry{{UUID: CELUUID, Size: 8}}},
			hex: "01 00 00 00 00 00 00 00 0d a9 c0 b5 bf 41 4b 78 8f 79 96 b1 62 3b 3f 17 08 00 00 00"},
	})
}

func TestCEL(t *testing.T) {
	entries := []CELEntry{
		{Opcode: OpIdentify},
		{Opcode: OpBindVPPB, Effects: EffectBackground | EffectConfigChangeImmediate},
		{Opcode: OpInitiateDCAdd, Effects: EffectConfigChangeColdReset | EffectConfigChangeImmediate | EffectDataChangeImmediate |
			EffectExtendedValid | EffectConfigChangeConvReset | EffectConfigChangeCXLReset},
	}
	b := MarshalCEL(entries)
	want := unhex(t, "01 00 00 00 01 52 42 00 04 56 07 0e")
	if diff := cmp.Diff(want, b); diff != "" {
		t.Errorf("MarshalCEL mismatch (-want +got):\n%s", diff)
	}
	got, err := ParseCEL(b)
	if err != nil {
		t.Fatalf("ParseCEL: got error %v, want nil", err)
	}
	if diff := cmp.Diff(entries, got); diff != "" {
		t.Errorf("ParseCEL mismatch (-want +got):\n%s", diff)
	}
	if _, err := ParseCEL(b[:5]); !errors.Is(err, ErrPayloadLength) {
		t.Errorf("ParseCEL(5 bytes): got error %v, want ErrPayloadLength", err)
	}
	if got, err := ParseCEL(nil); err != nil || got != nil {
		t.Errorf("ParseCEL(nil): got %v, %v, want nil, nil", got, err)
	}
}

func TestSupportedLogsCountMismatch(t *testing.T) {
	b := unhex(t, "02 00 00 00 00 00 00 00 0d a9 c0 b5 bf 41 4b 78 8f 79 96 b1 62 3b 3f 17 08 00 00 00")
	if err := new(GetSupportedLogsResp).UnmarshalBinary(b); !errors.Is(err, ErrPayloadLength) {
		t.Errorf("UnmarshalBinary(count 2, one entry): got error %v, want ErrPayloadLength", err)
	}
}

func FuzzLogs(f *testing.F) {
	samples := logSamples()
	seedCodecs(f, samples)
	f.Add(MarshalCEL([]CELEntry{{Opcode: OpIdentify, Effects: 1}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzDecoders(t, data, protos(samples))
		if es, err := ParseCEL(data); err == nil {
			if diff := cmp.Diff(data, MarshalCEL(es), cmp.Comparer(func(a, b []byte) bool { return string(a) == string(b) })); diff != "" {
				t.Errorf("CEL re-encoding mismatch (-input +re-encoded):\n%s", diff)
			}
		} else if !errors.Is(err, ErrPayloadLength) {
			t.Errorf("ParseCEL: error %v does not wrap ErrPayloadLength", err)
		}
	})
}
