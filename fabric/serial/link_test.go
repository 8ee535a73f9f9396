package serial

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLinkPipeRoundTrip(t *testing.T) {
	a, b := net.Pipe()
	la := NewLink(a, LinkConfig{})
	lb := NewLink(b, LinkConfig{})
	defer la.Close()
	defer lb.Close()

	const writers, perWriter = 4, 25
	var want [][]byte
	for w := range writers {
		for i := range perWriter {
			// Packets full of flag/escape bytes stress stuffing.
			p := bytes.Repeat([]byte{Flag, byte(w), Escape, byte(i)}, 1+i%17)
			want = append(want, p)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				if err := la.WritePacket(want[w*perWriter+i]); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var got [][]byte
	for range len(want) {
		p, err := lb.ReadPacket()
		if err != nil {
			t.Fatalf("ReadPacket: %v", err)
		}
		got = append(got, p)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("WritePacket: %v", err)
	}
	// Concurrent writers interleave whole frames, so compare as sets.
	sortPkts := func(s [][]byte) { slices.SortFunc(s, bytes.Compare) }
	sortPkts(got)
	sortPkts(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("packets (-want +got):\n%s", diff)
	}
	if got, want := la.Stats().Sent, uint64(len(want)); got != want {
		t.Errorf("sender Sent = %d, want %d", got, want)
	}
	if got, want := lb.Stats(), (Stats{Frames: uint64(len(want))}); got != want {
		t.Errorf("receiver stats: got %+v, want %+v", got, want)
	}

	// And back the other way.
	go func() { _ = lb.WritePacket(unhex(t, escPacket)) }()
	p, err := la.ReadPacket()
	if err != nil {
		t.Fatalf("ReadPacket: %v", err)
	}
	if diff := cmp.Diff(unhex(t, escPacket), p); diff != "" {
		t.Errorf("reverse packet (-want +got):\n%s", diff)
	}
}

func TestLinkCloseUnblocksRead(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	l := NewLink(a, LinkConfig{})
	done := make(chan error)
	go func() {
		_, err := l.ReadPacket()
		done <- err
	}()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-done; err == nil {
		t.Fatal("ReadPacket after Close: got nil error, want one")
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: got %v, want nil", err)
	}
}

func TestLinkPeerCloseIsEOF(t *testing.T) {
	a, b := net.Pipe()
	l := NewLink(a, LinkConfig{})
	defer l.Close()
	b.Close()
	if _, err := l.ReadPacket(); err != io.EOF {
		t.Fatalf("ReadPacket: got %v, want io.EOF", err)
	}
}

// stream is a canned byte stream: reads return the chunks, then io.EOF.
type stream struct {
	chunks [][]byte
	w      bytes.Buffer
}

func (s *stream) Read(p []byte) (int, error) {
	if len(s.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.chunks[0])
	s.chunks[0] = s.chunks[0][n:]
	if len(s.chunks[0]) == 0 {
		s.chunks = s.chunks[1:]
	}
	return n, nil
}
func (s *stream) Write(p []byte) (int, error) { return s.w.Write(p) }
func (s *stream) Close() error                { return nil }

func TestLinkReadsAllBeforeEOF(t *testing.T) {
	f1, f2 := unhex(t, v18Frame), unhex(t, escFrame)
	bad := bytes.Clone(f1)
	bad[len(bad)-2] ^= 0x80
	// One read delivers three frames plus half of a fourth; the rest of the
	// fourth arrives in the next read.
	s := &stream{chunks: [][]byte{
		slices.Concat([]byte{0x00}, f1, bad, f2, f1[:7]),
		f1[7:],
	}}
	l := NewLink(s, LinkConfig{})
	var got [][]byte
	for {
		p, err := l.ReadPacket()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("ReadPacket: %v", err)
		}
		got = append(got, p)
	}
	want := [][]byte{unhex(t, v18Packet), unhex(t, escPacket), unhex(t, v18Packet)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("packets (-want +got):\n%s", diff)
	}
	if got, want := l.Stats(), (Stats{Frames: 3, FCSErrors: 1}); got != want {
		t.Errorf("stats: got %+v, want %+v", got, want)
	}
	// The returned slices are fresh: mutating one must not affect another.
	got[0][0] = 0xEE
	if got[2][0] == 0xEE {
		t.Error("ReadPacket slices share memory")
	}
}

func TestLinkWritePacket(t *testing.T) {
	tests := []struct {
		name    string
		max     int
		size    int
		wantErr bool
	}{
		{"default max 68", 0, 68, false},
		{"default rejects 69", 0, 69, true},
		{"raised max", 255, 255, false},
		{"below minimum", 0, 3, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &stream{}
			l := NewLink(s, LinkConfig{MaxCount: tc.max})
			err := l.WritePacket(make([]byte, tc.size))
			if gotErr := err != nil; gotErr != tc.wantErr {
				t.Fatalf("WritePacket: got %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				if !errors.Is(err, ErrPacketSize) {
					t.Errorf("got %v, want ErrPacketSize", err)
				}
				if s.w.Len() != 0 {
					t.Errorf("wrote %d bytes on error, want 0", s.w.Len())
				}
				return
			}
			want, _ := AppendFrame(nil, make([]byte, tc.size))
			if diff := cmp.Diff(want, s.w.Bytes()); diff != "" {
				t.Errorf("wire bytes (-want +got):\n%s", diff)
			}
		})
	}
}

// roundTrip sends one packet each way over a dialed/accepted pair.
func roundTrip(t *testing.T, ln net.Listener, addr string) {
	t.Helper()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	c, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatalf("Dial(%q): %v", addr, err)
	}
	client := NewLink(c, LinkConfig{})
	defer client.Close()
	sc, ok := <-accepted
	if !ok {
		t.Fatal("Accept failed")
	}
	server := NewLink(sc, LinkConfig{})
	defer server.Close()
	if err := client.WritePacket(unhex(t, v18Packet)); err != nil {
		t.Fatalf("WritePacket: %v", err)
	}
	p, err := server.ReadPacket()
	if err != nil {
		t.Fatalf("ReadPacket: %v", err)
	}
	if diff := cmp.Diff(unhex(t, v18Packet), p); diff != "" {
		t.Errorf("packet (-want +got):\n%s", diff)
	}
}

func TestDialListenTCP(t *testing.T) {
	ln, err := Listen("tcp://127.0.0.1:0")
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	defer ln.Close()
	roundTrip(t, ln, "tcp://"+ln.Addr().String())
}

func TestDialListenUnix(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "dev.sock")

	// Leave a stale socket file behind, as a crashed daemon would.
	stale, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("stale socket file missing: %v", err)
	}

	ln, err := Listen("unix:" + path)
	if err != nil {
		t.Fatalf("Listen over stale socket: %v", err)
	}
	defer ln.Close()

	roundTrip(t, ln, "unix:"+path)
	roundTrip(t, ln, "unix://"+path)

	// A live socket must not be stolen. (The liveness probe leaves one
	// short-lived connection in ln's backlog, so this check comes last.)
	if l2, err := Listen("unix:" + path); err == nil {
		l2.Close()
		t.Fatal("Listen on a live socket: got nil error, want one")
	}

	// A regular file is never removed.
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if l3, err := Listen("unix:" + file); err == nil {
		l3.Close()
		t.Fatal("Listen on a regular file: got nil error, want one")
	}
	if _, err := os.Stat(file); err != nil {
		t.Errorf("regular file removed: %v", err)
	}
}

func TestBadAddresses(t *testing.T) {
	for _, addr := range []string{
		"", "localhost:9000", "tcp:127.0.0.1:1", "tcp://noport", "udp://1.2.3.4:5",
		"unix:", "tty:", "tty:/dev/null?baud=abc", "tty:/dev/null?baud=123", "tty:/dev/null?parity=even",
	} {
		t.Run(fmt.Sprintf("%q", addr), func(t *testing.T) {
			c, err := Dial(context.Background(), addr)
			if err == nil {
				c.Close()
				t.Fatalf("Dial: got nil error, want ErrAddress")
			}
			if !errors.Is(err, ErrAddress) {
				t.Errorf("Dial: got %v, want ErrAddress", err)
			}
		})
	}
	for _, addr := range []string{"tty:/dev/ttyS0", "tcp:/x", "udp://1.2.3.4:5"} {
		if ln, err := Listen(addr); err == nil {
			ln.Close()
			t.Errorf("Listen(%q): got nil error, want one", addr)
		}
	}
}

// recorder is a stream that keeps every Write as one call.
type recorder struct {
	bytes.Buffer
	writes int
}

func (r *recorder) Write(p []byte) (int, error) { r.writes++; return r.Buffer.Write(p) }
func (r *recorder) Read([]byte) (int, error)    { select {} }
func (r *recorder) Close() error                { return nil }

// TestWritePacketsIsOneWriteOfTheSameBytes: a message's packets written
// together reach the stream as exactly the bytes of one WritePacket per
// packet, in one Write.
func TestWritePacketsIsOneWriteOfTheSameBytes(t *testing.T) {
	pkts := [][]byte{
		unhex(t, escPacket),
		bytes.Repeat([]byte{Flag, Escape, 0x01}, 20),
		{0x01, 0x02, 0x03, 0x04},
	}
	one, each := &recorder{}, &recorder{}
	if err := NewLink(one, LinkConfig{}).WritePackets(pkts); err != nil {
		t.Fatalf("WritePackets: %v", err)
	}
	le := NewLink(each, LinkConfig{})
	for _, p := range pkts {
		if err := le.WritePacket(p); err != nil {
			t.Fatalf("WritePacket: %v", err)
		}
	}
	if diff := cmp.Diff(each.Bytes(), one.Bytes()); diff != "" {
		t.Errorf("stream (-one per packet +together):\n%s", diff)
	}
	if one.writes != 1 {
		t.Errorf("writes: got %d, want 1", one.writes)
	}
	lo := NewLink(one, LinkConfig{})
	if err := lo.WritePackets([][]byte{{1}, make([]byte, lo.max+1)}); !errors.Is(err, ErrPacketSize) {
		t.Errorf("oversized packet: got %v, want ErrPacketSize", err)
	}
	if got := lo.Stats().Sent; got != 0 {
		t.Errorf("Sent after a refused batch: got %d, want 0 (nothing written)", got)
	}
}
