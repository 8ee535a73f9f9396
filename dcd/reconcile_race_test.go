package dcd_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"cxlpool/dcd"
	"cxlpool/fabric/cci"
)

// activeOf returns the active grants of chunk.
func (s *stack) activeOf(t *testing.T, chunk dcd.ChunkID) []dcd.Grant {
	t.Helper()
	gs, err := s.led.Grants(ctxT(t), dcd.GrantFilter{Chunk: chunk, Active: true})
	if err != nil {
		t.Fatal(err)
	}
	return gs
}

// TestReconcileStaleSnapshot is issue #21 §2, forced deterministically: a
// flow finishes between Reconcile's read of the device and its read of
// the ledger. A release that finished there must not be adopted back as
// granted, and a grant that completed there must not be marked lost.
func TestReconcileStaleSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name string
		// during runs between the two reads; check judges the result.
		setup  func(t *testing.T, s *stack) dcd.Chunk
		during func(t *testing.T, s *stack, c dcd.Chunk)
		want   []dcd.GrantState
	}{
		{
			name: "release finishes",
			setup: func(t *testing.T, s *stack) dcd.Chunk {
				c := s.reserveGrant(t, 3)
				return c
			},
			during: func(t *testing.T, s *stack, c dcd.Chunk) {
				if _, err := s.m.Release(ctxT(t), s.activeOf(t, c.ID)[0].ID); err != nil {
					t.Fatal(err)
				}
			},
			want: nil,
		},
		{
			name: "grant completes",
			setup: func(t *testing.T, s *stack) dcd.Chunk {
				c, err := s.m.Reserve(ctxT(t), dcd.ReserveRequest{Size: blk, Region: 0})
				if err != nil {
					t.Fatal(err)
				}
				return c
			},
			during: func(t *testing.T, s *stack, c dcd.Chunk) {
				if _, err := s.m.Grant(ctxT(t), c.ID, 3); err != nil {
					t.Fatal(err)
				}
			},
			want: []dcd.GrantState{dcd.GrantGranted},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStack(t, nil)
			c := tc.setup(t, s)
			var once sync.Once
			dcd.SetHookAfterSnapshot(s.m, func() { once.Do(func() { tc.during(t, s, c) }) })
			rep, err := s.m.Reconcile(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			dcd.SetHookAfterSnapshot(s.m, nil)
			var got []dcd.GrantState
			for _, g := range s.activeOf(t, c.ID) {
				got = append(got, g.State)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("active grants of the chunk after reconcile: %v, want %v (report %+v)", got, tc.want, rep)
			}
			if rep.Adopted != 0 || rep.Lost != 0 {
				t.Errorf("reconcile judged on a stale snapshot: %+v", rep)
			}
			s.checkAgree(t)
		})
	}
}

// TestReconcileBesideFlows is the stress variant of §2, without hooks:
// reconciles run beside ordinary grants and releases of several hosts,
// and afterwards ledger and device agree on every chunk.
func TestReconcileBesideFlows(t *testing.T) {
	s := newStack(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// RECONCILE_ROUNDS=300 for a longer run.
	rounds := 100
	if testing.Short() {
		rounds = 40
	}
	if n, err := strconv.Atoi(os.Getenv("RECONCILE_ROUNDS")); err == nil {
		rounds = n
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := s.m.Reconcile(ctx); err != nil {
				t.Errorf("Reconcile: %v", err)
				return
			}
			time.Sleep(time.Millisecond) // beside the flows, not in place of them
		}
	}()
	for r := range rounds {
		var fw sync.WaitGroup
		for h := range dcd.HostID(3) {
			fw.Add(1)
			go func() {
				defer fw.Done()
				c, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: blk, Region: 0})
				if err != nil {
					t.Errorf("round %d: Reserve: %v", r, err)
					return
				}
				g, err := s.m.Grant(ctx, c.ID, h)
				if err != nil {
					t.Errorf("round %d: Grant: %v", r, err)
					return
				}
				if h == 0 {
					return // kept: the next rounds reconcile beside held grants too
				}
				if _, err := s.m.Release(ctx, g.ID); err != nil {
					t.Errorf("round %d: Release: %v", r, err)
					return
				}
				if err := s.m.DeleteChunk(ctx, c.ID); err != nil {
					t.Errorf("round %d: DeleteChunk: %v", r, err)
				}
			}()
		}
		fw.Wait()
		if t.Failed() {
			break
		}
		if r%8 == 7 {
			// Give host 0's chunks back now and then so the region
			// does not fill.
			for _, g := range s.hostGrants(t, 0) {
				if _, err := s.m.Release(ctx, g.ID); err != nil {
					t.Fatalf("Release: %v", err)
				}
			}
		}
	}
	close(stop)
	wg.Wait()
	if err := s.m.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	s.checkAgree(t)
	rep, err := s.m.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep != (dcd.ReconcileReport{}) {
		t.Errorf("a quiet reconcile after the storm found work: %+v", rep)
	}
}

func (s *stack) reserveGrant(t *testing.T, host dcd.HostID) dcd.Chunk {
	t.Helper()
	c, err := s.m.Reserve(ctxT(t), dcd.ReserveRequest{Size: blk, Region: 0})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.m.Grant(ctxT(t), c.ID, host); err != nil {
		t.Fatal(err)
	}
	return c
}

func (s *stack) hostGrants(t *testing.T, h dcd.HostID) []dcd.Grant {
	t.Helper()
	gs, err := s.led.Grants(ctxT(t), dcd.GrantFilter{Host: &h, Active: true})
	if err != nil {
		t.Fatal(err)
	}
	return gs
}

// checkAgree: every granted grant is held on the device with exactly its
// extents, nothing else is held, and no lost grant appeared.
func (s *stack) checkAgree(t *testing.T) {
	t.Helper()
	ctx := ctxT(t)
	chunks, err := s.led.Chunks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tagChunk := map[cci.Tag]dcd.ChunkID{}
	for _, c := range chunks {
		tagChunk[c.Tag] = c.ID
	}
	all, err := s.led.Grants(ctx, dcd.GrantFilter{})
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		host  dcd.HostID
		chunk dcd.ChunkID
	}
	want := map[key]int{}
	for _, g := range all {
		switch g.State {
		case dcd.GrantLost:
			t.Errorf("grant %d is lost: %s", g.ID, g.Reason)
		case dcd.GrantGranted:
			want[key{g.Host, g.Chunk}] = len(g.Extents)
		case dcd.GrantAdding, dcd.GrantReleasing:
			t.Errorf("grant %d still %s after the flows settled", g.ID, g.State)
		}
	}
	got := map[key]int{}
	for _, h := range s.m.Box().Heads {
		l, err := s.dev.Extents(ctx, h.LD)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range l.Extents {
			got[key{dcd.HostID(h.LD), tagChunk[e.Tag]}]++
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("device holds %v, ledger grants %v", got, want)
	}
}
