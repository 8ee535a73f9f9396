package sim

import (
	"context"
	"testing"

	"cxlpool/fabric/cci"
	"cxlpool/fabric/mctp"
)

// BenchmarkAddAcceptRelease measures the whole device-side flow for one
// host without a transport: encoded 5604h, the host reading its event log
// and answering 4802h, encoded 5605h, the host's 4803h, sanitize and free.
func BenchmarkAddAcceptRelease(b *testing.B) {
	box, err := New(DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer box.Close()
	ctx := context.Background()
	h := box.hosts[0]
	tag := tagN(1)
	add, _ := cci.Message{Opcode: cci.OpInitiateDCAdd, Payload: mustPayload(b, &cci.InitiateDCAddReq{
		HostID: 0, Policy: cci.AddPolicyFree, Region: 0, Length: 4 * block, Tag: tag})}.MarshalBinary()
	rel, _ := cci.Message{Opcode: cci.OpInitiateDCRelease, Payload: mustPayload(b, &cci.InitiateDCReleaseReq{
		HostID: 0, Policy: cci.ReleasePolicyTagBased, Length: 4 * block, Tag: tag})}.MarshalBinary()
	run := func(raw []byte) {
		resp, ok := box.handle(ctx, nil, fmEID, mctp.MsgTypeFMAPI, raw)
		if m, err := cci.ParseMessage(resp); !ok || err != nil || m.ReturnCode != cci.Success {
			b.Fatalf("request failed: %v %v", m.ReturnCode, err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		run(add)
		h.process(ctx)
		run(rel)
		h.process(ctx)
		box.mu.Lock()
		box.fmLogs[cci.EventLogDC].reset()
		box.mu.Unlock()
	}
	if n := len(h.Extents()); n != 0 {
		b.Fatalf("host holds %d extents after the loop", n)
	}
}

func mustPayload(b *testing.B, m interface{ MarshalBinary() ([]byte, error) }) []byte {
	p, err := m.MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	return p
}
