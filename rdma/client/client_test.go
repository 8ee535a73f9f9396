package client_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cxlpool/rdma"
	"cxlpool/rdma/client"
	"cxlpool/rdma/internal/fake"
	"cxlpool/rdma/tcp"
	"cxlpool/rdma/wire"
)

// countingConn counts the requests a connection carries.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

func setup(t testing.TB) (*fake.Env, string) {
	t.Helper()
	env := fake.NewEnv(t, rdma.Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := tcp.NewServer(tcp.Config{Auth: env.Service})
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	return env, ln.Addr().String()
}

func TestStriping(t *testing.T) {
	env, addr := setup(t)
	x := env.Export(t, rdma.PermReadWrite)
	ctx := context.Background()
	tests := []struct {
		name   string
		conns  int
		stripe int
		n      int
		// wantUsed is how many connections a transfer of n bytes uses.
		wantUsed int
	}{
		{"below stripe", 4, 64 << 10, 64 << 10, 1},
		{"two stripes", 4, 64 << 10, 128 << 10, 2},
		{"all connections", 4, 64 << 10, 2 << 20, 4},
		{"odd size", 3, 64 << 10, 1<<20 + 12345, 3},
		{"one connection", 1, 64 << 10, 2 << 20, 1},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			counts := make([]*atomic.Int64, 0, tt.conns)
			c, err := client.Dial(ctx, client.Config{Addr: addr, Export: x.ID, Token: x.Token, Conns: tt.conns, Stripe: tt.stripe,
				Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
					nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
					if err != nil {
						return nil, err
					}
					n := new(atomic.Int64)
					mu.Lock()
					counts = append(counts, n)
					mu.Unlock()
					return countingConn{nc, n}, nil
				}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			used := func(op func() error) int {
				for _, n := range counts {
					n.Store(0)
				}
				if err := op(); err != nil {
					t.Fatal(err)
				}
				k := 0
				for _, n := range counts {
					if n.Load() > 0 {
						k++
					}
				}
				return k
			}
			data := bytes.Repeat([]byte{byte(i + 1)}, tt.n)
			got := make([]byte, tt.n)
			w := used(func() error { return c.Write(ctx, data, 0) })
			r := used(func() error { return c.Read(ctx, got, 0) })
			if !bytes.Equal(got, data) {
				t.Fatal("read back differs")
			}
			if w != tt.wantUsed || r != tt.wantUsed {
				t.Errorf("got %d connections used to write, %d to read; want %d", w, r, tt.wantUsed)
			}
		})
	}
}

// TestPoll: every Poll setting (never, the default, the longest) moves
// the same bytes, small ones (the polled raw path) and large ones, with
// concurrent callers sharing a connection.
func TestPoll(t *testing.T) {
	env, addr := setup(t)
	x := env.Export(t, rdma.PermReadWrite)
	ctx := context.Background()
	for _, poll := range []time.Duration{-1, 0, time.Hour} {
		t.Run(poll.String(), func(t *testing.T) {
			c, err := client.Dial(ctx, client.Config{Addr: addr, Export: x.ID, Token: x.Token, Conns: 1, Poll: poll})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var wg sync.WaitGroup
			for g, size := range []int{64, 4 << 10, 512 << 10} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					off := uint64(g) * 640 << 10 // apart, inside the 2 MiB export
					want := bytes.Repeat([]byte{byte(g + 1), byte(poll)}, size/2)
					for range 20 {
						if err := c.Write(ctx, want, off); err != nil {
							t.Error(err)
							return
						}
						got := make([]byte, size)
						if err := c.Read(ctx, got, off); err != nil {
							t.Error(err)
							return
						}
						if !bytes.Equal(got, want) {
							t.Errorf("%d bytes: read differs from what was written", size)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

func TestCancel(t *testing.T) {
	env, addr := setup(t)
	x := env.Export(t, rdma.PermReadWrite)
	c, err := client.Dial(context.Background(), client.Config{Addr: addr, Export: x.ID, Token: x.Token, Conns: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Read(ctx, make([]byte, 8), 0); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled read: got %v, want context.Canceled", err)
	}
	// The connection is still usable.
	if err := c.Write(context.Background(), []byte("ok"), 0); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := c.Read(context.Background(), make([]byte, 8), 0); !errors.Is(err, client.ErrClosed) {
		t.Errorf("read after Close: got %v, want ErrClosed", err)
	}
}

func TestDialErrors(t *testing.T) {
	env, addr := setup(t)
	x := env.Export(t, rdma.PermRead)
	bad := x.Token
	bad[5]++
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	silent := ln.Addr().String() // accepts, never answers
	defer ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	tests := []struct {
		name string
		cfg  client.Config
		ctx  context.Context
		want error
	}{
		{"wrong token", client.Config{Addr: addr, Export: x.ID, Token: bad}, context.Background(), rdma.ErrDenied},
		{"unknown export", client.Config{Addr: addr, Export: "nope", Token: x.Token}, context.Background(), rdma.ErrDenied},
		{"invalid export id", client.Config{Addr: addr, Export: "no/pe", Token: x.Token}, context.Background(), rdma.ErrProtocol},
		{"cancelled", client.Config{Addr: silent, Export: x.ID, Token: x.Token}, ctx, context.Canceled},
	}
	cancel()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := client.Dial(tt.ctx, tt.cfg); !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
}

// TestAbandonedCall checks that a caller whose context ends while it is
// the one reading responses leaves the stream intact: the late answer is
// discarded and the next call gets its own.
func TestAbandonedCall(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan wire.Request, 4)
	release := make(chan struct{})
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		br := bufio.NewReader(nc)
		var pre [wire.PrefaceLen]byte
		io.ReadFull(br, pre[:])
		out := wire.AppendPreface(nil)
		for i := 0; ; i++ {
			var hb [wire.RequestLen]byte
			if _, err := io.ReadFull(br, hb[:]); err != nil {
				return
			}
			req, _ := wire.ParseRequest(hb[:])
			br.Discard(int(req.Body))
			switch req.Op {
			case wire.OpOpen:
				out = wire.Response{Op: req.Op, Body: wire.OpenReplyLen, ID: req.ID}.AppendBinary(out)
				out = wire.OpenReply{Session: 1, Perms: rdma.PermRead, Size: 1 << 20}.AppendBinary(out)
				nc.Write(out)
			case wire.OpRead:
				got <- req
				<-release // answer only once the caller has given up
				out = wire.Response{Op: req.Op, Body: req.Length, ID: req.ID}.AppendBinary(nil)
				nc.Write(append(out, make([]byte, req.Length)...))
			default:
				got <- req
				nc.Write(wire.Response{Op: req.Op, ID: req.ID}.AppendBinary(nil))
			}
		}
	}()
	c, err := client.Dial(context.Background(), client.Config{Addr: ln.Addr().String(), Export: "x", Conns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The connection keeps one context watch for the last context it
	// read with: replacing another context's watch, then reusing it for
	// the abandoned call, must still interrupt the wait.
	ctx0, cancel0 := context.WithCancel(context.Background())
	defer cancel0()
	ctx, cancel := context.WithCancel(context.Background())
	for _, ctx := range []context.Context{ctx0, ctx} {
		if err := c.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		<-got
	}
	done := make(chan error, 1)
	go func() { done <- c.Read(ctx, make([]byte, 100), 0) }()
	<-got // the READ is on the server
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned read: got %v, want context.Canceled", err)
	}
	close(release)
	if err := c.Ping(context.Background()); err != nil {
		t.Fatalf("ping after an abandoned read: %v", err)
	}
	if req := <-got; req.Op != wire.OpPing {
		t.Errorf("got %s, want PING", req.Op)
	}
}

func TestBench(t *testing.T) {
	env, addr := setup(t)
	x := env.Export(t, rdma.PermReadWrite)
	c, err := client.Dial(context.Background(), client.Config{Addr: addr, Export: x.ID, Token: x.Token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tests := []struct {
		cfg  client.BenchConfig
		want error
	}{
		{client.BenchConfig{Kind: client.OpWrite, Size: 64 << 10, Count: 20, Span: 1 << 20}, nil},
		{client.BenchConfig{Kind: client.OpRead, Size: 64, Count: 100}, nil},
		{client.BenchConfig{Kind: client.OpRead, Size: 64, Count: 0}, rdma.ErrInvalid},
		{client.BenchConfig{Kind: client.OpFetchAdd, Size: 8, Count: 1}, rdma.ErrInvalid},
		{client.BenchConfig{Kind: client.OpRead, Size: 64, Count: 1, Span: 1 << 40}, rdma.ErrRange},
	}
	for _, tt := range tests {
		r, err := c.Bench(context.Background(), tt.cfg)
		if !errors.Is(err, tt.want) {
			t.Errorf("%+v: got %v, want %v", tt.cfg, err, tt.want)
			continue
		}
		if err == nil && (r.Ops != tt.cfg.Count || r.Bytes != int64(tt.cfg.Count*tt.cfg.Size) || r.P50 > r.P99 || r.MBps() <= 0) {
			t.Errorf("%+v: got %+v", tt.cfg, r)
		}
	}
}

// TestBenchDuration: a bench with a duration stops at whichever of the
// count and the time comes first.
func TestBenchDuration(t *testing.T) {
	env, addr := setup(t)
	x := env.Export(t, rdma.PermRead)
	c, err := client.Dial(context.Background(), client.Config{Addr: addr, Export: x.ID, Token: x.Token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tests := []struct {
		name    string
		cfg     client.BenchConfig
		wantOps int
		want    error
	}{
		{"time first", client.BenchConfig{Kind: client.OpRead, Size: 64, Duration: time.Nanosecond}, 1, nil},
		{"count first", client.BenchConfig{Kind: client.OpRead, Size: 64, Count: 5, Duration: time.Hour}, 5, nil},
		{"negative duration", client.BenchConfig{Kind: client.OpRead, Size: 64, Duration: -1}, 0, rdma.ErrInvalid},
		{"negative count", client.BenchConfig{Kind: client.OpRead, Size: 64, Count: -1, Duration: time.Second}, 0, rdma.ErrInvalid},
	}
	for _, tt := range tests {
		r, err := c.Bench(context.Background(), tt.cfg)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
			continue
		}
		if r.Ops != tt.wantOps {
			t.Errorf("%s: got %d operations, want %d", tt.name, r.Ops, tt.wantOps)
		}
	}
}
