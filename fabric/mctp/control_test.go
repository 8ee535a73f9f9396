package mctp

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Golden control messages, derived from the DSP0236 layouts as restated in
// control.go (byte 0 = Rq|D|Instance ID, byte 1 = command, byte 2 = cc).
// Bytes shown exclude the MCTP message type byte 00h. Responder: EID 09h,
// advertising types 07h and 08h.
func TestControlResponderGolden(t *testing.T) {
	c := controlResponder{eid: 0x09, types: controlTypes([]MsgType{MsgTypeFMAPI, MsgTypeCXLCCI, MsgTypeFMAPI})}
	tests := []struct {
		name     string
		req      string
		resp     string // "" = no response
		wantResp bool
	}{
		// Get Endpoint ID, instance 5: cc 0, EID 09, simple endpoint with
		// static EID support (01h), medium-specific 0.
		{"get endpoint id", "85 02", "05 02 00 09 01 00", true},
		// Get MCTP Version Support for the base spec: one entry, 1.3.1.
		{"version support base", "81 04 ff", "01 04 00 01 f1 f3 f1 00", true},
		{"version support control", "9f 04 00", "1f 04 00 01 f1 f3 f1 00", true},
		{"version support CCI type", "82 04 08", "02 04 80", true},
		{"version support no data", "82 04", "02 04 03", true},
		// Get Message Type Support: control plus the configured types.
		{"message type support", "83 05", "03 05 00 03 00 07 08", true},
		{"unsupported command", "84 0a", "04 0a 05", true},
		{"set endpoint id unsupported", "84 01 00 10", "04 01 05", true},
		{"instance id bits only echoed", "a6 02", "06 02 00 09 01 00", true},
		{"datagram gets no response", "c5 02", "", false},
		{"response is not answered", "05 02 00", "", false},
		{"too short", "85", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, ok := c.respond(unhex(t, tc.req))
			if ok != tc.wantResp {
				t.Fatalf("respond: ok = %v, want %v", ok, tc.wantResp)
			}
			if !ok {
				return
			}
			if diff := cmp.Diff(unhex(t, tc.resp), resp); diff != "" {
				t.Errorf("response (-want +got):\n%s", diff)
			}
		})
	}
}

func TestControlHeaderRoundTrip(t *testing.T) {
	for _, h := range []ControlHeader{
		{Request: true, InstanceID: 0x1F, Command: CmdGetEndpointID},
		{Datagram: true, InstanceID: 3, Command: 0xF0},
		{},
	} {
		b := h.Append(nil)
		got, err := ParseControlHeader(b)
		if err != nil {
			t.Fatalf("ParseControlHeader(%x): %v", b, err)
		}
		if diff := cmp.Diff(h, got); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
	}
	if _, err := ParseControlHeader([]byte{0x80}); !errors.Is(err, ErrMalformed) {
		t.Errorf("short header: got %v, want ErrMalformed", err)
	}
}

func TestParseControlResponse(t *testing.T) {
	tests := []struct {
		name     string
		resp     string
		wantData string
		wantErr  error
	}{
		{"success", "07 02 00 09 01 00", "09 01 00", nil},
		{"completion code", "07 02 05", "", CCUnsupportedCmd},
		{"wrong instance", "08 02 00 09", "", ErrMalformed},
		{"wrong command", "07 05 00", "", ErrMalformed},
		{"request bit set", "87 02 00", "", ErrMalformed},
		{"no completion code", "07 02", "", ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data, err := parseControlResponse(unhex(t, tc.resp), 7, CmdGetEndpointID)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("got error %v, want %v", err, tc.wantErr)
			}
			if err == nil {
				if diff := cmp.Diff(unhex(t, tc.wantData), data); diff != "" {
					t.Errorf("data (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestCompletionCodeError(t *testing.T) {
	var err error = CCUnsupportedCmd
	if got, want := err.Error(), "mctp control: unsupported command"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := CompletionCode(0x99).Error(), "mctp control: completion code 0x99"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
