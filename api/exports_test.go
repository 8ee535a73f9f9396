package api_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"cxlpool/api"
	"cxlpool/api/apitest"
	"cxlpool/rdma"
)

const (
	rdmaFabricURI      = "/redfish/v1/Fabrics/RDMA"
	rdmaEndpointsURI   = rdmaFabricURI + "/Endpoints"
	rdmaConnectionsURI = rdmaFabricURI + "/Connections"
)

// exportBody is a POST to the RDMA Connections: chunk for client, with
// extra Oem.CxlPool properties.
func exportBody(chunk, client string, oem map[string]any) map[string]any {
	o := map[string]any{"Client": client}
	for k, v := range oem {
		o[k] = v
	}
	return map[string]any{
		"ConnectionType": "Memory",
		"MemoryChunkInfo": []map[string]any{{
			"MemoryChunk":        map[string]any{"@odata.id": chunk},
			"AccessCapabilities": []string{"Read", "Write"},
		}},
		"Oem": map[string]any{"CxlPool": o},
	}
}

// createExport POSTs body as c, requires 201 and returns the Connection's
// URI and the token the answer carries.
func createExport(t *testing.T, c *apitest.Client, body map[string]any) (string, rdma.Token) {
	t.Helper()
	r := c.Post(rdmaConnectionsURI, body)
	if r.Status != http.StatusCreated {
		t.Fatalf("create export as %s: got %s, want 201", c.User, r)
	}
	apitest.Validate(t, r.Body)
	if cc := r.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("create export: Cache-Control %q, want no-store (the answer holds the token)", cc)
	}
	loc := r.Header.Get("Location")
	m := r.JSON(t)
	if m["@odata.id"] != loc || !strings.HasPrefix(loc, rdmaConnectionsURI+"/") {
		t.Fatalf("create export: Location %q, body @odata.id %v", loc, m["@odata.id"])
	}
	s, _ := get(m, "Oem", "CxlPool", "Token").(string)
	tok, err := rdma.ParseToken(s)
	if err != nil {
		t.Fatalf("create export: token %q: %v", s, err)
	}
	return loc, tok
}

// exportGolden compares an RDMA resource with its golden file after
// replacing what differs between runs (export Ids, the export server's
// port, expiry times).
func exportGolden(t *testing.T, env *apitest.Env, name, uri string, ids ...string) {
	t.Helper()
	b := env.Admin.Get(uri).Body
	s := string(b)
	for i, id := range ids {
		s = strings.ReplaceAll(s, id, "<export"+strconv.Itoa(i)+">")
	}
	addr := env.App.ExportAddr.String()
	_, port, _ := strings.Cut(addr, ":")
	s = strings.ReplaceAll(s, addr, "<address>")
	s = strings.ReplaceAll(s, `"Port":`+port, `"Port":0`)
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	if o, ok := get(m, "Oem", "CxlPool").(map[string]any); ok && o["Expiry"] != nil {
		o["Expiry"] = "<Expiry>"
	}
	checkGolden(t, name, uri, m)
}

// TestExports: the RDMA fabric's flow. An export needs a granted chunk;
// creating one shows the token once, creates the client's endpoint and
// shows up on the pool target; GET never shows the token again; DELETE
// revokes it and the endpoint goes with the client's last export.
func TestExports(t *testing.T) {
	env := apitest.NewServer(t)
	chunk := reserve(t, env.Admin, blockMiB, nil)

	// Not granted to any host: no bytes to export.
	r := env.Admin.Post(rdmaConnectionsURI, exportBody(chunk, "rack7", nil))
	wantStatus(t, "export of an ungranted chunk", r, http.StatusConflict, "GeneralError")

	connect(t, env.Admin, chunk, 2)
	uri, tok := createExport(t, env.Operator, exportBody(chunk, "rack7", nil))
	id := strings.TrimPrefix(uri, rdmaConnectionsURI+"/")
	part, _ := createExport(t, env.Admin, exportBody(chunk, "rack7", map[string]any{"Offset": 4096, "Length": 8192, "Expiry": "PT1H"}))
	partID := strings.TrimPrefix(part, rdmaConnectionsURI+"/")

	// An existing client endpoint can be named instead of the client.
	linked := exportBody(chunk, "", nil)
	delete(linked, "Oem")
	linked["MemoryChunkInfo"].([]map[string]any)[0]["AccessCapabilities"] = []string{"Read"}
	linked["Links"] = map[string]any{
		"InitiatorEndpoints": []map[string]any{{"@odata.id": rdmaEndpointsURI + "/rack7"}},
		"TargetEndpoints":    []map[string]any{{"@odata.id": rdmaEndpointsURI + "/Pool"}},
	}
	ro, _ := createExport(t, env.Admin, linked)
	roID := strings.TrimPrefix(ro, rdmaConnectionsURI+"/")
	other, _ := createExport(t, env.Admin, exportBody(chunk, "rack-8.b", nil))
	otherID := strings.TrimPrefix(other, rdmaConnectionsURI+"/")

	m := env.Admin.GetOK(uri)
	if get(m, "Oem", "CxlPool", "Token") != nil || strings.Contains(string(env.Admin.Get(uri).Body), tok.String()) {
		t.Errorf("GET %s shows the token", uri)
	}
	if got := get(m, "Oem", "CxlPool", "Length"); got != float64(blockMiB<<20) {
		t.Errorf("whole-chunk export Length %v, want %d", got, blockMiB<<20)
	}
	if got := get(env.Admin.GetOK(ro), "MemoryChunkInfo", 0, "AccessCapabilities"); !slices.Equal(toStrings(got), []string{"Read"}) {
		t.Errorf("read-only export AccessCapabilities %v, want [Read]", got)
	}
	for _, u := range []string{rdmaConnectionsURI + "?$expand=.", rdmaEndpointsURI + "?$expand=.", "/redfish/v1/Managers/FM/LogServices/AuditLog/Entries?$expand=."} {
		b := env.Admin.Get(u).Body
		apitest.Validate(t, b)
		if strings.Contains(string(b), tok.String()) {
			t.Errorf("GET %s shows the token", u)
		}
	}
	if got := members(t, env.Admin, rdmaConnectionsURI); !slices.Equal(got, []string{uri, part, ro, other}) {
		t.Errorf("connections %v, want %v", got, []string{uri, part, ro, other})
	}
	if got := members(t, env.Admin, rdmaEndpointsURI); !slices.Equal(got, []string{rdmaEndpointsURI + "/Pool",
		rdmaEndpointsURI + "/rack-8.b", rdmaEndpointsURI + "/rack7"}) {
		t.Errorf("endpoints %v", got)
	}
	if got := members(t, env.Admin, "/redfish/v1/Fabrics"); !slices.Equal(got, []string{"/redfish/v1/Fabrics/CXL", rdmaFabricURI}) {
		t.Errorf("fabrics as admin %v", got)
	}
	if got := members(t, env.Host0, "/redfish/v1/Fabrics"); !slices.Equal(got, []string{"/redfish/v1/Fabrics/CXL"}) {
		t.Errorf("fabrics as a host %v, want only CXL", got)
	}
	if got := get(env.Admin.GetOK(rdmaFabricURI), "Oem", "CxlPool", "Address"); got != env.App.ExportAddr.String() {
		t.Errorf("fabric Oem.CxlPool.Address %v, want %s", got, env.App.ExportAddr)
	}

	ids := []string{id, partID, roID, otherID}
	exportGolden(t, env, "rdma-fabric", rdmaFabricURI, ids...)
	exportGolden(t, env, "rdma-endpoint-pool", rdmaEndpointsURI+"/Pool", ids...)
	exportGolden(t, env, "rdma-endpoint-client", rdmaEndpointsURI+"/rack7", ids...)
	exportGolden(t, env, "rdma-connection", uri, ids...)
	exportGolden(t, env, "rdma-connection-part", part, ids...)

	// Revoke: If-Match is honoured, then the export and, with the
	// client's last export, its endpoint are gone.
	wantStatus(t, "DELETE with a stale ETag", env.Admin.Delete(other, "If-Match", `W/"stale"`), http.StatusPreconditionFailed, "PreconditionFailed")
	if r := env.Admin.Delete(other, "If-Match", env.Admin.Get(other).Header.Get("ETag")); r.Status != http.StatusNoContent {
		t.Fatalf("DELETE %s: got %s, want 204", other, r)
	}
	wantStatus(t, "GET a revoked export", env.Admin.Get(other), http.StatusNotFound, "ResourceNotFound")
	wantStatus(t, "GET the endpoint of a client without exports", env.Admin.Get(rdmaEndpointsURI+"/rack-8.b"), http.StatusNotFound, "ResourceNotFound")
	wantStatus(t, "DELETE a revoked export", env.Admin.Delete(other), http.StatusNotFound, "ResourceNotFound")
	wantStatus(t, "a host revokes", env.Host0.Delete(uri), http.StatusForbidden, "InsufficientPrivilege")
	wantStatus(t, "a reader revokes", env.ReadOnly.Delete(uri), http.StatusForbidden, "InsufficientPrivilege")
}

func toStrings(v any) []string {
	a, _ := v.([]any)
	out := make([]string, 0, len(a))
	for _, s := range a {
		str, _ := s.(string)
		out = append(out, str)
	}
	return out
}

// TestExportRequests: what a POST may get wrong, each with its Base
// message and never a 5xx.
func TestExportRequests(t *testing.T) {
	env := apitest.NewServer(t)
	chunk := reserve(t, env.Admin, blockMiB, nil)
	connect(t, env.Admin, chunk, 2)
	createExport(t, env.Admin, exportBody(chunk, "rack7", nil))
	ok := func(f func(b map[string]any)) map[string]any {
		b := exportBody(chunk, "rack9", nil)
		f(b)
		return b
	}
	oem := func(k string, v any) map[string]any {
		return ok(func(b map[string]any) { b["Oem"].(map[string]any)["CxlPool"].(map[string]any)[k] = v })
	}
	info := func(k string, v any) map[string]any {
		return ok(func(b map[string]any) { b["MemoryChunkInfo"].([]map[string]any)[0][k] = v })
	}
	links := func(l map[string]any) map[string]any {
		return ok(func(b map[string]any) { b["Links"] = l })
	}
	ref := func(uri string) []map[string]any { return []map[string]any{{"@odata.id": uri}} }
	noClient := func(l map[string]any) map[string]any {
		b := ok(func(map[string]any) {})
		if l != nil {
			b = links(l)
		}
		delete(b["Oem"].(map[string]any)["CxlPool"].(map[string]any), "Client")
		return b
	}
	size := strconv.Itoa(blockMiB << 20)
	tests := []struct {
		name   string
		body   any
		status int
		msg    string
	}{
		{"not JSON", "{", http.StatusBadRequest, "MalformedJSON"},
		{"array", "[]", http.StatusBadRequest, "UnrecognizedRequestBody"},
		{"empty", map[string]any{}, http.StatusBadRequest, "PropertyMissing"},
		{"unknown property", ok(func(b map[string]any) { b["Bogus"] = 1 }), http.StatusBadRequest, "PropertyUnknown"},
		{"storage", ok(func(b map[string]any) { b["ConnectionType"] = "Storage" }), http.StatusBadRequest, "PropertyValueNotInList"},
		{"Id", ok(func(b map[string]any) { b["Id"] = "x" }), http.StatusBadRequest, "PropertyNotWritable"},
		{"no chunk info", ok(func(b map[string]any) { b["MemoryChunkInfo"] = []any{} }), http.StatusBadRequest, "ArraySizeTooShort"},
		{"two chunks", ok(func(b map[string]any) {
			b["MemoryChunkInfo"] = append(b["MemoryChunkInfo"].([]map[string]any), b["MemoryChunkInfo"].([]map[string]any)[0])
		}), http.StatusBadRequest, "ArraySizeTooLong"},
		{"chunk info null", ok(func(b map[string]any) { b["MemoryChunkInfo"] = []any{nil} }), http.StatusBadRequest, "PropertyValueTypeError"},
		{"chunk not a URI", info("MemoryChunk", map[string]any{"@odata.id": "/redfish/v1/Systems/Host0"}), http.StatusBadRequest, "PropertyValueFormatError"},
		{"chunk Id not canonical", info("MemoryChunk", map[string]any{"@odata.id": chunksURI + "/01"}), http.StatusNotFound, "ResourceMissingAtURI"},
		{"no such chunk", info("MemoryChunk", map[string]any{"@odata.id": chunksURI + "/99"}), http.StatusNotFound, "ResourceMissingAtURI"},
		{"no access", info("AccessCapabilities", []string{}), http.StatusBadRequest, "ArraySizeTooShort"},
		{"execute", info("AccessCapabilities", []string{"Execute"}), http.StatusBadRequest, "PropertyValueNotInList"},
		{"access state", info("AccessState", "Optimized"), http.StatusBadRequest, "PropertyNotWritable"},
		{"no client", noClient(nil), http.StatusBadRequest, "PropertyMissing"},
		{"client empty", oem("Client", ""), http.StatusBadRequest, "PropertyValueFormatError"},
		{"client with slash", oem("Client", "a/b"), http.StatusBadRequest, "PropertyValueFormatError"},
		{"client too long", oem("Client", strings.Repeat("a", 65)), http.StatusBadRequest, "PropertyValueFormatError"},
		{"client named like the target", oem("Client", "Pool"), http.StatusBadRequest, "PropertyValueFormatError"},
		{"client not a string", oem("Client", 7), http.StatusBadRequest, "PropertyValueTypeError"},
		{"unknown client endpoint", noClient(map[string]any{"InitiatorEndpoints": ref(rdmaEndpointsURI + "/rack9")}), http.StatusNotFound, "ResourceMissingAtURI"},
		{"CXL initiator", links(map[string]any{"InitiatorEndpoints": ref(initiator(2))}), http.StatusBadRequest, "PropertyValueFormatError"},
		{"target as initiator", links(map[string]any{"InitiatorEndpoints": ref(rdmaEndpointsURI + "/Pool")}), http.StatusBadRequest, "PropertyValueIncorrect"},
		{"two initiators", links(map[string]any{"InitiatorEndpoints": append(ref(rdmaEndpointsURI+"/rack7"), ref(rdmaEndpointsURI+"/rack9")...)}), http.StatusBadRequest, "ArraySizeTooLong"},
		{"initiator and client differ", links(map[string]any{"InitiatorEndpoints": ref(rdmaEndpointsURI + "/rack7")}), http.StatusBadRequest, "PropertyValueConflict"},
		{"CXL target", links(map[string]any{"TargetEndpoints": ref("/redfish/v1/Fabrics/CXL/Endpoints/DCD-LD2")}), http.StatusBadRequest, "PropertyValueIncorrect"},
		{"links null", ok(func(b map[string]any) { b["Links"] = nil }), http.StatusBadRequest, "PropertyValueTypeError"},
		{"other OEM", ok(func(b map[string]any) { b["Oem"] = map[string]any{"Contoso": map[string]any{}} }), http.StatusBadRequest, "PropertyUnknown"},
		{"token", oem("Token", "abc"), http.StatusBadRequest, "PropertyNotWritable"},
		{"traffic", oem("Traffic", map[string]any{}), http.StatusBadRequest, "PropertyNotWritable"},
		{"offset negative", oem("Offset", -1), http.StatusBadRequest, "PropertyValueOutOfRange"},
		{"offset fraction", oem("Offset", 1.5), http.StatusBadRequest, "PropertyValueTypeError"},
		{"offset at end", oem("Offset", blockMiB<<20), http.StatusBadRequest, "PropertyValueOutOfRange"},
		{"offset huge", oem("Offset", json.Number("18446744073709551616")), http.StatusBadRequest, "PropertyValueOutOfRange"},
		{"length beyond", oem("Length", json.Number(size+"1")), http.StatusBadRequest, "PropertyValueOutOfRange"},
		{"offset and length beyond", ok(func(b map[string]any) {
			o := b["Oem"].(map[string]any)["CxlPool"].(map[string]any)
			o["Offset"], o["Length"] = 4096, blockMiB<<20
		}), http.StatusBadRequest, "PropertyValueOutOfRange"},
		{"expiry words", oem("Expiry", "tomorrow"), http.StatusBadRequest, "PropertyValueFormatError"},
		{"expiry zero duration", oem("Expiry", "PT0S"), http.StatusBadRequest, "PropertyValueFormatError"},
		{"expiry units out of order", oem("Expiry", "PT1S1H"), http.StatusBadRequest, "PropertyValueFormatError"},
		{"expiry centuries", oem("Expiry", "P99999D"), http.StatusBadRequest, "PropertyValueFormatError"},
		{"expiry past", oem("Expiry", "2001-01-01T00:00:00Z"), http.StatusBadRequest, "GeneralError"},
		{"expiry a number", oem("Expiry", 3600), http.StatusBadRequest, "PropertyValueTypeError"},
	}
	for _, tt := range tests {
		r := env.Admin.Post(rdmaConnectionsURI, tt.body)
		wantStatus(t, tt.name, r, tt.status, tt.msg)
		if r.Status >= 500 {
			t.Errorf("%s: got %s", tt.name, r)
		}
	}
	if got := members(t, env.Admin, rdmaConnectionsURI); len(got) != 1 {
		t.Errorf("refused requests left exports: %v", got)
	}
	// What a request may get right in several ways.
	for _, e := range []string{"PT90M", "P1DT2H", "PT0.5S", "2999-01-01T00:00:00Z"} {
		createExport(t, env.Admin, oem("Expiry", e))
	}
	createExport(t, env.Admin, info("AccessCapabilities", []string{"Write"}))
	createExport(t, env.Admin, links(map[string]any{"InitiatorEndpoints": ref(rdmaEndpointsURI + "/rack9/")}))
}

// TestExportsUnavailable: without an export service there is no RDMA
// fabric; with the verbs transport it is RoCEv2.
func TestExportsUnavailable(t *testing.T) {
	env := apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) { c.Exports = nil }})
	if got := members(t, env.Admin, "/redfish/v1/Fabrics"); !slices.Equal(got, []string{"/redfish/v1/Fabrics/CXL"}) {
		t.Errorf("fabrics without exports %v, want only CXL", got)
	}
	for _, u := range []string{rdmaFabricURI, rdmaConnectionsURI, rdmaEndpointsURI + "/Pool"} {
		wantStatus(t, "GET "+u, env.Admin.Get(u), http.StatusNotFound, "")
	}

	env = apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) { c.ExportVerbs, c.ExportAddr = true, nil }})
	f := env.Admin.GetOK(rdmaFabricURI)
	if f["FabricType"] != "RoCEv2" || get(f, "Status", "State") != "Disabled" || get(f, "Oem", "CxlPool", "Address") != nil {
		t.Errorf("verbs fabric without a server: got %v", f)
	}
	if p := env.Admin.GetOK(rdmaEndpointsURI + "/Pool"); p["EndpointProtocol"] != "RoCEv2" || p["IPTransportDetails"] != nil {
		t.Errorf("verbs pool target without a server: got %v", p)
	}
	col := env.Admin.GetOK("/redfish/v1/Fabrics?$expand=.")
	if n := len(col["Members"].([]any)); n != 2 || get(col, "Members", 1, "FabricType") != "RoCEv2" {
		t.Errorf("expanded fabrics: got %v", col["Members"])
	}
}
