package pldm

import (
	"encoding"
	"errors"
	"testing"
)

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name string
		v    codec
		in   string
		want error
	}{
		{"GetTID short", &GetTIDResp{}, "", ErrLength},
		{"GetTID long", &GetTIDResp{}, "0A 00", ErrLength},
		{"GetSensorReading data size 6", &GetSensorReadingResp{}, "06 00 02 01 01 01 55 00 00 00", ErrInvalid},
		{"GetSensorReading reading truncated", &GetSensorReadingResp{}, "03 00 02 01 01 01 55", ErrLength},
		{"state readings count 0", &GetStateSensorReadingsResp{}, "00", ErrInvalid},
		{"state readings count 9", &GetStateSensorReadingsResp{}, "09" + zeros(36), ErrInvalid},
		{"set states setRequest 2", &SetStateEffecterStatesReq{}, "03 00 01 02 02", ErrInvalid},
		{"keep-alive without heartbeat", &SetEventReceiverReq{}, "03 00 08", ErrLength},
		{"GetPDR data past the end", &GetPDRResp{}, "00 00 00 00 00 00 00 00 05 10 00 01 02", ErrLength},
		{"GetPDR End without CRC", &GetPDRResp{}, "00 00 00 00 00 00 00 00 04 01 00 AA", ErrLength},
		{"sensor event class 3", &SensorEvent{}, "01 00 03 00 00", ErrInvalid},
		{"version data not ver32s", &GetPLDMVersionResp{}, "00 00 00 00 05 00 F0 F2", ErrLength},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.v.UnmarshalBinary(unhex(t, tt.in)); !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestEncodeErrors(t *testing.T) {
	tests := []struct {
		name string
		v    encoding.BinaryMarshaler
	}{
		{"reading does not fit", &GetSensorReadingResp{DataSize: Uint8, Reading: 300}},
		{"negative unsigned", &SetNumericEffecterValueReq{DataSize: Uint16, Value: -1}},
		{"data size real32", &SetNumericEffecterValueReq{DataSize: Real32}},
		{"no composite", &SetStateEffecterStatesReq{EffecterID: 1}},
		{"heartbeat without keep-alive", &SetEventReceiverReq{Enable: EventReceiverAsync, Heartbeat: 5}},
		{"fractional integer range field", &NumericSensorPDR{RangeFormat: Sint16, WarningHigh: 70.5}},
		{"possible states size 0", &StateSensorPDR{Composite: []PossibleStates{{SetID: 1}}}},
		{"name with NUL", &AuxNamesPDR{Names: [][]AuxName{{{"en", "a\x00b"}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.v.MarshalBinary(); !errors.Is(err, ErrInvalid) {
				t.Errorf("got %v, want ErrInvalid", err)
			}
		})
	}
}

func TestParseResponse(t *testing.T) {
	req := Header{Request: true, InstanceID: 9, Type: TypePlatform, Command: CmdGetSensorReading}
	tests := []struct {
		name string
		msg  string
		want error
	}{
		{"CC only", "09 02 11 80", CCInvalidSensorID},
		{"other instance", "0A 02 11 00", ErrMismatch},
		{"other command", "09 02 21 00", ErrMismatch},
		{"request bit", "89 02 11 00", ErrMismatch},
		{"no CC", "09 02 11", ErrLength},
		{"header version 1", "09 42 11 00", ErrInvalid},
		{"short header", "09 02", ErrLength},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseResponse(unhex(t, tt.msg), req); !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestParsePDRErrors(t *testing.T) {
	a := unhex(t, pdrAHex)
	bad := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), a...)) }
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"truncated", a[:80], ErrLength},
		{"trailing byte", append(append([]byte(nil), a...), 0), ErrLength},
		{"header version 2", bad(func(b []byte) []byte { b[4] = 2; return b }), ErrInvalid},
		{"sensorDataSize 7", bad(func(b []byte) []byte { b[32] = 7; return b }), ErrInvalid},
		{"rangeFieldFormat 7", bad(func(b []byte) []byte { b[61] = 7; return b }), ErrInvalid},
		{"header only", a[:6], ErrLength},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParsePDR(tt.in); !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
	p, err := ParsePDR(unhex(t, "07 00 00 00 01 01 00 00 02 00 AA BB"))
	if raw, ok := p.(*RawPDR); err != nil || !ok || raw.Type != PDRTerminusLocator || len(raw.Data) != 2 {
		t.Errorf("terminus locator PDR: got %#v, %v, want a 2-byte RawPDR", p, err)
	}
}
