package telemetry

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/fabric/cci"
	"cxlpool/hmu"
)

// TestCoveredCells: a host's heatmap shows only cells wholly inside what
// it holds, counting adjacent extents as one.
func TestCoveredCells(t *testing.T) {
	const c = 16
	tests := []struct {
		name string
		es   []cci.Extent
		want []bool
	}{
		{"nothing", nil, []bool{false, false, false, false}},
		{"one whole cell", []cci.Extent{{DPA: c, Length: c}}, []bool{false, true, false, false}},
		{"partial cells are hidden", []cci.Extent{{DPA: 8, Length: 2 * c}}, []bool{false, true, false, false}},
		{"adjacent extents cover a cell", []cci.Extent{{DPA: 2*c + 8, Length: 8}, {DPA: 2 * c, Length: 8}}, []bool{false, false, true, false}},
		{"past the map", []cci.Extent{{DPA: 3 * c, Length: 4 * c}}, []bool{false, false, false, true}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, coveredCells(tt.es, c, 4)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
}

// TestDefaultCHMUConfigFitsCaps: the default adapts to what an instance
// offers.
func TestDefaultCHMUConfigFitsCaps(t *testing.T) {
	full := hmu.Caps{Tracks: 0x3f, UnitSizes: 1 << 4, DownSampling: 1, EpochMode: true, AlwaysOn: true, OverflowIRQ: true, LevelIRQ: true,
		MinEpoch: hmu.Epoch{Scale: 2, Multiplier: 1}, MaxEpoch: hmu.Epoch{Scale: 5, Multiplier: 100}, HotlistSize: 64}
	tests := []struct {
		name string
		edit func(*hmu.Caps)
		want func(*hmu.Config)
	}{
		{"everything offered", func(*hmu.Caps) {}, func(*hmu.Config) {}},
		{"reads only", func(c *hmu.Caps) { c.Tracks = 1 << 3 }, func(c *hmu.Config) { c.Access = hmu.AccessRead }},
		{"64 KiB units", func(c *hmu.Caps) { c.UnitSizes = 1 << 8 }, func(c *hmu.Config) { c.UnitSize = 64 << 10 }},
		{"down-sampling 4 at least", func(c *hmu.Caps) { c.DownSampling = 1 << 2 }, func(c *hmu.Config) { c.DSFactor = 2 }},
		{"1 s minimum epoch", func(c *hmu.Caps) { c.MinEpoch = hmu.Epoch{Scale: 5, Multiplier: 1} }, func(c *hmu.Config) { c.Epoch = hmu.Epoch{Scale: 5, Multiplier: 1} }},
		{"10 ms maximum epoch", func(c *hmu.Caps) { c.MaxEpoch = hmu.Epoch{Scale: 3, Multiplier: 1} }, func(c *hmu.Config) { c.Epoch = hmu.Epoch{Scale: 3, Multiplier: 1} }},
		{"always-on only", func(c *hmu.Caps) { c.EpochMode = false }, func(c *hmu.Config) { c.Mode, c.Epoch = hmu.ModeAlwaysOn, hmu.Epoch{} }},
		{"no interrupts", func(c *hmu.Caps) { c.OverflowIRQ, c.LevelIRQ = false, false }, func(c *hmu.Config) { c.OverflowIRQ, c.LevelIRQ = false, false }},
	}
	for _, tt := range tests {
		caps := full
		tt.edit(&caps)
		want := hmu.Config{Access: hmu.AccessReadWrite, Threshold: 4, UnitSize: 4096, Mode: hmu.ModeEpoch,
			Epoch: hmu.Epoch{Scale: 4, Multiplier: 1}, OverflowIRQ: true, LevelIRQ: true, FillThreshold: 32}
		tt.want(&want)
		if diff := cmp.Diff(want, DefaultCHMUConfig(caps)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
}

// FuzzParseCHMU: the --chmu parser never panics, and what it accepts
// names a path and a non-negative offset that print back to an
// equivalent flag.
func FuzzParseCHMU(f *testing.F) {
	for _, s := range []string{"/sys/bus/pci/devices/0000:0d:00.0/resource2@0x10000", "bar", "bar@4096", "@1", "a@b@c", "x@-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.HasPrefix(s, "pci:") {
			return // reads sysfs
		}
		loc, err := ParseCHMU(s)
		if err != nil {
			return
		}
		if loc.Path == "" || loc.Offset < 0 {
			t.Fatalf("ParseCHMU(%q) = %+v", s, loc)
		}
		again, err := ParseCHMU(loc.Path + "@" + strconv.FormatInt(loc.Offset, 10))
		if err != nil || again != loc {
			t.Fatalf("ParseCHMU(%q) = %+v; printed back: %+v, %v", s, loc, again, err)
		}
	})
}
