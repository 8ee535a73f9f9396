package client_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/kv/client"
)

// TestGetBatchInto: the blocks land in the caller's buffers with their
// lengths; a missing key and a buffer too small fail alone; the posted
// UNPINs leave no pin behind (the space of deleted blocks is reusable at
// once: a put of the whole chunk fits).
func TestGetBatchInto(t *testing.T) {
	r := newRig(t, "tcp")
	a, err := r.dial(t, "tcp", 0, r.tok)
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.dial(t, "tcp", 1, r.tok)
	if err != nil {
		t.Fatal(err)
	}
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
