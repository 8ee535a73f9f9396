package appliance

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/dcd"
	"cxlpool/fleet"
	"cxlpool/kv"
	"cxlpool/sim"
)

// gatedPublisher is a fleet.KVEventPublisher that holds its first call
// until open is closed and, as a network publisher does, publishes
// nothing once its context has ended.
type gatedPublisher struct {
	open chan struct{}
	once sync.Once
	mu   sync.Mutex
	got  []string
}

func (g *gatedPublisher) record(ctx context.Context, s string) error {
	g.once.Do(func() { <-g.open })
	if err := ctx.Err(); err != nil {
		return err
	}
	g.mu.Lock()
	g.got = append(g.got, s)
	g.mu.Unlock()
	return nil
}

func (g *gatedPublisher) BlockStored(ctx context.Context, ns string, _ *uint64, bs []fleet.StoredBlock) error {
	return g.record(ctx, fmt.Sprintf("stored %s %d", ns, bs[0].BlockHash))
}
func (g *gatedPublisher) BlockRemoved(ctx context.Context, ns string, hs []uint64) error {
	return g.record(ctx, fmt.Sprintf("removed %s %d", ns, hs[0]))
}
func (g *gatedPublisher) AllBlocksCleared(ctx context.Context, ns string) error {
	return g.record(ctx, "cleared "+ns)
}

// TestKVEventsDeliveredAtClose: the block events of the last commits
// before a clean stop reach the fleet plane's publisher and the
// subscribers (the API's SSE feed), in order, although they were still
// queued when Close began: Close quiesces the KV store first (QuiesceKV),
// while the publisher is still set, instead of dropping them with the
// plane.
func TestKVEventsDeliveredAtClose(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := Config{Device: DeviceSim, DataDir: t.TempDir(), Sim: sim.DefaultConfig(), Logger: slog.New(slog.DiscardHandler)}
	cfg.Sim.Capacity = 16 << 30
	app, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Start(ctx); err != nil {
		app.Close()
		t.Fatal(err)
	}
	_, toks, err := app.KV.Create(ctx, kv.CreateRequest{Name: "llm", ChunkSize: 256 << 20, Hosts: []dcd.HostID{2}})
	if err != nil {
		app.Close()
		t.Fatal(err)
	}
	pub := &gatedPublisher{open: make(chan struct{})}
	app.kvEv.setPublisher(pub)
	local, unsub := app.SubscribeKVEvents(256)
	defer unsub()
	s, err := app.KV.Ix.Open("llm", 2, toks[2], 0)
	if err != nil {
		app.Close()
		t.Fatal(err)
	}
	const n = 50
	var want []string
	for i := range n {
		key := []byte{0, 0, 0, 0, 0, 0, 0, byte(i + 1)}
		res, err := s.Put(ctx, []kv.PutItem{{Key: key, Length: 4096}})
		if err != nil || res[0].Err != nil {
			t.Fatalf("put: %v %+v", err, res)
		}
		if errs, err := s.Commit([]uint64{res[0].Block.ID}); err != nil || errs[0] != nil {
			t.Fatalf("commit: %v %v", err, errs)
		}
		want = append(want, fmt.Sprintf("stored llm %d", i+1))
	}
	s.Close()
	closed := make(chan error, 1)
	go func() { cancel(); app.Manager.Wait(); closed <- app.Close() }()
	close(pub.open) // the queue moves once Close has begun (or just before)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	pub.mu.Lock()
	got := pub.got
	pub.mu.Unlock()
	// The first events may be the namespace's (Create announces nothing;
	// the start's resync had no namespace): all n commits, in order.
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("published (-want +got):\n%s", diff)
	}
	var sub []string
	for len(local) > 0 {
		e := <-local
		if e.Kind == 0 {
			continue // QuiesceKV's marker
		}
		sub = append(sub, fmt.Sprintf("%s %s %d", e.Kind, e.Namespace, e.Blocks[0].Hash))
	}
	if len(sub) != n {
		t.Errorf("the subscriber got %d events, want %d", len(sub), n)
	}
}
