package hwmon

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/bmc"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var stamp = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func now() time.Time { return stamp }

// TestGolden reads each fixture tree under testdata/ and compares the
// sensors with testdata/<tree>.golden.json.
func TestGolden(t *testing.T) {
	for _, tree := range []string{"basic"} {
		t.Run(tree, func(t *testing.T) {
			got, err := New(filepath.Join("testdata", tree), now).Read()
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			b, err := json.MarshalIndent(got, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			b = append(b, '\n')
			golden := filepath.Join("testdata", tree+".golden.json")
			if *update {
				if err := os.WriteFile(golden, b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("golden file (run with -update to create): %v", err)
			}
			if diff := cmp.Diff(string(want), string(b)); diff != "" {
				t.Errorf("sensors differ from %s (-want +got):\n%s", golden, diff)
			}
		})
	}
}

// TestSemantics checks what the golden file encodes, so a careless
// -update cannot bless a regression.
func TestSemantics(t *testing.T) {
	got, err := New(filepath.Join("testdata", "basic"), now).Read()
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]bmc.Sensor{}
	for _, s := range got {
		by[s.ID] = s
	}
	tests := []struct {
		id      string
		name    string
		reading float64
		valid   bool
		level   bmc.Level
		ctx     string
	}{
		{"acpitz_temp1", "acpitz temp1", 27.8, true, bmc.LevelNormal, "SystemBoard"},
		{"coretemp_temp1", "coretemp Package id 0", 45, true, bmc.LevelNormal, "CPU"},
		{"coretemp_temp2", "coretemp Core 0", 86, true, bmc.LevelUpperCaution, "CPU"},
		{"nct6775_fan1", "nct6775 fan1", 1234, true, bmc.LevelNormal, "SystemBoard"},
		{"nct6775_fan2", "nct6775 fan2", 0, true, bmc.LevelLowerCaution, "SystemBoard"},
		{"nct6775_in0", "nct6775 Vcore", 1.128, true, bmc.LevelNormal, "SystemBoard"},
		{"nct6775_in1", "nct6775 in1", 0, false, bmc.LevelNormal, "SystemBoard"},
		{"nct6775_temp3", "nct6775 temp3", 0, false, bmc.LevelNormal, "SystemBoard"},
		{"nct6775_curr1", "nct6775 curr1", 2.5, true, bmc.LevelNormal, "SystemBoard"},
		{"nvme_temp1", "nvme Composite", 38.85, true, bmc.LevelNormal, "StorageDevice"},
		{"nvme_1_temp1", "nvme Composite", 40.85, true, bmc.LevelNormal, "StorageDevice"},
		{"w83627hf_temp1", "w83627hf temp1", 30, true, bmc.LevelNormal, "SystemBoard"},
		{"power_meter_power1", "power_meter power1", 12.5, true, bmc.LevelNormal, "PowerSupply"},
		{"acpi_fan_fan1", "acpi fan fan1", 900, true, bmc.LevelNormal, "SystemBoard"},
	}
	if len(got) != len(tests) {
		t.Errorf("sensors: got %d, want %d", len(got), len(tests))
	}
	for _, tt := range tests {
		s, ok := by[tt.id]
		if !ok {
			t.Errorf("%s: missing", tt.id)
			continue
		}
		if s.Name != tt.name || s.Reading != tt.reading || s.Valid != tt.valid || s.Level != tt.level || s.PhysicalContext != tt.ctx {
			t.Errorf("%s: got name %q reading %v valid %v level %q context %q, want %q %v %v %q %q",
				tt.id, s.Name, s.Reading, s.Valid, s.Level, s.PhysicalContext, tt.name, tt.reading, tt.valid, tt.level, tt.ctx)
		}
	}
	if c := by["coretemp_temp2"]; c.Thresholds.Hysteresis != 4 || *c.Thresholds.UpperCritical != 100 {
		t.Errorf("coretemp_temp2 thresholds: got %+v, want hysteresis 4, critical 100", c.Thresholds)
	}
}

func TestSymlinkedChips(t *testing.T) {
	dir := t.TempDir()
	target, err := filepath.Abs(filepath.Join("testdata", "basic", "hwmon1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "hwmon3")); err != nil {
		t.Skipf("symlinks unsupported: %v", err)
	}
	got, err := New(dir, now).Read()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != "coretemp_temp1" {
		t.Errorf("through a symlink: got %+v, want coretemp's two sensors", got)
	}
}

func TestMissingRoot(t *testing.T) {
	if _, err := New(filepath.Join(t.TempDir(), "nope"), now).Read(); err == nil {
		t.Errorf("missing root: got nil error")
	}
	got, err := New(t.TempDir(), now).Read()
	if err != nil || len(got) != 0 {
		t.Errorf("empty root: got %v, %v, want no sensors", got, err)
	}
}
