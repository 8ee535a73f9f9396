package apitest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"cxlpool/api/oemschema"
)

// DMTF schema URL prefixes; the loader maps both to one directory.
const (
	dmtfPrefix      = "http://redfish.dmtf.org/schemas/v1/"
	swordfishPrefix = "http://redfish.dmtf.org/schemas/swordfish/v1/"
)

// RepoRoot is the directory holding go.mod, found from the working
// directory (a package directory during go test).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// SchemaDir is the repository's copy of the DMTF schemas the service and
// its tests use (api/schemas/dmtf: json-schema/ and csdl/, refreshed by
// api/schemas/refresh.sh). Tests read only this copy, never files outside
// the repository.
func SchemaDir() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "api", "schemas", "dmtf"), nil
}

// Validator checks payloads against the DMTF JSON schemas. It is safe for
// concurrent use; compiled schemas are cached.
type Validator struct {
	dir string

	mu       sync.Mutex
	compiler *jsonschema.Compiler
	schemas  map[string]*jsonschema.Schema
	loaded   map[string]bool // schema files read, by name (guarded by mu: Compile runs under it)
}

// NewValidator loads schemas from dir (a json-schema directory).
func NewValidator(dir string) *Validator {
	v := &Validator{dir: dir, schemas: map[string]*jsonschema.Schema{}, loaded: map[string]bool{}}
	c := jsonschema.NewCompiler()
	c.UseLoader(schemaLoader{dir: dir, loaded: v.loaded})
	c.DefaultDraft(jsonschema.Draft7)
	v.compiler = c
	return v
}

// Files lists the schema files the validator has read so far, sorted:
// after compiling every type the service emits (CompileType), the
// closure that a copy of the bundle must keep.
func (v *Validator) Files() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]string, 0, len(v.loaded))
	for f := range v.loaded {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// CompileType compiles the schema of one @odata.type (as Check would for
// a payload of that type), or of the error payload for "error".
func (v *Validator) CompileType(t string) error {
	file, def := "redfish-error.v1_0_2.json", "RedfishError"
	if t != "error" {
		var err error
		if file, def, err = SchemaFile(t); err != nil {
			return err
		}
	}
	_, err := v.schema(file, def)
	return err
}

// schemaLoader maps DMTF URLs to files: no network is reachable. A
// Swordfish schema the bundle lacks loads as {} (anything goes): our
// resources never use those properties.
type schemaLoader struct {
	dir    string
	loaded map[string]bool
}

func (l schemaLoader) Load(url string) (any, error) {
	var name string
	switch {
	case strings.HasPrefix(url, dmtfPrefix):
		name = strings.TrimPrefix(url, dmtfPrefix)
	case strings.HasPrefix(url, swordfishPrefix):
		name = strings.TrimPrefix(url, swordfishPrefix)
	default:
		return nil, fmt.Errorf("schema %s: not a DMTF URL", url)
	}
	if filepath.Base(name) == oemschema.JSONSchemaFile {
		return oemDocument()
	}
	f, err := os.Open(filepath.Join(l.dir, filepath.Base(name)))
	if err != nil {
		if strings.HasPrefix(url, swordfishPrefix) && errors.Is(err, os.ErrNotExist) {
			return swordfishStub(name), nil
		}
		return nil, err
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		return nil, fmt.Errorf("schema %s: %w", url, err)
	}
	l.loaded[filepath.Base(name)] = true
	// The DMTF meta-schema is draft-07 with extra keywords; validating
	// schemas against it adds nothing, so schemas are read as draft-07.
	if m, ok := doc.(map[string]any); ok {
		delete(m, "$schema")
		linksOnly(m)
	}
	return doc, nil
}

// fullSuffix names the kept inline definition of a collection type.
const fullSuffix = "_Full"

const idRef = dmtfPrefix + "odata-v4.json#/definitions/idRef"

// linksOnly makes a resource's unversioned definition (anyOf: a link, or
// any version of the resource) accept only the link. Payloads hold other
// resources as links (Check validates expanded ones on their own), and
// without this every schema would pull in the whole bundle: compiling
// ServiceRoot would take most of a minute.
func linksOnly(doc map[string]any) {
	defs, _ := doc["definitions"].(map[string]any)
	for name, d := range defs {
		def, _ := d.(map[string]any)
		anyOf, _ := def["anyOf"].([]any)
		if len(anyOf) < 2 {
			continue
		}
		if first, _ := anyOf[0].(map[string]any); first["$ref"] == idRef {
			// A collection's own type is defined inline: keep it under
			// another name for validating collection payloads.
			if full, _ := anyOf[1].(map[string]any); len(anyOf) == 2 && full["$ref"] == nil {
				defs[name+fullSuffix] = full
			}
			def["anyOf"] = anyOf[:1]
		}
	}
}

// swordfishStub stands in for a Swordfish schema the bundle lacks: its
// definitions accept anything. DMTF schemas refer to the file's own type
// and to a few others by name.
func swordfishStub(name string) map[string]any {
	stem, _, _ := strings.Cut(filepath.Base(name), ".")
	defs := map[string]any{stem: map[string]any{}}
	for _, d := range []string{"CapacitySource", "ProvisioningPolicy", "StorageAccessCapability", "ReplicaType",
		"ReplicaUpdateMode", "ReplicaInfo", "EncryptionTypes", "InitializeMethod", "InitializeType"} {
		defs[d] = map[string]any{}
	}
	return map[string]any{"definitions": defs}
}

var odataType = regexp.MustCompile(`^#([A-Za-z0-9]+)\.(?:(v[0-9]+_[0-9]+_[0-9]+)\.)?([A-Za-z0-9]+)$`)

// SchemaFile names the schema file for an @odata.type:
// "#Connection.v1_4_0.Connection" → "Connection.v1_4_0.json",
// "#ConnectionCollection.ConnectionCollection" → "ConnectionCollection.json"
// (and its inline collection definition).
func SchemaFile(t string) (file, definition string, err error) {
	m := odataType.FindStringSubmatch(t)
	if m == nil {
		return "", "", fmt.Errorf("@odata.type %q is not #Namespace[.vX_Y_Z].Type", t)
	}
	if m[2] == "" {
		return m[1] + ".json", m[3] + fullSuffix, nil
	}
	return m[1] + "." + m[2] + ".json", m[3], nil
}

func (v *Validator) schema(file, def string) (*jsonschema.Schema, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	key := file + "#/definitions/" + def
	if sch, ok := v.schemas[key]; ok {
		return sch, nil
	}
	if _, err := os.Stat(filepath.Join(v.dir, file)); err != nil && file != oemschema.JSONSchemaFile {
		return nil, fmt.Errorf("no schema file %s in %s (a new @odata.type or version? api/schemas/refresh.sh copies it from the DMTF bundle)", file, v.dir)
	}
	sch, err := v.compiler.Compile(dmtfPrefix + key)
	if err != nil {
		return nil, err
	}
	v.schemas[key] = sch
	return sch, nil
}

// Check validates one payload against the schema its @odata.type names;
// an error response ({"error": ...}) against redfish-error.
func (v *Validator) Check(body []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("payload is not JSON: %w", err)
	}
	obj, ok := inst.(map[string]any)
	if !ok {
		return errors.New("payload is not a JSON object")
	}
	var errs []error
	for _, sub := range expanded(obj, "") {
		b, _ := json.Marshal(sub.obj)
		if err := v.Check(b); err != nil {
			errs = append(errs, fmt.Errorf("expanded %s: %w", sub.path, err))
		}
		clear(sub.obj)
		sub.obj["@odata.id"] = sub.id
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	var sch *jsonschema.Schema
	if _, isErr := obj["error"]; isErr && len(obj) == 1 {
		sch, err = v.schema("redfish-error.v1_0_2.json", "RedfishError")
	} else {
		t, _ := obj["@odata.type"].(string)
		file, def, ferr := SchemaFile(t)
		if ferr != nil {
			return ferr
		}
		sch, err = v.schema(file, def)
	}
	if err != nil {
		return err
	}
	if err := sch.Validate(inst); err != nil {
		return err
	}
	return v.checkOem(inst, "")
}

// oemDocument is the CxlPool OEM JSON schema (api/oemschema), read as the
// DMTF ones are. Its $id names where the box serves it; the validator
// knows it under the DMTF prefix, where $refs from it resolve.
func oemDocument() (any, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(oemschema.JSONSchema()))
	if err != nil {
		return nil, fmt.Errorf("OEM schema: %w", err)
	}
	if m, ok := doc.(map[string]any); ok {
		delete(m, "$schema")
		delete(m, "$id")
	}
	return doc, nil
}

// checkOem validates every Oem object in v against the OEM schema: DMTF's
// Oem definition takes anything, so without this an OEM property could
// be misspelt, mistyped or lack its @odata.type unnoticed. The service's
// one vendor key is CxlPool; any other is an error.
func (v *Validator) checkOem(x any, path string) error {
	var errs []error
	switch t := x.(type) {
	case map[string]any:
		for k, e := range t {
			if oem, ok := e.(map[string]any); ok && k == "Oem" {
				for vendor, obj := range oem {
					if strings.Contains(vendor, "@") {
						continue
					}
					if action, ok := strings.CutPrefix(vendor, "#"); ok {
						// An OEM action under Actions/Oem (DSP0266):
						// "#CxlPool.<Action>", an object with its target.
						if !strings.HasPrefix(action, oemschema.Vendor+".") {
							errs = append(errs, fmt.Errorf("%s/Oem/%s: OEM action not named #%s.<Action>", path, vendor, oemschema.Vendor))
						} else if m, ok := obj.(map[string]any); !ok || m["target"] == nil {
							errs = append(errs, fmt.Errorf("%s/Oem/%s: OEM action without a target", path, vendor))
						}
						continue
					}
					if err := v.checkOemObject(vendor, obj); err != nil {
						errs = append(errs, fmt.Errorf("%s/Oem/%s: %w", path, vendor, err))
					}
				}
			}
			if err := v.checkOem(e, path+"/"+k); err != nil {
				errs = append(errs, err)
			}
		}
	case []any:
		for i, e := range t {
			if err := v.checkOem(e, fmt.Sprintf("%s/%d", path, i)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func (v *Validator) checkOemObject(vendor string, obj any) error {
	if vendor != oemschema.Vendor {
		return fmt.Errorf("unknown OEM vendor %q (the service's extension is %s)", vendor, oemschema.Vendor)
	}
	m, ok := obj.(map[string]any)
	if !ok {
		return errors.New("not an object")
	}
	t, _ := m["@odata.type"].(string)
	def, ok := strings.CutPrefix(t, "#"+oemschema.Namespace+".")
	if !ok || def == "" || strings.Contains(def, ".") {
		return fmt.Errorf("@odata.type %q is not #%s.<Type>", t, oemschema.Namespace)
	}
	sch, err := v.schema(oemschema.JSONSchemaFile, def)
	if err != nil {
		return fmt.Errorf("%s: %w", t, err)
	}
	return sch.Validate(obj)
}

type expandedResource struct {
	path string
	id   any
	obj  map[string]any
}

// expanded finds resources embedded by $expand (objects with @odata.id,
// @odata.type and more) below the top level.
func expanded(v any, path string) []expandedResource {
	var out []expandedResource
	switch x := v.(type) {
	case map[string]any:
		if path != "" && len(x) > 2 && x["@odata.id"] != nil && x["@odata.type"] != nil {
			return []expandedResource{{path: path, id: x["@odata.id"], obj: x}}
		}
		for k, e := range x {
			out = append(out, expanded(e, path+"/"+k)...)
		}
	case []any:
		for i, e := range x {
			out = append(out, expanded(e, fmt.Sprintf("%s/%d", path, i))...)
		}
	}
	return out
}

// Validate fails t unless body is valid against its schema. The schemas
// are part of the repository, so a missing one is an error, never a skip.
// It reports with Errorf (not Fatal or Skip), so it may run in any
// goroutine and in subtests given the parent's t.
func Validate(t testing.TB, body []byte) {
	t.Helper()
	v, err := SharedValidator()
	if err != nil {
		t.Errorf("schema validation: %v", err)
		return
	}
	if err := v.Check(body); err != nil {
		t.Errorf("payload does not validate: %v\n%s", err, indent(body))
	}
}

func indent(b []byte) string {
	var out bytes.Buffer
	if json.Indent(&out, b, "", "  ") != nil {
		return string(b)
	}
	s := out.String()
	if len(s) > 4000 {
		s = s[:4000] + "\n..."
	}
	return s
}

// SharedValidator is one Validator per test binary over the repository's
// JSON schemas (compiling them is the slow part, so they are compiled
// once). It fails when the schema directory is missing or incomplete.
var SharedValidator = sync.OnceValues(func() (*Validator, error) {
	dir, err := SchemaDir()
	if err != nil {
		return nil, err
	}
	dir = filepath.Join(dir, "json-schema")
	// Every schema refers to odata-v4.json: without it the copy is gone
	// (one clear error rather than one per payload).
	if _, err := os.Stat(filepath.Join(dir, "odata-v4.json")); err != nil {
		return nil, fmt.Errorf("DMTF JSON schemas missing from the repository (%s; api/schemas/refresh.sh restores them): %w", dir, err)
	}
	return NewValidator(dir), nil
})
