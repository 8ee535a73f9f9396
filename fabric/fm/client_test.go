package fm

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/fabric"
	"cxlpool/fabric/cci"
	"cxlpool/fabric/mctp"
)

// fakeDevice is a hand-written responder on the far end of an mctp.Pipe.
// serve returns the response to send, or ok = false to stay silent.
type fakeDevice struct {
	ep    *mctp.Endpoint
	serve func(typ mctp.MsgType, m cci.Message) (resp []byte, ok bool)

	mu    sync.Mutex
	calls map[cci.Opcode]int
	types map[cci.Opcode]mctp.MsgType
	reqs  []cci.Message
}

func (f *fakeDevice) handle(_ context.Context, _ mctp.EID, typ mctp.MsgType, msg []byte) ([]byte, bool) {
	m, err := cci.ParseMessage(msg)
	if err != nil {
		return nil, false
	}
	m.Payload = append([]byte(nil), m.Payload...)
	f.mu.Lock()
	f.calls[m.Opcode]++
	f.types[m.Opcode] = typ
	f.reqs = append(f.reqs, m)
	f.mu.Unlock()
	return f.serve(typ, m)
}

func (f *fakeDevice) count(op cci.Opcode) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

func (f *fakeDevice) requests(op cci.Opcode) []cci.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []cci.Message
	for _, m := range f.reqs {
		if m.Opcode == op {
			out = append(out, m)
		}
	}
	return out
}

// answer builds a response to m with rc and payload.
func answer(m cci.Message, rc cci.ReturnCode, payload []byte) []byte {
	b, err := cci.Message{Category: cci.Response, Tag: m.Tag, Opcode: m.Opcode, ReturnCode: rc, Payload: payload}.MarshalBinary()
	if err != nil {
		panic(err)
	}
	return b
}

// newFake starts a client and a fake device on an in-memory pipe.
func newFake(t *testing.T, cfg Config, serve func(typ mctp.MsgType, m cci.Message) ([]byte, bool)) (*Client, *fakeDevice) {
	t.Helper()
	a, b := mctp.Pipe()
	f := &fakeDevice{serve: serve, calls: make(map[cci.Opcode]int), types: make(map[cci.Opcode]mctp.MsgType)}
	f.ep = mctp.NewEndpoint(b, mctp.Config{EID: DefaultDeviceEID}, f.handle)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.ep.Run(ctx)
	}()
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Second
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = time.Hour // the tests drive the pump themselves
	}
	c, err := Open(ctx, a, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		cancel()
		<-done
	})
	return c, f
}

func TestDoReturnCodes(t *testing.T) {
	idPayload, _ := (&cci.IdentifyResp{VendorID: 0x1e98, MaxMessageSizeExp: 9, ComponentType: 3}).MarshalBinary()
	tests := []struct {
		name    string
		rc      cci.ReturnCode
		wantErr error // nil: success
		bare    bool  // the error is the bare return code
	}{
		{"success", cci.Success, nil, false},
		{"busy", cci.Busy, cci.Busy, false},
		{"invalid input", cci.InvalidInput, cci.InvalidInput, false},
		{"retry required", cci.RetryRequired, cci.RetryRequired, false},
		{"unknown code keeps its value", cci.ReturnCode(0x1234), cci.ReturnCode(0x1234), false},
		{"background started", cci.BackgroundCommandStarted, cci.BackgroundCommandStarted, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := newFake(t, Config{}, func(_ mctp.MsgType, m cci.Message) ([]byte, bool) {
				return answer(m, tc.rc, idPayload), true
			})
			var id cci.IdentifyResp
			err := c.Do(context.Background(), cci.OpIdentify, nil, &id)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Do: got %v, want nil", err)
				}
				if id.VendorID != 0x1e98 {
					t.Errorf("vendor: got %#x, want 0x1e98", id.VendorID)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Do: got %v, want an error wrapping %v", err, tc.wantErr)
			}
			if tc.bare {
				if err != tc.wantErr {
					t.Errorf("Do: got %#v, want the bare %v", err, tc.wantErr)
				}
				if id.VendorID != 0x1e98 {
					t.Errorf("payload not decoded with %v", tc.rc)
				}
				return
			}
			if !strings.Contains(err.Error(), "Identify (0001h)") {
				t.Errorf("error %q does not name the opcode", err)
			}
			var rc cci.ReturnCode
			if !errors.As(err, &rc) || rc != tc.rc {
				t.Errorf("return code: got %v, want %v", rc, tc.rc)
			}
		})
	}
}

func TestDoIgnoresMismatchedResponses(t *testing.T) {
	tests := []struct {
		name  string
		reply func(m cci.Message) []byte
	}{
		{"wrong tag", func(m cci.Message) []byte {
			m.Tag++
			return answer(m, cci.Success, nil)
		}},
		{"wrong opcode", func(m cci.Message) []byte {
			m.Opcode = cci.OpGetDCDInfo
			return answer(m, cci.Success, nil)
		}},
		{"request category", func(m cci.Message) []byte {
			b, _ := cci.Message{Category: cci.Request, Tag: m.Tag, Opcode: m.Opcode}.MarshalBinary()
			return b
		}},
		{"truncated header", func(cci.Message) []byte { return []byte{1, 2, 3} }},
		{"length field lies", func(m cci.Message) []byte { return append(answer(m, cci.Success, nil), 0xff) }},
	}
	for _, tc := range tests {
		for _, op := range []cci.Opcode{cci.OpIdentify, cci.OpInitiateDCAdd} {
			t.Run(tc.name+"/"+op.String(), func(t *testing.T) {
				c, f := newFake(t, Config{Retries: 2}, func(_ mctp.MsgType, m cci.Message) ([]byte, bool) {
					return tc.reply(m), true
				})
				err := c.Do(context.Background(), op, nil, nil)
				if !errors.Is(err, fabric.ErrTimeout) {
					t.Fatalf("Do: got %v, want an error wrapping ErrTimeout", err)
				}
				want := 1
				if op == cci.OpIdentify {
					want = 3
				}
				if got := f.count(op); got != want {
					t.Errorf("attempts: got %d, want %d", got, want)
				}
			})
		}
	}
}

func TestDoRetriesOnlySideEffectFree(t *testing.T) {
	tests := []struct {
		op        cci.Opcode
		silent    int // attempts left unanswered
		wantCalls int
		wantErr   error
	}{
		{cci.OpIdentify, 2, 3, nil},
		{cci.OpIdentify, 5, 4, fabric.ErrTimeout}, // 1 + default 3 retries
		{cci.OpGetDCRegionExtentLists, 1, 2, nil},
		{cci.OpDCListTags, 1, 2, nil},
		{cci.OpInitiateDCAdd, 1, 1, fabric.ErrTimeout},
		{cci.OpInitiateDCRelease, 1, 1, fabric.ErrTimeout},
		{cci.OpSetDCRegionConfig, 1, 1, fabric.ErrTimeout},
		{cci.OpDCAddReference, 1, 1, fabric.ErrTimeout},
		{cci.OpDCRemoveReference, 1, 1, fabric.ErrTimeout},
		{cci.OpClearEventRecords, 1, 1, fabric.ErrTimeout},
		{cci.OpSetMCTPEventInterruptPolicy, 1, 1, fabric.ErrTimeout},
		{cci.OpSetResponseMessageLimit, 1, 1, fabric.ErrTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.op.String(), func(t *testing.T) {
			var mu sync.Mutex
			left := tc.silent
			c, f := newFake(t, Config{Timeout: 100 * time.Millisecond}, func(_ mctp.MsgType, m cci.Message) ([]byte, bool) {
				mu.Lock()
				defer mu.Unlock()
				if left > 0 {
					left--
					return nil, false
				}
				return answer(m, cci.Success, nil), true
			})
			err := c.Do(context.Background(), tc.op, nil, nil)
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("Do: got %v, want %v", err, tc.wantErr)
			}
			if got := f.count(tc.op); got != tc.wantCalls {
				t.Errorf("attempts: got %d, want %d", got, tc.wantCalls)
			}
		})
	}
}

func TestDoRequestFraming(t *testing.T) {
	c, f := newFake(t, Config{}, func(_ mctp.MsgType, m cci.Message) ([]byte, bool) {
		return answer(m, cci.Success, nil), true
	})
	ctx := context.Background()
	tag := cci.NewTag()
	if err := c.Add(ctx, fabric.AddRequest{Host: 3, Policy: fabric.AddFree, Region: 1, Length: 256 << 20, Tag: tag}); err != nil {
		t.Fatalf("Add: %v", err)
	}
	if err := c.Do(ctx, cci.OpIdentify, nil, nil); err != nil {
		t.Fatalf("Identify: %v", err)
	}
	if err := c.Do(ctx, cci.OpIdentify, nil, nil); err != nil {
		t.Fatalf("Identify: %v", err)
	}
	add := f.requests(cci.OpInitiateDCAdd)
	ids := f.requests(cci.OpIdentify)
	if len(add) != 1 || len(ids) != 2 {
		t.Fatalf("requests: got %d adds and %d identifies, want 1 and 2", len(add), len(ids))
	}
	for _, m := range append(add, ids...) {
		if m.Category != cci.Request || m.BO || m.ReturnCode != 0 || m.VendorStatus != 0 {
			t.Errorf("%s header: got category %d BO %v rc %v vendor %#x, want a plain request", m.Opcode, m.Category, m.BO, m.ReturnCode, m.VendorStatus)
		}
	}
	if ids[0].Tag == ids[1].Tag {
		t.Errorf("CCI tags: both requests used %#x, want a rolling tag", ids[0].Tag)
	}
	if got := f.types[cci.OpInitiateDCAdd]; got != mctp.MsgTypeFMAPI {
		t.Errorf("5604h MCTP type: got %#x, want 07h", got)
	}
	if got := f.types[cci.OpIdentify]; got != mctp.MsgTypeCXLCCI {
		t.Errorf("0001h MCTP type: got %#x, want 08h", got)
	}
	// Non-prescriptive adds go out as 20h bytes with count 0 (cxl-wire.md §3.8).
	if got := len(add[0].Payload); got != 0x20 {
		t.Errorf("5604h payload: got %d bytes, want 32", got)
	}
	var req cci.InitiateDCAddReq
	if err := req.UnmarshalBinary(add[0].Payload); err != nil {
		t.Fatalf("decode 5604h: %v", err)
	}
	want := cci.InitiateDCAddReq{HostID: 3, Policy: cci.AddPolicyFree, Region: 1, Length: 256 << 20, Tag: tag}
	if diff := cmp.Diff(want, req); diff != "" {
		t.Errorf("5604h request (-want +got):\n%s", diff)
	}
}

func TestDoRejectsOversizedRequest(t *testing.T) {
	c, f := newFake(t, Config{}, func(_ mctp.MsgType, m cci.Message) ([]byte, bool) {
		return answer(m, cci.Success, nil), true
	})
	c.mu.Lock()
	c.maxRequest = 256
	c.mu.Unlock()
	exts := make([]cci.Extent, 7) // 20h + 7×28h = 152h bytes
	for i := range exts {
		exts[i] = cci.Extent{DPA: uint64(i) << 28, Length: 1 << 28}
	}
	err := c.Add(context.Background(), fabric.AddRequest{Host: 1, Policy: fabric.AddPrescriptive, Extents: exts})
	if !errors.Is(err, cci.ErrPayloadLength) {
		t.Fatalf("Add: got %v, want an error wrapping ErrPayloadLength", err)
	}
	if n := f.count(cci.OpInitiateDCAdd); n != 0 {
		t.Errorf("requests sent: got %d, want 0", n)
	}
}

func TestDoAfterClose(t *testing.T) {
	c, _ := newFake(t, Config{}, func(_ mctp.MsgType, m cci.Message) ([]byte, bool) {
		return answer(m, cci.Success, nil), true
	})
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Do(context.Background(), cci.OpIdentify, nil, nil); !errors.Is(err, fabric.ErrClosed) {
		t.Errorf("Do after Close: got %v, want an error wrapping ErrClosed", err)
	}
	if _, ok := <-c.Events(); ok {
		t.Errorf("Events: got an event after Close, want a closed channel")
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: got %v, want nil", err)
	}
}

func TestCallerCancellation(t *testing.T) {
	c, _ := newFake(t, Config{Timeout: time.Hour}, func(mctp.MsgType, cci.Message) ([]byte, bool) {
		return nil, false
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := c.Do(ctx, cci.OpIdentify, nil, nil)
	if !errors.Is(err, context.Canceled) || errors.Is(err, fabric.ErrTimeout) {
		t.Errorf("Do: got %v, want context.Canceled and no ErrTimeout", err)
	}
}

func TestResponderAnswersNotifications(t *testing.T) {
	_, f := newFake(t, Config{}, func(_ mctp.MsgType, m cci.Message) ([]byte, bool) {
		return answer(m, cci.Success, nil), true
	})
	policy, _ := (&cci.EventInterruptPolicy{Mask: cci.PolicyDC}).MarshalBinary()
	tests := []struct {
		name   string
		typ    mctp.MsgType
		op     cci.Opcode
		wantRC cci.ReturnCode
	}{
		{"event notification", mctp.MsgTypeCXLCCI, cci.OpEventNotification, cci.Success},
		{"other request", mctp.MsgTypeCXLCCI, cci.OpIdentify, cci.Unsupported},
		{"fm-api request", mctp.MsgTypeFMAPI, cci.OpGetDCDInfo, cci.Unsupported},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := cci.Message{Category: cci.Request, Tag: 0x42, Opcode: tc.op, Payload: policy}.MarshalBinary()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			raw, err := f.ep.Request(ctx, DefaultEID, tc.typ, req)
			if err != nil {
				t.Fatalf("Request: %v", err)
			}
			got, err := cci.ParseMessage(raw)
			if err != nil {
				t.Fatalf("parse response: %v", err)
			}
			want := cci.Message{Category: cci.Response, Tag: 0x42, Opcode: tc.op, ReturnCode: tc.wantRC, Payload: []byte{}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("response (-want +got):\n%s", diff)
			}
		})
	}
}

// dcRecord builds a DC event record.
func dcRecord(handle uint16, typ uint8, host uint16, more bool, e cci.Extent) cci.EventRecord {
	return cci.DCEvent{Type: typ, HostID: host, More: more, Extent: e}.Record(handle, 0)
}

func TestTranslate(t *testing.T) {
	e := func(i int) cci.Extent {
		return cci.Extent{DPA: uint64(i) << 28, Length: 1 << 28, Tag: cci.Tag{byte(i)}}
	}
	garbage := cci.EventRecord{UUID: [16]byte{1, 2, 3}, Handle: 9}
	for i := range garbage.Data {
		garbage.Data[i] = 0xff
	}
	tests := []struct {
		name string
		recs []cci.EventRecord
		want []fabric.Event
	}{
		{"add response chain", []cci.EventRecord{
			dcRecord(1, cci.DCEventAddResponse, 2, true, e(1)),
			dcRecord(2, cci.DCEventAddResponse, 2, true, e(2)),
			dcRecord(3, cci.DCEventAddResponse, 2, false, e(3)),
		}, []fabric.Event{{Kind: fabric.EventAddResponse, Host: 2, Extents: []cci.Extent{e(1), e(2), e(3)}}}},
		{"host accepted nothing", []cci.EventRecord{
			dcRecord(1, cci.DCEventAddResponse, 5, false, cci.Extent{}),
		}, []fabric.Event{{Kind: fabric.EventAddResponse, Host: 5}}},
		{"capacity released", []cci.EventRecord{
			dcRecord(1, cci.DCEventCapacityReleased, 1, true, e(4)),
			dcRecord(2, cci.DCEventCapacityReleased, 1, false, e(5)),
		}, []fabric.Event{{Kind: fabric.EventCapacityReleased, Host: 1, Extents: []cci.Extent{e(4), e(5)}}}},
		{"region updated", []cci.EventRecord{
			cci.DCEvent{Type: cci.DCEventRegionUpdated, RegionIndex: 1}.Record(1, 0),
		}, []fabric.Event{{Kind: fabric.EventRegionUpdated}}},
		{"link down", []cci.EventRecord{
			cci.LinkEvent{Port: 3, Type: cci.LinkEventLinkStateChange}.Record(1, 0),
		}, []fabric.Event{{Kind: fabric.EventLinkChange, Host: 3}}},
		{"link up", []cci.EventRecord{
			cci.LinkEvent{Port: 6, Type: cci.LinkEventLinkStateChange, LinkUp: true}.Record(1, 0),
		}, []fabric.Event{{Kind: fabric.EventLinkChange, Host: 6, LinkUp: true}}},
		{"slot status is not a link change", []cci.EventRecord{
			cci.LinkEvent{Port: 6, Type: cci.LinkEventSlotStatus}.Record(1, 0),
		}, nil},
		{"host-directed records are skipped", []cci.EventRecord{
			dcRecord(1, cci.DCEventAdd, 1, false, e(1)),
			dcRecord(2, cci.DCEventRelease, 1, false, e(1)),
			dcRecord(3, cci.DCEventForcedRelease, 1, false, e(1)),
			dcRecord(4, 0x77, 1, false, e(1)),
		}, nil},
		{"garbage is skipped", []cci.EventRecord{garbage, {}}, nil},
		{"chain broken by an unrelated record", []cci.EventRecord{
			dcRecord(1, cci.DCEventAddResponse, 2, true, e(1)),
			dcRecord(2, cci.DCEventCapacityReleased, 2, false, e(2)),
		}, []fabric.Event{
			{Kind: fabric.EventAddResponse, Host: 2, Extents: []cci.Extent{e(1)}},
			{Kind: fabric.EventCapacityReleased, Host: 2, Extents: []cci.Extent{e(2)}},
		}},
		{"chain broken by another host", []cci.EventRecord{
			dcRecord(1, cci.DCEventAddResponse, 2, true, e(1)),
			dcRecord(2, cci.DCEventAddResponse, 3, false, e(2)),
		}, []fabric.Event{
			{Kind: fabric.EventAddResponse, Host: 2, Extents: []cci.Extent{e(1)}},
			{Kind: fabric.EventAddResponse, Host: 3, Extents: []cci.Extent{e(2)}},
		}},
		{"open chain waits for its tail", []cci.EventRecord{
			dcRecord(1, cci.DCEventAddResponse, 2, true, e(1)),
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{}
			if err := cfg.setDefaults(); err != nil {
				t.Fatal(err)
			}
			c := newClient(cfg)
			for _, r := range tc.recs {
				c.translate(r)
			}
			got := queued(c)
			if diff := cmp.Diff(tc.want, got, cmpEvents); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// cmpEvents ignores event timestamps.
var cmpEvents = cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Time" }, cmp.Ignore())

// queued returns the events waiting in c's channel.
func queued(c *Client) []fabric.Event {
	var out []fabric.Event
	for {
		select {
		case ev := <-c.events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

func TestTranslateToleratesRandomRecords(t *testing.T) {
	cfg := Config{}
	if err := cfg.setDefaults(); err != nil {
		t.Fatal(err)
	}
	c := newClient(cfg)
	rng := rand.New(rand.NewPCG(1, 2))
	uuids := [][16]byte{cci.DCEventUUID, cci.PhysicalSwitchEventUUID, cci.VirtualSwitchEventUUID, {}}
	for range 5000 {
		var raw [cci.EventRecordLen]byte
		for i := range raw {
			raw[i] = byte(rng.Uint32())
		}
		var r cci.EventRecord
		if err := r.UnmarshalBinary(raw[:]); err != nil {
			t.Fatalf("unmarshal: %v", err)
		}
		r.UUID = uuids[rng.IntN(len(uuids))]
		c.translate(r)
		queued(c)
	}
}

func TestEmitNeverBlocks(t *testing.T) {
	cfg := Config{}
	if err := cfg.setDefaults(); err != nil {
		t.Fatal(err)
	}
	c := newClient(cfg)
	for i := range eventQueueLen + 10 {
		c.emit(fabric.Event{Kind: fabric.EventLinkChange, Host: uint16(i)})
	}
	got := queued(c)
	if len(got) != eventQueueLen || got[len(got)-1].Host != eventQueueLen-1 {
		t.Fatalf("queued: got %d events ending with host %d, want %d ending with host %d",
			len(got), got[len(got)-1].Host, eventQueueLen, eventQueueLen-1)
	}
	// The consumer made room: the owed overflow comes before the next event.
	c.emit(fabric.Event{Kind: fabric.EventRegionUpdated})
	want := []fabric.Event{{Kind: fabric.EventOverflow}, {Kind: fabric.EventRegionUpdated}}
	if diff := cmp.Diff(want, queued(c), cmpEvents); diff != "" {
		t.Errorf("after making room (-want +got):\n%s", diff)
	}
}

// scriptedLog is a fake device's event log.
type scriptedLog struct {
	mu       sync.Mutex
	recs     []cci.EventRecord
	overflow bool
	clears   []cci.ClearEventRecordsReq
	policy   uint16
}

func (l *scriptedLog) serve(_ mctp.MsgType, m cci.Message) ([]byte, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch m.Opcode {
	case cci.OpSetMCTPEventInterruptPolicy:
		var p cci.EventInterruptPolicy
		_ = p.UnmarshalBinary(m.Payload)
		l.policy = p.Mask
		return answer(m, cci.Success, m.Payload), true
	case cci.OpGetEventRecords:
		var req cci.GetEventRecordsReq
		_ = req.UnmarshalBinary(m.Payload)
		resp := cci.GetEventRecordsResp{}
		if req.Log == cci.EventLogDC {
			n := min(len(l.recs), 2)
			resp = cci.GetEventRecordsResp{Overflow: l.overflow, More: n < len(l.recs), Records: l.recs[:n]}
		}
		b, _ := resp.MarshalBinary()
		return answer(m, cci.Success, b), true
	case cci.OpClearEventRecords:
		var req cci.ClearEventRecordsReq
		if err := req.UnmarshalBinary(m.Payload); err != nil {
			return answer(m, cci.InvalidPayloadLength, nil), true
		}
		l.clears = append(l.clears, req)
		if req.ClearAll {
			l.recs, l.overflow = nil, false
			return answer(m, cci.Success, nil), true
		}
		for i, h := range req.Handles {
			if i >= len(l.recs) || l.recs[i].Handle != h {
				return answer(m, cci.InvalidHandle, nil), true
			}
		}
		l.recs = l.recs[len(req.Handles):]
		return answer(m, cci.Success, nil), true
	}
	return answer(m, cci.Unsupported, nil), true
}

func TestDrain(t *testing.T) {
	e := func(i int) cci.Extent { return cci.Extent{DPA: uint64(i) << 28, Length: 1 << 28} }
	tests := []struct {
		name       string
		recs       []cci.EventRecord
		overflow   bool
		wantEvents []fabric.Event
		wantClears []cci.ClearEventRecordsReq
	}{
		{"chain across pages, cleared in order",
			[]cci.EventRecord{
				dcRecord(7, cci.DCEventAddResponse, 1, true, e(1)),
				dcRecord(8, cci.DCEventAddResponse, 1, true, e(2)),
				dcRecord(9, cci.DCEventAddResponse, 1, false, e(3)),
			}, false,
			[]fabric.Event{{Kind: fabric.EventAddResponse, Host: 1, Extents: []cci.Extent{e(1), e(2), e(3)}}},
			[]cci.ClearEventRecordsReq{
				{Log: cci.EventLogDC, Handles: []uint16{7, 8}},
				{Log: cci.EventLogDC, Handles: []uint16{9}},
			}},
		{"overflow is reported and cleared wholesale",
			[]cci.EventRecord{
				dcRecord(1, cci.DCEventCapacityReleased, 4, false, e(1)),
				dcRecord(2, cci.DCEventAddResponse, 4, true, e(2)),
				dcRecord(3, cci.DCEventAddResponse, 4, false, e(3)),
			}, true,
			[]fabric.Event{
				{Kind: fabric.EventCapacityReleased, Host: 4, Extents: []cci.Extent{e(1)}},
				{Kind: fabric.EventOverflow},
			},
			[]cci.ClearEventRecordsReq{{Log: cci.EventLogDC, ClearAll: true}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := &scriptedLog{recs: tc.recs, overflow: tc.overflow}
			c, _ := newFake(t, Config{}, l.serve)
			if err := c.enableEvents(context.Background()); err != nil {
				t.Fatalf("enableEvents: %v", err)
			}
			var got []fabric.Event
			for range tc.wantEvents {
				got = append(got, <-c.Events())
			}
			if diff := cmp.Diff(tc.wantEvents, got, cmpEvents); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			if diff := cmp.Diff(tc.wantClears, l.clears); diff != "" {
				t.Errorf("clears (-want +got):\n%s", diff)
			}
			if l.policy != policyMask {
				t.Errorf("policy: got %#x, want %#x", l.policy, policyMask)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	var cfg Config
	if err := cfg.setDefaults(); err != nil {
		t.Fatal(err)
	}
	got := []any{cfg.EID, cfg.DeviceEID, cfg.Timeout, cfg.Retries, cfg.ResponseLimitExp, cfg.PollInterval}
	want := []any{mctp.EID(0x10), mctp.EID(8), 2 * time.Second, 3, uint8(10), 2 * time.Second}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	bad := Config{ResponseLimitExp: 11}
	if err := bad.setDefaults(); err == nil {
		t.Errorf("response limit 2^11: got nil error, want one")
	}
}

// pagedLists is a fake device serving 5603h and 5608h from fixed lists,
// honouring the requested page size, and moving both generation numbers
// once, right after the first page it serves.
type pagedLists struct {
	mu      sync.Mutex
	extents []cci.Extent
	tags    []cci.TagEntry
	gen     uint32
	bumpAt  int // bump the generation after this many pages; 0 = never
	served  int
}

func (p *pagedLists) serve(_ mctp.MsgType, m cci.Message) ([]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []byte
	switch m.Opcode {
	case cci.OpGetDCRegionExtentLists:
		var q cci.GetDCRegionExtentListsReq
		_ = q.UnmarshalBinary(m.Payload)
		end := min(int(q.Start)+int(q.Count), len(p.extents))
		resp := cci.GetDCRegionExtentListsResp{HostID: q.HostID, Start: q.Start, Total: uint32(len(p.extents)),
			Generation: p.gen, Extents: p.extents[q.Start:end]}
		out, _ = resp.MarshalBinary()
	case cci.OpDCListTags:
		var q cci.ListTagsReq
		_ = q.UnmarshalBinary(m.Payload)
		end := min(int(q.Start)+int(q.Max), len(p.tags))
		resp := cci.ListTagsResp{Generation: p.gen, Total: uint32(len(p.tags)), Validity: 3, Tags: p.tags[q.Start:end]}
		out, _ = resp.MarshalBinary()
	default:
		return answer(m, cci.Unsupported, nil), true
	}
	p.served++
	if p.served == p.bumpAt {
		p.gen++
	}
	return answer(m, cci.Success, out), true
}

func TestListPaging(t *testing.T) {
	var exts []cci.Extent
	var tags []cci.TagEntry
	var wantTags []fabric.TagInfo
	for i := range 12 {
		tag := cci.Tag{byte(i + 1)}
		exts = append(exts, cci.Extent{DPA: uint64(i) << 28, Length: 1 << 28, Tag: tag})
		te := cci.TagEntry{Tag: tag, FMReference: i%2 == 0}
		te.Accepted[0] = byte(i)
		te.Pending[1] = byte(i)
		tags = append(tags, te)
		wantTags = append(wantTags, fabric.TagInfo{Tag: tag, FMReference: te.FMReference, Accepted: te.Accepted, Pending: te.Pending})
	}
	// Before Discover the limit is 256 bytes: 5 extents or 2 tags a page.
	tests := []struct {
		name      string
		bumpAt    int
		wantCalls int
		wantGen   uint32
	}{
		{"stable", 0, 3, 7},
		{"generation moves mid-read", 1, 5, 8},
	}
	for _, tc := range tests {
		t.Run("extents/"+tc.name, func(t *testing.T) {
			p := &pagedLists{extents: exts, gen: 7, bumpAt: tc.bumpAt}
			c, f := newFake(t, Config{}, p.serve)
			got, err := c.Extents(context.Background(), 4)
			if err != nil {
				t.Fatalf("Extents: %v", err)
			}
			want := fabric.ExtentList{Host: 4, Generation: tc.wantGen, Extents: exts}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("list (-want +got):\n%s", diff)
			}
			if n := f.count(cci.OpGetDCRegionExtentLists); n != tc.wantCalls {
				t.Errorf("pages read: got %d, want %d", n, tc.wantCalls)
			}
		})
	}
	tagTests := []struct {
		name      string
		bumpAt    int
		wantCalls int
		wantGen   uint32
	}{
		{"stable", 0, 6, 7},
		{"generation moves mid-read", 1, 8, 8},
	}
	for _, tc := range tagTests {
		t.Run("tags/"+tc.name, func(t *testing.T) {
			p := &pagedLists{tags: tags, gen: 7, bumpAt: tc.bumpAt}
			c, f := newFake(t, Config{}, p.serve)
			got, err := c.Tags(context.Background())
			if err != nil {
				t.Fatalf("Tags: %v", err)
			}
			want := fabric.TagList{Generation: tc.wantGen, Tags: wantTags}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("list (-want +got):\n%s", diff)
			}
			if n := f.count(cci.OpDCListTags); n != tc.wantCalls {
				t.Errorf("pages read: got %d, want %d", n, tc.wantCalls)
			}
		})
	}
}
