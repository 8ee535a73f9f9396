package mctp_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"net"
	"strings"
	"testing"
	"time"

	"cxlpool/fabric/mctp"
	"cxlpool/fabric/serial"

	"github.com/google/go-cmp/cmp"
)

// serial.Link is the production PacketLink.
var _ mctp.PacketLink = (*serial.Link)(nil)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func run(t *testing.T, e *mctp.Endpoint) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// The device endpoint receives the V18 frame byte for byte and answers with
// the V8 response header, framed per DSP0253.
func TestSerialWireGolden(t *testing.T) {
	devConn, fmConn := net.Pipe()
	defer fmConn.Close()
	cciResp := unhex(t, "01 00 01 00 01 00 00 00 00 00 00 00") // Identify response, empty payload
	var gotReq []byte
	dev := mctp.NewEndpoint(serial.NewLink(devConn, serial.LinkConfig{}), mctp.Config{EID: 0x09},
		func(_ context.Context, src mctp.EID, typ mctp.MsgType, msg []byte) ([]byte, bool) {
			gotReq = msg
			return cciResp, true
		})
	run(t, dev)

	v18 := unhex(t, "7e 01 11 01 09 08 cb 08 00 01 00 01 00 00 00 00 00 00 00 00 18 ad 7e")
	if _, err := fmConn.Write(v18); err != nil {
		t.Fatal(err)
	}
	wantPkt := append(unhex(t, "01 08 09 c3 08"), cciResp...)
	wantFrame, err := serial.AppendFrame(nil, wantPkt)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(wantFrame))
	if err := fmConn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(got); {
		m, err := fmConn.Read(got[n:])
		if err != nil {
			t.Fatalf("read response frame: %v", err)
		}
		n += m
	}
	if diff := cmp.Diff(wantFrame, got); diff != "" {
		t.Errorf("response frame (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(unhex(t, "00 01 00 01 00 00 00 00 00 00 00 00"), gotReq); diff != "" {
		t.Errorf("request seen by handler (-want +got):\n%s", diff)
	}
}

func TestEndpointsOverSerial(t *testing.T) {
	a, b := net.Pipe()
	fm := mctp.NewEndpoint(serial.NewLink(a, serial.LinkConfig{}), mctp.Config{EID: 0x08}, nil)
	dev := mctp.NewEndpoint(serial.NewLink(b, serial.LinkConfig{}),
		mctp.Config{EID: 0x09, MessageTypes: []mctp.MsgType{mctp.MsgTypeFMAPI, mctp.MsgTypeCXLCCI}},
		func(_ context.Context, _ mctp.EID, _ mctp.MsgType, msg []byte) ([]byte, bool) {
			return bytes.ToUpper(msg), true
		})
	run(t, fm)
	run(t, dev)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	eid, err := fm.GetEndpointID(ctx, mctp.EIDNull)
	if err != nil || eid != 0x09 {
		t.Fatalf("GetEndpointID: got %#x, %v; want 0x9", eid, err)
	}
	// 1036 bytes + type byte = 17 packets, with 7Eh/7Dh to stuff.
	msg := bytes.Repeat([]byte("a~}"), 1036/3+1)[:1036]
	resp, err := fm.Request(ctx, eid, mctp.MsgTypeFMAPI, msg)
	if err != nil {
		t.Fatalf("Request: %v", err)
	}
	if !bytes.Equal(resp, bytes.ToUpper(msg)) {
		t.Errorf("response mismatch: got %d bytes", len(resp))
	}
	if got, want := fm.Stats().PacketsOut, uint64(1+17); got != want {
		t.Errorf("PacketsOut = %d, want %d", got, want)
	}
}
