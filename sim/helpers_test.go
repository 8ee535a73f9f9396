package sim

import (
	"context"
	"encoding"
	"errors"
	"sync"
	"testing"
	"time"

	"cxlpool/fabric/cci"
	"cxlpool/fabric/mctp"
)

const (
	fmEID   mctp.EID = 9
	gib              = uint64(1) << 30
	block            = uint64(256) << 20
	callTTL          = 10 * time.Second // bound only, never an assertion
)

// testFM is a minimal FM for tests: raw CCI messages over an MCTP endpoint.
type testFM struct {
	t   *testing.T
	box *Box
	ep  *mctp.Endpoint

	mu    sync.Mutex
	tag   uint8
	notes []cci.Message // Event Notifications received, every try
	// ignore is how many notifications to leave unanswered.
	ignore int
	noteCh chan cci.Message
}

// newBox returns a box with cfg changed by mod and an FM talking to it over
// an in-memory MCTP pipe.
func newBox(t *testing.T, mod func(*Config)) (*Box, *testFM) {
	t.Helper()
	cfg := DefaultConfig()
	if mod != nil {
		mod(&cfg)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	devLink, fmLink := mctp.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- b.Serve(ctx, devLink) }()
	f := &testFM{t: t, box: b, noteCh: make(chan cci.Message, 64)}
	f.ep = mctp.NewEndpoint(fmLink, mctp.Config{EID: fmEID, MaxMessage: 8192, MessageTypes: []mctp.MsgType{mctp.MsgTypeCXLCCI}}, f.handle)
	ran := make(chan struct{})
	go func() { _ = f.ep.Run(ctx); close(ran) }()
	t.Cleanup(func() {
		cancel()
		<-ran
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b, f
}

// handle answers Event Notifications from the box.
func (f *testFM) handle(_ context.Context, _ mctp.EID, typ mctp.MsgType, msg []byte) ([]byte, bool) {
	m, err := cci.ParseMessage(msg)
	if err != nil || typ != mctp.MsgTypeCXLCCI || m.Opcode != cci.OpEventNotification {
		return nil, false
	}
	f.mu.Lock()
	f.notes = append(f.notes, m)
	skip := f.ignore > 0
	if skip {
		f.ignore--
	}
	f.mu.Unlock()
	f.noteCh <- m
	if skip {
		return nil, false
	}
	out, _ := cci.Message{Category: cci.Response, Tag: m.Tag, Opcode: m.Opcode}.MarshalBinary()
	return out, true
}

// rawCtx sends msg with MCTP type typ and returns the raw response.
func (f *testFM) rawCtx(ctx context.Context, typ mctp.MsgType, msg []byte) ([]byte, error) {
	return f.ep.Request(ctx, 0, typ, msg) // EID 0: the box answers it too
}

// send sends a request with the given header fields and returns the
// parsed response, checking that tag and opcode are echoed.
func (f *testFM) send(typ mctp.MsgType, op cci.Opcode, payload []byte) cci.Message {
	f.t.Helper()
	f.mu.Lock()
	f.tag++
	tag := f.tag
	f.mu.Unlock()
	raw, err := cci.Message{Category: cci.Request, Tag: tag, Opcode: op, Payload: payload}.MarshalBinary()
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTTL)
	defer cancel()
	out, err := f.rawCtx(ctx, typ, raw)
	if err != nil {
		f.t.Fatalf("%v: %v", op, err)
	}
	m, err := cci.ParseMessage(out)
	if err != nil {
		f.t.Fatalf("%v: response: %v", op, err)
	}
	if m.Category != cci.Response || m.Tag != tag || m.Opcode != op {
		f.t.Fatalf("%v: response header category %d tag %d opcode %v, want 1, %d, %v", op, m.Category, m.Tag, m.Opcode, tag, op)
	}
	return m
}

// call sends a typed request on the right MCTP type and decodes the
// response into resp (if not nil). It returns the return code.
func (f *testFM) call(op cci.Opcode, req encoding.BinaryMarshaler, resp encoding.BinaryUnmarshaler) cci.ReturnCode {
	f.t.Helper()
	var p []byte
	if req != nil {
		var err error
		if p, err = req.MarshalBinary(); err != nil {
			f.t.Fatal(err)
		}
	}
	m := f.send(mctp.MsgType(op.MCTPType()), op, p)
	if m.ReturnCode == cci.Success && resp != nil {
		if err := resp.UnmarshalBinary(m.Payload); err != nil {
			f.t.Fatalf("%v: decode: %v", op, err)
		}
	}
	return m.ReturnCode
}

// must is call that requires Success.
func (f *testFM) must(op cci.Opcode, req encoding.BinaryMarshaler, resp encoding.BinaryUnmarshaler) {
	f.t.Helper()
	if rc := f.call(op, req, resp); rc != cci.Success {
		f.t.Fatalf("%v: got %v, want Success", op, rc)
	}
}

func (f *testFM) add(q cci.InitiateDCAddReq) cci.ReturnCode {
	f.t.Helper()
	return f.call(cci.OpInitiateDCAdd, &q, nil)
}

func (f *testFM) release(q cci.InitiateDCReleaseReq) cci.ReturnCode {
	f.t.Helper()
	return f.call(cci.OpInitiateDCRelease, &q, nil)
}

func (f *testFM) extents(host uint16) cci.GetDCRegionExtentListsResp {
	f.t.Helper()
	var r cci.GetDCRegionExtentListsResp
	var all []cci.Extent
	for {
		f.must(cci.OpGetDCRegionExtentLists, &cci.GetDCRegionExtentListsReq{HostID: host, Count: 1000, Start: uint32(len(all))}, &r)
		all = append(all, r.Extents...)
		if len(r.Extents) == 0 || len(all) >= int(r.Total) {
			break
		}
	}
	r.Extents = all
	return r
}

func (f *testFM) tags() cci.ListTagsResp {
	f.t.Helper()
	var r cci.ListTagsResp
	f.must(cci.OpDCListTags, &cci.ListTagsReq{Max: 100}, &r)
	return r
}

// drain reads and clears every record of an FM log.
func (f *testFM) drain(log uint8) []cci.EventRecord {
	f.t.Helper()
	var out []cci.EventRecord
	for {
		var r cci.GetEventRecordsResp
		f.must(cci.OpGetEventRecords, &cci.GetEventRecordsReq{Log: log}, &r)
		if len(r.Records) == 0 {
			return out
		}
		hs := make([]uint16, len(r.Records))
		for i, rec := range r.Records {
			hs[i] = rec.Handle
		}
		out = append(out, r.Records...)
		f.must(cci.OpClearEventRecords, &cci.ClearEventRecordsReq{Log: log, Handles: hs}, nil)
	}
}

// dcEvents drains the FM's DC log and decodes it.
func (f *testFM) dcEvents() []cci.DCEvent {
	f.t.Helper()
	var out []cci.DCEvent
	for _, r := range f.drain(cci.EventLogDC) {
		ev, err := cci.ParseDCEvent(r)
		if err != nil {
			f.t.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}

// settle runs host ld's event processing synchronously: when it returns,
// every complete chain queued so far has been answered.
func settle(t *testing.T, b *Box, ld int) {
	t.Helper()
	b.hosts[ld].process(context.Background())
}

// waitFor polls cond; only for effects of goroutines a test cannot drive.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(callTTL)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func rcErr(err error) cci.ReturnCode {
	if err == nil {
		return cci.Success
	}
	var rc cci.ReturnCode
	if errors.As(err, &rc) {
		return rc
	}
	return cci.InternalError
}

// blocksFree returns the number of free blocks in region r.
func blocksFree(b *Box, r int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.regions[r].used) - b.regions[r].nused
}

func tagN(n byte) cci.Tag { return cci.Tag{0: 0xa0, 15: n} }
