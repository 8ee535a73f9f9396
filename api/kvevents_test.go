package api_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/api"
	"cxlpool/dcd"
	"cxlpool/kv"
)

// TestKVEventsSSE: the KV store's block events reach the SSE stream (and
// the EventLog) as ResourceStateChanged events of the namespace, in
// order: a commit's BlockStored with the blocks' hashes (one per chain,
// with the parent and token counts clients told), a delete's
// BlockRemoved, the namespace delete's AllBlocksCleared.
func TestKVEventsSSE(t *testing.T) {
	env := kvEnv(t)
	events := sse(t, env, env.Admin)
	ctx := context.Background()
	svc := env.App.KV
	_, toks, err := svc.Create(ctx, kv.CreateRequest{Name: "llama", ChunkSize: 256 << 20, Hosts: []dcd.HostID{1}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := svc.Ix.Open("llama", 1, toks[1], 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	keys := [][]byte{{0, 0, 0, 0, 0, 0, 0, 7}, []byte("prefix-2")}
	res, err := s.Put(ctx, []kv.PutItem{{Key: keys[0], Length: 4096}, {Key: keys[1], Length: 4096}})
	if err != nil || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("put: %v %+v", err, res)
	}
	if errs, err := s.Commit([]uint64{res[0].Block.ID, res[1].Block.ID}); err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("commit: %v %v", err, errs)
	}
	// Blocks whose client told their sequence: a chain (root, child) and
	// a block continuing another's.
	seqd := []kv.PutItem{{Key: []byte{0, 0, 0, 0, 0, 0, 0, 8}, Length: 4096, Seq: kv.Seq{Tokens: 16}},
		{Key: []byte{0, 0, 0, 0, 0, 0, 0, 9}, Length: 4096, Seq: kv.Seq{HasParent: true, Parent: 8, Tokens: 16}},
		{Key: []byte{0, 0, 0, 0, 0, 0, 0, 10}, Length: 4096, Seq: kv.Seq{HasParent: true, Parent: 3, Tokens: 4}}}
	res, err = s.Put(ctx, seqd)
	if err != nil || res[0].Err != nil || res[1].Err != nil || res[2].Err != nil {
		t.Fatalf("put: %v %+v", err, res)
	}
	if errs, err := s.Commit([]uint64{res[0].Block.ID, res[1].Block.ID, res[2].Block.ID}); err != nil || errs[0] != nil || errs[1] != nil || errs[2] != nil {
		t.Fatalf("commit: %v %v", err, errs)
	}
	if errs, err := s.Delete(keys[1:]); err != nil || errs[0] != nil {
		t.Fatalf("delete: %v %v", err, errs)
	}
	if err := svc.Delete(ctx, "llama"); err != nil {
		t.Fatal(err)
	}
	h := strconv.FormatUint(kv.KeyHash(keys[1]), 10)
	want := []string{"BlockStored 7," + h, "BlockStored 8,9 tokens=16,16", "BlockStored 10 parent=3 tokens=4", "BlockRemoved " + h, "AllBlocksCleared"}
	origin := api.KVNamespaceURI("llama")
	var got []string
	for len(got) < len(want) {
		var rec map[string]any
		waitSSE(t, events, func(r map[string]any) bool {
			id, _ := r["MessageId"].(string)
			rec = r
			return strings.HasSuffix(id, ".ResourceStateChanged") && get(r, "OriginOfCondition", "@odata.id") == origin
		})
		args, _ := rec["MessageArgs"].([]any)
		if len(args) != 2 || args[0] != origin {
			t.Fatalf("MessageArgs %v, want [%s, change]", args, origin)
		}
		got = append(got, args[1].(string))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
	if !logged(t, env, "ResourceEvent.1.4.ResourceStateChanged", origin) {
		t.Error("not in the EventLog")
	}
}
