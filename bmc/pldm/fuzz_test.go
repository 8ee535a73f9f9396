package pldm

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// codecPtr is *T implementing codec.
type codecPtr[T any] interface {
	*T
	codec
}

// vectorPayloads returns the payloads of the spec vectors that decode into
// *T, to seed a fuzz target.
func vectorPayloads[T any, P codecPtr[T]](tb testing.TB) [][]byte {
	var out [][]byte
	for _, v := range messageVectors(tb) {
		if v.fresh == nil {
			continue
		}
		if _, ok := v.fresh().(P); !ok {
			continue
		}
		msg := unhex(tb, v.msg)
		p := msg[HeaderLen:]
		if !v.hdr.Request {
			p = p[1:] // completion code
		}
		out = append(out, p)
	}
	return out
}

// fuzzCodec checks that decoding never panics and that whatever decodes
// re-encodes to something that decodes to the same value.
func fuzzCodec[T any, P codecPtr[T]](f *testing.F, extra ...[]byte) {
	for _, s := range append(vectorPayloads[T, P](f), extra...) {
		f.Add(s)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var x T
		if err := P(&x).UnmarshalBinary(b); err != nil {
			if !errors.Is(err, ErrLength) && !errors.Is(err, ErrInvalid) {
				t.Fatalf("decode error %v wraps neither ErrLength nor ErrInvalid", err)
			}
			return
		}
		enc, err := P(&x).MarshalBinary()
		if err != nil {
			t.Fatalf("re-encoding %+v (from %x): %v", x, b, err)
		}
		var y T
		if err := P(&y).UnmarshalBinary(enc); err != nil {
			t.Fatalf("decoding re-encoded %x: %v", enc, err)
		}
		if diff := cmp.Diff(x, y, cmpopts.EquateNaNs()); diff != "" {
			t.Fatalf("round trip mismatch (-first +second):\n%s", diff)
		}
	})
}

func FuzzGetTIDResp(f *testing.F)              { fuzzCodec[GetTIDResp](f) }
func FuzzGetPLDMVersionReq(f *testing.F)       { fuzzCodec[GetPLDMVersionReq](f) }
func FuzzGetPLDMTypesResp(f *testing.F)        { fuzzCodec[GetPLDMTypesResp](f) }
func FuzzGetPLDMCommandsReq(f *testing.F)      { fuzzCodec[GetPLDMCommandsReq](f) }
func FuzzGetPLDMCommandsResp(f *testing.F)     { fuzzCodec[GetPLDMCommandsResp](f) }
func FuzzSetEventReceiverReq(f *testing.F)     { fuzzCodec[SetEventReceiverReq](f) }
func FuzzPlatformEventMessageReq(f *testing.F) { fuzzCodec[PlatformEventMessageReq](f) }
func FuzzPlatformEventMessageResp(f *testing.F) {
	fuzzCodec[PlatformEventMessageResp](f)
}
func FuzzGetSensorReadingReq(f *testing.F)       { fuzzCodec[GetSensorReadingReq](f) }
func FuzzGetSensorReadingResp(f *testing.F)      { fuzzCodec[GetSensorReadingResp](f) }
func FuzzGetStateSensorReadingsReq(f *testing.F) { fuzzCodec[GetStateSensorReadingsReq](f) }
func FuzzGetStateSensorReadingsResp(f *testing.F) {
	fuzzCodec[GetStateSensorReadingsResp](f)
}
func FuzzSetNumericEffecterValueReq(f *testing.F) { fuzzCodec[SetNumericEffecterValueReq](f) }
func FuzzGetNumericEffecterValueReq(f *testing.F) { fuzzCodec[GetNumericEffecterValueReq](f) }
func FuzzGetNumericEffecterValueResp(f *testing.F) {
	fuzzCodec[GetNumericEffecterValueResp](f)
}
func FuzzSetStateEffecterStatesReq(f *testing.F) { fuzzCodec[SetStateEffecterStatesReq](f) }
func FuzzGetPDRRepositoryInfoResp(f *testing.F)  { fuzzCodec[GetPDRRepositoryInfoResp](f) }
func FuzzGetPDRReq(f *testing.F)                 { fuzzCodec[GetPDRReq](f) }
func FuzzGetPDRResp(f *testing.F)                { fuzzCodec[GetPDRResp](f) }

func FuzzGetPLDMVersionResp(f *testing.F) {
	// Without CRC (openbmc's responder) and two versions.
	fuzzCodec[GetPLDMVersionResp](f, unhex(f, "00 00 00 00 05 00 F0 F2 F1"), unhex(f, "00 00 00 00 05 00 F0 F2 F1 00 F0 F1 F1"))
}

func FuzzSensorEvent(f *testing.F) {
	fuzzCodec[SensorEvent](f, unhex(f, "01 00 02 08 01 03 8E 00"), unhex(f, "02 00 01 00 02 01"), unhex(f, "05 00 00 04 00"),
		unhex(f, "07 00 02 09 08 05 01 02 03 04"))
}

func FuzzParseHeader(f *testing.F) {
	for _, v := range messageVectors(f) {
		f.Add(unhex(f, v.msg))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHeader(b)
		if err != nil {
			return
		}
		got, err := ParseHeader(h.Append(nil))
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		if diff := cmp.Diff(h, got); diff != "" {
			t.Fatalf("round trip mismatch (-first +second):\n%s", diff)
		}
		_, _ = ParseResponse(b, Header{Request: true, InstanceID: h.InstanceID, Type: h.Type, Command: h.Command})
	})
}

func FuzzParsePDR(f *testing.F) {
	for _, s := range []string{pdrAHex, pdrBHex, pdrCHex, pdrDHex} {
		f.Add(unhex(f, s))
	}
	names := &AuxNamesPDR{Handle: 9, TerminusHandle: 1, ID: 1, Names: [][]AuxName{{{"en", "Inlet Temp"}, {"de", "Einlass"}}}}
	b, err := names.MarshalBinary()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePDR(b)
		if err != nil {
			if !errors.Is(err, ErrLength) && !errors.Is(err, ErrInvalid) {
				t.Fatalf("decode error %v wraps neither ErrLength nor ErrInvalid", err)
			}
			return
		}
		enc, err := p.MarshalBinary()
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", p, err)
		}
		h, _ := ParsePDRHeader(enc)
		if diff := cmp.Diff(h, p.Header()); diff != "" {
			t.Fatalf("Header() disagrees with the encoding (-wire +computed):\n%s", diff)
		}
		q, err := ParsePDR(enc)
		if err != nil {
			t.Fatalf("decoding re-encoded %x: %v", enc, err)
		}
		if diff := cmp.Diff(p, q, cmpopts.EquateNaNs()); diff != "" {
			t.Fatalf("round trip mismatch (-first +second):\n%s", diff)
		}
	})
}
