// Package oemschema is the CxlPool OEM extension's schema: the CSDL that
// $metadata references and the JSON schema the box publishes under
// /redfish/v1/JsonSchemas, so that an offline client (DMTF's Service
// Validator with --schema_directory, a test) can check every Oem.CxlPool
// object the service emits. Both files are generated from spec.go and
// embedded; TestFilesUpToDate fails when they drift.
package oemschema

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Names of the extension and its files.
const (
	// Vendor is the key under Oem.
	Vendor = "CxlPool"
	// Namespace is the versioned CSDL namespace of the types.
	Namespace = "CxlPool.v1_0_0"
	// CSDLFile is the CSDL file's name (DMTF's <Schema>_v1.xml form).
	CSDLFile = "CxlPool_v1.xml"
	// JSONSchemaFile is the JSON schema file's name.
	JSONSchemaFile = "CxlPool.v1_0_0.json"
	// CSDLURI is where the box serves the CSDL; $metadata references it.
	CSDLURI = "/redfish/v1/schemas/" + CSDLFile
	// JSONSchemaURI is where the box serves the JSON schema (the
	// JsonSchemaFile resource's Location), and the schema's $id.
	JSONSchemaURI = "/redfish/v1/JsonSchemas/" + Namespace + "/" + JSONSchemaFile
)

//go:embed csdl/CxlPool_v1.xml
var csdlFile []byte

//go:embed json-schema/CxlPool.v1_0_0.json
var jsonSchemaFile []byte

// CSDL is the extension's CSDL document.
func CSDL() []byte { return slices.Clone(csdlFile) }

// JSONSchema is the extension's JSON schema document.
func JSONSchema() []byte { return slices.Clone(jsonSchemaFile) }

// Type is the @odata.type of a top-level OEM object of the named type
// ("Connection" → "#CxlPool.v1_0_0.Connection"). It panics on a name the
// extension lacks: a programming error that every test reaching the
// object would show.
func Type(name string) string {
	for _, t := range extension() {
		if t.name == name && t.top {
			return "#" + Namespace + "." + name
		}
	}
	panic("oemschema: no top-level OEM type " + name)
}

// Object is Oem.CxlPool of the named type: props with its @odata.type.
// The map is props itself, so callers may go on adding to it.
func Object(name string, props map[string]any) map[string]any {
	props["@odata.type"] = Type(name)
	return props
}

// Oem is the Oem property holding one CxlPool object of the named type.
func Oem(name string, props map[string]any) map[string]any {
	return map[string]any{Vendor: Object(name, props)}
}

const (
	dmtf       = "http://redfish.dmtf.org/schemas/v1/"
	idRef      = dmtf + "odata-v4.json#/definitions/idRef"
	odataType  = dmtf + "odata-v4.json#/definitions/type"
	annotation = "^([a-zA-Z_][a-zA-Z0-9_]*)?@(odata|Redfish|Message)\\.[a-zA-Z_][a-zA-Z0-9_]*$"
	owner      = "cxlpool"
)

// generateJSONSchema writes the JSON schema from spec.go in DMTF's form:
// closed objects (additionalProperties false), annotations allowed,
// readonly on what a client cannot set.
func generateJSONSchema() ([]byte, error) {
	defs := map[string]any{}
	for _, t := range extension() {
		props := map[string]any{}
		if t.top {
			props["@odata.type"] = map[string]any{"$ref": odataType}
		}
		for _, p := range t.props {
			props[p.name] = jsonProp(p)
		}
		defs[t.name] = map[string]any{
			"additionalProperties": false,
			"description":          t.desc,
			"patternProperties": map[string]any{annotation: map[string]any{
				"description": "This property shall specify a valid odata or Redfish property.",
				"type":        []string{"array", "boolean", "integer", "number", "null", "object", "string"},
			}},
			"properties": props,
			"type":       "object",
		}
	}
	doc := map[string]any{
		"$id":          JSONSchemaURI,
		"$schema":      dmtf + "redfish-schema-v1.json",
		"copyright":    "Copyright the cxlpool authors. The CxlPool OEM extension of the Redfish schema.",
		"definitions":  defs,
		"owningEntity": owner,
		"release":      "1.0",
		"title":        "#" + Namespace,
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "    ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func jsonProp(p prop) map[string]any {
	var item map[string]any
	switch p.kind {
	case kString:
		item = map[string]any{"type": "string"}
	case kInt:
		item = map[string]any{"type": "integer"}
	case kNumber:
		item = map[string]any{"type": "number"}
	case kBool:
		item = map[string]any{"type": "boolean"}
	case kDateTime:
		item = map[string]any{"format": "date-time", "type": "string"}
	case kLink:
		item = map[string]any{"$ref": idRef}
	case kObject:
		item = map[string]any{"$ref": "#/definitions/" + p.of}
	}
	var out map[string]any
	switch {
	case p.array:
		out = map[string]any{"items": item, "type": "array"}
		if p.nullable {
			out["type"] = []string{"array", "null"}
		}
	case p.nullable && item["type"] != nil:
		item["type"] = []string{item["type"].(string), "null"}
		out = item
	case p.nullable:
		out = map[string]any{"anyOf": []any{item, map[string]any{"type": "null"}}}
	default:
		out = item
	}
	out["description"] = p.desc
	out["readonly"] = !p.write
	return out
}

// generateCSDL writes the CSDL from spec.go: an unversioned namespace
// naming the owner and the versioned one with the complex types; top-level
// types derive from Resource.OemObject.
func generateCSDL() []byte {
	refs := map[string]bool{}
	for _, t := range extension() {
		for _, p := range t.props {
			if p.kind == kLink {
				refs[strings.Split(p.of, ".")[0]] = true
			}
		}
	}
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>
<!-- The CxlPool OEM extension of the Redfish schema, generated from
     api/oemschema/spec.go (go test ./api/oemschema -update). -->
<edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0">

  <edmx:Reference Uri="http://docs.oasis-open.org/odata/odata/v4.0/errata03/csd01/complete/vocabularies/Org.OData.Core.V1.xml">
    <edmx:Include Namespace="Org.OData.Core.V1" Alias="OData"/>
  </edmx:Reference>
  <edmx:Reference Uri="http://redfish.dmtf.org/schemas/v1/RedfishExtensions_v1.xml">
    <edmx:Include Namespace="RedfishExtensions.v1_0_0" Alias="Redfish"/>
  </edmx:Reference>
  <edmx:Reference Uri="http://redfish.dmtf.org/schemas/v1/Resource_v1.xml">
    <edmx:Include Namespace="Resource"/>
    <edmx:Include Namespace="Resource.v1_0_0"/>
  </edmx:Reference>
`)
	stems := make([]string, 0, len(refs))
	for s := range refs {
		stems = append(stems, s)
	}
	slices.Sort(stems)
	for _, s := range stems {
		fmt.Fprintf(&b, "  <edmx:Reference Uri=\"%s%s_v1.xml\">\n    <edmx:Include Namespace=\"%s\"/>\n  </edmx:Reference>\n", dmtf, s, s)
	}
	fmt.Fprintf(&b, `
  <edmx:DataServices>

    <Schema xmlns="http://docs.oasis-open.org/odata/ns/edm" Namespace="%s">
      <Annotation Term="Redfish.OwningEntity" String="%s"/>
    </Schema>

    <Schema xmlns="http://docs.oasis-open.org/odata/ns/edm" Namespace="%s">
      <Annotation Term="Redfish.OwningEntity" String="%s"/>
      <Annotation Term="Redfish.Release" String="1.0"/>
`, Vendor, owner, Namespace, owner)
	for _, t := range extension() {
		base := ""
		if t.top {
			base = ` BaseType="Resource.OemObject"`
		}
		fmt.Fprintf(&b, "\n      <ComplexType Name=\"%s\"%s>\n", t.name, base)
		b.WriteString("        <Annotation Term=\"OData.AdditionalProperties\" Bool=\"false\"/>\n")
		fmt.Fprintf(&b, "        <Annotation Term=\"OData.Description\" String=\"%s\"/>\n", xmlEscape(t.desc))
		fmt.Fprintf(&b, "        <Annotation Term=\"OData.LongDescription\" String=\"%s\"/>\n", xmlEscape("This type shall describe "+lowerFirst(t.desc)))
		for _, p := range t.props {
			b.WriteString(csdlProp(p))
		}
		b.WriteString("      </ComplexType>\n")
	}
	b.WriteString(`
    </Schema>

  </edmx:DataServices>
</edmx:Edmx>
`)
	return []byte(b.String())
}

func csdlProp(p prop) string {
	var typ string
	switch p.kind {
	case kString:
		typ = "Edm.String"
	case kInt:
		typ = "Edm.Int64"
	case kNumber:
		typ = "Edm.Decimal"
	case kBool:
		typ = "Edm.Boolean"
	case kDateTime:
		typ = "Edm.DateTimeOffset"
	case kLink:
		typ = p.of
	case kObject:
		typ = Namespace + "." + p.of
	}
	if p.array {
		typ = "Collection(" + typ + ")"
	}
	elem := "Property"
	if p.kind == kLink {
		elem = "NavigationProperty"
	}
	nullable := ""
	if !p.nullable && (p.array || p.kind == kLink || p.kind == kObject) {
		nullable = ` Nullable="false"`
	}
	perm := "Read"
	if p.write {
		perm = "ReadWrite"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "        <%s Name=\"%s\" Type=\"%s\"%s>\n", elem, p.name, typ, nullable)
	fmt.Fprintf(&b, "          <Annotation Term=\"OData.Permissions\" EnumMember=\"OData.Permission/%s\"/>\n", perm)
	fmt.Fprintf(&b, "          <Annotation Term=\"OData.Description\" String=\"%s\"/>\n", xmlEscape(p.desc))
	fmt.Fprintf(&b, "          <Annotation Term=\"OData.LongDescription\" String=\"%s\"/>\n",
		xmlEscape("This property shall contain "+lowerFirst(p.desc)))
	if p.kind == kLink {
		b.WriteString("          <Annotation Term=\"OData.AutoExpandReferences\"/>\n")
	}
	fmt.Fprintf(&b, "        </%s>\n", elem)
	return b.String()
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}

func xmlEscape(s string) string {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")
	return r.Replace(s)
}
