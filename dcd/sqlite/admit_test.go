package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/dcd"
	"cxlpool/dcd/ledgertest"
)

// TestIntentChunkIsTheStoredChunk: the chunk a grant intent hands the
// Manager (read by qAdmit in one statement, the placement folded into a
// column) is the chunk Chunk reads row by row, placement and shared
// sequence included, for a chunk in one piece, one in two pieces and a
// sharable one.
func TestIntentChunkIsTheStoredChunk(t *testing.T) {
	ctx := t.Context()
	l, err := Open(ctx, filepath.Join(t.TempDir(), "ledger.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := l.SyncInventory(ctx, ledgertest.Inventory()); err != nil {
		t.Fatal(err)
	}
	create := func(region int, blocks uint64, sharable bool) dcd.Chunk {
		t.Helper()
		c, err := l.CreateChunk(ctx, dcd.Chunk{Region: region, Size: blocks * ledgertest.Block, Sharable: sharable})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	whole := create(ledgertest.Region0, 1, false)
	gap := create(ledgertest.Region0, 1, false)
	create(ledgertest.Region0, 1, false)
	if err := l.DeleteChunk(ctx, gap.ID); err != nil {
		t.Fatal(err)
	}
	split := create(ledgertest.Region0, 2, false) // the freed block, then one past the third chunk
	shared := create(ledgertest.Region1, 3, true)
	if got := len(split.Extents); got != 2 {
		t.Fatalf("the split chunk has %d pieces, want 2 (the test's premise)", got)
	}
	for _, tc := range []struct {
		name  string
		chunk dcd.Chunk
		host  dcd.HostID
	}{
		{"one piece", whole, 0},
		{"two pieces", split, 1},
		{"sharable, first grant", shared, 2},
		{"sharable, second grant", shared, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, err := l.BeginGrant(ctx, tc.chunk.ID, tc.host, nil)
			if err != nil {
				t.Fatal(err)
			}
			want, err := l.Chunk(ctx, tc.chunk.ID)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, in.Chunk); diff != "" {
				t.Errorf("intent's chunk (-stored +intent):\n%s", diff)
			}
		})
	}
}

func TestParseSpans(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []span
		wantErr bool
	}{
		{"", nil, false},
		{"0 4096 8192", []span{{4096, 8192}}, false},
		{"0 0 1 1 -9223372036854775808 2", []span{{0, 1}, {1 << 63, 2}}, false},
		// group_concat promises no order: idx decides it.
		{"2 300 3 0 100 1 1 200 2", []span{{100, 1}, {200, 2}, {300, 3}}, false},
		{"1 2", nil, true},
		{"0 x 2", nil, true},
	} {
		got, err := parseSpans(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("parseSpans(%q) error %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(span{})); diff != "" {
			t.Errorf("parseSpans(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}
