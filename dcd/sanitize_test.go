package dcd_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/appliance"
	"cxlpool/dcd"
)

// sorBox is a box of two 1 GiB regions (region 1 sharable) with the given
// Sanitize on Release settings, so a chunk of a whole region lands on the
// same blocks whatever the placement.
func sorBox(sor, configurable []bool) func(*appliance.Config) {
	return func(c *appliance.Config) {
		c.Sim.Capacity = 2 * gib
		c.Sim.Regions = 2
		c.Sim.SanitizeOnRelease = sor
		c.Sim.SoRConfigurable = configurable
	}
}

// TestHostOwnReleaseIsSanitized is issue 21 §4 end to end: the box starts
// with Sanitize on Release off (configurable); host 2 writes into its
// chunk and gives it back itself; host 5 then gets a chunk on the same
// blocks and must read zeros.
func TestHostOwnReleaseIsSanitized(t *testing.T) {
	s := newStack(t, sorBox([]bool{false, false}, nil))
	ctx := ctxT(t)
	for _, r := range s.m.Box().Regions {
		if !r.SanitizeOnRelease {
			t.Errorf("region %d: Sanitize on Release off after discovery, want on (it is configurable)", r.Index)
		}
	}
	regions, err := s.led.Regions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range regions {
		if !r.SanitizeOnRelease {
			t.Errorf("ledger region %d: Sanitize on Release off, want the device's setting (on)", r.Index)
		}
	}

	x, err := s.m.Reserve(ctx, dcd.ReserveRequest{Name: "x", Size: gib, Region: 0})
	if err != nil {
		t.Fatalf("Reserve x: %v", err)
	}
	gx, err := s.m.Grant(ctx, x.ID, 2)
	if err != nil {
		t.Fatalf("Grant x to host 2: %v", err)
	}
	secret := []byte("host 2's secret")
	h2 := s.box.Host(2)
	for _, e := range gx.Extents {
		if _, err := h2.WriteAt(secret, e.DPA); err != nil {
			t.Fatalf("host 2 WriteAt %#x: %v", e.DPA, err)
		}
	}
	if err := h2.Release(ctx, x.Tag); err != nil {
		t.Fatalf("host 2 releases x itself: %v", err)
	}
	// The ledger learns of the release from the device (a reconcile);
	// only then is the chunk's capacity free to delete and reuse.
	deadline := time.Now().Add(20 * time.Second)
	for {
		g, err := s.led.Grant(ctx, gx.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !g.State.Active() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("grant %d still %s after host 2 released its capacity", g.ID, g.State)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := s.m.DeleteChunk(ctx, x.ID); err != nil {
		t.Fatalf("DeleteChunk x: %v", err)
	}

	z, err := s.m.Reserve(ctx, dcd.ReserveRequest{Name: "z", Size: gib, Region: 0})
	if err != nil {
		t.Fatalf("Reserve z: %v", err)
	}
	gz, err := s.m.Grant(ctx, z.ID, 5)
	if err != nil {
		t.Fatalf("Grant z to host 5: %v", err)
	}
	h5 := s.box.Host(5)
	got := make([]byte, len(secret))
	for _, e := range gz.Extents {
		if _, err := h5.ReadAt(got, e.DPA); err != nil {
			t.Fatalf("host 5 ReadAt %#x: %v", e.DPA, err)
		}
		if !bytes.Equal(got, make([]byte, len(secret))) {
			t.Errorf("host 5 reads %q at %#x where host 2 wrote before releasing itself; want zeros", got, e.DPA)
		}
	}
}

// TestReserveRefusesRegionThatDoesNotSanitize: region 0's Sanitize on
// Release is off and fixed, so no new chunk goes there; region 1 is fine.
func TestReserveRefusesRegionThatDoesNotSanitize(t *testing.T) {
	s := newStack(t, sorBox([]bool{false, false}, []bool{false, true}))
	ctx := ctxT(t)
	if got := s.m.Box().Regions[0].SanitizeOnRelease; got {
		t.Fatalf("region 0: Sanitize on Release %v after discovery, want off (fixed by the device)", got)
	}
	const rule = "region 0 does not sanitize capacity a host releases itself (Sanitize on Release is off and the device does not let it be changed): allocation refused"
	tests := []struct {
		name    string
		req     dcd.ReserveRequest
		refused bool
	}{
		{"region 0 by number", dcd.ReserveRequest{Size: blk, Region: 0}, true},
		{"first non-sharable region", dcd.ReserveRequest{Size: blk, Region: -1}, true},
		{"region 1 by number", dcd.ReserveRequest{Size: blk, Region: 1}, false},
		{"first sharable region", dcd.ReserveRequest{Size: blk, Region: -1, Sharable: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := s.m.Reserve(ctx, tt.req)
			if !tt.refused {
				if err != nil {
					t.Fatalf("Reserve: %v, want a chunk", err)
				}
				if c.Region != 1 {
					t.Errorf("chunk in region %d, want 1", c.Region)
				}
				return
			}
			if !errors.Is(err, dcd.ErrInvalid) || !strings.Contains(err.Error(), rule) {
				t.Fatalf("Reserve: got %v, want ErrInvalid naming the rule %q", err, rule)
			}
		})
	}
	chunks, err := s.led.Chunks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var inRegion0 []dcd.ChunkID
	for _, c := range chunks {
		if c.Region == 0 {
			inRegion0 = append(inRegion0, c.ID)
		}
	}
	if diff := cmp.Diff([]dcd.ChunkID(nil), inRegion0); diff != "" {
		t.Errorf("chunks in region 0 after refusals (-want +got):\n%s", diff)
	}
}

func TestAllocationRefusal(t *testing.T) {
	if err := dcd.AllocationRefusal(dcd.Region{Index: 1, SanitizeOnRelease: true}); err != nil {
		t.Errorf("region that sanitizes: got %v, want nil", err)
	}
	err := dcd.AllocationRefusal(dcd.Region{Index: 1})
	want := "region 1 does not sanitize capacity a host releases itself (Sanitize on Release is off and the device does not let it be changed): allocation refused"
	if err == nil || err.Error() != want || !errors.Is(err, dcd.ErrInvalid) {
		t.Errorf("region that does not sanitize: got %v, want %q wrapping ErrInvalid", err, want)
	}
}
