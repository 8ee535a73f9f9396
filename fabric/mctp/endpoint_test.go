package mctp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const (
	fmEID  EID = 0x08
	devEID EID = 0x09
)

// start runs e until the test ends and returns a channel with Run's result.
func start(t testing.TB, e *Endpoint) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		e.Close()
	})
	return done
}

// pair returns a running FM endpoint and a running device endpoint with
// handler h, connected by a Pipe.
func pair(t testing.TB, h Handler) (fm, dev *Endpoint) {
	t.Helper()
	a, b := Pipe()
	fm = NewEndpoint(a, Config{EID: fmEID}, nil)
	dev = NewEndpoint(b, Config{EID: devEID, MessageTypes: []MsgType{MsgTypeFMAPI, MsgTypeCXLCCI}}, h)
	start(t, fm)
	start(t, dev)
	return fm, dev
}

// echo answers every request with "re:" + the request.
func echo(_ context.Context, _ EID, _ MsgType, msg []byte) ([]byte, bool) {
	return append([]byte("re:"), msg...), true
}

func withTimeout(t testing.TB) context.Context {
	t.Helper()
	// Generous: only a hang should ever reach it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestRequestResponse(t *testing.T) {
	type seen struct {
		src EID
		typ MsgType
		msg []byte
	}
	var mu sync.Mutex
	var got []seen
	h := func(ctx context.Context, src EID, typ MsgType, msg []byte) ([]byte, bool) {
		mu.Lock()
		got = append(got, seen{src, typ, msg})
		mu.Unlock()
		return echo(ctx, src, typ, msg)
	}
	fm, _ := pair(t, h)
	tests := []struct {
		name string
		typ  MsgType
		size int
	}{
		{"one packet", MsgTypeCXLCCI, 12},
		{"exactly one MTU", MsgTypeFMAPI, BaselineMTU - 1},
		{"two packets", MsgTypeFMAPI, BaselineMTU},
		{"largest CXL message", MsgTypeCXLCCI, 1036},
		{"empty message", MsgTypeCXLCCI, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			got = nil
			mu.Unlock()
			msg := seqBody(tc.size)
			resp, err := fm.Request(withTimeout(t), devEID, tc.typ, msg)
			if err != nil {
				t.Fatalf("Request: %v", err)
			}
			if diff := cmp.Diff(append([]byte("re:"), msg...), resp); diff != "" {
				t.Errorf("response (-want +got):\n%s", diff)
			}
			mu.Lock()
			defer mu.Unlock()
			want := []seen{{fmEID, tc.typ, msg}}
			if diff := cmp.Diff(want, got, cmp.AllowUnexported(seen{})); diff != "" {
				t.Errorf("handler calls (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := fm.Request(withTimeout(t), devEID, MsgTypeCXLCCI, make([]byte, DefaultMaxMessage)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized request: got %v, want ErrTooLarge", err)
	}
}

func TestRequestToNullEIDAcceptsAnySource(t *testing.T) {
	fm, _ := pair(t, echo)
	resp, err := fm.Request(withTimeout(t), EIDNull, MsgTypeCXLCCI, []byte{1})
	if err != nil {
		t.Fatalf("Request: %v", err)
	}
	if diff := cmp.Diff([]byte("re:\x01"), resp); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
}

func TestConcurrentRequestsShareEightTags(t *testing.T) {
	const n = 40
	var mu sync.Mutex
	inflight, peak := 0, 0
	entered := make(chan struct{}, n)
	release := make(chan struct{})
	h := func(ctx context.Context, src EID, typ MsgType, msg []byte) ([]byte, bool) {
		mu.Lock()
		inflight++
		peak = max(peak, inflight)
		mu.Unlock()
		entered <- struct{}{}
		<-release
		mu.Lock()
		inflight--
		mu.Unlock()
		return echo(ctx, src, typ, msg)
	}
	fm, _ := pair(t, h)
	ctx := withTimeout(t)
	type result struct {
		i    int
		resp []byte
		err  error
	}
	results := make(chan result, n)
	for i := range n {
		go func() {
			resp, err := fm.Request(ctx, devEID, MsgTypeCXLCCI, fmt.Appendf(nil, "req %d", i))
			results <- result{i, resp, err}
		}()
	}
	// Eight requests reach the device; the rest wait for a tag.
	for range tagCount {
		<-entered
	}
	close(release)
	for range n {
		r := <-results
		if r.err != nil {
			t.Errorf("request %d: %v", r.i, r.err)
			continue
		}
		if want := fmt.Sprintf("re:req %d", r.i); string(r.resp) != want {
			t.Errorf("request %d: got %q, want %q", r.i, r.resp, want)
		}
	}
	if peak > tagCount {
		t.Errorf("peak outstanding requests %d, want at most %d", peak, tagCount)
	}
}

func TestRequestTimeout(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	silent := func(ctx context.Context, _ EID, _ MsgType, _ []byte) ([]byte, bool) {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return nil, false
	}
	fm, _ := pair(t, silent)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := fm.Request(ctx, devEID, MsgTypeCXLCCI, []byte{1})
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("deadline: got %v, want ErrTimeout and DeadlineExceeded", err)
	}

	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	_, err = fm.Request(ctx2, devEID, MsgTypeCXLCCI, []byte{1})
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
		t.Errorf("cancel: got %v, want Canceled without ErrTimeout", err)
	}
}

func TestTagAllocation(t *testing.T) {
	fm, peer := newRaw(t, Config{EID: fmEID}, nil)
	ctx := withTimeout(t)
	type result struct {
		resp []byte
		err  error
	}
	ask := func(ctx context.Context, dst EID) <-chan result {
		ch := make(chan result, 1)
		go func() {
			resp, err := fm.Request(ctx, dst, MsgTypeCXLCCI, []byte{byte(dst)})
			ch <- result{resp, err}
		}()
		return ch
	}
	short := func() context.Context {
		c, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		t.Cleanup(cancel)
		return c
	}

	// Eight outstanding requests to the device use all eight tags.
	var held []<-chan result
	seen := map[uint8]bool{}
	for range tagCount {
		held = append(held, ask(ctx, devEID))
		h, _ := peer.recv()
		if !h.TO || h.Dst != devEID || h.Src != fmEID || seen[h.Tag] {
			t.Fatalf("request header %+v (tags seen %v)", h, seen)
		}
		seen[h.Tag] = true
	}
	// A ninth waits for a tag until its deadline.
	if r := <-ask(short(), devEID); !errors.Is(r.err, ErrTimeout) {
		t.Errorf("ninth request: got %v, want ErrTimeout", r.err)
	}
	// A request to EIDNull accepts any source, so it needs a tag that is
	// free for every destination.
	if r := <-ask(short(), EIDNull); !errors.Is(r.err, ErrTimeout) {
		t.Errorf("request to EIDNull: got %v, want ErrTimeout", r.err)
	}
	// Another destination has its own tags.
	other := ask(ctx, 0x30)
	h, _ := peer.recv()
	peer.send(Header{Dst: fmEID, Src: 0x30, Tag: h.Tag}, []byte{8, 0x30})
	if r := <-other; r.err != nil || !bytes.Equal(r.resp, []byte{0x30}) {
		t.Errorf("request to 0x30: got %x, %v", r.resp, r.err)
	}
	// Answer the held requests; each gets the answer for its own tag.
	for tag := range uint8(tagCount) {
		peer.send(Header{Dst: fmEID, Src: devEID, Tag: tag}, []byte{8, tag})
	}
	got := map[byte]bool{}
	for _, ch := range held {
		r := <-ch
		if r.err != nil || len(r.resp) != 1 {
			t.Fatalf("held request: got %x, %v", r.resp, r.err)
		}
		got[r.resp[0]] = true
	}
	if len(got) != tagCount {
		t.Errorf("held requests got %d distinct answers, want %d", len(got), tagCount)
	}
	// Tags are now free again, also for EIDNull.
	null := ask(ctx, EIDNull)
	h, _ = peer.recv()
	peer.send(Header{Dst: fmEID, Src: devEID, Tag: h.Tag}, []byte{8, 0xAA})
	if r := <-null; r.err != nil || !bytes.Equal(r.resp, []byte{0xAA}) {
		t.Errorf("request to EIDNull: got %x, %v", r.resp, r.err)
	}
}

func TestCloseFailsPendingRequests(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	entered := make(chan struct{}, 1)
	h := func(ctx context.Context, _ EID, _ MsgType, _ []byte) ([]byte, bool) {
		entered <- struct{}{}
		select {
		case <-block:
		case <-ctx.Done():
		}
		return nil, false
	}
	tests := []struct {
		name    string
		stop    func(fm, dev *Endpoint, cancelFM context.CancelFunc)
		wantRun func(error) bool
	}{
		{"Close", func(fm, _ *Endpoint, _ context.CancelFunc) { fm.Close() },
			func(err error) bool { return err == nil }},
		{"Run ctx cancelled", func(_, _ *Endpoint, cancel context.CancelFunc) { cancel() },
			func(err error) bool { return errors.Is(err, context.Canceled) }},
		{"peer closes link", func(_, dev *Endpoint, _ context.CancelFunc) { dev.Close() },
			func(err error) bool { return errors.Is(err, io.EOF) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := Pipe()
			fm := NewEndpoint(a, Config{EID: fmEID}, nil)
			dev := NewEndpoint(b, Config{EID: devEID}, h)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			runDone := make(chan error, 1)
			go func() { runDone <- fm.Run(ctx) }()
			start(t, dev)

			reqDone := make(chan error, 1)
			go func() {
				_, err := fm.Request(withTimeout(t), devEID, MsgTypeCXLCCI, []byte{1})
				reqDone <- err
			}()
			<-entered
			tc.stop(fm, dev, cancel)
			if err := <-reqDone; !errors.Is(err, ErrClosed) {
				t.Errorf("pending Request: got %v, want ErrClosed", err)
			}
			if err := <-runDone; !tc.wantRun(err) {
				t.Errorf("Run returned %v", err)
			}
			if _, err := fm.Request(withTimeout(t), devEID, MsgTypeCXLCCI, nil); !errors.Is(err, ErrClosed) {
				t.Errorf("Request after close: got %v, want ErrClosed", err)
			}
			if err := fm.Run(context.Background()); err == nil {
				t.Error("second Run: got nil error, want one")
			}
		})
	}
}

// rawPeer is the test's side of a Pipe, speaking packets by hand.
type rawPeer struct {
	t    testing.TB
	link PacketLink
}

func (p rawPeer) send(h Header, body []byte) {
	p.t.Helper()
	for _, pkt := range Packetize(h, body, 0) {
		if err := p.link.WritePacket(pkt); err != nil {
			p.t.Fatalf("WritePacket: %v", err)
		}
	}
}

// recv reads one single-packet message.
func (p rawPeer) recv() (Header, []byte) {
	p.t.Helper()
	pkt, err := p.link.ReadPacket()
	if err != nil {
		p.t.Fatalf("ReadPacket: %v", err)
	}
	h, err := ParseHeader(pkt)
	if err != nil {
		p.t.Fatalf("ParseHeader: %v", err)
	}
	return h, pkt[HeaderLen:]
}

func newRaw(t *testing.T, cfg Config, h Handler) (*Endpoint, rawPeer) {
	a, b := Pipe()
	e := NewEndpoint(a, cfg, h)
	start(t, e)
	return e, rawPeer{t, b}
}

func TestDestinationFilter(t *testing.T) {
	getEID := func(iid uint8) []byte {
		return append([]byte{0}, ControlHeader{Request: true, InstanceID: iid, Command: CmdGetEndpointID}.Append(nil)...)
	}
	tests := []struct {
		name   string
		anyDst bool
		dst    EID
		want   bool
	}{
		{"own EID", false, devEID, true},
		{"null EID", false, EIDNull, true},
		{"broadcast", false, EIDBroadcast, true},
		{"foreign EID dropped", false, 0x20, false},
		{"foreign EID with AcceptAnyDst", true, 0x20, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, peer := newRaw(t, Config{EID: devEID, AcceptAnyDst: tc.anyDst}, nil)
			peer.send(Header{Dst: tc.dst, Src: fmEID, TO: true, Tag: 1}, getEID(1))
			// A second, well-addressed request: once it is answered the
			// first one has been processed.
			peer.send(Header{Dst: devEID, Src: fmEID, TO: true, Tag: 2}, getEID(2))
			// Control responses are sent concurrently, so their order is
			// not fixed.
			var tags []uint8
			for range map[bool]int{true: 2, false: 1}[tc.want] {
				h, _ := peer.recv()
				tags = append(tags, h.Tag)
			}
			slices.Sort(tags)
			want := []uint8{2}
			if tc.want {
				want = []uint8{1, 2}
			}
			if diff := cmp.Diff(want, tags); diff != "" {
				t.Errorf("answered tags (-want +got):\n%s", diff)
			}
			wantDropped := uint64(0)
			if !tc.want {
				wantDropped = 1
			}
			if got := e.Stats().Dropped; got != wantDropped {
				t.Errorf("Dropped = %d, want %d", got, wantDropped)
			}
		})
	}
}

func TestResponseHeaderAndControl(t *testing.T) {
	_, peer := newRaw(t, Config{EID: devEID, MessageTypes: []MsgType{MsgTypeCXLCCI}}, echo)
	tests := []struct {
		name string
		body string
		want string // response body, type byte included
	}{
		{"get endpoint id", "00 81 02", "00 01 02 00 09 01 00"},
		{"message types", "00 82 05", "00 02 05 00 02 00 08"},
		{"version", "00 83 04 ff", "00 03 04 00 01 f1 f3 f1 00"},
		{"unsupported", "00 84 7f", "00 04 7f 05"},
		{"handler", "08 01 02", "08 72 65 3a 01 02"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tag := uint8(i % 8)
			peer.send(Header{Dst: devEID, Src: fmEID, TO: true, Tag: tag}, unhex(t, tc.body))
			h, body := peer.recv()
			wantH := Header{Version: 1, Dst: fmEID, Src: devEID, SOM: true, EOM: true, Tag: tag}
			if diff := cmp.Diff(wantH, h); diff != "" {
				t.Errorf("header (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(unhex(t, tc.want), body); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResponseMatching(t *testing.T) {
	fm, peer := newRaw(t, Config{EID: fmEID}, nil)
	ctx := withTimeout(t)
	type result struct {
		resp []byte
		err  error
	}
	ask := func(typ MsgType) <-chan result {
		ch := make(chan result, 1)
		go func() {
			resp, err := fm.Request(ctx, devEID, typ, []byte{0xAB})
			ch <- result{resp, err}
		}()
		return ch
	}

	// Wrong message type in the response is an error.
	done := ask(MsgTypeFMAPI)
	h, _ := peer.recv()
	peer.send(Header{Dst: fmEID, Src: devEID, Tag: h.Tag}, []byte{byte(MsgTypeCXLCCI), 1})
	if r := <-done; !errors.Is(r.err, ErrMalformed) {
		t.Errorf("wrong type: got %v, want ErrMalformed", r.err)
	}

	// Responses from the wrong source, with TO set or an unknown tag do not
	// match; the right one does.
	done = ask(MsgTypeCXLCCI)
	h, _ = peer.recv()
	peer.send(Header{Dst: fmEID, Src: 0x30, Tag: h.Tag}, []byte{8, 1})
	peer.send(Header{Dst: fmEID, Src: devEID, Tag: (h.Tag + 1) % 8}, []byte{8, 2})
	peer.send(Header{Dst: fmEID, Src: devEID, Tag: h.Tag}, []byte{8, 3})
	if r := <-done; r.err != nil || !bytes.Equal(r.resp, []byte{3}) {
		t.Errorf("matched response: got %x, %v; want 03", r.resp, r.err)
	}
	if got := fm.Stats().Unmatched; got != 2 {
		t.Errorf("Unmatched = %d, want 2", got)
	}
}

func TestControlClient(t *testing.T) {
	fm, _ := pair(t, echo)
	ctx := withTimeout(t)
	eid, err := fm.GetEndpointID(ctx, EIDNull)
	if err != nil {
		t.Fatalf("GetEndpointID: %v", err)
	}
	if eid != devEID {
		t.Errorf("GetEndpointID = %#x, want %#x", eid, devEID)
	}
	types, err := fm.GetMessageTypeSupport(ctx, devEID)
	if err != nil {
		t.Fatalf("GetMessageTypeSupport: %v", err)
	}
	if diff := cmp.Diff([]MsgType{MsgTypeControl, MsgTypeFMAPI, MsgTypeCXLCCI}, types); diff != "" {
		t.Errorf("types (-want +got):\n%s", diff)
	}
}

func TestControlClientErrors(t *testing.T) {
	fm, peer := newRaw(t, Config{EID: fmEID}, nil)
	ctx := withTimeout(t)
	tests := []struct {
		name  string
		reply func(req []byte) []byte // control message after the type byte
		want  error
	}{
		{"completion code", func(req []byte) []byte { return []byte{req[0] & 0x1F, req[1], 0x05} }, CCUnsupportedCmd},
		{"short types list", func(req []byte) []byte { return []byte{req[0] & 0x1F, req[1], 0, 3, 0} }, ErrMalformed},
		{"wrong instance", func(req []byte) []byte { return []byte{(req[0] + 1) & 0x1F, req[1], 0, 0} }, ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			errc := make(chan error, 1)
			go func() {
				_, err := fm.GetMessageTypeSupport(ctx, devEID)
				errc <- err
			}()
			h, body := peer.recv()
			peer.send(Header{Dst: fmEID, Src: devEID, Tag: h.Tag}, append([]byte{0}, tc.reply(body[1:])...))
			if err := <-errc; !errors.Is(err, tc.want) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestEndpointReassemblyStats(t *testing.T) {
	e, peer := newRaw(t, Config{EID: devEID}, echo)
	// Continuation without SOM, then a bad header, then a good request.
	peer.link.WritePacket([]byte{0x01, byte(devEID), byte(fmEID), 0x58, 1})
	peer.link.WritePacket([]byte{0x02, byte(devEID), byte(fmEID), 0xc8, 1})
	peer.link.WritePacket([]byte{0x01, byte(devEID), byte(fmEID), 0xc8})
	peer.send(Header{Dst: devEID, Src: fmEID, TO: true}, []byte{8, 1})
	h, body := peer.recv()
	if h.Tag != 0 || !bytes.Equal(body, []byte("\x08re:\x01")) {
		t.Fatalf("got tag %d body %q", h.Tag, body)
	}
	// The endpoint counts a packet and message out once its write
	// returned, which may be after the peer read them: wait (bounded) for
	// the counts to settle.
	want := Stats{PacketsIn: 4, PacketsOut: 1, Dropped: 2, ReassemblyErrors: 1, MessagesIn: 1, MessagesOut: 1}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := e.Stats()
		diff := cmp.Diff(want, got)
		if diff == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats (-want +got):\n%s", diff)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestPipe(t *testing.T) {
	a, b := Pipe()
	buf := []byte{1, 2, 3, 4}
	if err := a.WritePacket(buf); err != nil {
		t.Fatal(err)
	}
	buf[0] = 9 // the pipe copied it
	if err := a.WritePacket([]byte{5, 6, 7, 8}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := a.WritePacket([]byte{1}); !errors.Is(err, ErrClosed) {
		t.Errorf("write after close: got %v, want ErrClosed", err)
	}
	for _, want := range [][]byte{{1, 2, 3, 4}, {5, 6, 7, 8}} {
		got, err := b.ReadPacket()
		if err != nil {
			t.Fatalf("buffered read after close: %v", err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("packet (-want +got):\n%s", diff)
		}
	}
	if _, err := b.ReadPacket(); err != io.EOF {
		t.Errorf("read after drain: got %v, want io.EOF", err)
	}
	if _, err := a.ReadPacket(); err != io.EOF {
		t.Errorf("other end read: got %v, want io.EOF", err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestPipeCloseUnblocks(t *testing.T) {
	a, b := Pipe()
	readErr := make(chan error, 1)
	go func() {
		_, err := a.ReadPacket()
		readErr <- err
	}()
	writeErr := make(chan error, 1)
	go func() {
		for {
			if err := b.WritePacket([]byte{0}); err != nil {
				writeErr <- err
				return
			}
		}
	}()
	// The writer fills the buffer and blocks; the reader may or may not
	// get a packet first, so only the writer's fate is checked.
	a.Close()
	if err := <-writeErr; !errors.Is(err, ErrClosed) {
		t.Errorf("blocked write: got %v, want ErrClosed", err)
	}
	<-readErr
}

func benchRequest(b *testing.B, size int) {
	fm, _ := pair(b, echo)
	msg := seqBody(size)
	ctx := context.Background()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := fm.Request(ctx, devEID, MsgTypeCXLCCI, msg); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRequestResponse(b *testing.B) {
	b.Run("64B", func(b *testing.B) { benchRequest(b, 64) })
	b.Run("1KiB", func(b *testing.B) { benchRequest(b, 1024) })
}
