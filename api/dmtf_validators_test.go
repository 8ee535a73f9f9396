package api_test

// Tests that hold the points DMTF's Redfish-Service-Validator and
// Redfish-Protocol-Validator failed on (issue 12 §2), so that the service
// stays clean without the Python tools.

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/api/apitest"
	"cxlpool/api/oemschema"
)

// lockedBuffer is a log sink shared by the server's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestNoContentOverHTTP2 serves the API over TLS with HTTP/2: a 204 (a
// DELETE, held back by the audit log) arrives as 204 and the daemon logs
// no failed request (an empty write to a 204 is an error in HTTP/2).
func TestNoContentOverHTTP2(t *testing.T) {
	var logs lockedBuffer
	env := apitest.NewServer(t, apitest.Options{Log: &logs})
	ts := httptest.NewUnstartedServer(env.Server.Handler())
	ts.EnableHTTP2 = true
	ts.StartTLS()
	t.Cleanup(ts.Close)
	client := ts.Client()

	do := func(method, path, token string, body any) *http.Response {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, err := json.Marshal(body)
			if err != nil {
				t.Fatal(err)
			}
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequest(method, ts.URL+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		if rd != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if token != "" {
			req.Header.Set("X-Auth-Token", token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("%s %s went over %s, want HTTP/2", method, path, resp.Proto)
		}
		return resp
	}
	login := do(http.MethodPost, "/redfish/v1/SessionService/Sessions", "",
		map[string]string{"UserName": "admin", "Password": apitest.AdminPassword})
	if login.StatusCode != http.StatusCreated {
		t.Fatalf("login over h2: got %d, want 201", login.StatusCode)
	}
	tok, sess := login.Header.Get("X-Auth-Token"), login.Header.Get("Location")
	if r := do(http.MethodGet, "/redfish/v1/SessionService", tok, nil); r.StatusCode != http.StatusOK {
		t.Errorf("GET over h2: got %d, want 200", r.StatusCode)
	}
	if r := do(http.MethodDelete, sess, tok, nil); r.StatusCode != http.StatusNoContent {
		t.Errorf("DELETE %s over h2: got %d, want 204", sess, r.StatusCode)
	}
	if l := logs.String(); strings.Contains(l, "level=ERROR") || strings.Contains(l, "status=500") {
		t.Errorf("the daemon logged a failure for a 204:\n%s", l)
	}
	// The audit entry records the status the client got.
	entries := env.Admin.GetOK("/redfish/v1/Managers/FM/LogServices/AuditLog/Entries")
	found := false
	for _, m := range entries["Members"].([]any) {
		e := m.(map[string]any)
		if strings.Contains(e["Message"].(string), "DELETE "+sess+": 204") {
			found = true
		}
	}
	if !found {
		t.Errorf("no audit entry for DELETE %s with 204", sess)
	}
}

// TestODataVersion: a request for an OData version other than 4.0 is 412
// everywhere, the public service root included; 4.0 and none pass.
func TestODataVersion(t *testing.T) {
	env := apitest.NewServer(t)
	for _, tc := range []struct {
		name   string
		c      *apitest.Client
		uri, v string
		want   int
	}{
		{"anonymous root 4.1", env.Anon, "/redfish/v1", "4.1", http.StatusPreconditionFailed},
		{"admin root 4.1", env.Admin, "/redfish/v1", "4.1", http.StatusPreconditionFailed},
		{"admin resource 4.01", env.Admin, "/redfish/v1/Managers/FM", "4.01", http.StatusPreconditionFailed},
		{"metadata 5.0", env.Anon, "/redfish/v1/$metadata", "5.0", http.StatusPreconditionFailed},
		{"root 4.0", env.Anon, "/redfish/v1", "4.0", http.StatusOK},
		{"resource 4.0", env.Admin, "/redfish/v1/Managers/FM", "4.0", http.StatusOK},
		{"resource none", env.Admin, "/redfish/v1/Managers/FM", "", http.StatusOK},
	} {
		r := tc.c.Get(tc.uri, "OData-Version", tc.v)
		msg := ""
		if tc.want == http.StatusPreconditionFailed {
			msg = "HeaderInvalid"
			apitest.Validate(t, r.Body)
		}
		wantStatus(t, tc.name, r, tc.want, msg)
	}
}

// TestLoginAtSessionsMembers: DSP0266 allows creating a session by POST
// to the collection's Members as well as to the collection.
func TestLoginAtSessionsMembers(t *testing.T) {
	env := apitest.NewServer(t)
	r := env.Anon.Post("/redfish/v1/SessionService/Sessions/Members",
		map[string]string{"UserName": "admin", "Password": apitest.AdminPassword})
	if r.Status != http.StatusCreated {
		t.Fatalf("POST Sessions/Members: got %d, want 201: %s", r.Status, r.Body)
	}
	loc := r.Header.Get("Location")
	if !regexp.MustCompile(`^/redfish/v1/SessionService/Sessions/[^/]+$`).MatchString(loc) || strings.HasSuffix(loc, "/Members") {
		t.Errorf("Location = %q, want the new session's URI", loc)
	}
	apitest.Validate(t, r.Body)
	if got := env.Admin.Get(loc, "X-Auth-Token", r.Header.Get("X-Auth-Token")); got.Status != http.StatusOK {
		t.Errorf("GET %s with the new token: got %d, want 200", loc, got.Status)
	}
	wantStatus(t, "wrong password at Members", env.Anon.Post("/redfish/v1/SessionService/Sessions/Members",
		map[string]string{"UserName": "admin", "Password": "wrong"}), http.StatusUnauthorized, "")
	// A token holder POSTing there logs in too (it was 405).
	if got := env.Admin.Post("/redfish/v1/SessionService/Sessions/Members",
		map[string]string{"UserName": "admin", "Password": apitest.AdminPassword}); got.Status != http.StatusCreated {
		t.Errorf("POST Sessions/Members with a token: got %d, want 201", got.Status)
	}
}

// TestAllowOnGet: GET and HEAD answers carry Allow with the methods the
// caller may use on the resource; errors other than 405 carry none.
func TestAllowOnGet(t *testing.T) {
	env := apitest.NewServer(t)
	for _, tc := range []struct {
		name  string
		c     *apitest.Client
		uri   string
		allow string
	}{
		{"anonymous root", env.Anon, "/redfish/v1", "GET, HEAD"},
		{"admin root", env.Admin, "/redfish/v1", "GET, HEAD"},
		{"admin session service", env.Admin, "/redfish/v1/SessionService", "GET, HEAD, PATCH"},
		{"reader session service", env.ReadOnly, "/redfish/v1/SessionService", "GET, HEAD"},
		{"admin accounts", env.Admin, "/redfish/v1/AccountService/Accounts", "GET, HEAD, POST"},
		{"reader accounts", env.ReadOnly, "/redfish/v1/AccountService/Accounts", "GET, HEAD"},
		{"admin sessions", env.Admin, "/redfish/v1/SessionService/Sessions", "GET, HEAD, POST"},
		{"admin metadata", env.Admin, "/redfish/v1/$metadata", "GET, HEAD"},
		{"admin manager", env.Admin, "/redfish/v1/Managers/FM", "GET, HEAD, PATCH"},
	} {
		for _, m := range []string{http.MethodGet, http.MethodHead} {
			r := tc.c.Do(m, tc.uri, nil)
			if r.Status != http.StatusOK {
				t.Errorf("%s %s %s: got %d, want 200", tc.name, m, tc.uri, r.Status)
				continue
			}
			if got := r.Header.Get("Allow"); got != tc.allow {
				t.Errorf("%s %s %s: Allow = %q, want %q", tc.name, m, tc.uri, got, tc.allow)
			}
		}
	}
	if r := env.Admin.Get("/redfish/v1/AccountService/Accounts/999"); r.Status != http.StatusNotFound || r.Header.Get("Allow") != "" {
		t.Errorf("GET of a missing account: got %d with Allow %q, want 404 and none", r.Status, r.Header.Get("Allow"))
	}
}

// TestLinkDescribedBy: resources and collections carry Link: <the JSON
// schema of their @odata.type>; rel=describedby, its version that of the
// type.
func TestLinkDescribedBy(t *testing.T) {
	env := apitest.NewServer(t)
	link := regexp.MustCompile(`^<([^>]+)>; rel=describedby$`)
	for _, uri := range []string{
		"/redfish/v1",
		"/redfish/v1/SessionService/Sessions",
		"/redfish/v1/AccountService",
		"/redfish/v1/AccountService/Accounts",
		"/redfish/v1/Managers/FM/NetworkProtocol",
		"/redfish/v1/Systems",
		"/redfish/v1/Managers/FM/LogServices/EventLog/Entries",
	} {
		for _, m := range []string{http.MethodGet, http.MethodHead} {
			r := env.Admin.Do(m, uri, nil)
			h := r.Header.Get("Link")
			sm := link.FindStringSubmatch(h)
			if sm == nil {
				t.Errorf("%s %s: Link = %q, want <schema>; rel=describedby", m, uri, h)
				continue
			}
			if m == http.MethodHead {
				continue
			}
			typ, _ := r.JSON(t)["@odata.type"].(string)
			file, _, err := apitest.SchemaFile(typ)
			if err != nil {
				t.Fatal(err)
			}
			if want := "http://redfish.dmtf.org/schemas/v1/" + file; sm[1] != want {
				t.Errorf("GET %s (%s): describedby %s, want %s", uri, typ, sm[1], want)
			}
		}
	}
	if r := env.Admin.Get("/redfish/v1/Nope"); r.Header.Get("Link") != "" {
		t.Errorf("404 carries Link %q", r.Header.Get("Link"))
	}
}

// TestLogEntryCollectionsInline: LogEntryCollection's Members are
// OData.AutoExpand in DMTF's schema, so every log's Entries list each
// entry in full without $expand.
func TestLogEntryCollectionsInline(t *testing.T) {
	env := apitest.NewServer(t)
	// Make an audit entry and an event.
	env.Admin.Patch("/redfish/v1/SessionService", map[string]any{"SessionTimeout": 600})
	env.Admin.Post("/redfish/v1/SessionService/Sessions", map[string]string{"UserName": "admin", "Password": "wrong"})
	for _, log := range []string{"EventLog", "AuditLog"} {
		uri := "/redfish/v1/Managers/FM/LogServices/" + log + "/Entries"
		col := env.Admin.GetOK(uri)
		members, _ := col["Members"].([]any)
		if len(members) == 0 && log == "AuditLog" {
			t.Fatalf("%s: no entries", uri)
		}
		if n := col["Members@odata.count"]; n != float64(len(members)) {
			t.Errorf("%s: Members@odata.count %v for %d members", uri, n, len(members))
		}
		for i, m := range members {
			e, _ := m.(map[string]any)
			var missing []string
			for _, p := range []string{"@odata.id", "@odata.type", "Id", "Name", "EntryType", "Created", "Severity", "Message", "MessageId"} {
				if _, ok := e[p]; !ok {
					missing = append(missing, p)
				}
			}
			if len(missing) > 0 {
				t.Errorf("%s member %d lacks %v: %v", uri, i, missing, e)
			}
			if e["@odata.type"] != "#LogEntry.v1_21_0.LogEntry" {
				t.Errorf("%s member %d: @odata.type %v", uri, i, e["@odata.type"])
			}
			// The inline member is the entry as its own URI serves it.
			own := env.Admin.GetOK(e["@odata.id"].(string))
			if d := cmp.Diff(own, e); d != "" {
				t.Errorf("%s member %d differs from its resource (-own +inline):\n%s", uri, i, d)
			}
		}
		// $top pages the inline members.
		if len(members) > 1 {
			page := env.Admin.GetOK(uri + "?$top=1")
			if ms := page["Members"].([]any); len(ms) != 1 || ms[0].(map[string]any)["Id"] == nil || page["Members@odata.nextLink"] == nil {
				t.Errorf("%s?$top=1: %v", uri, page)
			}
		}
	}
}

// TestServiceRootLinksReadable: for every role, each link of the service
// root answers that role 200, and what a role may read is linked.
func TestServiceRootLinksReadable(t *testing.T) {
	env := apitest.NewServer(t)
	for _, tc := range []struct {
		name string
		c    *apitest.Client
		// want and notWant are top-level properties that must (not) be
		// linked for the role.
		want, notWant []string
	}{
		{"Administrator", env.Admin, []string{"AccountService", "CertificateService", "Managers", "Systems", "SessionService"}, nil},
		{"Operator", env.Operator, []string{"AccountService", "Managers", "Systems"}, nil},
		{"ReadOnly", env.ReadOnly, []string{"AccountService", "Managers", "Systems"}, nil},
		{"HostUser", env.Host0, []string{"SessionService", "Systems"}, []string{"CertificateService"}},
	} {
		root := tc.c.GetOK("/redfish/v1")
		for _, p := range tc.want {
			if root[p] == nil {
				t.Errorf("%s: service root lacks %s", tc.name, p)
			}
		}
		for _, p := range tc.notWant {
			if root[p] != nil {
				t.Errorf("%s: service root links %s", tc.name, p)
			}
		}
		b, _ := json.Marshal(root)
		for _, l := range apitest.Links(b) {
			if r := tc.c.Get(l); r.Status != http.StatusOK {
				t.Errorf("%s: service root links %s, which answers %d", tc.name, l, r.Status)
			}
		}
	}
	// An anonymous caller is shown every service, to find where to log in.
	anon := env.Anon.GetOK("/redfish/v1")
	if anon["CertificateService"] == nil || anon["AccountService"] == nil {
		t.Errorf("anonymous service root: %v", anon)
	}
	// Stale credentials get the anonymous view, not an error.
	if r := env.Anon.Get("/redfish/v1", "X-Auth-Token", "stale"); r.Status != http.StatusOK {
		t.Errorf("service root with a stale token: got %d, want 200", r.Status)
	}
}

// TestOemObjectsTyped walks the service with granted, shared and exported
// capacity, as the administrator and as a host: every Oem.CxlPool object
// carries the @odata.type of its OEM type and validates against the OEM
// JSON schema the box publishes (apitest.Validate checks both), and the
// walk meets the OEM types such a service shows.
func TestOemObjectsTyped(t *testing.T) {
	env := apitest.NewServer(t)
	a := env.Admin
	connect(t, env.Host0, reserve(t, env.Host0, 2*blockMiB, nil), 0)
	shared := reserve(t, a, blockMiB, map[string]any{"Sharable": true, "Name": "shared"})
	connect(t, a, shared, 0, 1)
	exported := reserve(t, a, blockMiB, nil)
	connect(t, a, exported, 2)
	createExport(t, a, exportBody(exported, "rack7", map[string]any{"Expiry": "PT1H"}))

	for _, tc := range []struct {
		c    *apitest.Client
		want []string
	}{
		{a, []string{"ComputerSystem", "Connection", "DynamicCapacityDevice", "Export", "Fabric", "LogEntry",
			"ManagerAccount", "Memory", "MemoryChunks", "MemoryDomain", "MetricReport", "TelemetryService", "Fan"}},
		{env.Host0, []string{"ComputerSystem", "Connection", "ManagerAccount", "Memory", "MemoryChunks", "MemoryDomain"}},
	} {
		seen := map[string]bool{}
		types := map[string]bool{}
		queue := []string{"/redfish/v1", tc.c.Session, "/redfish/v1/AccountService/Accounts?$expand=."}
		for len(queue) > 0 {
			u := queue[0]
			queue = queue[1:]
			if seen[u] || strings.Contains(u, "/TaskMonitors/") {
				continue
			}
			seen[u] = true
			r := tc.c.Get(u)
			if r.Status != http.StatusOK {
				continue // what a role may not read is TestServiceRootLinksReadable's
			}
			apitest.Validate(t, r.Body)
			oemTypes(r.JSON(t), types)
			queue = append(queue, apitest.Links(r.Body)...)
		}
		for _, w := range tc.want {
			if !types["#CxlPool.v1_0_0."+w] {
				t.Errorf("%s: walked %d resources and met no Oem.CxlPool of type %s (met %v)", tc.c.User, len(seen), w, types)
			}
		}
	}
}

// oemTypes collects the @odata.type of every Oem.CxlPool object in v.
func oemTypes(v any, into map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		if oem, ok := x["Oem"].(map[string]any); ok {
			if cp, ok := oem["CxlPool"].(map[string]any); ok {
				typ, _ := cp["@odata.type"].(string)
				into[typ] = true
			}
		}
		for _, e := range x {
			oemTypes(e, into)
		}
	case []any:
		for _, e := range x {
			oemTypes(e, into)
		}
	}
}

// TestSchemaStore: $metadata references the OEM CSDL at the box's own
// schema store, which serves it without login (as $metadata); the
// JsonSchemas collection lists the OEM JSON schema, whose Location serves
// the file; and the project's validator refuses a wrong OEM object.
func TestSchemaStore(t *testing.T) {
	env := apitest.NewServer(t)
	md := string(env.Anon.Get("/redfish/v1/$metadata").Body)
	for _, want := range []string{`<edmx:Reference Uri="` + oemschema.CSDLURI + `">`,
		`<edmx:Include Namespace="CxlPool"/>`, `<edmx:Include Namespace="CxlPool.v1_0_0"/>`} {
		if !strings.Contains(md, want) {
			t.Errorf("$metadata lacks %s", want)
		}
	}
	r := env.Anon.Get(oemschema.CSDLURI)
	if r.Status != http.StatusOK || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/xml") || !bytes.Equal(r.Body, oemschema.CSDL()) {
		t.Errorf("GET %s: %d %s, %d bytes; want the CSDL", oemschema.CSDLURI, r.Status, r.Header.Get("Content-Type"), len(r.Body))
	}
	wantStatus(t, "another schema file", env.Admin.Get("/redfish/v1/schemas/Nope_v1.xml"), http.StatusNotFound, "ResourceNotFound")

	root := env.Admin.GetOK("/redfish/v1")
	if get(root, "JsonSchemas", "@odata.id") != "/redfish/v1/JsonSchemas" {
		t.Fatalf("service root JsonSchemas: %v", root["JsonSchemas"])
	}
	col := env.Admin.GetOK("/redfish/v1/JsonSchemas")
	ids := linkIDs(col["Members"])
	if len(ids) != 1 {
		t.Fatalf("JsonSchemas members: %v", ids)
	}
	f := env.Admin.GetOK(ids[0])
	if f["Schema"] != "#CxlPool.v1_0_0" {
		t.Errorf("JsonSchemaFile Schema = %v", f["Schema"])
	}
	loc, _ := get(f, "Location", 0, "Uri").(string)
	r = env.Admin.Get(loc)
	if r.Status != http.StatusOK || !bytes.Equal(r.Body, oemschema.JSONSchema()) {
		t.Errorf("GET %s: %d, %d bytes; want the JSON schema", loc, r.Status, len(r.Body))
	}
	wantStatus(t, "JSON schema without login", env.Anon.Get(loc), http.StatusUnauthorized, "")

	v, err := apitest.SharedValidator()
	if err != nil {
		t.Fatal(err)
	}
	good := env.Admin.Get("/redfish/v1/Systems/Host0").Body
	if err := v.Check(good); err != nil {
		t.Fatalf("a served system does not validate: %v", err)
	}
	for name, edit := range map[string]func(cp map[string]any){
		"no @odata.type":        func(cp map[string]any) { delete(cp, "@odata.type") },
		"unknown property":      func(cp map[string]any) { cp["Quota"] = 1 },
		"wrong type":            func(cp map[string]any) { cp["QuotaMiB"] = "lots" },
		"unknown OEM type":      func(cp map[string]any) { cp["@odata.type"] = "#CxlPool.v1_0_0.Nope" },
		"another type's schema": func(cp map[string]any) { cp["@odata.type"] = "#CxlPool.v1_0_0.Fan" },
	} {
		var m map[string]any
		if err := json.Unmarshal(good, &m); err != nil {
			t.Fatal(err)
		}
		edit(m["Oem"].(map[string]any)["CxlPool"].(map[string]any))
		b, _ := json.Marshal(m)
		if err := v.Check(b); err == nil {
			t.Errorf("%s: the validator accepts %s", name, b)
		}
	}
}

// TestOCPBaselineItems: the cheap items of the OCP Service Baseline
// profile: MessageId on audit entries, Manager DateTime, EthernetInterface
// FQDN, and GenerateCSR's ActionInfo.
func TestOCPBaselineItems(t *testing.T) {
	env := apitest.NewServer(t)
	env.Anon.Post("/redfish/v1/SessionService/Sessions", map[string]string{"UserName": "admin", "Password": "wrong"})
	env.Admin.Patch("/redfish/v1/SessionService", map[string]any{"SessionTimeout": 900})
	refused := env.Admin.Patch("/redfish/v1/AccountService", map[string]any{"Nope": 1})
	var refusal struct {
		Error struct {
			Info []struct {
				MessageID string   `json:"MessageId"`
				Args      []string `json:"MessageArgs"`
			} `json:"@Message.ExtendedInfo"`
		} `json:"error"`
	}
	if err := json.Unmarshal(refused.Body, &refusal); err != nil || len(refusal.Error.Info) != 1 {
		t.Fatalf("PATCH of an unknown property: %s", refused)
	}
	audit := env.Admin.GetOK("/redfish/v1/Managers/FM/LogServices/AuditLog/Entries")
	got := map[string]string{} // message → MessageId
	args := map[string][]any{}
	for _, m := range audit["Members"].([]any) {
		e := m.(map[string]any)
		got[e["Message"].(string)], _ = e["MessageId"].(string)
		args[e["Message"].(string)], _ = e["MessageArgs"].([]any)
	}
	// A refusal's entry carries the answer's message with its arguments.
	const refusedMsg = "admin PATCH /redfish/v1/AccountService: 400 Bad Request"
	wantArgs := []any{}
	for _, a := range refusal.Error.Info[0].Args {
		wantArgs = append(wantArgs, a)
	}
	if got[refusedMsg] != refusal.Error.Info[0].MessageID || !cmp.Equal(args[refusedMsg], wantArgs) || len(wantArgs) == 0 {
		t.Errorf("audit entry %q: %s %v, want %s %v", refusedMsg, got[refusedMsg], args[refusedMsg],
			refusal.Error.Info[0].MessageID, wantArgs)
	}
	for _, tc := range []struct{ msg, id string }{
		{"admin POST /redfish/v1/SessionService/Sessions: 401 Unauthorized", "Base.1.22.NoValidSession"},
		{"admin PATCH /redfish/v1/SessionService: 200 OK", "Base.1.22.Success"},
		{"admin POST /redfish/v1/SessionService/Sessions: 201 Created", "Base.1.22.Created"},
	} {
		if id, ok := got[tc.msg]; !ok || id != tc.id {
			t.Errorf("audit entry %q: MessageId %q (found %v), want %s", tc.msg, id, ok, tc.id)
		}
	}

	mgr := env.Admin.GetOK("/redfish/v1/Managers/FM")
	if mgr["DateTime"] != "2025-06-01T12:00:00Z" {
		t.Errorf("Manager DateTime = %v, want the service clock's", mgr["DateTime"])
	}
	for _, u := range members(t, env.Admin, "/redfish/v1/Managers/FM/EthernetInterfaces") {
		if fq, _ := env.Admin.GetOK(u)["FQDN"].(string); fq == "" {
			t.Errorf("%s: no FQDN", u)
		}
	}

	cs := env.Admin.GetOK("/redfish/v1/CertificateService")
	info, _ := get(cs, "Actions", "#CertificateService.GenerateCSR", "@Redfish.ActionInfo").(string)
	if info == "" {
		t.Fatalf("GenerateCSR has no @Redfish.ActionInfo: %v", cs["Actions"])
	}
	ai := env.Admin.GetOK(info)
	params := map[string]map[string]any{}
	for _, p := range ai["Parameters"].([]any) {
		m := p.(map[string]any)
		params[m["Name"].(string)] = m
	}
	for _, name := range []string{"CommonName", "CertificateCollection"} {
		if params[name]["Required"] != true {
			t.Errorf("ActionInfo %s: %v, want required", name, params[name])
		}
	}
	for _, name := range []string{"AlternativeNames", "Organization", "OrganizationalUnit", "City", "State", "Country",
		"Email", "KeyPairAlgorithm", "KeyBitLength", "KeyCurveId", "KeyUsage"} {
		if p, ok := params[name]; !ok || p["Required"] != false {
			t.Errorf("ActionInfo %s: %v, want optional", name, p)
		}
	}
	// What the ActionInfo allows, GenerateCSR takes.
	for _, alg := range params["KeyPairAlgorithm"]["AllowableValues"].([]any) {
		body := map[string]any{"CommonName": "box.example", "KeyPairAlgorithm": alg,
			"CertificateCollection": map[string]any{"@odata.id": "/redfish/v1/Managers/FM/NetworkProtocol/HTTPS/Certificates"}}
		if r := env.Admin.Post("/redfish/v1/CertificateService/Actions/CertificateService.GenerateCSR", body); r.Status != http.StatusOK {
			t.Errorf("GenerateCSR with KeyPairAlgorithm %v: got %s", alg, r)
		}
	}
	wantStatus(t, "ActionInfo as HostUser", env.Host0.Get(info), http.StatusForbidden, "")
}
