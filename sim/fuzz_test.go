package sim

import (
	"context"
	"testing"

	"cxlpool/fabric/cci"
	"cxlpool/fabric/mctp"
)

// FuzzHandle feeds arbitrary CCI messages to the MCTP request path: the box
// must never panic, and any answer must be a well-formed response that
// echoes the request's tag and opcode.
func FuzzHandle(f *testing.F) {
	seeds := []struct {
		typ byte
		msg []byte
	}{
		{8, []byte{0x00, 0x01, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}},                                                      // V1
		{7, []byte{0x00, 0x05, 0x00, 0x00, 0x56, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}},                                                      // V4
		{8, []byte{0x00, 0x07, 0x00, 0x00, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04}},                                                // V9
		{7, append([]byte{0x00, 0x01, 0x00, 0x03, 0x56, 0x0c, 0x00, 0x00, 0, 0, 0, 0}, 0x03, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0)},                // V12
		{7, append([]byte{0x00, 0x01, 0x00, 0x01, 0x56, 0x04, 0x00, 0x00, 0, 0, 0, 0}, 0x03, 0x00, 0x08, 0x00)},                                  // V13
		{7, append([]byte{0x00, 0x01, 0x00, 0x02, 0x56, 0x10, 0x00, 0x00, 0, 0, 0, 0}, 0x01, 0, 0, 0, 0, 0, 0x20, 0, 0, 0, 0, 0, 0x01, 0, 0, 0)}, // V14
	}
	add, _ := (&cci.InitiateDCAddReq{HostID: 1, Policy: cci.AddPolicyPrescriptive, Extents: []cci.Extent{{DPA: 0, Length: block}}}).MarshalBinary()
	addMsg, _ := cci.Message{Opcode: cci.OpInitiateDCAdd, Payload: add}.MarshalBinary()
	seeds = append(seeds, struct {
		typ byte
		msg []byte
	}{7, addMsg})
	for _, s := range seeds {
		f.Add(s.typ, s.msg)
	}
	cfg := DefaultConfig()
	cfg.Capacity = 4 << 30
	b, err := New(cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { b.Close() })
	f.Fuzz(func(t *testing.T, typ byte, msg []byte) {
		resp, ok := b.handle(context.Background(), nil, fmEID, mctp.MsgType(typ&0x7f), msg)
		if !ok {
			return
		}
		m, err := cci.ParseMessage(resp)
		if err != nil {
			t.Fatalf("malformed response % x: %v", resp, err)
		}
		if m.Category != cci.Response || m.Tag != msg[1] || uint16(m.Opcode) != uint16(msg[3])|uint16(msg[4])<<8 {
			t.Fatalf("response header %+v does not echo request % x", m, msg[:5])
		}
	})
}

// FuzzHostMailbox feeds arbitrary messages to a host mailbox (48xxh and
// the event commands): never a panic, always a response.
func FuzzHostMailbox(f *testing.F) {
	v6 := []byte{0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	for _, s := range []struct {
		op cci.Opcode
		p  []byte
	}{
		{cci.OpAddDCResponse, v6},
		{cci.OpAddDCResponse, []byte{0, 0, 0, 0, 0, 0, 0, 0}},                             // V7
		{cci.OpReleaseDC, v6},                                                             // V15
		{cci.OpGetDCExtentList, make([]byte, 8)},                                          // V11
		{cci.OpClearEventRecords, []byte{0x04, 0x00, 0x01, 0x00, 0x00, 0x00, 0x07, 0x00}}, // V10
		{cci.OpGetEventRecords, []byte{4}},
		{cci.OpGetDCConfig, []byte{8, 0}},
	} {
		raw, _ := cci.Message{Opcode: s.op, Payload: s.p}.MarshalBinary()
		f.Add(raw)
	}
	cfg := DefaultConfig()
	cfg.Capacity = 4 << 30
	b, err := New(cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { b.Close() })
	b.Host(0).SetPolicy(Policy{Mode: NeverAnswer})
	b.mu.Lock()
	_ = b.initiateAdd(addReq{host: 0, policy: policyFree, length: 2 * block})
	b.mu.Unlock()
	f.Fuzz(func(t *testing.T, raw []byte) {
		if _, err := cci.ParseMessage(b.hostExec(0, raw)); err != nil {
			t.Fatalf("malformed response: %v", err)
		}
	})
}
