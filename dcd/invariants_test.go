package dcd_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/dcd"
	"cxlpool/dcd/ledgertest"
	"cxlpool/dcd/sqlite"
	"cxlpool/fabric"
	"cxlpool/fabric/cci"
	"cxlpool/rdma"
)

// snapDevice is a device that answers the checker's two reads from a
// fixed picture. Other methods are not used by the checker (the embedded
// nil interface would panic).
type snapDevice struct {
	fabric.Device
	held   map[uint16][]cci.Extent
	tags   fabric.TagList
	onRead func() // runs inside Tags, between the checker's two ledger reads
}

func (d *snapDevice) Tags(context.Context) (fabric.TagList, error) {
	if d.onRead != nil {
		d.onRead()
	}
	return d.tags, nil
}

func (d *snapDevice) Extents(_ context.Context, host uint16) (fabric.ExtentList, error) {
	return fabric.ExtentList{Host: host, Extents: d.held[host]}, nil
}

type exportList []dcd.ExportRange

func (l exportList) ExportRanges() []dcd.ExportRange { return l }

// world is a consistent ledger, device and export list: chunk a (region
// 0, 2 blocks) granted to host 1, sharable chunk s (region 1, 2 blocks)
// granted to hosts 2 and 3, and an export of all of a. Cases break it.
type world struct {
	t       *testing.T
	led     dcd.Ledger
	dev     *snapDevice
	exports exportList
	a, s    dcd.Chunk
	ga      dcd.Grant
}

const wblk = ledgertest.Block

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx := t.Context()
	led, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	if err := led.SyncInventory(ctx, ledgertest.Inventory()); err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, led: led, dev: &snapDevice{held: map[uint16][]cci.Extent{}}}
	w.a = w.chunk(0, 2*wblk, false)
	w.s = w.chunk(1, 2*wblk, true)
	w.ga = w.grant(w.a, 1, cci.Extent{DPA: ledgertest.Base0, Length: 2 * wblk, Tag: w.a.Tag})
	shared := cci.Extent{DPA: ledgertest.Base1, Length: 2 * wblk, Tag: w.s.Tag}
	w.grant(w.s, 2, shared)
	w.grant(w.s, 3, shared)
	w.exports = exportList{{Export: "x1", Chunk: w.a.ID, Ranges: []dcd.DPARange{{DPA: ledgertest.Base0, Length: 2 * wblk}}}}
	return w
}

func (w *world) chunk(region int, size uint64, sharable bool) dcd.Chunk {
	w.t.Helper()
	c, err := w.led.CreateChunk(w.t.Context(), dcd.Chunk{Region: region, Size: size, Sharable: sharable})
	if err != nil {
		w.t.Fatal(err)
	}
	return c
}

// grant records a granted grant in the ledger and the same extents on the
// device.
func (w *world) grant(c dcd.Chunk, host dcd.HostID, es ...cci.Extent) dcd.Grant {
	w.t.Helper()
	ctx := w.t.Context()
	gi, err := w.led.BeginGrant(ctx, c.ID, host, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	g, err := w.led.CompleteGrant(ctx, gi.ID, es)
	if err != nil {
		w.t.Fatal(err)
	}
	w.dev.held[uint16(host)] = append(w.dev.held[uint16(host)], es...)
	return g
}

func (w *world) check() (dcd.InvariantReport, error) {
	return dcd.CheckInvariants(w.t.Context(), w.led, w.dev, w.exports)
}

func rules(r dcd.InvariantReport) []string {
	var out []string
	for _, v := range r.Violations {
		out = append(out, v.Rule)
	}
	return out
}

func TestCheckInvariants(t *testing.T) {
	stranger := cci.NewTag()
	tests := []struct {
		name      string
		breakIt   func(w *world)
		wantRules []string
		wantText  []string // each must be in some violation's message
		unsettled int
	}{
		{name: "consistent", breakIt: func(*world) {}},
		{
			name: "host released on its own, ledger still granted",
			breakIt: func(w *world) {
				w.dev.held[1] = nil
			},
			wantRules: []string{dcd.RuleGrantOnDevice, dcd.RuleExportBacked},
			wantText: []string{
				"grant 1 (chunk 1, host 1) is granted with 1 extents [0x0+0x400000] in the ledger, but the device holds no extents for host 1 under the chunk's tag",
				"export x1 (chunk 1) reaches DPA 0x0–0x400000 (4194304 bytes), which no host holds on the device under the chunk's tag",
			},
		},
		{
			name: "device holds less than the ledger says",
			breakIt: func(w *world) {
				w.dev.held[1] = []cci.Extent{{DPA: ledgertest.Base0, Length: wblk, Tag: w.a.Tag}}
			},
			wantRules: []string{dcd.RuleGrantOnDevice, dcd.RuleExportBacked},
			wantText:  []string{"but the device holds 1 extents [0x0+0x200000] for host 1"},
		},
		{
			name: "device holds a chunk's tag for a host without a grant",
			breakIt: func(w *world) {
				w.dev.held[5] = []cci.Extent{{DPA: 8 * wblk, Length: wblk, Tag: w.a.Tag}}
			},
			wantRules: []string{dcd.RuleDeviceExplained},
			wantText:  []string{"host 5 holds 1 extents [0x1000000+0x200000] under chunk 1's tag", "the ledger has no active grant of chunk 1 to host 5"},
		},
		{
			name: "device holds a tag nobody knows, on another host's bytes",
			breakIt: func(w *world) {
				w.dev.held[6] = []cci.Extent{{DPA: wblk, Length: 2 * wblk, Tag: stranger}}
			},
			wantRules: []string{dcd.RuleDeviceExplained, dcd.RuleNoOverlap},
			wantText: []string{
				"host 6 holds 1 extents [0x200000+0x400000] under tag " + stranger.String() + ", which no chunk has and no orphan records",
				"on the device, host 1 (chunk 1's tag",
				"both hold DPA 0x200000–0x400000 (2097152 bytes)",
			},
		},
		{
			name: "two chunks' grants on the same bytes",
			breakIt: func(w *world) {
				b := w.chunk(0, wblk, false)
				w.grant(b, 7, cci.Extent{DPA: wblk, Length: wblk, Tag: b.Tag})
			},
			wantRules: []string{dcd.RuleNoOverlap, dcd.RuleNoOverlap},
			wantText: []string{
				"in the ledger, grant 1 (chunk 1, host 1) and grant 4 (chunk 3, host 7) both hold DPA 0x200000–0x400000",
				"on the device, host 1 (chunk 1's tag",
			},
		},
		{
			name: "a non-sharable chunk held by two hosts",
			breakIt: func(w *world) {
				w.dev.held[4] = []cci.Extent{{DPA: ledgertest.Base0, Length: 2 * wblk, Tag: w.a.Tag}}
			},
			wantRules: []string{dcd.RuleDeviceExplained, dcd.RuleNoOverlap},
		},
		{
			name: "orphan on a grant's bytes",
			breakIt: func(w *world) {
				e := cci.Extent{DPA: 0, Length: wblk, Tag: stranger}
				if err := w.led.RecordOrphan(w.t.Context(), dcd.Orphan{Host: 4, Tag: stranger, Extents: []cci.Extent{e}}); err != nil {
					w.t.Fatal(err)
				}
				w.dev.held[4] = []cci.Extent{e}
			},
			wantRules: []string{dcd.RuleOrphan, dcd.RuleNoOverlap},
			wantText:  []string{"in the ledger, grant 1 (chunk 1, host 1) and the orphan of host 4 under tag " + stranger.String() + " both hold DPA 0x0–0x200000"},
		},
		{
			name: "orphan no longer on the device",
			breakIt: func(w *world) {
				e := cci.Extent{DPA: 20 * wblk, Length: wblk, Tag: stranger}
				if err := w.led.RecordOrphan(w.t.Context(), dcd.Orphan{Host: 4, Tag: stranger, Extents: []cci.Extent{e}}); err != nil {
					w.t.Fatal(err)
				}
			},
			wantRules: []string{dcd.RuleOrphan},
			wantText:  []string{"the orphan of host 4 under tag " + stranger.String() + " (1 extents [0x2800000+0x200000]) is no longer on the device"},
		},
		{
			name: "export beyond its grant",
			breakIt: func(w *world) {
				w.exports[0].Ranges = []dcd.DPARange{{DPA: wblk, Length: 2 * wblk}}
			},
			wantRules: []string{dcd.RuleExportBacked, dcd.RuleExportBacked},
			wantText:  []string{"export x1 (chunk 1) reaches DPA 0x200000–0x600000 (4194304 bytes), which no granted grant of chunk 1 holds in the ledger"},
		},
		{
			name: "export of a chunk nobody holds",
			breakIt: func(w *world) {
				c := w.chunk(0, wblk, false)
				w.exports = append(w.exports, dcd.ExportRange{Export: "x2", Chunk: c.ID, Ranges: []dcd.DPARange{{DPA: 30 * wblk, Length: wblk}}})
			},
			wantRules: []string{dcd.RuleExportBacked, dcd.RuleExportBacked},
		},
		{
			name: "export of a chunk the ledger does not have",
			breakIt: func(w *world) {
				w.exports = append(w.exports, dcd.ExportRange{Export: "x3", Chunk: 99})
			},
			wantRules: []string{dcd.RuleExportChunkKnown},
			wantText:  []string{"export x3 names chunk 99, which the ledger does not have"},
		},
		{
			name: "export of a granted grant the ledger lost",
			breakIt: func(w *world) {
				if _, err := w.led.MarkLost(w.t.Context(), w.ga.ID, "test"); err != nil {
					w.t.Fatal(err)
				}
			},
			wantRules: []string{dcd.RuleDeviceExplained, dcd.RuleExportBacked},
		},
		{
			name: "pending offer nobody asked for",
			breakIt: func(w *world) {
				ti := fabric.TagInfo{Tag: stranger}
				ti.Pending[0] = 1 << 3
				w.dev.tags.Tags = append(w.dev.tags.Tags, ti)
			},
			wantRules: []string{dcd.RuleDeviceExplained},
			wantText:  []string{"host 3 has a pending offer under tag " + stranger.String() + ", but the ledger has no grant being added for it"},
		},
		{
			name: "a grant being added is in flight, not judged",
			breakIt: func(w *world) {
				c := w.chunk(0, wblk, false)
				if _, err := w.led.BeginGrant(w.t.Context(), c.ID, 4, nil); err != nil {
					w.t.Fatal(err)
				}
				ti := fabric.TagInfo{Tag: c.Tag}
				ti.Pending[0] = 1 << 4
				w.dev.tags.Tags = append(w.dev.tags.Tags, ti)
			},
			unsettled: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			tt.breakIt(w)
			rep, err := w.check()
			if err != nil {
				t.Fatalf("CheckInvariants: %v", err)
			}
			if diff := cmp.Diff(tt.wantRules, rules(rep)); diff != "" {
				t.Errorf("violated rules (-want +got):\n%s\nreport:\n%v", diff, rep.Err())
			}
			for _, want := range tt.wantText {
				found := false
				for _, v := range rep.Violations {
					found = found || strings.Contains(v.Message, want)
				}
				if !found {
					t.Errorf("no violation says %q; report:\n%v", want, rep.Err())
				}
			}
			if rep.Unsettled != tt.unsettled {
				t.Errorf("Unsettled: got %d, want %d", rep.Unsettled, tt.unsettled)
			}
			if got, want := rep.OK(), len(tt.wantRules) == 0; got != want || (rep.Err() == nil) != want {
				t.Errorf("OK() = %v, Err() = %v; want OK %v", got, rep.Err(), want)
			}
		})
	}
}

func TestCheckInvariantsCounts(t *testing.T) {
	w := newWorld(t)
	rep, err := w.check()
	if err != nil {
		t.Fatal(err)
	}
	want := dcd.InvariantReport{Hosts: ledgertest.NumHosts, Chunks: 2, Grants: 3, Exports: 1}
	if diff := cmp.Diff(want, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
}

// TestCheckInvariantsRefusesAMovingLedger: a flow that changes the ledger
// while the device is read makes the snapshot meaningless; the checker
// says so instead of reporting violations that are not there.
func TestCheckInvariantsRefusesAMovingLedger(t *testing.T) {
	w := newWorld(t)
	c := w.chunk(0, wblk, false)
	w.dev.onRead = func() {
		if _, err := w.led.BeginGrant(context.Background(), c.ID, 6, nil); err != nil {
			t.Error(err)
		}
		w.dev.onRead = nil
	}
	_, err := w.check()
	if !errors.Is(err, dcd.ErrConflict) || !strings.Contains(err.Error(), "the ledger changed during the check") {
		t.Errorf("CheckInvariants: got %v, want ErrConflict saying the ledger changed", err)
	}
}

// TestInvariantsOnALiveStack runs the checker on a whole daemon: grants,
// a shared chunk, exports and a release leave everything consistent; a
// grant the ledger then forgets (behind the Manager's back) is reported
// with its export.
func TestInvariantsOnALiveStack(t *testing.T) {
	s := newStack(t, nil)
	ctx := ctxT(t)
	if s.app.Exports == nil {
		t.Fatal("the stack has no export service")
	}
	a, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: 2 * blk, Region: -1})
	if err != nil {
		t.Fatal(err)
	}
	ga, err := s.m.Grant(ctx, a.ID, 3)
	if err != nil {
		t.Fatal(err)
	}
	sh, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: blk, Region: -1, Sharable: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []dcd.HostID{1, 2} {
		if _, err := s.m.Grant(ctx, sh.ID, h); err != nil {
			t.Fatal(err)
		}
	}
	gone, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: blk, Region: -1})
	if err != nil {
		t.Fatal(err)
	}
	gg, err := s.m.Grant(ctx, gone.ID, 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.m.Release(ctx, gg.ID); err != nil {
		t.Fatal(err)
	}
	for _, c := range []dcd.ChunkID{a.ID, sh.ID} {
		if _, err := s.app.Exports.Create(ctx, rdma.CreateRequest{Chunk: c, Client: "rack7", Perms: rdma.PermRead}); err != nil {
			t.Fatalf("export chunk %d: %v", c, err)
		}
	}
	rep, err := s.m.CheckInvariants(ctx, s.app.Exports)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Grants != 3 || rep.Exports != 2 {
		t.Fatalf("after ordinary flows: got %d grants, %d exports checked and %v; want 3, 2 and no violations", rep.Grants, rep.Exports, rep.Err())
	}

	if _, err := s.led.MarkLost(ctx, ga.ID, "forgotten by the test"); err != nil {
		t.Fatal(err)
	}
	rep, err = s.m.CheckInvariants(ctx, s.app.Exports)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{dcd.RuleDeviceExplained, dcd.RuleExportBacked}, rules(rep)); diff != "" {
		t.Errorf("after the ledger lost grant %d (-want +got):\n%s\n%v", ga.ID, diff, rep.Err())
	}
}
