package api_test

import (
	"context"
	"encoding/hex"
	"errors"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/api"
	"cxlpool/api/apitest"
	apiclient "cxlpool/api/client"
	"cxlpool/kv"
	"cxlpool/kv/client"
	"cxlpool/rdma"
)

// TestKVRackResolvesOverRedfish: a remote rack learns the exports of a
// namespace's chunks from the Redfish API with its own (ReadOnly)
// account, client.RedfishResolve, instead of configuration out of band:
// the chunk it was exported with, and the one the namespace grows later.
// The namespace exported to another rack, a wrong password and an
// unexported namespace are refused.
func TestKVRackResolvesOverRedfish(t *testing.T) {
	env := kvEnv(t)
	r := env.Admin.Post(api.KVNamespacesURI, map[string]any{"Name": "llama", "ChunkSizeMiB": 256, "QuotaMiB": 512, "Hosts": []string{"Host0"}})
	if r.Status != http.StatusCreated {
		t.Fatalf("create: %s", r)
	}
	toks, _ := r.JSON(t)["Tokens"].([]any)
	var tok kv.Token
	if b, err := hex.DecodeString(toks[0].(map[string]any)["Token"].(string)); err != nil || len(b) != kv.TokenSize {
		t.Fatalf("token %v: %v", toks, err)
	} else {
		copy(tok[:], b)
	}
	act := api.KVNamespaceURI("llama") + "/Actions/CxlPool."
	if r := env.Admin.Post(act+"Export", map[string]any{"Client": "rack-7"}); r.Status != http.StatusOK {
		t.Fatalf("export: %s", r)
	}
	ctx := context.Background()
	rackAPI := func(password string) *apiclient.Client {
		c, err := apiclient.New(apiclient.Config{Server: env.HTTP.URL, User: apitest.UserReadOnly, Password: password})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	want := func() map[[16]byte]rdma.ExportID {
		ra, err := env.App.KV.Exports("llama")
		if err != nil {
			t.Fatal(err)
		}
		out := map[[16]byte]rdma.ExportID{}
		for _, e := range ra.Exports {
			out[e.Tag] = e.Export
		}
		return out
	}
	resolve := client.RedfishResolve(rackAPI(apitest.UserPassword), "llama", "rack-7")
	got, err := resolve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want(), got); diff != "" || len(got) != 1 {
		t.Errorf("exports (-box +resolved):\n%s", diff)
	}
	// The namespace grows a chunk (a second whole-chunk block): exported
	// with the namespace's token, and resolved.
	s, err := env.App.KV.Ix.Open("llama", 0, tok, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, k := range []string{"a", "b"} {
		if res, err := s.Put(ctx, []kv.PutItem{{Key: []byte(k), Length: 256 << 20}}); err != nil || res[0].Err != nil {
			t.Fatalf("put %s: %v %+v", k, err, res)
		}
	}
	got, err = resolve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want(), got); diff != "" || len(got) != 2 {
		t.Errorf("exports after growth (-box +resolved):\n%s", diff)
	}
	if _, err := client.RedfishResolve(rackAPI(apitest.UserPassword), "llama", "rack-8")(ctx); !errors.Is(err, client.ErrNoExport) {
		t.Errorf("another rack's resolve: %v, want ErrNoExport", err)
	}
	if _, err := client.RedfishResolve(rackAPI("wrong-password-1"), "llama", "rack-7")(ctx); err == nil {
		t.Error("a wrong password resolved the exports")
	}
	if r := env.Admin.Post(act+"Unexport", map[string]any{}); r.Status != http.StatusOK {
		t.Fatalf("unexport: %s", r)
	}
	if _, err := resolve(ctx); !errors.Is(err, client.ErrNoExport) {
		t.Errorf("resolve after Unexport: %v, want ErrNoExport", err)
	}
}
