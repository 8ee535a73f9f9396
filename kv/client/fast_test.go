package client_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/kv"
	"cxlpool/kv/client"
	"cxlpool/kv/wire"
)

// TestGetBatchInto: the blocks land in the caller's buffers with their
// lengths; a missing key and a buffer too small fail alone; the posted
// UNPINs leave no pin behind (the space of deleted blocks is reusable at
// once: a put of the whole chunk fits).
func TestGetBatchInto(t *testing.T) {
	r := newRig(t, "tcp")
	a, b := r.hosts01(t)
	ctx := t.Context()
	var keys, vals [][]byte
	for i := range 4 {
		keys = append(keys, fmt.Appendf(nil, "k%d", i))
		vals = append(vals, bytes.Repeat([]byte{byte(i + 1)}, 4096*(i+1)+i))
	}
	errs, err := a.PutBatch(ctx, keys, vals)
	if err != nil || errors.Join(errs...) != nil {
		t.Fatalf("put: %v %v", err, errs)
	}
	ask := append(append([][]byte{}, keys...), []byte("missing"))
	dsts := make([][]byte, len(ask))
	for i := range dsts {
		dsts[i] = make([]byte, 32<<10)
	}
	dsts[2] = make([]byte, 10) // too small for k2
	lens, errs, err := b.GetBatchInto(ctx, ask, dsts)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []error{nil, nil, client.ErrShortBuffer, nil, client.ErrNotFound} {
		if !errors.Is(errs[i], want) || (want == nil) != (errs[i] == nil) {
			t.Errorf("item %d: error %v, want %v", i, errs[i], want)
		}
	}
	if diff := cmp.Diff([]int{len(vals[0]), len(vals[1]), 0, len(vals[3]), 0}, lens); diff != "" {
		t.Errorf("lengths (-want +got):\n%s", diff)
	}
	for _, i := range []int{0, 1, 3} {
		if !bytes.Equal(dsts[i][:lens[i]], vals[i]) {
			t.Errorf("block %d: bytes differ", i)
		}
	}
	// Delete, then a request of b (reads the posted UNPIN's answer).
	if errs, err := a.Delete(ctx, keys); err != nil || errors.Join(errs...) != nil {
		t.Fatalf("delete: %v %v", err, errs)
	}
	if _, err := b.Stat(ctx); err != nil {
		t.Fatal(err)
	}
	if n := b.PostedRefusals(); n != 0 {
		t.Errorf("posted refusals %d, want 0", n)
	}
	if err := a.Put(ctx, []byte("whole"), make([]byte, chunkSize)); err != nil {
		t.Errorf("a put of the whole chunk after the delete: %v (a pin left behind?)", err)
	}
	if _, _, err := b.GetBatchInto(ctx, keys, dsts[:2]); err == nil {
		t.Error("GetBatchInto with fewer buffers than keys: no error")
	}
}

// TestLocate: a lookup answers the block's place without its bytes, and
// ErrNotFound for a key not stored.
func TestLocate(t *testing.T) {
	r := newRig(t, "tcp")
	a, err := r.dial(t, "tcp", 0, r.tok)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := a.Put(ctx, []byte("k"), make([]byte, 5000)); err != nil {
		t.Fatal(err)
	}
	locs, errs, err := a.Locate(ctx, [][]byte{[]byte("k"), []byte("nope")})
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || locs[0].Length != 5000 {
		t.Errorf("k: %+v, %v; want 5000 bytes", locs[0], errs[0])
	}
	if !errors.Is(errs[1], client.ErrNotFound) {
		t.Errorf("nope: %v, want ErrNotFound", errs[1])
	}
}

// TestReadAhead: a get of a key whose location the client remembers reads
// the block while the GET is on its way and keeps those bytes only when
// the index answers the same block. Another client's delete and put move
// the keys behind b's back; b then answers the new bytes (its read ahead
// read the old place: read again), ErrNotFound for a key gone (never the
// bytes of the key now stored in its space), and reads no further ahead
// for a key it saw go.
func TestReadAhead(t *testing.T) {
	r := newRig(t, "tcp")
	a, b := r.hosts01(t)
	ctx := t.Context()
	keys := [][]byte{[]byte("k0"), []byte("k1"), []byte("k2")}
	fill := func(c byte) [][]byte {
		var vs [][]byte
		for range keys {
			vs = append(vs, bytes.Repeat([]byte{c}, 8<<10))
		}
		return vs
	}
	if errs, err := a.PutBatch(ctx, keys, fill('a')); err != nil || errors.Join(errs...) != nil {
		t.Fatalf("put: %v %v", err, errs)
	}
	dsts := make([][]byte, len(keys))
	for i := range dsts {
		dsts[i] = make([]byte, 16<<10)
	}
	get := func(want []byte, wantErrs ...error) {
		t.Helper()
		clear(dsts[0])
		lens, errs, err := b.GetBatchInto(ctx, keys, dsts)
		if err != nil {
			t.Fatal(err)
		}
		for i := range keys {
			if !errors.Is(errs[i], wantErrs[i]) || (wantErrs[i] == nil) != (errs[i] == nil) {
				t.Errorf("%s: error %v, want %v", keys[i], errs[i], wantErrs[i])
				continue
			}
			if errs[i] == nil && !bytes.Equal(dsts[i][:lens[i]], bytes.Repeat(want[i:i+1], 8<<10)) {
				t.Errorf("%s: %d bytes starting %q, want %q", keys[i], lens[i], dsts[i][:1], want[i:i+1])
			}
		}
	}
	type counts struct{ Kept, Reread int }
	ahead := func() counts {
		k, r := b.ReadAhead()
		return counts{k, r}
	}

	get([]byte("aaa"), nil, nil, nil) // first sight: nothing to read ahead
	if diff := cmp.Diff(counts{0, 0}, ahead()); diff != "" {
		t.Errorf("after the first get (-want +got):\n%s", diff)
	}
	get([]byte("aaa"), nil, nil, nil) // every location remembered and still right
	if diff := cmp.Diff(counts{3, 0}, ahead()); diff != "" {
		t.Errorf("after the second get (-want +got):\n%s", diff)
	}

	// k1 is stored again with other bytes, and k2 is deleted; their
	// places are taken by another key and by k1's new block, so what b
	// remembers of both now holds other keys' bytes. (b's next request
	// carries the UNPIN of its last get, so that the places are free.)
	if _, err := b.Stat(ctx); err != nil {
		t.Fatal(err)
	}
	before, _, err := a.Locate(ctx, keys[1:])
	if err != nil {
		t.Fatal(err)
	}
	if errs, err := a.Delete(ctx, keys[1:]); err != nil || errors.Join(errs...) != nil {
		t.Fatalf("delete: %v %v", err, errs)
	}
	if err := a.Put(ctx, []byte("other"), bytes.Repeat([]byte{'x'}, 8<<10)); err != nil {
		t.Fatal(err)
	}
	if err := a.Put(ctx, keys[1], bytes.Repeat([]byte{'b'}, 8<<10)); err != nil {
		t.Fatal(err)
	}
	after, _, err := a.Locate(ctx, [][]byte{[]byte("other"), keys[1]})
	if err != nil {
		t.Fatal(err)
	}
	offs := func(ls []wire.Loc) []uint64 {
		var o []uint64
		for _, l := range ls {
			o = append(o, l.Offset)
		}
		slices.Sort(o)
		return o
	}
	if diff := cmp.Diff(offs(before), offs(after)); diff != "" {
		t.Fatalf("the new blocks did not take the old ones' places, which this test needs (-old +new):\n%s", diff)
	}
	get([]byte("ab?"), nil, nil, client.ErrNotFound)
	if diff := cmp.Diff(counts{4, 1}, ahead()); diff != "" {
		t.Errorf("after the stale get (-want +got):\n%s", diff)
	}
	get([]byte("ab?"), nil, nil, client.ErrNotFound) // k1's new place remembered, k2 forgotten
	if diff := cmp.Diff(counts{6, 1}, ahead()); diff != "" {
		t.Errorf("after the last get (-want +got):\n%s", diff)
	}

	// A client that remembers nothing never reads ahead.
	c, err := client.Dial(ctx, client.Config{Addr: r.addr, Namespace: "ns", Host: 1, Token: r.tok, Mapper: r.mapper, Locations: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 2 {
		if _, errs, err := c.GetBatchInto(ctx, keys[:2], dsts[:2]); err != nil || errors.Join(errs...) != nil {
			t.Fatalf("get: %v %v", err, errs)
		}
	}
	if k, r := c.ReadAhead(); k+r != 0 {
		t.Errorf("Locations -1: %d kept, %d read again, want none", k, r)
	}
}

// TestUnpinDeferred: the UNPIN of a get's pins goes out with the client's
// next request, or alone soon after when none comes, and never in a
// batch over the server's limit: gets running at once on one client,
// whose pins would not fit one UNPIN, make the older pins go at once.
func TestUnpinDeferred(t *testing.T) {
	r := newRigServer(t, "tcp", kv.ServerConfig{MaxBatch: 3}, nil)
	a, b := r.hosts01(t)
	ctx := t.Context()
	keys := [][]byte{[]byte("k0"), []byte("k1"), []byte("k2")}
	vals := [][]byte{make([]byte, 4096), make([]byte, 4096), make([]byte, 4096)}
	if errs, err := a.PutBatch(ctx, keys, vals); err != nil || errors.Join(errs...) != nil {
		t.Fatalf("put: %v %v", err, errs)
	}
	// Gets of two keys (two pins each; two gets' pins do not fit one
	// UNPIN of at most 3) from 4 goroutines sharing b.
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			dsts := [][]byte{make([]byte, 4096), make([]byte, 4096)}
			for i := range 50 {
				ks := keys[(g+i)%2 : (g+i)%2+2]
				if _, errs, err := b.GetBatchInto(ctx, ks, dsts); err != nil || errors.Join(errs...) != nil {
					t.Errorf("get: %v %v", err, errs)
					return
				}
			}
		})
	}
	wg.Wait()
	// No request of b follows: its pins must still end, so the space of
	// the deleted blocks comes back and a put of the whole chunk fits.
	if errs, err := a.Delete(ctx, keys); err != nil || errors.Join(errs...) != nil {
		t.Fatalf("delete: %v %v", err, errs)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		err := a.Put(ctx, []byte("whole"), make([]byte, chunkSize))
		if err == nil {
			break
		}
		if !errors.Is(err, client.ErrNoSpace) || time.Now().After(deadline) {
			t.Fatalf("a put of the whole chunk after the delete: %v (b's pins never ended?)", err)
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := b.Stat(ctx); err != nil {
		t.Fatal(err)
	}
	if n := b.PostedRefusals(); n != 0 {
		t.Errorf("posted refusals %d, want 0 (an UNPIN refused: over the batch limit?)", n)
	}
}

// TestUnpinAfterUnsendableRequest: a request that cannot be encoded (a key
// over the frame's 64 KiB field) sends nothing, so the UNPIN waiting for
// it still waits: the next request carries it, and nothing waits for an
// answer to an UNPIN never sent.
func TestUnpinAfterUnsendableRequest(t *testing.T) {
	r := newRig(t, "tcp")
	a, b := r.hosts01(t)
	ctx := t.Context()
	if err := a.Put(ctx, []byte("k"), make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	if _, errs, err := b.GetBatchInto(ctx, [][]byte{[]byte("k")}, [][]byte{make([]byte, 4096)}); err != nil || errs[0] != nil {
		t.Fatalf("get: %v %v", err, errs)
	}
	if _, err := b.Exists(ctx, [][]byte{make([]byte, 70000)}); err == nil {
		t.Fatal("a request with a 70000-byte key was sent")
	}
	if _, err := b.Stat(ctx); err != nil {
		t.Fatalf("the request after it: %v", err)
	}
	if errs, err := a.Delete(ctx, [][]byte{[]byte("k")}); err != nil || errs[0] != nil {
		t.Fatalf("delete: %v %v", err, errs)
	}
	if err := a.Put(ctx, []byte("whole"), make([]byte, chunkSize)); err != nil {
		t.Errorf("a put of the whole chunk: %v (b's pin not dropped?)", err)
	}
	if n := b.PostedRefusals(); n != 0 {
		t.Errorf("posted refusals %d, want 0", n)
	}
}

// hosts01 dials the rig over TCP as host 0 and as host 1.
func (r *rig) hosts01(t *testing.T) (a, b *client.Client) {
	t.Helper()
	a, err := r.dial(t, "tcp", 0, r.tok)
	if err != nil {
		t.Fatal(err)
	}
	b, err = r.dial(t, "tcp", 1, r.tok)
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}
