package sqlite

import (
	"errors"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/dcd"
	"cxlpool/dcd/ledgertest"
	"cxlpool/fabric/cci"
)

// groupLedger is a Ledger with only what makeDurable uses, its fsync
// replaced by fsync.
func groupLedger(fsync func() error) *Ledger {
	l := &Ledger{durable: true, syncFn: fsync}
	l.group.done = sync.NewCond(&l.group.mu)
	return l
}

// TestGroupCommit: commits made while an fsync runs share the next one,
// and none returns before an fsync that began after its commit ended.
func TestGroupCommit(t *testing.T) {
	began := make(chan uint64) // the commit count each fsync saw at its start
	release := make(chan error)
	var l *Ledger
	l = groupLedger(func() error {
		began <- l.commits.Load()
		return <-release
	})
	done := make(chan uint64, 8)
	wait := func(seq uint64) {
		go func() {
			if err := l.makeDurable(seq); err != nil {
				t.Errorf("makeDurable(%d): %v", seq, err)
			}
			done <- seq
		}()
	}
	wait(l.commits.Add(1))
	if got := <-began; got != 1 {
		t.Fatalf("first fsync began at commit %d, want 1", got)
	}
	// Three commits while the first fsync runs: it cannot cover them.
	for range 3 {
		wait(l.commits.Add(1))
	}
	release <- nil
	if got := <-done; got != 1 {
		t.Fatalf("first to return: commit %d, want 1", got)
	}
	if got := <-began; got != 4 {
		t.Fatalf("second fsync began at commit %d, want 4 (one fsync for the three waiting)", got)
	}
	select {
	case seq := <-done:
		t.Fatalf("commit %d returned before the fsync that covers it ended", seq)
	default:
	}
	release <- nil
	got := map[uint64]bool{}
	for range 3 {
		got[<-done] = true
	}
	if len(got) != 3 || !got[2] || !got[3] || !got[4] {
		t.Errorf("returned after the second fsync: %v, want commits 2, 3 and 4", got)
	}
	// Covered already: no fsync at all.
	if err := l.makeDurable(4); err != nil {
		t.Errorf("makeDurable of a synced commit: %v", err)
	}
}

// TestGroupCommitFailure: a failed fsync makes nothing durable; its
// leader reports the error and a waiter syncs again itself.
func TestGroupCommitFailure(t *testing.T) {
	began := make(chan uint64)
	release := make(chan error)
	var l *Ledger
	l = groupLedger(func() error {
		began <- l.commits.Load()
		return <-release
	})
	first := make(chan error, 1)
	second := make(chan error, 1)
	s1 := l.commits.Add(1)
	go func() { first <- l.makeDurable(s1) }()
	<-began
	s2 := l.commits.Add(1)
	go func() { second <- l.makeDurable(s2) }()
	eio := errors.New("EIO")
	release <- eio
	if err := <-first; !errors.Is(err, eio) {
		t.Fatalf("leader of the failed fsync: got %v, want %v", err, eio)
	}
	if got := <-began; got != 2 {
		t.Fatalf("retry fsync began at commit %d, want 2", got)
	}
	release <- nil
	if err := <-second; err != nil {
		t.Errorf("waiter after a failed fsync: %v", err)
	}
	if got, want := l.group.synced, uint64(2); got != want {
		t.Errorf("synced = %d, want %d", got, want)
	}
}

// TestBeginGrantStaged: the intent is committed (every later transaction,
// reads included, sees it) when BeginGrantStaged returns, so the outcome
// can be recorded before durable is called.
func TestBeginGrantStaged(t *testing.T) {
	ctx := t.Context()
	l, err := Open(ctx, filepath.Join(t.TempDir(), "ledger.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := l.SyncInventory(ctx, ledgertest.Inventory()); err != nil {
		t.Fatal(err)
	}
	c, err := l.CreateChunk(ctx, dcd.Chunk{Region: 0, Size: ledgertest.Block})
	if err != nil {
		t.Fatal(err)
	}
	var heard []dcd.GrantID
	in, durable, err := l.BeginGrantStaged(ctx, c.ID, 1, func(in dcd.GrantIntent) { heard = append(heard, in.ID) })
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]dcd.GrantID{in.ID}, heard); diff != "" {
		t.Errorf("checked calls (-want +got):\n%s", diff)
	}
	g, err := l.Grant(ctx, in.ID)
	if err != nil || g.State != dcd.GrantAdding {
		t.Fatalf("Grant before durable: %+v, %v; want adding", g, err)
	}
	ext := []cci.Extent{{DPA: c.Extents[0].DPA, Length: c.Size, Tag: c.Tag}}
	if _, err := l.CompleteGrant(ctx, in.ID, ext); err != nil {
		t.Fatalf("CompleteGrant before durable: %v", err)
	}
	if err := durable(); err != nil {
		t.Fatalf("durable: %v", err)
	}
	if g, err := l.Grant(ctx, in.ID); err != nil || g.State != dcd.GrantGranted {
		t.Errorf("Grant after durable: %+v, %v; want granted", g, err)
	}
}

// TestFsyncWaitsForQueuedDurableWrite: an fsync about to start waits for
// a durable write already queued for the writer, so one fsync covers both
// commits and the queued write returns without one of its own.
func TestFsyncWaitsForQueuedDurableWrite(t *testing.T) {
	l, err := Open(t.Context(), filepath.Join(t.TempDir(), "ledger.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	l.queued.wait = time.Minute // only a hang reaches it
	var mu sync.Mutex
	var syncs []uint64 // the commit count each fsync saw at its start
	l.syncFn = func() error {
		mu.Lock()
		syncs = append(syncs, l.commits.Load())
		mu.Unlock()
		return nil
	}
	ctx := t.Context()
	beat := func(tx *Tx) error { _, err := tx.ExecContext(ctx, qHeartbeat, "t"); return err }
	// A: a commit made, not yet durable.
	if err := l.relaxedTx(ctx, beat); err != nil {
		t.Fatal(err)
	}
	seqA := l.commits.Load()
	// B: a durable write queued and running, not committed yet.
	inB, goB := make(chan struct{}), make(chan struct{})
	doneB := make(chan error, 1)
	go func() {
		doneB <- l.tx(ctx, func(tx *Tx) error { close(inB); <-goB; return beat(tx) })
	}()
	<-inB
	doneA := make(chan error, 1)
	go func() { doneA <- l.makeDurable(seqA) }()
	// Until A leads an fsync (or, were it not to wait, has finished one).
	for running := false; !running && len(doneA) == 0; {
		l.group.mu.Lock()
		running = l.group.running
		l.group.mu.Unlock()
		runtime.Gosched()
	}
	close(goB)
	if err := <-doneA; err != nil {
		t.Fatalf("makeDurable(A): %v", err)
	}
	if err := <-doneB; err != nil {
		t.Fatalf("tx(B): %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]uint64{seqA + 1}, syncs); diff != "" {
		t.Errorf("fsyncs, by the commit count at their start (-want +got):\n%s", diff)
	}
}
