package fm

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/fabric/cci"
	"cxlpool/fabric/mctp"
)

// peer is a second endpoint on the device link (as the board controller
// is, at its own EID), for the tests of requests that are not CCI.
func newPeer(t *testing.T, cfg Config, peerHandler mctp.Handler) (*Client, *mctp.Endpoint) {
	t.Helper()
	a, b := mctp.Pipe()
	peer := mctp.NewEndpoint(b, mctp.Config{EID: 9, MessageTypes: []mctp.MsgType{mctp.MsgTypePLDM}}, peerHandler)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = peer.Run(ctx)
	}()
	cfg.PollInterval = time.Hour
	c, err := Open(ctx, a, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		cancel()
		<-done
	})
	return c, peer
}

func TestHandlerServesOtherMessageTypes(t *testing.T) {
	type call struct {
		Src mctp.EID
		Typ mctp.MsgType
		Msg string
	}
	calls := make(chan call, 4)
	handler := func(ctx context.Context, src mctp.EID, typ mctp.MsgType, msg []byte) ([]byte, bool) {
		if ctx == nil {
			t.Error("handler got a nil context")
		}
		calls <- call{src, typ, string(msg)}
		return append([]byte("re:"), msg...), true
	}
	tests := []struct {
		name      string
		handler   mctp.Handler
		wantTypes []mctp.MsgType
		wantReply string // "" = no answer (the request times out)
	}{
		{"with handler", handler, []mctp.MsgType{mctp.MsgTypeControl, mctp.MsgTypeCXLCCI, mctp.MsgTypePLDM}, "re:ping"},
		{"without handler", nil, []mctp.MsgType{mctp.MsgTypeControl, mctp.MsgTypeCXLCCI}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, peer := newPeer(t, Config{Handler: tc.handler}, nil)
			ctx := context.Background()
			types, err := peer.GetMessageTypeSupport(ctx, DefaultEID)
			if err != nil {
				t.Fatalf("GetMessageTypeSupport: %v", err)
			}
			if diff := cmp.Diff(tc.wantTypes, types); diff != "" {
				t.Errorf("advertised types (-want +got):\n%s", diff)
			}
			rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			resp, err := peer.Request(rctx, DefaultEID, mctp.MsgTypePLDM, []byte("ping"))
			if tc.wantReply == "" {
				if err == nil {
					t.Fatalf("PLDM request without a handler: got answer %q, want none", resp)
				}
				return
			}
			if err != nil {
				t.Fatalf("PLDM request: %v", err)
			}
			if got := string(resp); got != tc.wantReply {
				t.Errorf("reply: got %q, want %q", got, tc.wantReply)
			}
			got := <-calls
			if diff := cmp.Diff(call{9, mctp.MsgTypePLDM, "ping"}, got); diff != "" {
				t.Errorf("handler call (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHandlerDoesNotSeeCCI(t *testing.T) {
	seen := make(chan mctp.MsgType, 4)
	_, peer := newPeer(t, Config{Handler: func(_ context.Context, _ mctp.EID, typ mctp.MsgType, _ []byte) ([]byte, bool) {
		seen <- typ
		return nil, false
	}}, nil)
	// A CCI Event Notification is still the FM's own business.
	req, err := cci.Message{Category: cci.Request, Tag: 1, Opcode: cci.OpEventNotification}.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := peer.Request(context.Background(), DefaultEID, mctp.MsgTypeCXLCCI, req)
	if err != nil {
		t.Fatalf("CCI request: %v", err)
	}
	if m, err := cci.ParseMessage(raw); err != nil || m.ReturnCode != cci.Success {
		t.Errorf("Event Notification answer: got %+v, %v; want Success", m, err)
	}
	select {
	case typ := <-seen:
		t.Errorf("handler got a type %#02x message, want none", typ)
	default:
	}
}

func TestEndpointCarriesOtherProtocols(t *testing.T) {
	c, _ := newPeer(t, Config{}, func(_ context.Context, src mctp.EID, typ mctp.MsgType, msg []byte) ([]byte, bool) {
		if src != DefaultEID || typ != mctp.MsgTypePLDM {
			return nil, false
		}
		return slices.Concat([]byte("board:"), msg), true
	})
	ep := c.Endpoint()
	if ep == nil {
		t.Fatal("Endpoint: got nil")
	}
	resp, err := ep.Request(context.Background(), 9, mctp.MsgTypePLDM, []byte("GetTID"))
	if err != nil {
		t.Fatalf("Request through the FM's endpoint: %v", err)
	}
	if got, want := string(resp), "board:GetTID"; got != want {
		t.Errorf("reply: got %q, want %q", got, want)
	}
	_ = c.Close()
	if _, err := ep.Request(context.Background(), 9, mctp.MsgTypePLDM, nil); !errors.Is(err, mctp.ErrClosed) {
		t.Errorf("Request after Close: got %v, want ErrClosed", err)
	}
}
