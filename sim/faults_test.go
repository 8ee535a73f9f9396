package sim

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"cxlpool/fabric/cci"
	"cxlpool/fabric/mctp"
	"cxlpool/fabric/serial"
)

func recvNote(t *testing.T, f *testFM) cci.Message {
	t.Helper()
	select {
	case m := <-f.noteCh:
		return m
	case <-time.After(callTTL):
		t.Fatal("no event notification")
	}
	return cci.Message{}
}

// recvNewNote skips resends of notification prev (a slow FM answer can
// let the 1 ms resend timer fire) and returns the next new one.
func recvNewNote(t *testing.T, f *testFM, prev cci.Message) cci.Message {
	t.Helper()
	for {
		m := recvNote(t, f)
		if m.Tag != prev.Tag {
			return m
		}
	}
}

func noteMask(t *testing.T, m cci.Message) uint16 {
	t.Helper()
	var p cci.EventInterruptPolicy
	if err := p.UnmarshalBinary(m.Payload); err != nil {
		t.Fatal(err)
	}
	return p.Mask
}

func TestEventNotification(t *testing.T) {
	b, f := newBox(t, nil)
	f.must(cci.OpSetMCTPEventInterruptPolicy, &cci.EventInterruptPolicy{Mask: cci.PolicyDC | cci.PolicyInfo}, nil)
	holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 0, Policy: cci.AddPolicyFree, Length: block})
	n1 := recvNote(t, f)
	if n1.Category != cci.Request || n1.Opcode != cci.OpEventNotification || noteMask(t, n1) != cci.PolicyDC {
		t.Fatalf("notification = %+v, want 0106h request with the DC bit", n1)
	}
	// The log is not empty: a second record does not notify again.
	holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 1, Policy: cci.AddPolicyFree, Length: block})
	b.mu.Lock()
	armed, pendingBits := b.fmLogs[cci.EventLogDC].armed, b.notifyPending
	b.mu.Unlock()
	if armed || pendingBits != 0 {
		t.Fatalf("second record into a non-empty log: armed %v, pending %#x; want no notification", armed, pendingBits)
	}
	// Read and clear: the next empty→non-empty transition notifies again.
	f.dcEvents()
	holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 2, Policy: cci.AddPolicyFree, Length: block})
	n2 := recvNewNote(t, f, n1)
	if noteMask(t, n2) != cci.PolicyDC {
		t.Errorf("second notification = %+v, want DC bit and a new tag", n2)
	}
	b.SetLink(3, false)
	if n3 := recvNewNote(t, f, n2); noteMask(t, n3) != cci.PolicyInfo {
		t.Errorf("link change notification mask = %#x, want Info", noteMask(t, n3))
	}
	// Disabled logs do not notify.
	b.mu.Lock()
	b.addFMRecord(cci.EventLogWarning, cci.LinkEvent{}.Record(0, 0))
	pendingBits = b.notifyPending
	b.mu.Unlock()
	if pendingBits != 0 {
		t.Errorf("warning log (disabled) queued notification %#x", pendingBits)
	}
}

func TestEventNotificationRetries(t *testing.T) {
	b, f := newBox(t, func(c *Config) { c.NotifyRetries = 3 })
	f.mu.Lock()
	f.ignore = 4 // the first notification is never acknowledged
	f.mu.Unlock()
	f.must(cci.OpSetMCTPEventInterruptPolicy, &cci.EventInterruptPolicy{Mask: cci.PolicyInfo}, nil)
	b.SetLink(1, false)
	first := recvNote(t, f)
	for i := range 3 {
		if m := recvNote(t, f); m.Tag != first.Tag || noteMask(t, m) != cci.PolicyInfo {
			t.Fatalf("retry %d = %+v, want same CCI tag %d", i+1, m, first.Tag)
		}
	}
	// After 1 + 3 tries the box gives up; the next notification is new.
	f.drain(cci.EventLogInfo)
	b.SetLink(1, true)
	recvNewNote(t, f, first)
	f.mu.Lock()
	n := 0
	for _, m := range f.notes {
		if m.Tag == first.Tag {
			n++
		}
	}
	f.mu.Unlock()
	if n != 4 {
		t.Errorf("tries of the unacknowledged notification = %d, want 1 + 3 retries", n)
	}
}

func TestFaultsBusyRetryDropDelay(t *testing.T) {
	b, f := newBox(t, nil)
	fl := b.Faults()
	fl.Busy(2)
	for i, want := range []cci.ReturnCode{cci.Busy, cci.Busy, cci.Success} {
		if rc := f.call(cci.OpGetDCDInfo, nil, nil); rc != want {
			t.Errorf("busy call %d: got %v, want %v", i, rc, want)
		}
	}
	fl.RetryRequired(1)
	for i, want := range []cci.ReturnCode{cci.RetryRequired, cci.Success} {
		if rc := f.call(cci.OpIdentify, nil, nil); rc != want {
			t.Errorf("retry call %d: got %v, want %v", i, rc, want)
		}
	}
	// A busy add does not execute.
	fl.Busy(1)
	if rc := f.add(cci.InitiateDCAddReq{HostID: 0, Policy: cci.AddPolicyFree, Length: block}); rc != cci.Busy {
		t.Errorf("busy add: got %v", rc)
	}
	if blocksFree(b, 0) != 2048 {
		t.Error("busy add executed")
	}

	// A dropped response: the command runs, the FM times out.
	fl.DropResponses(1)
	raw, _ := cci.Message{Category: cci.Request, Tag: 77, Opcode: cci.OpSetResponseMessageLimit, Payload: []byte{10}}.MarshalBinary()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := f.rawCtx(ctx, mctp.MsgTypeCXLCCI, raw)
	cancel()
	if !errors.Is(err, mctp.ErrTimeout) {
		t.Fatalf("dropped response: got %v, want timeout", err)
	}
	var lim cci.ResponseMessageLimit
	f.must(cci.OpGetResponseMessageLimit, nil, &lim)
	if lim.Exp != 10 {
		t.Errorf("dropped command did not run: limit %d, want 10", lim.Exp)
	}

	fl.DelayResponses(20 * time.Millisecond)
	f.must(cci.OpIdentify, nil, nil)
	fl.DelayResponses(0)

	// Faults are safe under concurrent traffic.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 20 {
				rc := f.call(cci.OpGetDCDInfo, nil, nil)
				if rc != cci.Success && rc != cci.Busy && rc != cci.RetryRequired {
					t.Errorf("concurrent call: %v", rc)
				}
			}
		})
	}
	for range 20 {
		fl.Busy(1)
		fl.RetryRequired(1)
		fl.DelayResponses(time.Microsecond)
	}
	wg.Wait()
	fl.DelayResponses(0)
}

func TestCorruptFrames(t *testing.T) {
	b, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	devSide, fmSide := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- b.ServeConn(ctx, devSide) }()
	link := serial.NewLink(fmSide, serial.LinkConfig{})
	ep := mctp.NewEndpoint(link, mctp.Config{EID: fmEID}, nil)
	ran := make(chan struct{})
	go func() { _ = ep.Run(ctx); close(ran) }()
	defer func() {
		cancel()
		<-ran
		if err := <-served; err != nil {
			t.Errorf("ServeConn: %v", err)
		}
	}()
	ident, _ := cci.Message{Category: cci.Request, Tag: 1, Opcode: cci.OpIdentify}.MarshalBinary()
	ask := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		_, err := ep.Request(ctx, 0, mctp.MsgTypeCXLCCI, ident)
		return err
	}
	b.Faults().CorruptFrames(1)
	if err := ask(200 * time.Millisecond); !errors.Is(err, mctp.ErrTimeout) {
		t.Fatalf("corrupted response: got %v, want timeout", err)
	}
	if s := link.Stats(); s.FCSErrors != 1 {
		t.Errorf("FM link stats = %+v, want 1 FCS error", s)
	}
	if err := ask(callTTL); err != nil {
		t.Errorf("after the corrupted frame: %v", err)
	}
}

func TestDeviceReset(t *testing.T) {
	b, f := newBox(t, nil)
	b.Host(3).SetPolicy(Policy{Mode: NeverAnswer})
	if rc := f.add(cci.InitiateDCAddReq{HostID: 3, Policy: cci.AddPolicyFree, Length: 2 * block, Tag: tagN(3)}); rc != cci.Success {
		t.Fatal(rc)
	}
	settle(t, b, 3)
	kept := holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 0, Policy: cci.AddPolicyFree, Length: block, Tag: tagN(0)})
	if _, err := b.Host(0).WriteAt([]byte("survives"), kept[0].DPA); err != nil {
		t.Fatal(err)
	}
	// Host 0 is asked to release but is down, so the release stays pending.
	b.SetLink(0, false)
	if rc := f.release(cci.InitiateDCReleaseReq{HostID: 0, Length: block, Tag: tagN(0)}); rc != cci.Success {
		t.Fatal(rc)
	}
	f.must(cci.OpSetMCTPEventInterruptPolicy, &cci.EventInterruptPolicy{Mask: cci.PolicyDC}, nil)
	f.must(cci.OpSetResponseMessageLimit, &cci.ResponseMessageLimit{Exp: 8}, nil)
	genBefore := f.extents(0).Generation

	b.Faults().Reset()
	for i := range 3 {
		if rc := f.call(cci.OpIdentify, nil, nil); rc != cci.RetryRequired {
			t.Fatalf("request %d while booting: got %v, want Retry Required", i, rc)
		}
	}
	f.must(cci.OpIdentify, nil, nil)

	var p cci.EventInterruptPolicy
	f.must(cci.OpGetMCTPEventInterruptPolicy, nil, &p)
	var lim cci.ResponseMessageLimit
	f.must(cci.OpGetResponseMessageLimit, nil, &lim)
	if p.Mask != 0 || lim.Exp != 9 {
		t.Errorf("after reset: policy %#x, limit %d; want 0, 9", p.Mask, lim.Exp)
	}
	for log := range uint8(5) {
		var r cci.GetEventRecordsResp
		f.must(cci.OpGetEventRecords, &cci.GetEventRecordsReq{Log: log}, &r)
		if len(r.Records) != 0 {
			t.Errorf("log %d has %d records after reset", log, len(r.Records))
		}
	}
	tl := f.tags()
	if len(tl.Tags) != 1 || tl.Tags[0].Tag != tagN(0) || !hasLD(tl.Tags[0].Accepted, 0) {
		t.Errorf("tags after reset = %+v; want only host 0's accepted tag", tl.Tags)
	}
	if got := blocksFree(b, 0); got != 2047 {
		t.Errorf("free blocks = %d, want 2047 (pending add returned)", got)
	}
	el := f.extents(0)
	if len(el.Extents) != 1 || el.Extents[0] != kept[0] || el.Generation != genBefore {
		t.Errorf("host 0 extents after reset = %+v; want kept unchanged", el)
	}
	b.SetLink(0, true)
	settle(t, b, 0)
	got := make([]byte, 8)
	if _, err := b.Host(0).ReadAt(got, kept[0].DPA); err != nil || string(got) != "survives" {
		t.Errorf("data after reset = %q, %v; want kept (the pending release was dropped)", got, err)
	}
	// Host 3's late answer to the dropped add is refused; nothing changes.
	h := b.Host(3)
	h.mbox.Lock()
	err := h.call(cci.OpAddDCResponse, &cci.AddDCResponseReq{}, nil)
	h.mbox.Unlock()
	if rcErr(err) != cci.InvalidInput {
		t.Errorf("answer to a dropped add: got %v, want Invalid Input", err)
	}
}

func TestLinkDownUp(t *testing.T) {
	b, f := newBox(t, nil)
	b.SetLink(2, false)
	b.SetLink(2, false) // no change, no record
	if rc := f.add(cci.InitiateDCAddReq{HostID: 2, Policy: cci.AddPolicyFree, Length: block}); rc != cci.Success {
		t.Fatal(rc)
	}
	settle(t, b, 2) // a down host processes nothing
	if len(f.extents(2).Extents) != 0 {
		t.Fatal("down host accepted capacity")
	}
	var hi cci.GetHeadInfoResp
	f.must(cci.OpGetHeadInfo, &cci.GetHeadInfoReq{StartHead: 2, Count: 1}, &hi)
	if hi.Heads[0].LTSSM != cci.LTSSMDetect {
		t.Errorf("LTSSM while down = %#x, want Detect", hi.Heads[0].LTSSM)
	}
	b.SetLink(2, true)
	waitFor(t, "host 2 to accept after link up", func() bool { return len(b.Host(2).Extents()) == 1 })
	f.must(cci.OpGetHeadInfo, &cci.GetHeadInfoReq{StartHead: 2, Count: 1}, &hi)
	if hi.Heads[0].LTSSM != cci.LTSSML0 {
		t.Errorf("LTSSM after up = %#x, want L0", hi.Heads[0].LTSSM)
	}
	recs := f.drain(cci.EventLogInfo)
	var evs []cci.LinkEvent
	for _, r := range recs {
		ev, err := cci.ParseLinkEvent(r)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	if len(evs) != 2 || evs[0] != (cci.LinkEvent{Port: 2}) || evs[1] != (cci.LinkEvent{Port: 2, LinkUp: true}) {
		t.Errorf("link events = %+v, want down then up on port 2", evs)
	}
	b.SetLink(99, false) // out of range: ignored
}

func TestBootRetriesZero(t *testing.T) {
	b, f := newBox(t, func(c *Config) { c.BootRetries = 0 })
	b.Faults().Reset()
	f.must(cci.OpIdentify, nil, nil)
}

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
	}{
		{"no heads", func(c *Config) { c.Heads = 0 }},
		{"too many heads", func(c *Config) { c.Heads = 33 }},
		{"no regions", func(c *Config) { c.Regions = 0 }},
		{"nine regions", func(c *Config) { c.Regions = 9 }},
		{"capacity not 256 MB multiple", func(c *Config) { c.Capacity = 1<<40 + 1 }},
		{"capacity not split evenly", func(c *Config) { c.Capacity = 768 << 20 }},
		{"block size not power of two", func(c *Config) { c.BlockSize = 3 << 20 }},
		{"block size too small", func(c *Config) { c.BlockSize = 1 << 20 }},
		{"block size larger than region", func(c *Config) { c.Capacity = 1 << 30; c.BlockSize = 1 << 30 }},
		{"payload exponent", func(c *Config) { c.MaxPayloadExp = 11 }},
		{"firmware revision", func(c *Config) { c.FirmwareRevision = "this is far too long" }},
		{"EID 0", func(c *Config) { c.EID = 0 }},
	}
	for _, tt := range tests {
		cfg := DefaultConfig()
		tt.mod(&cfg)
		if b, err := New(cfg); err == nil {
			b.Close()
			t.Errorf("%s: New succeeded", tt.name)
		}
	}
}

func TestDropResponsesTo(t *testing.T) {
	f := &Faults{}
	f.DropResponsesTo(cci.OpInitiateDCAdd, 1)
	for _, tc := range []struct {
		op   cci.Opcode
		want bool
	}{
		{cci.OpGetEventRecords, false}, // other traffic keeps its responses
		{cci.OpInitiateDCAdd, true},
		{cci.OpInitiateDCAdd, false}, // only n of them
	} {
		if got := f.dropResponse(tc.op); got != tc.want {
			t.Errorf("dropResponse(%v) = %v, want %v", tc.op, got, tc.want)
		}
	}
}
