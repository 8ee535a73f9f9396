package oemschema

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite csdl/ and json-schema/ from spec.go")

// TestFilesUpToDate: the embedded files are what spec.go generates
// (go test ./api/oemschema -update rewrites them).
func TestFilesUpToDate(t *testing.T) {
	js, err := generateJSONSchema()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		path string
		got  []byte
		want []byte
	}{
		{filepath.Join("csdl", CSDLFile), generateCSDL(), CSDL()},
		{filepath.Join("json-schema", JSONSchemaFile), js, JSONSchema()},
	} {
		if *update {
			if err := os.WriteFile(f.path, f.got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if !bytes.Equal(f.got, f.want) {
			t.Errorf("%s is not what spec.go generates (run go test ./api/oemschema -update):\n%s",
				f.path, cmp.Diff(string(f.want), string(f.got)))
		}
	}
}

// TestCSDLMatchesJSONSchema: both files name the same types with the same
// properties, and every top-level type derives from Resource.OemObject.
func TestCSDLMatchesJSONSchema(t *testing.T) {
	var doc struct {
		Schemas []struct {
			Namespace string `xml:"Namespace,attr"`
			Types     []struct {
				Name  string `xml:"Name,attr"`
				Base  string `xml:"BaseType,attr"`
				Props []struct {
					Name string `xml:"Name,attr"`
				} `xml:"Property"`
				Navs []struct {
					Name string `xml:"Name,attr"`
				} `xml:"NavigationProperty"`
			} `xml:"ComplexType"`
		} `xml:"DataServices>Schema"`
	}
	if err := xml.Unmarshal(CSDL(), &doc); err != nil {
		t.Fatalf("CSDL is not XML: %v", err)
	}
	var js struct {
		Definitions map[string]struct {
			Properties map[string]any `json:"properties"`
		} `json:"definitions"`
	}
	if err := json.Unmarshal(JSONSchema(), &js); err != nil {
		t.Fatalf("JSON schema is not JSON: %v", err)
	}
	fromCSDL := map[string][]string{}
	for _, s := range doc.Schemas {
		if s.Namespace != Namespace {
			continue
		}
		for _, ct := range s.Types {
			var names []string
			if ct.Base == "Resource.OemObject" {
				names = append(names, "@odata.type")
			}
			for _, p := range ct.Props {
				names = append(names, p.Name)
			}
			for _, p := range ct.Navs {
				names = append(names, p.Name)
			}
			fromCSDL[ct.Name] = names
		}
	}
	fromJSON := map[string][]string{}
	for name, d := range js.Definitions {
		for p := range d.Properties {
			fromJSON[name] = append(fromJSON[name], p)
		}
	}
	sorted := cmp.Transformer("sort", func(in []string) []string {
		out := append([]string(nil), in...)
		for i := range out {
			for j := i + 1; j < len(out); j++ {
				if out[j] < out[i] {
					out[i], out[j] = out[j], out[i]
				}
			}
		}
		return out
	})
	if d := cmp.Diff(fromCSDL, fromJSON, sorted); d != "" {
		t.Errorf("CSDL and JSON schema disagree (-csdl +json):\n%s", d)
	}
	if len(fromCSDL) < 10 {
		t.Errorf("CSDL has %d types, want the whole extension", len(fromCSDL))
	}
}

// TestTypeNames: Type names only top-level types; nested ones panic.
func TestTypeNames(t *testing.T) {
	if got, want := Type("Connection"), "#CxlPool.v1_0_0.Connection"; got != want {
		t.Errorf("Type(Connection) = %q, want %q", got, want)
	}
	for _, name := range []string{"ChunkGrant", "Nope"} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), name) {
					t.Errorf("Type(%s): recovered %v, want a panic naming it", name, r)
				}
			}()
			Type(name)
		}()
	}
	o := Oem("Fan", map[string]any{"SpeedSensor": map[string]any{"@odata.id": "/x"}})
	if got := o[Vendor].(map[string]any)["@odata.type"]; got != "#CxlPool.v1_0_0.Fan" {
		t.Errorf("Oem(Fan) @odata.type = %v", got)
	}
}
