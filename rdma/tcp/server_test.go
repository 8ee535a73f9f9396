package tcp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/rdma"
	"cxlpool/rdma/client"
	"cxlpool/rdma/internal/fake"
	"cxlpool/rdma/tcp"
	"cxlpool/rdma/wire"
)

// serve starts a server for env on a loopback port and returns its address.
func serve(t testing.TB, env *fake.Env, cfg tcp.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Auth = env.Service
	s, err := tcp.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

func dial(t testing.TB, addr string, x rdma.Export, conns int) *client.Client {
	t.Helper()
	c, err := client.Dial(context.Background(), client.Config{Addr: addr, Export: x.ID, Token: x.Token, Conns: conns, Stripe: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31) + seed
	}
	return b
}

func TestOperations(t *testing.T) {
	env := fake.NewEnv(t, rdma.Config{})
	addr := serve(t, env, tcp.Config{})
	rw := dial(t, addr, env.Export(t, rdma.PermReadWrite), 2)
	ro := dial(t, addr, env.Export(t, rdma.PermRead), 1)
	ctx := context.Background()
	const end = fake.ChunkSize
	if rw.Size() != end || rw.Perms() != rdma.PermReadWrite || ro.Perms() != rdma.PermRead {
		t.Fatalf("got size %d perms %s/%s", rw.Size(), rw.Perms(), ro.Perms())
	}
	tests := []struct {
		name string
		c    *client.Client
		off  uint64
		n    int
		want error
	}{
		{"small", rw, 100, 64, nil},
		{"copy limit", rw, 0, tcp.CopyLimit, nil},
		{"zero copy", rw, 4096, tcp.CopyLimit + 1, nil},
		{"across extents", rw, 1<<20 - 1000, 3000, nil},
		{"whole export striped", rw, 0, end, nil},
		{"empty", rw, end, 0, nil},
		{"past end", rw, end - 10, 11, rdma.ErrRange},
		{"large past end", rw, end - tcp.CopyLimit, 2 * tcp.CopyLimit, rdma.ErrRange},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := pattern(tt.n, byte(i))
			if err := tt.c.Write(ctx, data, tt.off); !errors.Is(err, tt.want) {
				t.Fatalf("write: got %v, want %v", err, tt.want)
			}
			got := make([]byte, tt.n)
			if err := tt.c.Read(ctx, got, tt.off); !errors.Is(err, tt.want) {
				t.Fatalf("read: got %v, want %v", err, tt.want)
			}
			if tt.want == nil && !bytes.Equal(got, data) {
				t.Fatal("read back differs from what was written")
			}
			if err := ro.Read(ctx, got, tt.off); !errors.Is(err, tt.want) {
				t.Fatalf("read-only read: got %v, want %v", err, tt.want)
			}
			if tt.want == nil && !bytes.Equal(got, data) {
				t.Fatal("read-only client reads other bytes")
			}
		})
	}
	// The memory is the device's: the bytes are where a host sees them.
	host := make([]byte, 3000)
	if _, err := env.File.ReadAt(host[:1000], int64(fake.DPA(1<<20-1000))); err != nil {
		t.Fatal(err)
	}
	if _, err := env.File.ReadAt(host[1000:], int64(fake.DPA(1<<20))); err != nil {
		t.Fatal(err)
	}
	// The last successful write was the whole export's (test 4).
	if !bytes.Equal(host, pattern(end, 4)[1<<20-1000:1<<20+2000]) {
		t.Error("host reads other bytes than the client wrote across the extent boundary")
	}

	atomics := []struct {
		name     string
		c        *client.Client
		run      func(c *client.Client) (uint64, error)
		wantPrev uint64
		want     error
	}{
		{"faa", rw, func(c *client.Client) (uint64, error) { return c.FetchAdd(ctx, 8, 7) }, 0, nil},
		{"cas miss", rw, func(c *client.Client) (uint64, error) { return c.CompareAndSwap(ctx, 8, 1, 2) }, 7, nil},
		{"cas hit", rw, func(c *client.Client) (uint64, error) { return c.CompareAndSwap(ctx, 8, 7, 9) }, 7, nil},
		{"faa sees cas", rw, func(c *client.Client) (uint64, error) { return c.FetchAdd(ctx, 8, 0) }, 9, nil},
		{"unaligned", rw, func(c *client.Client) (uint64, error) { return c.FetchAdd(ctx, 9, 1) }, 0, rdma.ErrAlign},
		{"past end", rw, func(c *client.Client) (uint64, error) { return c.FetchAdd(ctx, end, 1) }, 0, rdma.ErrRange},
		{"read-only", ro, func(c *client.Client) (uint64, error) { return c.CompareAndSwap(ctx, 8, 9, 0) }, 0, rdma.ErrPerm},
	}
	if _, err := rw.Write(ctx, make([]byte, 16), 0), error(nil); err != nil {
		t.Fatal(err)
	}
	for _, tt := range atomics {
		t.Run(tt.name, func(t *testing.T) {
			prev, err := tt.run(tt.c)
			if !errors.Is(err, tt.want) || prev != tt.wantPrev {
				t.Errorf("got %d, %v; want %d, %v", prev, err, tt.wantPrev, tt.want)
			}
		})
	}
	if err := ro.Write(ctx, []byte{1}, 0); !errors.Is(err, rdma.ErrPerm) {
		t.Errorf("read-only write: got %v, want ErrPerm", err)
	}
	if err := rw.Ping(ctx); err != nil {
		t.Errorf("ping: %v", err)
	}
}

func TestBatch(t *testing.T) {
	env := fake.NewEnv(t, rdma.Config{})
	addr := serve(t, env, tcp.Config{})
	c := dial(t, addr, env.Export(t, rdma.PermReadWrite), 1)
	ctx := context.Background()
	big := pattern(64<<10, 9)
	if err := c.Write(ctx, big, 1<<20); err != nil {
		t.Fatal(err)
	}
	small, bigGot, after := make([]byte, 8), make([]byte, len(big)), make([]byte, 4)
	ops := []client.Op{
		{Kind: client.OpWrite, Offset: 64, Buf: []byte("scatter!")},
		{Kind: client.OpRead, Offset: 64, Buf: small},
		{Kind: client.OpRead, Offset: 1 << 20, Buf: bigGot}, // zero-copy
		{Kind: client.OpWrite, Offset: 1 << 20, Buf: []byte("gone")},
		{Kind: client.OpRead, Offset: 1 << 20, Buf: after},
		{Kind: client.OpFetchAdd, Offset: 128, Value: 3},
		{Kind: client.OpCompareAndSwap, Offset: 128, Compare: 3, Value: 30},
		{Kind: client.OpRead, Offset: fake.ChunkSize, Buf: make([]byte, 1)},
		{Kind: client.OpFetchAdd, Offset: 129, Value: 1},
	}
	err := c.Batch(ctx, ops)
	if !errors.Is(err, rdma.ErrRange) {
		t.Fatalf("got %v, want the first failure (ErrRange)", err)
	}
	type result struct {
		Result uint64
		Err    error
	}
	var got []result
	for _, op := range ops {
		got = append(got, result{op.Result, op.Err})
	}
	want := []result{{}, {}, {}, {}, {}, {0, nil}, {3, nil}, {0, rdma.ErrRange}, {0, rdma.ErrAlign}}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b error) bool { return errors.Is(a, b) })); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if string(small) != "scatter!" || string(after) != "gone" {
		t.Errorf("got %q and %q, want the batch's own writes", small, after)
	}
	// The zero-copy READ ran before the WRITE that follows it.
	if !bytes.Equal(bigGot, big) {
		t.Error("a READ in a batch saw a later WRITE of the same batch")
	}

	// More entries than one request carries are split transparently.
	many := make([]client.Op, 2500)
	for i := range many {
		many[i] = client.Op{Kind: client.OpFetchAdd, Offset: 256, Value: 1}
	}
	if err := c.Batch(ctx, many); err != nil {
		t.Fatal(err)
	}
	if v, _ := c.FetchAdd(ctx, 256, 0); v != 2500 {
		t.Errorf("got counter %d, want 2500", v)
	}
}

func TestPipelining(t *testing.T) {
	env := fake.NewEnv(t, rdma.Config{})
	addr := serve(t, env, tcp.Config{MaxQueued: 4})
	c := dial(t, addr, env.Export(t, rdma.PermReadWrite), 1)
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			off := uint64(g) * 64 << 10
			for i := range 20 {
				data := pattern(1000+g*3000+i, byte(g+i))
				if err := c.Write(ctx, data, off); err != nil {
					t.Error(err)
					return
				}
				got := make([]byte, len(data))
				if err := c.Read(ctx, got, off); err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(got, data) {
					t.Errorf("goroutine %d round %d: read back differs", g, i)
					return
				}
				if _, err := c.FetchAdd(ctx, 1<<20+uint64(g)*8, 1); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// rawConn speaks the wire format by hand.
type rawConn struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
}

func rawDial(t testing.TB, addr string) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	r := &rawConn{t: t, nc: nc, br: bufio.NewReader(nc)}
	r.send(wire.AppendPreface(nil))
	if _, err := wire.ParsePreface(r.next(wire.PrefaceLen)); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rawConn) send(b []byte) {
	r.t.Helper()
	if _, err := r.nc.Write(b); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawConn) next(n int) []byte {
	r.t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(r.br, b); err != nil {
		r.t.Fatal(err)
	}
	return b
}

func (r *rawConn) response() (wire.Response, []byte) {
	r.t.Helper()
	resp, err := wire.ParseResponse(r.next(wire.ResponseLen))
	if err != nil {
		r.t.Fatal(err)
	}
	return resp, r.next(int(resp.Body))
}

func openReq(x rdma.Export, id uint64) []byte {
	body := wire.Open{Export: x.ID, Token: x.Token}.AppendBinary(nil)
	return append(wire.Request{Op: wire.OpOpen, ID: id, Body: uint32(len(body))}.AppendBinary(nil), body...)
}

func TestWireExchange(t *testing.T) {
	env := fake.NewEnv(t, rdma.Config{})
	addr := serve(t, env, tcp.Config{})
	x := env.Export(t, rdma.PermReadWrite)
	if _, err := env.File.WriteAt([]byte("0123456789"), int64(fake.DPA(16))); err != nil {
		t.Fatal(err)
	}
	r := rawDial(t, addr)
	// OPEN, READ, WRITE, CAS, unknown opcode with a body, CLOSE and a
	// READ on the closed session, pipelined in one segment.
	var b []byte
	b = append(b, openReq(x, 1)...)
	b = wire.Request{Op: wire.OpRead, Session: 1, ID: 2, Offset: 16, Length: 10}.AppendBinary(b)
	b = wire.Request{Op: wire.OpWrite, Session: 1, ID: 3, Offset: 18, Length: 2, Body: 2}.AppendBinary(b)
	b = append(b, "AB"...)
	b = wire.Request{Op: wire.OpCAS, Session: 1, ID: 4, Offset: 24, Length: 8, Body: 16}.AppendBinary(b)
	b = binary.LittleEndian.AppendUint64(b, 0x3938)
	b = binary.LittleEndian.AppendUint64(b, 7)
	b = append(b, 0x7f, 0, 0, 0, 1, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 'x', 'y', 'z')
	b = wire.Request{Op: wire.OpRead, Session: 1, ID: 6, Offset: 16, Length: 10}.AppendBinary(b)
	b = wire.Request{Op: wire.OpClose, Session: 1, ID: 7}.AppendBinary(b)
	b = wire.Request{Op: wire.OpRead, Session: 1, ID: 8, Offset: 16, Length: 1}.AppendBinary(b)
	r.send(b)

	var got []byte
	for range 8 {
		h, body := r.response()
		got = append(h.AppendBinary(got), body...)
	}
	want := wire.Response{Op: wire.OpOpen, Body: 16, ID: 1}.AppendBinary(nil)
	want = wire.OpenReply{Session: 1, Perms: rdma.PermReadWrite, Size: fake.ChunkSize}.AppendBinary(want)
	want = append(wire.Response{Op: wire.OpRead, Body: 10, ID: 2}.AppendBinary(want), "0123456789"...)
	want = wire.Response{Op: wire.OpWrite, ID: 3}.AppendBinary(want)
	// The word at 24 is "89" then zeros: 0x3938, so the CAS hits.
	want = wire.Response{Op: wire.OpCAS, ID: 4, Value: 0x3938}.AppendBinary(want)
	want = wire.Response{Op: 0x7f, Status: wire.StatusUnsupported, ID: 5}.AppendBinary(want)
	want = append(wire.Response{Op: wire.OpRead, Body: 10, ID: 6}.AppendBinary(want), "01AB4567\x07\x00"...)
	want = wire.Response{Op: wire.OpClose, ID: 7}.AppendBinary(want)
	want = wire.Response{Op: wire.OpRead, Status: wire.StatusDenied, ID: 8}.AppendBinary(want)
	if !bytes.Equal(got, want) {
		t.Errorf("got\n%x\nwant\n%x", got, want)
	}
}

func TestRefusalsLookAlike(t *testing.T) {
	env := fake.NewEnv(t, rdma.Config{})
	addr := serve(t, env, tcp.Config{MaxFailedOpens: 3})
	x := env.Export(t, rdma.PermRead)
	revoked := env.Export(t, rdma.PermRead)
	if err := env.Service.Revoke(context.Background(), revoked.ID); err != nil {
		t.Fatal(err)
	}
	wrong := x
	wrong.Token[0] ^= 0xff
	unknown := x
	unknown.ID = "ffffffffffffffff"
	r := rawDial(t, addr)
	var answers [][]byte
	for i, y := range []rdma.Export{wrong, unknown, revoked} {
		r.send(openReq(y, 1))
		h, body := r.response()
		if i == 2 {
			// The third refusal also ends the connection.
			if _, err := r.br.ReadByte(); err == nil {
				t.Error("connection still open after MaxFailedOpens refusals")
			}
		}
		answers = append(answers, append(h.AppendBinary(nil), body...))
	}
	want := wire.Response{Op: wire.OpOpen, Status: wire.StatusDenied, ID: 1}.AppendBinary(nil)
	for i, a := range answers {
		if !bytes.Equal(a, want) {
			t.Errorf("refusal %d: got %x, want %x", i, a, want)
		}
	}
	if _, err := client.Dial(context.Background(), client.Config{Addr: addr, Export: wrong.ID, Token: wrong.Token}); !errors.Is(err, rdma.ErrDenied) {
		t.Errorf("client with a wrong token: got %v, want ErrDenied", err)
	}
}

func TestProtocolErrors(t *testing.T) {
	env := fake.NewEnv(t, rdma.Config{})
	addr := serve(t, env, tcp.Config{})
	x := env.Export(t, rdma.PermReadWrite)
	tests := []struct {
		name   string
		send   []byte
		status wire.Status // answered, then the connection goes on
		closed bool        // the connection is closed instead
	}{
		{"reserved byte set", []byte{3, 1, 0, 0, 1, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0}, 0, true},
		{"oversized open", wire.Request{Op: wire.OpOpen, ID: 9, Body: 1000}.AppendBinary(nil), 0, true},
		{"malformed open", append(wire.Request{Op: wire.OpOpen, ID: 9, Body: 3}.AppendBinary(nil), 1, '/', 0), wire.StatusInvalid, false},
		{"no session", wire.Request{Op: wire.OpRead, Session: 5, ID: 9, Length: 1}.AppendBinary(nil), wire.StatusDenied, false},
		{"bad batch entry", append(wire.Request{Op: wire.OpBatch, Session: 1, ID: 9, Body: 16}.AppendBinary(nil),
			wire.Entry{Op: wire.OpOpen}.AppendBinary(nil)...), wire.StatusInvalid, false},
		{"batch data cut", append(wire.Request{Op: wire.OpBatch, Session: 1, ID: 9, Body: 17}.AppendBinary(nil),
			append(wire.Entry{Op: wire.OpWrite, Length: 4}.AppendBinary(nil), 'a')...), wire.StatusInvalid, false},
		{"empty batch", wire.Request{Op: wire.OpBatch, Session: 1, ID: 9}.AppendBinary(nil), wire.StatusInvalid, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rawDial(t, addr)
			r.send(openReq(x, 1))
			r.response()
			r.send(tt.send)
			if tt.closed {
				if _, err := r.br.ReadByte(); err == nil {
					t.Fatal("got an answer, want the connection closed")
				}
				return
			}
			h, _ := r.response()
			if h.Status != tt.status || h.ID != 9 {
				t.Fatalf("got status %d id %d, want %d id 9", h.Status, h.ID, tt.status)
			}
			r.send(wire.Request{Op: wire.OpPing, ID: 10}.AppendBinary(nil))
			if h, _ := r.response(); h.Status != wire.StatusOK || h.ID != 10 {
				t.Errorf("after the error: got status %d id %d, want a ping answer", h.Status, h.ID)
			}
		})
	}
}

func TestZeroCopyOrder(t *testing.T) {
	// A large READ answered from device memory must still return the
	// bytes as they were when it ran, not what a pipelined WRITE on the
	// same connection stored before the answer went out.
	env := fake.NewEnv(t, rdma.Config{})
	addr := serve(t, env, tcp.Config{})
	x := env.Export(t, rdma.PermReadWrite)
	old := pattern(256<<10, 1)
	if _, err := env.File.WriteAt(old, int64(fake.DPA(0))); err != nil {
		t.Fatal(err)
	}
	r := rawDial(t, addr)
	r.send(openReq(x, 1))
	r.response()
	newer := pattern(256<<10, 2)
	var b []byte
	b = wire.Request{Op: wire.OpRead, Session: 1, ID: 2, Length: uint32(len(old))}.AppendBinary(b)
	b = wire.Request{Op: wire.OpWrite, Session: 1, ID: 3, Length: uint32(len(newer)), Body: uint32(len(newer))}.AppendBinary(b)
	b = append(b, newer...)
	b = wire.Request{Op: wire.OpRead, Session: 1, ID: 4, Length: uint32(len(old))}.AppendBinary(b)
	r.send(b)
	_, first := r.response()
	r.response()
	_, second := r.response()
	if !bytes.Equal(first, old) {
		t.Error("the first READ returned bytes of the later WRITE")
	}
	if !bytes.Equal(second, newer) {
		t.Error("the second READ did not see the WRITE before it")
	}
}

func TestRevokeInFlight(t *testing.T) {
	env := fake.NewEnv(t, rdma.Config{})
	addr := serve(t, env, tcp.Config{})
	x := env.Export(t, rdma.PermReadWrite)
	c := dial(t, addr, x, 2)
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := pattern(200<<10, byte(g))
			for {
				select {
				case <-stop:
					return
				default:
				}
				var err error
				if g%2 == 0 {
					err = c.Write(ctx, buf, 0)
				} else {
					err = c.Read(ctx, buf, 0)
				}
				if err != nil {
					if !errors.Is(err, rdma.ErrRevoked) && !errors.Is(err, client.ErrConnection) {
						t.Errorf("got %v, want ErrRevoked (or a connection aborted by the revoke)", err)
					}
					return
				}
			}
		}()
	}
	if err := c.Read(ctx, make([]byte, 1), 0); err != nil {
		t.Fatal(err)
	}
	if err := env.Service.Revoke(ctx, x.ID); err != nil {
		t.Fatal(err)
	}
	// Nothing may reach the memory once Revoke has returned: a host's
	// bytes written now stay.
	marker := bytes.Repeat([]byte{0xee}, 200<<10)
	if _, err := env.File.WriteAt(marker, int64(fake.DPA(0))); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	got := make([]byte, len(marker))
	if _, err := env.File.ReadAt(got, int64(fake.DPA(0))); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, marker) {
		t.Error("a client wrote to the memory after Revoke returned")
	}
	if err := c.Read(ctx, make([]byte, 8), 0); err == nil {
		t.Error("read after revoke succeeded")
	}
}

func TestRevokeAbortsStalledWrite(t *testing.T) {
	// A client that asks for large READs and never reads the answers
	// leaves the server blocked in a write from device memory; revoking
	// the export must not wait for it (IOTimeout is far longer than the
	// revoke's context).
	env := fake.NewEnv(t, rdma.Config{})
	addr := serve(t, env, tcp.Config{IOTimeout: time.Hour})
	x := env.Export(t, rdma.PermRead)
	r := rawDial(t, addr)
	r.send(openReq(x, 1))
	r.response()
	var b []byte
	for i := range 16 {
		b = wire.Request{Op: wire.OpRead, Session: 1, ID: uint64(2 + i), Length: fake.ChunkSize}.AppendBinary(b)
	}
	r.send(b)
	// Another client is served meanwhile.
	other := dial(t, addr, env.Export(t, rdma.PermRead), 1)
	if err := other.Read(context.Background(), make([]byte, 1<<20), 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := env.Service.Revoke(ctx, x.ID); err != nil {
		t.Fatalf("revoke waited on a stalled client: %v", err)
	}
	if err := other.Ping(context.Background()); err != nil {
		t.Errorf("other client after the revoke: %v", err)
	}
}

func TestLimits(t *testing.T) {
	env := fake.NewEnv(t, rdma.Config{})
	x := env.Export(t, rdma.PermRead)
	t.Run("sessions", func(t *testing.T) {
		addr := serve(t, env, tcp.Config{MaxSessions: 2})
		r := rawDial(t, addr)
		var statuses []wire.Status
		for i := range 3 {
			r.send(openReq(x, uint64(i)))
			h, _ := r.response()
			statuses = append(statuses, h.Status)
		}
		r.send(wire.Request{Op: wire.OpClose, Session: 1, ID: 9}.AppendBinary(nil))
		r.response()
		r.send(openReq(x, 10))
		h, body := r.response()
		statuses = append(statuses, h.Status)
		if diff := cmp.Diff([]wire.Status{wire.StatusOK, wire.StatusOK, wire.StatusBusy, wire.StatusOK}, statuses); diff != "" {
			t.Errorf("statuses (-want +got):\n%s", diff)
		}
		if o, err := wire.ParseOpenReply(body); err != nil || o.Session != 1 {
			t.Errorf("reopened session %+v, %v; want slot 1 reused", o, err)
		}
	})
	t.Run("connections", func(t *testing.T) {
		// MaxConns counts connections with a session: a pending one
		// does not take the place, a second session-holder is refused.
		addr := serve(t, env, tcp.Config{MaxConns: 1})
		rawDial(t, addr) // pending: no OPEN
		first := rawDial(t, addr)
		first.send(openReq(x, 1))
		if h, _ := first.response(); h.Status != wire.StatusOK {
			t.Fatalf("first OPEN: status %d, want OK", h.Status)
		}
		second := rawDial(t, addr)
		second.send(openReq(x, 1))
		if h, _ := second.response(); h.Status != wire.StatusBusy {
			t.Errorf("second OPEN: status %d, want Busy", h.Status)
		}
		if _, err := second.br.ReadByte(); err == nil {
			t.Error("second connection still open after Busy")
		}
	})
	t.Run("handshake", func(t *testing.T) {
		// A connection that sends nothing, or a preface and no OPEN, is
		// closed at the handshake deadline; an idle one with a session
		// is not.
		addr := serve(t, env, tcp.Config{HandshakeTimeout: 50 * time.Millisecond})
		silent, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer silent.Close()
		preface := rawDial(t, addr)
		open := rawDial(t, addr)
		open.send(openReq(x, 1))
		open.response()
		if _, err := silent.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Errorf("silent connection: got %v, want EOF", err)
		}
		if _, err := preface.br.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("connection without OPEN: got %v, want EOF", err)
		}
		open.send(wire.Request{Op: wire.OpPing, ID: 2}.AppendBinary(nil))
		if h, _ := open.response(); h.Status != wire.StatusOK || h.ID != 2 {
			t.Errorf("connection with a session after the handshake deadline: got %+v, want a ping answer", h)
		}
	})
	t.Run("large request before a session", func(t *testing.T) {
		addr := serve(t, env, tcp.Config{})
		r := rawDial(t, addr)
		r.send(wire.Request{Op: wire.OpPing, ID: 1, Body: 4096}.AppendBinary(nil))
		if _, err := r.br.ReadByte(); err == nil {
			t.Error("a 4 KiB request before any session was answered, want the connection closed")
		}
	})
	t.Run("idle", func(t *testing.T) {
		addr := serve(t, env, tcp.Config{IdleTimeout: 20 * time.Millisecond})
		r := rawDial(t, addr)
		r.send(openReq(x, 1))
		r.response()
		if _, err := r.br.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("idle connection: got %v, want EOF", err)
		}
	})
	t.Run("bad preface", func(t *testing.T) {
		addr := serve(t, env, tcp.Config{})
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
		if _, err := nc.Read(make([]byte, 1)); err == nil {
			t.Error("got an answer to a bad preface, want the connection closed")
		}
	})
}

// FuzzServe feeds arbitrary bytes after the preface to a connection: the
// server must never panic, and must answer or close.
func FuzzServe(f *testing.F) {
	env := fake.NewEnv(f, rdma.Config{})
	x := env.Export(f, rdma.PermReadWrite)
	s, err := tcp.NewServer(tcp.Config{Auth: env.Service, IOTimeout: time.Second, IdleTimeout: time.Second})
	if err != nil {
		f.Fatal(err)
	}
	open := openReq(x, 1)
	f.Add(append(open, wire.Request{Op: wire.OpRead, Session: 1, ID: 2, Length: 8}.AppendBinary(nil)...))
	f.Add(append(open, append(wire.Request{Op: wire.OpBatch, Session: 1, ID: 2, Body: 32}.AppendBinary(nil),
		append(wire.Entry{Op: wire.OpRead, Length: 4}.AppendBinary(nil), wire.Entry{Op: wire.OpFAA, Length: 8}.AppendBinary(nil)...)...)...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		ln := newPipeListener()
		done := make(chan struct{})
		go func() { defer close(done); s.Serve(ln) }()
		cc := ln.dial()
		go io.Copy(io.Discard, cc)
		cc.Write(append(wire.AppendPreface(nil), b...))
		cc.Close()
		ln.Close()
		<-done
	})
	s.Close()
}

// pipeListener hands out in-memory connections.
type pipeListener struct {
	ch     chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{ch: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) dial() net.Conn {
	a, b := net.Pipe()
	l.ch <- b
	return a
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{} }
