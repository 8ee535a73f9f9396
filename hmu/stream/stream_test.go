package stream

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"

	"cxlpool/hmu"
	"cxlpool/hmu/agg"
)

var t0 = time.Unix(1_700_000_000, 123)

func TestFrameGolden(t *testing.T) {
	hm := AppendHeatmap(nil, Heatmap{Header: Header{Seq: 7, Time: time.Unix(0, 0x0102030405060708)}, Base: 0x1000, CellShift: 28, Cells: []uint8{0, 9, 255}})
	wantHM := []byte{
		1, 1, 0, 0, 7, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1, // header
		0, 0x10, 0, 0, 0, 0, 0, 0, 28, 1, 0, 0, 3, 0, 0, 0, // base, shift, encoding, n
		0, 9, 255,
	}
	if diff := cmp.Diff(wantHM, hm); diff != "" {
		t.Errorf("heatmap bytes (-want +got):\n%s", diff)
	}
	tk := AppendTopK(nil, TopK{Header: Header{Seq: 8, Time: time.Unix(0, 1)}, Scope: -2, UnitShift: 12, ErrorBound: 5,
		Entries: []Entry{{Unit: 0xabc, Count: 100, Err: 3}}})
	wantTK := []byte{
		1, 2, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
		0xfe, 0xff, 12, 0, 5, 0, 0, 0, 1, 0, 0, 0,
		0xbc, 0x0a, 0, 0, 0, 0, 0, 0, 100, 0, 0, 0, 3, 0, 0, 0,
	}
	if diff := cmp.Diff(wantTK, tk); diff != "" {
		t.Errorf("top-K bytes (-want +got):\n%s", diff)
	}
}

func TestFrameRoundTrip(t *testing.T) {
	hm := Heatmap{Header: Header{Version: Version, Kind: KindHeatmap, Seq: 1, Time: t0}, Base: 1 << 30, CellShift: 21, Cells: []uint8{1, 2, 3}}
	got, err := DecodeHeatmap(AppendHeatmap(nil, hm))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(hm, got); diff != "" {
		t.Errorf("heatmap (-want +got):\n%s", diff)
	}
	tk := TopK{Header: Header{Version: Version, Kind: KindTopK, Seq: 2, Time: t0}, Scope: 3, UnitShift: 12, ErrorBound: 9,
		Entries: []Entry{{1, 2, 3}, {4, 5, 6}}}
	gotTK, err := DecodeTopK(AppendTopK(nil, tk))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(tk, gotTK); diff != "" {
		t.Errorf("top-K (-want +got):\n%s", diff)
	}
}

func TestDecodeErrors(t *testing.T) {
	hm := AppendHeatmap(nil, Heatmap{Cells: []uint8{1, 2}})
	tk := AppendTopK(nil, TopK{Entries: []Entry{{1, 2, 3}}})
	edit := func(b []byte, i int, v byte) []byte { c := append([]byte(nil), b...); c[i] = v; return c }
	tests := []struct {
		name string
		b    []byte
		dec  func([]byte) error
	}{
		{"short header", hm[:10], func(b []byte) error { _, err := DecodeHeatmap(b); return err }},
		{"version 2", edit(hm, 0, 2), func(b []byte) error { _, err := DecodeHeatmap(b); return err }},
		{"top-K as heatmap", tk, func(b []byte) error { _, err := DecodeHeatmap(b); return err }},
		{"heatmap as top-K", hm, func(b []byte) error { _, err := DecodeTopK(b); return err }},
		{"heatmap truncated", hm[:len(hm)-1], func(b []byte) error { _, err := DecodeHeatmap(b); return err }},
		{"heatmap trailing byte", append(append([]byte(nil), hm...), 0), func(b []byte) error { _, err := DecodeHeatmap(b); return err }},
		{"unknown encoding", edit(hm, 25, 9), func(b []byte) error { _, err := DecodeHeatmap(b); return err }},
		{"top-K truncated", tk[:len(tk)-4], func(b []byte) error { _, err := DecodeTopK(b); return err }},
		{"top-K short body", tk[:20], func(b []byte) error { _, err := DecodeTopK(b); return err }},
	}
	for _, tt := range tests {
		if err := tt.dec(tt.b); !errors.Is(err, ErrFrame) {
			t.Errorf("%s: got %v, want ErrFrame", tt.name, err)
		}
	}
}

func TestQuantize(t *testing.T) {
	tests := []struct {
		heat float64
		q    uint8
	}{{0, 0}, {-1, 0}, {1e-9, 1}, {0.2, 3}, {1, 9}, {3, 17}, {1e12, 255}}
	for _, tt := range tests {
		if got := Quantize(tt.heat); got != tt.q {
			t.Errorf("Quantize(%v): got %d, want %d", tt.heat, got, tt.q)
		}
	}
	prev := -1.0
	for q := 1; q < 256; q++ {
		d := Dequantize(uint8(q))
		if d <= prev {
			t.Fatalf("Dequantize not increasing at %d", q)
		}
		if got := Quantize(d*(1+1e-9) + 1e-12); got != uint8(q) {
			t.Fatalf("Quantize(Dequantize(%d)) = %d", q, got)
		}
		prev = d
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(AppendHeatmap(nil, Heatmap{Header: Header{Seq: 3, Time: t0}, Base: 4096, CellShift: 28, Cells: []uint8{0, 7, 255}}))
	f.Add(AppendTopK(nil, TopK{Header: Header{Seq: 4, Time: t0}, Scope: -1, UnitShift: 12, Entries: []Entry{{1, 2, 3}}}))
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		if hm, err := DecodeHeatmap(b); err == nil {
			if got := AppendHeatmap(nil, hm); !cmp.Equal(got, b) && b[2]|b[3]|b[26]|b[27] == 0 {
				t.Errorf("heatmap re-encodes differently:\n got %x\nwant %x", got, b)
			}
		}
		if tk, err := DecodeTopK(b); err == nil {
			if got := AppendTopK(nil, tk); !cmp.Equal(got, b) && b[2]|b[3]|b[19]|b[26]|b[27] == 0 {
				t.Errorf("top-K re-encodes differently:\n got %x\nwant %x", got, b)
			}
		}
	})
}

func TestHubDropsForSlowSubscribers(t *testing.T) {
	h := NewHub(2)
	fast, slow := h.Subscribe(), h.Subscribe()
	defer slow.Close()
	for i := range 5 {
		h.Publish(AppendHeatmap(nil, Heatmap{Header: Header{Seq: uint32(i)}}))
		<-fast.C() // the fast one keeps up
	}
	if got := slow.Dropped(); got != 3 {
		t.Errorf("slow subscriber drops: got %d, want 3", got)
	}
	if got := fast.Dropped(); got != 0 {
		t.Errorf("fast subscriber drops: got %d, want 0", got)
	}
	if st := h.Stats(); st.Published != 5 || st.Dropped != 3 || st.Clients != 2 {
		t.Errorf("hub stats: got %+v, want 5 published, 3 dropped, 2 clients", st)
	}
	fast.Close()
	fast.Close() // idempotent
	if _, ok := <-fast.C(); ok {
		t.Error("closed subscriber: channel still open")
	}
	if st := h.Stats(); st.Clients != 1 {
		t.Errorf("clients after close: got %d, want 1", st.Clients)
	}
}

func TestHubRetainsLatestPerKindAndScope(t *testing.T) {
	h := NewHub(8)
	h.Publish(AppendHeatmap(nil, Heatmap{Header: Header{Seq: 1}}))
	h.Publish(AppendHeatmap(nil, Heatmap{Header: Header{Seq: 2}}))
	h.Publish(AppendTopK(nil, TopK{Header: Header{Seq: 3}, Scope: 0}))
	h.Publish(AppendTopK(nil, TopK{Header: Header{Seq: 4}, Scope: 1}))
	h.Publish(AppendTopK(nil, TopK{Header: Header{Seq: 5}, Scope: 0}))
	s := h.Subscribe()
	defer s.Close()
	var seqs []uint32
	for range 3 {
		hd, _ := DecodeHeader(<-s.C())
		seqs = append(seqs, hd.Seq)
	}
	got := map[uint32]bool{}
	for _, q := range seqs {
		got[q] = true
	}
	if diff := cmp.Diff(map[uint32]bool{2: true, 4: true, 5: true}, got); diff != "" {
		t.Errorf("retained frames (-want +got):\n%s", diff)
	}
}

func newCollector(t testing.TB) *agg.Collector {
	t.Helper()
	l := agg.NewLayout(nil)
	c, err := agg.New(agg.Config{HostOf: l.HostOf, Hosts: 2, Capacity: 4 << 30})
	if err != nil {
		t.Fatal(err)
	}
	c.Ingest([]hmu.Record{{DPA: 4096, Count: 300}, {DPA: 1 << 30, Count: 7}})
	return c
}

func TestRenderAndPump(t *testing.T) {
	h := NewHub(16)
	s := h.Subscribe()
	defer s.Close()
	tick := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.Pump(ctx, tick, newCollector(t), []int{agg.Pool}, 5) }()
	tick <- t0
	hm, err := DecodeHeatmap(<-s.C())
	if err != nil {
		t.Fatal(err)
	}
	if len(hm.Cells) != 16 || hm.Cells[0] != Quantize(300) || hm.Cells[4] != Quantize(7) || hm.CellShift != 28 || !hm.Time.Equal(t0) {
		t.Errorf("heatmap frame: got shift %d cells %v time %v", hm.CellShift, hm.Cells, hm.Time)
	}
	tk, err := DecodeTopK(<-s.C())
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{{Unit: 1, Count: 300}, {Unit: 1 << 18, Count: 7}}
	if diff := cmp.Diff(want, tk.Entries); diff != "" || tk.Scope != agg.Pool || tk.Seq != hm.Seq+1 {
		t.Errorf("top-K frame: scope %d seq %d (-want +got):\n%s", tk.Scope, tk.Seq, diff)
	}
	cancel()
	<-done
}

func wsURL(s *httptest.Server) string { return "ws" + strings.TrimPrefix(s.URL, "http") }

func TestHandlerOrigin(t *testing.T) {
	tests := []struct {
		name    string
		allowed []string
		origin  string // "self" = the server's own origin
		ok      bool
	}{
		{"no origin header", nil, "", true},
		{"same host", nil, "self", true},
		{"other host", nil, "http://evil.example", false},
		{"allow-listed", []string{"https://Console.Example"}, "https://console.example", true},
		{"not allow-listed", []string{"https://console.example"}, "self", false},
		{"garbage origin", nil, "%zz", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(NewHandler(NewHub(4), HandlerConfig{AllowedOrigins: tt.allowed}))
			defer srv.Close()
			hdr := http.Header{}
			switch tt.origin {
			case "":
			case "self":
				hdr.Set("Origin", srv.URL)
			default:
				hdr.Set("Origin", tt.origin)
			}
			c, resp, err := websocket.DefaultDialer.Dial(wsURL(srv), hdr)
			if c != nil {
				c.Close()
			}
			if (err == nil) != tt.ok {
				t.Fatalf("dial: got err %v, want ok=%v", err, tt.ok)
			}
			if !tt.ok && (resp == nil || resp.StatusCode != http.StatusForbidden) {
				t.Errorf("refusal: got response %v, want 403", resp)
			}
		})
	}
}

// TestSlowClientNeverBlocksPublish connects a client that never reads (its
// TCP window fills) next to a normal one; publishing stays non-blocking,
// the slow client's frames are dropped and counted, and the normal client
// still gets the latest frame.
func TestSlowClientNeverBlocksPublish(t *testing.T) {
	hub := NewHub(4)
	srv := httptest.NewServer(NewHandler(hub, HandlerConfig{WriteTimeout: time.Minute}))
	defer srv.Close()

	slow, _, err := websocket.DefaultDialer.Dial(wsURL(srv), nil) // never reads
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fast, _, err := websocket.DefaultDialer.Dial(wsURL(srv), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	for hub.Stats().Clients < 2 { // both subscribed
		time.Sleep(time.Millisecond)
	}
	big := make([]uint8, 256<<10)
	const frames = 200 // 50 MiB: far beyond any socket buffer
	for i := range frames {
		hub.Publish(AppendHeatmap(nil, Heatmap{Header: Header{Seq: uint32(i + 1)}, Cells: big}))
	}
	if st := hub.Stats(); st.Dropped == 0 {
		t.Errorf("hub stats: got %+v, want drops for the slow client", st)
	}
	// The fast client may itself have lost frames of the flood (its queue is
	// 4 deep); it must still get a marker frame published after it.
	seen := make(chan error, 1)
	go func() {
		for {
			_, msg, err := fast.ReadMessage()
			if err != nil {
				seen <- err
				return
			}
			if hd, _ := DecodeHeader(msg); hd.Kind == KindTopK {
				seen <- nil
				return
			}
		}
	}()
	marker := AppendTopK(nil, TopK{Header: Header{Seq: frames + 1}})
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		hub.Publish(marker)
		select {
		case err := <-seen:
			if err != nil {
				t.Fatalf("fast client: %v", err)
			}
			return
		case <-tick.C:
		}
	}
}

// TestHandlerEndsWithClient: a client that closes ends its handler and its
// subscription.
func TestHandlerEndsWithClient(t *testing.T) {
	hub := NewHub(4)
	srv := httptest.NewServer(NewHandler(hub, HandlerConfig{}))
	defer srv.Close()
	c, _, err := websocket.DefaultDialer.Dial(wsURL(srv), nil)
	if err != nil {
		t.Fatal(err)
	}
	hub.Publish(AppendTopK(nil, TopK{Header: Header{Seq: 1}}))
	if _, _, err := c.ReadMessage(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	for hub.Stats().Clients != 0 {
		hub.Publish(AppendTopK(nil, TopK{Header: Header{Seq: 2}})) // wakes the writer if the reader has not noticed
		time.Sleep(time.Millisecond)
	}
}
