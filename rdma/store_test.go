package rdma_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/dcd"
	"cxlpool/rdma"
	"cxlpool/rdma/internal/fake"
)

// memStore is an in-memory rdma.Store whose writes can be made to fail.
type memStore struct {
	mu        sync.Mutex
	recs      map[rdma.ExportID]rdma.Record
	saveErr   error
	deleteErr error
}

func newMemStore() *memStore { return &memStore{recs: map[rdma.ExportID]rdma.Record{}} }

func (m *memStore) Save(_ context.Context, r rdma.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.saveErr != nil {
		return m.saveErr
	}
	m.recs[r.ID] = r
	return nil
}

func (m *memStore) Delete(_ context.Context, id rdma.ExportID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.deleteErr != nil {
		return m.deleteErr
	}
	delete(m.recs, id)
	return nil
}

func (m *memStore) Load(context.Context) ([]rdma.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Collect(maps.Values(m.recs)), nil
}

func (m *memStore) ids() []rdma.ExportID {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.recs))
}

var errDisk = errors.New("disk on fire")

// restart closes env's service, as a daemon shutdown does, and returns a
// new one over the same ledger, memory and store after Restore.
func restart(t *testing.T, env *fake.Env, st rdma.Store, clk *clock) (*rdma.Service, int) {
	t.Helper()
	if err := env.Service.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s, err := rdma.NewService(rdma.Config{Ledger: env.Ledger, Memory: env.Mem, Store: st, Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	n, err := s.Restore(context.Background())
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	return s, n
}

func TestRestore(t *testing.T) {
	tests := []struct {
		name string
		// before runs between Create and the restart.
		before func(t *testing.T, env *fake.Env, clk *clock)
		keep   bool
	}{
		{"live export", func(*testing.T, *fake.Env, *clock) {}, true},
		{"another host joined the shared capacity", func(_ *testing.T, env *fake.Env, _ *clock) {
			env.Ledger.AddGrant(env.Chunk.ID, 3, dcd.GrantGranted, env.Grant.Extents...)
		}, true},
		{"released and re-granted with identical extents", func(_ *testing.T, env *fake.Env, _ *clock) {
			// Released while the daemon was down (or its notification
			// lost): the record is still there.
			env.Ledger.SetState(env.Grant.ID, dcd.GrantReleased)
			env.Ledger.AddGrant(env.Chunk.ID, 0, dcd.GrantGranted, env.Grant.Extents...)
		}, false},
		{"handed from one host to another", func(_ *testing.T, env *fake.Env, _ *clock) {
			env.Ledger.AddGrant(env.Chunk.ID, 3, dcd.GrantGranted, env.Grant.Extents...)
			env.Ledger.SetState(env.Grant.ID, dcd.GrantReleased)
		}, false},
		{"grant releasing", func(_ *testing.T, env *fake.Env, _ *clock) {
			env.Ledger.SetState(env.Grant.ID, dcd.GrantReleasing)
		}, false},
		{"chunk deleted", func(_ *testing.T, env *fake.Env, _ *clock) {
			env.Ledger.SetState(env.Grant.ID, dcd.GrantReleased)
			env.Ledger.DeleteChunk(env.Chunk.ID)
		}, false},
		{"expired while down", func(_ *testing.T, _ *fake.Env, clk *clock) { clk.Advance(2 * time.Hour) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			st := newMemStore()
			env := fake.NewEnv(t, rdma.Config{Clock: clk.Now, Store: st})
			x, err := env.Service.Create(context.Background(), rdma.CreateRequest{Chunk: env.Chunk.ID, Client: "rack-7",
				Perms: rdma.PermReadWrite, Offset: 4096, Length: 1 << 20, TTL: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			tt.before(t, env, clk)
			s, n := restart(t, env, st, clk)
			if want := map[bool]int{true: 1, false: 0}[tt.keep]; n != want {
				t.Errorf("got %d restored, want %d", n, want)
			}
			if !tt.keep {
				if got := st.ids(); len(got) != 0 {
					t.Errorf("got records %v left, want none", got)
				}
				if _, err := s.Authenticate(x.ID, x.Token); err != rdma.ErrDenied {
					t.Errorf("got %v, want ErrDenied", err)
				}
				return
			}
			got, err := s.Get(x.ID)
			if err != nil {
				t.Fatal(err)
			}
			want := x
			want.Token = rdma.Token{}
			if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
				t.Errorf("restored export differs (-created +restored):\n%s", diff)
			}
			h, err := s.Authenticate(x.ID, x.Token)
			if err != nil {
				t.Fatalf("old token: %v", err)
			}
			if err := h.WriteAt([]byte("kept"), 0); err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 4)
			if _, err := env.File.ReadAt(b, int64(fake.DPA(4096))); err != nil || string(b) != "kept" {
				t.Errorf("got %q, %v at the export's first byte; want \"kept\"", b, err)
			}
			wrong := x.Token
			wrong[0] ^= 1
			// The very same refusal as for an export that never existed.
			if _, err := s.Authenticate(x.ID, wrong); err != rdma.ErrDenied {
				t.Errorf("wrong token: got %v, want ErrDenied", err)
			}
			if _, err := s.Authenticate("0123456789abcdef", x.Token); err != rdma.ErrDenied {
				t.Errorf("unknown export: got %v, want ErrDenied", err)
			}
		})
	}
}

func TestRevokeIsDurable(t *testing.T) {
	clk := newClock()
	st := newMemStore()
	env := fake.NewEnv(t, rdma.Config{Clock: clk.Now, Store: st})
	ctx := context.Background()
	x := env.Export(t, rdma.PermRead)
	y := env.Export(t, rdma.PermRead)

	// A failing delete keeps the export, usable, and says so.
	st.deleteErr = errDisk
	if err := env.Service.Revoke(ctx, x.ID); !errors.Is(err, errDisk) {
		t.Fatalf("revoke with a failing store: got %v, want %v", err, errDisk)
	}
	if _, err := env.Service.Authenticate(x.ID, x.Token); err != nil {
		t.Errorf("export after a failed revoke: got %v, want it kept", err)
	}
	if n, err := env.Service.RevokeChunk(ctx, env.Chunk.ID); n != 2 || !errors.Is(err, errDisk) {
		t.Errorf("RevokeChunk with a failing store: got %d, %v; want 2, %v", n, err, errDisk)
	}
	if got := len(env.Service.List()); got != 2 {
		t.Errorf("got %d exports after failed revocations, want 2", got)
	}
	st.deleteErr = nil
	if err := env.Service.Revoke(ctx, x.ID); err != nil {
		t.Fatal(err)
	}
	s, n := restart(t, env, st, clk)
	if n != 1 {
		t.Errorf("got %d restored, want 1 (the one not revoked)", n)
	}
	if _, err := s.Authenticate(x.ID, x.Token); err != rdma.ErrDenied {
		t.Errorf("revoked export after restart: got %v, want ErrDenied", err)
	}
	if _, err := s.Authenticate(y.ID, y.Token); err != nil {
		t.Errorf("live export after restart: %v", err)
	}
}

func TestAutomaticRevocationDeletesRecord(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		revoke func(t *testing.T, env *fake.Env, clk *clock)
	}{
		{"before release", func(t *testing.T, env *fake.Env, _ *clock) {
			if err := env.Service.Leaving(ctx, env.Grant, false, noRecord); err != nil {
				t.Fatal(err)
			}
		}},
		{"capacity gone", func(t *testing.T, env *fake.Env, _ *clock) {
			env.Ledger.SetState(env.Grant.ID, dcd.GrantLost)
			_ = env.Service.Sweep(ctx)
		}},
		{"expired", func(t *testing.T, env *fake.Env, clk *clock) {
			clk.Advance(2 * time.Hour)
			_ = env.Service.Sweep(ctx)
		}},
	}
	for _, tt := range tests {
		for _, failing := range []bool{false, true} {
			t.Run(tt.name+map[bool]string{false: "", true: "/store failing"}[failing], func(t *testing.T) {
				clk := newClock()
				st := newMemStore()
				env := fake.NewEnv(t, rdma.Config{Clock: clk.Now, Store: st})
				x, err := env.Service.Create(ctx, rdma.CreateRequest{Chunk: env.Chunk.ID, Client: "c", Perms: rdma.PermRead, TTL: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				if failing {
					st.deleteErr = errDisk
				}
				tt.revoke(t, env, clk)
				// Revoked at once even when the record stays.
				if _, err := env.Service.Get(x.ID); !errors.Is(err, rdma.ErrNotFound) {
					t.Fatalf("got %v, want the export revoked", err)
				}
				if got, want := len(st.ids()), map[bool]int{false: 0, true: 1}[failing]; got != want {
					t.Errorf("got %d records, want %d", got, want)
				}
			})
		}
	}
}

func TestCreateSaveFails(t *testing.T) {
	st := newMemStore()
	st.saveErr = errDisk
	env := fake.NewEnv(t, rdma.Config{Store: st})
	x, err := env.Service.Create(context.Background(), rdma.CreateRequest{Chunk: env.Chunk.ID, Client: "c", Perms: rdma.PermRead})
	if !errors.Is(err, errDisk) {
		t.Fatalf("got %v, want %v", err, errDisk)
	}
	if !x.Token.IsZero() || x.ID != "" {
		t.Errorf("got export %+v with the error, want none", x)
	}
	if got := env.Service.List(); len(got) != 0 {
		t.Errorf("got %d exports after a failed save, want none", len(got))
	}
	if got := st.ids(); len(got) != 0 {
		t.Errorf("got records %v, want none", got)
	}
}
