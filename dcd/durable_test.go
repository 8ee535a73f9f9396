package dcd_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"cxlpool/dcd"
	"cxlpool/dcd/sqlite"
	"cxlpool/fabric/fm"
	"cxlpool/fabric/serial"
	"cxlpool/sim"
)

// lateDurable is a ledger whose grant intents become durable only once
// their outcome is recorded (the order a fast device and a slow disk
// give), and then fail with fail if it is set.
type lateDurable struct {
	*sqlite.Ledger
	fail error
}

func (l *lateDurable) BeginGrantStaged(ctx context.Context, chunk dcd.ChunkID, host dcd.HostID, checked func(dcd.GrantIntent)) (dcd.GrantIntent, func() error, error) {
	in, durable, err := l.Ledger.BeginGrantStaged(ctx, chunk, host, checked)
	if err != nil {
		return in, durable, err
	}
	return in, func() error {
		err := durable()
		for ctx.Err() == nil {
			if g, gerr := l.Ledger.Grant(ctx, in.Grant.ID); gerr == nil && g.State != dcd.GrantAdding {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if err == nil {
			err = l.fail
		}
		return err
	}, nil
}

// lateDurableManager runs a Manager over a lateDurable ledger.
func lateDurableManager(t *testing.T, fail error) (*dcd.Manager, *sim.Box, *sqlite.Ledger) {
	t.Helper()
	return sqliteManager(t, func(sl *sqlite.Ledger) dcd.Ledger { return &lateDurable{Ledger: sl, fail: fail} })
}

// sqliteManager runs a Manager over wrap's ledger around a SQLite ledger
// and a virtual box in this process.
func sqliteManager(t *testing.T, wrap func(*sqlite.Ledger) dcd.Ledger) (*dcd.Manager, *sim.Box, *sqlite.Ledger) {
	t.Helper()
	log := testLogger(t)
	box, err := sim.New(sim.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Close() })
	ours, theirs := sim.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); box.ServeConn(ctx, theirs) }()
	t.Cleanup(func() { cancel(); theirs.Close(); <-served })
	dev, err := fm.Open(ctx, serial.NewLink(ours, serial.LinkConfig{Logger: log}), fm.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	sl, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"), sqlite.Options{Logger: log, Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sl.Close() })
	m, err := dcd.NewManager(dcd.Config{Ledger: wrap(sl), Device: dev, Logger: log,
		AddTimeout: 2 * time.Second, ReleaseTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	mctx, mcancel := context.WithCancel(ctx)
	if err := m.Start(mctx); err != nil {
		mcancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { mcancel(); m.Wait() })
	if err := m.SetDefaultHostQuota(ctx, 0); err != nil {
		t.Fatal(err)
	}
	return m, box, sl
}

// TestGrantOutcomeBeforeDurableIntent: a grant whose host answered and
// whose outcome was recorded before its intent became durable is told
// only after that (adding, then granted), and Grant returns it granted;
// an intent that then fails to become durable leaves nothing granted:
// the add is withdrawn and the grant recorded lost.
func TestGrantOutcomeBeforeDurableIntent(t *testing.T) {
	errDisk := errors.New("fsync: input/output error")
	for _, tc := range []struct {
		name string
		fail error
	}{{"durable", nil}, {"not durable", errDisk}} {
		t.Run(tc.name, func(t *testing.T) {
			m, box, led := lateDurableManager(t, tc.fail)
			ctx := ctxT(t)
			const host = dcd.HostID(2)
			c, err := m.Reserve(ctx, dcd.ReserveRequest{Size: blk, Region: 0})
			if err != nil {
				t.Fatalf("Reserve: %v", err)
			}
			changes, stop := m.Subscribe(16)
			defer stop()
			g, err := m.Grant(ctx, c.ID, host)
			if tc.fail == nil {
				if err != nil || g.State != dcd.GrantGranted || g.Size() != blk {
					t.Fatalf("Grant: got %s with %d bytes, %v; want granted with %d", g.State, g.Size(), err, blk)
				}
				var got []string
				for len(got) < 2 {
					select {
					case ch := <-changes:
						if ch.Kind == dcd.ChangeGrant {
							got = append(got, ch.Message)
						}
					case <-ctx.Done():
						t.Fatalf("changes told: %v, want adding then granted", got)
					}
				}
				if got[0] != "adding" || got[1] != "granted" {
					t.Errorf("changes told: %v, want adding then granted", got)
				}
				return
			}
			if !errors.Is(err, errDisk) {
				t.Fatalf("Grant: got %s, %v; want the disk's error", g.State, err)
			}
			// The withdrawal runs after the caller was told.
			for {
				gs, err := led.Grants(ctx, dcd.GrantFilter{Chunk: c.ID})
				if err != nil {
					t.Fatal(err)
				}
				if len(gs) == 1 && gs[0].State == dcd.GrantLost {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("grants of the chunk: %+v, want one lost", gs)
				}
				time.Sleep(5 * time.Millisecond)
			}
			for _, e := range box.Host(int(host)).Extents() {
				if e.Tag == c.Tag {
					t.Errorf("host holds %+v of a grant whose intent is not durable", e)
				}
			}
		})
	}
}
