// Command refresh copies into api/schemas/dmtf the DMTF Redfish schema
// files (DSP8010 bundle: json-schema/ and csdl/) that the service and its
// tests use, and nothing else, so that the tests never read files outside
// the repository. Run it through api/schemas/refresh.sh after moving the
// service to newer schema versions or adding a resource type.
//
// Which files: every @odata.type named in the api tree (Go sources and
// JSON files: registries, golden payloads), each compiled by
// apitest.Validator against the bundle exactly as the tests compile it;
// the JSON schemas it reads doing so are the closure to keep (resources
// held as links are not followed, see apitest's linksOnly). The CSDL kept
// is, for every schema namespace the payloads use (each type's own,
// Resource, RedfishExtensions, and those of the complex types and enums
// the JSON closure reached; not those of resources reached only as link
// targets), its _v1.xml file: what $metadata references and what DMTF's
// Service Validator reads offline.
// Types the bundle lacks (OEM types) are listed and skipped.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"cxlpool/api/apitest"
)

func main() {
	bundle := flag.String("bundle", filepath.Join("..", "shared", "redfish"), "DMTF bundle directory holding json-schema/ and csdl/")
	src := flag.String("src", "api", "tree whose .go and .json files name the @odata.types to keep")
	out := flag.String("out", filepath.Join("api", "schemas", "dmtf"), "directory to write json-schema/, csdl/ and VERSION into (replaced)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := refresh(*bundle, *src, *out, log); err != nil {
		fmt.Fprintln(os.Stderr, "refresh:", err)
		os.Exit(1)
	}
}

// typeLiteral is an @odata.type in a quoted string: versioned
// (#Ns.vX_Y_Z.Type) or a collection's (#Ns.Ns); the unversioned form with
// two different names is an action (#ComputerSystem.Reset).
var typeLiteral = regexp.MustCompile(`"(#([A-Za-z0-9]+)\.(?:v[0-9]+_[0-9]+_[0-9]+\.)?([A-Za-z0-9]+))"`)

func refresh(bundle, src, out string, log *slog.Logger) error {
	jsonDir, csdlDir := filepath.Join(bundle, "json-schema"), filepath.Join(bundle, "csdl")
	for _, d := range []string{jsonDir, csdlDir} {
		if _, err := os.Stat(d); err != nil {
			return fmt.Errorf("bundle %s: %w", bundle, err)
		}
	}
	types, err := scanTypes(src, out)
	if err != nil {
		return err
	}
	v := apitest.NewValidator(jsonDir)
	namespaces := map[string]bool{"Resource": true, "RedfishExtensions": true}
	for _, t := range append(types, "error") {
		if t != "error" {
			file, _, err := apitest.SchemaFile(t)
			if err != nil {
				return err
			}
			if _, err := os.Stat(filepath.Join(jsonDir, file)); err != nil {
				log.Warn("type not in the bundle: skipped (an OEM type, or a version the bundle lacks)", "type", t, "file", file)
				continue
			}
			namespaces[namespaceOf(file)] = true
		}
		if err := v.CompileType(t); err != nil {
			return fmt.Errorf("compile %s: %w", t, err)
		}
	}
	jsonFiles := v.Files()
	for _, f := range jsonFiles {
		if ns := namespaceOf(f); !namespaces[ns] {
			used, err := propertyTypes(filepath.Join(jsonDir, f), ns)
			if err != nil {
				return err
			}
			namespaces[ns] = used
		}
	}
	var csdlFiles []string
	for ns, used := range namespaces {
		f := ns + "_v1.xml"
		if !used {
			continue
		}
		if _, err := os.Stat(filepath.Join(csdlDir, f)); err == nil {
			csdlFiles = append(csdlFiles, f)
		}
	}
	slices.Sort(csdlFiles)
	release, err := bundleRelease(jsonDir)
	if err != nil {
		return err
	}

	for _, d := range []string{"json-schema", "csdl"} {
		if err := os.RemoveAll(filepath.Join(out, d)); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(out, d), 0o755); err != nil {
			return err
		}
	}
	for _, c := range []struct {
		from, to string
		files    []string
	}{{jsonDir, filepath.Join(out, "json-schema"), jsonFiles}, {csdlDir, filepath.Join(out, "csdl"), csdlFiles}} {
		for _, f := range c.files {
			b, err := os.ReadFile(filepath.Join(c.from, f))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(c.to, f), b, 0o644); err != nil {
				return err
			}
		}
	}
	version := fmt.Sprintf("DMTF Redfish schema bundle (DSP8010) %s\n", release)
	if err := os.WriteFile(filepath.Join(out, "VERSION"), []byte(version), 0o644); err != nil {
		return err
	}
	log.Info("schemas copied", "bundle", release, "types", len(types), "json", len(jsonFiles), "csdl", len(csdlFiles), "out", out)
	return nil
}

// scanTypes lists the @odata.types named in src's .go and .json files,
// sorted, leaving out the copy itself (skip).
func scanTypes(src, skip string) ([]string, error) {
	seen := map[string]bool{}
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if filepath.Clean(path) == filepath.Clean(skip) {
				return filepath.SkipDir
			}
			return nil
		}
		if ext := filepath.Ext(path); ext != ".go" && ext != ".json" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range typeLiteral.FindAllStringSubmatch(string(b), -1) {
			if strings.Count(m[1], ".") == 1 && m[2] != m[3] {
				continue // an action
			}
			seen[m[1]] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(seen) == 0 {
		return nil, fmt.Errorf("no @odata.type found under %s", src)
	}
	out := make([]string, 0, len(seen))
	for t := range seen {
		out = append(out, t)
	}
	slices.Sort(out)
	return out, nil
}

// propertyTypes reports whether a JSON schema file of the closure holds
// types that payloads use as property values: any versioned file (the
// validator followed a property into it), or an unversioned one that
// defines no resource of its own name (enums such as PhysicalContext).
// An unversioned resource file was read only to resolve a link to that
// resource, whose CSDL a payload without such links does not need.
func propertyTypes(path, ns string) (bool, error) {
	if strings.Contains(filepath.Base(path), ".v") {
		return true, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	var doc struct {
		Definitions map[string]struct {
			AnyOf []any `json:"anyOf"`
		} `json:"definitions"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	own, ok := doc.Definitions[ns]
	return !ok || own.AnyOf == nil, nil
}

// namespaceOf is the schema namespace of a JSON schema file:
// "Resource.v1_20_0.json" → "Resource", "odata-v4.json" → "odata-v4".
func namespaceOf(file string) string {
	ns, _, _ := strings.Cut(strings.TrimSuffix(file, ".json"), ".")
	return ns
}

// bundleRelease is the bundle's version: the newest "release" any of its
// JSON schemas carries (DSP8010 stamps each file with the release that
// last changed it).
func bundleRelease(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	newest := ""
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return "", err
		}
		var doc struct {
			Release string `json:"release"`
		}
		if json.Unmarshal(b, &doc) == nil && releaseLess(newest, doc.Release) {
			newest = doc.Release
		}
	}
	if newest == "" {
		return "", errors.New("no schema in the bundle names its release")
	}
	return newest, nil
}

// releaseLess orders DMTF release names ("2025.4" after "2025.3", "2016.1"
// before "2016.2"); they are YEAR.N.
func releaseLess(a, b string) bool {
	var ay, an, by, bn int
	if _, err := fmt.Sscanf(b, "%d.%d", &by, &bn); err != nil {
		return false
	}
	if _, err := fmt.Sscanf(a, "%d.%d", &ay, &an); err != nil {
		return true
	}
	return ay < by || (ay == by && an < bn)
}
