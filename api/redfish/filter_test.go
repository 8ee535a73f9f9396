package redfish

import (
	"encoding/json"
	"errors"
	"testing"
)

// TestFilterEval: the Redfish $filter subset against one member.
func TestFilterEval(t *testing.T) {
	var member any
	if err := json.Unmarshal([]byte(`{
		"Id": "Host3", "Name": "it's Host3", "Enabled": true, "Quota": null,
		"Status": {"Health": "OK", "State": "Enabled"},
		"MemorySummary": {"TotalSystemMemoryGiB": 64.5},
		"Links": {"Chunks": [1, 2]}
	}`), &member); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		expr string
		want bool
	}{
		{"Id eq 'Host3'", true},
		{"Id ne 'Host3'", false},
		{"Status/Health eq 'OK'", true},
		{"Status/Health eq 'Warning' or Status/State eq 'Enabled'", true},
		{"Status/Health eq 'OK' and Status/State eq 'Disabled'", false},
		{"not (Status/Health eq 'OK')", false},
		{"not Status/Health eq 'Critical'", true},
		{"MemorySummary/TotalSystemMemoryGiB gt 64", true},
		{"MemorySummary/TotalSystemMemoryGiB ge 64.5", true},
		{"MemorySummary/TotalSystemMemoryGiB lt 6.45e1", false},
		{"MemorySummary/TotalSystemMemoryGiB le -1", false},
		{"Id gt 'Host1'", true}, // strings order lexically
		{"Id lt 'Host1'", false},
		{"Id gt 1", false}, // mixed types never order
		{"Enabled eq true", true},
		{"Enabled eq false", false},
		{"Quota eq null", true},
		{"Missing eq null", true}, // absent is null
		{"Missing/Deeper ne null", false},
		{"Links/Chunks eq null", false}, // arrays equal nothing
		{"Links eq null", false},
		{"Name eq 'it''s Host3'", true},
		{"'OK' eq Status/Health", true},
		{"(Id eq 'Host0' or Id eq 'Host3') and (Enabled eq true)", true},
		{"Id eq 'Host0' or Id eq 'Host1' and Enabled eq true", false}, // and binds tighter
	} {
		f, err := parseFilter(tc.expr)
		if err != nil {
			t.Errorf("parseFilter(%q): %v", tc.expr, err)
			continue
		}
		got, err := f.match(member)
		if err != nil || got != tc.want {
			t.Errorf("%q: got %v, %v, want %v", tc.expr, got, err, tc.want)
		}
	}
}

// TestFilterSyntax: malformed filters are refused with errFilterSyntax.
func TestFilterSyntax(t *testing.T) {
	deep := ""
	for range maxFilterDepth + 2 {
		deep += "("
	}
	for _, expr := range []string{
		"", "Id", "Id eq", "eq 'x'", "Id eq 'x", "Id eq 'x' and", "Id eq 'x')", "(Id eq 'x'",
		"Id like 'x'", "Id eq 1x", "Id eq --1", "Id eq 1e999", "Id eq and", "A//B eq 1", "/A eq 1",
		"Id eq 'x' Id eq 'y'", "Id = 'x'", "not", deep + "Id eq 1",
		string(make([]byte, maxFilterLen+1)),
	} {
		if _, err := parseFilter(expr); !errors.Is(err, errFilterSyntax) {
			t.Errorf("parseFilter(%q): got %v, want a syntax error", expr, err)
		}
	}
}

// FuzzParseFilter: any input parses or fails cleanly; what parses
// evaluates without panicking.
func FuzzParseFilter(f *testing.F) {
	for _, s := range []string{"Id eq 'Host3'", "not (A/B gt 1.5e3) or C eq null", "X eq 'a''b'", "((("} {
		f.Add(s)
	}
	var member any = map[string]any{"A": map[string]any{"B": 2.0}, "C": "x", "Id": "Host3"}
	f.Fuzz(func(t *testing.T, s string) {
		fl, err := parseFilter(s)
		if err != nil {
			return
		}
		if _, err := fl.match(member); err != nil {
			t.Fatalf("match: %v", err)
		}
	})
}
