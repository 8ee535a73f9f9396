package sqlite

import (
	"context"
	"errors"
	"sync"
	"time"
)

// readFence keeps reads behind outcomes whose callers were answered before
// the outcome committed (CompleteGrantQueued): a grant's caller is told
// "granted" once its outcome is queued for the writer, and whatever anyone
// reads after that must show it. Writes need no fence (the writer's queue
// is in order); reads run on their own connections and would otherwise see
// the grant still adding for the ~0.2 ms its outcome takes to commit.
//
// Each queued outcome takes a ticket when it is queued and returns it once
// its transaction has committed or failed; a read waits for every ticket
// taken before it began. A read with no outcome in flight takes one lock.
type readFence struct {
	mu      sync.Mutex
	issued  uint64          // tickets taken
	through uint64          // every ticket ≤ through is returned
	early   map[uint64]bool // returned out of order, above through
	moved   chan struct{}   // closed (and replaced) when through advances
}

// take returns a ticket for an outcome about to be answered.
func (f *readFence) take() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.issued++
	return f.issued
}

// put returns ticket t: its outcome is committed, or will never be.
func (f *readFence) put(t uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t != f.through+1 {
		if f.early == nil {
			f.early = make(map[uint64]bool)
		}
		f.early[t] = true
		return
	}
	f.through = t
	for f.early[f.through+1] {
		delete(f.early, f.through+1)
		f.through++
	}
	if f.moved != nil {
		close(f.moved)
		f.moved = nil
	}
}

// errFenceTimeout: outcomes told before a read did not commit within the
// fence's bound; the read goes ahead without them.
var errFenceTimeout = errors.New("outcomes already told are not committed yet")

// wait returns once every ticket taken before it was called is returned,
// when ctx ends, or after bound with errFenceTimeout: a writer stalled on the
// disk must not stall every read with it (what the read then shows, the
// grant still adding, is what a crash would have left).
func (f *readFence) wait(ctx context.Context, bound time.Duration) error {
	f.mu.Lock()
	target := f.issued
	var expired <-chan time.Time
	for f.through < target {
		if f.moved == nil {
			f.moved = make(chan struct{})
		}
		moved := f.moved
		f.mu.Unlock()
		if expired == nil {
			t := time.NewTimer(bound)
			defer t.Stop()
			expired = t.C
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return ctx.Err()
		case <-expired:
			return errFenceTimeout
		}
		f.mu.Lock()
	}
	f.mu.Unlock()
	return nil
}
