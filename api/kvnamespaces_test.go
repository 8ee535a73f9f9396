package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/api"
	"cxlpool/api/apitest"
	"cxlpool/sim"
)

func kvEnv(t *testing.T) *apitest.Env {
	return apitest.NewServer(t, apitest.Options{Sim: func(c *sim.Config) { c.Capacity = 16 << 30; c.WorkloadTick = -1 }})
}

func TestKVNamespaceLifecycle(t *testing.T) {
	env := kvEnv(t)
	r := env.Admin.Post(api.KVNamespacesURI, map[string]any{"Name": "llama", "ChunkSizeMiB": 256, "QuotaMiB": 1024, "Hosts": []string{"Host0", "Host1"}})
	if r.Status != http.StatusCreated {
		t.Fatalf("create: %s", r)
	}
	body := r.JSON(t)
	toks, _ := body["Tokens"].([]any)
	if len(toks) != 2 {
		t.Fatalf("tokens %v, want one per host", body["Tokens"])
	}
	if got := r.Header.Get("Location"); got != api.KVNamespaceURI("llama") {
		t.Errorf("Location %q", got)
	}
	got := env.Admin.GetOK(api.KVNamespaceURI("llama"))
	if _, ok := got["Tokens"]; ok {
		t.Error("GET shows the tokens")
	}
	if diff := cmp.Diff([]any{"Host0", "Host1"}, got["Hosts"]); diff != "" {
		t.Errorf("hosts (-want +got):\n%s", diff)
	}
	if chunks, _ := got["Chunks"].([]any); len(chunks) != 1 {
		t.Errorf("chunks %v, want 1", got["Chunks"])
	}
	if r := env.Admin.Post(api.KVNamespaceURI("llama")+"/Actions/CxlPool.Join", map[string]any{"Host": "Host2"}); r.Status != http.StatusOK {
		t.Fatalf("join: %s", r)
	}
	if r := env.Admin.Post(api.KVNamespaceURI("llama")+"/Actions/CxlPool.Leave", map[string]any{"Host": "Host2"}); r.Status != http.StatusOK {
		t.Fatalf("leave: %s", r)
	}
	if r := env.Admin.Patch(api.KVNamespaceURI("llama"), map[string]any{"QuotaMiB": 256}); r.Status != http.StatusOK {
		t.Fatalf("resize: %s", r)
	}
	col := env.Admin.GetOK(api.KVNamespacesURI)
	if n := col["Members@odata.count"]; n != float64(1) {
		t.Errorf("collection count %v", n)
	}
	if r := env.Admin.Delete(api.KVNamespaceURI("llama")); r.Status != http.StatusNoContent {
		t.Fatalf("delete: %s", r)
	}
	if r := env.Admin.Get(api.KVNamespaceURI("llama")); r.Status != http.StatusNotFound {
		t.Errorf("after delete: %s", r)
	}
	// Its chunk went back to the pool.
	chunks := env.Admin.GetOK(api.ChunksURI)
	if n := chunks["Members@odata.count"]; n != float64(0) {
		t.Errorf("chunks after delete: %v", n)
	}
}

func TestKVNamespaceRefusals(t *testing.T) {
	env := kvEnv(t)
	ok := map[string]any{"Name": "a", "ChunkSizeMiB": 256, "Hosts": []string{"Host0"}}
	if r := env.Admin.Post(api.KVNamespacesURI, ok); r.Status != http.StatusCreated {
		t.Fatalf("create: %s", r)
	}
	for _, tc := range []struct {
		name   string
		client *apitest.Client
		body   map[string]any
		status int
		msg    string
	}{
		{"exists", env.Admin, ok, http.StatusConflict, "Base.ResourceAlreadyExists"},
		{"bad name", env.Admin, map[string]any{"Name": "Bad Name", "ChunkSizeMiB": 256, "Hosts": []string{"Host0"}}, http.StatusBadRequest, "Base.GeneralError"},
		{"no hosts", env.Admin, map[string]any{"Name": "b", "ChunkSizeMiB": 256, "Hosts": []string{}}, http.StatusBadRequest, "Base.PropertyMissing"},
		{"unknown host", env.Admin, map[string]any{"Name": "b", "ChunkSizeMiB": 256, "Hosts": []string{"Host42"}}, http.StatusNotFound, "Base.ResourceMissingAtURI"},
		{"quota under a chunk", env.Admin, map[string]any{"Name": "b", "ChunkSizeMiB": 256, "QuotaMiB": 1, "Hosts": []string{"Host0"}}, http.StatusBadRequest, "Base.PropertyValueOutOfRange"},
		{"chunk not a block multiple", env.Admin, map[string]any{"Name": "b", "ChunkSizeMiB": 100, "Hosts": []string{"Host0"}}, http.StatusBadRequest, "Base.GeneralError"},
		{"read-only role", env.ReadOnly, map[string]any{"Name": "b", "ChunkSizeMiB": 256, "Hosts": []string{"Host0"}}, http.StatusForbidden, "Base.InsufficientPrivilege"},
		{"host role", env.Host0, map[string]any{"Name": "b", "ChunkSizeMiB": 256, "Hosts": []string{"Host0"}}, http.StatusForbidden, "Base.InsufficientPrivilege"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.client.Post(api.KVNamespacesURI, tc.body)
			if r.Status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.Status, tc.status, r)
			}
			if ids := r.MessageIDs(); len(ids) == 0 || !containsSuffix(ids, tc.msg) {
				t.Errorf("messages %v, want %s", ids, tc.msg)
			}
		})
	}
	// A failed create leaves nothing behind.
	if n := env.Admin.GetOK(api.KVNamespacesURI)["Members@odata.count"]; n != float64(1) {
		t.Errorf("namespaces after refusals: %v, want 1", n)
	}
	if n := env.Admin.GetOK(api.ChunksURI)["Members@odata.count"]; n != float64(1) {
		t.Errorf("chunks after refusals: %v, want 1", n)
	}
}

// containsSuffix: MessageIds carry the registry version
// (Base.1.19.0.ResourceAlreadyExists); want is "Base.ResourceAlreadyExists".
func containsSuffix(ids []string, want string) bool {
	reg, key, _ := strings.Cut(want, ".")
	for _, id := range ids {
		if strings.HasPrefix(id, reg+".") && strings.HasSuffix(id, "."+key) {
			return true
		}
	}
	return false
}

// TestKVNamespaceExport: the Export action hands out one token (hex and
// base64url forms of the same bytes) and an export per chunk; GET shows
// the exports without the token; a bad client name is a 400 naming the
// rule; Unexport revokes them, and a second Unexport is a 409.
func TestKVNamespaceExport(t *testing.T) {
	env := kvEnv(t)
	if r := env.Admin.Post(api.KVNamespacesURI, map[string]any{"Name": "llama", "ChunkSizeMiB": 256, "Hosts": []string{"Host0"}}); r.Status != http.StatusCreated {
		t.Fatalf("create: %s", r)
	}
	act := api.KVNamespaceURI("llama") + "/Actions/CxlPool."
	r := env.Admin.Post(act+"Export", map[string]any{"Client": "rack-7"})
	if r.Status != http.StatusOK {
		t.Fatalf("export: %s", r)
	}
	if got := r.Header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", got)
	}
	remote, _ := r.JSON(t)["Remote"].(map[string]any)
	tok, _ := remote["Token"].(string)
	exps, _ := remote["Exports"].([]any)
	if len(tok) != 64 || remote["ExportToken"] == "" || remote["Client"] != "rack-7" || len(exps) != 1 {
		t.Fatalf("Remote %v: want a 32-byte token in both forms, client rack-7, one export", remote)
	}
	got := env.Admin.GetOK(api.KVNamespaceURI("llama"))
	gr, _ := got["Remote"].(map[string]any)
	if _, ok := gr["Token"]; ok || gr["Client"] != "rack-7" {
		t.Errorf("GET Remote %v: want the rack and no token", gr)
	}
	if ge, _ := gr["Exports"].([]any); len(ge) != 1 {
		t.Errorf("GET Remote exports %v, want 1", gr["Exports"])
	}
	for _, tc := range []struct {
		name string
		body map[string]any
		want int
	}{
		{"no client", map[string]any{}, http.StatusBadRequest},
		{"unprintable client", map[string]any{"Client": "a\x00b"}, http.StatusBadRequest},
	} {
		r := env.Admin.Post(act+"Export", tc.body)
		if r.Status != tc.want || len(r.MessageIDs()) == 0 {
			t.Errorf("%s: %s, want %d with a MessageId", tc.name, r, tc.want)
		}
	}
	if r := env.Admin.Post(act+"Unexport", map[string]any{}); r.Status != http.StatusOK {
		t.Fatalf("unexport: %s", r)
	}
	if got := env.Admin.GetOK(api.KVNamespaceURI("llama")); got["Remote"] != nil {
		t.Errorf("Remote after Unexport: %v, want null", got["Remote"])
	}
	if r := env.Admin.Post(act+"Unexport", map[string]any{}); r.Status != http.StatusConflict || len(r.MessageIDs()) == 0 {
		t.Errorf("second unexport: %s, want 409 with a MessageId", r)
	}
}
