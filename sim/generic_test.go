package sim

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/fabric/cci"
	"cxlpool/fabric/mctp"
)

func TestIdentify(t *testing.T) {
	_, f := newBox(t, nil)
	// V1 request bytes, sent raw; the response payload must be V2's.
	ctx, cancel := context.WithTimeout(context.Background(), callTTL)
	defer cancel()
	out, err := f.rawCtx(ctx, mctp.MsgTypeCXLCCI, []byte{0x00, 0x01, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00})
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{0x01, 0x01, 0x00, 0x01, 0x00, 0x12, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x98, 0x1e, 0x93, 0x0d, 0x00, 0x00, 0x00, 0x00, 0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01, 0x09, 0x03}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("Identify response (-want +got):\n%s", diff)
	}
}

func TestBGStatus(t *testing.T) {
	_, f := newBox(t, nil)
	var r cci.BGStatusResp
	f.must(cci.OpBackgroundOperationStatus, nil, &r)
	if diff := cmp.Diff(cci.BGStatusResp{}, r); diff != "" {
		t.Errorf("BG status (-want +got):\n%s", diff)
	}
}

func TestResponseMessageLimit(t *testing.T) {
	_, f := newBox(t, nil)
	var got cci.ResponseMessageLimit
	f.must(cci.OpGetResponseMessageLimit, nil, &got)
	if got.Exp != 9 {
		t.Fatalf("default limit exponent = %d, want 9", got.Exp)
	}
	tests := []struct {
		exp  uint8
		want cci.ReturnCode
	}{
		{7, cci.InvalidInput}, {11, cci.InvalidInput}, {0, cci.InvalidInput}, {255, cci.InvalidInput},
		{10, cci.Success}, {8, cci.Success},
	}
	for _, tt := range tests {
		var r cci.ResponseMessageLimit
		if rc := f.call(cci.OpSetResponseMessageLimit, &cci.ResponseMessageLimit{Exp: tt.exp}, &r); rc != tt.want {
			t.Errorf("set limit %d: got %v, want %v", tt.exp, rc, tt.want)
		} else if rc == cci.Success && r.Exp != tt.exp {
			t.Errorf("set limit %d: response says %d", tt.exp, r.Exp)
		}
	}
	f.must(cci.OpGetResponseMessageLimit, nil, &got)
	if got.Exp != 8 {
		t.Fatalf("limit exponent after set = %d, want 8", got.Exp)
	}
	// With a 256-byte limit, paged responses shrink to fit.
	for i := range 3 {
		f.box.SetLink(i, false)
	}
	var ev cci.GetEventRecordsResp
	f.must(cci.OpGetEventRecords, &cci.GetEventRecordsReq{Log: cci.EventLogInfo}, &ev)
	if len(ev.Records) != 1 || !ev.More {
		t.Errorf("256-byte limit: got %d records (more=%v), want 1 (more=true)", len(ev.Records), ev.More)
	}
	var tags cci.ListTagsResp
	for i := range 4 {
		if rc := f.add(cci.InitiateDCAddReq{HostID: 0, Policy: cci.AddPolicyFree, Region: 1, Length: block, Tag: tagN(byte(i))}); rc != cci.Success {
			t.Fatal(rc)
		}
	}
	f.must(cci.OpDCListTags, &cci.ListTagsReq{Max: 10}, &tags)
	if len(tags.Tags) != 2 || tags.Total != 4 { // (256-16)/84 = 2
		t.Errorf("256-byte limit: got %d of %d tags, want 2 of 4", len(tags.Tags), tags.Total)
	}
}

func TestRoutingAndUnsupported(t *testing.T) {
	_, f := newBox(t, nil)
	tests := []struct {
		name string
		typ  mctp.MsgType
		op   cci.Opcode
		p    []byte
		want cci.ReturnCode
	}{
		{"identify on 08h", mctp.MsgTypeCXLCCI, cci.OpIdentify, nil, cci.Success},
		{"identify on 07h", mctp.MsgTypeFMAPI, cci.OpIdentify, nil, cci.Unsupported},
		{"dcd info on 07h", mctp.MsgTypeFMAPI, cci.OpGetDCDInfo, nil, cci.Success},
		{"dcd info on 08h", mctp.MsgTypeCXLCCI, cci.OpGetDCDInfo, nil, cci.Unsupported},
		{"event records on 07h", mctp.MsgTypeFMAPI, cci.OpGetEventRecords, []byte{4}, cci.Unsupported},
		{"unknown opcode", mctp.MsgTypeCXLCCI, 0x0F00, nil, cci.Unsupported},
		{"unknown FM opcode", mctp.MsgTypeFMAPI, 0x5609, nil, cci.Unsupported},
		{"bind vPPB (switch only)", mctp.MsgTypeFMAPI, cci.OpBindVPPB, []byte{0, 1, 4, 0, 0xff, 0xff}, cci.Unsupported},
		{"host add response over MCTP", mctp.MsgTypeCXLCCI, cci.OpAddDCResponse, make([]byte, 8), cci.Unsupported},
		{"host extent list over MCTP", mctp.MsgTypeCXLCCI, cci.OpGetDCExtentList, make([]byte, 8), cci.Unsupported},
		{"get dc config over MCTP", mctp.MsgTypeCXLCCI, cci.OpGetDCConfig, []byte{8, 0}, cci.Unsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if m := f.send(tt.typ, tt.op, tt.p); m.ReturnCode != tt.want {
				t.Errorf("got %v, want %v", m.ReturnCode, tt.want)
			}
		})
	}
}

func TestIgnoredRequests(t *testing.T) {
	_, f := newBox(t, nil)
	quiet := func(name string, msg []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if out, err := f.rawCtx(ctx, mctp.MsgTypeCXLCCI, msg); !errors.Is(err, mctp.ErrTimeout) {
			t.Errorf("%s: got response %x, err %v; want no response", name, out, err)
		}
	}
	resp, _ := cci.Message{Category: cci.Response, Tag: 3, Opcode: cci.OpIdentify}.MarshalBinary()
	quiet("response category", resp)
	cat5, _ := cci.Message{Category: 5, Tag: 3, Opcode: cci.OpIdentify}.MarshalBinary()
	quiet("reserved category", cat5)
	note, _ := cci.Message{Category: cci.Request, Tag: 4, Opcode: cci.OpEventNotification, Payload: []byte{1, 0}}.MarshalBinary()
	quiet("event notification", note)
	quiet("short header", []byte{0, 1, 0})

	// Non-zero vendor status in a request (libcxlmi sends ABCDh) is tolerated.
	raw, _ := cci.Message{Category: cci.Request, Tag: 9, Opcode: cci.OpIdentify, VendorStatus: 0xabcd}.MarshalBinary()
	ctx, cancel := context.WithTimeout(context.Background(), callTTL)
	defer cancel()
	out, err := f.rawCtx(ctx, mctp.MsgTypeCXLCCI, raw)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := cci.ParseMessage(out); err != nil || m.ReturnCode != cci.Success || m.Tag != 9 {
		t.Errorf("vendor status request: got %+v, %v; want success with tag 9", m, err)
	}
}

func TestPayloadLength(t *testing.T) {
	_, f := newBox(t, nil)
	long := func(n int) []byte { return make([]byte, n) }
	tests := []struct {
		name string
		op   cci.Opcode
		p    []byte
	}{
		{"identify with payload", cci.OpIdentify, long(1)},
		{"bg status with payload", cci.OpBackgroundOperationStatus, long(2)},
		{"get limit with payload", cci.OpGetResponseMessageLimit, long(1)},
		{"set limit empty", cci.OpSetResponseMessageLimit, nil},
		{"set limit long", cci.OpSetResponseMessageLimit, long(2)},
		{"get events empty", cci.OpGetEventRecords, nil},
		{"get events long", cci.OpGetEventRecords, long(2)},
		{"clear events short", cci.OpClearEventRecords, long(5)},
		{"clear events count mismatch", cci.OpClearEventRecords, []byte{0, 0, 2, 0, 0, 0, 1, 0}},
		{"get policy with payload", cci.OpGetMCTPEventInterruptPolicy, long(2)},
		{"set policy short", cci.OpSetMCTPEventInterruptPolicy, long(1)},
		{"set policy long", cci.OpSetMCTPEventInterruptPolicy, long(3)},
		{"supported logs with payload", cci.OpGetSupportedLogs, long(1)},
		{"get log short", cci.OpGetLog, long(0x17)},
		{"get log long", cci.OpGetLog, long(0x19)},
		{"identify memdev with payload", cci.OpIdentifyMemoryDevice, long(1)},
		{"ld info with payload", cci.OpGetLDInfo, long(1)},
		{"ld allocations short", cci.OpGetLDAllocations, long(1)},
		{"mh info short", cci.OpGetMultiHeadedInfo, long(1)},
		{"head info long", cci.OpGetHeadInfo, long(3)},
		{"dcd info with payload", cci.OpGetDCDInfo, long(1)},
		{"host region config short", cci.OpGetHostDCRegionConfig, long(3)},
		{"set region config short", cci.OpSetDCRegionConfig, long(0xf)},
		{"extent lists short", cci.OpGetDCRegionExtentLists, long(0xb)},
		{"add short", cci.OpInitiateDCAdd, long(0x1b)},
		{"add prescriptive without count", cci.OpInitiateDCAdd, []byte{0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"add beyond max payload", cci.OpInitiateDCAdd, long(513)},
		{"release short", cci.OpInitiateDCRelease, long(0x1b)},
		{"add reference short", cci.OpDCAddReference, long(15)},
		{"remove reference long", cci.OpDCRemoveReference, long(17)},
		{"list tags short", cci.OpDCListTags, long(7)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := f.send(mctp.MsgType(tt.op.MCTPType()), tt.op, tt.p)
			if m.ReturnCode != cci.InvalidPayloadLength {
				t.Errorf("got %v, want Invalid Payload Length", m.ReturnCode)
			}
		})
	}
	// A CCI length field that disagrees with the message.
	raw, _ := cci.Message{Category: cci.Request, Tag: 1, Opcode: cci.OpGetDCDInfo}.MarshalBinary()
	raw[5] = 4
	ctx, cancel := context.WithTimeout(context.Background(), callTTL)
	defer cancel()
	out, err := f.rawCtx(ctx, mctp.MsgTypeFMAPI, raw)
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := cci.ParseMessage(out); m.ReturnCode != cci.InvalidPayloadLength {
		t.Errorf("length field mismatch: got %v, want Invalid Payload Length", m.ReturnCode)
	}
	// The non-prescriptive 1Ch-byte 5604h form is accepted.
	var q cci.InitiateDCAddReq = cci.InitiateDCAddReq{HostID: 1, Policy: cci.AddPolicyFree, Region: 0, Length: block}
	p, _ := q.MarshalBinary()
	if m := f.send(mctp.MsgTypeFMAPI, cci.OpInitiateDCAdd, p[:0x1c]); m.ReturnCode != cci.Success {
		t.Errorf("1Ch-byte add: got %v, want Success", m.ReturnCode)
	}
}

func TestLogs(t *testing.T) {
	_, f := newBox(t, nil)
	var sl cci.GetSupportedLogsResp
	f.must(cci.OpGetSupportedLogs, nil, &sl)
	if len(sl.Entries) != 1 || sl.Entries[0].UUID != cci.CELUUID {
		t.Fatalf("supported logs = %+v, want just the CEL", sl)
	}
	size := sl.Entries[0].Size
	var cel []byte
	for off := uint32(0); off < size; {
		n := min(size-off, 64)
		m := f.send(mctp.MsgTypeCXLCCI, cci.OpGetLog, mustMarshal(t, &cci.GetLogReq{UUID: cci.CELUUID, Offset: off, Length: n}))
		if m.ReturnCode != cci.Success {
			t.Fatalf("get log at %d: %v", off, m.ReturnCode)
		}
		cel = append(cel, m.Payload...)
		off += n
	}
	entries, err := cci.ParseCEL(cel)
	if err != nil {
		t.Fatal(err)
	}
	var got []cci.Opcode
	for _, e := range entries {
		got = append(got, e.Opcode)
		if fmHandler(e.Opcode) == nil {
			t.Errorf("CEL lists %v, which the box does not serve", e.Opcode)
		}
	}
	for op := range 0x10000 {
		if fmHandler(cci.Opcode(op)) != nil && !slices.Contains(got, cci.Opcode(op)) {
			t.Errorf("CEL misses %v", cci.Opcode(op))
		}
	}
	var other [16]byte
	other[0] = 1
	tests := []struct {
		name string
		q    cci.GetLogReq
		want cci.ReturnCode
	}{
		{"unknown uuid", cci.GetLogReq{UUID: other, Length: 4}, cci.InvalidLog},
		{"past end", cci.GetLogReq{UUID: cci.CELUUID, Offset: size - 2, Length: 4}, cci.InvalidInput},
		{"offset beyond", cci.GetLogReq{UUID: cci.CELUUID, Offset: size + 4, Length: 0}, cci.InvalidInput},
		{"overflowing offset", cci.GetLogReq{UUID: cci.CELUUID, Offset: 0xffffffff, Length: 4}, cci.InvalidInput},
		{"longer than response limit", cci.GetLogReq{UUID: cci.CELUUID, Length: 513}, cci.InvalidInput},
		{"zero length", cci.GetLogReq{UUID: cci.CELUUID, Length: 0}, cci.Success},
	}
	for _, tt := range tests {
		if rc := f.call(cci.OpGetLog, &tt.q, nil); rc != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, rc, tt.want)
		}
	}
}

func mustMarshal(t *testing.T, m interface{ MarshalBinary() ([]byte, error) }) []byte {
	t.Helper()
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEventRecordsAndClear(t *testing.T) {
	_, f := newBox(t, func(c *Config) { c.EventLogSize = 4 })
	// Link changes fill the Informational log.
	f.box.SetLink(1, false)
	f.box.SetLink(1, true)
	f.box.SetLink(2, false)
	var r cci.GetEventRecordsResp
	f.must(cci.OpGetEventRecords, &cci.GetEventRecordsReq{Log: cci.EventLogInfo}, &r)
	if len(r.Records) != 3 || r.Overflow || r.More {
		t.Fatalf("info log: %d records, overflow %v, more %v; want 3, false, false", len(r.Records), r.Overflow, r.More)
	}
	var evs []cci.LinkEvent
	for _, rec := range r.Records {
		ev, err := cci.ParseLinkEvent(rec)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	wantEv := []cci.LinkEvent{{Port: 1}, {Port: 1, LinkUp: true}, {Port: 2}}
	if diff := cmp.Diff(wantEv, evs); diff != "" {
		t.Errorf("link events (-want +got):\n%s", diff)
	}
	h := []uint16{r.Records[0].Handle, r.Records[1].Handle, r.Records[2].Handle}
	tests := []struct {
		name string
		q    cci.ClearEventRecordsReq
		want cci.ReturnCode
	}{
		{"bad log", cci.ClearEventRecordsReq{Log: 5, Handles: h[:1]}, cci.InvalidInput},
		{"skips oldest", cci.ClearEventRecordsReq{Log: cci.EventLogInfo, Handles: h[1:2]}, cci.InvalidHandle},
		{"out of order", cci.ClearEventRecordsReq{Log: cci.EventLogInfo, Handles: []uint16{h[1], h[0]}}, cci.InvalidHandle},
		{"unknown handle", cci.ClearEventRecordsReq{Log: cci.EventLogInfo, Handles: []uint16{h[0], 0x7777}}, cci.InvalidHandle},
		{"zero handle", cci.ClearEventRecordsReq{Log: cci.EventLogInfo, Handles: []uint16{0}}, cci.InvalidHandle},
		{"too many", cci.ClearEventRecordsReq{Log: cci.EventLogInfo, Handles: []uint16{h[0], h[1], h[2], 9}}, cci.InvalidHandle},
		{"wrong log", cci.ClearEventRecordsReq{Log: cci.EventLogWarning, Handles: h[:1]}, cci.InvalidHandle},
		{"clear all without overflow", cci.ClearEventRecordsReq{Log: cci.EventLogInfo, ClearAll: true}, cci.InvalidInput},
	}
	for _, tt := range tests {
		if rc := f.call(cci.OpClearEventRecords, &tt.q, nil); rc != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, rc, tt.want)
		}
	}
	f.must(cci.OpGetEventRecords, &cci.GetEventRecordsReq{Log: cci.EventLogInfo}, &r)
	if len(r.Records) != 3 {
		t.Fatalf("failed clears removed records: %d left, want 3", len(r.Records))
	}
	if rc := f.call(cci.OpGetEventRecords, &cci.GetEventRecordsReq{Log: 5}, nil); rc != cci.InvalidInput {
		t.Errorf("get log 5: got %v, want Invalid Input", rc)
	}
	f.must(cci.OpClearEventRecords, &cci.ClearEventRecordsReq{Log: cci.EventLogInfo, Handles: h[:2]}, nil)

	// Overflow: 1 left + 5 more into a 4-record log loses 2.
	for i := range 5 {
		f.box.SetLink(3, i%2 == 1)
	}
	f.must(cci.OpGetEventRecords, &cci.GetEventRecordsReq{Log: cci.EventLogInfo}, &r)
	if !r.Overflow || r.OverflowCount != 2 || r.FirstOverflow == 0 || r.LastOverflow < r.FirstOverflow {
		t.Errorf("overflow state = %v count %d first %d last %d; want true, 2, set, ordered", r.Overflow, r.OverflowCount, r.FirstOverflow, r.LastOverflow)
	}
	if rc := f.call(cci.OpClearEventRecords, &cci.ClearEventRecordsReq{Log: cci.EventLogInfo, ClearAll: true, Handles: []uint16{r.Records[0].Handle}}, nil); rc != cci.InvalidInput {
		t.Errorf("clear all with handles: got %v, want Invalid Input", rc)
	}
	f.must(cci.OpClearEventRecords, &cci.ClearEventRecordsReq{Log: cci.EventLogInfo, ClearAll: true}, nil)
	f.must(cci.OpGetEventRecords, &cci.GetEventRecordsReq{Log: cci.EventLogInfo}, &r)
	if len(r.Records) != 0 || r.Overflow || r.OverflowCount != 0 {
		t.Errorf("after clear all: %d records, overflow %v; want empty, no overflow", len(r.Records), r.Overflow)
	}
}

func TestEventInterruptPolicy(t *testing.T) {
	_, f := newBox(t, nil)
	var p cci.EventInterruptPolicy
	f.must(cci.OpGetMCTPEventInterruptPolicy, nil, &p)
	if p.Mask != 0 {
		t.Fatalf("default policy %#x, want 0", p.Mask)
	}
	f.must(cci.OpSetMCTPEventInterruptPolicy, &cci.EventInterruptPolicy{Mask: 0xffff}, &p)
	if p.Mask != policyMask {
		t.Errorf("set 0xffff: device reports %#x, want %#x (reserved bits dropped)", p.Mask, policyMask)
	}
	f.must(cci.OpGetMCTPEventInterruptPolicy, nil, &p)
	if p.Mask != policyMask {
		t.Errorf("get after set: %#x, want %#x", p.Mask, policyMask)
	}
}

func TestIdentifyMemoryDevice(t *testing.T) {
	_, f := newBox(t, nil)
	var r cci.IdentifyMemoryDeviceResp
	f.must(cci.OpIdentifyMemoryDevice, nil, &r)
	if r.TotalCapacity != 4096 || r.DCEventLogSize != 64 || r.FWRevision != "cxlsim 1.0" {
		t.Errorf("identify memory device = %+v; want 4096 units, DC log 64, fw cxlsim 1.0", r)
	}
}

func TestLDAndHeads(t *testing.T) {
	b, f := newBox(t, nil)
	var li cci.GetLDInfoResp
	f.must(cci.OpGetLDInfo, nil, &li)
	if li.MemorySize != 1<<40 || li.LDCount != 8 {
		t.Errorf("LD info = %+v, want 1 TiB, 8 LDs", li)
	}
	var mh cci.GetMultiHeadedInfoResp
	f.must(cci.OpGetMultiHeadedInfo, &cci.GetMultiHeadedInfoReq{StartLD: 2, Limit: 100}, &mh)
	if diff := cmp.Diff(cci.GetMultiHeadedInfoResp{NumLDs: 8, NumHeads: 8, StartLD: 2, LDMap: []uint8{2, 3, 4, 5, 6, 7}}, mh); diff != "" {
		t.Errorf("multi-headed info (-want +got):\n%s", diff)
	}
	b.SetLink(3, false)
	var hi cci.GetHeadInfoResp
	f.must(cci.OpGetHeadInfo, &cci.GetHeadInfoReq{StartHead: 2, Count: 2}, &hi)
	if len(hi.Heads) != 2 || hi.Heads[0].Port != 2 || hi.Heads[0].LTSSM != cci.LTSSML0 || hi.Heads[1].LTSSM != cci.LTSSMDetect || hi.Heads[1].NegotiatedWidth != 0 {
		t.Errorf("head info = %+v; want port 2 in L0, port 3 in Detect", hi.Heads)
	}

	// Granted capacity shows in Get LD Allocations.
	if rc := f.add(cci.InitiateDCAddReq{HostID: 5, Policy: cci.AddPolicyFree, Region: 0, Length: 3 * block}); rc != cci.Success {
		t.Fatal(rc)
	}
	settle(t, b, 5)
	var la cci.GetLDAllocationsResp
	f.must(cci.OpGetLDAllocations, &cci.GetLDAllocationsReq{StartLD: 4, Limit: 2}, &la)
	want := cci.GetLDAllocationsResp{NumLDs: 8, StartLD: 4, Entries: []cci.LDAllocation{{}, {Range1: 3}}}
	if diff := cmp.Diff(want, la); diff != "" {
		t.Errorf("LD allocations (-want +got):\n%s", diff)
	}

	tests := []struct {
		name string
		op   cci.Opcode
		req  interface{ MarshalBinary() ([]byte, error) }
	}{
		{"allocations start beyond", cci.OpGetLDAllocations, &cci.GetLDAllocationsReq{StartLD: 8, Limit: 1}},
		{"allocations limit 0", cci.OpGetLDAllocations, &cci.GetLDAllocationsReq{StartLD: 0, Limit: 0}},
		{"mh info start beyond", cci.OpGetMultiHeadedInfo, &cci.GetMultiHeadedInfoReq{StartLD: 8, Limit: 1}},
		{"mh info limit 0", cci.OpGetMultiHeadedInfo, &cci.GetMultiHeadedInfoReq{StartLD: 0, Limit: 0}},
		{"head info nonexistent head", cci.OpGetHeadInfo, &cci.GetHeadInfoReq{StartHead: 8, Count: 1}},
		{"head info past last head", cci.OpGetHeadInfo, &cci.GetHeadInfoReq{StartHead: 6, Count: 3}},
		{"head info count 0", cci.OpGetHeadInfo, &cci.GetHeadInfoReq{StartHead: 0, Count: 0}},
	}
	for _, tt := range tests {
		if rc := f.call(tt.op, tt.req, nil); rc != cci.InvalidInput {
			t.Errorf("%s: got %v, want Invalid Input", tt.name, rc)
		}
	}
}

func TestDCDInfo(t *testing.T) {
	_, f := newBox(t, func(c *Config) { c.SoRConfigurable = []bool{false, true} })
	var r cci.GetDCDInfoResp
	f.must(cci.OpGetDCDInfo, nil, &r)
	mask := uint64(0)
	for s := 21; s <= 30; s++ {
		mask |= 1 << s
	}
	want := cci.GetDCDInfoResp{NumHosts: 8, NumRegions: 2, AddPolicies: 7, ReleasePolicies: 3, SoRConfigurable: 2,
		TotalCapacity: 4096, BlockSizeMasks: []uint64{mask, mask}}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("DCD info (-want +got):\n%s", diff)
	}
}

func TestHostDCRegionConfig(t *testing.T) {
	_, f := newBox(t, nil)
	var r cci.GetHostDCRegionConfigResp
	f.must(cci.OpGetHostDCRegionConfig, &cci.GetHostDCRegionConfigReq{HostID: 3, RegionCount: 8}, &r)
	want := cci.GetHostDCRegionConfigResp{
		HostID: 3, AvailableRegions: 2,
		Regions: []cci.DCRegionConfig{
			{Base: 0, DecodeLength: 512 * gib, Length: 512 * gib, BlockSize: block, SanitizeOnRelease: true},
			{Base: 512 * gib, DecodeLength: 512 * gib, Length: 512 * gib, BlockSize: block, Attributes1: cci.AttrSharable, SanitizeOnRelease: true},
		},
		SupportedExtents: 512, AvailableExtents: 512, SupportedTags: 64, AvailableTags: 64,
	}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("host region config (-want +got):\n%s", diff)
	}
	f.must(cci.OpGetHostDCRegionConfig, &cci.GetHostDCRegionConfigReq{HostID: 3, RegionCount: 8, StartRegion: 1}, &r)
	if len(r.Regions) != 1 || r.Regions[0].Base != 512*gib {
		t.Errorf("start region 1: got %+v", r.Regions)
	}
	// V13 raw bytes.
	if m := f.send(mctp.MsgTypeFMAPI, cci.OpGetHostDCRegionConfig, []byte{0x03, 0x00, 0x08, 0x00}); m.ReturnCode != cci.Success {
		t.Errorf("V13: got %v", m.ReturnCode)
	}
	for _, q := range []cci.GetHostDCRegionConfigReq{{HostID: 8, RegionCount: 1}, {HostID: 0xffff, RegionCount: 1}, {HostID: 0, RegionCount: 1, StartRegion: 2}} {
		if rc := f.call(cci.OpGetHostDCRegionConfig, &q, nil); rc != cci.InvalidInput {
			t.Errorf("%+v: got %v, want Invalid Input", q, rc)
		}
	}
}

func TestSetDCRegionConfig(t *testing.T) {
	b, f := newBox(t, func(c *Config) { c.SoRConfigurable = []bool{true, false} })
	if rc := f.add(cci.InitiateDCAddReq{HostID: 0, Policy: cci.AddPolicyFree, Region: 0, Length: block}); rc != cci.Success {
		t.Fatal(rc)
	}
	settle(t, b, 0)
	tests := []struct {
		name string
		q    cci.SetDCRegionConfigReq
		want cci.ReturnCode
	}{
		{"bad region", cci.SetDCRegionConfigReq{Region: 2, BlockSize: block, SanitizeOnRelease: true}, cci.InvalidInput},
		{"block size not a power of two", cci.SetDCRegionConfigReq{Region: 1, BlockSize: 3 << 20, SanitizeOnRelease: true}, cci.InvalidInput},
		{"block size too small", cci.SetDCRegionConfigReq{Region: 1, BlockSize: 1 << 20, SanitizeOnRelease: true}, cci.InvalidInput},
		{"block size too large", cci.SetDCRegionConfigReq{Region: 1, BlockSize: 2 * gib, SanitizeOnRelease: true}, cci.InvalidInput},
		{"block size zero", cci.SetDCRegionConfigReq{Region: 1, SanitizeOnRelease: true}, cci.InvalidInput},
		{"SoR change not configurable", cci.SetDCRegionConfigReq{Region: 1, BlockSize: block, SanitizeOnRelease: false}, cci.Unsupported},
		{"region has allocations", cci.SetDCRegionConfigReq{Region: 0, BlockSize: 2 << 20, SanitizeOnRelease: true}, cci.Unsupported},
	}
	for _, tt := range tests {
		if rc := f.call(cci.OpSetDCRegionConfig, &tt.q, nil); rc != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, rc, tt.want)
		}
	}
	b.SetLink(6, false)
	// V14: region 1, 2 MiB blocks, SoR 1 → success with an empty response.
	m := f.send(mctp.MsgTypeFMAPI, cci.OpSetDCRegionConfig, []byte{0x01, 0, 0, 0, 0, 0, 0x20, 0, 0, 0, 0, 0, 0x01, 0, 0, 0})
	if m.ReturnCode != cci.Success || len(m.Payload) != 0 {
		t.Fatalf("V14: got %v with %d payload bytes, want Success, empty", m.ReturnCode, len(m.Payload))
	}
	var r cci.GetHostDCRegionConfigResp
	f.must(cci.OpGetHostDCRegionConfig, &cci.GetHostDCRegionConfigReq{HostID: 0, RegionCount: 1, StartRegion: 1}, &r)
	if r.Regions[0].BlockSize != 2<<20 {
		t.Errorf("block size after set = %d, want 2 MiB", r.Regions[0].BlockSize)
	}
	// Every host got a 03h record; a live host consumed it (and re-read 4800h).
	settle(t, b, 0)
	b.mu.Lock()
	left0 := len(b.lds[0].logs[cci.EventLogDC].recs)
	recs := b.lds[6].logs[cci.EventLogDC].recs
	b.mu.Unlock()
	if left0 != 0 || len(recs) != 1 {
		t.Fatalf("host logs: host 0 has %d records, host 6 (down) %d; want 0 and 1", left0, len(recs))
	}
	if ev, _ := cci.ParseDCEvent(recs[0]); ev.Type != cci.DCEventRegionUpdated || ev.RegionIndex != 1 {
		t.Errorf("host 6 record = %+v, want region 1 updated", ev)
	}
	// 2 MiB blocks are now the allocation unit of region 1.
	if rc := f.add(cci.InitiateDCAddReq{HostID: 1, Policy: cci.AddPolicyFree, Region: 1, Length: 2 << 20, Tag: tagN(1)}); rc != cci.Success {
		t.Errorf("2 MiB add after reconfiguration: got %v", rc)
	}
	if rc := f.add(cci.InitiateDCAddReq{HostID: 1, Policy: cci.AddPolicyFree, Region: 1, Length: 3 << 20, Tag: tagN(2)}); rc != cci.InvalidInput {
		t.Errorf("3 MiB add: got %v, want Invalid Input", rc)
	}
}

func TestGetDCRegionExtentListsErrors(t *testing.T) {
	b, f := newBox(t, nil)
	r := f.extents(2)
	if r.Total != 0 || r.Generation != 0 {
		t.Fatalf("fresh host: total %d generation %d, want 0, 0", r.Total, r.Generation)
	}
	if rc := f.add(cci.InitiateDCAddReq{HostID: 2, Policy: cci.AddPolicyFree, Region: 0, Length: block}); rc != cci.Success {
		t.Fatal(rc)
	}
	settle(t, b, 2)
	r = f.extents(2)
	if r.Total != 1 || r.Generation == 0 {
		t.Fatalf("after add: total %d generation %d, want 1, > 0", r.Total, r.Generation)
	}
	var only cci.GetDCRegionExtentListsResp
	f.must(cci.OpGetDCRegionExtentLists, &cci.GetDCRegionExtentListsReq{HostID: 2, Count: 0}, &only)
	if only.Total != 1 || len(only.Extents) != 0 || only.Generation != r.Generation {
		t.Errorf("count 0: %+v, want totals only", only)
	}
	f.must(cci.OpGetDCRegionExtentLists, &cci.GetDCRegionExtentListsReq{HostID: 2, Count: 5, Start: 1}, &only)
	if only.Total != 1 || len(only.Extents) != 0 {
		t.Errorf("start == total: %+v, want empty list", only)
	}
	for _, q := range []cci.GetDCRegionExtentListsReq{{HostID: 8, Count: 1}, {HostID: 2, Count: 1, Start: 2}, {HostID: 2, Start: 0xffffffff}} {
		if rc := f.call(cci.OpGetDCRegionExtentLists, &q, nil); rc != cci.InvalidInput {
			t.Errorf("%+v: got %v, want Invalid Input", q, rc)
		}
	}
	// V12 raw bytes.
	if m := f.send(mctp.MsgTypeFMAPI, cci.OpGetDCRegionExtentLists, []byte{0x03, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0}); m.ReturnCode != cci.Success ||
		binary.LittleEndian.Uint16(m.Payload) != 3 {
		t.Errorf("V12: got %v", m.ReturnCode)
	}
}
