package fm

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/fabric"
	"cxlpool/fabric/cci"
	"cxlpool/sim"
)

// fileLog is a logger writing to a file in the test's directory (writes
// to an *os.File are safe from the client's goroutines) and a func that
// returns what it holds.
func fileLog(t *testing.T) (*slog.Logger, func() string) {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "fm.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return slog.New(slog.NewTextHandler(f, nil)), func() string {
		b, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
}

// addAll offers host the whole of region 0 under tag and waits for the
// host to accept it.
func addAll(t *testing.T, r *rig, host uint16, tag cci.Tag) {
	t.Helper()
	const region = 1 << 30
	if err := r.c.Add(context.Background(), fabric.AddRequest{Host: host, Policy: fabric.AddFree, Region: 0, Length: region, Tag: tag}); err != nil {
		t.Fatalf("Add to host %d: %v", host, err)
	}
	if ev := r.next(t, fabric.EventAddResponse); ev.Host != host || sum(ev.Extents, tag) != region {
		t.Fatalf("add response: host %d with %d bytes, want host %d with %d", ev.Host, sum(ev.Extents, tag), host, region)
	}
}

// twoRegions is a box of two 1 GiB regions of 256 MiB blocks, so one add
// of a whole region lands on known blocks whatever the device's placement.
func twoRegions(sor, configurable []bool) func(*sim.Config) {
	return func(c *sim.Config) {
		c.Capacity = 2 << 30
		c.Regions = 2
		c.BlockSize = 256 << 20
		c.SanitizeOnRelease = sor
		c.SoRConfigurable = configurable
	}
}

// sorOf is each region's (SanitizeOnRelease, SoRConfigurable).
func sorOf(b fabric.Box) [][2]bool {
	var out [][2]bool
	for _, r := range b.Regions {
		out = append(out, [2]bool{r.SanitizeOnRelease, r.SoRConfigurable})
	}
	return out
}

func TestDiscoverTurnsOnSanitizeOnRelease(t *testing.T) {
	tests := []struct {
		name         string
		sor, conf    []bool
		want         [][2]bool
		warnRegions  []string // regions the log must warn about
		quietRegions []string
	}{
		{name: "already on", sor: nil, conf: nil, want: [][2]bool{{true, true}, {true, true}}},
		{name: "off and configurable", sor: []bool{false, false}, conf: nil, want: [][2]bool{{true, true}, {true, true}}},
		{name: "off and fixed in region 0", sor: []bool{false, false}, conf: []bool{false, true},
			want: [][2]bool{{false, false}, {true, true}}, warnRegions: []string{"region=0"}, quietRegions: []string{"region=1"}},
		{name: "on and fixed", sor: []bool{true, true}, conf: []bool{false, false}, want: [][2]bool{{true, false}, {true, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log, logs := fileLog(t)
			r := newRig(t, twoRegions(tt.sor, tt.conf), Config{Logger: log})
			got := r.discover(t)
			if diff := cmp.Diff(tt.want, sorOf(got)); diff != "" {
				t.Errorf("regions' (SanitizeOnRelease, SoRConfigurable) after discovery (-want +got):\n%s", diff)
			}
			// The model is the device's word: read the regions again.
			var again fabric.Box
			if err := r.c.readRegions(context.Background(), cci.GetDCDInfoResp{}, &again); err != nil {
				t.Fatalf("readRegions: %v", err)
			}
			for i, reg := range again.Regions {
				if reg.SanitizeOnRelease != tt.want[i][0] {
					t.Errorf("region %d on the device: SanitizeOnRelease %v, want %v", i, reg.SanitizeOnRelease, tt.want[i][0])
				}
			}
			out := logs()
			for _, w := range tt.warnRegions {
				if !strings.Contains(out, "Sanitize on Release is off") || !strings.Contains(out, w) {
					t.Errorf("log does not warn about %s:\n%s", w, out)
				}
			}
			for _, q := range tt.quietRegions {
				for _, line := range strings.Split(out, "\n") {
					if strings.Contains(line, "Sanitize on Release is off") && strings.Contains(line, q) {
						t.Errorf("log warns about %s, which sanitizes: %s", q, line)
					}
				}
			}
		})
	}
}

// TestHostReleaseIsSanitizedAfterDiscovery is issue 21 §4: on a box whose
// regions start with Sanitize on Release off (but configurable), host 2
// writes, gives its capacity back itself (4803h, no sanitize asked by
// anyone), and host 5 is then given the same blocks: it must read zeros.
func TestHostReleaseIsSanitizedAfterDiscovery(t *testing.T) {
	r := newRig(t, twoRegions([]bool{false, false}, nil), Config{})
	r.discover(t)
	ctx := context.Background()
	secret := []byte("host 2's secret")
	tag2 := cci.NewTag()
	addAll(t, r, 2, tag2)
	h2 := r.box.Host(2)
	for _, e := range h2.Extents() {
		if _, err := h2.WriteAt(secret, e.DPA); err != nil {
			t.Fatalf("host 2 WriteAt %#x: %v", e.DPA, err)
		}
	}
	if err := h2.Release(ctx, tag2); err != nil {
		t.Fatalf("host 2 releases itself: %v", err)
	}
	if ev := r.next(t, fabric.EventCapacityReleased); ev.Host != 2 {
		t.Fatalf("released event for host %d, want 2", ev.Host)
	}

	addAll(t, r, 5, cci.NewTag())
	h5 := r.box.Host(5)
	got := make([]byte, len(secret))
	for _, e := range h5.Extents() {
		if _, err := h5.ReadAt(got, e.DPA); err != nil {
			t.Fatalf("host 5 ReadAt %#x: %v", e.DPA, err)
		}
		if want := make([]byte, len(secret)); !bytes.Equal(got, want) {
			t.Errorf("host 5 reads %q at %#x, where host 2 wrote before releasing; want zeros", got, e.DPA)
		}
	}
}

// TestDiscoverKeepsARegionInUse: the device refuses 5602h while a region
// holds capacity. Discovery then succeeds, reports the region as it is
// (off) and warns, rather than failing the daemon's start.
func TestDiscoverKeepsARegionInUse(t *testing.T) {
	log, logs := fileLog(t)
	r := newRig(t, twoRegions([]bool{false, false}, nil), Config{Logger: log})
	r.discover(t)
	ctx := context.Background()
	// Turn region 0 off again while it is empty, then put capacity in it.
	off := &cci.SetDCRegionConfigReq{Region: 0, BlockSize: 256 << 20, SanitizeOnRelease: false}
	if err := r.c.Do(ctx, cci.OpSetDCRegionConfig, off, &cci.SetDCRegionConfigResp{}); err != nil {
		t.Fatalf("5602h SoR off: %v", err)
	}
	tag := cci.NewTag()
	if err := r.c.Add(ctx, fabric.AddRequest{Host: 2, Policy: fabric.AddFree, Region: 0, Length: 256 << 20, Tag: tag}); err != nil {
		t.Fatalf("Add: %v", err)
	}
	r.next(t, fabric.EventAddResponse)

	got := r.discover(t)
	if diff := cmp.Diff([][2]bool{{false, true}, {true, true}}, sorOf(got)); diff != "" {
		t.Errorf("regions after rediscovery (-want +got):\n%s", diff)
	}
	if out := logs(); !strings.Contains(out, "refused to turn it on") || !strings.Contains(out, "region=0") {
		t.Errorf("log does not say the device refused region 0:\n%s", out)
	}
}
