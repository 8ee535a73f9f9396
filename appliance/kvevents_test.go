package appliance_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/appliance"
	"cxlpool/dcd"
	"cxlpool/fleet"
	"cxlpool/kv"
	"cxlpool/sim"
)

// TestKVEventsFleet: a namespace's block events reach the embedded
// plane's subject cxlpool.kv.<namespace>.<box>.events in Dynamo's
// RouterEvent shape, numbered from 1, and the appliance's subscribers
// (the API's SSE feed) in the same order: a commit's Stored (parent_hash
// null), a block's Stored with the parent its client told, a delete's
// Removed, the namespace delete's Cleared.
func TestKVEventsFleet(t *testing.T) {
	cfg := appliance.Config{Device: appliance.DeviceSim, DataDir: t.TempDir(), Sim: sim.DefaultConfig(),
		Fleet: appliance.FleetConfig{Enabled: true, Listen: "127.0.0.1:0", TTL: 3 * time.Second}}
	cfg.Sim.Capacity = 16 << 30
	app, stop := startTelApp(t, cfg)
	defer stop()
	if app.Fleet == nil {
		t.Fatal("no fleet plane")
	}
	subj, err := fleet.KVEventSubject("llm", app.Fleet.Service.Box())
	if err != nil {
		t.Fatal(err)
	}
	nc := joined(t, app).Conn()
	sub, err := nc.SubscribeSync(subj)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	local, cancel := app.SubscribeKVEvents(16)
	defer cancel()

	ctx := context.Background()
	_, toks, err := app.KV.Create(ctx, kv.CreateRequest{Name: "llm", ChunkSize: blk, Hosts: []dcd.HostID{2}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := app.KV.Ix.Open("llm", 2, toks[2], 0)
	if err != nil {
		t.Fatal(err)
	}
	keys := [][]byte{{0, 0, 0, 0, 0, 0, 0, 42}, []byte("a longer key")}
	res, err := s.Put(ctx, []kv.PutItem{{Key: keys[0], Length: 4096}, {Key: keys[1], Length: 4096}})
	if err != nil || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("put: %v %+v", err, res)
	}
	if errs, err := s.Commit([]uint64{res[0].Block.ID, res[1].Block.ID}); err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("commit: %v %v", err, errs)
	}
	// A block whose client says it continues block 42.
	child := []byte{0, 0, 0, 0, 0, 0, 0, 43}
	res, err = s.Put(ctx, []kv.PutItem{{Key: child, Length: 4096, Seq: kv.Seq{HasParent: true, Parent: 42, Tokens: 256}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("put: %v %+v", err, res)
	}
	if errs, err := s.Commit([]uint64{res[0].Block.ID}); err != nil || errs[0] != nil {
		t.Fatalf("commit: %v %v", err, errs)
	}
	if errs, err := s.Delete(keys[:1]); err != nil || errs[0] != nil {
		t.Fatalf("delete: %v %v", err, errs)
	}
	if err := app.KV.Delete(ctx, "llm"); err != nil {
		t.Fatal(err)
	}

	h1 := kv.KeyHash(keys[1])
	if kv.KeyHash(keys[0]) != 42 {
		t.Errorf("KeyHash of an 8-byte key = %d, want the key's big-endian value 42", kv.KeyHash(keys[0]))
	}
	p42 := uint64(42)
	data := []fleet.KVEventData{
		{Stored: &fleet.KVStored{Blocks: []fleet.StoredBlock{{BlockHash: 42, TokensHash: 42}, {BlockHash: h1, TokensHash: h1}}}},
		{Stored: &fleet.KVStored{ParentHash: &p42, Blocks: []fleet.StoredBlock{{BlockHash: 43, TokensHash: 43}}}},
		{Removed: &fleet.KVRemoved{BlockHashes: []uint64{42}}},
		{Cleared: true},
	}
	worker := fleet.WorkerID(cfg.Sim.Serial)
	for i, d := range data {
		m, err := sub.NextMsg(30 * time.Second)
		if err != nil {
			t.Fatalf("event %d on %s: %v", i+1, subj, err)
		}
		var got fleet.RouterEvent
		if err := json.Unmarshal(m.Data, &got); err != nil {
			t.Fatalf("event %d: %v: %s", i+1, err, m.Data)
		}
		want := fleet.RouterEvent{WorkerID: worker, StorageTier: "external", Event: fleet.KVCacheEvent{EventID: uint64(i + 1), Data: d}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("event %d (-want +got):\n%s", i+1, diff)
		}
	}
	kinds := []kv.EventKind{kv.EventStored, kv.EventStored, kv.EventRemoved, kv.EventCleared}
	for i, want := range kinds {
		select {
		case e := <-local:
			if e.Kind != want || e.Namespace != "llm" {
				t.Errorf("subscriber event %d: %v of %q, want %v of llm", i+1, e.Kind, e.Namespace, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("subscriber: no event %d", i+1)
		}
	}
}
