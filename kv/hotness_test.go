package kv_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/kv"
)

// TestHotness: a namespace's summary counts its blocks, bytes and Get
// hits and misses, and lists the blocks the heat source sees hot, hottest
// first, up to the limit; blocks without heat are not listed.
func TestHotness(t *testing.T) {
	clk := &clock{t: time.Unix(1e9, 0)}
	ix := newIndex(t, t.TempDir(), clk, 2)
	defer ix.Close()
	s := open(t, ix)
	blocks := map[string]kv.Block{}
	for _, k := range []string{"cold", "warm", "hot", "hottest"} {
		blocks[k] = put(t, s, k, 4096)
	}
	for _, k := range []string{"hot", "hot", "nothere", "warm"} {
		get(t, s, k)
	}
	// Chunk i+1 starts at DPA (i+1)<<30 (newIndexCfg): a block's DPA is
	// its chunk's base plus its offset.
	dpa := func(b kv.Block) uint64 { return uint64(b.Chunk)<<30 + b.Offset }
	heatBy := map[uint64]float64{dpa(blocks["warm"]): 1, dpa(blocks["hot"]): 5, dpa(blocks["hottest"]): 9}
	heat := func(d, _ uint64) float64 { return heatBy[d] }

	got := ix.Hotness(heat, 2)
	if len(got) != 1 {
		t.Fatalf("%d summaries, want 1", len(got))
	}
	want := kv.Hotness{Namespace: "ns", Blocks: 4, Bytes: got[0].Bytes, Hits: 3, Misses: 1, Top: []kv.HotBlock{
		{Hash: kv.KeyHash([]byte("hottest")), Length: 4096, Heat: 9},
		{Hash: kv.KeyHash([]byte("hot")), Length: 4096, Heat: 5},
	}}
	if diff := cmp.Diff(want, got[0]); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
	if got[0].Bytes < 4*4096 {
		t.Errorf("bytes %d, want at least the four blocks", got[0].Bytes)
	}
	// No heat source: counts only.
	if top := ix.Hotness(nil, 8)[0].Top; len(top) != 0 {
		t.Errorf("top without heat: %v", top)
	}
}
