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
