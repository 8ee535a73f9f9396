package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"cxlpool/dcd"
)

// The busy-span cache. A reservation places its chunk among every DPA
// range that is not free (busySpans): every live chunk's placement, every
// active grant's extents and every orphaned extent; and it checks the
// region's free bytes against the sizes of its live chunks. A grant's
// admission checks what its host holds (heldBy) against its quota. Reading them
// from the ledger costs a row per range, so on a box holding 480 grants it
// took ~1.5 ms of every reservation, most of the writer's time. The writer
// keeps them in memory instead, and SQLite itself says what changed. The
// ranges are kept sorted as they change, so a reservation merges them in
// one pass instead of sorting them again.
//
// How the cache stays exact:
//   - TEMP triggers on the writer's connection log every change to the
//     rows busySpans reads into busy_log, one row per change of the kinds
//     the cache can apply (a live chunk added, a placement row added, a
//     chunk deleted, an active grant added, an active grant's extent
//     added, a grant leaving the active states, an orphaned extent added
//     or removed). Any other change to those tables (an update or delete
//     of a range row, a chunk revived, moved or resized, a grant moved to
//     another host or chunk or made active again) sets busy_state.nonce to
//     NULL: the cache is then read again whole. The triggers are the ledger's own schema, so no code
//     path that writes those tables can bypass them.
//   - The cache holds the nonce it last wrote into busy_state. TEMP tables
//     are part of the connection's transactions: a transaction or
//     savepoint rolled back after the cache was brought up to date
//     restores an older nonce (and the log rows it had), which no longer
//     matches, so the cache is read again whole; a rolled-back change that
//     never reached the cache takes its log rows with it.
//   - Another connection's commit (a second process on the file) does not
//     fire these triggers, but changes PRAGMA data_version, which the cache
//     also compares. The ledger's read connections are query_only.
//   - It is only used inside the writer's transactions, which run one at a
//     time, and only with the write lock held (BEGIN IMMEDIATE), so nothing
//     commits between the check and the placement.
//
// TestBusyCacheDifferential drives random ledger operations, rollbacks,
// direct SQL and a foreign writer, and compares the cache with the query
// after each.

// busyLogMax bounds busy_log: past it the log is dropped and the cache
// read again whole, so grants and releases without reservations in between
// cannot grow it without end.
const busyLogMax = 4096

// The kinds of busy_log rows (busySchema's triggers write them).
const (
	busyAddPlacement = 1 // key: chunk; idx, dpa, length: the placement row
	busyDropChunk    = 2 // key: a chunk deleted
	busyAddExtent    = 3 // key: an active grant; idx, dpa, length: its extent
	busyDropGrant    = 4 // key: a grant that left the active states
	busyAddOrphan    = 5 // key: orphan; idx, dpa, length: the orphaned extent
	busyDropOrphan   = 6 // key: orphan; idx: the orphaned extent removed
	busyAddChunk     = 7 // key: a live chunk added; idx: its region; length: its size
	busyAddGrant     = 8 // key: an active grant added; idx: its host; length: its chunk's size
)

// busySchema creates the cache's log and triggers on the writer's
// connection (TEMP: they exist on that connection only, and nowhere in the
// file). busy_state.nonce starts NULL: nothing is cached yet.
var busySchema = fmt.Sprintf(`
CREATE TEMP TABLE busy_state (nonce INTEGER);
INSERT INTO busy_state (nonce) VALUES (NULL);
CREATE TEMP TABLE busy_log (
	seq    INTEGER PRIMARY KEY,
	op     INTEGER NOT NULL,
	key    INTEGER NOT NULL,
	idx    INTEGER NOT NULL DEFAULT 0,
	dpa    INTEGER NOT NULL DEFAULT 0,
	length INTEGER NOT NULL DEFAULT 0
);
CREATE TEMP TRIGGER busy_log_full AFTER INSERT ON busy_log WHEN new.seq > %[1]d
BEGIN UPDATE busy_state SET nonce = NULL; END;
-- A new nonce, or none, starts the log again: what it held is in the
-- cache, or of no use.
CREATE TEMP TRIGGER busy_state_set AFTER UPDATE OF nonce ON busy_state
BEGIN DELETE FROM busy_log; END;

CREATE TEMP TRIGGER busy_placement_add AFTER INSERT ON chunk_extents
WHEN (SELECT nonce FROM busy_state) IS NOT NULL
	AND EXISTS (SELECT 1 FROM chunks WHERE id = new.chunk AND deleted IS NULL)
BEGIN INSERT INTO busy_log (op, key, idx, dpa, length) VALUES (%[2]d, new.chunk, new.idx, new.dpa, new.length); END;
CREATE TEMP TRIGGER busy_placement_update AFTER UPDATE ON chunk_extents
BEGIN UPDATE busy_state SET nonce = NULL; END;
CREATE TEMP TRIGGER busy_placement_delete AFTER DELETE ON chunk_extents
BEGIN UPDATE busy_state SET nonce = NULL; END;

CREATE TEMP TRIGGER busy_chunk_add AFTER INSERT ON chunks
WHEN new.deleted IS NULL AND (SELECT nonce FROM busy_state) IS NOT NULL
BEGIN INSERT INTO busy_log (op, key, idx, length) VALUES (%[9]d, new.id, new.region, new.size); END;
CREATE TEMP TRIGGER busy_chunk_resized AFTER UPDATE OF region, size ON chunks
BEGIN UPDATE busy_state SET nonce = NULL; END;
CREATE TEMP TRIGGER busy_chunk_deleted AFTER UPDATE OF deleted ON chunks
WHEN old.deleted IS NULL AND new.deleted IS NOT NULL AND (SELECT nonce FROM busy_state) IS NOT NULL
BEGIN INSERT INTO busy_log (op, key) VALUES (%[3]d, old.id); END;
CREATE TEMP TRIGGER busy_chunk_revived AFTER UPDATE OF deleted ON chunks
WHEN old.deleted IS NOT NULL AND new.deleted IS NULL
BEGIN UPDATE busy_state SET nonce = NULL; END;
CREATE TEMP TRIGGER busy_chunk_renumbered AFTER UPDATE OF id ON chunks
BEGIN UPDATE busy_state SET nonce = NULL; END;
CREATE TEMP TRIGGER busy_chunk_delete AFTER DELETE ON chunks
BEGIN UPDATE busy_state SET nonce = NULL; END;

CREATE TEMP TRIGGER busy_extent_add AFTER INSERT ON extents
WHEN (SELECT nonce FROM busy_state) IS NOT NULL
	AND EXISTS (SELECT 1 FROM grants WHERE id = new.grant_id AND state IN %[4]s)
BEGIN INSERT INTO busy_log (op, key, idx, dpa, length) VALUES (%[5]d, new.grant_id, new.idx, new.dpa, new.length); END;
CREATE TEMP TRIGGER busy_extent_update AFTER UPDATE ON extents
BEGIN UPDATE busy_state SET nonce = NULL; END;
CREATE TEMP TRIGGER busy_extent_delete AFTER DELETE ON extents
BEGIN UPDATE busy_state SET nonce = NULL; END;

CREATE TEMP TRIGGER busy_grant_ended AFTER UPDATE OF state ON grants
WHEN old.state IN %[4]s AND new.state NOT IN %[4]s AND (SELECT nonce FROM busy_state) IS NOT NULL
BEGIN INSERT INTO busy_log (op, key) VALUES (%[6]d, old.id); END;
CREATE TEMP TRIGGER busy_grant_revived AFTER UPDATE OF state ON grants
WHEN old.state NOT IN %[4]s AND new.state IN %[4]s
BEGIN UPDATE busy_state SET nonce = NULL; END;
CREATE TEMP TRIGGER busy_grant_renumbered AFTER UPDATE OF id ON grants
BEGIN UPDATE busy_state SET nonce = NULL; END;
CREATE TEMP TRIGGER busy_grant_add AFTER INSERT ON grants
WHEN new.state IN %[4]s AND (SELECT nonce FROM busy_state) IS NOT NULL
BEGIN INSERT INTO busy_log (op, key, idx, length)
	VALUES (%[10]d, new.id, new.host, coalesce((SELECT size FROM chunks WHERE id = new.chunk), 0)); END;
CREATE TEMP TRIGGER busy_grant_moved AFTER UPDATE OF host, chunk ON grants
BEGIN UPDATE busy_state SET nonce = NULL; END;
CREATE TEMP TRIGGER busy_grant_insert AFTER INSERT ON grants
WHEN new.state IN %[4]s AND EXISTS (SELECT 1 FROM extents WHERE grant_id = new.id)
BEGIN UPDATE busy_state SET nonce = NULL; END;
CREATE TEMP TRIGGER busy_grant_delete AFTER DELETE ON grants
BEGIN UPDATE busy_state SET nonce = NULL; END;

CREATE TEMP TRIGGER busy_orphan_add AFTER INSERT ON orphan_extents
WHEN (SELECT nonce FROM busy_state) IS NOT NULL
BEGIN INSERT INTO busy_log (op, key, idx, dpa, length) VALUES (%[7]d, new.orphan_id, new.idx, new.dpa, new.length); END;
CREATE TEMP TRIGGER busy_orphan_update AFTER UPDATE ON orphan_extents
BEGIN UPDATE busy_state SET nonce = NULL; END;
CREATE TEMP TRIGGER busy_orphan_delete AFTER DELETE ON orphan_extents
WHEN (SELECT nonce FROM busy_state) IS NOT NULL
BEGIN INSERT INTO busy_log (op, key, idx) VALUES (%[8]d, old.orphan_id, old.idx); END;
`, busyLogMax, busyAddPlacement, busyDropChunk, activeStates, busyAddExtent, busyDropGrant, busyAddOrphan, busyDropOrphan, busyAddChunk, busyAddGrant)

// The cache's statements, prepared on the writer's connection only (the
// TEMP tables exist nowhere else).
const (
	// qBusyLog is the stored nonce and PRAGMA data_version (a header row,
	// seq busyHeaderSeq, with them as key and idx), then the log in order:
	// one statement for what a reservation or admission checks first.
	qBusyLog = `SELECT ` + busyHeader + `, 0, (SELECT nonce FROM busy_state), (SELECT data_version FROM pragma_data_version), 0, 0
		UNION ALL SELECT seq, op, key, idx, dpa, length FROM busy_log ORDER BY 1`
	qBusySetNonce = `UPDATE busy_state SET nonce = ?`
	// qBusyRows is every row busySpans reads, by kind and key: live
	// chunks' placements, active grants' extents and orphaned extents.
	// Each part starts from the partial index of what is live
	// (chunks_live_by_region, grants_one_active): placements and extents
	// are kept as history, and the planner (no statistics) would otherwise
	// scan every one ever recorded.
	qBusyRows = `SELECT ` + busyPlacementKind + `, ce.chunk, ce.idx, ce.dpa, ce.length FROM chunks c INDEXED BY chunks_live_by_region CROSS JOIN chunk_extents ce ON ce.chunk = c.id WHERE c.deleted IS NULL
		UNION ALL SELECT ` + busyExtentKind + `, e.grant_id, e.idx, e.dpa, e.length FROM grants g INDEXED BY grants_one_active CROSS JOIN extents e ON e.grant_id = g.id WHERE g.state IN ` + activeStates + `
		UNION ALL SELECT ` + busyOrphanKind + `, orphan_id, idx, dpa, length FROM orphan_extents
		UNION ALL SELECT ` + busyChunkKind + `, id, region, 0, size FROM chunks INDEXED BY chunks_live_by_region WHERE deleted IS NULL
		UNION ALL SELECT ` + busyGrantKind + `, id, host, 0, coalesce((SELECT size FROM chunks WHERE id = g.chunk), 0) FROM grants g INDEXED BY grants_one_active WHERE g.state IN ` + activeStates
)

// qBusyRows's kinds, as its SQL spells them: the log's add changes.
const (
	busyPlacementKind = "1" // busyAddPlacement
	busyExtentKind    = "3" // busyAddExtent
	busyOrphanKind    = "5" // busyAddOrphan
	busyChunkKind     = "7" // busyAddChunk
	busyGrantKind     = "8" // busyAddGrant
)

// busyStatements are the cache's statements, for prepare.
var busyStatements = []string{qBusyLog, qBusySetNonce, qBusyRows}

// busyHeaderSeq is qBusyLog's header row's seq (busy_log's start at 1).
const (
	busyHeaderSeq = -1
	busyHeader    = "-1"
)

// busyRow is one range row: its index within its key, and its span.
type busyRow struct {
	idx int64
	s   span
}

// liveChunk is what the cache keeps of a live chunk: its region and size.
type liveChunk struct {
	region int
	size   uint64
}

// busyCache is the writer's copy of the rows qBusyRows reads, by kind and
// key, with every range also in one sorted list. Only the writer's
// transactions touch it, one at a time.
type busyCache struct {
	// nonce is what the cache last wrote to busy_state, 0 when the cache
	// is not to be trusted (never filled, or a step failed); gen numbers
	// the nonces, so a restored older one never matches.
	nonce, gen  int64
	dataVersion int64
	placements  map[int64][]busyRow // live chunk → its placement
	extents     map[int64][]busyRow // active grant → its extents
	orphans     map[int64][]busyRow // orphan → its extents
	chunks      map[int64]liveChunk // live chunk → its region and size
	grants      map[int64]heldGrant // active grant → its host and chunk's size
	// sorted is every non-empty range of the three maps above, ordered
	// by DPA then length, repeats kept (a grant's extents lie on its
	// chunk's placement); reserved is the live chunks' sizes by region.
	sorted   []span
	reserved map[int]uint64
	// held is what each host's active grants hold (their chunks' sizes),
	// which a grant's admission checks against the host's quota.
	held map[int64]uint64
}

// heldGrant is what the cache keeps of an active grant.
type heldGrant struct {
	host int64
	size uint64
}

// heldBy is what host's active grants hold, from the cache brought up to
// date; only the writer's transactions have it.
func heldBy(ctx context.Context, tx *Tx, host dcd.HostID) (uint64, error) {
	if tx.wc == nil || tx.busy == nil {
		return 0, fmt.Errorf("held capacity: read outside the writer's transaction")
	}
	if err := tx.busy.refresh(ctx, tx); err != nil {
		return 0, fmt.Errorf("held capacity: %w", err)
	}
	return tx.busy.held[int64(host)], nil
}

// busyView is what a reservation reads of its region: the DPA ranges that
// are not free, sorted and merged; every orphaned extent as stored; and
// the bytes the region's live chunks reserve.
type busyView struct {
	busy, orphans []span
	reserved      uint64
}

// busySpans reads region r's busyView from the cache, brought up to date
// first. Only the writer's transactions have the cache.
func busySpans(ctx context.Context, tx *Tx, r dcd.Region) (busyView, error) {
	if tx.wc == nil || tx.busy == nil {
		return busyView{}, fmt.Errorf("busy capacity: read outside the writer's transaction")
	}
	c := tx.busy
	if err := c.refresh(ctx, tx); err != nil {
		return busyView{}, fmt.Errorf("busy capacity: %w", err)
	}
	v := busyView{reserved: c.reserved[r.Index]}
	end := r.Base + r.Length
	for _, s := range c.sorted {
		if s.dpa >= end {
			break
		}
		if s.end() <= r.Base {
			continue
		}
		if k := len(v.busy); k > 0 && s.dpa <= v.busy[k-1].end() {
			v.busy[k-1].length = max(v.busy[k-1].end(), s.end()) - v.busy[k-1].dpa
			continue
		}
		v.busy = append(v.busy, s)
	}
	for _, rows := range c.orphans {
		for _, row := range rows {
			v.orphans = append(v.orphans, row.s)
		}
	}
	return v, nil
}

// compareSpans orders spans by DPA, then length.
func compareSpans(a, b span) int {
	if c := cmp.Compare(a.dpa, b.dpa); c != 0 {
		return c
	}
	return cmp.Compare(a.length, b.length)
}

// addSpans puts rows' ranges into the sorted list.
func (c *busyCache) addSpans(rows ...busyRow) {
	for _, row := range rows {
		if row.s.length == 0 {
			continue
		}
		i, _ := slices.BinarySearchFunc(c.sorted, row.s, compareSpans)
		c.sorted = slices.Insert(c.sorted, i, row.s)
	}
}

// dropSpans takes rows' ranges out of the sorted list, one copy each.
func (c *busyCache) dropSpans(rows []busyRow) error {
	for _, row := range rows {
		if row.s.length == 0 {
			continue
		}
		i, ok := slices.BinarySearchFunc(c.sorted, row.s, compareSpans)
		if !ok {
			return fmt.Errorf("%w: range %d+%d", errBusyStale, row.s.dpa, row.s.length)
		}
		c.sorted = slices.Delete(c.sorted, i, i+1)
	}
	return nil
}

// refresh brings the cache up to date inside tx: it applies the log when
// the nonce and data_version say the cache saw everything before it, else
// reads every row again; then, unless nothing changed, it writes a new
// nonce (which empties the log).
func (c *busyCache) refresh(ctx context.Context, tx *Tx) error {
	trusted := c.nonce
	// Untrusted until every step below has succeeded.
	c.nonce = 0
	current, logged, dataVersion, err := c.applyLog(ctx, tx, trusted)
	if errors.Is(err, errBusyStale) {
		// A change the log says cannot be applied: the cache and the
		// ledger disagree, and the ledger is right.
		current = false
	} else if err != nil {
		return err
	}
	if current && !logged {
		// Nothing changed: the nonce stored is still the cache's, and
		// stays so if this transaction rolls back.
		c.nonce = trusted
		return nil
	}
	if !current {
		if err := c.reload(ctx, tx); err != nil {
			return err
		}
	}
	// A new nonce, which also empties the log (busy_state_set).
	c.gen++
	if _, err := tx.ExecContext(ctx, qBusySetNonce, c.gen); err != nil {
		return err
	}
	c.nonce, c.dataVersion = c.gen, dataVersion
	return nil
}

// applyLog reads the stored nonce and data_version and, if they say the
// cache (last trusted at nonce trusted) saw everything before the log,
// applies the log's rows in order; it reports whether they matched and
// whether the log had rows.
func (c *busyCache) applyLog(ctx context.Context, tx *Tx, trusted int64) (current, logged bool, dataVersion int64, err error) {
	rows, err := tx.QueryContext(ctx, qBusyLog)
	if err != nil {
		return false, false, 0, err
	}
	defer rows.Close()
	header := true
	for rows.Next() {
		var seq, op, idx, dpa, length int64
		var key sql.NullInt64
		if err := rows.Scan(&seq, &op, &key, &idx, &dpa, &length); err != nil {
			return false, false, 0, err
		}
		if header {
			// qBusyLog's first row: the nonce, and data_version as idx.
			if seq != busyHeaderSeq {
				return false, false, 0, fmt.Errorf("busy log: row %d before the header", seq)
			}
			header, dataVersion = false, idx
			current = trusted != 0 && key.Valid && key.Int64 == trusted && dataVersion == c.dataVersion
			if !current {
				return false, false, dataVersion, rows.Close()
			}
			continue
		}
		logged = true
		if err := c.apply(op, key.Int64, busyRow{idx, span{u64(dpa), u64(length)}}); err != nil {
			return false, true, dataVersion, err
		}
	}
	if err := rows.Err(); err != nil {
		return false, false, 0, err
	}
	if header {
		return false, false, 0, fmt.Errorf("busy log: no header")
	}
	return current, logged, dataVersion, nil
}

// errBusyStale: the log names a range the cache does not hold, so the
// cache is read again (refresh).
var errBusyStale = errors.New("busy log: change to a range not cached")

// put records an added row of the log's and qBusyRows's kinds (ok false
// for any other kind) and reports whether it is a range, which the caller
// puts into the sorted list (one at a time from the log, all at once on a
// reload).
func (c *busyCache) put(op, key int64, row busyRow) (ranged, ok bool) {
	switch op {
	case busyAddPlacement:
		c.placements[key] = append(c.placements[key], row)
	case busyAddExtent:
		c.extents[key] = append(c.extents[key], row)
	case busyAddOrphan:
		c.orphans[key] = append(c.orphans[key], row)
	case busyAddChunk:
		ch := liveChunk{region: int(row.idx), size: row.s.length}
		c.chunks[key] = ch
		c.reserved[ch.region] += ch.size
		return false, true
	case busyAddGrant:
		g := heldGrant{host: row.idx, size: row.s.length}
		c.grants[key] = g
		c.held[g.host] += g.size
		return false, true
	default:
		return false, false
	}
	return row.s.length > 0, true
}

// apply applies one change of the log's kinds.
func (c *busyCache) apply(op, key int64, row busyRow) error {
	if ranged, ok := c.put(op, key, row); ok {
		if ranged {
			c.addSpans(row)
		}
		return nil
	}
	switch op {
	case busyDropChunk:
		if err := c.dropSpans(c.placements[key]); err != nil {
			return err
		}
		delete(c.placements, key)
		if ch, ok := c.chunks[key]; ok {
			c.reserved[ch.region] -= ch.size
			delete(c.chunks, key)
		}
	case busyDropGrant:
		if err := c.dropSpans(c.extents[key]); err != nil {
			return err
		}
		delete(c.extents, key)
		if g, ok := c.grants[key]; ok {
			c.held[g.host] -= g.size
			delete(c.grants, key)
		}
	case busyDropOrphan:
		rows := c.orphans[key]
		at := slices.IndexFunc(rows, func(r busyRow) bool { return r.idx == row.idx })
		if at < 0 {
			return fmt.Errorf("%w: orphaned extent %d/%d", errBusyStale, key, row.idx)
		}
		if err := c.dropSpans(rows[at : at+1]); err != nil {
			return err
		}
		if rows = slices.Delete(rows, at, at+1); len(rows) == 0 {
			delete(c.orphans, key)
		} else {
			c.orphans[key] = rows
		}
	default:
		return fmt.Errorf("busy log: unknown change %d", op)
	}
	return nil
}

// reload reads every row again.
func (c *busyCache) reload(ctx context.Context, tx *Tx) error {
	c.placements = make(map[int64][]busyRow)
	c.extents = make(map[int64][]busyRow)
	c.orphans = make(map[int64][]busyRow)
	c.chunks = make(map[int64]liveChunk)
	c.reserved = make(map[int]uint64)
	c.grants = make(map[int64]heldGrant)
	c.held = make(map[int64]uint64)
	c.sorted = c.sorted[:0]
	rows, err := tx.QueryContext(ctx, qBusyRows)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var kind, key, idx, dpa, length int64
		if err := rows.Scan(&kind, &key, &idx, &dpa, &length); err != nil {
			return err
		}
		row := busyRow{idx, span{u64(dpa), u64(length)}}
		ranged, ok := c.put(kind, key, row)
		if !ok {
			return fmt.Errorf("busy rows: unknown kind %d", kind)
		}
		if ranged {
			c.sorted = append(c.sorted, row.s)
		}
	}
	slices.SortFunc(c.sorted, compareSpans)
	return rows.Err()
}
