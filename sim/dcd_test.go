package sim

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/fabric/cci"
	"cxlpool/fabric/mctp"
)

// r1 is the base of region 1 in the default box.
const r1 = 512 << 30

func TestInitiateAddErrors(t *testing.T) {
	b, f := newBox(t, nil)
	tagA := tagN(0xa)
	if rc := f.add(cci.InitiateDCAddReq{HostID: 0, Policy: cci.AddPolicyFree, Region: 1, Length: 2 * block, Tag: tagA}); rc != cci.Success {
		t.Fatal(rc)
	}
	if rc := f.add(cci.InitiateDCAddReq{HostID: 1, Policy: cci.AddPolicyPrescriptive, Extents: []cci.Extent{{DPA: 0, Length: block}}}); rc != cci.Success {
		t.Fatal(rc)
	}
	settle(t, b, 0)
	settle(t, b, 1)
	ext := func(dpa, n uint64) cci.Extent { return cci.Extent{DPA: dpa, Length: n} }
	pres := func(host uint16, es ...cci.Extent) cci.InitiateDCAddReq {
		return cci.InitiateDCAddReq{HostID: host, Policy: cci.AddPolicyPrescriptive, Extents: es}
	}
	tests := []struct {
		name string
		q    cci.InitiateDCAddReq
		want cci.ReturnCode
	}{
		{"bad host", cci.InitiateDCAddReq{HostID: 8, Policy: cci.AddPolicyFree, Length: block}, cci.InvalidInput},
		{"bad policy 4", cci.InitiateDCAddReq{HostID: 2, Policy: 4, Length: block}, cci.InvalidInput},
		{"bad policy 15", cci.InitiateDCAddReq{HostID: 2, Policy: 15, Length: block}, cci.InvalidInput},
		{"bad region", cci.InitiateDCAddReq{HostID: 2, Policy: cci.AddPolicyFree, Region: 2, Length: block}, cci.InvalidInput},
		{"contiguous bad region", cci.InitiateDCAddReq{HostID: 2, Policy: cci.AddPolicyContiguous, Region: 7, Length: block}, cci.InvalidInput},
		{"zero length", cci.InitiateDCAddReq{HostID: 2, Policy: cci.AddPolicyFree, Length: 0}, cci.InvalidInput},
		{"length not block multiple", cci.InitiateDCAddReq{HostID: 2, Policy: cci.AddPolicyFree, Length: block + 4096}, cci.InvalidInput},
		{"length beyond region", cci.InitiateDCAddReq{HostID: 2, Policy: cci.AddPolicyFree, Length: 513 * gib}, cci.ResourcesExhausted},
		{"contiguous beyond region", cci.InitiateDCAddReq{HostID: 2, Policy: cci.AddPolicyContiguous, Length: 1 << 40}, cci.ResourcesExhausted},
		{"tag in use", cci.InitiateDCAddReq{HostID: 2, Policy: cci.AddPolicyFree, Region: 1, Length: block, Tag: tagA}, cci.InvalidInput},
		{"tag in use other region", cci.InitiateDCAddReq{HostID: 2, Policy: cci.AddPolicyFree, Region: 0, Length: block, Tag: tagA}, cci.InvalidInput},
		{"sharable region without tag", cci.InitiateDCAddReq{HostID: 2, Policy: cci.AddPolicyFree, Region: 1, Length: block}, cci.InvalidInput},
		{"prescriptive empty", pres(2), cci.InvalidExtentList},
		{"prescriptive misaligned", pres(2, ext(block+4096, block)), cci.InvalidExtentList},
		{"prescriptive zero length", pres(2, ext(block, 0)), cci.InvalidExtentList},
		{"prescriptive partial block", pres(2, ext(block, 4096)), cci.InvalidExtentList},
		{"prescriptive crosses regions", pres(2, ext(r1-block, 2*block)), cci.InvalidExtentList},
		{"prescriptive beyond capacity", pres(2, ext(1<<40, block)), cci.InvalidExtentList},
		{"prescriptive overlap", pres(2, ext(4*block, 2*block), ext(5*block, block)), cci.InvalidExtentList},
		{"prescriptive already accessible", pres(1, ext(0, block)), cci.InvalidExtentList},
		{"prescriptive owned by another host", pres(2, ext(0, block)), cci.InvalidExtentList},
		{"prescriptive tag in use", pres(2, cci.Extent{DPA: 8 * block, Length: block, Tag: tagA}), cci.InvalidInput},
		{"prescriptive sharable without tag", pres(2, ext(r1+16*block, block)), cci.InvalidInput},
		{"prescriptive tag in two regions", pres(2, cci.Extent{DPA: 8 * block, Length: block, Tag: tagN(9)}, cci.Extent{DPA: r1 + 16*block, Length: block, Tag: tagN(9)}), cci.InvalidExtentList},
		{"shared non-sharable region", cci.InitiateDCAddReq{HostID: 2, Policy: cci.AddPolicySharedAccess, Region: 0, Tag: tagA}, cci.InvalidInput},
		{"shared bad region", cci.InitiateDCAddReq{HostID: 2, Policy: cci.AddPolicySharedAccess, Region: 3, Tag: tagA}, cci.InvalidInput},
		{"shared unknown tag", cci.InitiateDCAddReq{HostID: 2, Policy: cci.AddPolicySharedAccess, Region: 1, Tag: tagN(0x77)}, cci.InvalidInput},
		{"shared zero tag", cci.InitiateDCAddReq{HostID: 2, Policy: cci.AddPolicySharedAccess, Region: 1}, cci.InvalidInput},
		{"shared already held", cci.InitiateDCAddReq{HostID: 0, Policy: cci.AddPolicySharedAccess, Region: 1, Tag: tagA}, cci.InvalidInput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if rc := f.add(tt.q); rc != tt.want {
				t.Errorf("got %v, want %v", rc, tt.want)
			}
		})
	}
	// Prescriptive count disagreeing with the payload.
	p := mustMarshal(t, &cci.InitiateDCAddReq{HostID: 2, Policy: cci.AddPolicyPrescriptive, Extents: []cci.Extent{ext(8*block, block)}})
	p[0x1c] = 2
	if m := f.send(mctp.MsgTypeFMAPI, cci.OpInitiateDCAdd, p); m.ReturnCode != cci.InvalidExtentList {
		t.Errorf("prescriptive bad count: got %v, want Invalid Extent List", m.ReturnCode)
	}
	// Nothing above changed the state.
	if got := blocksFree(b, 0); got != 2047 {
		t.Errorf("region 0 free blocks = %d, want 2047", got)
	}
	if got := len(f.tags().Tags); got != 1 {
		t.Errorf("tags = %d, want 1", got)
	}
}

func TestAddExhaustion(t *testing.T) {
	small := func(c *Config) { c.Capacity = 2 * gib } // 4 blocks per region
	tests := []struct {
		name  string
		mod   func(*Config)
		setup []cci.InitiateDCAddReq
		q     cci.InitiateDCAddReq
		want  cci.ReturnCode
	}{
		{
			name: "no free space",
			mod:  small,
			setup: []cci.InitiateDCAddReq{
				{HostID: 0, Policy: cci.AddPolicyFree, Length: 3 * block},
			},
			q:    cci.InitiateDCAddReq{HostID: 1, Policy: cci.AddPolicyFree, Length: 2 * block},
			want: cci.ResourcesExhausted,
		},
		{
			name: "no contiguous space",
			mod:  small,
			setup: []cci.InitiateDCAddReq{
				{HostID: 0, Policy: cci.AddPolicyPrescriptive, Extents: []cci.Extent{{DPA: block, Length: block}, {DPA: 3 * block, Length: block}}},
			},
			q:    cci.InitiateDCAddReq{HostID: 1, Policy: cci.AddPolicyContiguous, Length: 2 * block},
			want: cci.ResourcesExhausted,
		},
		{
			name: "free splits where contiguous cannot",
			mod:  small,
			setup: []cci.InitiateDCAddReq{
				{HostID: 0, Policy: cci.AddPolicyPrescriptive, Extents: []cci.Extent{{DPA: block, Length: block}, {DPA: 3 * block, Length: block}}},
			},
			q:    cci.InitiateDCAddReq{HostID: 1, Policy: cci.AddPolicyFree, Length: 2 * block},
			want: cci.Success,
		},
		{
			name: "extent tracking",
			mod:  func(c *Config) { c.MaxExtentsPerLD = 2 },
			setup: []cci.InitiateDCAddReq{
				{HostID: 0, Policy: cci.AddPolicyFree, Length: block},
				{HostID: 0, Policy: cci.AddPolicyFree, Length: block},
			},
			q:    cci.InitiateDCAddReq{HostID: 0, Policy: cci.AddPolicyFree, Length: block},
			want: cci.ResourcesExhausted,
		},
		{
			name: "tag tracking",
			mod:  func(c *Config) { c.MaxTagsPerLD = 1 },
			setup: []cci.InitiateDCAddReq{
				{HostID: 0, Policy: cci.AddPolicyFree, Length: block, Tag: tagN(1)},
			},
			q:    cci.InitiateDCAddReq{HostID: 0, Policy: cci.AddPolicyFree, Length: block, Tag: tagN(2)},
			want: cci.ResourcesExhausted,
		},
		{
			name: "untagged does not use tag tracking",
			mod:  func(c *Config) { c.MaxTagsPerLD = 1 },
			setup: []cci.InitiateDCAddReq{
				{HostID: 0, Policy: cci.AddPolicyFree, Length: block, Tag: tagN(1)},
			},
			q:    cci.InitiateDCAddReq{HostID: 0, Policy: cci.AddPolicyFree, Length: block},
			want: cci.Success,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, f := newBox(t, tt.mod)
			for _, q := range tt.setup {
				if rc := f.add(q); rc != cci.Success {
					t.Fatalf("setup %+v: %v", q, rc)
				}
				settle(t, b, int(q.HostID))
			}
			if rc := f.add(tt.q); rc != tt.want {
				t.Errorf("got %v, want %v", rc, tt.want)
			}
		})
	}
}

func TestAddRetryRequiredOnHostLogOverflow(t *testing.T) {
	b, f := newBox(t, func(c *Config) { c.EventLogSize = 3 })
	b.SetLink(4, false) // the host cannot drain its log
	if rc := f.add(cci.InitiateDCAddReq{HostID: 4, Policy: cci.AddPolicyPrescriptive, Extents: []cci.Extent{{DPA: 0, Length: block}, {DPA: 2 * block, Length: block}}}); rc != cci.Success {
		t.Fatal(rc)
	}
	if rc := f.add(cci.InitiateDCAddReq{HostID: 4, Policy: cci.AddPolicyPrescriptive, Extents: []cci.Extent{{DPA: 4 * block, Length: block}, {DPA: 6 * block, Length: block}}}); rc != cci.RetryRequired {
		t.Errorf("2 records into 1 free slot: got %v, want Retry Required", rc)
	}
	if rc := f.add(cci.InitiateDCAddReq{HostID: 4, Policy: cci.AddPolicyFree, Length: block}); rc != cci.Success {
		t.Errorf("1 record into 1 free slot: got %v, want Success", rc)
	}
	b.SetLink(4, true)
	settle(t, b, 4)
	if got := len(f.extents(4).Extents); got != 3 {
		t.Errorf("after link up: host holds %d extents, want 3", got)
	}
}

// holdFor sets up host with an accepted allocation and returns its extents.
func holdFor(t *testing.T, b *Box, f *testFM, q cci.InitiateDCAddReq) []cci.Extent {
	t.Helper()
	if rc := f.add(q); rc != cci.Success {
		t.Fatalf("add %+v: %v", q, rc)
	}
	settle(t, b, int(q.HostID))
	var out []cci.Extent
	for _, e := range f.extents(q.HostID).Extents {
		if e.Tag == q.Tag || q.Policy == cci.AddPolicyPrescriptive {
			out = append(out, e)
		}
	}
	return out
}

func TestInitiateReleaseErrors(t *testing.T) {
	b, f := newBox(t, nil)
	tagA, tagS, tagP := tagN(0xa), tagN(0x5), tagN(0x9)
	a := holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 0, Policy: cci.AddPolicyFree, Region: 0, Length: 2 * block, Tag: tagA})
	s := holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 0, Policy: cci.AddPolicyFree, Region: 1, Length: 2 * block, Tag: tagS})
	b.Host(3).SetPolicy(Policy{Mode: NeverAnswer})
	if rc := f.add(cci.InitiateDCAddReq{HostID: 3, Policy: cci.AddPolicyFree, Region: 0, Length: block, Tag: tagP}); rc != cci.Success {
		t.Fatal(rc)
	}
	settle(t, b, 3)
	pending := b.lds[3].pending[0].offers[0].Extent
	ext := func(dpa, n uint64) cci.Extent { return cci.Extent{DPA: dpa, Length: n} }
	pres := func(host uint16, forced bool, es ...cci.Extent) cci.InitiateDCReleaseReq {
		return cci.InitiateDCReleaseReq{HostID: host, Policy: cci.ReleasePolicyPrescriptive, Forced: forced, Extents: es}
	}
	tests := []struct {
		name string
		q    cci.InitiateDCReleaseReq
		want cci.ReturnCode
	}{
		{"bad host", cci.InitiateDCReleaseReq{HostID: 8, Length: block, Tag: tagA}, cci.InvalidInput},
		{"bad policy", cci.InitiateDCReleaseReq{HostID: 0, Policy: 2, Length: block, Tag: tagA}, cci.InvalidInput},
		{"unknown tag", cci.InitiateDCReleaseReq{HostID: 0, Length: block, Tag: tagN(0x42)}, cci.InvalidInput},
		{"tag of another host", cci.InitiateDCReleaseReq{HostID: 1, Length: block, Tag: tagA}, cci.InvalidInput},
		{"zero length", cci.InitiateDCReleaseReq{HostID: 0, Length: 0, Tag: tagA}, cci.InvalidInput},
		{"length not block multiple", cci.InitiateDCReleaseReq{HostID: 0, Length: block / 2, Tag: tagA}, cci.InvalidInput},
		{"length beyond tag", cci.InitiateDCReleaseReq{HostID: 0, Length: 3 * block, Tag: tagA}, cci.ResourcesExhausted},
		{"part of sharable tag", cci.InitiateDCReleaseReq{HostID: 0, Length: block, Tag: tagS}, cci.InvalidInput},
		{"pending tag not forced", cci.InitiateDCReleaseReq{HostID: 3, Length: block, Tag: tagP}, cci.InvalidPhysicalAddress},
		{"prescriptive empty", pres(0, false), cci.InvalidExtentList},
		{"prescriptive misaligned", pres(0, false, ext(a[0].DPA+4096, block)), cci.InvalidExtentList},
		{"prescriptive outside regions", pres(0, false, ext(1<<40, block)), cci.InvalidExtentList},
		{"prescriptive overlap", pres(0, false, ext(a[0].DPA, block), ext(a[0].DPA, 2*block)), cci.InvalidExtentList},
		{"prescriptive not held", pres(0, false, ext(100*block, block)), cci.InvalidPhysicalAddress},
		{"prescriptive held by another host", pres(1, false, ext(a[0].DPA, block)), cci.InvalidPhysicalAddress},
		{"prescriptive pending not forced", pres(3, false, pending), cci.InvalidPhysicalAddress},
		{"prescriptive part of sharable tag", pres(0, false, ext(s[0].DPA, block)), cci.InvalidInput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if rc := f.release(tt.q); rc != tt.want {
				t.Errorf("got %v, want %v", rc, tt.want)
			}
		})
	}
	p := mustMarshal(t, &cci.InitiateDCReleaseReq{HostID: 0, Policy: cci.ReleasePolicyPrescriptive, Extents: []cci.Extent{ext(a[0].DPA, block)}})
	p[0x1c] = 0
	if m := f.send(mctp.MsgTypeFMAPI, cci.OpInitiateDCRelease, p); m.ReturnCode != cci.InvalidExtentList {
		t.Errorf("prescriptive bad count: got %v, want Invalid Extent List", m.ReturnCode)
	}
	if got := len(f.extents(0).Extents); got != len(a)+len(s) {
		t.Errorf("host 0 extents after failed releases = %d, want %d", got, len(a)+len(s))
	}
	if len(f.dcEvents()) != 2 { // the two add responses only
		t.Error("failed releases logged events")
	}
}

func TestReleaseRequestSanitizeUnsupported(t *testing.T) {
	b, f := newBox(t, func(c *Config) { c.NoRequestSanitize = true })
	holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 0, Policy: cci.AddPolicyFree, Length: block, Tag: tagN(1)})
	if rc := f.release(cci.InitiateDCReleaseReq{HostID: 0, Length: block, Tag: tagN(1), Sanitize: true}); rc != cci.InvalidInput {
		t.Errorf("sanitize requested: got %v, want Invalid Input", rc)
	}
	if rc := f.release(cci.InitiateDCReleaseReq{HostID: 0, Length: block, Tag: tagN(1)}); rc != cci.Success {
		t.Errorf("plain release: got %v, want Success", rc)
	}
}

func TestReleaseRetryRequiredOnHostLogOverflow(t *testing.T) {
	b, f := newBox(t, func(c *Config) { c.EventLogSize = 2 })
	ex := holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 0, Policy: cci.AddPolicyPrescriptive, Extents: []cci.Extent{{DPA: 0, Length: block}, {DPA: 2 * block, Length: block}}})
	b.SetLink(0, false)
	if rc := f.add(cci.InitiateDCAddReq{HostID: 0, Policy: cci.AddPolicyFree, Length: block}); rc != cci.Success {
		t.Fatal(rc)
	}
	rel := cci.InitiateDCReleaseReq{HostID: 0, Policy: cci.ReleasePolicyPrescriptive, Extents: ex}
	if rc := f.release(rel); rc != cci.RetryRequired {
		t.Errorf("release into a full log: got %v, want Retry Required", rc)
	}
	rel.Forced = true
	if rc := f.release(rel); rc != cci.Success {
		t.Errorf("forced release into a full log: got %v, want Success", rc)
	}
	if got := len(f.extents(0).Extents); got != 0 {
		t.Errorf("after forced release: %d extents, want 0", got)
	}
}

func TestAddAcceptRelease(t *testing.T) {
	b, f := newBox(t, nil)
	tag := tagN(1)
	b.SetLink(2, false) // hold the host until the pending state is checked
	if rc := f.add(cci.InitiateDCAddReq{HostID: 2, Policy: cci.AddPolicyContiguous, Region: 0, Length: 4 * block, Tag: tag}); rc != cci.Success {
		t.Fatal(rc)
	}
	tl := f.tags()
	if len(tl.Tags) != 1 || !hasLD(tl.Tags[0].Pending, 2) || hasLD(tl.Tags[0].Accepted, 2) || tl.Validity != 3 {
		t.Errorf("tags while pending = %+v; want pending on LD 2", tl)
	}
	b.SetLink(2, true)
	settle(t, b, 2)
	want := []cci.Extent{{DPA: 0, Length: 4 * block, Tag: tag}}
	el := f.extents(2)
	if diff := cmp.Diff(want, el.Extents); diff != "" {
		t.Errorf("extents (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]cci.DCEvent{{Type: cci.DCEventAddResponse, Validity: 1, HostID: 2, Extent: want[0], AvailableExtents: 511, AvailableTags: 63}}, f.dcEvents()); diff != "" {
		t.Errorf("FM events (-want +got):\n%s", diff)
	}
	tl2 := f.tags()
	if len(tl2.Tags) != 1 || !hasLD(tl2.Tags[0].Accepted, 2) || hasLD(tl2.Tags[0].Pending, 2) || tl2.Generation == tl.Generation {
		t.Errorf("tags after accept = %+v; want accepted on LD 2, new generation", tl2)
	}

	if rc := f.release(cci.InitiateDCReleaseReq{HostID: 2, Policy: cci.ReleasePolicyTagBased, Length: 4 * block, Tag: tag}); rc != cci.Success {
		t.Fatal(rc)
	}
	settle(t, b, 2)
	if diff := cmp.Diff([]cci.DCEvent{{Type: cci.DCEventCapacityReleased, Validity: 1, HostID: 2, Extent: want[0], AvailableExtents: 512, AvailableTags: 64}}, f.dcEvents()); diff != "" {
		t.Errorf("FM events after release (-want +got):\n%s", diff)
	}
	el2 := f.extents(2)
	if len(el2.Extents) != 0 || el2.Generation == el.Generation {
		t.Errorf("extents after release = %+v; want empty, new generation", el2)
	}
	if len(f.tags().Tags) != 0 {
		t.Error("tag still listed after release")
	}
	if got := blocksFree(b, 0); got != 2048 {
		t.Errorf("free blocks = %d, want 2048", got)
	}
}

func hasLD(bm [32]byte, ld int) bool { return bm[ld/8]&(1<<(ld%8)) != 0 }

func TestPartialTagRelease(t *testing.T) {
	b, f := newBox(t, nil)
	tag := tagN(3)
	holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 1, Policy: cci.AddPolicyFree, Length: 4 * block, Tag: tag})
	if rc := f.release(cci.InitiateDCReleaseReq{HostID: 1, Length: block, Tag: tag}); rc != cci.Success {
		t.Fatal(rc)
	}
	settle(t, b, 1)
	want := []cci.Extent{{DPA: block, Length: 3 * block, Tag: tag}}
	if diff := cmp.Diff(want, f.extents(1).Extents); diff != "" {
		t.Errorf("extents (-want +got):\n%s", diff)
	}
	// A prescriptive release from the middle splits the extent.
	if rc := f.release(cci.InitiateDCReleaseReq{HostID: 1, Policy: cci.ReleasePolicyPrescriptive, Extents: []cci.Extent{{DPA: 2 * block, Length: block}}}); rc != cci.Success {
		t.Fatal(rc)
	}
	settle(t, b, 1)
	want = []cci.Extent{{DPA: block, Length: block, Tag: tag}, {DPA: 3 * block, Length: block, Tag: tag}}
	if diff := cmp.Diff(want, f.extents(1).Extents); diff != "" {
		t.Errorf("extents after split (-want +got):\n%s", diff)
	}
	if got := blocksFree(b, 0); got != 2046 {
		t.Errorf("free blocks = %d, want 2046", got)
	}
}

// fragment leaves every other block of region 0 in [0, 2n blocks) free by
// giving the rest to host 7 through the internal model.
func fragment(t *testing.T, b *Box, n int) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var es []cci.Extent
	for i := range n {
		es = append(es, cci.Extent{DPA: uint64(2*i+1) * block, Length: block})
	}
	r := b.regions[0]
	a := &allocation{region: r}
	for _, e := range es {
		r.mark(e.DPA, e.Length, true)
		b.lds[7].held = append(b.lds[7].held, &held{Extent: e, alloc: a})
	}
}

func TestLongMoreChain(t *testing.T) {
	const n = 50 // > 7 records per host read and > 42 ranges per 4802h
	b, f := newBox(t, func(c *Config) { c.EventLogSize = 128 })
	fragment(t, b, n)
	tag := tagN(0x50)
	if rc := f.add(cci.InitiateDCAddReq{HostID: 1, Policy: cci.AddPolicyFree, Length: n * block, Tag: tag}); rc != cci.Success {
		t.Fatal(rc)
	}
	settle(t, b, 1)
	got := f.extents(1).Extents
	if len(got) != n {
		t.Fatalf("host holds %d extents, want %d", len(got), n)
	}
	for i, e := range got {
		if e.DPA != uint64(2*i)*block || e.Length != block || e.Tag != tag {
			t.Fatalf("extent %d = %+v, want block %d", i, e, 2*i)
		}
	}
	evs := f.dcEvents()
	if len(evs) != n {
		t.Fatalf("FM got %d records, want %d", len(evs), n)
	}
	for i, ev := range evs {
		if ev.Type != cci.DCEventAddResponse || ev.HostID != 1 || ev.More != (i < n-1) || ev.Extent != got[i] {
			t.Fatalf("record %d = %+v", i, ev)
		}
	}
	// Release the whole tag: a 50-record release chain, two 4803h payloads.
	if rc := f.release(cci.InitiateDCReleaseReq{HostID: 1, Length: n * block, Tag: tag}); rc != cci.Success {
		t.Fatal(rc)
	}
	settle(t, b, 1)
	if evs := f.dcEvents(); len(evs) != n || evs[0].Type != cci.DCEventCapacityReleased || evs[n-1].More {
		t.Errorf("release chain: %d records", len(evs))
	}
	if len(f.extents(1).Extents) != 0 {
		t.Error("host still holds extents")
	}
}

func TestHostPolicies(t *testing.T) {
	tests := []struct {
		name     string
		pol      Policy
		wantHeld int
	}{
		{"accept all", Policy{Mode: AcceptAll}, 4},
		{"accept part 1", Policy{Mode: AcceptPart, AcceptN: 1}, 1},
		{"accept part 3", Policy{Mode: AcceptPart, AcceptN: 3}, 3},
		{"accept part 0 means 1", Policy{Mode: AcceptPart}, 1},
		{"accept part more than offered", Policy{Mode: AcceptPart, AcceptN: 9}, 4},
		{"reject", Policy{Mode: Reject}, 0},
		{"accept with think time", Policy{Mode: AcceptAll, Delay: 5 * 1e6}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, f := newBox(t, nil)
			fragment(t, b, 4)
			b.Host(2).SetPolicy(tt.pol)
			if got := b.Host(2).Policy(); got != tt.pol {
				t.Fatalf("Policy() = %+v, want %+v", got, tt.pol)
			}
			tag := tagN(2)
			if rc := f.add(cci.InitiateDCAddReq{HostID: 2, Policy: cci.AddPolicyFree, Length: 4 * block, Tag: tag}); rc != cci.Success {
				t.Fatal(rc)
			}
			settle(t, b, 2)
			held := f.extents(2).Extents
			if len(held) != tt.wantHeld {
				t.Fatalf("host holds %d extents, want %d", len(held), tt.wantHeld)
			}
			for i, e := range held {
				if e.DPA != uint64(2*i)*block {
					t.Errorf("extent %d at %#x, want the first offered ones", i, e.DPA)
				}
			}
			evs := f.dcEvents()
			if tt.wantHeld == 0 {
				want := []cci.DCEvent{{Type: cci.DCEventAddResponse, Validity: 1, HostID: 2, Extent: cci.Extent{Tag: tag}, AvailableExtents: 512, AvailableTags: 64}}
				if diff := cmp.Diff(want, evs); diff != "" {
					t.Errorf("rejection record (-want +got):\n%s", diff)
				}
				if len(f.tags().Tags) != 0 {
					t.Error("tag survives a rejection")
				}
			} else if len(evs) != tt.wantHeld {
				t.Errorf("FM got %d records, want %d", len(evs), tt.wantHeld)
			}
			// Unaccepted blocks are free again: 4 fragment blocks + what was offered.
			if got, want := blocksFree(b, 0), 2048-4-tt.wantHeld; got != want {
				t.Errorf("free blocks = %d, want %d", got, want)
			}
		})
	}
}

func TestNeverAnswerAndForcedRelease(t *testing.T) {
	b, f := newBox(t, nil)
	b.Host(3).SetPolicy(Policy{Mode: NeverAnswer})
	tag := tagN(3)
	if rc := f.add(cci.InitiateDCAddReq{HostID: 3, Policy: cci.AddPolicyFree, Length: 2 * block, Tag: tag}); rc != cci.Success {
		t.Fatal(rc)
	}
	settle(t, b, 3)
	tl := f.tags()
	if len(tl.Tags) != 1 || !hasLD(tl.Tags[0].Pending, 3) {
		t.Fatalf("tags = %+v, want pending on LD 3", tl.Tags)
	}
	if len(f.dcEvents()) != 0 || len(f.extents(3).Extents) != 0 {
		t.Fatal("a silent host produced a response")
	}
	if rc := f.release(cci.InitiateDCReleaseReq{HostID: 3, Forced: true, Length: 2 * block, Tag: tag}); rc != cci.Success {
		t.Fatalf("forced release of pending add: %v", rc)
	}
	if len(f.tags().Tags) != 0 || blocksFree(b, 0) != 2048 || len(f.dcEvents()) != 0 {
		t.Error("dead group: tag, capacity or records not as expected")
	}
	// A late answer to the dead group is accepted and changes nothing.
	h := b.Host(3)
	h.mbox.Lock()
	err := h.call(cci.OpAddDCResponse, &cci.AddDCResponseReq{Extents: []cci.ExtentRange{{DPA: 0, Length: block}}}, nil)
	h.mbox.Unlock()
	if err != nil {
		t.Errorf("answer to dead group: %v", err)
	}
	if len(f.extents(3).Extents) != 0 || len(f.dcEvents()) != 0 {
		t.Error("answer to a dead group took effect")
	}
}

func TestRejectingHostKeepsCapacityUntilForced(t *testing.T) {
	b, f := newBox(t, nil)
	tag := tagN(4)
	ex := holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 4, Policy: cci.AddPolicyFree, Length: 2 * block, Tag: tag})
	f.dcEvents()
	b.Host(4).SetPolicy(Policy{Mode: Reject})
	if rc := f.release(cci.InitiateDCReleaseReq{HostID: 4, Length: 2 * block, Tag: tag}); rc != cci.Success {
		t.Fatal(rc)
	}
	settle(t, b, 4)
	if got := f.extents(4).Extents; len(got) != 1 || len(f.dcEvents()) != 0 {
		t.Fatalf("refusing host: extents %+v; want still held, no records", got)
	}
	if rc := f.release(cci.InitiateDCReleaseReq{HostID: 4, Forced: true, Length: 2 * block, Tag: tag}); rc != cci.Success {
		t.Fatal(rc)
	}
	if got := f.extents(4).Extents; len(got) != 0 {
		t.Errorf("after forced release: %+v, want none", got)
	}
	want := []cci.DCEvent{{Type: cci.DCEventCapacityReleased, Validity: 1, HostID: 4, Extent: ex[0], AvailableExtents: 512, AvailableTags: 64}}
	if diff := cmp.Diff(want, f.dcEvents()); diff != "" {
		t.Errorf("FM records (-want +got):\n%s", diff)
	}
	if blocksFree(b, 0) != 2048 {
		t.Error("capacity not freed")
	}
}

func TestHostMailboxErrors(t *testing.T) {
	b, f := newBox(t, nil)
	h := b.Host(5)
	h.SetPolicy(Policy{Mode: NeverAnswer})
	call := func(op cci.Opcode, req interface{ MarshalBinary() ([]byte, error) }) cci.ReturnCode {
		h.mbox.Lock()
		defer h.mbox.Unlock()
		err := h.call(op, req, nil)
		if err != nil && rcErr(err) == cci.InternalError {
			t.Logf("%v: %v", op, err)
		}
		return rcErr(err)
	}
	r := func(dpa, n uint64) cci.ExtentRange { return cci.ExtentRange{DPA: dpa, Length: n} }
	if rc := call(cci.OpAddDCResponse, &cci.AddDCResponseReq{}); rc != cci.InvalidInput {
		t.Errorf("4802h with nothing pending: got %v, want Invalid Input", rc)
	}
	// Offer blocks 0–1 (one extent) in region 0, and a sharable tag.
	if rc := f.add(cci.InitiateDCAddReq{HostID: 5, Policy: cci.AddPolicyFree, Length: 2 * block}); rc != cci.Success {
		t.Fatal(rc)
	}
	settle(t, b, 5)
	tests := []struct {
		name string
		q    cci.AddDCResponseReq
		want cci.ReturnCode
	}{
		{"outside offer", cci.AddDCResponseReq{Extents: []cci.ExtentRange{r(4*block, block)}}, cci.InvalidPhysicalAddress},
		{"straddles offer", cci.AddDCResponseReq{Extents: []cci.ExtentRange{r(block, 2*block)}}, cci.InvalidPhysicalAddress},
		{"misaligned", cci.AddDCResponseReq{Extents: []cci.ExtentRange{r(4096, block)}}, cci.InvalidExtentList},
		{"zero length", cci.AddDCResponseReq{Extents: []cci.ExtentRange{r(0, 0)}}, cci.InvalidExtentList},
		{"overlap", cci.AddDCResponseReq{Extents: []cci.ExtentRange{r(0, 2*block), r(block, block)}}, cci.InvalidExtentList},
	}
	for _, tt := range tests {
		if rc := call(cci.OpAddDCResponse, &tt.q); rc != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, rc, tt.want)
		}
	}
	// Accept block 0, then again in the same More chain: already added.
	if rc := call(cci.OpAddDCResponse, &cci.AddDCResponseReq{More: true, Extents: []cci.ExtentRange{r(0, block)}}); rc != cci.Success {
		t.Fatalf("first of chain: %v", rc)
	}
	if rc := call(cci.OpAddDCResponse, &cci.AddDCResponseReq{Extents: []cci.ExtentRange{r(0, block)}}); rc != cci.InvalidPhysicalAddress {
		t.Errorf("already added in chain: got %v, want Invalid Physical Address", rc)
	}
	// Accept the second block only (a sub-range of the offer).
	if rc := call(cci.OpAddDCResponse, &cci.AddDCResponseReq{Extents: []cci.ExtentRange{r(block, block)}}); rc != cci.Success {
		t.Fatalf("sub-range accept: %v", rc)
	}
	if got := f.extents(5).Extents; len(got) != 1 || got[0].DPA != block {
		t.Errorf("held = %+v, want block 1 only", got)
	}
	if blocksFree(b, 0) != 2047 {
		t.Error("unaccepted block not freed")
	}

	// 4803h errors.
	rtests := []struct {
		name string
		q    cci.ReleaseDCReq
		want cci.ReturnCode
	}{
		{"empty", cci.ReleaseDCReq{}, cci.InvalidInput},
		{"not held", cci.ReleaseDCReq{Extents: []cci.ExtentRange{r(0, block)}}, cci.InvalidPhysicalAddress},
		{"misaligned", cci.ReleaseDCReq{Extents: []cci.ExtentRange{r(block+64, block)}}, cci.InvalidExtentList},
		{"overlap", cci.ReleaseDCReq{Extents: []cci.ExtentRange{r(block, block), r(block, block)}}, cci.InvalidExtentList},
	}
	for _, tt := range rtests {
		if rc := call(cci.OpReleaseDC, &tt.q); rc != tt.want {
			t.Errorf("4803h %s: got %v, want %v", tt.name, rc, tt.want)
		}
	}
	// Unknown opcode and FM opcodes on the host mailbox.
	if rc := call(cci.OpGetDCDInfo, nil); rc != cci.Unsupported {
		t.Errorf("5600h on host mailbox: got %v, want Unsupported", rc)
	}
	var cfg cci.GetDCConfigResp
	h.mbox.Lock()
	err := h.call(cci.OpGetDCConfig, &cci.GetDCConfigReq{RegionCount: 8}, &cfg)
	h.mbox.Unlock()
	if err != nil || len(cfg.Regions) != 2 || !cfg.Regions[0].SanitizeOnRelease || cfg.AvailableExtents != 511 {
		t.Errorf("4800h = %+v, %v", cfg, err)
	}
	if rc := call(cci.OpGetDCConfig, &cci.GetDCConfigReq{RegionCount: 1, StartRegion: 2}); rc != cci.InvalidInput {
		t.Errorf("4800h start beyond: got %v, want Invalid Input", rc)
	}
	if rc := call(cci.OpGetDCExtentList, &cci.GetDCExtentListReq{Count: 1, Start: 2}); rc != cci.InvalidInput {
		t.Errorf("4801h start beyond: got %v, want Invalid Input", rc)
	}
	var el cci.GetDCExtentListResp
	h.mbox.Lock()
	err = h.call(cci.OpGetDCExtentList, &cci.GetDCExtentListReq{Count: 10}, &el)
	h.mbox.Unlock()
	if err != nil || el.Total != 1 || len(el.Extents) != 1 {
		t.Errorf("4801h = %+v, %v", el, err)
	}
}

func TestSharedCapacity(t *testing.T) {
	b, f := newBox(t, nil)
	// Fragment region 1 so the allocation has several extents.
	x := holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 7, Policy: cci.AddPolicyPrescriptive, Extents: []cci.Extent{
		{DPA: r1 + block, Length: block, Tag: tagN(0x70)}, {DPA: r1 + 3*block, Length: block, Tag: tagN(0x71)}}})
	_ = x
	tag := tagN(0x5)
	s0 := holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 0, Policy: cci.AddPolicyFree, Region: 1, Length: 3 * block, Tag: tag})
	wantS := []cci.Extent{
		{DPA: r1, Length: block, Tag: tag, SharedSeq: 0},
		{DPA: r1 + 2*block, Length: block, Tag: tag, SharedSeq: 1},
		{DPA: r1 + 4*block, Length: block, Tag: tag, SharedSeq: 2},
	}
	if diff := cmp.Diff(wantS, s0); diff != "" {
		t.Fatalf("host 0 shared extents (-want +got):\n%s", diff)
	}
	// Host 1 accepts only part by policy, but sharable means all.
	b.Host(1).SetPolicy(Policy{Mode: AcceptPart, AcceptN: 1})
	s1 := holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 1, Policy: cci.AddPolicySharedAccess, Region: 1, Tag: tag})
	if diff := cmp.Diff(wantS, s1); diff != "" {
		t.Fatalf("host 1 shared extents (-want +got):\n%s", diff)
	}
	tl := f.tags()
	var e cci.TagEntry
	for _, te := range tl.Tags {
		if te.Tag == tag {
			e = te
		}
	}
	if !hasLD(e.Accepted, 0) || !hasLD(e.Accepted, 1) || hasLD(e.Accepted, 2) {
		t.Errorf("tag entry = %+v, want accepted by LDs 0 and 1", e)
	}
	// Shared memory: host 1 reads what host 0 wrote.
	msg := []byte("shared between hosts")
	if _, err := b.Host(0).WriteAt(msg, r1+2*block+100); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := b.Host(1).ReadAt(got, r1+2*block+100); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("host 1 read %q, %v; want %q", got, err, msg)
	}
	// Host 2 accepting only part of a shared offer is refused.
	h2 := b.Host(2)
	h2.SetPolicy(Policy{Mode: NeverAnswer})
	if rc := f.add(cci.InitiateDCAddReq{HostID: 2, Policy: cci.AddPolicySharedAccess, Region: 1, Tag: tag}); rc != cci.Success {
		t.Fatal(rc)
	}
	settle(t, b, 2)
	h2.mbox.Lock()
	err := h2.call(cci.OpAddDCResponse, &cci.AddDCResponseReq{Extents: []cci.ExtentRange{{DPA: r1, Length: block}}}, nil)
	h2.mbox.Unlock()
	if rcErr(err) != cci.InvalidExtentList {
		t.Errorf("partial accept of sharable: got %v, want Invalid Extent List", err)
	}
	if rc := f.release(cci.InitiateDCReleaseReq{HostID: 2, Forced: true, Length: 3 * block, Tag: tag}); rc != cci.Success {
		t.Fatalf("forced release of pending shared access: %v", rc)
	}
	// Host 1 cannot give back part of it either.
	h1 := b.Host(1)
	h1.mbox.Lock()
	err = h1.call(cci.OpReleaseDC, &cci.ReleaseDCReq{Extents: []cci.ExtentRange{{DPA: r1, Length: block}}}, nil)
	h1.mbox.Unlock()
	if rcErr(err) != cci.InvalidExtentList {
		t.Errorf("partial 4803h of sharable: got %v, want Invalid Extent List", err)
	}

	usedBefore := 2048 - blocksFree(b, 1)
	if rc := f.release(cci.InitiateDCReleaseReq{HostID: 0, Length: 3 * block, Tag: tag}); rc != cci.Success {
		t.Fatal(rc)
	}
	settle(t, b, 0)
	if len(f.extents(0).Extents) != 0 || 2048-blocksFree(b, 1) != usedBefore {
		t.Fatal("after the first host's release the capacity must stay allocated")
	}
	if _, err := b.Host(1).ReadAt(got, r1+2*block+100); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("host 1 after host 0 released: %q, %v", got, err)
	}
	// An FM reference keeps it allocated after the last host.
	if rc := f.call(cci.OpDCAddReference, &cci.DCAddReferenceReq{Tag: tag}, nil); rc != cci.Success {
		t.Fatal(rc)
	}
	if rc := f.call(cci.OpDCAddReference, &cci.DCAddReferenceReq{Tag: tag}, nil); rc != cci.Success {
		t.Errorf("second add reference (idempotent): %v", rc)
	}
	if err := b.Host(1).Release(context.Background(), tag); err != nil { // unsolicited 4803h
		t.Fatal(err)
	}
	tl = f.tags()
	if len(tl.Tags) != 3 || 2048-blocksFree(b, 1) != usedBefore {
		t.Fatalf("referenced tag freed: %d tags, %d used", len(tl.Tags), 2048-blocksFree(b, 1))
	}
	for _, te := range tl.Tags {
		if te.Tag == tag && (!te.FMReference || te.Accepted != [32]byte{} || te.Pending != [32]byte{}) {
			t.Errorf("referenced tag entry = %+v", te)
		}
	}
	if rc := f.call(cci.OpDCRemoveReference, &cci.DCRemoveReferenceReq{Tag: tag}, nil); rc != cci.Success {
		t.Fatal(rc)
	}
	if 2048-blocksFree(b, 1) != usedBefore-3 || len(f.tags().Tags) != 2 {
		t.Error("last reference gone: capacity not freed")
	}
	// Sanitized on free (region SoR): the memory reads zero.
	raw := make([]byte, len(msg))
	if _, err := b.DRAM().ReadAt(raw, int64(r1+2*block+100)); err != nil || !bytes.Equal(raw, make([]byte, len(msg))) {
		t.Errorf("freed shared memory = %q, %v; want zeros", raw, err)
	}
	holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 7, Policy: cci.AddPolicyFree, Region: 0, Length: block, Tag: tagN(0x72)})
	for _, q := range []cci.DCAddReferenceReq{{Tag: tag}, {Tag: tagN(0x72)}, {}} {
		if rc := f.call(cci.OpDCAddReference, &q, nil); rc != cci.InvalidInput {
			t.Errorf("add reference %v: got %v, want Invalid Input", q.Tag, rc)
		}
		if rc := f.call(cci.OpDCRemoveReference, &cci.DCRemoveReferenceReq{Tag: q.Tag}, nil); rc != cci.InvalidInput {
			t.Errorf("remove reference %v: got %v, want Invalid Input", q.Tag, rc)
		}
	}
}

func TestListTags(t *testing.T) {
	b, f := newBox(t, nil)
	for i := range 5 {
		holdFor(t, b, f, cci.InitiateDCAddReq{HostID: uint16(i), Policy: cci.AddPolicyFree, Length: block, Tag: tagN(byte(10 - i))})
	}
	var gen cci.ListTagsResp
	f.must(cci.OpDCListTags, &cci.ListTagsReq{}, &gen)
	if gen.Total != 5 || len(gen.Tags) != 0 {
		t.Errorf("max 0: %+v, want total 5 and no entries", gen)
	}
	var page cci.ListTagsResp
	f.must(cci.OpDCListTags, &cci.ListTagsReq{Start: 3, Max: 10}, &page)
	if len(page.Tags) != 2 || page.Tags[0].Tag != tagN(9) || !hasLD(page.Tags[0].Accepted, 1) || page.Generation != gen.Generation {
		t.Errorf("page from 3 = %+v", page.Tags)
	}
	if rc := f.call(cci.OpDCListTags, &cci.ListTagsReq{Start: 6, Max: 1}, nil); rc != cci.InvalidInput {
		t.Errorf("start beyond: got %v, want Invalid Input", rc)
	}
}

func TestSanitizeOnRelease(t *testing.T) {
	tests := []struct {
		name      string
		regionSoR bool
		request   bool
		forced    bool
		wantZero  bool
	}{
		{"region SoR", true, false, false, true},
		{"region SoR forced", true, false, true, true},
		{"request sanitize", false, true, false, true},
		{"request sanitize forced", false, true, true, true},
		{"no sanitize keeps data", false, false, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, f := newBox(t, func(c *Config) { c.SanitizeOnRelease = []bool{tt.regionSoR, true} })
			a, c := b.Host(0), b.Host(1)
			tagA := tagN(0xa)
			ex := holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 0, Policy: cci.AddPolicyPrescriptive,
				Extents: []cci.Extent{{DPA: 4 * block, Length: 2 * block, Tag: tagA}}})
			if len(ex) != 1 {
				t.Fatal("host A did not accept")
			}
			secret := bytes.Repeat([]byte("secret!"), 1000)
			for _, off := range []uint64{4 * block, 5*block + 12345, 6*block - uint64(len(secret))} {
				if _, err := a.WriteAt(secret, off); err != nil {
					t.Fatal(err)
				}
			}
			rel := cci.InitiateDCReleaseReq{HostID: 0, Length: 2 * block, Tag: tagA, Sanitize: tt.request, Forced: tt.forced}
			if rc := f.release(rel); rc != cci.Success {
				t.Fatal(rc)
			}
			settle(t, b, 0)
			if _, err := a.ReadAt(make([]byte, 8), 4*block); !errors.Is(err, ErrNotHeld) {
				t.Fatalf("host A after release: got %v, want ErrNotHeld", err)
			}
			// The same DPA goes to host B.
			holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 1, Policy: cci.AddPolicyPrescriptive,
				Extents: []cci.Extent{{DPA: 4 * block, Length: 2 * block}}})
			got := make([]byte, len(secret))
			for _, off := range []uint64{4 * block, 5*block + 12345, 6*block - uint64(len(secret))} {
				if _, err := c.ReadAt(got, off); err != nil {
					t.Fatal(err)
				}
				zero := bytes.Equal(got, make([]byte, len(got)))
				if zero != tt.wantZero {
					t.Fatalf("host B at %#x reads zeros = %v, want %v", off, zero, tt.wantZero)
				}
			}
		})
	}
}

func TestHostMemoryAccessBounds(t *testing.T) {
	b, f := newBox(t, nil)
	h := b.Host(2)
	if b.Config().Heads != 8 || h.LD() != 2 || Reject.String() != "reject" {
		t.Errorf("Config().Heads = %d, LD() = %d, Reject = %q", b.Config().Heads, h.LD(), Reject)
	}
	if _, err := h.WriteAt([]byte{1}, 0); !errors.Is(err, ErrNotHeld) {
		t.Errorf("write without extents: got %v, want ErrNotHeld", err)
	}
	holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 2, Policy: cci.AddPolicyPrescriptive, Extents: []cci.Extent{{DPA: 0, Length: block}, {DPA: block, Length: block}}})
	if got := h.Extents(); len(got) != 2 {
		t.Fatalf("Extents() = %+v", got)
	}
	// Spanning two adjacent held extents is fine; one byte past is not.
	if _, err := h.WriteAt(make([]byte, 64), block-32); err != nil {
		t.Errorf("write across adjacent extents: %v", err)
	}
	if _, err := h.WriteAt(make([]byte, 2), 2*block-1); !errors.Is(err, ErrNotHeld) {
		t.Errorf("write past the end: got %v, want ErrNotHeld", err)
	}
	if _, err := b.Host(3).ReadAt(make([]byte, 1), 0); !errors.Is(err, ErrNotHeld) {
		t.Errorf("other host read: got %v, want ErrNotHeld", err)
	}
	if n, err := h.ReadAt(nil, 1<<50); n != 0 || err != nil {
		t.Errorf("empty read: %d, %v", n, err)
	}
	if err := h.Release(context.Background(), tagN(0x33)); !errors.Is(err, ErrNotHeld) {
		t.Errorf("release of unknown tag: got %v, want ErrNotHeld", err)
	}
	if b.Host(8) != nil || b.Host(-1) != nil {
		t.Error("Host out of range is not nil")
	}
}

func TestHostUnsolicitedRelease(t *testing.T) {
	b, f := newBox(t, nil)
	tag := tagN(6)
	ex := holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 6, Policy: cci.AddPolicyFree, Length: 2 * block, Tag: tag})
	f.dcEvents()
	if err := b.Host(6).Release(context.Background(), tag); err != nil {
		t.Fatal(err)
	}
	want := []cci.DCEvent{{Type: cci.DCEventCapacityReleased, Validity: 1, HostID: 6, Extent: ex[0], AvailableExtents: 512, AvailableTags: 64}}
	if diff := cmp.Diff(want, f.dcEvents()); diff != "" {
		t.Errorf("FM records (-want +got):\n%s", diff)
	}
	if len(f.tags().Tags) != 0 || blocksFree(b, 0) != 2048 {
		t.Error("capacity not returned")
	}
}

func TestReleaseSplitTrackingExhausted(t *testing.T) {
	b, f := newBox(t, func(c *Config) { c.MaxExtentsPerLD = 2 })
	holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 0, Policy: cci.AddPolicyFree, Length: 3 * block, Tag: tagN(1)})
	holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 0, Policy: cci.AddPolicyPrescriptive, Extents: []cci.Extent{{DPA: 8 * block, Length: block}}})
	before := f.extents(0)
	mid := cci.InitiateDCReleaseReq{HostID: 0, Policy: cci.ReleasePolicyPrescriptive, Extents: []cci.Extent{{DPA: block, Length: block}}}
	if rc := f.release(mid); rc != cci.ResourcesExhausted {
		t.Errorf("split beyond tracking: got %v, want Resources Exhausted", rc)
	}
	if diff := cmp.Diff(before, f.extents(0)); diff != "" {
		t.Errorf("failed release changed the list (-want +got):\n%s", diff)
	}
	// A forced release of the tail keeps the count at 2 (a non-forced one
	// would track the tail until the host gives it back).
	tail := cci.InitiateDCReleaseReq{HostID: 0, Policy: cci.ReleasePolicyPrescriptive, Forced: true, Extents: []cci.Extent{{DPA: 2 * block, Length: block}}}
	if rc := f.release(tail); rc != cci.Success {
		t.Errorf("tail release: got %v, want Success", rc)
	}
}

func TestMessageTypeSupport(t *testing.T) {
	_, f := newBox(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), callTTL)
	defer cancel()
	types, err := f.ep.GetMessageTypeSupport(ctx, 8)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]mctp.MsgType{mctp.MsgTypeControl, mctp.MsgTypeFMAPI, mctp.MsgTypeCXLCCI}, types); diff != "" {
		t.Errorf("message types (-want +got):\n%s", diff)
	}
	if eid, err := f.ep.GetEndpointID(ctx, 0); err != nil || eid != 8 {
		t.Errorf("endpoint ID = %d, %v; want 8", eid, err)
	}
}

func TestHostSurvivesTruncatedChain(t *testing.T) {
	b, f := newBox(t, func(c *Config) { c.EventLogSize = 2 })
	b.Host(0).SetPolicy(Policy{Mode: AcceptAll})
	holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 0, Policy: cci.AddPolicyPrescriptive, Extents: []cci.Extent{
		{DPA: 0, Length: block}, {DPA: 2 * block, Length: block}}})
	holdFor(t, b, f, cci.InitiateDCAddReq{HostID: 0, Policy: cci.AddPolicyPrescriptive, Extents: []cci.Extent{
		{DPA: 4 * block, Length: block}}})
	// A forced release of 3 extents into a 2-record log loses the last
	// record of the 02h chain; the host must not wait for it forever.
	b.SetLink(0, false)
	if rc := f.release(cci.InitiateDCReleaseReq{HostID: 0, Policy: cci.ReleasePolicyPrescriptive, Forced: true, Extents: []cci.Extent{
		{DPA: 0, Length: block}, {DPA: 2 * block, Length: block}, {DPA: 4 * block, Length: block}}}); rc != cci.Success {
		t.Fatal(rc)
	}
	b.SetLink(0, true)
	settle(t, b, 0)
	if rc := f.add(cci.InitiateDCAddReq{HostID: 0, Policy: cci.AddPolicyFree, Length: block}); rc != cci.Success {
		t.Fatal(rc)
	}
	settle(t, b, 0)
	if got := len(f.extents(0).Extents); got != 1 {
		t.Errorf("host holds %d extents after the truncated chain, want 1 (the new add)", got)
	}
}
