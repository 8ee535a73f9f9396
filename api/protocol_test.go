package api_test

import (
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/api"
	"cxlpool/api/apitest"
	"cxlpool/api/oemschema"
	"cxlpool/api/redfish"
)

// TestProtocolHeaders: every answer carries OData-Version and JSON bodies
// the Redfish content type; resources have an ETag.
func TestProtocolHeaders(t *testing.T) {
	env := apitest.NewServer(t)
	for _, r := range []*apitest.Response{
		env.Admin.Get("/redfish/v1/AccountService"),
		env.Anon.Get("/redfish/v1/Managers"),
		env.Admin.Get("/redfish/v1/Nope"),
	} {
		if got := r.Header.Get("OData-Version"); got != "4.0" {
			t.Errorf("OData-Version = %q, want 4.0", got)
		}
		if got := r.Header.Get("Content-Type"); got != "application/json; charset=utf-8" {
			t.Errorf("Content-Type = %q", got)
		}
		apitest.Validate(t, r.Body)
	}
	if env.Admin.Get("/redfish/v1/AccountService").Header.Get("ETag") == "" {
		t.Error("no ETag on a resource")
	}
	if r := env.Admin.Do(http.MethodHead, "/redfish/v1/AccountService", nil); r.Status != http.StatusOK || len(r.Body) != 0 {
		t.Errorf("HEAD: got %d with %d body bytes, want 200 and none", r.Status, len(r.Body))
	}
	wantStatus(t, "OData-Version 5.0", env.Admin.Get("/redfish/v1/Managers", "OData-Version", "5.0"),
		http.StatusPreconditionFailed, "HeaderInvalid")
}

// TestMethodNotAllowed: 405 with Allow listing exactly what the path has.
func TestMethodNotAllowed(t *testing.T) {
	env := apitest.NewServer(t)
	for _, tc := range []struct{ method, path, allow string }{
		{"DELETE", "/redfish/v1/SessionService", "GET, HEAD, PATCH"},
		{"POST", "/redfish/v1/AccountService/Accounts/1", "DELETE, GET, HEAD, PATCH"},
		{"PUT", "/redfish/v1/AccountService/Accounts", "GET, HEAD, POST"},
		{"PATCH", "/redfish/v1/SessionService/Sessions", "GET, HEAD, POST"},
		{"DELETE", "/redfish/v1/$metadata", "GET, HEAD"},
		{"OPTIONS", "/redfish/v1/Managers/FM", "GET, HEAD, PATCH"},
	} {
		r := env.Admin.Do(tc.method, tc.path, nil)
		wantStatus(t, tc.method+" "+tc.path, r, http.StatusMethodNotAllowed, "OperationNotAllowed")
		if got := r.Header.Get("Allow"); got != tc.allow {
			t.Errorf("%s %s: Allow = %q, want %q", tc.method, tc.path, got, tc.allow)
		}
	}
}

// TestETagIfMatch: If-Match with the current ETag passes, a stale one is
// 412; If-None-Match with the current one is 304.
func TestETagIfMatch(t *testing.T) {
	env := apitest.NewServer(t)
	const uri = "/redfish/v1/SessionService"
	etag := env.Admin.Get(uri).Header.Get("ETag")
	if !regexp.MustCompile(`^W/"[0-9a-f]+"$`).MatchString(etag) {
		t.Fatalf("ETag %q is not a weak tag", etag)
	}
	if again := env.Admin.Get(uri).Header.Get("ETag"); again != etag {
		t.Errorf("ETag changed without a change: %q then %q", etag, again)
	}
	wantStatus(t, "If-None-Match current", env.Admin.Get(uri, "If-None-Match", etag), http.StatusNotModified, "")
	wantStatus(t, "If-Match stale", env.Admin.Patch(uri, map[string]any{"SessionTimeout": 120}, "If-Match", `W/"0000"`),
		http.StatusPreconditionFailed, "PreconditionFailed")
	r := env.Admin.Patch(uri, map[string]any{"SessionTimeout": 120}, "If-Match", etag)
	wantStatus(t, "If-Match current", r, http.StatusOK, "")
	newTag := r.Header.Get("ETag")
	if newTag == etag || newTag != env.Admin.Get(uri).Header.Get("ETag") {
		t.Errorf("ETag after PATCH %q; GET says %q; before %q", newTag, env.Admin.Get(uri).Header.Get("ETag"), etag)
	}
	wantStatus(t, "If-Match old after change", env.Admin.Patch(uri, map[string]any{"SessionTimeout": 300}, "If-Match", etag),
		http.StatusPreconditionFailed, "PreconditionFailed")
	wantStatus(t, "If-Match *", env.Admin.Patch(uri, map[string]any{"SessionTimeout": 300}, "If-Match", "*"), http.StatusOK, "")
	acct := findAccount(t, env, apitest.UserHost1)["@odata.id"].(string)
	wantStatus(t, "DELETE stale", env.Admin.Delete(acct, "If-Match", `"nope"`), http.StatusPreconditionFailed, "PreconditionFailed")
	wantStatus(t, "DELETE current", env.Admin.Delete(acct, "If-Match", env.Admin.Get(acct).Header.Get("ETag")), http.StatusNoContent, "")
}

// TestBodies: size limit, content type and strict decoding.
func TestBodies(t *testing.T) {
	env := apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) { c.MaxBodyBytes = 1024 }})
	const uri = "/redfish/v1/SessionService"
	big := `{"SessionTimeout": 60, "x": "` + strings.Repeat("a", 2000) + `"}`
	for _, tc := range []struct {
		name    string
		body    any
		headers []string
		code    int
		msg     string
	}{
		{"too large", big, nil, http.StatusRequestEntityTooLarge, "PayloadTooLarge"},
		{"form", "SessionTimeout=60", []string{"Content-Type", "application/x-www-form-urlencoded"}, http.StatusUnsupportedMediaType, "HeaderInvalid"},
		{"malformed", `{"SessionTimeout": `, nil, http.StatusBadRequest, "MalformedJSON"},
		{"trailing data", `{} {}`, nil, http.StatusBadRequest, "MalformedJSON"},
		{"empty", ``, nil, http.StatusBadRequest, "MalformedJSON"},
		{"array", `[1]`, nil, http.StatusBadRequest, "UnrecognizedRequestBody"},
		{"unknown property", `{"Sessiontimeout": 60}`, nil, http.StatusBadRequest, "PropertyUnknown"},
		{"read-only property", `{"ServiceEnabled": false}`, nil, http.StatusBadRequest, "PropertyNotWritable"},
		{"wrong type", `{"SessionTimeout": "60"}`, nil, http.StatusBadRequest, "PropertyValueTypeError"},
		{"fraction", `{"SessionTimeout": 60.5}`, nil, http.StatusBadRequest, "PropertyValueTypeError"},
		{"huge number", `{"SessionTimeout": 123456789012345678901234567890}`, nil, http.StatusBadRequest, "PropertyValueOutOfRange"},
		{"null", `{"SessionTimeout": null}`, nil, http.StatusBadRequest, "PropertyValueTypeError"},
		{"annotation ignored", `{"@odata.type": "#SessionService.v1_2_0.SessionService", "SessionTimeout": 60}`, nil, http.StatusOK, ""},
		{"no content type", `{"SessionTimeout": 60}`, []string{"Content-Type", ""}, http.StatusOK, ""},
	} {
		r := env.Admin.Do(http.MethodPatch, uri, tc.body, tc.headers...)
		wantStatus(t, tc.name, r, tc.code, tc.msg)
		apitest.Validate(t, r.Body)
	}
	// Without a Content-Length the limit holds while the body is read.
	req, _ := http.NewRequest(http.MethodPatch, env.HTTP.URL+uri, io.MultiReader(strings.NewReader(big)))
	req.ContentLength = -1
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Auth-Token", env.Admin.Token)
	resp, err := env.HTTP.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked oversize body: got %d, want 413", resp.StatusCode)
	}
}

// TestQueries: $select, $top/$skip with nextLink, $expand, and refusals.
func TestQueries(t *testing.T) {
	env := apitest.NewServer(t)
	for i := range 5 {
		env.AddUser("extra"+string(rune('a'+i)), redfish.RoleReadOnly, "")
	}
	const col = "/redfish/v1/AccountService/Accounts"
	all := env.Admin.GetOK(col)
	total := int(all["Members@odata.count"].(float64))
	if total != 10 {
		t.Fatalf("accounts: got %d, want 10", total)
	}
	var pages []any
	next := col + "?$top=4"
	for n := 0; next != ""; n++ {
		p := env.Admin.GetOK(next)
		if c := p["Members@odata.count"]; c != float64(total) {
			t.Errorf("page %d: Members@odata.count = %v, want %d", n, c, total)
		}
		pages = append(pages, p["Members"].([]any)...)
		next, _ = p["Members@odata.nextLink"].(string)
		if n > 5 {
			t.Fatal("nextLink does not end")
		}
	}
	if diff := cmp.Diff(all["Members"], pages); diff != "" {
		t.Errorf("paged members differ from the whole (-whole +paged):\n%s", diff)
	}
	skip := env.Admin.GetOK(col + "?$skip=8")
	if got := len(skip["Members"].([]any)); got != 2 {
		t.Errorf("$skip=8: got %d members, want 2", got)
	}
	if _, ok := skip["Members@odata.nextLink"]; ok {
		t.Error("$skip without $top has a nextLink")
	}

	// $select leaves out required properties, so these are not validated.
	sel := env.Admin.Get("/redfish/v1/SessionService?$select=SessionTimeout,Status/Health").JSON(t)
	want := map[string]any{
		"@odata.id": "/redfish/v1/SessionService", "@odata.type": "#SessionService.v1_2_0.SessionService",
		"SessionTimeout": float64(1800), "Status": map[string]any{"Health": "OK"},
	}
	if diff := cmp.Diff(want, sel); diff != "" {
		t.Errorf("$select (-want +got):\n%s", diff)
	}

	for _, q := range []string{"$expand=.", "$expand=*", "$expand=~", "$expand=.($levels=1)", "$expand=*($levels=3)"} {
		ex := env.Admin.GetOK(col + "?" + q)
		for _, m := range ex["Members"].([]any) {
			if _, ok := m.(map[string]any)["UserName"]; !ok {
				t.Errorf("%s: member not expanded: %v", q, m)
			}
		}
	}
	exSel := env.Admin.Get(col + "?$expand=.&$select=UserName&$top=1").JSON(t)
	m := exSel["Members"].([]any)[0].(map[string]any)
	if _, ok := m["RoleId"]; ok || m["UserName"] == nil {
		t.Errorf("$expand with $select: member %v, want only UserName and annotations", m)
	}

	for _, tc := range []struct {
		q    string
		code int
		msg  string
	}{
		{"$top=-1", http.StatusBadRequest, "QueryParameterValueFormatError"},
		{"$top=x", http.StatusBadRequest, "QueryParameterValueFormatError"},
		{"$skip=1.5", http.StatusBadRequest, "QueryParameterValueFormatError"},
		{"$expand=Members", http.StatusBadRequest, "QueryParameterValueFormatError"},
		{"$expand=.($levels=0)", http.StatusBadRequest, "QueryParameterValueFormatError"},
		{"$select=Bad%20Name", http.StatusBadRequest, "QueryParameterValueFormatError"},
		{"$filter=UserName%20eq", http.StatusBadRequest, "QueryParameterValueFormatError"},
		{"$only", http.StatusNotImplemented, "QueryParameterUnsupported"},
		{"only", http.StatusOK, ""},
	} {
		wantStatus(t, tc.q, env.Admin.Get(col+"?"+tc.q), tc.code, tc.msg)
	}
	wantStatus(t, "$top on a resource", env.Admin.Get("/redfish/v1/SessionService?$top=1"), http.StatusBadRequest, "QueryNotSupportedOnResource")
	wantStatus(t, "$filter on a resource", env.Admin.Get("/redfish/v1/SessionService?$filter=Id%20eq%20'x'"), http.StatusBadRequest, "QueryNotSupportedOnResource")
}

// TestMetadataReferencesCSDL: $metadata is well-formed XML and every
// referenced file and namespace exists in the DMTF CSDL bundle.
func TestMetadataReferencesCSDL(t *testing.T) {
	env := apitest.NewServer(t)
	r := env.Anon.Get("/redfish/v1/$metadata")
	if r.Status != http.StatusOK || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/xml") {
		t.Fatalf("$metadata: %d %s", r.Status, r.Header.Get("Content-Type"))
	}
	var doc struct {
		Refs []struct {
			URI      string `xml:"Uri,attr"`
			Includes []struct {
				Namespace string `xml:"Namespace,attr"`
			} `xml:"Include"`
		} `xml:"Reference"`
	}
	if err := xml.Unmarshal(r.Body, &doc); err != nil {
		t.Fatalf("$metadata is not XML: %v", err)
	}
	schemas, err := apitest.SchemaDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(schemas, "csdl")
	if len(doc.Refs) < 20 {
		t.Errorf("$metadata references %d files, want the ~20 the service uses", len(doc.Refs))
	}
	for _, ref := range doc.Refs {
		name := strings.TrimPrefix(ref.URI, "http://redfish.dmtf.org/schemas/v1/")
		b, err := os.ReadFile(filepath.Join(dir, name))
		if ref.URI == oemschema.CSDLURI { // the box's own schema store
			r := env.Anon.Get(ref.URI)
			b, err = r.Body, nil
			if r.Status != http.StatusOK {
				err = fmt.Errorf("GET: %d", r.Status)
			}
		}
		if err != nil {
			t.Errorf("reference %s: %v", ref.URI, err)
			continue
		}
		for _, inc := range ref.Includes {
			if !strings.Contains(string(b), `Namespace="`+inc.Namespace+`"`) {
				t.Errorf("%s has no namespace %s", name, inc.Namespace)
			}
		}
	}
	odata := env.Anon.Get("/redfish/v1/odata").JSON(t)
	if odata["@odata.context"] != "/redfish/v1/$metadata" || len(odata["value"].([]any)) < 5 {
		t.Errorf("odata service document: %v", odata)
	}
}

// TestRegistries: the registries the messages come from are served.
func TestRegistries(t *testing.T) {
	env := apitest.NewServer(t)
	col := env.Admin.GetOK("/redfish/v1/Registries?$expand=.")
	if n := col["Members@odata.count"]; n != float64(5) {
		t.Errorf("registries: %v, want 5 (Base, ResourceEvent, TaskEvent, Telemetry, Update)", n)
	}
	f := env.Admin.GetOK("/redfish/v1/Registries/Base.1.22.1")
	uri := f["Location"].([]any)[0].(map[string]any)["Uri"].(string)
	reg := env.Admin.Get(uri).JSON(t)
	if reg["Id"] != "Base.1.22.1" {
		t.Errorf("registry file Id = %v", reg["Id"])
	}
}
