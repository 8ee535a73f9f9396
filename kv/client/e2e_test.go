package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"cxlpool/appliance"
	"cxlpool/dcd"
	"cxlpool/host/vbox"
	"cxlpool/kv"
	"cxlpool/kv/client"
	"cxlpool/sim"
)

// countingListener counts the bytes its connections carry both ways.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.n}, nil
}

func (c countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.n.Add(int64(n))
	return n, err
}

func (c countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// boxRig is an in-process daemon on the virtual box with heads 0 and 1
// handed to external hosts, a vbox backend (the host kernel's part)
// dialled for each, and the KV index served on loopback.
type boxRig struct {
	app      *appliance.Appliance
	backends [2]*vbox.Backend
	addr     string
	wire     atomic.Int64
}

func newBoxRig(t testing.TB, opts ...func(*appliance.Config)) *boxRig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	scfg := sim.DefaultConfig()
	scfg.Capacity = 16 << 30
	scfg.WorkloadTick = -1
	scfg.BlockSize = 16 << 20 // small chunks: the tests move less memory
	acfg := appliance.Config{Device: appliance.DeviceSim, DataDir: t.TempDir(), Sim: scfg,
		Logger: slog.New(slog.DiscardHandler), AddTimeout: 5 * time.Second, ReleaseTimeout: time.Second, Synchronous: "NORMAL"}
	for _, o := range opts {
		o(&acfg)
	}
	app, err := appliance.Open(ctx, acfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := app.Start(ctx); err != nil {
		cancel()
		app.Close()
		t.Fatal(err)
	}
	r := &boxRig{app: app}
	done := make(chan struct{}, 2)
	dir := t.TempDir()
	for ld := range 2 {
		if err := app.Box.SetExternal(ld); err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(dir, fmt.Sprintf("host%d.sock", ld))
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer func() { done <- struct{}{} }()
			_ = app.Box.ServeHostListener(ctx, ld, l)
		}()
		b, err := vbox.Dial(t.Context(), "unix:"+sock, vbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		r.backends[ld] = b
	}
	srv, err := kv.NewServer(kv.ServerConfig{Index: app.KV.Ix})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = l.Addr().String()
	go srv.Serve(countingListener{l, &r.wire})
	t.Cleanup(func() {
		srv.Close()
		for _, b := range r.backends {
			_ = b.Close()
		}
		cancel()
		<-done
		<-done
		app.Manager.Wait()
		app.Close()
	})
	return r
}

// host dials the index as head ld once its backend surfaced the chunk
// with tag (closed at the test's end).
func (r *boxRig) host(ctx context.Context, t testing.TB, name, tag string, ld int, tok kv.Token) *client.Client {
	t.Helper()
	if _, err := r.backends[ld].Wait(ctx, tag); err != nil {
		t.Fatalf("host %d never surfaced the namespace's chunk: %v", ld, err)
	}
	c, err := client.Dial(ctx, client.Config{Addr: r.addr, Namespace: name, Host: uint16(ld), Token: tok, Mapper: r.backends[ld]})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestTwoHostsShareBlocks is the store's point: host 0 puts blocks, host
// 1 gets identical bytes, both through their own mappings of the shared
// chunk; the bytes are in pool memory and never cross the index's wire.
func TestTwoHostsShareBlocks(t *testing.T) {
	r := newBoxRig(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	ns, toks, err := r.app.KV.Create(ctx, kv.CreateRequest{Name: "llama", ChunkSize: 16 << 20, Quota: 32 << 20, Hosts: []dcd.HostID{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(ns.Chunks) != 1 {
		t.Fatalf("namespace has %d chunks, want 1", len(ns.Chunks))
	}
	tag := ns.Chunks[0].Tag.String()
	a, b := r.host(ctx, t, "llama", tag, 0, toks[0]), r.host(ctx, t, "llama", tag, 1, toks[1])
	const n, size = 16, 256 << 10
	var keys, vals [][]byte
	for i := range n {
		keys = append(keys, fmt.Appendf(nil, "prefix-hash-%04d", i))
		v := make([]byte, size)
		for j := range v {
			v[j] = byte(i*31 + j*7)
		}
		vals = append(vals, v)
	}
	errs, err := a.PutBatch(ctx, keys, vals)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if e != nil {
			t.Fatalf("put %d: %v", i, e)
		}
	}
	got, gerrs, err := b.GetBatch(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		if gerrs[i] != nil || !bytes.Equal(got[i], vals[i]) {
			t.Fatalf("host 1's get of %s: %v (bytes equal: %v)", keys[i], gerrs[i], bytes.Equal(got[i], vals[i]))
		}
	}
	// The bytes are in the box's memory where the chunk lives...
	capa, err := r.backends[0].Wait(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	ps, perrs, err := b.Pin(ctx, keys[:1])
	if err != nil || perrs[0] != nil {
		t.Fatal(err, perrs)
	}
	inBox := make([]byte, size)
	if _, err := r.app.Box.DRAM().ReadAt(inBox, int64(capa.Extents[0].Offset+ps[0].Loc.Offset)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(inBox, vals[0]) {
		t.Error("the box's memory at the block's location does not hold the block")
	}
	b.Unpin(ctx, ps)
	// ...and the index's wire carried only metadata: less than a block
	// for all 16 put and got.
	if w := r.wire.Load(); w >= size {
		t.Errorf("the index protocol carried %d bytes for %d blocks of %d: the box copied data", w, n, size)
	}
}

// TestNamespaceGrowsAndShrinks: a full namespace under its quota gets a
// second chunk granted to both hosts (the clients map it when a block
// lands there); resizing back releases the colder chunk after evicting
// its blocks, and what is left reads back intact.
func TestNamespaceGrowsAndShrinks(t *testing.T) {
	r := newBoxRig(t)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	const chunk = 16 << 20
	_, toks, err := r.app.KV.Create(ctx, kv.CreateRequest{Name: "grow", ChunkSize: chunk, Quota: 2 * chunk, Hosts: []dcd.HostID{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	c := func(ld int) *client.Client {
		c, err := client.Dial(ctx, client.Config{Addr: r.addr, Namespace: "grow", Host: uint16(ld), Token: toks[dcd.HostID(ld)],
			Mapper: r.backends[ld]})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b := c(0), c(1)
	// 6 blocks of 4 MiB: the first chunk holds 4.
	const size = 4 << 20
	var keys [][]byte
	for i := range 6 {
		k := fmt.Appendf(nil, "big-%d", i)
		keys = append(keys, k)
		if err := a.Put(ctx, k, bytes.Repeat([]byte{byte(i + 1)}, size)); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	ns, _ := r.app.KV.Namespace("grow")
	if len(ns.Chunks) != 2 || ns.Stats.Evictions != 0 {
		t.Fatalf("after 6 × 4 MiB: %d chunks, %d evictions; want 2 and 0", len(ns.Chunks), ns.Stats.Evictions)
	}
	for i, k := range keys {
		v, err := b.Get(ctx, k)
		if err != nil || len(v) != size || v[0] != byte(i+1) || v[size-1] != byte(i+1) {
			t.Fatalf("host 1 get %s: %v", k, err)
		}
	}
	// Blocks 0-3 are in the first chunk; touch them so the second is colder.
	for _, k := range keys[:4] {
		if _, err := b.Get(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	ns, err = r.app.KV.Resize(ctx, "grow", chunk)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*client.Client{a, b} {
		if cs, err := c.Chunks(ctx); err != nil || len(cs) != 1 {
			t.Fatalf("chunks after the shrink: %v, %v; want 1", cs, err)
		}
	}
	if len(ns.Chunks) != 1 || ns.Stats.Evictions != 2 {
		t.Fatalf("after the shrink: %d chunks, %d evictions; want 1 and 2", len(ns.Chunks), ns.Stats.Evictions)
	}
	for i, k := range keys {
		v, err := b.Get(ctx, k)
		switch {
		case i < 4 && (err != nil || v[size/2] != byte(i+1)):
			t.Errorf("kept block %s: %v", k, err)
		case i >= 4 && !errors.Is(err, client.ErrNotFound):
			t.Errorf("block %s of the released chunk: %v, want not found", k, err)
		}
	}
	// The released chunk is gone from the ledger.
	chunks, err := r.app.Ledger.Chunks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) != 1 {
		t.Errorf("ledger has %d chunks, want 1", len(chunks))
	}
}

// TestSweepFreesStrayChunks: a namespace chunk the index does not hold
// (a crash between the ledger and the index) is released and freed by
// the sweep at start; other chunks are left alone.
func TestSweepFreesStrayChunks(t *testing.T) {
	r := newBoxRig(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	m := r.app.Manager
	stray, err := m.Reserve(ctx, dcd.ReserveRequest{Name: kv.ChunkPrefix + "ghost", Size: 16 << 20, Region: -1, Sharable: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Grant(ctx, stray.ID, 2); err != nil {
		t.Fatal(err)
	}
	other, err := m.Reserve(ctx, dcd.ReserveRequest{Name: "not-kv", Size: 16 << 20, Region: -1, Sharable: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.app.KV.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	chunks, err := r.app.Ledger.Chunks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) != 1 || chunks[0].ID != other.ID {
		t.Errorf("after the sweep the ledger holds %+v, want only chunk %d", chunks, other.ID)
	}
}
