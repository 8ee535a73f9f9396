package sqlite

import (
	"context"
	"errors"
	"testing"
	"time"

	"cxlpool/dcd"
	"cxlpool/dcd/ledgertest"
	"cxlpool/fabric/cci"
)

// TestReadFence: a read waits for every outcome ticket taken before it
// began, however the tickets come back, and for none taken after; a read
// whose caller gives up returns its context's error.
func TestReadFence(t *testing.T) {
	for _, tc := range []struct {
		name string
		put  []uint64 // of tickets 1..3, returned in this order before the last
		last uint64
	}{
		{"in order", []uint64{1, 2}, 3},
		{"last first", []uint64{3, 2}, 1},
		{"middle last", []uint64{3, 1}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f readFence
			for range 3 {
				f.take()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			waited := make(chan error, 1)
			go func() { waited <- f.wait(ctx, time.Minute) }()
			waitForWaiter(t, &f)
			// Taken after the read began: it must not hold the read.
			later := f.take()
			for _, tk := range tc.put {
				f.put(tk)
			}
			f.mu.Lock()
			through := f.through
			f.mu.Unlock()
			if through >= 3 {
				t.Fatalf("through = %d before ticket %d came back", through, tc.last)
			}
			f.put(tc.last)
			if err := <-waited; err != nil {
				t.Fatalf("wait: %v", err)
			}
			f.put(later)
			if got, want := f.through, uint64(4); got != want {
				t.Errorf("through = %d, want %d", got, want)
			}
			if len(f.early) != 0 {
				t.Errorf("tickets left out of order: %v", f.early)
			}
		})
	}
	t.Run("caller gives up", func(t *testing.T) {
		var f readFence
		f.take()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := f.wait(ctx, time.Minute); !errors.Is(err, context.Canceled) {
			t.Errorf("wait with a cancelled context: %v, want context.Canceled", err)
		}
	})
	t.Run("outcome never commits", func(t *testing.T) {
		var f readFence
		f.take()
		if err := f.wait(context.Background(), time.Millisecond); !errors.Is(err, errFenceTimeout) {
			t.Errorf("wait past its bound: %v, want errFenceTimeout", err)
		}
	})
}

// waitForWaiter polls (bounded) until a read waits on f.
func waitForWaiter(t *testing.T, f *readFence) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.mu.Lock()
		waiting := f.moved != nil
		f.mu.Unlock()
		if waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no read waits on the fence")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCompleteGrantQueued: queued is called while the outcome still waits
// for the writer, with the time the ledger then records; a write queued
// after that call runs after the outcome (a release begun at once finds the
// grant granted), and a read begun after it sees it.
func TestCompleteGrantQueued(t *testing.T) {
	l, in := openAdding(t, 5)
	exts := []cci.Extent{{DPA: 0, Length: ledgertest.Block, Tag: in.Chunk.Tag}}

	release, held := holdWriter(t, l)
	told := make(chan time.Time, 1)
	completed := make(chan dcd.Grant, 1)
	go func() {
		g, err := l.CompleteGrantQueued(context.Background(), in.ID, exts, func(at time.Time) { told <- at })
		if err != nil {
			t.Error(err)
		}
		completed <- g
	}()
	at := <-told // the writer is still held: nothing of it committed
	if st := grantStateRaw(t, l, in.ID); st != string(dcd.GrantAdding) {
		t.Fatalf("state when told: %s, want adding (not yet committed)", st)
	}
	type result struct {
		g   dcd.Grant
		err error
	}
	began, read := make(chan result, 1), make(chan result, 1)
	go func() {
		g, err := l.BeginRelease(context.Background(), in.ID)
		began <- result{g, err}
	}()
	go func() {
		g, err := l.Grant(context.Background(), in.ID)
		read <- result{g, err}
	}()
	waitQueued(t, l, 2) // the outcome, then the release
	release()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	g := <-completed
	if !g.Updated.Equal(at) || g.State != dcd.GrantGranted {
		t.Errorf("outcome: %s updated %v, want granted updated %v (the time told)", g.State, g.Updated, at)
	}
	if r := <-began; r.err != nil || r.g.State != dcd.GrantReleasing {
		t.Errorf("BeginRelease queued after the outcome: %s, %v; want releasing", r.g.State, r.err)
	}
	if r := <-read; r.err != nil || r.g.State == dcd.GrantAdding {
		t.Errorf("read begun after the outcome was told: %s, %v; want it past adding", r.g.State, r.err)
	}
}

// grantStateRaw reads a grant's committed state on a reader connection,
// past the fence.
func grantStateRaw(t *testing.T, l *Ledger, id dcd.GrantID) string {
	t.Helper()
	var st string
	if err := l.rdb.QueryRowContext(t.Context(), `SELECT state FROM grants WHERE id = ?`, id).Scan(&st); err != nil {
		t.Fatal(err)
	}
	return st
}
