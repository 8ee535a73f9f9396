package kv_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/dcd"
	"cxlpool/fabric/cci"
	"cxlpool/kv"
)

const chunk = 1 << 20

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func tok(b byte) (t [kv.TokenSize]byte) {
	for i := range t {
		t[i] = b
	}
	return t
}

// newIndex opens an index in dir with namespace "ns" of chunks chunks
// (quota the same: no growth), host 1 a member with token tok(1).
func newIndex(t *testing.T, dir string, clk *clock, chunks int) *kv.Index {
	t.Helper()
	return newIndexCfg(t, kv.IndexConfig{Dir: dir, Clock: clk.now}, chunks)
}

// newIndexCfg is newIndex with the index's configuration.
func newIndexCfg(t *testing.T, cfg kv.IndexConfig, chunks int) *kv.Index {
	t.Helper()
	ix, err := kv.OpenIndex(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.CreateNamespace("ns", chunk, uint64(chunks)*chunk); err != nil {
		t.Fatal(err)
	}
	for i := range chunks {
		c := kv.ChunkInfo{ID: dcd.ChunkID(i + 1), Tag: cci.Tag{byte(i + 1)}, Size: chunk,
			Extents: []cci.Extent{{DPA: uint64(i+1) << 30, Length: chunk}}}
		if err := ix.AddChunk("ns", c); err != nil {
			t.Fatal(err)
		}
	}
	if err := ix.SetMember("ns", 1, tok(1)); err != nil {
		t.Fatal(err)
	}
	return ix
}

func open(t *testing.T, ix *kv.Index) *kv.Session {
	t.Helper()
	s, err := ix.Open("ns", 1, tok(1), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func put(t *testing.T, s *kv.Session, key string, n uint64) kv.Block {
	t.Helper()
	res, err := s.Put(context.Background(), []kv.PutItem{{Key: []byte(key), Length: n}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("put %s: %v %v", key, err, res)
	}
	errs, err := s.Commit([]uint64{res[0].Block.ID})
	if err != nil || errs[0] != nil {
		t.Fatalf("commit %s: %v %v", key, err, errs)
	}
	return res[0].Block
}

func get(t *testing.T, s *kv.Session, key string) (kv.Block, error) {
	t.Helper()
	res, err := s.Get([][]byte{[]byte(key)}, false)
	if err != nil {
		t.Fatal(err)
	}
	return res[0].Block, res[0].Err
}

func TestPutCommitGet(t *testing.T) {
	clk := &clock{t: time.Unix(1e9, 0)}
	ix := newIndex(t, t.TempDir(), clk, 1)
	defer ix.Close()
	s := open(t, ix)
	res, err := s.Put(context.Background(), []kv.PutItem{{Key: []byte("a"), Length: 5000}, {Key: []byte("a"), Length: 1}, {Key: nil, Length: 1}, {Key: []byte("big"), Length: chunk + 1}})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []error{nil, kv.ErrExists, kv.ErrInvalid, kv.ErrInvalid} {
		if !errors.Is(res[i].Err, want) {
			t.Errorf("item %d: %v, want %v", i, res[i].Err, want)
		}
	}
	// Not visible before commit.
	if _, err := get(t, s, "a"); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("get before commit: %v", err)
	}
	errs, _ := s.Commit([]uint64{res[0].Block.ID, 12345})
	if errs[0] != nil || !errors.Is(errs[1], kv.ErrNotFound) {
		t.Fatalf("commit: %v", errs)
	}
	got, err := get(t, s, "a")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(res[0].Block, got); diff != "" {
		t.Errorf("get (-put +get):\n%s", diff)
	}
	if errs, _ := s.Exists([][]byte{[]byte("a"), []byte("b")}); errs[0] != nil || !errors.Is(errs[1], kv.ErrNotFound) {
		t.Errorf("exists: %v", errs)
	}
	if errs, _ := s.Check([]kv.BlockGen{{got.ID, got.Gen}, {got.ID, got.Gen + 1}}); errs[0] != nil || !errors.Is(errs[1], kv.ErrStale) {
		t.Errorf("check: %v", errs)
	}
	if errs, _ := s.Delete([][]byte{[]byte("a")}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if errs, _ := s.Check([]kv.BlockGen{{got.ID, got.Gen}}); !errors.Is(errs[0], kv.ErrStale) {
		t.Errorf("check after delete: %v, want stale", errs[0])
	}
}

func TestDenied(t *testing.T) {
	clk := &clock{t: time.Unix(1e9, 0)}
	ix := newIndex(t, t.TempDir(), clk, 1)
	defer ix.Close()
	for _, tc := range []struct {
		ns   string
		host dcd.HostID
		tok  [kv.TokenSize]byte
	}{{"ns", 1, tok(2)}, {"ns", 2, tok(1)}, {"other", 1, tok(1)}} {
		if _, err := ix.Open(tc.ns, tc.host, tc.tok, 0); !errors.Is(err, kv.ErrDenied) {
			t.Errorf("open %s host %d: %v, want denied", tc.ns, tc.host, err)
		}
	}
}

// TestRestart: what was committed is back with the same location, what
// was only reserved is not, and its space is free.
func TestRestart(t *testing.T) {
	dir := t.TempDir()
	clk := &clock{t: time.Unix(1e9, 0)}
	ix := newIndex(t, dir, clk, 1)
	s := open(t, ix)
	want := map[string]kv.Block{}
	for i := range 100 {
		k := fmt.Sprint("k", i)
		want[k] = put(t, s, k, 4096)
	}
	if errs, _ := s.Delete([][]byte{[]byte("k7")}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	delete(want, "k7")
	if _, err := s.Put(context.Background(), []kv.PutItem{{Key: []byte("uncommitted"), Length: chunk / 2}}); err != nil {
		t.Fatal(err)
	}
	// A crash: the index is not closed, the log is what it is.
	ix2, err := kv.OpenIndex(kv.IndexConfig{Dir: dir, Clock: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	defer ix2.Close()
	s2 := open(t, ix2)
	for k, b := range want {
		got, err := get(t, s2, k)
		if err != nil {
			t.Fatalf("%s after restart: %v", k, err)
		}
		if diff := cmp.Diff(b, got); diff != "" {
			t.Errorf("%s (-before +after):\n%s", k, diff)
		}
	}
	for _, k := range []string{"k7", "uncommitted"} {
		if _, err := get(t, s2, k); !errors.Is(err, kv.ErrNotFound) {
			t.Errorf("%s after restart: %v, want not found", k, err)
		}
	}
	ns, _ := ix2.Namespace("ns")
	if got, want := ns.Stats.Used, uint64(99*4096); got != want || ns.Stats.Reserved != 0 {
		t.Errorf("used %d reserved %d, want %d and 0", got, ns.Stats.Reserved, want)
	}
	// New ids never repeat old ones.
	b := put(t, s2, "new", 4096)
	for k, o := range want {
		if o.ID == b.ID {
			t.Fatalf("new block reuses %s's id %d", k, b.ID)
		}
	}
}

func TestEvictionSkipsPinned(t *testing.T) {
	clk := &clock{t: time.Unix(1e9, 0)}
	ix := newIndex(t, t.TempDir(), clk, 1)
	defer ix.Close()
	s := open(t, ix)
	const n = chunk / 4
	for i := range 4 {
		put(t, s, fmt.Sprint("b", i), n)
	}
	// b0 pinned, b1 used recently: a new block evicts b2 (coldest unpinned).
	if res, _ := s.Get([][]byte{[]byte("b0")}, true); res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	get(t, s, "b1")
	put(t, s, "b4", n)
	for k, want := range map[string]error{"b0": nil, "b1": nil, "b2": kv.ErrNotFound, "b3": nil, "b4": nil} {
		if _, err := get(t, s, k); !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", k, err, want)
		}
	}
	ns, _ := ix.Namespace("ns")
	if ns.Stats.Evictions != 1 {
		t.Errorf("evictions %d, want 1", ns.Stats.Evictions)
	}
}

func TestFullOfPins(t *testing.T) {
	clk := &clock{t: time.Unix(1e9, 0)}
	ix := newIndex(t, t.TempDir(), clk, 1)
	defer ix.Close()
	s := open(t, ix)
	put(t, s, "a", chunk)
	if res, _ := s.Get([][]byte{[]byte("a")}, true); res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	res, _ := s.Put(context.Background(), []kv.PutItem{{Key: []byte("b"), Length: 1}})
	if !errors.Is(res[0].Err, kv.ErrNoSpace) {
		t.Fatalf("put into a pinned-full namespace: %v", res[0].Err)
	}
	// Deleting a pinned block hides it at once, keeps its space until unpin.
	a, _ := get(t, s, "a")
	if errs, _ := s.Delete([][]byte{[]byte("a")}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if res, _ := s.Put(context.Background(), []kv.PutItem{{Key: []byte("b"), Length: 1}}); !errors.Is(res[0].Err, kv.ErrNoSpace) {
		t.Fatalf("put while the deleted block is pinned: %v", res[0].Err)
	}
	if errs, _ := s.Check([]kv.BlockGen{{a.ID, a.Gen}}); errs[0] != nil {
		t.Errorf("the pinning reader's check: %v, want ok until it unpins", errs[0])
	}
	if errs, _ := s.Unpin([]uint64{a.ID}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	put(t, s, "b", 1)
}

// TestReaper: a client that stops renewing loses its reservations and
// pins; its commit answers expired.
func TestReaper(t *testing.T) {
	clk := &clock{t: time.Unix(1e9, 0)}
	ix := newIndex(t, t.TempDir(), clk, 1)
	defer ix.Close()
	s := open(t, ix)
	res, _ := s.Put(context.Background(), []kv.PutItem{{Key: []byte("r"), Length: chunk}})
	clk.add(31 * time.Second)
	if n := ix.Reap(clk.now()); n != 1 {
		t.Fatalf("reaped %d, want 1", n)
	}
	errs, err := s.Commit([]uint64{res[0].Block.ID})
	if err != nil || !errors.Is(errs[0], kv.ErrExpired) {
		t.Fatalf("commit after the lease: %v %v, want expired", err, errs)
	}
	s2 := open(t, ix)
	put(t, s2, "r", chunk) // the space came back
}

func TestConcurrentStorm(t *testing.T) {
	clk := &clock{t: time.Unix(1e9, 0)}
	ix := newIndex(t, t.TempDir(), clk, 2)
	defer ix.Close()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := ix.Open("ns", 1, tok(1), 0)
			if err != nil {
				t.Error(err)
				return
			}
			defer s.Close()
			for i := range 200 {
				k := []byte(fmt.Sprint(w, "-", i))
				res, err := s.Put(context.Background(), []kv.PutItem{{Key: k, Length: 64 << 10}})
				if err != nil || res[0].Err != nil {
					t.Error(err, res[0].Err)
					return
				}
				if i%3 == 0 {
					s.Abort([]uint64{res[0].Block.ID})
					continue
				}
				s.Commit([]uint64{res[0].Block.ID})
				if g, _ := s.Get([][]byte{k}, i%2 == 0); i%2 == 0 && g[0].Err == nil {
					s.Unpin([]uint64{g[0].Block.ID})
				}
				if i%5 == 0 {
					s.Delete([][]byte{k})
				}
			}
		}()
	}
	wg.Wait()
	ns, _ := ix.Namespace("ns")
	if ns.Stats.Reserved != 0 || ns.Stats.Used > ns.Stats.Capacity {
		t.Errorf("after the storm: %+v", ns.Stats)
	}
	if err := ix.Verify(); err != nil {
		t.Error(err)
	}
}

// TestCompact: the log becomes the state: smaller, and the same state
// after a restart.
func TestCompact(t *testing.T) {
	dir := t.TempDir()
	clk := &clock{t: time.Unix(1e9, 0)}
	ix := newIndex(t, dir, clk, 1)
	s := open(t, ix)
	want := map[string]kv.Block{}
	for i := range 200 {
		k := fmt.Sprint("k", i)
		b := put(t, s, k, 4096)
		if i%2 == 0 {
			if errs, _ := s.Delete([][]byte{[]byte(k)}); errs[0] != nil {
				t.Fatal(errs[0])
			}
			continue
		}
		want[k] = b
	}
	path := filepath.Join(dir, kv.WALFile)
	before := fileSize(t, path)
	if err := ix.Compact(); err != nil {
		t.Fatal(err)
	}
	if after := fileSize(t, path); after >= before {
		t.Errorf("log %d bytes after compaction, %d before", after, before)
	}
	put(t, s, "after", 4096) // appends go on into the new log
	ix2, err := kv.OpenIndex(kv.IndexConfig{Dir: dir, Clock: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	defer ix2.Close()
	s2 := open(t, ix2)
	want["after"] = kv.Block{}
	for k, b := range want {
		got, err := get(t, s2, k)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if k != "after" && got != b {
			t.Errorf("%s: %+v, want %+v", k, got, b)
		}
	}
	if _, err := get(t, s2, "k0"); !errors.Is(err, kv.ErrNotFound) {
		t.Errorf("deleted k0: %v", err)
	}
	if err := ix2.Verify(); err != nil {
		t.Error(err)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestRackSurvivesRestart: the rack's token and name are durable (log
// replay, and the snapshot a compaction writes); the rack opens sessions
// as RackHost but is never a member; removing it ends its sessions.
func TestRackSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	clk := &clock{t: time.Unix(1e9, 0)}
	ix := newIndex(t, dir, clk, 1)
	if err := ix.SetRack("ns", "rack-7", tok(9)); err != nil {
		t.Fatal(err)
	}
	check := func(ix *kv.Index, when string) {
		t.Helper()
		ns, err := ix.Namespace("ns")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]dcd.HostID{1}, ns.Members); diff != "" || ns.Rack != "rack-7" {
			t.Errorf("%s: rack %q, members (-want +got):\n%s", when, ns.Rack, diff)
		}
		s, err := ix.Open("ns", kv.RackHost, tok(9), 0)
		if err != nil {
			t.Fatalf("%s: rack session: %v", when, err)
		}
		s.Close()
		if _, err := ix.Open("ns", kv.RackHost, tok(1), 0); !errors.Is(err, kv.ErrDenied) {
			t.Errorf("%s: rack with host 1's token: %v, want denied", when, err)
		}
	}
	check(ix, "before restart")
	ix.Close()
	ix2, err := kv.OpenIndex(kv.IndexConfig{Dir: dir, Clock: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	check(ix2, "after replay")
	if err := ix2.Compact(); err != nil {
		t.Fatal(err)
	}
	ix2.Close()
	ix3, err := kv.OpenIndex(kv.IndexConfig{Dir: dir, Clock: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	defer ix3.Close()
	check(ix3, "after compaction")
	s, err := ix3.Open("ns", kv.RackHost, tok(9), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := ix3.RemoveMember("ns", kv.RackHost); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get([][]byte{[]byte("k")}, false); err == nil {
		t.Error("the rack's session outlived its removal")
	}
	if ns, _ := ix3.Namespace("ns"); ns.Rack != "" {
		t.Errorf("rack %q after removal, want none", ns.Rack)
	}
}
