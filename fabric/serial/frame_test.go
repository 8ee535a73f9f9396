package serial

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// unhex decodes a space-separated hex string from the spec.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// Spec vectors (cxl-wire.md §1.4, vectors.md V18).
const (
	// V8 request header + V1 Identify request.
	v18Packet = "01 09 08 cb 08 00 01 00 01 00 00 00 00 00 00 00 00"
	v18Frame  = "7e 01 11 01 09 08 cb 08 00 01 00 01 00 00 00 00 00 00 00 00 18 ad 7e"
	// The same request with CCI Message Tag 7Eh.
	escPacket = "01 09 08 cb 08 00 7e 00 01 00 00 00 00 00 00 00 00"
	escFrame  = "7e 01 11 01 09 08 cb 08 00 7d 5e 00 01 00 00 00 00 00 00 00 00 5a 2b 7e"
	// Wrong FCS variants the receiver must reject.
	pppFrame    = "7e 01 11 01 09 08 cb 08 00 01 00 01 00 00 00 00 00 00 00 00 52 e7 7e"
	seed0Frame  = "7e 01 11 01 09 08 cb 08 00 01 00 01 00 00 00 00 00 00 00 00 9e 60 7e"
	v18FCSInput = "01 11 01 09 08 cb 08 00 01 00 01 00 00 00 00 00 00 00 00"
)

// fcsBitwise is the reference algorithm printed in cxl-wire.md §1.4.
func fcsBitwise(crc uint16, p []byte) uint16 {
	for _, b := range p {
		crc ^= uint16(b)
		for range 8 {
			if crc&1 != 0 {
				crc = crc>>1 ^ 0x8408
			} else {
				crc >>= 1
			}
		}
	}
	return crc
}

func TestFCS16(t *testing.T) {
	tests := []struct {
		name string
		crc  uint16
		in   []byte
		want uint16
	}{
		{"check value", FCSInit, []byte("123456789"), 0x6F91},
		{"empty", FCSInit, nil, 0xFFFF},
		{"V18", FCSInit, unhex(t, v18FCSInput), 0x18AD},
		{"escape illustration over 7Eh", FCSInit, append([]byte{0x01, 0x11}, unhex(t, escPacket)...), 0x5A2B},
		{"pre-6.2 Linux seed", 0x0000, unhex(t, v18FCSInput), 0x9E60},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := FCS16(tc.crc, tc.in); got != tc.want {
				t.Errorf("FCS16 = %04x, want %04x", got, tc.want)
			}
		})
	}
}

func TestFCS16MatchesBitwise(t *testing.T) {
	// The table-free byte step must equal the spec's bitwise loop for every
	// byte value over a spread of register values.
	for crc := 0; crc <= 0xFFFF; crc += 257 {
		for b := range 256 {
			in := []byte{byte(b)}
			if got, want := FCS16(uint16(crc), in), fcsBitwise(uint16(crc), in); got != want {
				t.Fatalf("FCS16(%04x, %02x) = %04x, want %04x", crc, b, got, want)
			}
		}
	}
}

func TestAppendFrameGolden(t *testing.T) {
	tests := []struct {
		name, pkt, frame string
	}{
		{name: "V18", pkt: v18Packet, frame: v18Frame},
		{name: "escape illustration", pkt: escPacket, frame: escFrame},
		{name: "escaped 7Dh", pkt: "7d 7e 7d 7e", frame: "7e 01 04 7d 5d 7d 5e 7d 5d 7d 5e " +
			hex.EncodeToString(fcsBE(FCS16(FCSInit, []byte{1, 4, 0x7d, 0x7e, 0x7d, 0x7e}))) + " 7e"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prefix := []byte{0xAA}
			got, err := AppendFrame(prefix, unhex(t, tc.pkt))
			if err != nil {
				t.Fatalf("AppendFrame: %v", err)
			}
			want := append([]byte{0xAA}, unhex(t, tc.frame)...)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("frame mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func fcsBE(f uint16) []byte { return []byte{byte(f >> 8), byte(f)} }

func TestAppendFrameSize(t *testing.T) {
	tests := []struct {
		n       int
		wantErr bool
	}{{0, true}, {3, true}, {4, false}, {68, false}, {255, false}, {256, true}}
	for _, tc := range tests {
		got, err := AppendFrame(nil, make([]byte, tc.n))
		if gotErr := err != nil; gotErr != tc.wantErr {
			t.Errorf("len %d: got err %v, want error %v", tc.n, err, tc.wantErr)
		}
		if err != nil {
			if !errors.Is(err, ErrPacketSize) {
				t.Errorf("len %d: got %v, want ErrPacketSize", tc.n, err)
			}
			if len(got) != 0 {
				t.Errorf("len %d: got %d bytes appended on error, want 0", tc.n, len(got))
			}
			continue
		}
		if len(got) != tc.n+6 {
			t.Errorf("len %d: got frame of %d bytes, want %d", tc.n, len(got), tc.n+6)
		}
	}
}

// decodeAll feeds chunks to a fresh decoder and collects copies of packets.
func decodeAll(d *Decoder, chunks ...[]byte) [][]byte {
	var out [][]byte
	for _, c := range chunks {
		d.Feed(c, func(p []byte) { out = append(out, bytes.Clone(p)) })
	}
	return out
}

func TestDecoderGolden(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		want  []string
		stats Stats
	}{
		{"V18", v18Frame, []string{v18Packet}, Stats{Frames: 1}},
		{"escape illustration", escFrame, []string{escPacket}, Stats{Frames: 1}},
		{"PPP style FCS", pppFrame, nil, Stats{FCSErrors: 1}},
		{"seed 0000h FCS", seed0Frame, nil, Stats{FCSErrors: 1}},
		{"one FCS bit flipped", strings.Replace(v18Frame, "18 ad", "18 ac", 1), nil, Stats{FCSErrors: 1}},
		{"one data bit flipped", strings.Replace(v18Frame, "cb 08", "cb 09", 1), nil, Stats{FCSErrors: 1}},
		{"escape FCS computed over 7D 5E", strings.Replace(escFrame, "5a 2b", hex.EncodeToString(fcsBE(
			FCS16(FCSInit, unhex(t, "01 11 01 09 08 cb 08 00 7d 5e 00 01 00 00 00 00 00 00 00 00")))), 1),
			nil, Stats{FCSErrors: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDecoder(0)
			got := decodeAll(d, unhex(t, tc.in))
			var want [][]byte
			for _, w := range tc.want {
				want = append(want, unhex(t, w))
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("packets (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.stats, d.Stats()); diff != "" {
				t.Errorf("stats (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecoderSplitAndMerge(t *testing.T) {
	pkts := [][]byte{
		unhex(t, v18Packet),
		unhex(t, escPacket),
		bytes.Repeat([]byte{Flag, Escape}, 34), // 68 bytes, every one stuffed
		{1, 2, 3, 4},
	}
	// A packet whose FCS bytes contain 7Eh, to prove the FCS is taken raw.
	for i := 0; ; i++ {
		p := []byte{1, 9, 8, byte(i), byte(i >> 8)}
		f := FCS16(FCSInit, append([]byte{Revision, byte(len(p))}, p...))
		if byte(f>>8) == Flag || byte(f) == Flag {
			pkts = append(pkts, p)
			break
		}
	}
	var stream []byte
	for _, p := range pkts {
		var err error
		stream, err = AppendFrame(stream, p)
		if err != nil {
			t.Fatal(err)
		}
	}
	// Every single split point, plus byte-at-a-time.
	for cut := 0; cut <= len(stream); cut++ {
		got := decodeAll(NewDecoder(0), stream[:cut], stream[cut:])
		if diff := cmp.Diff(pkts, got); diff != "" {
			t.Fatalf("split at %d (-want +got):\n%s", cut, diff)
		}
	}
	d := NewDecoder(0)
	var chunks [][]byte
	for i := range stream {
		chunks = append(chunks, stream[i:i+1])
	}
	if diff := cmp.Diff(pkts, decodeAll(d, chunks...)); diff != "" {
		t.Errorf("byte at a time (-want +got):\n%s", diff)
	}
	if got, want := d.Stats(), (Stats{Frames: uint64(len(pkts))}); got != want {
		t.Errorf("stats: got %+v, want %+v", got, want)
	}
}

func TestDecoderResync(t *testing.T) {
	f1 := unhex(t, v18Frame)
	f2 := unhex(t, escFrame)
	p1, p2 := unhex(t, v18Packet), unhex(t, escPacket)
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	badFCS := bytes.Clone(f1)
	badFCS[len(badFCS)-2] ^= 1
	tests := []struct {
		name  string
		in    []byte
		want  [][]byte
		stats Stats
	}{
		{"garbage before frame", cat([]byte{0x00, 0x11, 0x5e, 0x7d}, f1), [][]byte{p1}, Stats{Frames: 1}},
		{"doubled opening flag", cat([]byte{Flag}, f1), [][]byte{p1}, Stats{Frames: 1}},
		{"many fill flags", cat([]byte{Flag, Flag, Flag, Flag}, f1), [][]byte{p1}, Stats{Frames: 1}},
		{"back to back", cat(f1, f2), [][]byte{p1, p2}, Stats{Frames: 2}},
		{"shared flag between frames", cat(f1, f2[1:]), [][]byte{p1, p2}, Stats{Frames: 2}},
		{"extra flag between frames", cat(f1, []byte{Flag}, f2), [][]byte{p1, p2}, Stats{Frames: 2}},
		{"stray byte between frames", cat(f1, []byte{0x55}, f2), [][]byte{p1, p2}, Stats{Frames: 2}},
		{"stray bytes between frames", cat(f1, []byte{0x55, 0x00, 0xff, 0x7d}, f2), [][]byte{p1, p2}, Stats{Frames: 2}},
		{"bad revision", cat([]byte{Flag, 0x02, 0x11, 0x01}, f1), [][]byte{p1}, Stats{Frames: 1, Dropped: 1}},
		{"bad revision whole frame", cat(bytes.Replace(f1, []byte{Flag, 0x01}, []byte{Flag, 0x02}, 1), f1),
			[][]byte{p1}, Stats{Frames: 1, Dropped: 1}},
		{"count zero", cat([]byte{Flag, 0x01, 0x00, 0xff, 0xff, Flag}, f1), [][]byte{p1}, Stats{Frames: 1, Dropped: 1}},
		{"count 3", cat([]byte{Flag, 0x01, 0x03, 1, 2, 3, 0, 0, Flag}, f1), [][]byte{p1}, Stats{Frames: 1, Dropped: 1}},
		{"count above max", cat([]byte{Flag, 0x01, 0x45}, make([]byte, 0x45), []byte{0, 0, Flag}, f1),
			[][]byte{p1}, Stats{Frames: 1, Dropped: 1}},
		{"count byte is a flag", cat([]byte{Flag, 0x01}, f1), [][]byte{p1}, Stats{Frames: 1, Dropped: 1}},
		{"raw 7Eh inside packet opens next frame", cat(f1[:9], f1), [][]byte{p1}, Stats{Frames: 1, Dropped: 1}},
		{"unescaped 7Eh packet", bytes.Replace(f2, []byte{Escape, 0x5e}, []byte{Flag}, 1), nil,
			Stats{Dropped: 2}},
		{"bad escape pair", cat(bytes.Replace(f2, []byte{Escape, 0x5e}, []byte{Escape, 0x22}, 1), f1),
			[][]byte{p1}, Stats{Frames: 1, Dropped: 1}},
		{"escape then flag opens next frame", cat(f1[:9], []byte{Escape}, f1), [][]byte{p1}, Stats{Frames: 1, Dropped: 1}},
		{"truncated frame then frame", cat(f1[:12], f2), [][]byte{p2}, Stats{Frames: 1, Dropped: 1}},
		{"missing closing flag", cat(f1[:len(f1)-1], []byte{0x00}, f2), [][]byte{p2}, Stats{Frames: 1, Dropped: 1}},
		{"cut before FCS low: flag eaten as FCS", cat(f1[:len(f1)-2], f2), [][]byte{p2}, Stats{Frames: 1, Dropped: 1}},
		{"cut before FCS high: flag eaten as FCS", cat(f1[:len(f1)-3], f2), [][]byte{p2}, Stats{Frames: 1, Dropped: 1}},
		{"FCS error then good frame", cat(badFCS, f2), [][]byte{p2}, Stats{Frames: 1, FCSErrors: 1}},
		{"good, bad, good", cat(f1, badFCS, f2), [][]byte{p1, p2}, Stats{Frames: 2, FCSErrors: 1}},
		{"only garbage", []byte{0x01, 0x11, 0x7d, 0x5e, 0x00}, nil, Stats{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDecoder(0)
			got := decodeAll(d, tc.in)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("packets (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.stats, d.Stats()); diff != "" {
				t.Errorf("stats (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecoderMaxCount(t *testing.T) {
	tests := []struct {
		name      string
		max, size int
		wantOK    bool
	}{
		{"default accepts 68", 0, 68, true},
		{"default rejects 69", 0, 69, false},
		{"below minimum means default", 2, 68, true},
		{"configured 100 accepts 100", 100, 100, true},
		{"configured 100 rejects 101", 100, 101, false},
		{"clamped to 255", 1000, 255, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pkt := bytes.Repeat([]byte{0x42}, tc.size)
			frame, err := AppendFrame(nil, pkt)
			if err != nil {
				t.Fatal(err)
			}
			d := NewDecoder(tc.max)
			got := decodeAll(d, frame)
			if gotOK := len(got) == 1; gotOK != tc.wantOK {
				t.Fatalf("decoded %d packets, want ok=%v", len(got), tc.wantOK)
			}
			if !tc.wantOK && d.Stats().Dropped != 1 {
				t.Errorf("Dropped = %d, want 1", d.Stats().Dropped)
			}
		})
	}
}

// FuzzDecoder feeds arbitrary garbage, then a well-formed frame. The decoder
// must never panic and must recover the frame (for maximum counts below 7Dh,
// where no header byte can look like a flag).
func FuzzDecoder(f *testing.F) {
	f.Add(unhex(f, v18Frame), unhex(f, v18Packet), uint8(64))
	f.Add(unhex(f, escFrame), unhex(f, escPacket), uint8(64))
	f.Add(unhex(f, pppFrame), unhex(f, escPacket), uint8(64))
	f.Add(unhex(f, seed0Frame)[:20], unhex(f, v18Packet), uint8(0))
	f.Add(unhex(f, v18Frame)[:21], unhex(f, escPacket), uint8(120))
	f.Add([]byte{Flag, Revision, 0x7e}, []byte{Flag, Flag, Escape, Escape, 0}, uint8(1))
	f.Fuzz(func(t *testing.T, garbage, pkt []byte, m uint8) {
		maxCount := MinCount + int(m)%(0x7D-MinCount) // 4..124
		// Garbage alone: no panic, every emitted packet within limits.
		NewDecoder(maxCount).Feed(garbage, func(p []byte) {
			if len(p) < MinCount || len(p) > maxCount {
				t.Fatalf("emitted %d-byte packet, limit %d..%d", len(p), MinCount, maxCount)
			}
		})
		if len(pkt) < MinCount {
			return
		}
		if len(pkt) > maxCount {
			pkt = pkt[:maxCount]
		}
		frame, err := AppendFrame(bytes.Clone(garbage), pkt)
		if err != nil {
			t.Fatalf("AppendFrame: %v", err)
		}
		var last []byte
		NewDecoder(maxCount).Feed(frame, func(p []byte) { last = bytes.Clone(p) })
		if !bytes.Equal(last, pkt) {
			t.Fatalf("after %d garbage bytes: last packet %x, want %x", len(garbage), last, pkt)
		}
	})
}

func BenchmarkFrameRoundTrip(b *testing.B) {
	pkt := make([]byte, DefaultMaxCount)
	for i := range pkt {
		pkt[i] = byte(i * 7) // includes a few bytes that need stuffing
	}
	pkt[10], pkt[20] = Flag, Escape
	d := NewDecoder(0)
	var buf []byte
	n := 0
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		buf, err = AppendFrame(buf[:0], pkt)
		if err != nil {
			b.Fatal(err)
		}
		d.Feed(buf, func(p []byte) { n += len(p) })
	}
	if n == 0 {
		b.Fatal("no packet decoded")
	}
}
