package api_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/api/apitest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// volatile properties differ between runs (the service UUID is random per
// data directory, chunk tags are random, ledger times are the wall
// clock's); they are replaced before comparing.
var volatile = map[string]bool{"UUID": true, "ServiceEntryPointUUID": true, "Tag": true, "Created": true}

func normalise(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if volatile[k] {
				x[k] = "<" + k + ">"
				continue
			}
			x[k] = normalise(e)
		}
	case []any:
		for i, e := range x {
			x[i] = normalise(e)
		}
	}
	return v
}

// TestGolden compares the main singletons with testdata/*.golden.json
// (go test ./api -run TestGolden -update rewrites them).
func TestGolden(t *testing.T) {
	env := apitest.NewServer(t)
	for _, tc := range []struct{ name, uri string }{
		{"serviceroot", "/redfish/v1"},
		{"sessionservice", "/redfish/v1/SessionService"},
		{"accountservice", "/redfish/v1/AccountService"},
		{"manager", "/redfish/v1/Managers/FM"},
		{"role-hostuser", "/redfish/v1/AccountService/Roles/HostUser"},
	} {
		checkGolden(t, tc.name, tc.uri, env.Admin.GetOK(tc.uri))
	}
}

// checkGolden compares a resource, normalised, with
// testdata/<name>.golden.json (or rewrites the file with -update).
func checkGolden(t *testing.T, name, uri string, res map[string]any) {
	t.Helper()
	b, err := json.MarshalIndent(normalise(res), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	path := filepath.Join("testdata", name+".golden.json")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(want, b) {
		t.Errorf("%s differs from %s (-want +got):\n%s", uri, path, cmp.Diff(string(want), string(b)))
	}
}
