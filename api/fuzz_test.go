package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"cxlpool/api/apitest"
)

// knownPaths seed the request generators with real URIs.
var knownPaths = []string{
	"/redfish", "/redfish/v1", "/redfish/v1/", "/redfish/v1/odata", "/redfish/v1/$metadata",
	"/redfish/v1/SessionService", "/redfish/v1/SessionService/Sessions", "/redfish/v1/SessionService/Sessions/1-x",
	"/redfish/v1/AccountService", "/redfish/v1/AccountService/Accounts", "/redfish/v1/AccountService/Accounts/1",
	"/redfish/v1/AccountService/Accounts/2", "/redfish/v1/AccountService/Accounts/x", "/redfish/v1/AccountService/Roles",
	"/redfish/v1/AccountService/Roles/Operator", "/redfish/v1/Managers", "/redfish/v1/Managers/FM",
	"/redfish/v1/Managers/FM/LogServices", "/redfish/v1/Managers/FM/LogServices/EventLog/Entries",
	"/redfish/v1/Managers/FM/LogServices/AuditLog/Entries/1", "/redfish/v1/Managers/FM/LogServices/EventLog/Actions/LogService.ClearLog",
	"/redfish/v1/TaskService", "/redfish/v1/TaskService/Tasks", "/redfish/v1/TaskService/TaskMonitors/1",
	"/redfish/v1/EventService", "/redfish/v1/EventService/Subscriptions", "/redfish/v1/EventService/Subscriptions/1",
	"/redfish/v1/Registries", "/redfish/v1/Registries/Base.1.22.1", "/metrics", "/nope", "/redfish/v1/%zz",
	"/redfish/v1/AccountService/Accounts/99999999999999999999999",
	"/redfish/v1/Chassis", "/redfish/v1/Chassis/Pool", "/redfish/v1/Chassis/Pool/PCIeDevices/DCD",
	"/redfish/v1/Chassis/Pool/PCIeDevices/DCD/CXLLogicalDevices/0/MemoryRegions/0",
	"/redfish/v1/Chassis/Pool/PCIeDevices/DCD/CXLLogicalDevices/65536",
	"/redfish/v1/Chassis/Pool/FabricAdapters/DCD/Ports/0", "/redfish/v1/Chassis/Pool/MemoryDomains/Pool",
	"/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks", "/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks/1",
	"/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks/2", "/redfish/v1/Fabrics/CXL",
	"/redfish/v1/Fabrics/CXL/Endpoints/Host0", "/redfish/v1/Fabrics/CXL/Endpoints/DCD-LD01", "/redfish/v1/Fabrics/CXL/Zones/Host1",
	"/redfish/v1/Fabrics/CXL/Connections", "/redfish/v1/Fabrics/CXL/Connections/1", "/redfish/v1/Fabrics/CXL/Connections/2",
	"/redfish/v1/Systems", "/redfish/v1/Systems/Host0/Memory", "/redfish/v1/Systems/Host0/Memory/1", "/redfish/v1/Systems/Host01",
	"/redfish/v1/UpdateService/FirmwareInventory/FM",
	"/redfish/v1/Fabrics/RDMA", "/redfish/v1/Fabrics/RDMA/Endpoints/Pool", "/redfish/v1/Fabrics/RDMA/Endpoints/rack7",
	"/redfish/v1/Fabrics/RDMA/Connections", "/redfish/v1/Fabrics/RDMA/Connections/0123456789abcdef",
}

var queries = []string{"", "?$top=2", "?$skip=1&$top=1", "?$select=Id,Name", "?$expand=.", "?$expand=*($levels=9)",
	"?$top=-3", "?$select=", "?$expand=((", "?$skip=99999999999999999999", "?only", "?$select=Status/Health/X"}

var bodies = []string{"", "{}", "null", "[]", `{"UserName":"u1","Password":"password-12","RoleId":"ReadOnly"}`,
	`{"SessionTimeout":60}`, `{"SessionTimeout":"x"}`, `{"Password":"x"}`, `{"Destination":"http://127.0.0.1:1/x","Protocol":"Redfish"}`,
	`{"Oem":{"CxlPool":{"SystemId":"Host9"}}}`, `{"Locked":false}`, `{"RoleId":"HostUser"}`, "\x00\xff", `{"a":`,
	`{"UserName":"admin","Password":"admin-password-1"}`, `{"AccountLockoutThreshold":0}`, `{"Enabled":false}`,
	`{"MemoryChunkSizeMiB":256,"AddressRangeType":"Volatile"}`, `{"MemoryChunkSizeMiB":256,"Oem":{"CxlPool":{"Sharable":true,"Region":1}}}`,
	`{"MemoryChunkSizeMiB":-1}`, `{"MemoryChunkSizeMiB":9e99}`, `{"MemoryChunkSizeMiB":256,"Oem":{"CxlPool":{"Region":-5}}}`,
	`{"MemoryChunkSizeMiB":256,"Oem":{"CxlPool":null}}`, `{"MemoryChunkSizeMiB":256,"Oem":[]}`,
	`{"ConnectionType":"Memory","MemoryChunkInfo":[{"MemoryChunk":{"@odata.id":"/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks/1"}}],"Links":{"InitiatorEndpoints":[{"@odata.id":"/redfish/v1/Fabrics/CXL/Endpoints/Host0"}]}}`,
	`{"MemoryChunkInfo":[{"MemoryChunk":{"@odata.id":"/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks/2"}}],"Links":{"InitiatorEndpoints":[{"@odata.id":"/redfish/v1/Fabrics/CXL/Endpoints/Host1"},{"@odata.id":"/redfish/v1/Fabrics/CXL/Endpoints/Host2"}]}}`,
	`{"MemoryChunkInfo":[{"MemoryChunk":null}],"Links":{"InitiatorEndpoints":[{}]}}`, `{"MemoryChunkInfo":[{}],"Links":[]}`,
	`{"MemoryChunkInfo":[{"MemoryChunk":{"@odata.id":7}}],"Links":{"InitiatorEndpoints":"Host0"}}`,
	`{"MemoryChunkInfo":[{"MemoryChunk":{"@odata.id":"/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks/1"}}],"Oem":{"CxlPool":{"Client":"rack7","Offset":4096,"Expiry":"PT1H"}}}`,
	`{"MemoryChunkInfo":[{"MemoryChunk":{"@odata.id":"/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks/1"},"AccessCapabilities":[]}],"Links":{"InitiatorEndpoints":[{"@odata.id":"/redfish/v1/Fabrics/RDMA/Endpoints/rack7"}]},"Oem":{"CxlPool":{"Length":18446744073709551615,"Expiry":"P"}}}`}

var methods = []string{"GET", "HEAD", "POST", "PATCH", "PUT", "DELETE", "OPTIONS", "TRACE", "PROPFIND", "X"}

// checkNo5xx fails unless the response is a non-5xx (or the 501 Redfish
// requires for unsupported $-queries), with a valid error body if any.
func checkNo5xx(t *testing.T, method, target string, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 && rec.Code != http.StatusNotImplemented {
		t.Fatalf("%s %s: got %d: %s", method, target, rec.Code, rec.Body.Bytes())
	}
	if rec.Code >= 400 && method != http.MethodHead {
		var e struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal(rec.Body.Bytes(), &e) != nil || !strings.HasPrefix(e.Error.Code, "Base.1.22.") {
			t.Fatalf("%s %s: %d without a Redfish error body: %q", method, target, rec.Code, rec.Body.Bytes())
		}
	}
}

func serve(env *apitest.Env, method, target string, body []byte, auth int) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, "/", bytes.NewReader(body))
	req.Method = method
	req.URL.Path, req.URL.RawQuery, _ = strings.Cut(target, "?")
	req.RequestURI = target
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	switch auth % 4 {
	case 1:
		req.Header.Set("X-Auth-Token", env.Admin.Token)
	case 2:
		req.Header.Set("X-Auth-Token", env.Host0.Token)
	case 3:
		req.SetBasicAuth(apitest.UserReadOnly, apitest.UserPassword)
	}
	rec := httptest.NewRecorder()
	env.Server.Handler().ServeHTTP(rec, req)
	return rec
}

// FuzzHandler sends arbitrary methods, paths and bodies: the service must
// never answer 5xx to them (nor panic), and every error is a registry one.
func FuzzHandler(f *testing.F) {
	for i, p := range knownPaths {
		f.Add(methods[i%len(methods)], p+queries[i%len(queries)], []byte(bodies[i%len(bodies)]), i)
	}
	env := apitest.NewServer(f)
	f.Fuzz(func(t *testing.T, method, target string, body []byte, auth int) {
		if !strings.HasPrefix(target, "/") || strings.ContainsAny(target, " \r\n\t#") || method == "" ||
			strings.ContainsAny(method, " \r\n\t()<>@,;:\\\"/[]?={}") || method == http.MethodConnect {
			return // not something net/http would hand to a handler
		}
		if strings.Contains(target, "SessionService/Sessions/") && method == http.MethodDelete {
			return // would log the fuzzing clients out
		}
		checkNo5xx(t, method, target, serve(env, method, target, body, auth))
	})
}

// TestRandomRequests is FuzzHandler's deterministic sibling for every
// test run: a few thousand requests mixing real paths, queries, bodies,
// methods and principals.
func TestRandomRequests(t *testing.T) {
	env := apitest.NewServer(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 1500 {
		method := methods[rng.IntN(len(methods))]
		path := knownPaths[rng.IntN(len(knownPaths))]
		if rng.IntN(4) == 0 {
			path += "/" + string(rune('a'+rng.IntN(26)))
		}
		target := path + queries[rng.IntN(len(queries))]
		body := []byte(bodies[rng.IntN(len(bodies))])
		if rng.IntN(8) == 0 {
			body = make([]byte, rng.IntN(64))
			for j := range body {
				body[j] = byte(rng.IntN(256))
			}
		}
		if strings.Contains(target, "SessionService/Sessions/") && method == http.MethodDelete {
			continue
		}
		auth := rng.IntN(4)
		if method == http.MethodPatch && strings.Contains(path, "Accounts/") && auth == 1 {
			continue // would disable or rename the clients' own accounts
		}
		rec := serve(env, method, target, body, auth)
		checkNo5xx(t, method, target, rec)
		if i%50 == 0 && rec.Code < 300 && rec.Code != http.StatusNoContent && method == http.MethodGet &&
			strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") && !strings.Contains(target, "$select") &&
			strings.HasPrefix(target, "/redfish/v1/") && !strings.Contains(target, "Registries/Base") && !strings.Contains(target, "/odata") {
			apitest.Validate(t, rec.Body.Bytes())
		}
	}
}

// capacityWrites are the capacity routes that take bodies or change
// state, with their method and a body valid for them, for mutation.
var capacityWrites = []struct{ method, path, body string }{
	{"POST", "/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks",
		`{"MemoryChunkSizeMiB":256,"AddressRangeType":"Volatile","DisplayName":"x","Oem":{"CxlPool":{"Sharable":true,"Region":1,"Name":"x"}}}`},
	{"POST", "/redfish/v1/Fabrics/CXL/Connections",
		`{"ConnectionType":"Memory","MemoryChunkInfo":[{"MemoryChunk":{"@odata.id":"/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks/1"},"AccessCapabilities":["Read","Write"]}],"Links":{"InitiatorEndpoints":[{"@odata.id":"/redfish/v1/Fabrics/CXL/Endpoints/Host0"},{"@odata.id":"/redfish/v1/Fabrics/CXL/Endpoints/Host1"}],"TargetEndpoints":[{"@odata.id":"/redfish/v1/Fabrics/CXL/Endpoints/DCD-LD0"}]}}`},
	{"POST", "/redfish/v1/Fabrics/CXL/Connections",
		`{"MemoryChunkInfo":[{"MemoryChunk":{"@odata.id":"/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks/2"}}],"Links":{"InitiatorEndpoints":[{"@odata.id":"/redfish/v1/Fabrics/CXL/Endpoints/Host0"}]}}`},
	{"DELETE", "/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks/3", ""},
	{"DELETE", "/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks/4", ""},
	{"DELETE", "/redfish/v1/Fabrics/CXL/Connections/1", ""},
	{"DELETE", "/redfish/v1/Fabrics/CXL/Connections/2", ""},
	{"DELETE", "/redfish/v1/Fabrics/CXL/Connections/3", ""},
}

// strange are JSON values to put where a valid body has something else.
var strange = []any{nil, "", "x", -1, 0, 1, 1.5, 1e300, "9999999999999999999999", true, []any{}, []any{nil},
	map[string]any{}, map[string]any{"@odata.id": nil}, "/redfish/v1/Fabrics/CXL/Endpoints/Host99",
	"/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks/0", strings.Repeat("a", 300), "\u0000"}

// mutate replaces one randomly chosen value (or key) in a JSON document.
func mutate(rng *rand.Rand, v any) any {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 || rng.IntN(6) == 0 {
			x[fmt.Sprint("K", rng.IntN(3))] = strange[rng.IntN(len(strange))]
			return x
		}
		keys := slices.Sorted(maps.Keys(x))
		k := keys[rng.IntN(len(keys))]
		if rng.IntN(3) == 0 {
			x[k] = strange[rng.IntN(len(strange))]
		} else {
			x[k] = mutate(rng, x[k])
		}
		return x
	case []any:
		if len(x) == 0 || rng.IntN(4) == 0 {
			return append(x, strange[rng.IntN(len(strange))])
		}
		i := rng.IntN(len(x))
		x[i] = mutate(rng, x[i])
		return x
	}
	return strange[rng.IntN(len(strange))]
}

// TestRandomCapacityRequests sends mutated versions of valid reserve and
// connect bodies, and deletes, to the capacity write routes as every kind
// of principal: no 5xx, every error a registry one. Valid requests do
// reach the device, so the flows run under the random traffic too.
func TestRandomCapacityRequests(t *testing.T) {
	env := apitest.NewServer(t)
	rng := rand.New(rand.NewPCG(3, 4))
	// Chunk 1 (sharable, the admin's) and chunk 2 (Host0's) exist at
	// first, so that valid connects do start grants.
	for _, auth := range []int{1, 2} {
		if rec := serve(env, http.MethodPost, capacityWrites[0].path, []byte(capacityWrites[0].body), auth); rec.Code != http.StatusCreated {
			t.Fatalf("seed chunk: %d %s", rec.Code, rec.Body)
		}
	}
	statuses := map[int]int{}
	for range 400 {
		w := capacityWrites[rng.IntN(len(capacityWrites))]
		body := []byte(w.body)
		switch r := rng.IntN(8); {
		case w.body != "" && r < 5:
			var v any
			if err := json.Unmarshal(body, &v); err != nil {
				t.Fatal(err)
			}
			for range 1 + rng.IntN(3) {
				v = mutate(rng, v)
			}
			body, _ = json.Marshal(v)
		case r == 5:
			body = body[:rng.IntN(len(body)+1)]
		}
		method := w.method
		if rng.IntN(10) == 0 {
			method = []string{http.MethodPatch, http.MethodPut, http.MethodGet, http.MethodPost, http.MethodDelete}[rng.IntN(5)]
		}
		// Mostly authorised principals (admin, Host0, reader), some
		// anonymous.
		rec := serve(env, method, w.path, body, []int{1, 1, 2, 2, 3, 0}[rng.IntN(6)])
		checkNo5xx(t, method, w.path, rec)
		statuses[rec.Code]++
	}
	t.Logf("statuses: %v", statuses)
	// Whatever the traffic started must settle without a 5xx.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := env.App.Manager.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks?$expand=.",
		"/redfish/v1/Fabrics/CXL/Connections?$expand=.", "/redfish/v1/Chassis/Pool/MemoryDomains/Pool"} {
		env.Admin.GetOK(p)
	}
}
