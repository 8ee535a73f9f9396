package cci

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func sampleDCEvent() DCEvent {
	return DCEvent{
		Type:        DCEventAddResponse,
		Validity:    DCEventValidAvailable,
		HostID:      3,
		RegionIndex: 1,
		More:        true,
		Extent: Extent{
			DPA: 0x1_0000_0000, Length: 0x1000_0000, Tag: testTag(0x40), SharedSeq: 2,
		},
		AvailableExtents: 500,
		AvailableTags:    77,
	}
}

func eventSamples() []roundTripCase {
	rec := sampleDCEvent().Record(7, 1_700_000_000_000_000_000)
	link := LinkEvent{Port: 4, Type: LinkEventLinkStateChange, LinkUp: true}.Record(8, 42)
	warn := EventRecord{
		UUID: VirtualSwitchEventUUID, Length: EventRecordLen,
		Flags:  EventSeverityWarning | EventFlagLDIDValid | EventFlagHeadIDValid | EventFlagPermanent,
		Handle: 0xfffe, RelatedHandle: 0x0102, Timestamp: 0x1122334455667788,
		MaintOpClass: 1, MaintOpSubclass: 2, LDID: 0x0203, HeadID: 5,
	}
	for i := range warn.Data {
		warn.Data[i] = byte(i * 3)
	}
	return []roundTripCase{
		{name: "dc record", v: &rec},
		{name: "custom record", v: &warn},
		{name: "dc log", v: &GetEventRecordsReq{Log: EventLogDC}},
		{name: "empty", v: &GetEventRecordsResp{}},
		{name: "two records", v: &GetEventRecordsResp{
			Overflow: true, More: true, OverflowCount: 3, FirstOverflow: 100, LastOverflow: 200,
			Records: []EventRecord{rec, link},
		}},
		{name: "handles", v: &ClearEventRecordsReq{Log: EventLogDC, Handles: []uint16{7, 8, 0x1234}}},
		{name: "clear all", v: &ClearEventRecordsReq{Log: EventLogWarning, ClearAll: true}},
		{name: "policy", v: &EventInterruptPolicy{Mask: PolicyDC | PolicyBGDone | PolicyFatal}},
	}
}

func TestEventsRoundTrip(t *testing.T) { runRoundTrip(t, eventSamples()) }

func TestEventsGolden(t *testing.T) {
	runGolden(t, []goldenCase{
		{name: "V10", want: &ClearEventRecordsReq{Log: EventLogDC, Handles: []uint16{7}}, hex: "04 00 01 00 00 00 07 00"},
		{name: "V9 payload", want: &GetEventRecordsReq{Log: EventLogDC}, hex: "04"},
		{name: "policy", want: &EventInterruptPolicy{Mask: PolicyDC | PolicyBGDone}, hex: "10 80"},
	})
}

// TestDCEventRecordLayout checks the DC event record byte by byte against
// cxl-wire.md §2.4 and §4.3.
func TestDCEventRecordLayout(t *testing.T) {
	e := sampleDCEvent()
	r := e.Record(0x0007, 0x0102030405060708)
	b, err := r.MarshalBinary()
	if err != nil {
		t.Fatalf("MarshalBinary: got error %v, want nil", err)
	}
	want := make([]byte, EventRecordLen)
	copy(want[0x00:], DCEventUUID[:])
	want[0x10] = 0x80                                                         // length
	copy(want[0x14:], []byte{0x07, 0x00})                                     // handle
	copy(want[0x18:], []byte{0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01}) // timestamp
	want[0x30] = DCEventAddResponse
	want[0x31] = 0x01                     // validity
	copy(want[0x32:], []byte{0x03, 0x00}) // host ID
	want[0x34] = 1                        // region index
	want[0x35] = 1                        // More
	copy(want[0x38:], e.Extent.AppendBinary(nil))
	copy(want[0x78:], []byte{0xf4, 0x01, 0, 0}) // 500 extents
	copy(want[0x7c:], []byte{77, 0, 0, 0})
	if diff := cmp.Diff(want, b); diff != "" {
		t.Errorf("record bytes mismatch (-want +got):\n%s", diff)
	}

	var dec EventRecord
	if err := dec.UnmarshalBinary(b); err != nil {
		t.Fatalf("UnmarshalBinary: got error %v, want nil", err)
	}
	got, err := ParseDCEvent(dec)
	if err != nil {
		t.Fatalf("ParseDCEvent: got error %v, want nil", err)
	}
	if diff := cmp.Diff(e, got); diff != "" {
		t.Errorf("ParseDCEvent mismatch (-want +got):\n%s", diff)
	}
}

func TestLinkEvent(t *testing.T) {
	for _, up := range []bool{false, true} {
		e := LinkEvent{Port: 6, Type: LinkEventLinkStateChange, LinkUp: up}
		r := e.Record(9, 1234)
		b, err := r.MarshalBinary()
		if err != nil {
			t.Fatalf("MarshalBinary: got error %v, want nil", err)
		}
		if got, want := b[0x30], byte(6); got != want {
			t.Errorf("port byte 30h: got %d, want %d", got, want)
		}
		if got, want := b[0x7f], b2u(up); got != want {
			t.Errorf("link-up byte 7Fh: got %d, want %d", got, want)
		}
		var dec EventRecord
		if err := dec.UnmarshalBinary(b); err != nil {
			t.Fatalf("UnmarshalBinary: got error %v, want nil", err)
		}
		got, err := ParseLinkEvent(dec)
		if err != nil {
			t.Fatalf("ParseLinkEvent: got error %v, want nil", err)
		}
		if diff := cmp.Diff(e, got); diff != "" {
			t.Errorf("ParseLinkEvent mismatch (-want +got):\n%s", diff)
		}
	}
}

func TestTypedEventWrongUUID(t *testing.T) {
	link := LinkEvent{Port: 1}.Record(1, 1)
	if _, err := ParseDCEvent(link); !errors.Is(err, ErrEventUUID) {
		t.Errorf("ParseDCEvent(link record): got error %v, want ErrEventUUID", err)
	}
	dc := sampleDCEvent().Record(1, 1)
	if _, err := ParseLinkEvent(dc); !errors.Is(err, ErrEventUUID) {
		t.Errorf("ParseLinkEvent(dc record): got error %v, want ErrEventUUID", err)
	}
}

func TestEventDecodeErrors(t *testing.T) {
	hdr := make([]byte, 0x20)
	hdr[0x14] = 2 // two records announced
	oneRecord := append(append([]byte(nil), hdr...), make([]byte, EventRecordLen)...)
	clearShort := []byte{4, 0, 3, 0, 0, 0, 7, 0} // three handles announced, one present
	clearLong := []byte{4, 0, 1, 0, 0, 0, 7, 0, 8, 0}
	tests := []struct {
		name string
		v    codec
		b    []byte
	}{
		{"records count exceeds payload", &GetEventRecordsResp{}, oneRecord},
		{"handles count exceeds payload", &ClearEventRecordsReq{}, clearShort},
		{"handles fewer than payload", &ClearEventRecordsReq{}, clearLong},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.v.UnmarshalBinary(tc.b); !errors.Is(err, ErrPayloadLength) {
				t.Errorf("UnmarshalBinary: got error %v, want ErrPayloadLength", err)
			}
		})
	}
}

func TestEventMarshalErrors(t *testing.T) {
	tests := []struct {
		name string
		v    codec
	}{
		{"flags beyond 24 bits", &EventRecord{Flags: 1 << 24}},
		{"record with bad flags in response", &GetEventRecordsResp{Records: []EventRecord{{Flags: 1 << 30}}}},
		{"too many handles", &ClearEventRecordsReq{Handles: make([]uint16, 256)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.v.MarshalBinary(); err == nil {
				t.Errorf("MarshalBinary: got nil error, want an error")
			}
		})
	}
}

func FuzzEvents(f *testing.F) {
	samples := eventSamples()
	seedCodecs(f, samples)
	f.Add(unhex(f, "04 00 01 00 00 00 07 00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzDecoders(t, data, protos(samples))
		var r EventRecord
		if r.UnmarshalBinary(data) != nil {
			return
		}
		if e, err := ParseDCEvent(r); err == nil {
			got, err := ParseDCEvent(e.Record(r.Handle, r.Timestamp))
			if err != nil {
				t.Fatalf("ParseDCEvent of a rebuilt record: got error %v, want nil", err)
			}
			if diff := cmp.Diff(e, got); diff != "" {
				t.Errorf("DC event changed through Record (-first +second):\n%s", diff)
			}
		}
		if e, err := ParseLinkEvent(r); err == nil {
			got, err := ParseLinkEvent(e.Record(r.Handle, r.Timestamp))
			if err != nil {
				t.Fatalf("ParseLinkEvent of a rebuilt record: got error %v, want nil", err)
			}
			if diff := cmp.Diff(e, got); diff != "" {
				t.Errorf("link event changed through Record (-first +second):\n%s", diff)
			}
		}
	})
}
