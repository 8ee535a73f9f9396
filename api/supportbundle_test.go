package api_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/api/apitest"
)

const (
	diagServiceURI = "/redfish/v1/Managers/FM/LogServices/Diagnostic"
	collectURI     = diagServiceURI + "/Actions/LogService.CollectDiagnosticData"
)

// collectBundle runs CollectDiagnosticData as c and returns the new
// LogEntry's URI.
func collectBundle(t *testing.T, c *apitest.Client) string {
	t.Helper()
	r := c.Post(collectURI, map[string]any{"DiagnosticDataType": "Manager"})
	if r.Status != http.StatusAccepted {
		t.Fatalf("CollectDiagnosticData: got %s, want 202", r)
	}
	apitest.Validate(t, r.Body)
	f := waitTask(t, c, r.Header.Get("Location"))
	if f.Status != http.StatusCreated {
		t.Fatalf("CollectDiagnosticData task: ended %s, want 201", f)
	}
	apitest.Validate(t, f.Body)
	loc := f.Header.Get("Location")
	if !strings.HasPrefix(loc, diagServiceURI+"/Entries/") {
		t.Fatalf("CollectDiagnosticData: Location %q is not a Diagnostic entry", loc)
	}
	return loc
}

// untar reads a tar.gz into its members, in order.
func untar(t *testing.T, b []byte) (names []string, files map[string][]byte) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("bundle is not gzip: %v", err)
	}
	tr := tar.NewReader(zr)
	files = map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("bundle tar: %v", err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		files[h.Name] = data
	}
	return names, files
}

// TestSupportBundle: an administrator collects a bundle through a task and
// downloads it; it holds every promised part, parsed here, and none of the
// box's secrets.
func TestSupportBundle(t *testing.T) {
	env := apitest.NewServer(t)
	// Something in the ledger, a pending CSR key and a served key on disk.
	chunk := reserve(t, env.Admin, 1024, nil)
	connect(t, env.Admin, chunk, 3)
	generateCSR(t, env.Admin, map[string]any{"CommonName": "box.example.com", "CertificateCollection": map[string]any{"@odata.id": httpsCertsURI}})
	env.Admin.GetOK(httpsCertURI)

	logs := env.Admin.GetOK("/redfish/v1/Managers/FM/LogServices")
	if got := linkIDs(logs["Members"]); !slices.Contains(got, diagServiceURI) {
		t.Errorf("LogServices: got %v, want %s among them", got, diagServiceURI)
	}
	svc := env.Admin.GetOK(diagServiceURI)
	if get(svc, "Actions", "#LogService.CollectDiagnosticData", "target") != collectURI {
		t.Errorf("Diagnostic LogService: no CollectDiagnosticData target: %v", svc["Actions"])
	}

	entryURI := collectBundle(t, env.Admin)
	entry := env.Admin.GetOK(entryURI)
	if entry["DiagnosticDataType"] != "Manager" {
		t.Errorf("DiagnosticDataType: got %v, want Manager", entry["DiagnosticDataType"])
	}
	dataURI, _ := entry["AdditionalDataURI"].(string)
	r := env.Admin.Get(dataURI)
	if r.Status != http.StatusOK {
		t.Fatalf("GET %s: got %s, want 200", dataURI, r)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/gzip" {
		t.Errorf("Content-Type: got %q, want application/gzip", ct)
	}
	if cd := r.Header.Get("Content-Disposition"); !strings.HasPrefix(cd, `attachment; filename="cxlpool-support-`) || !strings.HasSuffix(cd, `.tar.gz"`) {
		t.Errorf("Content-Disposition: got %q, want an attachment named cxlpool-support-*.tar.gz", cd)
	}
	if got := entry["AdditionalDataSizeBytes"]; got != float64(len(r.Body)) {
		t.Errorf("AdditionalDataSizeBytes: got %v, want %d", got, len(r.Body))
	}

	names, files := untar(t, r.Body)
	want := []string{"version.json", "config.json", "box.json", "ledger.json", "eventlog.json", "auditlog.json",
		"tasks.json", "metrics.txt", "goroutines.txt", "manifest.json"}
	if !cmp.Equal(names, want) {
		t.Errorf("bundle members: got %v, want %v", names, want)
	}
	parse := func(name string) map[string]any {
		t.Helper()
		var v map[string]any
		if err := json.Unmarshal(files[name], &v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return v
	}
	var manifest struct {
		Format string
		Files  []struct {
			Name      string
			Bytes     int
			SHA256    string
			Truncated bool
			Error     string
		}
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil {
		t.Fatal(err)
	}
	if manifest.Format != "cxlpool-support-bundle/1" || len(manifest.Files) != len(want)-1 {
		t.Errorf("manifest: format %q, %d files", manifest.Format, len(manifest.Files))
	}
	for _, f := range manifest.Files {
		sum := sha256.Sum256(files[f.Name])
		if f.SHA256 != hex.EncodeToString(sum[:]) || f.Bytes != len(files[f.Name]) || f.Truncated || f.Error != "" {
			t.Errorf("manifest entry %+v does not describe %s (%d bytes)", f, f.Name, len(files[f.Name]))
		}
	}
	if v := parse("version.json"); v["FirmwareVersion"] != "test-1.0" {
		t.Errorf("version.json FirmwareVersion: got %v", v["FirmwareVersion"])
	}
	cfg := parse("config.json")
	if accts, _ := cfg["Accounts"].([]any); len(accts) != 5 {
		t.Errorf("config.json: got %d accounts, want 5", len(accts))
	}
	if heads, _ := parse("box.json")["Heads"].([]any); len(heads) != 8 {
		t.Errorf("box.json: got %d heads, want 8", len(heads))
	}
	ledger := parse("ledger.json")
	for _, part := range []string{"Hosts", "Chunks", "Grants", "Regions"} {
		if l, _ := ledger[part].([]any); len(l) == 0 {
			t.Errorf("ledger.json: no %s", part)
		}
	}
	if g := get(ledger, "Grants", 0, "Host"); g != "Host3" {
		t.Errorf("ledger.json: first grant's host %v, want Host3", g)
	}
	for _, name := range []string{"eventlog.json", "auditlog.json", "tasks.json"} {
		var l []map[string]any
		if err := json.Unmarshal(files[name], &l); err != nil || len(l) == 0 {
			t.Errorf("%s: %d entries, %v", name, len(l), err)
		}
	}
	if !strings.Contains(string(files["metrics.txt"]), "cxlpool_http_requests_total") {
		t.Error("metrics.txt lacks the request counters")
	}
	if !strings.Contains(string(files["goroutines.txt"]), "goroutine ") {
		t.Error("goroutines.txt is not a goroutine dump")
	}

	// No secret anywhere: not in a member, not in a header.
	var all bytes.Buffer
	zr, _ := gzip.NewReader(bytes.NewReader(r.Body))
	if _, err := io.Copy(&all, zr); err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{
		"bcrypt hash $2a$": "$2a$", "bcrypt hash $2b$": "$2b$", "bcrypt hash $2y$": "$2y$",
		"a PEM private key": "PRIVATE KEY",
		"admin password":    apitest.AdminPassword, "users' password": apitest.UserPassword,
	}
	for name, c := range map[string]*apitest.Client{"admin": env.Admin, "operator": env.Operator, "reader": env.ReadOnly, "host0": env.Host0, "host1": env.Host1} {
		secrets[name+"'s session token"] = c.Token
	}
	for _, f := range []string{"key.pem", "csr-key.pem"} {
		b, err := os.ReadFile(filepath.Join(env.Config.DataDir, "tls", f))
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		secrets[f] = string(blk.Bytes)
		body := strings.Split(strings.TrimSpace(string(b)), "\n")
		secrets[f+" base64"] = body[1]
	}
	for what, s := range secrets {
		if s == "" {
			t.Fatalf("no value for %s", what)
		}
		if bytes.Contains(all.Bytes(), []byte(s)) {
			t.Errorf("the bundle contains %s", what)
		}
	}
}

// TestSupportBundleRolesAndLimits: only administrators collect and
// download; the parameters are checked; old bundles are dropped beyond
// the service's MaxNumberOfRecords; ClearLog removes them.
func TestSupportBundleRolesAndLimits(t *testing.T) {
	env := apitest.NewServer(t)
	entry := collectBundle(t, env.Admin)
	type want struct{ anon, admin, operator, reader, host int }
	const (
		ok     = http.StatusOK
		unauth = http.StatusUnauthorized
		forbid = http.StatusForbidden
	)
	body := map[string]any{"DiagnosticDataType": "Manager"}
	for _, tc := range []struct {
		method, path string
		body         any
		want         want
	}{
		{"GET", diagServiceURI, nil, want{unauth, ok, ok, ok, forbid}},
		{"GET", diagServiceURI + "/Entries", nil, want{unauth, ok, ok, ok, forbid}},
		{"GET", entry, nil, want{unauth, ok, ok, ok, forbid}},
		{"GET", entry + "/attachment", nil, want{unauth, ok, forbid, forbid, forbid}},
		{"GET", diagServiceURI + "/Entries/99/attachment", nil, want{unauth, http.StatusNotFound, forbid, forbid, forbid}},
		{"POST", collectURI, body, want{unauth, 0, forbid, forbid, forbid}},
		{"POST", diagServiceURI + "/Actions/LogService.ClearLog", map[string]any{}, want{unauth, 0, forbid, forbid, forbid}},
	} {
		for _, cl := range []struct {
			name string
			c    *apitest.Client
			want int
		}{
			{"anonymous", env.Anon, tc.want.anon}, {"Administrator", env.Admin, tc.want.admin},
			{"Operator", env.Operator, tc.want.operator}, {"ReadOnly", env.ReadOnly, tc.want.reader},
			{"HostUser", env.Host0, tc.want.host},
		} {
			if cl.want == 0 {
				continue // the administrator's own rows follow
			}
			r := cl.c.Do(tc.method, tc.path, tc.body)
			wantStatus(t, tc.method+" "+tc.path+" as "+cl.name, r, cl.want, "")
			if r.Status == ok && strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
				apitest.Validate(t, r.Body)
			}
		}
	}
	for _, tc := range []struct {
		name string
		body map[string]any
		msg  string
	}{
		{"no type", map[string]any{}, "ActionParameterMissing"},
		{"type OS", map[string]any{"DiagnosticDataType": "OS"}, "ActionParameterValueNotInList"},
		{"a target URI", map[string]any{"DiagnosticDataType": "Manager", "TargetURI": "https://example.com/x"}, "ActionParameterNotSupported"},
	} {
		wantStatus(t, "collect with "+tc.name, env.Admin.Post(collectURI, tc.body), http.StatusBadRequest, tc.msg)
	}

	// What a crash in the middle of a collection leaves is cleaned up.
	stale := filepath.Join(env.Config.DataDir, "diagnostics", ".bundle-9.tar.gz.tmp123")
	if err := os.WriteFile(stale, []byte("torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		collectBundle(t, env.Admin)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("an interrupted collection's temporary file is still there: %v", err)
	}
	got := members(t, env.Admin, diagServiceURI+"/Entries")
	wantIDs := []string{diagServiceURI + "/Entries/2", diagServiceURI + "/Entries/3", diagServiceURI + "/Entries/4", diagServiceURI + "/Entries/5"}
	if !cmp.Equal(got, wantIDs) {
		t.Errorf("entries after 5 collections: got %v, want the newest 4 %v", got, wantIDs)
	}
	if r := env.Admin.Get(entry); r.Status != http.StatusNotFound {
		t.Errorf("the oldest bundle: got %d, want 404", r.Status)
	}
	r := env.Admin.Get(diagServiceURI + "/Entries?$expand=.")
	apitest.Validate(t, r.Body)
	wantStatus(t, "ClearLog", env.Admin.Post(diagServiceURI+"/Actions/LogService.ClearLog", map[string]any{}), http.StatusNoContent, "")
	if got := members(t, env.Admin, diagServiceURI+"/Entries"); len(got) != 0 {
		t.Errorf("entries after ClearLog: got %v, want none", got)
	}
	// Numbers are not reused: a stale link never names a newer bundle.
	if loc := collectBundle(t, env.Admin); loc != diagServiceURI+"/Entries/6" {
		t.Errorf("the next bundle after ClearLog: got %s, want Entries/6", loc)
	}
}
