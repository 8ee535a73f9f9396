package appliance_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"cxlpool/appliance"
	"cxlpool/dcd"
	"cxlpool/fleet"
	"cxlpool/kv"
	"cxlpool/sim"
)

// TestKVHotnessFleet: once joined, the box publishes each KV namespace's
// hotness summary periodically on cxlpool.kv.<ns>.<box>.hotness: its
// blocks, bytes and lookup hits and misses.
func TestKVHotnessFleet(t *testing.T) {
	cfg := appliance.Config{Device: appliance.DeviceSim, DataDir: t.TempDir(), Sim: sim.DefaultConfig(),
		Fleet: appliance.FleetConfig{Enabled: true, Listen: "127.0.0.1:0", TTL: 3 * time.Second, HotnessInterval: 100 * time.Millisecond}}
	cfg.Sim.Capacity = 16 << 30
	app, stop := startTelApp(t, cfg)
	defer stop()
	nc := joined(t, app).Conn()
	subj, err := fleet.KVHotnessSubject("llm", app.Fleet.Service.Box())
	if err != nil {
		t.Fatal(err)
	}
	sub, err := nc.SubscribeSync(subj)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	ctx := context.Background()
	_, toks, err := app.KV.Create(ctx, kv.CreateRequest{Name: "llm", ChunkSize: blk, Hosts: []dcd.HostID{2}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := app.KV.Ix.Open("llm", 2, toks[2], 0)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Put(ctx, []kv.PutItem{{Key: []byte("k1"), Length: 4096}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("put: %v %+v", err, res)
	}
	if errs, err := s.Commit([]uint64{res[0].Block.ID}); err != nil || errs[0] != nil {
		t.Fatalf("commit: %v %v", err, errs)
	}
	if _, err := s.Get([][]byte{[]byte("k1"), []byte("absent")}, false); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			t.Fatalf("no summary with the block and the lookups on %s: %v", subj, err)
		}
		var h fleet.KVHotness
		if err := json.Unmarshal(m.Data, &h); err != nil {
			t.Fatalf("%v: %s", err, m.Data)
		}
		if h.Namespace != "llm" || h.Box != app.Fleet.Service.Box() || h.WorkerID != fleet.WorkerID(cfg.Sim.Serial) || h.Top == nil {
			t.Fatalf("summary %s: want namespace llm of this box with a top list", m.Data)
		}
		if h.Blocks == 1 && h.Hits == 1 && h.Misses == 1 && h.Bytes >= 4096 {
			return
		}
	}
}
