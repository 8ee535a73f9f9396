package kv_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/dcd"
	"cxlpool/kv"
)

// evRecorder is an EventSink that keeps what it is given.
type evRecorder struct {
	mu  sync.Mutex
	got []kv.Event
}

func (r *evRecorder) sink(_ context.Context, e kv.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, e)
}

func (r *evRecorder) events() []kv.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]kv.Event(nil), r.got...)
}

func evBlocks(n uint64, keys ...string) []kv.EventBlock {
	var out []kv.EventBlock
	for _, k := range keys {
		out = append(out, kv.EventBlock{Key: []byte(k), Length: n, Hash: kv.KeyHash([]byte(k))})
	}
	return out
}

// TestEvents: every change of a namespace's blocks is one event, in the
// order of the changes, after it is durable: a commit batch is one
// Stored, a delete, an eviction and a shrink one Removed each (with
// why), the namespace's delete one Cleared (and no Removed for the
// chunks it drains after).
func TestEvents(t *testing.T) {
	rec := &evRecorder{}
	clk := &clock{}
	ix := newIndexCfg(t, kv.IndexConfig{Dir: t.TempDir(), Clock: clk.now, Events: rec.sink}, 2)
	s := open(t, ix)
	ctx := context.Background()

	// One batch of two whole-chunk blocks: a in chunk 1, b in chunk 2.
	res, err := s.Put(ctx, []kv.PutItem{{Key: []byte("a"), Length: chunk}, {Key: []byte("b"), Length: chunk}})
	if err != nil || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("put: %v %v", err, res)
	}
	if errs, err := s.Commit([]uint64{res[0].Block.ID, res[1].Block.ID}); err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("commit: %v %v", err, errs)
	}
	if errs, err := s.Delete([][]byte{[]byte("a")}); err != nil || errs[0] != nil {
		t.Fatalf("delete: %v %v", err, errs)
	}
	c := put(t, s, "c", chunk) // where a was
	put(t, s, "d", chunk)      // full: b, the least recent, goes
	if err := ix.DrainChunk("ns", dcd.ChunkID(c.Chunk)); err != nil {
		t.Fatalf("drain: %v", err)
	}
	if err := ix.RemoveChunk("ns", dcd.ChunkID(c.Chunk)); err != nil {
		t.Fatal(err)
	}
	if err := ix.BeginDelete("ns"); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []dcd.ChunkID{1, 2} {
		if ch == dcd.ChunkID(c.Chunk) {
			continue
		}
		if err := ix.DrainChunk("ns", ch); err != nil {
			t.Fatal(err)
		}
		if err := ix.RemoveChunk("ns", ch); err != nil {
			t.Fatal(err)
		}
	}
	if err := ix.DeleteNamespace("ns"); err != nil {
		t.Fatal(err)
	}
	if err := ix.Close(); err != nil { // Close delivers what is queued
		t.Fatal(err)
	}
	want := []kv.Event{
		{Kind: kv.EventStored, Namespace: "ns", Blocks: evBlocks(chunk, "a", "b")},
		{Kind: kv.EventRemoved, Namespace: "ns", Reason: kv.ReasonDelete, Blocks: evBlocks(chunk, "a")},
		{Kind: kv.EventStored, Namespace: "ns", Blocks: evBlocks(chunk, "c")},
		{Kind: kv.EventRemoved, Namespace: "ns", Reason: kv.ReasonEvict, Blocks: evBlocks(chunk, "b")},
		{Kind: kv.EventStored, Namespace: "ns", Blocks: evBlocks(chunk, "d")},
		{Kind: kv.EventRemoved, Namespace: "ns", Reason: kv.ReasonShrink, Blocks: evBlocks(chunk, "c")},
		{Kind: kv.EventCleared, Namespace: "ns"},
	}
	if diff := cmp.Diff(want, rec.events()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if got := ix.EventsDropped(); got != 0 {
		t.Errorf("dropped %d events", got)
	}
}

// TestEventsAtOpen: a reopened index tells a router what it holds:
// Cleared, then Stored of its committed blocks (nothing uncommitted).
func TestEventsAtOpen(t *testing.T) {
	dir, clk := t.TempDir(), &clock{}
	ix := newIndex(t, dir, clk, 1)
	s := open(t, ix)
	put(t, s, "x", 4096)
	put(t, s, "y", 4096)
	if _, err := s.Put(context.Background(), []kv.PutItem{{Key: []byte("uncommitted"), Length: 4096}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	rec := &evRecorder{}
	ix, err := kv.OpenIndex(kv.IndexConfig{Dir: dir, Clock: clk.now, Events: rec.sink})
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	want := []kv.Event{
		{Kind: kv.EventCleared, Namespace: "ns", Reason: kv.ReasonResync},
		{Kind: kv.EventStored, Namespace: "ns", Reason: kv.ReasonResync, Blocks: evBlocks(4096, "x", "y")},
	}
	if diff := cmp.Diff(want, rec.events()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestEventsSlowSink: a sink that does not keep up never holds up the
// index: events past the queue are dropped and counted.
func TestEventsSlowSink(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	delivered := 0
	sink := func(_ context.Context, _ kv.Event) {
		<-release
		mu.Lock()
		delivered++
		mu.Unlock()
	}
	clk := &clock{}
	ix := newIndexCfg(t, kv.IndexConfig{Dir: t.TempDir(), Clock: clk.now, Events: sink, EventQueue: 1}, 1)
	s := open(t, ix)
	const n = 5
	for i := range n {
		put(t, s, string(rune('a'+i)), 4096) // returns with the sink stuck
	}
	close(release)
	s.Close()
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	dropped := ix.EventsDropped()
	if dropped == 0 || delivered+int(dropped) != n {
		t.Errorf("delivered %d, dropped %d; want some dropped and %d in all", delivered, dropped, n)
	}
}

// TestEventsResyncAfterDrops: once a slow sink has drained the queue
// after drops, the index sends the whole state again (Cleared, then
// Stored of every block), so a router that missed changes catches up.
func TestEventsResyncAfterDrops(t *testing.T) {
	release := make(chan struct{})
	rec := &evRecorder{}
	sink := func(ctx context.Context, e kv.Event) {
		<-release
		rec.sink(ctx, e)
	}
	ix := newIndexCfg(t, kv.IndexConfig{Dir: t.TempDir(), Clock: (&clock{}).now, Events: sink, EventQueue: 4}, 1)
	defer ix.Close()
	s := open(t, ix)
	keys := []string{"a", "b", "c", "d", "e", "f"}
	for _, k := range keys {
		put(t, s, k, 4096) // one in the sink, four queued, the rest dropped
	}
	if ix.EventsDropped() == 0 {
		t.Fatal("nothing dropped")
	}
	close(release)
	want := []kv.Event{
		{Kind: kv.EventCleared, Namespace: "ns", Reason: kv.ReasonResync},
		{Kind: kv.EventStored, Namespace: "ns", Reason: kv.ReasonResync, Blocks: evBlocks(4096, keys...)},
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := rec.events()
		if len(got) >= 2 && cmp.Equal(want, got[len(got)-2:]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no resync; events: %+v", got)
		}
		time.Sleep(5 * time.Millisecond) // poll interval
	}
}

// TestEventsCarrySequence: what a client tells of a block's sequence
// (parent hash, token count) comes back in its Stored event, one event
// per chain, and again from the log after a restart (and after the
// restart's compaction, a second time).
func TestEventsCarrySequence(t *testing.T) {
	dir := t.TempDir()
	rec := &evRecorder{}
	clk := &clock{}
	ix := newIndexCfg(t, kv.IndexConfig{Dir: dir, Clock: clk.now, Events: rec.sink}, 1)
	s := open(t, ix)
	ctx := context.Background()
	ha := kv.KeyHash([]byte("a"))
	items := []kv.PutItem{
		{Key: []byte("a"), Length: 4096, Seq: kv.Seq{Tokens: 256}},                              // a chain's root
		{Key: []byte("b"), Length: 4096, Seq: kv.Seq{HasParent: true, Parent: ha, Tokens: 256}}, // continues a
		{Key: []byte("c"), Length: 4096, Seq: kv.Seq{HasParent: true, Parent: 999, Tokens: 16}}, // another chain
		{Key: []byte("d"), Length: 4096},                                                        // not told
		{Key: []byte("e"), Length: 4096},                                                        // not told either: with d
	}
	res, err := s.Put(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]uint64, len(res))
	for i, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		ids[i] = r.Block.ID
	}
	if errs, err := s.Commit(ids); err != nil || slices.ContainsFunc(errs, func(e error) bool { return e != nil }) {
		t.Fatalf("commit: %v %v", err, errs)
	}
	s.Close()
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	blk := func(k string, tokens uint32) kv.EventBlock {
		return kv.EventBlock{Key: []byte(k), Length: 4096, Hash: kv.KeyHash([]byte(k)), Tokens: tokens}
	}
	p999 := uint64(999)
	stored := func(reason string) []kv.Event {
		return []kv.Event{
			{Kind: kv.EventStored, Namespace: "ns", Reason: reason, Blocks: []kv.EventBlock{blk("a", 256), blk("b", 256)}},
			{Kind: kv.EventStored, Namespace: "ns", Reason: reason, Parent: &p999, Blocks: []kv.EventBlock{blk("c", 16)}},
			{Kind: kv.EventStored, Namespace: "ns", Reason: reason, Blocks: []kv.EventBlock{blk("d", 0), blk("e", 0)}},
		}
	}
	if diff := cmp.Diff(stored(""), rec.events()); diff != "" {
		t.Errorf("commit's events (-want +got):\n%s", diff)
	}
	for restart := range 2 { // the second replays the first's compacted log
		rec := &evRecorder{}
		ix, err := kv.OpenIndex(kv.IndexConfig{Dir: dir, Clock: clk.now, Events: rec.sink})
		if err != nil {
			t.Fatal(err)
		}
		if err := ix.Close(); err != nil {
			t.Fatal(err)
		}
		want := append([]kv.Event{{Kind: kv.EventCleared, Namespace: "ns", Reason: kv.ReasonResync}}, stored(kv.ReasonResync)...)
		if diff := cmp.Diff(want, rec.events()); diff != "" {
			t.Errorf("restart %d: events (-want +got):\n%s", restart, diff)
		}
	}
}

// TestEventsDeliveredAtClose: the last changes before a clean stop reach
// a sink that gives up once its context ends (a network publisher): Close
// lets it deliver what is queued with its context live. FlushEvents
// returns once everything queued before it was delivered.
func TestEventsDeliveredAtClose(t *testing.T) {
	release := make(chan struct{})
	rec := &evRecorder{}
	first := true
	sink := func(ctx context.Context, e kv.Event) {
		if first { // hold the queue until the test has queued the rest
			first = false
			<-release
		}
		if ctx.Err() != nil {
			return // a publisher whose context ended publishes nothing
		}
		rec.sink(ctx, e)
	}
	ix := newIndexCfg(t, kv.IndexConfig{Dir: t.TempDir(), Clock: (&clock{}).now, Events: sink}, 1)
	s := open(t, ix)
	keys := []string{"a", "b", "c", "d"}
	for _, k := range keys {
		put(t, s, k, 4096) // a in the sink, the rest queued
	}
	fctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	if err := ix.FlushEvents(fctx); err == nil {
		t.Error("FlushEvents returned while the sink held the queue")
	}
	cancel()
	close(release)
	if err := ix.FlushEvents(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := len(rec.events()); got != len(keys) {
		t.Fatalf("after FlushEvents the sink has %d events, want %d", got, len(keys))
	}
	// Queue more behind a held sink, then close: Close delivers them.
	hold := make(chan struct{})
	first = true
	release = hold
	for _, k := range []string{"e", "f", "g"} {
		put(t, s, k, 4096)
	}
	s.Close()
	closed := make(chan error, 1)
	go func() { closed <- ix.Close() }()
	close(hold)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	var want []kv.Event
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		want = append(want, kv.Event{Kind: kv.EventStored, Namespace: "ns", Blocks: evBlocks(4096, k)})
	}
	if diff := cmp.Diff(want, rec.events()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestLoseChunks: a chunk whose capacity is gone leaves the namespace with
// its blocks (a pinned one and a reservation too), durably: Removed
// (reason lost) while other chunks hold blocks, Cleared once nothing is
// left; the space adds up, an old location checks stale, and a restart
// does not bring them back.
func TestLoseChunks(t *testing.T) {
	dir := t.TempDir()
	rec := &evRecorder{}
	ix := newIndexCfg(t, kv.IndexConfig{Dir: dir, Clock: (&clock{}).now, Events: rec.sink}, 2)
	s := open(t, ix)
	a := put(t, s, "a", chunk) // fills chunk 1
	b := put(t, s, "b", 4096)  // chunk 2
	if res, err := s.Get([][]byte{[]byte("a")}, true); err != nil || res[0].Err != nil {
		t.Fatalf("pin a: %v %+v", err, res)
	}
	if res, err := s.Put(context.Background(), []kv.PutItem{{Key: []byte("r"), Length: 4096}}); err != nil || res[0].Err != nil {
		t.Fatalf("reserve r: %v %+v", err, res)
	}
	if n, err := ix.LoseChunks("ns", []dcd.ChunkID{a.Chunk}); err != nil || n != 1 {
		t.Fatalf("LoseChunks(a's chunk) = %d, %v; want 1 block", n, err)
	}
	if err := ix.Verify(); err != nil {
		t.Error(err)
	}
	if errs, err := s.Check([]kv.BlockGen{{ID: a.ID, Gen: a.Gen}}); err != nil || !errors.Is(errs[0], kv.ErrStale) {
		t.Errorf("check of a lost block: %v %v, want stale", errs, err)
	}
	if n, err := ix.LoseChunks("ns", []dcd.ChunkID{b.Chunk}); err != nil || n != 1 {
		t.Fatalf("LoseChunks(b's chunk) = %d, %v; want 1 block", n, err)
	}
	s.Close()
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	want := []kv.Event{
		{Kind: kv.EventStored, Namespace: "ns", Blocks: evBlocks(chunk, "a")},
		{Kind: kv.EventStored, Namespace: "ns", Blocks: evBlocks(4096, "b")},
		{Kind: kv.EventRemoved, Namespace: "ns", Reason: kv.ReasonLost, Blocks: evBlocks(chunk, "a")},
		{Kind: kv.EventCleared, Namespace: "ns", Reason: kv.ReasonLost},
	}
	if diff := cmp.Diff(want, rec.events()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	ix, err := kv.OpenIndex(kv.IndexConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	ns, err := ix.Namespace("ns")
	if err != nil {
		t.Fatal(err)
	}
	if ns.Stats.Blocks != 0 || len(ns.Chunks) != 0 {
		t.Errorf("after a restart: %d blocks in %d chunks, want none", ns.Stats.Blocks, len(ns.Chunks))
	}
}
