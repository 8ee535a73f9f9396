package rawio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// pair returns both ends of a loopback TCP connection.
func pair(t *testing.T) (a, b net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		got <- c
	}()
	a, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b = <-got
	if b == nil {
		t.FailNow()
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func pattern(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + seed)
	}
	return b
}

// TestRoundTrip sends bufs through one end's WriteBuffers (or Write, for
// one buffer) and reads them at the other end through Read, on TCP (the
// raw path up to Small, the runtime's above) and on a pipe (always the
// runtime's), with a send buffer small enough that writes go out in parts.
func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name  string
		sizes []int
	}{
		{"one small", []int{88}},
		{"small vectors", []int{24, 64, 24, 0, 64}},
		{"vectors just under Small", []int{Small - 100, 100}},
		{"one of Small", []int{Small}},
		{"past Small", []int{Small, 1}},
		{"large", []int{1 << 20}},
	}
	conns := []struct {
		name string
		raw  bool
		open func(t *testing.T) (net.Conn, net.Conn)
	}{
		{"tcp", supported, func(t *testing.T) (net.Conn, net.Conn) {
			a, b := pair(t)
			_ = a.(*net.TCPConn).SetWriteBuffer(4096) // partial writes
			return a, b
		}},
		{"pipe", false, func(t *testing.T) (net.Conn, net.Conn) {
			a, b := net.Pipe()
			t.Cleanup(func() { a.Close(); b.Close() })
			return a, b
		}},
	}
	for _, cn := range conns {
		for _, tt := range tests {
			t.Run(cn.name+"/"+tt.name, func(t *testing.T) {
				a, b := cn.open(t)
				w, r := New(a), New(b)
				if got, want := w.rc != nil, cn.raw; got != want {
					t.Fatalf("raw path: got %v, want %v", got, want)
				}
				var bufs [][]byte
				var want []byte
				for i, n := range tt.sizes {
					bufs = append(bufs, pattern(n, i))
					want = append(want, bufs[i]...)
				}
				errc := make(chan error, 1)
				go func() {
					var err error
					var n int64
					if len(bufs) == 1 {
						var k int
						k, err = w.Write(bufs[0])
						n = int64(k)
					} else {
						n, err = w.WriteBuffers(bufs)
					}
					if err == nil && n != int64(len(want)) {
						err = errors.New("short write")
					}
					errc <- err
				}()
				got := make([]byte, len(want))
				if _, err := io.ReadFull(r, got); err != nil {
					t.Fatal(err)
				}
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("received bytes differ from those sent (%d bytes)", len(want))
				}
				for i, v := range w.iov[:cap(w.iov)] {
					if v.Base != nil {
						t.Errorf("writev's vector %d still refers to a caller's buffer", i)
					}
				}
			})
		}
	}
}

// TestErrors: the raw path reports what net.Conn does: io.EOF when the
// peer closes, a timeout when the read deadline passes (also when it was
// moved into the past by another goroutine), net.ErrClosed after Close.
func TestErrors(t *testing.T) {
	if !supported {
		t.Skip("no raw path here")
	}
	t.Run("eof", func(t *testing.T) {
		a, b := pair(t)
		b.Close()
		_, err := New(a).Read(make([]byte, 8))
		if got, want := err, io.EOF; !errors.Is(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		a, _ := pair(t)
		_ = a.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		_, err := New(a).Read(make([]byte, 8))
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("got %v, want a timeout", err)
		}
	})
	t.Run("deadline moved into the past while blocked", func(t *testing.T) {
		a, _ := pair(t)
		errc := make(chan error, 1)
		go func() { _, err := New(a).Read(make([]byte, 8)); errc <- err }()
		_ = a.SetReadDeadline(time.Unix(1, 0))
		if err := <-errc; !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("got %v, want a timeout", err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		a, _ := pair(t)
		c := New(a)
		a.Close()
		if _, err := c.Read(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
			t.Errorf("read: got %v, want net.ErrClosed", err)
		}
		if _, err := c.Write(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
			t.Errorf("write: got %v, want net.ErrClosed", err)
		}
		if _, err := c.WriteBuffers([][]byte{{1}, {2}}); !errors.Is(err, net.ErrClosed) {
			t.Errorf("writev: got %v, want net.ErrClosed", err)
		}
	})
}

// TestPoll: a read that polls gets what arrives while it polls, what
// arrives after its poll is over (it sleeps in the poller then), the end
// of input, and the deadline.
func TestPoll(t *testing.T) {
	if !supported {
		t.Skip("no raw path here")
	}
	tests := []struct {
		name  string
		poll  time.Duration
		delay time.Duration // before the peer writes
	}{
		{"no poll", 0, 0},
		{"data during the poll", MaxPoll, 0},
		{"data after the poll", time.Microsecond, 20 * time.Millisecond},
		{"poll longer than MaxPoll is MaxPoll", time.Hour, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := pair(t)
			r := New(a)
			r.SetPoll(tt.poll)
			if got, want := r.poll, min(tt.poll, MaxPoll); got != want {
				t.Fatalf("poll: got %v, want %v", got, want)
			}
			want := pattern(64, 3)
			go func() {
				time.Sleep(tt.delay)
				_, _ = b.Write(want)
			}()
			got := make([]byte, len(want))
			if _, err := io.ReadFull(r, got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("got %x, want %x", got, want)
			}
			b.Close()
			if _, err := r.Read(got); !errors.Is(err, io.EOF) {
				t.Errorf("after the peer closed: got %v, want io.EOF", err)
			}
		})
	}
	t.Run("deadline", func(t *testing.T) {
		a, _ := pair(t)
		r := New(a)
		r.SetPoll(MaxPoll)
		_ = a.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if _, err := r.Read(make([]byte, 8)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("got %v, want a timeout", err)
		}
	})
}

// TestAllocationFree: the raw path allocates nothing per call.
func TestAllocationFree(t *testing.T) {
	if !supported {
		t.Skip("no raw path here")
	}
	a, b := pair(t)
	w, r := New(a), New(b)
	out := [][]byte{make([]byte, 24), make([]byte, 64)}
	in := make([]byte, 88)
	got := testing.AllocsPerRun(100, func() {
		if _, err := w.WriteBuffers(out); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(in[:32]); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(r, in); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(r, in[:32]); err != nil {
			t.Fatal(err)
		}
	})
	if want := 0.0; got != want {
		t.Errorf("allocations per exchange: got %v, want %v", got, want)
	}
}
