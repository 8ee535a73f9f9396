package kv

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// EventKind says what happened to a namespace's blocks.
type EventKind uint8

const (
	// EventStored: blocks were committed (visible under their keys).
	EventStored EventKind = iota + 1
	// EventRemoved: blocks were deleted, evicted or shrunk away.
	EventRemoved
	// EventCleared: every block of the namespace is gone (it is being
	// deleted: no session can reach any of them any more).
	EventCleared
)

func (k EventKind) String() string {
	switch k {
	case EventStored:
		return "stored"
	case EventRemoved:
		return "removed"
	case EventCleared:
		return "cleared"
	}
	return "unknown"
}

// Why blocks were removed (Event.Reason).
const (
	ReasonDelete = "delete" // a client deleted them
	ReasonEvict  = "evict"  // a put needed room
	ReasonShrink = "shrink" // their chunk left the namespace (Resize)
	// ReasonResync: the whole state, Cleared then Stored of what each
	// namespace holds, at open, on Resync and after dropped events.
	ReasonResync = "resync"
)

// Event is one change of a namespace's blocks, after its log record is
// durable. Blocks are in the order of the change (a commit batch's order,
// an eviction's victim order).
type Event struct {
	Kind      EventKind
	Namespace string
	Reason    string // for Removed; ReasonResync for a resync's Cleared and Stored
	// Parent is, for Stored, the block hash the first block continues (as
	// its client told it: kv.Seq); nil for a sequence's first block or
	// blocks whose clients did not say. A Stored event is one chain: each
	// further block continues the one before it (a client's parent equals
	// the previous block's Hash), or, when no client told anything, the
	// blocks of one change in order, parent nil, as before clients could.
	Parent *uint64
	Blocks []EventBlock
}

// EventBlock is one block of an Event.
type EventBlock struct {
	Key    []byte
	Length uint64 // bytes
	// Hash is the key as the 64-bit block hash a KV-aware router uses
	// (KeyHash).
	Hash uint64
	// Tokens is the tokens the block holds, as its client told it (0:
	// not told).
	Tokens uint32
}

// KeyHash is a key as a router's 64-bit block hash: an 8-byte key is the
// hash itself (big-endian: how a client that keys blocks by a u64
// sequence hash writes it); any other key is the first 8 bytes of its
// SHA-256, big-endian, so the mapping is stable across boxes and
// restarts and a router can compute it from the key alone.
func KeyHash(key []byte) uint64 {
	if len(key) == 8 {
		return binary.BigEndian.Uint64(key)
	}
	s := sha256.Sum256(key)
	return binary.BigEndian.Uint64(s[:8])
}

// EventSink receives the index's events one at a time, in order, on the
// index's dispatch goroutine (never under the index's lock). ctx ends
// when the index closes: a sink that publishes over a network gives up.
type EventSink func(ctx context.Context, e Event)

// DefaultEventQueue is how many events wait for a slow sink before the
// index drops new ones (and counts them: Index.EventsDropped).
const DefaultEventQueue = 4096

// events queues the index's events for the sink. emit never blocks: a
// full queue drops the event.
type events struct {
	sink    EventSink
	ch      chan Event
	dropped atomic.Uint64
	// queued counts events put in ch, sunk those the sink returned from;
	// progress is closed (and replaced) at each sink return, so FlushEvents
	// waits without polling.
	queued, sunk atomic.Uint64
	pmu          sync.Mutex
	progress     chan struct{}
	// lost says events were dropped since the last resync: once the
	// queue is empty again the dispatcher resyncs (Index.Resync), so a
	// router that missed changes learns the whole state.
	lost   atomic.Bool
	resync func()
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func newEvents(sink EventSink, queue int, resync func()) *events {
	if sink == nil {
		return nil
	}
	if queue <= 0 {
		queue = DefaultEventQueue
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &events{sink: sink, ch: make(chan Event, queue), ctx: ctx, cancel: cancel, done: make(chan struct{}), resync: resync,
		progress: make(chan struct{})}
	go e.run()
	return e
}

func (e *events) run() {
	defer close(e.done)
	for ev := range e.ch {
		e.sink(e.ctx, ev)
		e.sunk.Add(1)
		e.pmu.Lock()
		close(e.progress)
		e.progress = make(chan struct{})
		e.pmu.Unlock()
		if len(e.ch) == 0 && e.lost.Swap(false) && e.ctx.Err() == nil {
			e.resync() // emits into e.ch: the loop goes on with them
		}
	}
}

// emit queues ev; the caller holds ix.mu (which orders the events) and
// the index is not closed (close happens under ix.mu too).
func (e *events) emit(ev Event) {
	if e == nil {
		return
	}
	select {
	case e.ch <- ev:
		e.queued.Add(1)
	default:
		e.dropped.Add(1)
		e.lost.Store(true)
	}
}

// FlushWait is how long Close lets the sink deliver what is queued (with
// its context live: a network sink still publishes) before it cancels it.
const FlushWait = 5 * time.Second

// stop ends the queue (under ix.mu, after closed is set: no emit
// follows); wait then lets the sink deliver what is queued, its context
// live for up to FlushWait (the last changes before a clean stop reach
// the router), then cancelled so a sink stuck on a network gives up.
func (e *events) stop() {
	if e != nil {
		e.once.Do(func() { close(e.ch) })
	}
}

func (e *events) wait() {
	if e == nil {
		return
	}
	t := time.AfterFunc(FlushWait, e.cancel)
	<-e.done
	t.Stop()
	e.cancel()
}

// FlushEvents returns once the sink has returned from every event queued
// before the call (dropped ones aside), or with ctx's error, or once the
// index has closed (Close delivers what is queued).
func (ix *Index) FlushEvents(ctx context.Context) error {
	e := ix.ev
	if e == nil {
		return nil
	}
	target := e.queued.Load()
	for {
		e.pmu.Lock()
		progress := e.progress
		e.pmu.Unlock()
		if e.sunk.Load() >= target {
			return nil
		}
		select {
		case <-progress:
		case <-e.done:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("kv: flushing events: %d of %d delivered: %w", e.sunk.Load(), target, ctx.Err())
		}
	}
}

// EventsDropped is how many events a full queue dropped since open. A
// router following them missed changes: once the queue has drained, the
// index sends Cleared and Stored of every namespace again (Resync).
func (ix *Index) EventsDropped() uint64 {
	if ix.ev == nil {
		return 0
	}
	return ix.ev.dropped.Load()
}

func eventBlocks(bs []*block) []EventBlock {
	out := make([]EventBlock, len(bs))
	for i, b := range bs {
		out[i] = EventBlock{Key: []byte(b.key), Length: b.length, Hash: KeyHash([]byte(b.key)), Tokens: b.seq.Tokens}
	}
	return out
}

// storedEvents is the Stored events of bs, in order: one per chain (see
// Event.Parent), each of at most max blocks (a longer chain goes on in
// the next event, whose parent is the last block before it).
func storedEvents(ns string, reason string, bs []*block, max int) []Event {
	var out []Event
	for i := 0; i < len(bs); {
		j := i + 1
		for j < len(bs) && j-i < max && continues(bs[j-1], bs[j]) {
			j++
		}
		e := Event{Kind: EventStored, Namespace: ns, Reason: reason, Blocks: eventBlocks(bs[i:j])}
		if q := bs[i].seq; q.HasParent {
			p := q.Parent
			e.Parent = &p
		}
		out = append(out, e)
		i = j
	}
	return out
}

// continues reports whether b goes in prev's Stored event: it continues
// prev's chain, or neither says anything of a chain.
func continues(prev, b *block) bool {
	if b.seq.HasParent {
		return b.seq.Parent == KeyHash([]byte(prev.key))
	}
	return !b.seq.told() && !prev.seq.told()
}

// emitLocked sends a Stored or Removed event of bs (none if empty); a
// Stored one per chain.
func (ix *Index) emitLocked(kind EventKind, ns *nsState, reason string, bs []*block) {
	if ix.ev == nil || len(bs) == 0 || ix.closed {
		return
	}
	if kind == EventStored {
		for _, e := range storedEvents(ns.name, reason, bs, len(bs)) {
			ix.ev.emit(e)
		}
		return
	}
	ix.ev.emit(Event{Kind: kind, Namespace: ns.name, Reason: reason, Blocks: eventBlocks(bs)})
}

// Resync sends, for every namespace, Cleared and then Stored of the
// blocks it holds now (a sink that starts forwarding late, e.g. when the
// fleet plane comes up, tells its router the whole state).
func (ix *Index) Resync() { ix.emitState() }

// emitState sends, for every namespace, Cleared and then Stored of what
// it holds (at open: a router that followed the box before its restart
// learns what is there now).
func (ix *Index) emitState() {
	if ix.ev == nil {
		return
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.closed {
		return
	}
	names := make([]string, 0, len(ix.ns))
	for n := range ix.ns {
		names = append(names, n)
	}
	slices.Sort(names)
	var all []Event
	for _, n := range names {
		ns := ix.ns[n]
		all = append(all, Event{Kind: EventCleared, Namespace: n, Reason: ReasonResync})
		ids := make([]uint64, 0, len(ns.keys))
		for _, b := range ns.keys {
			ids = append(ids, b.id)
		}
		slices.Sort(ids) // commit order: a chain's blocks follow each other
		bs := make([]*block, len(ids))
		for i, id := range ids {
			bs[i] = ns.blocks[id]
		}
		all = append(all, storedEvents(n, ReasonResync, bs, startBatch)...)
		if len(all) > cap(ix.ev.ch)-len(ix.ev.ch) {
			break
		}
	}
	if len(all) > cap(ix.ev.ch)-len(ix.ev.ch) {
		// Half a state would mislead a router more than none: try again
		// once the queue has drained.
		ix.ev.lost.Store(true)
		return
	}
	for _, e := range all {
		ix.ev.emit(e)
	}
}

// startBatch is how many blocks one Stored event at open carries.
const startBatch = 256
