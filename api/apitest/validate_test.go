package apitest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidatorChecksPayloads: the validator over the repository's copy
// of the DMTF schemas really validates (a payload breaking its schema
// fails), so that tests calling Validate cannot pass by skipping.
func TestValidatorChecksPayloads(t *testing.T) {
	v, err := SharedValidator()
	if err != nil {
		t.Fatalf("SharedValidator: %v", err)
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "api", "testdata", "serviceroot.golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	// The golden file hides the service's UUID.
	golden := strings.Replace(string(b), `"\u003cUUID\u003e"`, `"9a2c4f2e-0d7b-4c41-8a5e-3f1b6c7d8e90"`, 1)
	tests := []struct {
		name, body string
		wantErr    string // "" for valid
	}{
		{"service root", golden, ""},
		{"wrong property type", strings.Replace(golden, `"Id": "RootService"`, `"Id": 7`, 1), "Id"},
		{"unknown property", strings.Replace(golden, `"Id": "RootService"`, `"Id": "RootService", "Bogus": 1`, 1), "Bogus"},
		{"error payload", `{"error":{"code":"Base.1.22.1.GeneralError","message":"m"}}`, ""},
		{"no @odata.type", `{"Id":"x"}`, "@odata.type"},
		{"type not in the copy", `{"@odata.type":"#Drive.v1_99_0.Drive","Id":"x","Name":"x"}`, "refresh.sh"},
	}
	for _, tt := range tests {
		err := v.Check([]byte(tt.body))
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s: got %v, want valid", tt.name, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: got %v, want an error naming %q", tt.name, err, tt.wantErr)
		}
	}
}

// TestValidatorWithoutSchemas: a schema directory without the schemas
// is an error naming the file, not a pass.
func TestValidatorWithoutSchemas(t *testing.T) {
	v := NewValidator(t.TempDir())
	err := v.Check([]byte(`{"@odata.type":"#ServiceRoot.v1_20_0.ServiceRoot","Id":"RootService","Name":"Root"}`))
	if err == nil || !strings.Contains(err.Error(), "ServiceRoot.v1_20_0.json") {
		t.Errorf("Check with no schemas: got %v, want an error naming ServiceRoot.v1_20_0.json", err)
	}
}
