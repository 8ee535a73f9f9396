package dcd_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/dcd"
	"cxlpool/dcd/sqlite"
	"cxlpool/fabric/cci"
)

// gatedOutcome is a ledger whose queued grant outcomes wait for gate
// before they run, so a test sees the moment between a caller being told
// and the outcome committing.
type gatedOutcome struct {
	*sqlite.Ledger
	gate chan struct{}
}

func (l *gatedOutcome) CompleteGrantQueued(ctx context.Context, id dcd.GrantID, exts []cci.Extent, queued func(time.Time)) (dcd.Grant, error) {
	return l.Ledger.CompleteGrantQueued(ctx, id, exts, func(at time.Time) {
		queued(at)
		<-l.gate
	})
}

// gatedGrant reserves a chunk and grants it to host 4 on a Manager over
// the ledger wrap makes of the SQLite one and gate; open opens the gate
// (once: the test's cleanup opens it too, before the Manager's, so a failing
// test still lets the flow finish before the Manager is waited for).
func gatedGrant(t *testing.T, wrap func(*sqlite.Ledger, chan struct{}) dcd.Ledger) (m *dcd.Manager, led *sqlite.Ledger, c dcd.Chunk, told dcd.Grant, open func()) {
	t.Helper()
	gate := make(chan struct{})
	var opened sync.Once
	open = func() { opened.Do(func() { close(gate) }) }
	m, _, led = sqliteManager(t, func(sl *sqlite.Ledger) dcd.Ledger { return wrap(sl, gate) })
	t.Cleanup(open)
	ctx := ctxT(t)
	c, err := m.Reserve(ctx, dcd.ReserveRequest{Size: blk, Region: 0})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	told, err = m.Grant(ctx, c.ID, 4)
	if err != nil || told.State != dcd.GrantGranted || told.Size() != blk {
		t.Fatalf("Grant (outcome not yet committed or ended): got %s with %d bytes, %v; want granted with %d", told.State, told.Size(), err, blk)
	}
	return m, led, c, told, open
}

// TestGrantToldBeforeItsOutcomeCommits: a grant's caller is answered once
// the host accepted, the intent is durable and the outcome is queued, not
// after the outcome committed; yet no read after the answer finds the grant
// still adding, what the ledger records is exactly what the caller was told,
// and the grant can be released at once.
func TestGrantToldBeforeItsOutcomeCommits(t *testing.T) {
	m, led, _, told, open := gatedGrant(t, func(sl *sqlite.Ledger, gate chan struct{}) dcd.Ledger {
		return &gatedOutcome{Ledger: sl, gate: gate}
	})
	ctx := ctxT(t)

	type result struct {
		g   dcd.Grant
		err error
	}
	read := make(chan result, 1)
	go func() {
		g, err := led.Grant(ctx, told.ID)
		read <- result{g, err}
	}()
	select {
	case r := <-read:
		t.Fatalf("a read after the answer returned before the outcome committed: %s, %v", r.g.State, r.err)
	case <-time.After(50 * time.Millisecond): // it waits, as it must
	}
	open()
	r := <-read
	if r.err != nil {
		t.Fatalf("read after the outcome: %v", r.err)
	}
	if diff := cmp.Diff(told, r.g); diff != "" {
		t.Errorf("recorded grant differs from what the caller was told (-told +recorded):\n%s", diff)
	}
	if g, err := m.Release(ctx, told.ID); err != nil || g.State != dcd.GrantReleased {
		t.Errorf("Release right after: got %s, %v; want released", g.State, err)
	}
}

// gatedDone is a ledger whose queued grant outcomes commit at once but
// return only when gate opens, so the grant's add flow, which told its
// caller already, ends late.
type gatedDone struct {
	*sqlite.Ledger
	gate chan struct{}
}

func (l *gatedDone) CompleteGrantQueued(ctx context.Context, id dcd.GrantID, exts []cci.Extent, queued func(time.Time)) (dcd.Grant, error) {
	g, err := l.Ledger.CompleteGrantQueued(ctx, id, exts, queued)
	<-l.gate
	return g, err
}

// TestReleaseWhileTheAddFlowEnds: a release asked for after the grant's
// caller was told but before its add flow ended waits for that end, then
// runs its own flow: it answers released, not the add's answer, and the
// ledger shows the grant released and its chunk can be deleted. (The
// release waits for the chunk lock the add flow holds; the flow used to
// give it up just before it ended, a window of a few instructions that this
// test meets only by chance and BenchmarkGrantsParallel8Held met about once
// in 60 runs: the release then started no flow of its own and answered
// with the add's answer.)
func TestReleaseWhileTheAddFlowEnds(t *testing.T) {
	m, led, c, told, open := gatedGrant(t, func(sl *sqlite.Ledger, gate chan struct{}) dcd.Ledger {
		return &gatedDone{Ledger: sl, gate: gate}
	})
	ctx := ctxT(t)
	type result struct {
		g   dcd.Grant
		err error
	}
	released := make(chan result, 1)
	go func() {
		g, err := m.Release(ctx, told.ID)
		released <- result{g, err}
	}()
	time.Sleep(50 * time.Millisecond) // let the release meet the add flow, not a timed assertion
	open()
	r := <-released
	if r.err != nil || r.g.State != dcd.GrantReleased {
		t.Fatalf("Release while the add flow ended: got %s, %v; want released", r.g.State, r.err)
	}
	if g, err := led.Grant(ctx, told.ID); err != nil || g.State != dcd.GrantReleased {
		t.Errorf("ledger after the release: %s, %v; want released", g.State, err)
	}
	if err := m.DeleteChunk(ctx, c.ID); err != nil {
		t.Errorf("DeleteChunk after the release: %v", err)
	}
}
