package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/dcd"
	"cxlpool/fabric/cci"
	"cxlpool/host"
	"cxlpool/kv"
	"cxlpool/kv/client"
	"cxlpool/kv/wire"
)

const chunkSize = 4 << 20

// memMapper is one shared memory per tag: what every host's mapping of a
// shared chunk shows.
type memMapper struct {
	mu   sync.Mutex
	mem  map[string][]byte
	maps int
}

type mapping struct{ b []byte }

func (m mapping) Bytes() []byte { return m.b }
func (m mapping) Close() error  { return nil }

func (m *memMapper) Map(_ context.Context, tag string) (host.Mapping, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.maps++
	b := m.mem[tag]
	if b == nil {
		return nil, errors.New("no such tag")
	}
	return mapping{b}, nil
}

type rig struct {
	addr   string
	mapper *memMapper
	tok    [wire.TokenSize]byte
}

func newRig(t testing.TB, network string) *rig { return newRigEvents(t, network, nil) }

// newRigEvents is newRig with the index's events going to sink.
func newRigEvents(t testing.TB, network string, sink kv.EventSink) *rig {
	t.Helper()
	return newRigServer(t, network, kv.ServerConfig{}, sink)
}

// newRigServer is newRigEvents with the server's limits of scfg (its
// Index and PerSource are the rig's).
func newRigServer(t testing.TB, network string, scfg kv.ServerConfig, sink kv.EventSink) *rig {
	t.Helper()
	ix, err := kv.OpenIndex(kv.IndexConfig{Dir: t.TempDir(), Events: sink})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ix.Close() })
	tag := cci.Tag{0xaa, 1}
	if err := ix.CreateNamespace("ns", chunkSize, chunkSize); err != nil {
		t.Fatal(err)
	}
	if err := ix.AddChunk("ns", kv.ChunkInfo{ID: 1, Tag: tag, Size: chunkSize}); err != nil {
		t.Fatal(err)
	}
	r := &rig{mapper: &memMapper{mem: map[string][]byte{tag.String(): make([]byte, chunkSize)}}, tok: [32]byte{7}}
	for _, h := range []dcd.HostID{0, 1} {
		if err := ix.SetMember("ns", h, r.tok); err != nil {
			t.Fatal(err)
		}
	}
	scfg.Index, scfg.PerSource = ix, 8
	srv, err := kv.NewServer(scfg)
	if err != nil {
		t.Fatal(err)
	}
	var l net.Listener
	if network == "unix" {
		r.addr = filepath.Join(t.TempDir(), "kv.sock")
		l, err = net.Listen("unix", r.addr)
	} else {
		l, err = net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			r.addr = l.Addr().String()
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return r
}

func (r *rig) dial(t *testing.T, network string, hostID uint16, tok [32]byte) (*client.Client, error) {
	t.Helper()
	c, err := client.Dial(t.Context(), client.Config{Network: network, Addr: r.addr, Namespace: "ns", Host: hostID, Token: tok, Mapper: r.mapper})
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func TestRoundTrip(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			r := newRig(t, network)
			a, err := r.dial(t, network, 0, r.tok)
			if err != nil {
				t.Fatal(err)
			}
			b, err := r.dial(t, network, 1, r.tok)
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			var keys, vals [][]byte
			for i := range 20 {
				keys = append(keys, fmt.Appendf(nil, "prefix-%d", i))
				vals = append(vals, bytes.Repeat([]byte{byte(i)}, 1000+i*100))
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
			if err := a.Put(ctx, keys[0], vals[0]); !errors.Is(err, client.ErrExists) {
				t.Errorf("second put: %v, want exists", err)
			}
			got, gerrs, err := b.GetBatch(ctx, append(keys, []byte("missing")))
			if err != nil {
				t.Fatal(err)
			}
			for i := range keys {
				if gerrs[i] != nil || !bytes.Equal(got[i], vals[i]) {
					t.Fatalf("B's get %d: %v, %d bytes", i, gerrs[i], len(got[i]))
				}
			}
			if !errors.Is(gerrs[len(keys)], client.ErrNotFound) {
				t.Errorf("missing key: %v", gerrs[len(keys)])
			}
			ex, err := b.Exists(ctx, [][]byte{keys[3], []byte("missing")})
			if err != nil || !ex[0] || ex[1] {
				t.Errorf("exists = %v, %v", ex, err)
			}
			ps, perrs, err := b.Pin(ctx, keys[:2])
			if err != nil || perrs[0] != nil || !bytes.Equal(ps[0].Bytes, vals[0]) {
				t.Fatalf("pin: %v %v", err, perrs)
			}
			if errs, err := b.Unpin(ctx, ps); err != nil || errs[0] != nil || errs[1] != nil {
				t.Fatalf("unpin: %v %v", err, errs)
			}
			if errs, err := a.Delete(ctx, keys[:1]); err != nil || errs[0] != nil {
				t.Fatalf("delete: %v %v", err, errs)
			}
			if _, err := b.Get(ctx, keys[0]); !errors.Is(err, client.ErrNotFound) {
				t.Errorf("get after delete: %v", err)
			}
			st, err := b.Stat(ctx)
			if err != nil || st.Blocks != 19 || st.Capacity != chunkSize {
				t.Errorf("stat = %+v, %v", st, err)
			}
		})
	}
}

func TestHelloRefused(t *testing.T) {
	r := newRig(t, "tcp")
	for _, tc := range []struct {
		name string
		host uint16
		tok  [32]byte
	}{{"wrong token", 0, [32]byte{8}}, {"not a member", 5, r.tok}} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := r.dial(t, "tcp", tc.host, tc.tok); !errors.Is(err, client.ErrDenied) {
				t.Fatalf("dial: %v, want denied", err)
			}
		})
	}
}

// TestRawRefusals: bytes a client might send that the server refuses
// with a status, never a hang or a crash.
func TestRawRefusals(t *testing.T) {
	r := newRig(t, "tcp")
	for _, tc := range []struct {
		name string
		send []byte
		want wire.Status
	}{
		{"op before hello", mustReq(t, &wire.Request{Op: wire.OpRenew, ID: 1}), wire.Denied},
		{"bad version", func() []byte { b := mustReq(t, &wire.Request{Op: wire.OpRenew, ID: 1}); b[4] = 9; return b }(), wire.BadFrame},
		{"huge frame", []byte{0xff, 0xff, 0xff, 0x7f, 1, 1, 0, 0, 1, 0, 0, 0}, wire.TooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := net.Dial("tcp", r.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if _, err := nc.Write(tc.send); err != nil {
				t.Fatal(err)
			}
			h, body, _, err := wire.ReadFrame(nc, nil, wire.DefaultMaxBody)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := wire.DecodeResponse(h, body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != tc.want {
				t.Errorf("status %s (%s), want %s", resp.Status, resp.Message, tc.want)
			}
		})
	}
}

func mustReq(t *testing.T, r *wire.Request) []byte {
	b, err := wire.AppendRequest(nil, r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPerSourceCap(t *testing.T) {
	r := newRig(t, "tcp")
	var cs []*client.Client
	for range 8 {
		c, err := r.dial(t, "tcp", 0, r.tok)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	if _, err := r.dial(t, "tcp", 0, r.tok); !errors.Is(err, client.ErrBusy) {
		t.Fatalf("9th connection: %v, want busy", err)
	}
	cs[0].Close()
	// The slot comes back once the server has seen the close.
	var err error
	for range 200 {
		var c *client.Client
		if c, err = r.dial(t, "tcp", 0, r.tok); err == nil {
			c.Close()
			return
		}
	}
	t.Fatalf("after a close: %v", err)
}

// TestPutSeqReachesEvents: what PutBatchSeq tells of each block's
// sequence crosses the protocol (PUT with META) and comes out in the
// index's Stored events: one per chain, with the parent and token counts.
func TestPutSeqReachesEvents(t *testing.T) {
	got := make(chan kv.Event, 16)
	r := newRigEvents(t, "tcp", func(_ context.Context, e kv.Event) { got <- e })
	c, err := r.dial(t, "tcp", 0, r.tok)
	if err != nil {
		t.Fatal(err)
	}
	keys := [][]byte{{0, 0, 0, 0, 0, 0, 0, 41}, {0, 0, 0, 0, 0, 0, 0, 42}}
	vals := [][]byte{bytes.Repeat([]byte{1}, 100), bytes.Repeat([]byte{2}, 200)}
	seqs := []client.Seq{{HasParent: true, Parent: 40, Tokens: 16}, {HasParent: true, Parent: 41, Tokens: 32}}
	errs, err := c.PutBatchSeq(context.Background(), keys, vals, seqs)
	if err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("put: %v %v", err, errs)
	}
	e := <-got // the index sends Stored after the commit is durable, before COMMIT is answered
	p40 := uint64(40)
	want := kv.Event{Kind: kv.EventStored, Namespace: "ns", Parent: &p40, Blocks: []kv.EventBlock{
		{Key: keys[0], Length: 100, Hash: 41, Tokens: 16}, {Key: keys[1], Length: 200, Hash: 42, Tokens: 32}}}
	if diff := cmp.Diff(want, e); diff != "" {
		t.Errorf("event (-want +got):\n%s", diff)
	}
	if _, err := c.PutBatchSeq(context.Background(), keys[:1], vals, seqs); err == nil {
		t.Error("PutBatchSeq with 1 key and 2 values accepted")
	}
}
