package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"cxlpool/dcd"
	"cxlpool/dcd/ledgertest"
	"cxlpool/fabric/cci"
)

// qBusySpansRef is what the busy-span cache stands for: every DPA range
// that is not free, read from the ledger (placements of live chunks,
// extents of active grants, orphaned extents, the last marked).
const qBusySpansRef = `SELECT ce.dpa, ce.length, 0 FROM chunks c CROSS JOIN chunk_extents ce ON ce.chunk = c.id WHERE c.deleted IS NULL
	UNION ALL SELECT e.dpa, e.length, 0 FROM grants g CROSS JOIN extents e ON e.grant_id = g.id WHERE g.state IN ` + activeStates + `
	UNION ALL SELECT dpa, length, 1 FROM orphan_extents`

// qReservedRef is what the cache's reserved bytes of a region stand for.
const qReservedRef = `SELECT coalesce(sum(size), 0) FROM chunks WHERE region = ? AND deleted IS NULL`

// busySpansRef is busySpans read from the ledger, without the cache.
func busySpansRef(ctx context.Context, tx *Tx, r dcd.Region) (busyView, error) {
	var v busyView
	var reserved int64
	if err := tx.QueryRowContext(ctx, qReservedRef, r.Index).Scan(&reserved); err != nil {
		return v, err
	}
	v.reserved = u64(reserved)
	rows, err := tx.QueryContext(ctx, qBusySpansRef)
	if err != nil {
		return v, err
	}
	defer rows.Close()
	var all []span
	for rows.Next() {
		var dpa, length int64
		var orphan bool
		if err := rows.Scan(&dpa, &length, &orphan); err != nil {
			return v, err
		}
		s := span{u64(dpa), u64(length)}
		if orphan {
			v.orphans = append(v.orphans, s)
		}
		if s.length > 0 && s.dpa < r.Base+r.Length && s.end() > r.Base {
			all = append(all, s)
		}
	}
	v.busy = mergeSpans(all)
	return v, rows.Err()
}

// mergeSpans sorts spans and merges those that overlap or touch.
func mergeSpans(all []span) []span {
	slices.SortFunc(all, func(a, b span) int { return cmp.Compare(a.dpa, b.dpa) })
	var merged []span
	for _, s := range all {
		if k := len(merged); k > 0 && s.dpa <= merged[k-1].end() {
			merged[k-1].length = max(merged[k-1].end(), s.end()) - merged[k-1].dpa
			continue
		}
		merged = append(merged, s)
	}
	return merged
}

var spanCmp = []gocmp.Option{gocmp.AllowUnexported(span{})}

func sortSpans(s []span) []span {
	s = slices.Clone(s)
	slices.SortFunc(s, func(a, b span) int {
		return cmp.Or(cmp.Compare(a.dpa, b.dpa), cmp.Compare(a.length, b.length))
	})
	return s
}

// checkBusy compares the cache with the ledger in one write transaction.
func checkBusy(t *testing.T, l *Ledger, step string) {
	t.Helper()
	ctx := t.Context()
	regions, err := l.Regions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = l.tx(ctx, func(tx *Tx) error {
		for _, r := range regions {
			got, err := busySpans(ctx, tx, r)
			if err != nil {
				return err
			}
			want, err := busySpansRef(ctx, tx, r)
			if err != nil {
				return err
			}
			if d := gocmp.Diff(want.busy, got.busy, spanCmp...); d != "" {
				t.Errorf("%s: region %d busy spans (-ledger +cache):\n%s", step, r.Index, d)
			}
			if d := gocmp.Diff(sortSpans(want.orphans), sortSpans(got.orphans), spanCmp...); d != "" {
				t.Errorf("%s: orphaned extents (-ledger +cache):\n%s", step, d)
			}
			if got, want := got.reserved, want.reserved; got != want {
				t.Errorf("%s: region %d reserved %d bytes by the cache, %d by the ledger", step, r.Index, got, want)
			}
		}
		for h := range dcd.HostID(ledgertest.NumHosts) {
			got, err := heldBy(ctx, tx, h)
			if err != nil {
				return err
			}
			var want int64
			if err := tx.QueryRowContext(ctx, qHostHeld, h).Scan(&want); err != nil {
				return err
			}
			if got != u64(want) {
				t.Errorf("%s: host %d holds %d bytes by the cache, %d by the ledger", step, h, got, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", step, err)
	}
}

// errBoom fails a transaction on purpose.
var errBoom = errors.New("boom")

// TestBusyCacheDifferential runs random ledger operations, transactions
// and savepoints rolled back after the cache was brought up to date, direct
// SQL the cache cannot apply, a second connection writing the file and a
// log longer than its bound, and compares the busy-span cache with the
// ledger at random points, so several changes often reach it together.
func TestBusyCacheDifferential(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { busyDifferential(t, seed) })
	}
}

func busyDifferential(t *testing.T, seed uint64) {
	ctx := t.Context()
	l, path := openTemp(t, Options{Synchronous: "NORMAL"})
	t.Cleanup(func() { l.Close() })
	if err := l.SyncInventory(ctx, ledgertest.Inventory()); err != nil {
		t.Fatal(err)
	}
	foreign, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)&_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Close()
	rng := rand.New(rand.NewPCG(seed, 0xb05e))
	regions := []dcd.Region{
		{Index: ledgertest.Region0, Base: ledgertest.Base0, Length: ledgertest.Length0},
		{Index: ledgertest.Region1, Base: ledgertest.Base1, Length: ledgertest.Length1},
	}
	var chunks []dcd.ChunkID
	var grants []dcd.GrantID
	pick := func(n int) int { return rng.IntN(max(n, 1)) }
	randomExtents := func(tag cci.Tag) []cci.Extent {
		r := regions[rng.IntN(2)]
		var out []cci.Extent
		for range 1 + rng.IntN(3) {
			out = append(out, cci.Extent{
				DPA:    r.Base + uint64(rng.IntN(int(r.Length/ledgertest.Block)))*ledgertest.Block,
				Length: uint64(1+rng.IntN(3)) * ledgertest.Block,
				Tag:    tag,
			})
		}
		return out
	}
	// exec runs statements on the writer in one transaction, which fails
	// (rolled back) when fail is set, after the cache was brought up to
	// date inside it.
	exec := func(fail bool, stmts ...string) error {
		return l.tx(ctx, func(tx *Tx) error {
			if fail {
				if _, err := busySpans(ctx, tx, regions[0]); err != nil {
					return err
				}
			}
			for _, q := range stmts {
				if _, err := tx.ExecContext(ctx, q); err != nil {
					return err
				}
			}
			if fail {
				return errBoom
			}
			return nil
		})
	}
	ops := []struct {
		name string
		fn   func() error
	}{
		{"reserve", func() error {
			c, err := l.CreateChunk(ctx, dcd.Chunk{Region: rng.IntN(2), Size: uint64(1+rng.IntN(6)) * ledgertest.Block})
			if err == nil {
				chunks = append(chunks, c.ID)
			}
			return err
		}},
		{"grant", func() error {
			if len(chunks) == 0 {
				return nil
			}
			in, err := l.BeginGrant(ctx, chunks[pick(len(chunks))], dcd.HostID(rng.IntN(ledgertest.NumHosts)), nil)
			if err != nil {
				return err
			}
			grants = append(grants, in.ID)
			switch rng.IntN(4) {
			case 0: // left adding
			case 1:
				_, err = l.FailGrant(ctx, in.ID, "refused")
			case 2: // the host accepted something else than the placement
				_, err = l.CompleteGrant(ctx, in.ID, randomExtents(in.Chunk.Tag))
			default:
				_, err = l.CompleteGrant(ctx, in.ID, in.Chunk.Extents)
			}
			return err
		}},
		{"adopt", func() error {
			if len(chunks) == 0 {
				return nil
			}
			c, err := l.Chunk(ctx, chunks[pick(len(chunks))])
			if err != nil {
				return err
			}
			g, err := l.AdoptGrant(ctx, c.ID, dcd.HostID(rng.IntN(ledgertest.NumHosts)), randomExtents(c.Tag))
			if err == nil {
				grants = append(grants, g.ID)
			}
			return err
		}},
		{"release", func() error {
			if len(grants) == 0 {
				return nil
			}
			id := grants[pick(len(grants))]
			if _, err := l.BeginRelease(ctx, id); err != nil || rng.IntN(3) == 0 {
				return err
			}
			if rng.IntN(4) == 0 {
				_, err := l.MarkLost(ctx, id, "gone")
				return err
			}
			_, err := l.CompleteRelease(ctx, id)
			return err
		}},
		{"delete chunk", func() error {
			if len(chunks) == 0 {
				return nil
			}
			return l.DeleteChunk(ctx, chunks[pick(len(chunks))])
		}},
		{"orphan", func() error {
			var tag cci.Tag
			for i := range tag {
				tag[i] = byte(rng.Uint32())
			}
			return l.RecordOrphan(ctx, dcd.Orphan{Host: dcd.HostID(rng.IntN(ledgertest.NumHosts)), Tag: tag, Extents: randomExtents(tag)})
		}},
		{"clear orphan", func() error {
			os, err := l.Orphans(ctx)
			if err != nil || len(os) == 0 {
				return err
			}
			o := os[pick(len(os))]
			return l.ClearOrphan(ctx, o.Host, o.Tag)
		}},
		{"reserve rolled back", func() error {
			// Reserve's own transaction, then a failure after it.
			return l.tx(ctx, func(tx *Tx) error {
				r := regions[rng.IntN(2)]
				v, err := busySpans(ctx, tx, r)
				if err != nil {
					return err
				}
				spans, err := place(dcd.Region{Index: r.Index, Base: r.Base, Length: r.Length, BlockSize: ledgertest.Block}, ledgertest.Block, v.busy)
				if err != nil {
					return err
				}
				tag := cci.NewTag()
				res, err := tx.ExecContext(ctx, qInsertChunk, "doomed", r.Index, int64(ledgertest.Block), tag[:], 0, 0)
				if err != nil {
					return err
				}
				id, _ := res.LastInsertId()
				if err := insertPlacement(ctx, tx, dcd.ChunkID(id), spans); err != nil {
					return err
				}
				return errBoom
			})
		}},
		{"batch with a failed savepoint", func() error {
			// Two jobs in one transaction: the first brings the cache up
			// to date and fails (rolled back to its savepoint), the
			// second changes what is busy and commits.
			jobs := []*writeJob{
				{ctx: ctx, done: make(chan writeResult, 1), fn: func(tx *Tx) error {
					if _, err := busySpans(ctx, tx, regions[0]); err != nil {
						return err
					}
					if _, err := tx.ExecContext(ctx, `UPDATE chunks SET deleted = 1 WHERE deleted IS NULL`); err != nil {
						return err
					}
					if _, err := busySpans(ctx, tx, regions[0]); err != nil {
						return err
					}
					return errBoom
				}},
				{ctx: ctx, done: make(chan writeResult, 1), fn: func(tx *Tx) error {
					_, err := tx.ExecContext(ctx, `UPDATE grants SET state = 'released' WHERE id = (SELECT max(id) FROM grants WHERE state IN `+activeStates+`)`)
					return err
				}},
			}
			errs := make([]error, len(jobs))
			if _, err := l.runBatchOnce(jobs, errs); err != nil {
				return err
			}
			if !errors.Is(errs[0], errBoom) || errs[1] != nil {
				return fmt.Errorf("batch outcomes %v", errs)
			}
			return nil
		}},
		{"placement moved by hand", func() error {
			return exec(rng.IntN(2) == 0, `UPDATE chunk_extents SET dpa = dpa + `+fmt.Sprint(ledgertest.Block)+
				` WHERE chunk = (SELECT max(id) FROM chunks WHERE deleted IS NULL)`)
		}},
		{"chunk revived by hand", func() error {
			return exec(rng.IntN(2) == 0, `UPDATE chunks SET deleted = NULL WHERE id = (SELECT max(id) FROM chunks WHERE deleted IS NOT NULL)`)
		}},
		{"chunk resized or moved by hand", func() error {
			set := `size = size + ` + fmt.Sprint(ledgertest.Block)
			if rng.IntN(2) == 0 {
				set = `region = 1 - region`
			}
			return exec(rng.IntN(2) == 0, `UPDATE chunks SET `+set+` WHERE id = (SELECT max(id) FROM chunks WHERE deleted IS NULL)`)
		}},
		{"chunk added by hand", func() error {
			// Live or already deleted, without a placement.
			deleted := "NULL"
			if rng.IntN(2) == 0 {
				deleted = "1"
			}
			return exec(rng.IntN(2) == 0, fmt.Sprintf(`INSERT INTO chunks (name, region, size, tag, sharable, created, deleted)
				VALUES ('hand', %d, %d, randomblob(16), 0, 0, %s)`, rng.IntN(2), ledgertest.Block, deleted))
		}},
		{"grant moved by hand", func() error {
			set := fmt.Sprintf(`host = %d`, rng.IntN(ledgertest.NumHosts))
			if rng.IntN(2) == 0 {
				set = `chunk = (SELECT max(id) FROM chunks)`
			}
			return exec(rng.IntN(2) == 0, `UPDATE grants SET `+set+` WHERE id = (SELECT max(id) FROM grants WHERE state IN `+activeStates+`)`)
		}},
		{"grant revived by hand", func() error {
			err := exec(rng.IntN(2) == 0, `UPDATE grants SET state = 'granted' WHERE id = (SELECT max(g.id) FROM grants g
				WHERE g.state NOT IN `+activeStates+` AND NOT EXISTS (SELECT 1 FROM grants a WHERE a.chunk = g.chunk AND a.host = g.host AND a.state IN `+activeStates+`))`)
			return err
		}},
		{"extents deleted by hand", func() error {
			return exec(rng.IntN(2) == 0, `DELETE FROM extents WHERE grant_id = (SELECT max(grant_id) FROM extents)`)
		}},
		{"placement deleted by hand", func() error {
			return exec(rng.IntN(2) == 0, `DELETE FROM chunk_extents WHERE chunk = (SELECT max(id) FROM chunks WHERE deleted IS NULL)`)
		}},
		{"extent moved by hand", func() error {
			return exec(rng.IntN(2) == 0, `UPDATE extents SET dpa = dpa + `+fmt.Sprint(ledgertest.Block)+
				` WHERE grant_id = (SELECT max(g.id) FROM grants g JOIN extents e ON e.grant_id = g.id WHERE g.state IN `+activeStates+`)`)
		}},
		{"rows deleted with foreign keys off", func() error {
			// What only the triggers on the parent rows see: a chunk or
			// grant deleted with its ranges left behind, and a grant
			// inserted over extents already there.
			if _, err := l.wc.ExecContext(ctx, `PRAGMA foreign_keys = OFF`); err != nil {
				return err
			}
			defer l.wc.ExecContext(ctx, `PRAGMA foreign_keys = ON`)
			id := 1_000_000 + rng.IntN(1_000_000)
			switch rng.IntN(3) {
			case 0:
				return exec(false, `DELETE FROM chunks WHERE id = (SELECT max(id) FROM chunks WHERE deleted IS NULL)`)
			case 1:
				return exec(false, `DELETE FROM grants WHERE id = (SELECT max(g.id) FROM grants g JOIN extents e ON e.grant_id = g.id WHERE g.state IN `+activeStates+`)`)
			default:
				return exec(false,
					fmt.Sprintf(`INSERT INTO extents (grant_id, idx, dpa, length, tag, shared_seq) VALUES (%d, 0, %d, %d, zeroblob(16), 0)`,
						id, ledgertest.Block*uint64(rng.IntN(64)), ledgertest.Block),
					fmt.Sprintf(`INSERT INTO grants (id, chunk, host, state, created, updated)
						SELECT %d, c.id, 7, 'granted', 0, 0 FROM chunks c WHERE c.deleted IS NULL
						AND NOT EXISTS (SELECT 1 FROM grants a WHERE a.chunk = c.id AND a.host = 7 AND a.state IN `+activeStates+`) LIMIT 1`, id))
			}
		}},
		{"orphan moved by hand", func() error {
			return exec(false, `UPDATE orphan_extents SET length = length + `+fmt.Sprint(ledgertest.Block)+
				` WHERE orphan_id = (SELECT max(orphan_id) FROM orphan_extents)`)
		}},
		{"another connection", func() error {
			var q string
			switch rng.IntN(3) {
			case 0:
				q = `UPDATE chunk_extents SET dpa = dpa + ` + fmt.Sprint(ledgertest.Block) + ` WHERE chunk = (SELECT max(id) FROM chunks WHERE deleted IS NULL)`
			case 1:
				q = `UPDATE grants SET state = 'released' WHERE id = (SELECT max(id) FROM grants WHERE state IN ` + activeStates + `)`
			default:
				q = `DELETE FROM orphans WHERE id = (SELECT min(id) FROM orphans)`
			}
			_, err := foreign.ExecContext(ctx, q)
			return err
		}},
		{"a log past its bound", func() error {
			// Enough orphaned extents in one statement to overflow
			// busy_log, then some removed.
			var tag cci.Tag
			for i := range tag {
				tag[i] = byte(rng.Uint32())
			}
			if err := l.RecordOrphan(ctx, dcd.Orphan{Host: 0, Tag: tag, Extents: []cci.Extent{{DPA: 0, Length: ledgertest.Block, Tag: tag}}}); err != nil {
				return err
			}
			return exec(false,
				fmt.Sprintf(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %d)
					INSERT INTO orphan_extents (orphan_id, idx, dpa, length, tag, shared_seq)
					SELECT (SELECT max(id) FROM orphans), i, (i %% 64) * %d, %d, zeroblob(16), 0 FROM n`, busyLogMax+10, ledgertest.Block, ledgertest.Block),
				`DELETE FROM orphan_extents WHERE orphan_id = (SELECT max(id) FROM orphans) AND idx % 7 = 0`)
		}},
	}
	weights := []int{12, 12, 2, 10, 6, 3, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0}
	for step := range 400 {
		i := 0
		if rng.IntN(200) == 0 {
			i = len(ops) - 1 // rare: the long log
		} else {
			w := rng.IntN(sum(weights))
			for ; w >= weights[i]; i++ {
				w -= weights[i]
			}
		}
		op := ops[i]
		if err := op.fn(); err != nil && !errors.Is(err, errBoom) && !isRefusal(err) {
			t.Fatalf("step %d %s: %v", step, op.name, err)
		}
		if rng.IntN(3) == 0 {
			checkBusy(t, l, fmt.Sprintf("step %d after %s", step, op.name))
		}
	}
	checkBusy(t, l, "end")
}

func sum(s []int) int {
	n := 0
	for _, v := range s {
		n += v
	}
	return n
}

// isRefusal is an error a random operation may meet: a ledger rule's
// refusal, or a constraint the hand-written SQL broke.
func isRefusal(err error) bool {
	for _, e := range []error{dcd.ErrNoCapacity, dcd.ErrConflict, dcd.ErrNotFound, dcd.ErrInvalid, dcd.ErrQuotaExceeded, dcd.ErrNotSharable} {
		if errors.Is(err, e) {
			return true
		}
	}
	var se *msqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_CONSTRAINT
}

// TestBusyLogBounded: changes the cache is not asked about past busy_log's
// bound leave the log at most that long, and the cache right.
func TestBusyLogBounded(t *testing.T) {
	ctx := t.Context()
	l, _ := openTemp(t, Options{Synchronous: "NORMAL"})
	t.Cleanup(func() { l.Close() })
	if err := l.SyncInventory(ctx, ledgertest.Inventory()); err != nil {
		t.Fatal(err)
	}
	if _, err := l.CreateChunk(ctx, dcd.Chunk{Region: ledgertest.Region0, Size: ledgertest.Block}); err != nil {
		t.Fatal(err)
	}
	tag := cci.Tag{1}
	if err := l.RecordOrphan(ctx, dcd.Orphan{Host: 1, Tag: tag, Extents: []cci.Extent{{DPA: 0, Length: ledgertest.Block, Tag: tag}}}); err != nil {
		t.Fatal(err)
	}
	logged := func() int {
		var n int
		if err := l.wc.QueryRowContext(ctx, `SELECT count(*) FROM busy_log`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	next := 1 // the next orphaned extent's idx
	for _, n := range []int{busyLogMax / 2, busyLogMax / 2, busyLogMax + 1} {
		err := l.tx(ctx, func(tx *Tx) error {
			_, err := tx.ExecContext(ctx, fmt.Sprintf(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %d)
				INSERT INTO orphan_extents (orphan_id, idx, dpa, length, tag, shared_seq)
				SELECT (SELECT max(id) FROM orphans), %d + i, (i %% 64) * %d, %d, zeroblob(16), 0 FROM n`,
				n, next-1, ledgertest.Block, ledgertest.Block))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		next += n
		if got := logged(); got > busyLogMax {
			t.Errorf("after %d more changes busy_log holds %d rows, want at most %d", n, got, busyLogMax)
		}
	}
	checkBusy(t, l, "after the log overflowed")
	if got := logged(); got != 0 {
		t.Errorf("busy_log holds %d rows once the cache read it, want 0", got)
	}
}
