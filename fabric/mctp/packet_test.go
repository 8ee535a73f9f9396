package mctp

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// V8 (vectors.md): single-packet request dst 09h src 08h tag 3 TO=1, and
// its response.
func TestHeaderGolden(t *testing.T) {
	tests := []struct {
		name string
		h    Header
		wire string
	}{
		{"V8 request", Header{Version: 1, Dst: 9, Src: 8, SOM: true, EOM: true, TO: true, Tag: 3}, "01 09 08 cb"},
		{"V8 response", Header{Version: 1, Dst: 8, Src: 9, SOM: true, EOM: true, Tag: 3}, "01 08 09 c3"},
		{"middle packet seq 2", Header{Version: 1, Dst: 0xFF, Src: 0x10, Seq: 2, Tag: 7}, "01 ff 10 27"},
		{"last packet seq 3 TO", Header{Version: 1, Dst: 0, Src: 0xFE, EOM: true, Seq: 3, TO: true}, "01 00 fe 78"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.h.Marshal()
			if diff := cmp.Diff(unhex(t, tc.wire), got[:]); diff != "" {
				t.Errorf("Marshal (-want +got):\n%s", diff)
			}
			h, err := ParseHeader(unhex(t, tc.wire))
			if err != nil {
				t.Fatalf("ParseHeader: %v", err)
			}
			if diff := cmp.Diff(tc.h, h); diff != "" {
				t.Errorf("ParseHeader (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseHeaderErrors(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr bool
	}{
		{"short", "01 09 08", true},
		{"empty", "", true},
		{"version 0", "00 09 08 cb", true},
		{"version 2", "02 09 08 cb", true},
		{"reserved bits ignored", "f1 09 08 cb", false},
		{"payload follows", "01 09 08 cb 08 00", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseHeader(unhex(t, tc.in))
			if gotErr := err != nil; gotErr != tc.wantErr {
				t.Fatalf("ParseHeader: got %v, want error %v", err, tc.wantErr)
			}
			if err != nil && !errors.Is(err, ErrMalformed) {
				t.Errorf("got %v, want ErrMalformed", err)
			}
		})
	}
}

func FuzzParseHeader(f *testing.F) {
	f.Add([]byte{0x01, 0x09, 0x08, 0xcb})
	f.Add([]byte{0x01, 0x08, 0x09, 0xc3})
	f.Add([]byte{0xf1, 0xff, 0x00, 0xff, 0x00})
	f.Fuzz(func(t *testing.T, p []byte) {
		h, err := ParseHeader(p)
		if err != nil {
			return
		}
		got := h.Marshal()
		want := [4]byte{p[0] & 0x0F, p[1], p[2], p[3]}
		if got != want {
			t.Fatalf("Marshal(ParseHeader(%x)) = %x, want %x", p[:4], got, want)
		}
	})
}

func seqBody(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31 + 7)
	}
	return b
}

func TestPacketize(t *testing.T) {
	tests := []struct {
		name     string
		bodyLen  int
		mtu      int
		startSeq uint8
		wantPkts int
	}{
		{"one byte", 1, 64, 0, 1},
		{"empty body", 0, 64, 0, 1},
		{"exactly MTU", 64, 64, 0, 1},
		{"MTU plus one", 65, 64, 0, 2},
		{"default MTU", 65, 0, 0, 2},
		{"largest CXL message", 1037, 64, 0, 17},
		{"seq wraps from 3", 200, 64, 3, 4},
		{"big MTU", 1037, 251, 1, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := seqBody(tc.bodyLen)
			h := Header{Dst: 9, Src: 8, TO: true, Tag: 5, Seq: tc.startSeq}
			pkts := Packetize(h, body, tc.mtu)
			if len(pkts) != tc.wantPkts {
				t.Fatalf("got %d packets, want %d", len(pkts), tc.wantPkts)
			}
			mtu := tc.mtu
			if mtu == 0 {
				mtu = BaselineMTU
			}
			var joined []byte
			for i, p := range pkts {
				got, err := ParseHeader(p)
				if err != nil {
					t.Fatalf("packet %d: %v", i, err)
				}
				want := Header{Version: 1, Dst: 9, Src: 8, TO: true, Tag: 5,
					SOM: i == 0, EOM: i == len(pkts)-1, Seq: (tc.startSeq + uint8(i)) % 4}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("packet %d header (-want +got):\n%s", i, diff)
				}
				if pl := len(p) - HeaderLen; pl > mtu || (i < len(pkts)-1 && pl != mtu) {
					t.Errorf("packet %d payload %d bytes, MTU %d", i, pl, mtu)
				}
				joined = append(joined, p[HeaderLen:]...)
			}
			if !bytes.Equal(joined, body) {
				t.Errorf("payloads do not join to the body")
			}
			// Packets must not alias each other.
			if len(pkts) > 1 && cap(pkts[0]) != len(pkts[0]) {
				t.Errorf("packet 0 cap %d, want %d", cap(pkts[0]), len(pkts[0]))
			}
		})
	}
}

// pk builds one packet for reassembly tests.
type pk struct {
	src      EID
	tag      uint8
	to       bool
	som, eom bool
	seq      uint8
	payload  string
}

func TestReassembly(t *testing.T) {
	const a, b = EID(9), EID(10)
	tests := []struct {
		name       string
		max        int
		pkts       []pk
		want       []string
		wantErrors uint64
	}{
		{"single packet", 0, []pk{{a, 1, true, true, true, 0, "0801"}}, []string{"0801"}, 0},
		{"three packets", 0, []pk{
			{a, 1, true, true, false, 2, "01"}, {a, 1, true, false, false, 3, "02"}, {a, 1, true, false, true, 0, "03"},
		}, []string{"010203"}, 0},
		{"lost middle packet drops the message", 0, []pk{
			{a, 1, true, true, false, 0, "01"}, {a, 1, true, false, true, 2, "03"},
			{a, 1, true, true, true, 0, "04"},
		}, []string{"04"}, 1},
		{"duplicate packet drops the message", 0, []pk{
			{a, 1, true, true, false, 0, "01"}, {a, 1, true, false, false, 1, "02"}, {a, 1, true, false, false, 1, "02"},
			{a, 1, true, false, true, 2, "03"},
		}, nil, 2},
		{"SOM mid-message restarts", 0, []pk{
			{a, 1, true, true, false, 0, "aa"}, {a, 1, true, false, false, 1, "bb"},
			{a, 1, true, true, false, 3, "01"}, {a, 1, true, false, true, 0, "02"},
		}, []string{"0102"}, 1},
		{"packet without SOM", 0, []pk{{a, 1, true, false, true, 1, "01"}}, nil, 1},
		{"interleaved tags", 0, []pk{
			{a, 1, true, true, false, 0, "11"}, {a, 2, true, true, false, 0, "21"},
			{a, 2, true, false, true, 1, "22"}, {a, 1, true, false, true, 1, "12"},
		}, []string{"2122", "1112"}, 0},
		{"interleaved sources, same tag", 0, []pk{
			{a, 1, true, true, false, 0, "a1"}, {b, 1, true, true, false, 0, "b1"},
			{a, 1, true, false, true, 1, "a2"}, {b, 1, true, false, true, 1, "b2"},
		}, []string{"a1a2", "b1b2"}, 0},
		{"same tag, request and response", 0, []pk{
			{a, 1, true, true, false, 0, "71"}, {a, 1, false, true, false, 0, "81"},
			{a, 1, false, false, true, 1, "82"}, {a, 1, true, false, true, 1, "72"},
		}, []string{"8182", "7172"}, 0},
		{"too large", 4, []pk{
			{a, 1, true, true, false, 0, "010203"}, {a, 1, true, false, true, 1, "0405"},
			{a, 1, true, true, true, 0, "0102030405"},
			{a, 1, true, true, true, 0, "01020304"},
		}, []string{"01020304"}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			maxMsg := tc.max
			if maxMsg == 0 {
				maxMsg = DefaultMaxMessage
			}
			r := newReassembler(maxMsg, time.Second)
			now := time.Unix(1000, 0)
			var got []string
			for _, p := range tc.pkts {
				h := Header{Version: 1, Dst: 8, Src: p.src, Tag: p.tag, TO: p.to, SOM: p.som, EOM: p.eom, Seq: p.seq}
				body, _ := r.add(h, unhex(t, p.payload), now)
				if body != nil {
					got = append(got, hex.EncodeToString(body))
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("messages (-want +got):\n%s", diff)
			}
			if n := r.errors.Load(); n != tc.wantErrors {
				t.Errorf("errors = %d, want %d", n, tc.wantErrors)
			}
		})
	}
}

func TestReassemblyTimeout(t *testing.T) {
	r := newReassembler(DefaultMaxMessage, time.Second)
	t0 := time.Unix(1000, 0)
	h := Header{Version: 1, Src: 9, Tag: 1, TO: true}
	add := func(som, eom bool, seq uint8, p string, at time.Duration) ([]byte, error) {
		hh := h
		hh.SOM, hh.EOM, hh.Seq = som, eom, seq
		return r.add(hh, unhex(t, p), t0.Add(at))
	}
	// Within the timeout the message completes.
	add(true, false, 0, "01", 0)
	if body, err := add(false, true, 1, "02", 900*time.Millisecond); err != nil || !bytes.Equal(body, []byte{1, 2}) {
		t.Fatalf("in time: got %x, %v; want 0102", body, err)
	}
	// A stale partial does not absorb a later continuation.
	add(true, false, 0, "01", 2*time.Second)
	if body, err := add(false, true, 1, "02", 3500*time.Millisecond); err == nil || body != nil {
		t.Fatalf("stale partial: got %x, %v; want an error", body, err)
	}
	if n := r.errors.Load(); n != 2 { // stale partial + orphan continuation
		t.Errorf("errors = %d, want 2", n)
	}
	// Sweeping frees abandoned partials of other keys.
	for tag := range uint8(8) {
		hh := Header{Version: 1, Src: 20, Tag: tag, SOM: true}
		r.add(hh, []byte{1}, t0.Add(10*time.Second))
	}
	add(true, true, 0, "05", 20*time.Second)
	if n := len(r.partials); n != 0 {
		t.Errorf("%d partials left after sweep, want 0", n)
	}
}

// FuzzReassembly feeds random packet sequences; the reassembler must never
// panic or deliver more than its maximum, and a packetized message fed
// afterwards must come out intact.
func FuzzReassembly(f *testing.F) {
	f.Add(unhex(f, "05 01 09 08 cb 08"), 17)
	f.Add(unhex(f, "05 01 09 08 8b 08 05 01 09 08 1b 08 05 01 09 08 6b 09"), 1037)
	f.Add(unhex(f, "04 01 09 08 c3 00 01 ff 00"), 0)
	f.Fuzz(func(t *testing.T, data []byte, n int) {
		const maxMsg = 300
		r := newReassembler(maxMsg, time.Second)
		now := time.Unix(0, 0)
		// data is a sequence of length-prefixed packets; the length byte's
		// top bit also advances the clock past the timeout.
		for len(data) > 0 {
			l := int(data[0] & 0x7F)
			if data[0]&0x80 != 0 {
				now = now.Add(2 * time.Second)
			}
			data = data[1:]
			l = min(l, len(data))
			pkt := data[:l]
			data = data[l:]
			h, err := ParseHeader(pkt)
			if err != nil {
				continue
			}
			body, _ := r.add(h, bytes.Clone(pkt[HeaderLen:]), now)
			if len(body) > maxMsg {
				t.Fatalf("delivered %d bytes, max %d", len(body), maxMsg)
			}
		}
		if n < 0 {
			n = -n
		}
		body := seqBody(n % (maxMsg + 1))
		var got []byte
		for _, p := range Packetize(Header{Src: 42, Tag: 3, TO: true}, body, 0) {
			h, err := ParseHeader(p)
			if err != nil {
				t.Fatalf("ParseHeader(Packetize): %v", err)
			}
			got, err = r.add(h, p[HeaderLen:], now)
			if err != nil {
				t.Fatalf("reassembling packetized message: %v", err)
			}
		}
		if !bytes.Equal(got, body) {
			t.Fatalf("round trip of %d bytes: got %d bytes", len(body), len(got))
		}
	})
}

func BenchmarkPacketize(b *testing.B) {
	body := seqBody(1037)
	h := Header{Dst: 9, Src: 8, TO: true, Tag: 1}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if n := len(Packetize(h, body, BaselineMTU)); n != 17 {
			b.Fatalf("got %d packets, want 17", n)
		}
	}
}
