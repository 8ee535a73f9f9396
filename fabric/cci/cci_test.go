package cci

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestMessageVectors checks the full-message vectors: V2 and V3 are CCI
// messages; V1, V4 and V9 are MCTP bodies (type byte + CCI message).
func TestMessageVectors(t *testing.T) {
	tests := []struct {
		name     string
		hex      string
		mctpType int // -1 when hex is a bare CCI message
		want     Message
		payload  codec // typed view of the payload, nil if empty
	}{
		{
			name: "V1 identify request", hex: "08 00 01 00 01 00 00 00 00 00 00 00 00", mctpType: 0x08,
			want: Message{Category: Request, Tag: 0x01, Opcode: OpIdentify},
		},
		{
			name: "V2 identify response",
			hex:  "01 01 00 01 00 12 00 00 00 00 00 00 98 1e 93 0d 00 00 00 00 ef cd ab 89 67 45 23 01 09 03", mctpType: -1,
			want: Message{Category: Response, Tag: 0x01, Opcode: OpIdentify,
				Payload: unhex(t, "98 1e 93 0d 00 00 00 00 ef cd ab 89 67 45 23 01 09 03")},
			payload: &IdentifyResp{VendorID: 0x1e98, DeviceID: 0x0d93, Serial: 0x0123456789abcdef,
				MaxMessageSizeExp: 9, ComponentType: ComponentType3},
		},
		{
			name: "V3 bind vppb background started", hex: "01 22 00 01 52 00 00 80 01 00 00 00", mctpType: -1,
			want: Message{Category: Response, Tag: 0x22, Opcode: OpBindVPPB, BO: true, ReturnCode: BackgroundCommandStarted},
		},
		{
			name: "V4 get dcd info request", hex: "07 00 05 00 00 56 00 00 00 00 00 00 00", mctpType: 0x07,
			want: Message{Category: Request, Tag: 0x05, Opcode: OpGetDCDInfo},
		},
		{
			name: "V9 get event records dc log", hex: "08 00 07 00 00 01 01 00 00 00 00 00 00 04", mctpType: 0x08,
			want:    Message{Category: Request, Tag: 0x07, Opcode: OpGetEventRecords, Payload: []byte{0x04}},
			payload: &GetEventRecordsReq{Log: EventLogDC},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wire := unhex(t, tc.hex)
			cciBytes := wire
			if tc.mctpType >= 0 {
				if got := wire[0]; int(got) != tc.mctpType {
					t.Fatalf("MCTP type byte: got %02xh, want %02xh", got, tc.mctpType)
				}
				if got := tc.want.Opcode.MCTPType(); int(got) != tc.mctpType {
					t.Errorf("%v.MCTPType(): got %02xh, want %02xh", tc.want.Opcode, got, tc.mctpType)
				}
				cciBytes = wire[1:]
			}
			m, err := ParseMessage(cciBytes)
			if err != nil {
				t.Fatalf("ParseMessage: got error %v, want nil", err)
			}
			if diff := cmp.Diff(tc.want, m, cmp.Comparer(func(a, b []byte) bool { return string(a) == string(b) })); diff != "" {
				t.Errorf("ParseMessage mismatch (-want +got):\n%s", diff)
			}
			want := tc.want
			if tc.payload != nil {
				dec := zeroOf(tc.payload)
				if err := dec.UnmarshalBinary(m.Payload); err != nil {
					t.Fatalf("payload UnmarshalBinary: got error %v, want nil", err)
				}
				if diff := cmp.Diff(tc.payload, dec); diff != "" {
					t.Errorf("payload mismatch (-want +got):\n%s", diff)
				}
				// Build the message from the typed payload.
				if want.Payload, err = tc.payload.MarshalBinary(); err != nil {
					t.Fatalf("payload MarshalBinary: got error %v, want nil", err)
				}
			}
			got, err := want.MarshalBinary()
			if err != nil {
				t.Fatalf("Message.MarshalBinary: got error %v, want nil", err)
			}
			if diff := cmp.Diff(cciBytes, got); diff != "" {
				t.Errorf("Message.MarshalBinary bytes mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseMessageErrors(t *testing.T) {
	tests := []struct {
		name string
		hex  string
	}{
		{"empty", ""},
		{"short header", "01 01 00 01 00 12 00 00 00 00 00"},
		{"length larger than payload", "01 01 00 01 00 02 00 00 00 00 00 00 ff"},
		{"length smaller than payload", "01 01 00 01 00 00 00 00 00 00 00 00 ff"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseMessage(unhex(t, tc.hex)); !errors.Is(err, ErrPayloadLength) {
				t.Errorf("ParseMessage: got error %v, want ErrPayloadLength", err)
			}
		})
	}
}

// TestUUIDConstants checks the byte arrays against the UUID strings of
// cxl-wire.md.
func TestUUIDConstants(t *testing.T) {
	tests := []struct {
		name string
		got  [16]byte
		want string
	}{
		{"DC event", DCEventUUID, "ca95afa7-f183-4018-8c2f-95268e101a2a"},
		{"physical switch", PhysicalSwitchEventUUID, "77cf9271-9c02-470b-9fe4-bc7b75f2da97"},
		{"virtual switch", VirtualSwitchEventUUID, "40d26425-3396-4c4d-a5da-3d47263af425"},
		{"MLD port", MLDPortEventUUID, "8dc44363-0c96-4710-b7bf-04bb99534c3f"},
		{"CEL", CELUUID, "0da9c0b5-bf41-4b78-8f79-96b1623b3f17"},
	}
	for _, tc := range tests {
		if got := Tag(tc.got).String(); got != tc.want {
			t.Errorf("%s UUID: got %s, want %s", tc.name, got, tc.want)
		}
	}
	// cxl-wire.md §4.3 spells out the DC event UUID wire bytes.
	if diff := cmp.Diff(unhex(t, "ca 95 af a7 f1 83 40 18 8c 2f 95 26 8e 10 1a 2a"), DCEventUUID[:]); diff != "" {
		t.Errorf("DC event UUID bytes mismatch (-want +got):\n%s", diff)
	}
}

// FuzzParseMessage checks that ParseMessage never panics, that what it
// accepts re-encodes to an equal message, and that the typed payload
// decoders for the message's opcode and category behave.
func FuzzParseMessage(f *testing.F) {
	for _, s := range []string{
		"01 01 00 01 00 12 00 00 00 00 00 00 98 1e 93 0d 00 00 00 00 ef cd ab 89 67 45 23 01 09 03",
		"01 22 00 01 52 00 00 80 01 00 00 00",
		"00 01 00 01 00 00 00 00 00 00 00 00",
		"00 05 00 00 56 00 00 00 00 00 00 00",
		"00 07 00 00 01 01 00 00 00 00 00 00 04",
		"00 09 00 02 48 20 00 00 00 00 00 00 01 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 00 00 10 00 00 00 00 00 00 00 00 00 00 00 00",
		"00 0a 00 01 52 06 00 00 00 00 00 00 00 01 04 00 ff ff",
	} {
		f.Add(unhex(f, s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseMessage(data)
		if err != nil {
			if !errors.Is(err, ErrPayloadLength) {
				t.Fatalf("ParseMessage: error %v does not wrap ErrPayloadLength", err)
			}
			return
		}
		b, err := m.MarshalBinary()
		if err != nil {
			t.Fatalf("MarshalBinary of a parsed message: got error %v, want nil", err)
		}
		m2, err := ParseMessage(b)
		if err != nil {
			t.Fatalf("ParseMessage of the re-encoding: got error %v, want nil", err)
		}
		if diff := cmp.Diff(m, m2); diff != "" {
			t.Fatalf("re-encoding changed the message (-first +second):\n%s", diff)
		}
		var dec codec
		switch m.Category {
		case Request:
			dec = requestCodec(m.Opcode)
		case Response:
			dec = responseCodec(m.Opcode)
		}
		if dec != nil {
			fuzzDecoders(t, m.Payload, []codec{dec})
		}
	})
}
