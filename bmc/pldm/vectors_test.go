package pldm

import (
	"encoding"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// unhex decodes a spec vector written as spaced hex bytes.
func unhex(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		tb.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

func zeros(n int) string { return strings.Repeat("00 ", n) }

// PDR vectors of pldm.md §7.
const (
	pdrAHex = `01 00 00 00 01 02 07 00 47 00  01 00 01 00 40 00 01 00 00 00  00 00
		02 00 00 00 00 00 00 00 00 01  03  00 00 00 3F 00 00 00 00  00 00 02 02 04 00
		07 00  00 00 00 00 00 00 80 3F  FA 00 B0 FF  03 2B  19 00 3C 00 00 00
		46 00 00 00 55 00 00 00 5F 00 00 00`
	pdrBHex = `02 00 00 00 01 04 00 00 11 00 01 00 02 00 42 00 01 00 00 00 00 00 01 01 00 01 1E`
	pdrCHex = `03 00 00 00 01 0B 00 00 13 00 01 00 03 00 2D 00 01 00 00 00 00 00 00 00 01 11 00 01 06`
	pdrDHex = `04 00 00 00 01 09 00 00 3C 00 01 00 04 00 2D 00 01 00 00 00 00 00 00 00 07 00 00 00
		00 00 00 00 01 02 00 00 80 3F 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 3F 58 02 64 00
		02 19 C2 01 00 00 00 00 58 02 64 00`
)

var (
	pdrA = &NumericSensorPDR{
		Handle: 1, ChangeNumber: 7, TerminusHandle: 1, SensorID: 1, Entity: Entity{64, 1, 0},
		Units: Units{Base: UnitDegreesC}, IsLinear: true, DataSize: Sint16, Resolution: 0.5,
		PlusTolerance: 2, MinusTolerance: 2, Hysteresis: 4, SupportedThresholds: 7, UpdateInterval: 1,
		MaxReadable: 250, MinReadable: -80, RangeFormat: Sint16, RangeSupport: 0x2B,
		Nominal: 25, NormalMax: 60, WarningHigh: 70, CriticalHigh: 85, FatalHigh: 95,
	}
	pdrB = &StateSensorPDR{Handle: 2, TerminusHandle: 1, SensorID: 2, Entity: Entity{66, 1, 0},
		Composite: []PossibleStates{{SetID: 1, States: []byte{0x1E}}}}
	pdrC = &StateEffecterPDR{Handle: 3, TerminusHandle: 1, EffecterID: 3, Entity: Entity{45, 1, 0},
		Composite: []PossibleStates{{SetID: 17, States: []byte{0x06}}}}
	pdrD = &NumericEffecterPDR{
		Handle: 4, TerminusHandle: 1, EffecterID: 4, Entity: Entity{45, 1, 0}, Units: Units{Base: UnitWatts},
		IsLinear: true, DataSize: Uint16, Resolution: 1, TransitionInterval: 0.5, MaxSettable: 600, MinSettable: 100,
		RangeFormat: Uint16, RangeSupport: 0x19, Nominal: 450, RatedMax: 600, RatedMin: 100,
	}
)

// codec is what every payload and PDR type implements.
type codec interface {
	encoding.BinaryMarshaler
	encoding.BinaryUnmarshaler
}

// vector is one complete PLDM message of pldm.md §7.
type vector struct {
	name string
	msg  string
	hdr  Header
	// want is the decoded payload (after the completion code for
	// responses); nil for an empty payload. fresh returns a zero value of
	// its type.
	want  codec
	fresh func() codec
}

func req(iid uint8, t Type, c Command) Header {
	return Header{Request: true, InstanceID: iid, Type: t, Command: c}
}

func rsp(iid uint8, t Type, c Command) Header { return Header{InstanceID: iid, Type: t, Command: c} }

func messageVectors(tb testing.TB) []vector {
	pdrARaw := unhex(tb, pdrAHex)
	return []vector{
		{name: "TV1 GetTID req", msg: "81 00 02", hdr: req(1, TypeBase, CmdGetTID)},
		{name: "TV1 GetTID rsp", msg: "01 00 02 00 0A", hdr: rsp(1, TypeBase, CmdGetTID),
			want: &GetTIDResp{TID: 0x0A}, fresh: func() codec { return &GetTIDResp{} }},
		{name: "TV1 GetPLDMTypes req", msg: "82 00 04", hdr: req(2, TypeBase, CmdGetPLDMTypes)},
		{name: "TV1 GetPLDMTypes rsp", msg: "02 00 04 00 05 00 00 00 00 00 00 00", hdr: rsp(2, TypeBase, CmdGetPLDMTypes),
			want: &GetPLDMTypesResp{Types: TypesOf(TypeBase, TypePlatform)}, fresh: func() codec { return &GetPLDMTypesResp{} }},
		{name: "TV2 GetPLDMVersion req", msg: "83 00 03 00 00 00 00 01 02", hdr: req(3, TypeBase, CmdGetPLDMVersion),
			want: &GetPLDMVersionReq{Op: GetFirstPart, Type: TypePlatform}, fresh: func() codec { return &GetPLDMVersionReq{} }},
		{name: "TV2 GetPLDMVersion rsp", msg: "03 00 03 00 00 00 00 00 05 00 F0 F2 F1 79 ED B0 78", hdr: rsp(3, TypeBase, CmdGetPLDMVersion),
			want:  &GetPLDMVersionResp{Flag: TransferWhole, Versions: []Ver32{Version120}, CRC: true},
			fresh: func() codec { return &GetPLDMVersionResp{} }},
		{name: "TV3 GetPLDMCommands req", msg: "84 00 05 02 00 F0 F2 F1", hdr: req(4, TypeBase, CmdGetPLDMCommands),
			want: &GetPLDMCommandsReq{Type: TypePlatform, Version: Version120}, fresh: func() codec { return &GetPLDMCommandsReq{} }},
		{name: "TV3 GetPLDMCommands rsp", msg: "04 00 05 00 10 04 02 00 02 00 06 02 00 00 03" + zeros(21), hdr: rsp(4, TypeBase, CmdGetPLDMCommands),
			want: &GetPLDMCommandsResp{Commands: CommandsOf(CmdSetEventReceiver, CmdPlatformEventMessage, CmdGetSensorReading,
				CmdGetStateSensorReadings, CmdSetNumericEffecterValue, CmdGetNumericEffecterValue, CmdSetStateEffecterStates,
				CmdGetPDRRepositoryInfo, CmdGetPDR)},
			fresh: func() codec { return &GetPLDMCommandsResp{} }},
		{name: "TV4 GetPDRRepositoryInfo req", msg: "85 02 50", hdr: req(5, TypePlatform, CmdGetPDRRepositoryInfo)},
		{name: "TV4 GetPDRRepositoryInfo rsp", msg: "05 02 50 00 00" + zeros(26) + "04 00 00 00 CF 00 00 00 51 00 00 00 00",
			hdr:   rsp(5, TypePlatform, CmdGetPDRRepositoryInfo),
			want:  &GetPDRRepositoryInfoResp{RecordCount: 4, RepositorySize: 207, LargestRecordSize: 81},
			fresh: func() codec { return &GetPDRRepositoryInfoResp{} }},
		{name: "TV5 GetPDR req", msg: "86 02 51 03 00 00 00 00 00 00 00 01 FF 00 00 00", hdr: req(6, TypePlatform, CmdGetPDR),
			want: &GetPDRReq{RecordHandle: 3, Op: GetFirstPart, RequestCount: 255}, fresh: func() codec { return &GetPDRReq{} }},
		{name: "TV5 GetPDR rsp", msg: "06 02 51 00 04 00 00 00 00 00 00 00 05 1D 00" + pdrCHex, hdr: rsp(6, TypePlatform, CmdGetPDR),
			want:  &GetPDRResp{NextRecordHandle: 4, Flag: TransferWhole, Data: unhex(tb, pdrCHex)},
			fresh: func() codec { return &GetPDRResp{} }},
		{name: "TV6 GetPDR first req", msg: "87 02 51 01 00 00 00 00 00 00 00 01 40 00 00 00", hdr: req(7, TypePlatform, CmdGetPDR),
			want: &GetPDRReq{RecordHandle: 1, Op: GetFirstPart, RequestCount: 64}, fresh: func() codec { return &GetPDRReq{} }},
		{name: "TV6 GetPDR first rsp", msg: "07 02 51 00 02 00 00 00 40 00 00 00 00 40 00" + hex.EncodeToString(pdrARaw[:64]),
			hdr:   rsp(7, TypePlatform, CmdGetPDR),
			want:  &GetPDRResp{NextRecordHandle: 2, NextTransferHandle: 0x40, Flag: PDRStart, Data: pdrARaw[:64]},
			fresh: func() codec { return &GetPDRResp{} }},
		{name: "TV6 GetPDR next req", msg: "88 02 51 01 00 00 00 40 00 00 00 00 40 00 07 00", hdr: req(8, TypePlatform, CmdGetPDR),
			want:  &GetPDRReq{RecordHandle: 1, TransferHandle: 0x40, Op: GetNextPart, RequestCount: 64, ChangeNumber: 7},
			fresh: func() codec { return &GetPDRReq{} }},
		{name: "TV6 GetPDR end rsp", msg: "08 02 51 00 02 00 00 00 00 00 00 00 04 11 00 00 3C 00 00 00 46 00 00 00 55 00 00 00 5F 00 00 00 9F",
			hdr:   rsp(8, TypePlatform, CmdGetPDR),
			want:  &GetPDRResp{NextRecordHandle: 2, Flag: TransferEnd, Data: pdrARaw[64:], CRC: 0x9F},
			fresh: func() codec { return &GetPDRResp{} }},
		{name: "TV7 GetSensorReading req", msg: "89 02 11 01 00 00", hdr: req(9, TypePlatform, CmdGetSensorReading),
			want: &GetSensorReadingReq{SensorID: 1}, fresh: func() codec { return &GetSensorReadingReq{} }},
		{name: "TV7 GetSensorReading rsp", msg: "09 02 11 00 03 00 02 01 01 01 55 00", hdr: rsp(9, TypePlatform, CmdGetSensorReading),
			want: &GetSensorReadingResp{DataSize: Sint16, EventEnable: EventsEnabled, PresentState: StateNormal,
				PreviousState: StateNormal, EventState: StateNormal, Reading: 85},
			fresh: func() codec { return &GetSensorReadingResp{} }},
		{name: "TV8 GetStateSensorReadings req", msg: "8A 02 21 02 00 00 00", hdr: req(10, TypePlatform, CmdGetStateSensorReadings),
			want: &GetStateSensorReadingsReq{SensorID: 2}, fresh: func() codec { return &GetStateSensorReadingsReq{} }},
		{name: "TV8 GetStateSensorReadings rsp", msg: "0A 02 21 00 01 00 02 01 02", hdr: rsp(10, TypePlatform, CmdGetStateSensorReadings),
			want:  &GetStateSensorReadingsResp{Fields: []StateReading{{OpState: SensorEnabled, PresentState: 2, PreviousState: 1, EventState: 2}}},
			fresh: func() codec { return &GetStateSensorReadingsResp{} }},
		{name: "TV8 SetStateEffecterStates req", msg: "8B 02 39 03 00 01 01 02", hdr: req(11, TypePlatform, CmdSetStateEffecterStates),
			want:  &SetStateEffecterStatesReq{EffecterID: 3, Fields: []StateRequest{{Set: true, State: 2}}},
			fresh: func() codec { return &SetStateEffecterStatesReq{} }},
		{name: "TV8 SetStateEffecterStates rsp", msg: "0B 02 39 00", hdr: rsp(11, TypePlatform, CmdSetStateEffecterStates)},
		{name: "TV9 SetNumericEffecterValue req", msg: "8C 02 31 04 00 02 2C 01", hdr: req(12, TypePlatform, CmdSetNumericEffecterValue),
			want:  &SetNumericEffecterValueReq{EffecterID: 4, DataSize: Uint16, Value: 300},
			fresh: func() codec { return &SetNumericEffecterValueReq{} }},
		{name: "TV9 SetNumericEffecterValue rsp", msg: "0C 02 31 00", hdr: rsp(12, TypePlatform, CmdSetNumericEffecterValue)},
		{name: "TV9 GetNumericEffecterValue req", msg: "8D 02 32 04 00", hdr: req(13, TypePlatform, CmdGetNumericEffecterValue),
			want: &GetNumericEffecterValueReq{EffecterID: 4}, fresh: func() codec { return &GetNumericEffecterValueReq{} }},
		{name: "TV9 GetNumericEffecterValue rsp", msg: "0D 02 32 00 02 01 2C 01 2C 01", hdr: rsp(13, TypePlatform, CmdGetNumericEffecterValue),
			want:  &GetNumericEffecterValueResp{DataSize: Uint16, OpState: EffecterEnabledNoUpdatePending, Pending: 300, Present: 300},
			fresh: func() codec { return &GetNumericEffecterValueResp{} }},
		{name: "TV10 SetEventReceiver req", msg: "8E 02 04 01 00 08", hdr: req(14, TypePlatform, CmdSetEventReceiver),
			want:  &SetEventReceiverReq{Enable: EventReceiverAsync, Transport: TransportMCTP, Address: 8},
			fresh: func() codec { return &SetEventReceiverReq{} }},
		{name: "TV10 SetEventReceiver rsp", msg: "0E 02 04 00", hdr: rsp(14, TypePlatform, CmdSetEventReceiver)},
		{name: "TV10 SetEventReceiver keep-alive req", msg: "8F 02 04 03 00 08 3C 00", hdr: req(15, TypePlatform, CmdSetEventReceiver),
			want:  &SetEventReceiverReq{Enable: EventReceiverAsyncKeepAlive, Address: 8, Heartbeat: 60},
			fresh: func() codec { return &SetEventReceiverReq{} }},
		{name: "TV10 PlatformEventMessage numeric req", msg: "90 02 0A 01 0A 00 01 00 02 08 01 03 8E 00", hdr: req(16, TypePlatform, CmdPlatformEventMessage),
			want:  &PlatformEventMessageReq{FormatVersion: 1, TID: 0x0A, Class: EventClassSensor, Data: unhex(tb, "01 00 02 08 01 03 8E 00")},
			fresh: func() codec { return &PlatformEventMessageReq{} }},
		{name: "TV10 PlatformEventMessage rsp", msg: "10 02 0A 00 00", hdr: rsp(16, TypePlatform, CmdPlatformEventMessage),
			want: &PlatformEventMessageResp{Status: EventNoLogging}, fresh: func() codec { return &PlatformEventMessageResp{} }},
		{name: "TV10 PlatformEventMessage state req", msg: "91 02 0A 01 0A 00 02 00 01 00 02 01", hdr: req(17, TypePlatform, CmdPlatformEventMessage),
			want:  &PlatformEventMessageReq{FormatVersion: 1, TID: 0x0A, Class: EventClassSensor, Data: unhex(tb, "02 00 01 00 02 01")},
			fresh: func() codec { return &PlatformEventMessageReq{} }},
	}
}

func TestMessageVectors(t *testing.T) {
	for _, v := range messageVectors(t) {
		t.Run(v.name, func(t *testing.T) {
			msg := unhex(t, v.msg)
			h, err := ParseHeader(msg)
			if err != nil {
				t.Fatalf("ParseHeader: %v", err)
			}
			if diff := cmp.Diff(v.hdr, h); diff != "" {
				t.Fatalf("header mismatch (-want +got):\n%s", diff)
			}
			payload := msg[HeaderLen:]
			if !h.Request {
				if payload, err = ParseResponse(msg, Header{Request: true, InstanceID: h.InstanceID, Type: h.Type, Command: h.Command}); err != nil {
					t.Fatalf("ParseResponse: %v", err)
				}
			}
			var enc []byte
			if v.want == nil {
				if len(payload) != 0 {
					t.Fatalf("payload: got %x, want none", payload)
				}
			} else {
				got := v.fresh()
				if err := got.UnmarshalBinary(payload); err != nil {
					t.Fatalf("UnmarshalBinary: %v", err)
				}
				if diff := cmp.Diff(v.want, got); diff != "" {
					t.Fatalf("decoded payload mismatch (-want +got):\n%s", diff)
				}
				if enc, err = v.want.MarshalBinary(); err != nil {
					t.Fatalf("MarshalBinary: %v", err)
				}
			}
			var out []byte
			if h.Request {
				out = EncodeRequest(h.InstanceID, h.Type, h.Command, enc)
			} else {
				out = EncodeResponse(Header{Request: true, InstanceID: h.InstanceID, Type: h.Type, Command: h.Command}, CCSuccess, enc)
			}
			if diff := cmp.Diff(msg, out); diff != "" {
				t.Fatalf("encoded message mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSensorEventVectors(t *testing.T) {
	tests := []struct {
		name string
		data string
		want SensorEvent
	}{
		{"TV10 numeric upperWarning", "01 00 02 08 01 03 8E 00",
			SensorEvent{SensorID: 1, Class: NumericSensorEvent, State: uint8(StateUpperWarning), PreviousState: uint8(StateNormal), DataSize: Sint16, Reading: 142}},
		{"TV10 state Non-Critical", "02 00 01 00 02 01",
			SensorEvent{SensorID: 2, Class: StateSensorEvent, Offset: 0, State: 2, PreviousState: 1}},
		{"op state", "05 00 00 04 00",
			SensorEvent{SensorID: 5, Class: SensorOpStateEvent, OpState: SensorFailed, PreviousOpState: SensorEnabled}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got SensorEvent
			if err := got.UnmarshalBinary(unhex(t, tt.data)); err != nil {
				t.Fatalf("UnmarshalBinary: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("mismatch (-want +got):\n%s", diff)
			}
			b, err := tt.want.MarshalBinary()
			if err != nil {
				t.Fatalf("MarshalBinary: %v", err)
			}
			if diff := cmp.Diff(unhex(t, tt.data), b); diff != "" {
				t.Fatalf("encoding mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPDRVectors(t *testing.T) {
	tests := []struct {
		name string
		hex  string
		want PDR
	}{
		{"PDR-A numeric sensor", pdrAHex, pdrA},
		{"PDR-B state sensor", pdrBHex, pdrB},
		{"PDR-C state effecter", pdrCHex, pdrC},
		{"PDR-D numeric effecter", pdrDHex, pdrD},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := unhex(t, tt.hex)
			got, err := ParsePDR(raw)
			if err != nil {
				t.Fatalf("ParsePDR: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("decoded PDR mismatch (-want +got):\n%s", diff)
			}
			h, _ := ParsePDRHeader(raw)
			if diff := cmp.Diff(h, tt.want.Header()); diff != "" {
				t.Fatalf("Header() mismatch (-wire +computed):\n%s", diff)
			}
			b, err := tt.want.MarshalBinary()
			if err != nil {
				t.Fatalf("MarshalBinary: %v", err)
			}
			if diff := cmp.Diff(raw, b); diff != "" {
				t.Fatalf("encoding mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCRCVectors(t *testing.T) {
	if got, want := CRC8(unhex(t, pdrAHex)), uint8(0x9F); got != want {
		t.Errorf("CRC8(PDR-A): got %#02x, want %#02x", got, want)
	}
	if got, want := CRC32(unhex(t, "00 F0 F2 F1")), uint32(0x78B0ED79); got != want {
		t.Errorf("CRC32(1.2.0): got %#08x, want %#08x", got, want)
	}
}

func TestConversions(t *testing.T) {
	rail := &NumericSensorPDR{Units: Units{Base: UnitVolts, Modifier: -3}, Resolution: 1}
	tests := []struct {
		name string
		got  float64
		want float64
	}{
		{"PDR-A raw 85 = 42.5 °C", pdrA.Value(85), 42.5},
		{"PDR-A raw 142 = 71 °C", pdrA.Value(142), 71},
		{"PDR-A maxReadable 250 = 125 °C", pdrA.Value(pdrA.MaxReadable), 125},
		{"PDR-A minReadable -80 = -40 °C", pdrA.Value(pdrA.MinReadable), -40},
		{"PDR-A hysteresis 4 = 2 °C", pdrA.Delta(pdrA.Hysteresis), 2},
		{"PDR-A warningHigh is engineering units", pdrA.Threshold(pdrA.WarningHigh), 70},
		{"12 V rail raw 12034", rail.Value(12034), 12.034},
		{"PDR-D raw 300 = 300 W", pdrD.Value(300), 300},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	raws := []struct {
		v    float64
		want int64
	}{{300, 300}, {299.6, 300}, {50, 100}, {1000, 600}}
	for _, r := range raws {
		got, err := pdrD.Raw(r.v)
		if err != nil || got != r.want {
			t.Errorf("PDR-D Raw(%v): got %d, %v, want %d", r.v, got, err, r.want)
		}
	}
}

func TestVersionString(t *testing.T) {
	tests := []struct {
		v    Ver32
		want string
	}{
		{Version120, "1.2.0"},
		{NewVer32(1, 2, 0), "1.2.0"},
		{NewVer32(1, 13, 2), "1.13.2"},
		{0xF1F0FF00, "1.0"},
		{0xF1F3F061, "1.3.0a"},
		{0xFFFFFFFF, "0xffffffff"},
	}
	for _, tt := range tests {
		if got := tt.v.String(); got != tt.want {
			t.Errorf("Ver32(%#08x).String(): got %q, want %q", uint32(tt.v), got, tt.want)
		}
	}
	if NewVer32(1, 2, 0) != Version120 {
		t.Errorf("NewVer32(1, 2, 0): got %#08x, want %#08x", uint32(NewVer32(1, 2, 0)), uint32(Version120))
	}
}
