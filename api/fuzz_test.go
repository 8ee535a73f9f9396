package api_test

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
}

var queries = []string{"", "?$top=2", "?$skip=1&$top=1", "?$select=Id,Name", "?$expand=.", "?$expand=*($levels=9)",
	"?$top=-3", "?$select=", "?$expand=((", "?$skip=99999999999999999999", "?only", "?$select=Status/Health/X"}

var bodies = []string{"", "{}", "null", "[]", `{"UserName":"u1","Password":"password-12","RoleId":"ReadOnly"}`,
	`{"SessionTimeout":60}`, `{"SessionTimeout":"x"}`, `{"Password":"x"}`, `{"Destination":"http://127.0.0.1:1/x","Protocol":"Redfish"}`,
	`{"Oem":{"CxlPool":{"SystemId":"Host9"}}}`, `{"Locked":false}`, `{"RoleId":"HostUser"}`, "\x00\xff", `{"a":`,
	`{"UserName":"admin","Password":"admin-password-1"}`, `{"AccountLockoutThreshold":0}`, `{"Enabled":false}`}

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
