package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"cxlpool/appliance"
	"cxlpool/dcd"
	"cxlpool/kv"
	"cxlpool/kv/client"
	"cxlpool/rdma"
	rdmaclient "cxlpool/rdma/client"
)

// rackConns is the connections per export of the tests' rack.
const rackConns = 1

// withExports serves the box's exports on loopback.
func withExports(c *appliance.Config) { c.ExportListen = "127.0.0.1:0" }

// resolver is what a rack's Resolve does: ask the box for the
// namespace's exports (here the Service; on a real rack the Redfish
// resource).
func resolver(svc *kv.Service, name string) func(context.Context) (map[[16]byte]rdma.ExportID, error) {
	return func(context.Context) (map[[16]byte]rdma.ExportID, error) {
		ra, err := svc.Exports(name)
		if err != nil {
			return nil, err
		}
		out := map[[16]byte]rdma.ExportID{}
		for _, e := range ra.Exports {
			out[e.Tag] = e.Export
		}
		return out, nil
	}
}

func (r *boxRig) rack(ctx context.Context, t testing.TB, name string, tok kv.Token, opts ...func(*client.Config)) (*client.Client, error) {
	cfg := client.Config{Addr: r.addr, Namespace: name, Token: tok,
		Remote: &client.Remote{Addr: r.app.ExportAddr.String(), Resolve: resolver(r.app.KV, name), Conns: rackConns}}
	for _, o := range opts {
		o(&cfg)
	}
	c, err := client.Dial(ctx, cfg)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func blockValues(n, size, seed int) (keys, vals [][]byte) {
	for i := range n {
		keys = append(keys, fmt.Appendf(nil, "blk-%d-%04d", seed, i))
		v := make([]byte, size)
		for j := range v {
			v[j] = byte(seed + i*31 + j*7)
		}
		vals = append(vals, v)
	}
	return keys, vals
}

func mustAll(t *testing.T, what string, errs []error, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	for i, e := range errs {
		if e != nil {
			t.Fatalf("%s %d: %v", what, i, e)
		}
	}
}

// TestRemoteRackSharesBlocks: host 0 puts through its mapping and a
// remote rack gets identical bytes through the namespace's exports; the
// rack puts (into a chunk the namespace grows, exported with the same
// token) and host 1 gets them; a wrong token is refused by the index and
// by the exports alike; deleting the namespace revokes the exports.
func TestRemoteRackSharesBlocks(t *testing.T) {
	r := newBoxRig(t, withExports)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	const chunk = 16 << 20
	ns, toks, err := r.app.KV.Create(ctx, kv.CreateRequest{Name: "llama", ChunkSize: chunk, Quota: 2 * chunk, Hosts: []dcd.HostID{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	ra, err := r.app.KV.Export(ctx, "llama", "rack-7")
	if err != nil {
		t.Fatal(err)
	}
	if len(ra.Exports) != 1 || ra.Exports[0].Tag != ns.Chunks[0].Tag {
		t.Fatalf("exports %+v, want one of chunk %s", ra.Exports, ns.Chunks[0].Tag)
	}
	ns, _ = r.app.KV.Namespace("llama")
	if got, want := ns.Members, []dcd.HostID{0, 1}; !slices.Equal(got, want) || ns.Rack != "rack-7" {
		t.Errorf("members %v, rack %q; want %v and rack-7 (a rack is not a member host)", got, ns.Rack, want)
	}
	tag := ns.Chunks[0].Tag.String()
	h0, h1 := r.host(ctx, t, "llama", tag, 0, toks[0]), r.host(ctx, t, "llama", tag, 1, toks[1])
	rack, err := r.rack(ctx, t, "llama", ra.Token)
	if err != nil {
		t.Fatal(err)
	}

	keys, vals := blockValues(8, 256<<10, 1)
	errs, err := h0.PutBatch(ctx, keys, vals)
	mustAll(t, "host 0 put", errs, err)
	got, errs, err := rack.GetBatch(ctx, keys)
	mustAll(t, "rack get", errs, err)
	for i := range keys {
		if !bytes.Equal(got[i], vals[i]) {
			t.Fatalf("rack's get of %s: bytes differ from host 0's put", keys[i])
		}
	}

	// The rack fills past the first chunk: the namespace grows, and the
	// new chunk is exported with the same token before blocks land there.
	rkeys, rvals := blockValues(4, 4<<20, 2)
	errs, err = rack.PutBatch(ctx, rkeys, rvals)
	mustAll(t, "rack put", errs, err)
	ns, _ = r.app.KV.Namespace("llama")
	if ra, _ := r.app.KV.Exports("llama"); len(ns.Chunks) != 2 || len(ra.Exports) != 2 {
		t.Fatalf("after the rack's puts: %d chunks, %d exports; want 2 and 2", len(ns.Chunks), len(ra.Exports))
	}
	if _, err := r.backends[1].Wait(ctx, ns.Chunks[1].Tag.String()); err != nil {
		t.Fatal(err)
	}
	got, errs, err = h1.GetBatch(ctx, rkeys)
	mustAll(t, "host 1 get", errs, err)
	for i := range rkeys {
		if !bytes.Equal(got[i], rvals[i]) {
			t.Fatalf("host 1's get of %s: bytes differ from the rack's put", rkeys[i])
		}
	}

	// A wrong token: the index refuses the HELLO, the export the OPEN.
	bad := ra.Token
	bad[0] ^= 1
	if _, err := r.rack(ctx, t, "llama", bad); !errors.Is(err, client.ErrDenied) {
		t.Errorf("rack HELLO with a wrong token: %v, want denied", err)
	}
	if _, err := rdmaclient.Dial(ctx, rdmaclient.Config{Addr: r.app.ExportAddr.String(), Export: ra.Exports[0].Export,
		Token: rdma.Token(bad), Conns: 1}); !errors.Is(err, rdma.ErrDenied) {
		t.Errorf("export OPEN with a wrong token: %v, want denied", err)
	}
	// A host's token does not make a rack, nor the rack's a host.
	if _, err := r.rack(ctx, t, "llama", toks[0]); !errors.Is(err, client.ErrDenied) {
		t.Errorf("rack HELLO with host 0's token: %v, want denied", err)
	}
	if _, err := client.Dial(ctx, client.Config{Addr: r.addr, Namespace: "llama", Host: 0, Token: ra.Token,
		Mapper: r.backends[0]}); !errors.Is(err, client.ErrDenied) {
		t.Errorf("host 0 HELLO with the rack's token: %v, want denied", err)
	}

	// Delete: every export of the namespace is revoked, before the
	// capacity goes.
	all, _ := r.app.KV.Exports("llama")
	if err := r.app.KV.Delete(ctx, "llama"); err != nil {
		t.Fatal(err)
	}
	for _, e := range r.app.Exports.List() {
		t.Errorf("export %s of chunk %d to %s outlived its namespace", e.ID, e.Chunk, e.Client)
	}
	if _, err := rack.Get(ctx, keys[0]); err == nil {
		t.Error("rack get after the namespace's deletion succeeded")
	}
	for _, e := range all.Exports {
		if _, err := rdmaclient.Dial(ctx, rdmaclient.Config{Addr: r.app.ExportAddr.String(), Export: e.Export,
			Token: rdma.Token(ra.Token), Conns: 1}); !errors.Is(err, rdma.ErrDenied) {
			t.Errorf("export %s after delete: %v, want denied", e.Export, err)
		}
	}
}

// TestReexportRevokesOld: exporting again hands out a new token and new
// exports; the old token opens neither the index nor the old exports,
// and Unexport ends the new one.
func TestReexportRevokesOld(t *testing.T) {
	r := newBoxRig(t, withExports)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if _, _, err := r.app.KV.Create(ctx, kv.CreateRequest{Name: "ns", ChunkSize: 16 << 20, Hosts: []dcd.HostID{0}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.app.KV.Join(ctx, "ns", kv.RackHost); !errors.Is(err, kv.ErrInvalid) {
		t.Errorf("join as the racks' host ID: %v, want invalid", err)
	}
	old, err := r.app.KV.Export(ctx, "ns", "rack-a")
	if err != nil {
		t.Fatal(err)
	}
	cur, err := r.app.KV.Export(ctx, "ns", "rack-b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.rack(ctx, t, "ns", old.Token); !errors.Is(err, client.ErrDenied) {
		t.Errorf("old token at the index: %v, want denied", err)
	}
	if _, err := rdmaclient.Dial(ctx, rdmaclient.Config{Addr: r.app.ExportAddr.String(), Export: old.Exports[0].Export,
		Token: rdma.Token(old.Token), Conns: 1}); !errors.Is(err, rdma.ErrDenied) {
		t.Errorf("old export: %v, want denied", err)
	}
	rack, err := r.rack(ctx, t, "ns", cur.Token)
	if err != nil {
		t.Fatal(err)
	}
	if err := rack.Put(ctx, []byte("k"), []byte("remote bytes")); err != nil {
		t.Fatal(err)
	}
	// An export lost (as a restore that did not bring it back): the
	// rack's read fails, ExportMissing exports the chunk again with the
	// same token, and the rack's next get resolves and reads.
	if err := r.app.Exports.Revoke(ctx, cur.Exports[0].Export); err != nil {
		t.Fatal(err)
	}
	if _, err := rack.Get(ctx, []byte("k")); err == nil {
		t.Error("rack get through a revoked export succeeded")
	}
	if err := r.app.KV.ExportMissing(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := rack.Get(ctx, []byte("k")); err != nil || string(v) != "remote bytes" {
		t.Errorf("rack get after ExportMissing: %q, %v", v, err)
	}
	if err := r.app.KV.Unexport(ctx, "ns"); err != nil {
		t.Fatal(err)
	}
	if got := len(r.app.Exports.List()); got != 0 {
		t.Errorf("%d exports after Unexport, want 0", got)
	}
	if _, err := r.rack(ctx, t, "ns", cur.Token); !errors.Is(err, client.ErrDenied) {
		t.Errorf("token after Unexport: %v, want denied", err)
	}
	if err := r.app.KV.Unexport(ctx, "ns"); !errors.Is(err, kv.ErrConflict) {
		t.Errorf("second Unexport: %v, want conflict (not exported)", err)
	}
}

// TestRackReadAhead: a rack's gets of blocks it has read before start
// their READs through the export with the GET, keep the bytes when the
// block has not moved, and read again at the block's new place when a
// host stored the key anew meanwhile.
func TestRackReadAhead(t *testing.T) {
	r := newBoxRig(t, withExports)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	const chunk = 16 << 20
	ns, toks, err := r.app.KV.Create(ctx, kv.CreateRequest{Name: "ra", ChunkSize: chunk, Hosts: []dcd.HostID{0}})
	if err != nil {
		t.Fatal(err)
	}
	ra, err := r.app.KV.Export(ctx, "ra", "rack-1")
	if err != nil {
		t.Fatal(err)
	}
	h0 := r.host(ctx, t, "ra", ns.Chunks[0].Tag.String(), 0, toks[0])
	rack, err := r.rack(ctx, t, "ra", ra.Token)
	if err != nil {
		t.Fatal(err)
	}
	keys, vals := blockValues(8, 256<<10, 4)
	errs, err := h0.PutBatch(ctx, keys, vals)
	mustAll(t, "put", errs, err)
	dsts := make([][]byte, len(keys))
	for i := range dsts {
		dsts[i] = make([]byte, 256<<10)
	}
	check := func(what string, want [][]byte) {
		t.Helper()
		for i := range dsts {
			clear(dsts[i])
		}
		lens, errs, err := rack.GetBatchInto(ctx, keys, dsts)
		mustAll(t, what, errs, err)
		for i := range keys {
			if !bytes.Equal(dsts[i][:lens[i]], want[i]) {
				t.Fatalf("%s: %s: bytes differ", what, keys[i])
			}
		}
	}
	type counts struct{ Kept, Reread int }
	ahead := func() counts {
		k, r := rack.ReadAhead()
		return counts{k, r}
	}
	check("first get", vals)
	check("second get", vals)
	if got, want := ahead(), (counts{8, 0}); got != want {
		t.Errorf("after two gets: %+v, want %+v", got, want)
	}
	// Host 0 stores keys[3] anew, with other bytes, elsewhere.
	if errs, err := h0.Delete(ctx, keys[3:4]); err != nil || errors.Join(errs...) != nil {
		t.Fatalf("delete: %v %v", err, errs)
	}
	_, nv := blockValues(1, 256<<10, 5)
	if err := h0.Put(ctx, []byte("pad"), make([]byte, 256<<10)); err != nil { // takes the old place
		t.Fatal(err)
	}
	if err := h0.Put(ctx, keys[3], nv[0]); err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(vals)
	want[3] = nv[0]
	check("get after the host stored a key anew", want)
	if got, want := ahead(), (counts{15, 1}); got != want {
		t.Errorf("after the stale get: %+v, want %+v", got, want)
	}
}
