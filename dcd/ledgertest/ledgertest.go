// Package ledgertest is the contract test suite of dcd.Ledger. Any
// implementation (SQLite, an in-memory fake for other packages' tests) runs
// the same rules by calling Run from its own test.
package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"cxlpool/dcd"
	"cxlpool/fabric/cci"
)

// Block is the block size of the regions the suite syncs.
const Block = 2 << 20

// The suite's inventory: eight hosts and two regions, region 0 not
// sharable, region 1 sharable, with distinct DPA ranges so that orphan
// extents can be placed in one or the other.
const (
	Serial   = 0xC0FFEE
	Region0  = 0
	Region1  = 1
	Base0    = 0
	Length0  = 64 * Block
	Base1    = 1 << 30
	Length1  = 32 * Block
	NumHosts = 8
)

// Inventory returns the inventory the suite syncs before most subtests.
func Inventory() dcd.Inventory {
	inv := dcd.Inventory{Serial: Serial}
	for i := range NumHosts {
		inv.Hosts = append(inv.Hosts, dcd.Host{ID: dcd.HostID(i), Port: uint8(i), LinkUp: true})
	}
	inv.Regions = []dcd.Region{
		{Index: Region0, Base: Base0, Length: Length0, BlockSize: Block},
		{Index: Region1, Base: Base1, Length: Length1, BlockSize: Block, Sharable: true, SanitizeOnRelease: true},
	}
	return inv
}

// Run runs the contract suite. open must return a new, empty ledger for
// each call; Run closes it when the subtest ends.
func Run(t *testing.T, open func(t *testing.T) dcd.Ledger) {
	s := suite{open: open}
	for _, tc := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"Inventory", s.testInventory},
		{"InventoryKeepsAdminSettings", s.testInventoryKeepsAdminSettings},
		{"InventorySerial", s.testInventorySerial},
		{"HostNotFound", s.testHostNotFound},
		{"CreateChunkValidation", s.testCreateChunkValidation},
		{"CreateChunkFields", s.testCreateChunkFields},
		{"CreateChunkTag", s.testCreateChunkTag},
		{"Capacity", s.testCapacity},
		{"CapacityFreedByDelete", s.testCapacityFreedByDelete},
		{"DeleteChunk", s.testDeleteChunk},
		{"Placement", s.testPlacement},
		{"PlacementAvoidsOrphans", s.testPlacementAvoidsOrphans},
		{"BeginGrant", s.testBeginGrant},
		{"BeginGrantChecked", s.testBeginGrantChecked},
		{"AdoptGrant", s.testAdoptGrant},
		{"Quota", s.testQuota},
		{"DefaultQuota", s.testDefaultQuota},
		{"Transitions", s.testTransitions},
		{"TransitionNotFound", s.testTransitionNotFound},
		{"GrantRecords", s.testGrantRecords},
		{"GrantsFilter", s.testGrantsFilter},
		{"Orphans", s.testOrphans},
		{"Concurrency", s.testConcurrency},
	} {
		t.Run(tc.name, tc.fn)
	}
}

type suite struct {
	open func(t *testing.T) dcd.Ledger
}

// ledger opens a fresh ledger that Run closes at the end of the subtest.
func (s suite) ledger(t *testing.T) dcd.Ledger {
	t.Helper()
	l := s.open(t)
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

// synced opens a fresh ledger holding Inventory().
func (s suite) synced(t *testing.T) dcd.Ledger {
	t.Helper()
	l := s.ledger(t)
	if err := l.SyncInventory(t.Context(), Inventory()); err != nil {
		t.Fatalf("SyncInventory: %v", err)
	}
	return l
}

// ignoreTimes compares records without their time stamps, which the suite
// checks separately; empty and nil slices are equal.
var ignoreTimes = cmp.Options{
	cmpopts.IgnoreFields(dcd.Chunk{}, "Created"),
	cmpopts.IgnoreFields(dcd.Grant{}, "Created", "Updated"),
	cmpopts.IgnoreFields(dcd.Orphan{}, "Found"),
	cmpopts.EquateEmpty(),
}

// checkErr fails unless err matches every one of want (nil: no error).
func checkErr(t *testing.T, what string, err error, want ...error) {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("%s: got error %v, want nil", what, err)
		}
		return
	}
	for _, w := range want {
		if !errors.Is(err, w) {
			t.Fatalf("%s: got error %v, want %v", what, err, w)
		}
	}
}

func mustChunk(t *testing.T, l dcd.Ledger, region int, size uint64, sharable bool) dcd.Chunk {
	t.Helper()
	c, err := l.CreateChunk(t.Context(), dcd.Chunk{Name: fmt.Sprintf("r%d-%d", region, size), Region: region, Size: size, Sharable: sharable})
	if err != nil {
		t.Fatalf("CreateChunk region %d size %d: %v", region, size, err)
	}
	return c
}

func mustGrant(t *testing.T, l dcd.Ledger, c dcd.ChunkID, h dcd.HostID) dcd.Grant {
	t.Helper()
	g, err := l.BeginGrant(t.Context(), c, h, nil)
	if err != nil {
		t.Fatalf("BeginGrant chunk %d host %d: %v", c, h, err)
	}
	return g.Grant
}

// extentsFor is what a host would accept for chunk c: two extents carrying
// its tag, the second sharing sequence 1 to see SharedSeq stored.
func extentsFor(c dcd.Chunk, dpa uint64) []cci.Extent {
	half := c.Size / 2
	return []cci.Extent{
		{DPA: dpa, Length: half, Tag: c.Tag},
		{DPA: dpa + half, Length: c.Size - half, Tag: c.Tag, SharedSeq: 1},
	}
}

func hostPtr(h dcd.HostID) *dcd.HostID { return &h }

func (s suite) testInventory(t *testing.T) {
	l := s.synced(t)
	ctx := t.Context()
	hosts, err := l.Hosts(ctx)
	checkErr(t, "Hosts", err)
	var want []dcd.Host
	for i := range NumHosts {
		want = append(want, dcd.Host{ID: dcd.HostID(i), Port: uint8(i), Name: fmt.Sprintf("host%d", i), LinkUp: true})
	}
	if diff := cmp.Diff(want, hosts); diff != "" {
		t.Errorf("Hosts mismatch (-want +got):\n%s", diff)
	}
	h, err := l.Host(ctx, 3)
	checkErr(t, "Host", err)
	if diff := cmp.Diff(want[3], h); diff != "" {
		t.Errorf("Host(3) mismatch (-want +got):\n%s", diff)
	}
	regions, err := l.Regions(ctx)
	checkErr(t, "Regions", err)
	if diff := cmp.Diff(Inventory().Regions, regions); diff != "" {
		t.Errorf("Regions mismatch (-want +got):\n%s", diff)
	}
}

func (s suite) testInventoryKeepsAdminSettings(t *testing.T) {
	l := s.ledger(t)
	ctx := t.Context()
	first := Inventory()
	first.Hosts[1].Name = "db-server" // a name discovery supplied
	checkErr(t, "SyncInventory", l.SyncInventory(ctx, first))
	checkErr(t, "SetHostQuota", l.SetHostQuota(ctx, 2, 10*Block))

	// Rediscovery: new ports and link states, no names or quotas, and a
	// region that grew.
	again := Inventory()
	for i := range again.Hosts {
		again.Hosts[i].Port = uint8(10 + i)
		again.Hosts[i].Name = ""
	}
	again.Hosts[2].LinkUp = false
	again.Hosts[2].Name = "renamed-by-discovery"
	again.Regions[0].Length = 2 * Length0
	checkErr(t, "SyncInventory again", l.SyncInventory(ctx, again))

	for _, tc := range []struct {
		id   dcd.HostID
		want dcd.Host
	}{
		{1, dcd.Host{ID: 1, Port: 11, Name: "db-server", LinkUp: true}},
		{2, dcd.Host{ID: 2, Port: 12, Name: "host2", Quota: 10 * Block, LinkUp: false}},
		{3, dcd.Host{ID: 3, Port: 13, Name: "host3", LinkUp: true}},
	} {
		got, err := l.Host(ctx, tc.id)
		checkErr(t, fmt.Sprintf("Host(%d)", tc.id), err)
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("Host(%d) mismatch (-want +got):\n%s", tc.id, diff)
		}
	}
	regions, err := l.Regions(ctx)
	checkErr(t, "Regions", err)
	if diff := cmp.Diff(again.Regions, regions); diff != "" {
		t.Errorf("Regions mismatch (-want +got):\n%s", diff)
	}
	// The grown region admits what the old one could not.
	if _, err := l.CreateChunk(ctx, dcd.Chunk{Region: Region0, Size: 2 * Length0}); err != nil {
		t.Errorf("CreateChunk in the grown region: got %v, want nil", err)
	}
}

func (s suite) testInventorySerial(t *testing.T) {
	for _, tc := range []struct {
		name   string
		serial []uint64 // synced in order; all but the last must succeed
		want   error
	}{
		{"same", []uint64{7, 7}, nil},
		{"different", []uint64{7, 8}, dcd.ErrConflict},
		{"unknown later", []uint64{7, 0}, nil},
		{"unknown first", []uint64{0, 8}, nil},
		{"learned then different", []uint64{0, 8, 9}, dcd.ErrConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := s.ledger(t)
			inv := Inventory()
			var err error
			for i, serial := range tc.serial {
				inv.Serial = serial
				err = l.SyncInventory(t.Context(), inv)
				if i < len(tc.serial)-1 {
					checkErr(t, fmt.Sprintf("SyncInventory serial %d", serial), err)
				}
			}
			if tc.want == nil {
				checkErr(t, "last SyncInventory", err)
			} else {
				checkErr(t, "last SyncInventory", err, tc.want)
			}
		})
	}
}

func (s suite) testHostNotFound(t *testing.T) {
	l := s.synced(t)
	ctx := t.Context()
	_, err := l.Host(ctx, NumHosts)
	checkErr(t, "Host(unknown)", err, dcd.ErrNotFound)
	checkErr(t, "SetHostQuota(unknown)", l.SetHostQuota(ctx, NumHosts, Block), dcd.ErrNotFound)
	err = l.RecordOrphan(ctx, dcd.Orphan{Host: NumHosts, Tag: cci.NewTag()})
	checkErr(t, "RecordOrphan(unknown host)", err, dcd.ErrNotFound)
}

func (s suite) testCreateChunkValidation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		chunk dcd.Chunk
		want  []error
	}{
		{"ok", dcd.Chunk{Region: Region0, Size: Block}, nil},
		{"ok sharable", dcd.Chunk{Region: Region1, Size: 3 * Block, Sharable: true}, nil},
		{"ok not sharable in sharable region", dcd.Chunk{Region: Region1, Size: Block}, nil},
		{"unknown region", dcd.Chunk{Region: 5, Size: Block}, []error{dcd.ErrInvalid}},
		{"negative region", dcd.Chunk{Region: -1, Size: Block}, []error{dcd.ErrInvalid}},
		{"zero size", dcd.Chunk{Region: Region0}, []error{dcd.ErrInvalid}},
		{"not a block multiple", dcd.Chunk{Region: Region0, Size: Block + 4096}, []error{dcd.ErrInvalid}},
		{"less than a block", dcd.Chunk{Region: Region0, Size: Block / 2}, []error{dcd.ErrInvalid}},
		{"huge", dcd.Chunk{Region: Region0, Size: 1 << 63}, []error{dcd.ErrInvalid}},
		{"sharable in plain region", dcd.Chunk{Region: Region0, Size: Block, Sharable: true}, []error{dcd.ErrNotSharable, dcd.ErrInvalid}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := s.synced(t)
			c, err := l.CreateChunk(t.Context(), tc.chunk)
			checkErr(t, "CreateChunk", err, tc.want...)
			chunks, err := l.Chunks(t.Context())
			checkErr(t, "Chunks", err)
			var want []dcd.Chunk
			if tc.want == nil {
				want = append(want, c)
			}
			if diff := cmp.Diff(want, chunks, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Chunks after CreateChunk mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func (s suite) testCreateChunkFields(t *testing.T) {
	l := s.synced(t)
	ctx := t.Context()
	in := dcd.Chunk{ID: 99, Name: "vm-42", Region: Region1, Size: 4 * Block, Sharable: true}
	c, err := l.CreateChunk(ctx, in)
	checkErr(t, "CreateChunk", err)
	if c.ID == 0 || c.Tag.IsZero() || c.Created.IsZero() {
		t.Errorf("CreateChunk: got ID %d, tag %s, created %v, want all set", c.ID, c.Tag, c.Created)
	}
	want := in
	want.ID, want.Tag = c.ID, c.Tag
	want.Extents = []cci.Extent{{DPA: Base1, Length: 4 * Block, Tag: c.Tag}}
	if diff := cmp.Diff(want, c, ignoreTimes); diff != "" {
		t.Errorf("CreateChunk mismatch (-want +got):\n%s", diff)
	}
	got, err := l.Chunk(ctx, c.ID)
	checkErr(t, "Chunk", err)
	if diff := cmp.Diff(c, got); diff != "" {
		t.Errorf("Chunk(%d) mismatch with what CreateChunk returned (-want +got):\n%s", c.ID, diff)
	}
	c2 := mustChunk(t, l, Region0, Block, false)
	if c2.ID == c.ID || c2.Tag == c.Tag {
		t.Errorf("second chunk: got ID %d tag %s, want different from the first's %d %s", c2.ID, c2.Tag, c.ID, c.Tag)
	}
	all, err := l.Chunks(ctx)
	checkErr(t, "Chunks", err)
	if diff := cmp.Diff([]dcd.Chunk{c, c2}, all); diff != "" {
		t.Errorf("Chunks mismatch (-want +got):\n%s", diff)
	}
	_, err = l.Chunk(ctx, c2.ID+100)
	checkErr(t, "Chunk(unknown)", err, dcd.ErrNotFound)
}

func (s suite) testCreateChunkTag(t *testing.T) {
	l := s.synced(t)
	ctx := t.Context()
	tag := cci.NewTag()
	c, err := l.CreateChunk(ctx, dcd.Chunk{Region: Region0, Size: Block, Tag: tag})
	checkErr(t, "CreateChunk with tag", err)
	if c.Tag != tag {
		t.Errorf("CreateChunk with tag: got tag %s, want %s", c.Tag, tag)
	}
	_, err = l.CreateChunk(ctx, dcd.Chunk{Region: Region0, Size: Block, Tag: tag})
	checkErr(t, "CreateChunk with a live chunk's tag", err, dcd.ErrConflict)
	checkErr(t, "DeleteChunk", l.DeleteChunk(ctx, c.ID))
	_, err = l.CreateChunk(ctx, dcd.Chunk{Region: Region0, Size: Block, Tag: tag})
	checkErr(t, "CreateChunk with a deleted chunk's tag", err, dcd.ErrConflict)

	// Tags and IDs are never reused, whatever is deleted in between.
	seenTag := map[cci.Tag]bool{tag: true}
	seenID := map[dcd.ChunkID]bool{c.ID: true}
	for i := range 20 {
		c := mustChunk(t, l, Region0, Block, false)
		if seenTag[c.Tag] || seenID[c.ID] {
			t.Fatalf("chunk %d: got ID %d tag %s, want both unused", i, c.ID, c.Tag)
		}
		seenTag[c.Tag], seenID[c.ID] = true, true
		if i%2 == 0 {
			checkErr(t, "DeleteChunk", l.DeleteChunk(ctx, c.ID))
		}
	}
}

func (s suite) testCapacity(t *testing.T) {
	otherTag := cci.NewTag()
	for _, tc := range []struct {
		name    string
		chunks  []uint64     // created first in region 0, all must succeed
		orphans []cci.Extent // recorded (host 0) before the last create
		size    uint64       // the last create in region 0
		want    error
		free1   uint64 // what is left in region 1; 0 means all of it
	}{
		{"empty region, all of it", nil, nil, Length0, nil, 0},
		{"empty region, one block more", nil, nil, Length0 + Block, dcd.ErrNoCapacity, 0},
		{"exact fit", []uint64{16 * Block, 16 * Block}, nil, 32 * Block, nil, 0},
		{"one block over", []uint64{16 * Block, 16 * Block}, nil, 33 * Block, dcd.ErrNoCapacity, 0},
		{"full", []uint64{Length0}, nil, Block, dcd.ErrNoCapacity, 0},
		{"orphan in region", nil, []cci.Extent{{DPA: Base0 + 8*Block, Length: 4 * Block}}, Length0 - 4*Block, nil, 0},
		{"orphan in region, over", nil, []cci.Extent{{DPA: Base0 + 8*Block, Length: 4 * Block}}, Length0 - 3*Block, dcd.ErrNoCapacity, 0},
		{"orphans and chunks", []uint64{30 * Block}, []cci.Extent{{DPA: Base0, Length: 2 * Block}, {DPA: Base0 + 40*Block, Length: Block}}, 32 * Block, dcd.ErrNoCapacity, 0},
		{"orphans and chunks, fit", []uint64{30 * Block}, []cci.Extent{{DPA: Base0, Length: 2 * Block}, {DPA: Base0 + 40*Block, Length: Block}}, 31 * Block, nil, 0},
		{"orphan in the other region", nil, []cci.Extent{{DPA: Base1, Length: 8 * Block}}, Length0, nil, Length1 - 8*Block},
		{"orphan straddling the region end", nil, []cci.Extent{{DPA: Base0 + Length0 - 2*Block, Length: 8 * Block}}, Length0 - Block, dcd.ErrNoCapacity, 0},
		{"orphan straddling the region end, fit", nil, []cci.Extent{{DPA: Base0 + Length0 - 2*Block, Length: 8 * Block}}, Length0 - 2*Block, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := s.synced(t)
			ctx := t.Context()
			for _, size := range tc.chunks {
				mustChunk(t, l, Region0, size, false)
			}
			for i := range tc.orphans {
				tc.orphans[i].Tag = otherTag
			}
			if tc.orphans != nil {
				checkErr(t, "RecordOrphan", l.RecordOrphan(ctx, dcd.Orphan{Host: 0, Tag: otherTag, Extents: tc.orphans}))
			}
			_, err := l.CreateChunk(ctx, dcd.Chunk{Region: Region0, Size: tc.size})
			if tc.want == nil {
				checkErr(t, "CreateChunk", err)
			} else {
				checkErr(t, "CreateChunk", err, tc.want)
			}
			// Region 1 keeps its own books.
			free1 := tc.free1
			if free1 == 0 {
				free1 = Length1
			}
			if _, err := l.CreateChunk(ctx, dcd.Chunk{Region: Region1, Size: free1}); err != nil {
				t.Errorf("CreateChunk the rest of region 1: got %v, want nil", err)
			}
			_, err = l.CreateChunk(ctx, dcd.Chunk{Region: Region1, Size: Block})
			checkErr(t, "CreateChunk in the full region 1", err, dcd.ErrNoCapacity)
		})
	}
}

func (s suite) testCapacityFreedByDelete(t *testing.T) {
	l := s.synced(t)
	ctx := t.Context()
	a := mustChunk(t, l, Region0, Length0/2, false)
	mustChunk(t, l, Region0, Length0/2, false)
	_, err := l.CreateChunk(ctx, dcd.Chunk{Region: Region0, Size: Block})
	checkErr(t, "CreateChunk in a full region", err, dcd.ErrNoCapacity)
	checkErr(t, "DeleteChunk", l.DeleteChunk(ctx, a.ID))
	mustChunk(t, l, Region0, Length0/2, false)

	// An orphan holds capacity until it is cleared.
	tag := cci.NewTag()
	l2 := s.synced(t)
	checkErr(t, "RecordOrphan", l2.RecordOrphan(ctx, dcd.Orphan{Host: 1, Tag: tag, Extents: []cci.Extent{{DPA: Base0, Length: Block, Tag: tag}}}))
	_, err = l2.CreateChunk(ctx, dcd.Chunk{Region: Region0, Size: Length0})
	checkErr(t, "CreateChunk over an orphan", err, dcd.ErrNoCapacity)
	checkErr(t, "ClearOrphan", l2.ClearOrphan(ctx, 1, tag))
	if _, err := l2.CreateChunk(ctx, dcd.Chunk{Region: Region0, Size: Length0}); err != nil {
		t.Errorf("CreateChunk after ClearOrphan: got %v, want nil", err)
	}
}

func (s suite) testDeleteChunk(t *testing.T) {
	for _, st := range []dcd.GrantState{dcd.GrantAdding, dcd.GrantGranted, dcd.GrantReleasing, dcd.GrantReleased, dcd.GrantFailed, dcd.GrantLost} {
		t.Run(string(st), func(t *testing.T) {
			l := s.synced(t)
			ctx := t.Context()
			c := mustChunk(t, l, Region0, Block, false)
			g := driveTo(t, l, c, 0, st)
			err := l.DeleteChunk(ctx, c.ID)
			if st.Active() {
				checkErr(t, "DeleteChunk with an active grant", err, dcd.ErrConflict)
				if _, err := l.Chunk(ctx, c.ID); err != nil {
					t.Errorf("Chunk after refused delete: got %v, want nil", err)
				}
				return
			}
			checkErr(t, "DeleteChunk", err)
			_, err = l.Chunk(ctx, c.ID)
			checkErr(t, "Chunk after delete", err, dcd.ErrNotFound)
			chunks, err := l.Chunks(ctx)
			checkErr(t, "Chunks", err)
			if len(chunks) != 0 {
				t.Errorf("Chunks after delete: got %v, want none", chunks)
			}
			checkErr(t, "DeleteChunk again", l.DeleteChunk(ctx, c.ID), dcd.ErrNotFound)
			_, err = l.BeginGrant(ctx, c.ID, 1, nil)
			checkErr(t, "BeginGrant of a deleted chunk", err, dcd.ErrNotFound)
			if got, err := l.Grant(ctx, g.ID); err != nil || got.State != st {
				t.Errorf("Grant after chunk delete: got %v, %v, want state %s", got.State, err, st)
			}
		})
	}
	l := s.synced(t)
	checkErr(t, "DeleteChunk(unknown)", l.DeleteChunk(t.Context(), 12345), dcd.ErrNotFound)
}

func (s suite) testBeginGrant(t *testing.T) {
	type setup struct {
		host  dcd.HostID
		state dcd.GrantState
	}
	for _, tc := range []struct {
		name     string
		sharable bool
		before   []setup // grants of the chunk driven to these states first
		chunk    dcd.ChunkID
		host     dcd.HostID
		want     []error
	}{
		{name: "first grant", host: 1},
		{name: "unknown chunk", chunk: 999, host: 1, want: []error{dcd.ErrNotFound}},
		{name: "unknown host", host: NumHosts, want: []error{dcd.ErrNotFound}},
		{name: "same host adding", before: []setup{{1, dcd.GrantAdding}}, host: 1, want: []error{dcd.ErrConflict}},
		{name: "same host granted", before: []setup{{1, dcd.GrantGranted}}, host: 1, want: []error{dcd.ErrConflict}},
		{name: "same host releasing", before: []setup{{1, dcd.GrantReleasing}}, host: 1, want: []error{dcd.ErrConflict}},
		{name: "same host sharable", sharable: true, before: []setup{{1, dcd.GrantGranted}}, host: 1, want: []error{dcd.ErrConflict}},
		{name: "same host after release", before: []setup{{1, dcd.GrantReleased}}, host: 1},
		{name: "same host after failure", before: []setup{{1, dcd.GrantFailed}}, host: 1},
		{name: "same host after loss", before: []setup{{1, dcd.GrantLost}}, host: 1},
		{name: "other host, not sharable, adding", before: []setup{{1, dcd.GrantAdding}}, host: 2, want: []error{dcd.ErrNotSharable, dcd.ErrConflict}},
		{name: "other host, not sharable, granted", before: []setup{{1, dcd.GrantGranted}}, host: 2, want: []error{dcd.ErrNotSharable, dcd.ErrConflict}},
		{name: "other host, not sharable, releasing", before: []setup{{1, dcd.GrantReleasing}}, host: 2, want: []error{dcd.ErrNotSharable, dcd.ErrConflict}},
		{name: "other host, not sharable, released", before: []setup{{1, dcd.GrantReleased}}, host: 2},
		{name: "other host, not sharable, failed", before: []setup{{1, dcd.GrantFailed}}, host: 2},
		{name: "other host, sharable", sharable: true, before: []setup{{1, dcd.GrantGranted}}, host: 2},
		{name: "third host, sharable", sharable: true, before: []setup{{1, dcd.GrantGranted}, {2, dcd.GrantAdding}}, host: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := s.synced(t)
			ctx := t.Context()
			region := Region0
			if tc.sharable {
				region = Region1
			}
			c := mustChunk(t, l, region, 2*Block, tc.sharable)
			for _, b := range tc.before {
				driveTo(t, l, c, b.host, b.state)
			}
			before, err := l.Grants(ctx, dcd.GrantFilter{})
			checkErr(t, "Grants", err)
			chunk := c.ID
			if tc.chunk != 0 {
				chunk = tc.chunk
			}
			g, err := l.BeginGrant(ctx, chunk, tc.host, nil)
			checkErr(t, "BeginGrant", err, tc.want...)
			after, err := l.Grants(ctx, dcd.GrantFilter{})
			checkErr(t, "Grants", err)
			if tc.want != nil {
				if diff := cmp.Diff(before, after); diff != "" {
					t.Errorf("refused BeginGrant changed the grants (-before +after):\n%s", diff)
				}
				return
			}
			want := dcd.Grant{ID: g.ID, Chunk: c.ID, Host: tc.host, State: dcd.GrantAdding}
			if diff := cmp.Diff(want, g.Grant, ignoreTimes); diff != "" {
				t.Errorf("BeginGrant mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(c, g.Chunk, ignoreTimes); diff != "" {
				t.Errorf("BeginGrant chunk mismatch (-want +got):\n%s", diff)
			}
			wantOthers := false
			for _, b := range tc.before {
				wantOthers = wantOthers || b.state.Active()
			}
			if g.Others != wantOthers {
				t.Errorf("BeginGrant Others = %v, want %v (other active grants of the chunk)", g.Others, wantOthers)
			}
			if g.Created.IsZero() || !g.Updated.Equal(g.Created) {
				t.Errorf("BeginGrant: got created %v updated %v, want equal and set", g.Created, g.Updated)
			}
			if diff := cmp.Diff(append(before, g.Grant), after); diff != "" {
				t.Errorf("Grants after BeginGrant mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func (s suite) testQuota(t *testing.T) {
	for _, tc := range []struct {
		name  string
		quota uint64
		held  []dcd.GrantState // grants of 4-block chunks to host 1 first
		size  uint64           // then a chunk of this size
		want  error
	}{
		{"no limit", 0, []dcd.GrantState{dcd.GrantGranted, dcd.GrantGranted}, 32 * Block, nil},
		{"within", 16 * Block, []dcd.GrantState{dcd.GrantGranted}, 4 * Block, nil},
		{"exactly", 8 * Block, []dcd.GrantState{dcd.GrantGranted}, 4 * Block, nil},
		{"over", 8 * Block, []dcd.GrantState{dcd.GrantGranted}, 5 * Block, dcd.ErrQuotaExceeded},
		{"chunk alone over", 4 * Block, nil, 5 * Block, dcd.ErrQuotaExceeded},
		{"adding counts", 8 * Block, []dcd.GrantState{dcd.GrantAdding}, 5 * Block, dcd.ErrQuotaExceeded},
		{"releasing counts", 8 * Block, []dcd.GrantState{dcd.GrantReleasing}, 5 * Block, dcd.ErrQuotaExceeded},
		{"released does not count", 8 * Block, []dcd.GrantState{dcd.GrantReleased, dcd.GrantReleased}, 8 * Block, nil},
		{"failed and lost do not count", 8 * Block, []dcd.GrantState{dcd.GrantFailed, dcd.GrantLost}, 8 * Block, nil},
		{"huge quota", 1<<64 - 1, []dcd.GrantState{dcd.GrantGranted}, 8 * Block, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := s.synced(t)
			ctx := t.Context()
			// Without a quota of its own a host has the default: none here
			// (testDefaultQuota covers it).
			checkErr(t, "SetDefaultHostQuota", l.SetDefaultHostQuota(ctx, 0))
			checkErr(t, "SetHostQuota", l.SetHostQuota(ctx, 1, tc.quota))
			h, err := l.Host(ctx, 1)
			checkErr(t, "Host", err)
			if h.Quota != tc.quota {
				t.Errorf("Host(1).Quota: got %d, want %d", h.Quota, tc.quota)
			}
			for _, st := range tc.held {
				driveTo(t, l, mustChunk(t, l, Region0, 4*Block, false), 1, st)
			}
			c := mustChunk(t, l, Region0, tc.size, false)
			_, err = l.BeginGrant(ctx, c.ID, 1, nil)
			if tc.want == nil {
				checkErr(t, "BeginGrant", err)
			} else {
				checkErr(t, "BeginGrant", err, tc.want)
			}
			// Quotas are per host: host 2 has none.
			if _, err := l.BeginGrant(ctx, mustChunk(t, l, Region1, Block, false).ID, 2, nil); err != nil {
				t.Errorf("BeginGrant to host 2: got %v, want nil", err)
			}
		})
	}
}

// testDefaultQuota: a host without a quota of its own is limited by the
// default, a fair share of the pool (its regions over its hosts, whole
// MiB) until one is set; a set default (0: none) replaces it, and a host's
// own quota overrides either.
func (s suite) testDefaultQuota(t *testing.T) {
	l := s.synced(t)
	ctx := t.Context()
	inv := Inventory()
	var pool uint64
	for _, r := range inv.Regions {
		pool += r.Length
	}
	share := pool / uint64(len(inv.Hosts)) &^ (1<<20 - 1)
	d, err := l.DefaultHostQuota(ctx)
	checkErr(t, "DefaultHostQuota", err)
	if diff := cmp.Diff(dcd.DefaultQuota{Bytes: share, FairShare: true}, d); diff != "" {
		t.Errorf("default before any setting (-want +got):\n%s", diff)
	}
	grant := func(host dcd.HostID, size uint64) error {
		_, err := l.BeginGrant(ctx, mustChunk(t, l, Region0, size, false).ID, host, nil)
		return err
	}
	over := (share/Block + 1) * Block
	if over <= share { // a share below one block
		over = share + Block
	}
	checkErr(t, "grant over the fair share", grant(1, over), dcd.ErrQuotaExceeded)
	checkErr(t, "SetDefaultHostQuota", l.SetDefaultHostQuota(ctx, 2*Block))
	if d, err = l.DefaultHostQuota(ctx); err != nil || d != (dcd.DefaultQuota{Bytes: 2 * Block}) {
		t.Errorf("DefaultHostQuota after setting: %+v, %v", d, err)
	}
	checkErr(t, "grant over the set default", grant(1, 3*Block), dcd.ErrQuotaExceeded)
	checkErr(t, "grant within it", grant(1, 2*Block))
	checkErr(t, "SetHostQuota", l.SetHostQuota(ctx, 2, 4*Block))
	checkErr(t, "own quota over the default", grant(2, 3*Block))
	checkErr(t, "SetDefaultHostQuota", l.SetDefaultHostQuota(ctx, 0))
	checkErr(t, "no default limit", grant(3, 4*Block))
}

// driveTo begins a grant of c to host and moves it to st through the
// documented transitions.
func driveTo(t *testing.T, l dcd.Ledger, c dcd.Chunk, host dcd.HostID, st dcd.GrantState) dcd.Grant {
	t.Helper()
	ctx := t.Context()
	g := mustGrant(t, l, c.ID, host)
	id := g.ID
	step := func(name string, fn func() (dcd.Grant, error)) {
		t.Helper()
		var err error
		if g, err = fn(); err != nil {
			t.Fatalf("driving grant %d to %s: %s: %v", id, st, name, err)
		}
	}
	switch st {
	case dcd.GrantAdding:
	case dcd.GrantFailed:
		step("FailGrant", func() (dcd.Grant, error) { return l.FailGrant(ctx, id, "rejected") })
	case dcd.GrantLost:
		step("MarkLost", func() (dcd.Grant, error) { return l.MarkLost(ctx, id, "gone") })
	default:
		step("CompleteGrant", func() (dcd.Grant, error) { return l.CompleteGrant(ctx, id, extentsFor(c, 0)) })
		if st == dcd.GrantGranted {
			break
		}
		step("BeginRelease", func() (dcd.Grant, error) { return l.BeginRelease(ctx, id) })
		if st == dcd.GrantReleasing {
			break
		}
		step("CompleteRelease", func() (dcd.Grant, error) { return l.CompleteRelease(ctx, id) })
	}
	if g.State != st {
		t.Fatalf("driving grant %d: got state %s, want %s", id, g.State, st)
	}
	return g
}

// transitions is the documented state machine: op → source state → target.
// A source state not listed must fail with ErrConflict.
var transitions = map[string]map[dcd.GrantState]dcd.GrantState{
	"CompleteGrant":   {dcd.GrantAdding: dcd.GrantGranted},
	"FailGrant":       {dcd.GrantAdding: dcd.GrantFailed},
	"BeginRelease":    {dcd.GrantGranted: dcd.GrantReleasing, dcd.GrantReleasing: dcd.GrantReleasing},
	"CompleteRelease": {dcd.GrantReleasing: dcd.GrantReleased},
	"MarkLost":        {dcd.GrantAdding: dcd.GrantLost, dcd.GrantGranted: dcd.GrantLost, dcd.GrantReleasing: dcd.GrantLost},
}

var allStates = []dcd.GrantState{dcd.GrantAdding, dcd.GrantGranted, dcd.GrantReleasing, dcd.GrantReleased, dcd.GrantFailed, dcd.GrantLost}

// apply runs op on grant id with the arguments the suite uses.
func apply(ctx context.Context, l dcd.Ledger, op string, id dcd.GrantID, ext []cci.Extent) (dcd.Grant, error) {
	switch op {
	case "CompleteGrant":
		return l.CompleteGrant(ctx, id, ext)
	case "FailGrant":
		return l.FailGrant(ctx, id, "host rejected")
	case "BeginRelease":
		return l.BeginRelease(ctx, id)
	case "CompleteRelease":
		return l.CompleteRelease(ctx, id)
	case "MarkLost":
		return l.MarkLost(ctx, id, "device lost it")
	}
	return dcd.Grant{}, fmt.Errorf("ledgertest: unknown op %q", op)
}

func (s suite) testTransitions(t *testing.T) {
	for _, op := range []string{"CompleteGrant", "FailGrant", "BeginRelease", "CompleteRelease", "MarkLost"} {
		for _, from := range allStates {
			to, ok := transitions[op][from]
			t.Run(op+"/"+string(from), func(t *testing.T) {
				l := s.synced(t)
				ctx := t.Context()
				c := mustChunk(t, l, Region0, 4*Block, false)
				before := driveTo(t, l, c, 3, from)
				ext := extentsFor(c, 8*Block) // differs from driveTo's
				g, err := apply(ctx, l, op, before.ID, ext)
				stored, gerr := l.Grant(ctx, before.ID)
				checkErr(t, "Grant", gerr)
				if !ok {
					checkErr(t, op, err, dcd.ErrConflict)
					msg := err.Error()
					if !strings.Contains(msg, string(from)) {
						t.Errorf("%s error %q: does not name the current state %s", op, msg, from)
					}
					for src := range transitions[op] {
						if !strings.Contains(msg, string(src)) {
							t.Errorf("%s error %q: does not name the required state %s", op, msg, src)
						}
					}
					if diff := cmp.Diff(before, stored); diff != "" {
						t.Errorf("refused %s changed the grant (-before +after):\n%s", op, diff)
					}
					return
				}
				checkErr(t, op, err)
				want := before
				want.State = to
				switch op {
				case "CompleteGrant":
					want.Extents = ext
				case "FailGrant":
					want.Reason = "host rejected"
				case "MarkLost":
					want.Reason = "device lost it"
				}
				if diff := cmp.Diff(want, g, ignoreTimes); diff != "" {
					t.Errorf("%s result mismatch (-want +got):\n%s", op, diff)
				}
				if diff := cmp.Diff(g, stored); diff != "" {
					t.Errorf("Grant after %s differs from what it returned (-returned +stored):\n%s", op, diff)
				}
				if !g.Created.Equal(before.Created) || g.Updated.Before(before.Updated) {
					t.Errorf("%s times: got created %v updated %v, want created %v and updated >= %v",
						op, g.Created, g.Updated, before.Created, before.Updated)
				}
				active, err := l.Grants(ctx, dcd.GrantFilter{Active: true})
				checkErr(t, "Grants(Active)", err)
				if got := len(active) == 1; got != to.Active() {
					t.Errorf("Grants(Active) after %s to %s: got %d grants, want active=%v", op, to, len(active), to.Active())
				}
			})
		}
	}
}

func (s suite) testTransitionNotFound(t *testing.T) {
	l := s.synced(t)
	ctx := t.Context()
	for op := range transitions {
		_, err := apply(ctx, l, op, 4242, nil)
		checkErr(t, op+"(unknown)", err, dcd.ErrNotFound)
	}
	_, err := l.Grant(ctx, 4242)
	checkErr(t, "Grant(unknown)", err, dcd.ErrNotFound)
}

// testGrantRecords checks that extents come back exactly (full 64-bit
// values, SharedSeq, order) and that Reason survives later moves.
func (s suite) testGrantRecords(t *testing.T) {
	l := s.synced(t)
	ctx := t.Context()
	c := mustChunk(t, l, Region1, 4*Block, true)
	g := mustGrant(t, l, c.ID, 5)
	other := cci.NewTag()
	ext := []cci.Extent{
		{DPA: 1<<63 + 64, Length: 1<<64 - 1, Tag: c.Tag, SharedSeq: 0xffff},
		{DPA: 0, Length: Block, Tag: other},
		{DPA: Base1 + Block, Length: Block, Tag: c.Tag, SharedSeq: 2},
	}
	got, err := l.CompleteGrant(ctx, g.ID, ext)
	checkErr(t, "CompleteGrant", err)
	for _, get := range []func() (dcd.Grant, error){
		func() (dcd.Grant, error) { return got, nil },
		func() (dcd.Grant, error) { return l.Grant(ctx, g.ID) },
		func() (dcd.Grant, error) { return l.BeginRelease(ctx, g.ID) },
		func() (dcd.Grant, error) { return l.BeginRelease(ctx, g.ID) }, // idempotent
		func() (dcd.Grant, error) { return l.MarkLost(ctx, g.ID, "reset") },
	} {
		g, err := get()
		checkErr(t, "get grant", err)
		if diff := cmp.Diff(ext, g.Extents); diff != "" {
			t.Errorf("extents of grant in state %s mismatch (-want +got):\n%s", g.State, diff)
		}
	}
	lost, err := l.Grant(ctx, g.ID)
	checkErr(t, "Grant", err)
	if lost.State != dcd.GrantLost || lost.Reason != "reset" {
		t.Errorf("Grant: got state %s reason %q, want lost \"reset\"", lost.State, lost.Reason)
	}
	// A repeated BeginRelease does not move Updated.
	c2 := mustChunk(t, l, Region0, Block, false)
	r1 := driveTo(t, l, c2, 0, dcd.GrantReleasing)
	r2, err := l.BeginRelease(ctx, r1.ID)
	checkErr(t, "BeginRelease again", err)
	if diff := cmp.Diff(r1, r2); diff != "" {
		t.Errorf("repeated BeginRelease changed the grant (-first +second):\n%s", diff)
	}
}

func (s suite) testGrantsFilter(t *testing.T) {
	l := s.synced(t)
	ctx := t.Context()
	a := mustChunk(t, l, Region1, 2*Block, true)
	b := mustChunk(t, l, Region0, 2*Block, false)
	g1 := driveTo(t, l, a, 1, dcd.GrantGranted)
	g2 := driveTo(t, l, a, 2, dcd.GrantReleased)
	g3 := driveTo(t, l, b, 1, dcd.GrantFailed)
	g4 := driveTo(t, l, b, 1, dcd.GrantAdding)
	g5 := driveTo(t, l, a, 2, dcd.GrantReleasing)
	g6 := driveTo(t, l, a, 3, dcd.GrantLost)
	for _, tc := range []struct {
		name string
		f    dcd.GrantFilter
		want []dcd.Grant
	}{
		{"all", dcd.GrantFilter{}, []dcd.Grant{g1, g2, g3, g4, g5, g6}},
		{"active", dcd.GrantFilter{Active: true}, []dcd.Grant{g1, g4, g5}},
		{"host 1", dcd.GrantFilter{Host: hostPtr(1)}, []dcd.Grant{g1, g3, g4}},
		{"host 0 (zero is a host)", dcd.GrantFilter{Host: hostPtr(0)}, nil},
		{"host 2 active", dcd.GrantFilter{Host: hostPtr(2), Active: true}, []dcd.Grant{g5}},
		{"chunk a", dcd.GrantFilter{Chunk: a.ID}, []dcd.Grant{g1, g2, g5, g6}},
		{"chunk b active", dcd.GrantFilter{Chunk: b.ID, Active: true}, []dcd.Grant{g4}},
		{"chunk a host 3", dcd.GrantFilter{Chunk: a.ID, Host: hostPtr(3)}, []dcd.Grant{g6}},
		{"chunk b host 2", dcd.GrantFilter{Chunk: b.ID, Host: hostPtr(2)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := l.Grants(ctx, tc.f)
			checkErr(t, "Grants", err)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Grants(%+v) mismatch (-want +got):\n%s", tc.f, diff)
			}
		})
	}
}

func (s suite) testOrphans(t *testing.T) {
	l := s.synced(t)
	ctx := t.Context()
	t1, t2 := cci.NewTag(), cci.NewTag()
	o1 := dcd.Orphan{Host: 4, Tag: t1, Extents: []cci.Extent{{DPA: 0, Length: Block, Tag: t1}}}
	o2 := dcd.Orphan{Host: 5, Tag: t1, Extents: []cci.Extent{{DPA: Base1, Length: Block, Tag: t1, SharedSeq: 3}}}
	o3 := dcd.Orphan{Host: 4, Tag: t2} // a tag with no extents left
	for _, o := range []dcd.Orphan{o1, o2, o3} {
		checkErr(t, "RecordOrphan", l.RecordOrphan(ctx, o))
	}
	list := func(want ...dcd.Orphan) {
		t.Helper()
		got, err := l.Orphans(ctx)
		checkErr(t, "Orphans", err)
		if diff := cmp.Diff(want, got, ignoreTimes); diff != "" {
			t.Errorf("Orphans mismatch (-want +got):\n%s", diff)
		}
		for _, o := range got {
			if o.Found.IsZero() {
				t.Errorf("orphan host %d tag %s: got zero Found, want set", o.Host, o.Tag)
			}
		}
	}
	list(o1, o2, o3)

	// Recording again is idempotent, and replaces the extents.
	checkErr(t, "RecordOrphan again", l.RecordOrphan(ctx, o1))
	list(o1, o2, o3)
	o1.Extents = append(o1.Extents, cci.Extent{DPA: 4 * Block, Length: 2 * Block, Tag: t1})
	checkErr(t, "RecordOrphan with more extents", l.RecordOrphan(ctx, o1))
	list(o1, o2, o3)

	checkErr(t, "ClearOrphan", l.ClearOrphan(ctx, 4, t1))
	list(o2, o3)
	checkErr(t, "ClearOrphan again", l.ClearOrphan(ctx, 4, t1), dcd.ErrNotFound)
	checkErr(t, "ClearOrphan wrong host", l.ClearOrphan(ctx, 6, t2), dcd.ErrNotFound)
	checkErr(t, "ClearOrphan", l.ClearOrphan(ctx, 5, t1))
	checkErr(t, "ClearOrphan", l.ClearOrphan(ctx, 4, t2))
	list()
}

// testConcurrency runs CreateChunk/BeginGrant/CompleteGrant from many
// goroutines on distinct chunks of a region they fill exactly; with -race it
// also checks the implementation's locking.
func (s suite) testConcurrency(t *testing.T) {
	const workers, perWorker, region = 8, 50, 2
	l := s.ledger(t)
	ctx := t.Context()
	inv := Inventory()
	inv.Regions = append(inv.Regions, dcd.Region{Index: region, Base: 1 << 40, Length: workers * perWorker * Block, BlockSize: Block})
	checkErr(t, "SyncInventory", l.SyncInventory(ctx, inv))
	chunks := make([][]dcd.Chunk, workers)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				c, err := l.CreateChunk(ctx, dcd.Chunk{Name: fmt.Sprintf("w%d-%d", w, i), Region: region, Size: Block})
				if err != nil {
					errs <- fmt.Errorf("worker %d chunk %d: CreateChunk: %w", w, i, err)
					return
				}
				chunks[w] = append(chunks[w], c)
				g, err := l.BeginGrant(ctx, c.ID, dcd.HostID(w), nil)
				if err != nil {
					errs <- fmt.Errorf("worker %d chunk %d: BeginGrant: %w", w, i, err)
					return
				}
				if _, err := l.CompleteGrant(ctx, g.ID, extentsFor(c, uint64(i)*c.Size)); err != nil {
					errs <- fmt.Errorf("worker %d chunk %d: CompleteGrant: %w", w, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	_, err := l.CreateChunk(ctx, dcd.Chunk{Region: region, Size: Block})
	checkErr(t, "CreateChunk in the filled region", err, dcd.ErrNoCapacity)
	for w := range workers {
		got, err := l.Grants(ctx, dcd.GrantFilter{Host: hostPtr(dcd.HostID(w)), Active: true})
		checkErr(t, "Grants", err)
		if len(got) != perWorker {
			t.Fatalf("host %d: got %d active grants, want %d", w, len(got), perWorker)
		}
		for i, g := range got {
			c := chunks[w][i]
			if g.State != dcd.GrantGranted || g.Chunk != c.ID || g.Size() != c.Size {
				t.Errorf("host %d grant %d: got chunk %d state %s size %d, want chunk %d granted size %d",
					w, i, g.Chunk, g.State, g.Size(), c.ID, c.Size)
			}
		}
	}
}

// testBeginGrantChecked: the checked callback hears the intent once, after
// the admission checks and before BeginGrant returns, and never for a
// refused grant.
func (s suite) testBeginGrantChecked(t *testing.T) {
	l := s.synced(t)
	ctx := t.Context()
	c := mustChunk(t, l, Region0, Block, false)
	var heard []dcd.GrantIntent
	g, err := l.BeginGrant(ctx, c.ID, 1, func(in dcd.GrantIntent) { heard = append(heard, in) })
	checkErr(t, "BeginGrant", err)
	if diff := cmp.Diff([]dcd.GrantIntent{g}, heard, ignoreTimes); diff != "" {
		t.Errorf("checked heard (-want +got):\n%s", diff)
	}
	heard = nil
	_, err = l.BeginGrant(ctx, c.ID, 2, func(in dcd.GrantIntent) { heard = append(heard, in) })
	checkErr(t, "BeginGrant of a granted non-sharable chunk", err, dcd.ErrNotSharable)
	if len(heard) != 0 {
		t.Errorf("checked was called for a refused grant: %+v", heard)
	}
}

// testAdoptGrant: capacity the device holds under a chunk's tag without a
// committed intent is recorded as granted with exactly its extents, under
// the same sharing rules as BeginGrant but without the quota check.
func (s suite) testAdoptGrant(t *testing.T) {
	l := s.synced(t)
	ctx := t.Context()
	c := mustChunk(t, l, Region0, 2*Block, false)
	if err := l.SetHostQuota(ctx, 3, Block); err != nil {
		t.Fatal(err)
	}
	exts := []cci.Extent{{DPA: Base0, Length: Block, Tag: c.Tag}, {DPA: Base0 + 4*Block, Length: Block, Tag: c.Tag}}
	g, err := l.AdoptGrant(ctx, c.ID, 3, exts)
	checkErr(t, "AdoptGrant", err)
	got, err := l.Grant(ctx, g.ID)
	checkErr(t, "Grant", err)
	want := dcd.Grant{ID: g.ID, Chunk: c.ID, Host: 3, State: dcd.GrantGranted, Extents: exts, Reason: got.Reason}
	if diff := cmp.Diff(want, got, ignoreTimes); diff != "" {
		t.Errorf("adopted grant (-want +got):\n%s", diff)
	}
	if got.Reason == "" {
		t.Errorf("adopted grant has no reason saying it was adopted")
	}
	for _, tc := range []struct {
		name  string
		chunk dcd.ChunkID
		host  dcd.HostID
		want  []error
	}{
		{"same host again", c.ID, 3, []error{dcd.ErrConflict}},
		{"other host, not sharable", c.ID, 4, []error{dcd.ErrNotSharable, dcd.ErrConflict}},
		{"unknown chunk", 999, 4, []error{dcd.ErrNotFound}},
		{"unknown host", c.ID, NumHosts, []error{dcd.ErrNotFound}},
	} {
		_, err := l.AdoptGrant(ctx, tc.chunk, tc.host, exts)
		checkErr(t, "AdoptGrant "+tc.name, err, tc.want...)
	}
}

// testPlacement: every chunk gets whole blocks of its region, tagged with
// its tag, that no other live chunk has; a deleted chunk's blocks are
// placed again; a sharable chunk's extents carry their shared sequence.
func (s suite) testPlacement(t *testing.T) {
	l := s.synced(t)
	ctx := t.Context()
	a := mustChunk(t, l, Region0, 4*Block, false)
	b := mustChunk(t, l, Region0, 8*Block, false)
	c := mustChunk(t, l, Region0, 2*Block, false)
	checkErr(t, "DeleteChunk", l.DeleteChunk(ctx, b.ID))
	d := mustChunk(t, l, Region0, 10*Block, false) // b's 8 blocks and 2 more after c
	sh := mustChunk(t, l, Region1, 3*Block, true)
	got := map[string][]cci.Extent{}
	for _, x := range []dcd.Chunk{a, c, d, sh} {
		back, err := l.Chunk(ctx, x.ID)
		checkErr(t, "Chunk", err)
		if diff := cmp.Diff(x.Extents, back.Extents); diff != "" {
			t.Errorf("chunk %d placement read back differs (-created +read):\n%s", x.ID, diff)
		}
		got[x.Name+fmt.Sprint(x.ID)] = x.Extents
	}
	want := map[string][]cci.Extent{
		a.Name + fmt.Sprint(a.ID):   {{DPA: Base0, Length: 4 * Block, Tag: a.Tag}},
		c.Name + fmt.Sprint(c.ID):   {{DPA: Base0 + 12*Block, Length: 2 * Block, Tag: c.Tag}},
		d.Name + fmt.Sprint(d.ID):   {{DPA: Base0 + 4*Block, Length: 8 * Block, Tag: d.Tag}, {DPA: Base0 + 14*Block, Length: 2 * Block, Tag: d.Tag}},
		sh.Name + fmt.Sprint(sh.ID): {{DPA: Base1, Length: 3 * Block, Tag: sh.Tag}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("placements mismatch (-want +got):\n%s", diff)
	}
	all, err := l.Chunks(ctx)
	checkErr(t, "Chunks", err)
	for _, x := range all {
		if x.ID == d.ID && len(x.Extents) != 2 {
			t.Errorf("Chunks: chunk %d has %d extents, want 2", x.ID, len(x.Extents))
		}
	}
}

// testPlacementAvoidsOrphans: capacity the device holds under no ledger
// row is never placed again.
func (s suite) testPlacementAvoidsOrphans(t *testing.T) {
	l := s.synced(t)
	ctx := t.Context()
	tag := cci.NewTag()
	checkErr(t, "RecordOrphan", l.RecordOrphan(ctx, dcd.Orphan{Host: 1, Tag: tag,
		Extents: []cci.Extent{{DPA: Base0, Length: 2 * Block, Tag: tag}}}))
	c := mustChunk(t, l, Region0, 2*Block, false)
	want := []cci.Extent{{DPA: Base0 + 2*Block, Length: 2 * Block, Tag: c.Tag}}
	if diff := cmp.Diff(want, c.Extents); diff != "" {
		t.Errorf("placement beside an orphan mismatch (-want +got):\n%s", diff)
	}
}
