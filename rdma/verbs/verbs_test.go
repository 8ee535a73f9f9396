//go:build verbs && cgo && linux

package verbs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cxlpool/dcd"
	"cxlpool/rdma"
	"cxlpool/rdma/client"
	"cxlpool/rdma/internal/fake"
	"cxlpool/rdma/tcp"
	"cxlpool/rdma/verbs"
	"cxlpool/rdma/wire"
)

// link is where the tests run: by default the first RDMA device serves
// and dials over loopback (soft-RoCE will do: rdma link add rxe0 type rxe
// netdev eth0). The VM test (rdma/vmtest) sets CXLPOOL_VERBS_SERVER_DEV,
// CXLPOOL_VERBS_CLIENT_DEV and the two ends' addresses, so that the
// client's device and TCP connection are on the other end of a link.
type link struct {
	server, client verbs.Config
	listen         string
	dial           func(ctx context.Context, network, addr string) (net.Conn, error)
}

func newLink(t *testing.T) link {
	t.Helper()
	l := link{listen: "127.0.0.1:0"}
	sdev, cdev := os.Getenv("CXLPOOL_VERBS_SERVER_DEV"), os.Getenv("CXLPOOL_VERBS_CLIENT_DEV")
	if sdev == "" {
		names, err := verbs.Devices()
		if err != nil || len(names) == 0 {
			t.Skipf("no RDMA device (%v): skipping the verbs transport tests", err)
		}
		sdev, cdev = names[0], names[0]
	}
	l.server = verbs.Config{Device: sdev, GIDIndex: -1}
	l.client = verbs.Config{Device: cdev, GIDIndex: -1}
	if a := os.Getenv("CXLPOOL_VERBS_SERVER_ADDR"); a != "" {
		l.listen = net.JoinHostPort(a, "0")
	}
	d := &net.Dialer{}
	if a := os.Getenv("CXLPOOL_VERBS_CLIENT_ADDR"); a != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(a)}
	}
	l.dial = d.DialContext
	return l
}

// box is a verbs server beside the TCP export server on a fake ledger.
type box struct {
	env  *fake.Env
	vs   *verbs.Server
	addr string
	link link
}

func newBox(t *testing.T) *box {
	t.Helper()
	l := newLink(t)
	env := fake.NewEnv(t, rdma.Config{})
	vs, err := verbs.NewServer(l.server)
	if err != nil {
		if os.Getenv("CXLPOOL_VERBS_SERVER_DEV") != "" {
			t.Fatal(err)
		}
		t.Skipf("RDMA device unusable: %v", err)
	}
	t.Cleanup(func() { vs.Close() })
	s, err := tcp.NewServer(tcp.Config{Auth: env.Service, Extensions: map[wire.Opcode]tcp.Extension{wire.OpConnect: vs}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", l.listen)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	return &box{env: env, vs: vs, addr: ln.Addr().String(), link: l}
}

func (b *box) ccfg(x rdma.Export) client.Config {
	return client.Config{Addr: b.addr, Export: x.ID, Token: x.Token, Dial: b.link.dial}
}

func (b *box) dial(t *testing.T, x rdma.Export) *verbs.Client {
	t.Helper()
	c, err := verbs.Dial(t.Context(), b.ccfg(x), b.link.client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestVerbs(t *testing.T) {
	b := newBox(t)
	x := b.env.Export(t, rdma.PermReadWrite)
	ctx := t.Context()
	c := b.dial(t, x)
	if c.Size() != fake.ChunkSize {
		t.Fatalf("got size %d, want %d", c.Size(), fake.ChunkSize)
	}
	data := bytes.Repeat([]byte("verbs!"), 250000) // 1.5 MB: spans both extents
	const word = fake.ChunkSize - 64               // past data's end
	tests := []struct {
		name string
		run  func() error
		want error
	}{
		{"write", func() error { return c.Write(ctx, data, 100) }, nil},
		{"read back", func() error {
			got := make([]byte, len(data))
			if err := c.Read(ctx, got, 100); err != nil {
				return err
			}
			if !bytes.Equal(got, data) {
				return errors.New("read back differs")
			}
			return nil
		}, nil},
		{"cas", func() error { return wantWord(c.CompareAndSwap(ctx, word, 0, 42))(0) }, nil},
		{"cas refused", func() error { return wantWord(c.CompareAndSwap(ctx, word, 7, 9))(42) }, nil},
		{"faa", func() error { return wantWord(c.FetchAdd(ctx, word, 8))(42) }, nil},
		{"faa again", func() error { return wantWord(c.FetchAdd(ctx, word, 1))(50) }, nil},
		{"unaligned", func() error { _, err := c.FetchAdd(ctx, 9, 1); return err }, rdma.ErrAlign},
		{"past end", func() error { return c.Read(ctx, make([]byte, 2), fake.ChunkSize-1) }, rdma.ErrRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.run(); !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
	// The one-sided accesses landed in the pool's memory where a host
	// sees them.
	host := make([]byte, 6)
	if _, err := b.env.File.ReadAt(host, int64(fake.DPA(100))); err != nil || string(host) != "verbs!" {
		t.Errorf("host reads %q, %v", host, err)
	}
	w := make([]byte, 8)
	if _, err := b.env.File.ReadAt(w, int64(fake.DPA(word))); err != nil || w[0] != 51 {
		t.Errorf("host reads the atomics' word as %v, %v; want 51", w, err)
	}
	if err := b.env.Service.Revoke(ctx, x.ID); err != nil {
		t.Fatal(err)
	}
	if got := b.vs.Registered(); got != 0 {
		t.Errorf("registered exports after the revoke: got %d, want 0", got)
	}
	if err := c.Read(ctx, make([]byte, 8), 0); !errors.Is(err, rdma.ErrRevoked) {
		t.Errorf("read after revoke: got %v, want ErrRevoked", err)
	}
}

// wantWord checks an atomic's previous value.
func wantWord(got uint64, err error) func(want uint64) error {
	return func(want uint64) error {
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("previous value %d, want %d", got, want)
		}
		return nil
	}
}

// TestVerbsRefusals: the same tokens and rights as the TCP transport, and
// isolation between exports.
func TestVerbsRefusals(t *testing.T) {
	b := newBox(t)
	ctx := t.Context()
	rw := b.env.Export(t, rdma.PermReadWrite)
	ro := b.env.Export(t, rdma.PermRead)
	bad := rw
	bad.Token[0] ^= 1
	unknown := rw
	unknown.ID = "exp-nope"
	for _, tt := range []struct {
		name string
		x    rdma.Export
	}{{"bad token", bad}, {"unknown export", unknown}} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := verbs.Dial(ctx, b.ccfg(tt.x), b.link.client)
			if !errors.Is(err, rdma.ErrDenied) {
				t.Errorf("got %v, want ErrDenied", err)
			}
			if c != nil {
				c.Close()
			}
		})
	}
	if got := b.vs.Registered(); got != 0 {
		t.Errorf("refused dials registered %d exports, want 0", got)
	}
	c := b.dial(t, ro)
	if err := c.Read(ctx, make([]byte, 64), 0); err != nil {
		t.Errorf("read-only read: %v", err)
	}
	if err := c.Write(ctx, make([]byte, 64), 0); !errors.Is(err, rdma.ErrPerm) {
		t.Errorf("read-only write: got %v, want ErrPerm", err)
	}
	if _, err := c.FetchAdd(ctx, 0, 1); !errors.Is(err, rdma.ErrPerm) {
		t.Errorf("read-only FAA: got %v, want ErrPerm", err)
	}
	// Revoking one export leaves the other's queue pair working.
	w := b.dial(t, rw)
	if err := b.env.Service.Revoke(ctx, rw.ID); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, []byte("x"), 0); !errors.Is(err, rdma.ErrRevoked) {
		t.Errorf("write to the revoked export: got %v, want ErrRevoked", err)
	}
	if err := c.Read(ctx, make([]byte, 64), 0); err != nil {
		t.Errorf("the other export after the revoke: %v", err)
	}
	if got := b.vs.Registered(); got != 1 {
		t.Errorf("registered exports: got %d, want 1 (the read-only one)", got)
	}
}

// TestVerbsRevokeUnderTraffic revokes an export while clients READ and
// WRITE it: Revoke returns only once the memory is deregistered and the
// queue pairs are in error, and every access after it fails.
func TestVerbsRevokeUnderTraffic(t *testing.T) {
	b := newBox(t)
	x := b.env.Export(t, rdma.PermReadWrite)
	ctx := t.Context()
	clients := []*verbs.Client{b.dial(t, x), b.dial(t, x)}
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, len(clients))
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 64<<10)
			// Bounded: the revoke comes long before this ends.
			for n := 0; n < 1_000_000; n++ {
				var err error
				if i == 0 {
					err = c.Read(ctx, buf, uint64(n%16)<<16)
				} else {
					err = c.Write(ctx, buf, uint64(n%16)<<16)
				}
				if err != nil {
					errs[i] = err
					return
				}
				done.Add(1)
			}
		}()
	}
	deadline := time.Now().Add(2 * time.Minute)
	for done.Load() < 20 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if done.Load() < 20 {
		t.Fatalf("only %d accesses in 2 minutes", done.Load())
	}
	if err := b.env.Service.Revoke(ctx, x.ID); err != nil {
		t.Fatal(err)
	}
	if got := b.vs.Registered(); got != 0 {
		t.Errorf("registered exports when Revoke returned: got %d, want 0", got)
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, rdma.ErrRevoked) {
			t.Errorf("client %d stopped with %v, want ErrRevoked", i, err)
		}
	}
	t.Logf("%d accesses before the revoke", done.Load())
}

// TestVerbsRegrant: capacity released while exported is cut from the
// export (its registration gone before the release is recorded); after a
// re-grant of the chunk a new export reads zeros where the old one wrote.
func TestVerbsRegrant(t *testing.T) {
	b := newBox(t)
	ctx := t.Context()
	x := b.env.Export(t, rdma.PermReadWrite)
	c := b.dial(t, x)
	secret := bytes.Repeat([]byte{0xa5}, 1<<20)
	if err := c.Write(ctx, secret, 512<<10); err != nil {
		t.Fatal(err)
	}
	var registered = -1
	err := b.env.Service.Leaving(ctx, b.env.Grant, true, func() error {
		registered = b.vs.Registered()
		b.env.Ledger.SetState(b.env.Grant.ID, dcd.GrantReleased)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if registered != 0 {
		t.Errorf("registered exports when the release was recorded: got %d, want 0", registered)
	}
	if err := c.Read(ctx, make([]byte, 8), 0); !errors.Is(err, rdma.ErrRevoked) {
		t.Errorf("read after the release: got %v, want ErrRevoked", err)
	}
	b.env.Ledger.AddGrant(b.env.Chunk.ID, 1, dcd.GrantGranted, b.env.Grant.Extents...)
	y := b.env.Export(t, rdma.PermRead)
	got := make([]byte, len(secret))
	if err := b.dial(t, y).Read(ctx, got, 512<<10); err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(got, func(v byte) bool { return v != 0 }); i >= 0 {
		t.Errorf("the re-granted chunk reads %#x at %d, want zeros", got[i], i)
	}
}

// TestVerbsVsTCP measures 1 MiB READ throughput and 64 B READ latency over
// verbs and over the TCP export on the same link, in one run. Only with
// CXLPOOL_VERBS_BENCH=1 (the VM test sets it).
func TestVerbsVsTCP(t *testing.T) {
	if os.Getenv("CXLPOOL_VERBS_BENCH") != "1" {
		t.Skip("set CXLPOOL_VERBS_BENCH=1 to measure")
	}
	b := newBox(t)
	ctx := t.Context()
	x := b.env.Export(t, rdma.PermRead)
	vc := b.dial(t, x)
	tc, err := client.Dial(ctx, b.ccfg(x))
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	type reader interface {
		Read(context.Context, []byte, uint64) error
	}
	const bigN, smallN = 64, 400
	measure := func(r reader) (mbps float64, p50 time.Duration) {
		big := make([]byte, 1<<20)
		for range 4 { // warm up
			if err := r.Read(ctx, big, 0); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		for range bigN {
			if err := r.Read(ctx, big, 0); err != nil {
				t.Fatal(err)
			}
		}
		mbps = float64(bigN<<20) / time.Since(start).Seconds() / 1e6
		small := make([]byte, 64)
		lat := make([]time.Duration, smallN)
		for i := range lat {
			t0 := time.Now()
			if err := r.Read(ctx, small, uint64(i%1000)*64); err != nil {
				t.Fatal(err)
			}
			lat[i] = time.Since(t0)
		}
		slices.Sort(lat)
		return mbps, lat[len(lat)/2]
	}
	vT, vL := measure(vc)
	tT, tL := measure(tc)
	t.Logf("figure: 1 MiB READ: verbs %.1f MB/s, TCP %.1f MB/s (verbs/TCP %.2f×)", vT, tT, vT/tT)
	t.Logf("figure: 64 B READ p50: verbs %v, TCP %v (TCP/verbs %.2f×)", vL, tL, float64(tL)/float64(vL))
}

// TestOpenPicksVerbs: where both ends can, Open's data path is verbs.
func TestOpenPicksVerbs(t *testing.T) {
	b := newBox(t)
	x := b.env.Export(t, rdma.PermReadWrite)
	c, why, err := verbs.Open(t.Context(), b.ccfg(x), b.link.client)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*verbs.Client); !ok || why != "" {
		t.Errorf("got %T (%q), want *verbs.Client", c, why)
	}
}
