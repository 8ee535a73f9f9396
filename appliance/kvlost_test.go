package appliance_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"cxlpool/appliance"
	"cxlpool/dcd"
	"cxlpool/kv"
	"cxlpool/sim"
)

// lockedBuf is a log sink the test reads while the daemon writes.
type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestKVInProcessBoxLosesBlocksAndSaysSo: the in-process virtual box's
// memory dies with the daemon. After a restart the index must not hand out
// the old locations (they would point at zeroed or reused memory): the
// namespace's blocks are cleared with an AllBlocksCleared event (reason
// lost) and an error log naming why, its lost chunk leaves the namespace
// and the ledger, and the namespace works again (it grows on the next put).
func TestKVInProcessBoxLosesBlocksAndSaysSo(t *testing.T) {
	data := t.TempDir()
	cfg := appliance.Config{Device: appliance.DeviceSim, DataDir: data, Sim: sim.DefaultConfig()}
	cfg.Sim.Capacity = 16 << 30
	app, stop := startTelApp(t, cfg)
	ctx := context.Background()
	_, toks, err := app.KV.Create(ctx, kv.CreateRequest{Name: "llm", ChunkSize: blk, Hosts: []dcd.HostID{2}})
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("system prompt 1")
	put := func(app *appliance.Appliance) (*kv.Session, kv.Block) {
		t.Helper()
		s, err := app.KV.Ix.Open("llm", 2, toks[2], 0)
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Put(ctx, []kv.PutItem{{Key: key, Length: 8192}})
		if err != nil || res[0].Err != nil {
			t.Fatalf("put: %v %+v", err, res)
		}
		if errs, err := s.Commit([]uint64{res[0].Block.ID}); err != nil || errs[0] != nil {
			t.Fatalf("commit: %v %v", err, errs)
		}
		return s, res[0].Block
	}
	s, before := put(app)
	s.Close()
	stop()

	logs := &lockedBuf{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	app, err = appliance.Open(rctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); app.Manager.Wait(); app.Close() }()
	events, unsub := app.SubscribeKVEvents(64)
	defer unsub()
	if err := app.Start(rctx); err != nil {
		t.Fatal(err)
	}
	// The open's resync (Cleared, Stored of what the log holds) went out
	// before anyone subscribed; what follows is the loss.
	deadline := time.After(30 * time.Second)
	for cleared := false; !cleared; {
		select {
		case e := <-events:
			if e.Kind == kv.EventStored && e.Namespace == "llm" {
				t.Errorf("after the loss a Stored event of %d blocks: the lost blocks announced as there", len(e.Blocks))
			}
			cleared = e.Kind == kv.EventCleared && e.Namespace == "llm" && e.Reason == kv.ReasonLost
		case <-deadline:
			t.Fatal("no AllBlocksCleared event (reason lost) after a restart on the in-process box")
		}
	}
	if out := logs.String(); !strings.Contains(out, "kv: namespace chunk lost with its blocks") || !strings.Contains(out, "no longer holds this capacity") {
		t.Errorf("no log line naming why the blocks went:\n%s", out)
	}
	ns, err := app.KV.Namespace("llm")
	if err != nil {
		t.Fatal(err)
	}
	if ns.Stats.Blocks != 0 || ns.Stats.Used != 0 || len(ns.Chunks) != 0 {
		t.Errorf("after the loss: %d blocks, %d bytes, %d chunks; want none", ns.Stats.Blocks, ns.Stats.Used, len(ns.Chunks))
	}
	if _, err := app.Ledger.Chunk(ctx, before.Chunk); !errors.Is(err, dcd.ErrNotFound) {
		t.Errorf("the lost chunk %d is still in the ledger: %v", before.Chunk, err)
	}
	s, err = app.KV.Ix.Open("llm", 2, toks[2], 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Get([][]byte{key}, false)
	if err != nil || !errors.Is(got[0].Err, kv.ErrNotFound) {
		t.Errorf("get of a block whose memory died: %+v, %v; want not found", got, err)
	}
	if errs, err := s.Check([]kv.BlockGen{{ID: before.ID, Gen: before.Gen}}); err != nil || !errors.Is(errs[0], kv.ErrStale) {
		t.Errorf("check of the old location: %v, %v; want stale", errs, err)
	}
	s.Close()
	// The namespace grows a new chunk on the next put.
	s, after := put(app)
	defer s.Close()
	if after.Chunk == before.Chunk || after.ID <= before.ID {
		t.Errorf("new block %+v in chunk %d, the lost one was %+v", after, after.Chunk, before)
	}
}
