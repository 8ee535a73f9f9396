package sqlite

import (
	"strings"

	"cxlpool/dcd"
)

// The statements of the grant path, which runs on every grant and release.
// They are prepared once at open (Tx uses a prepared statement whenever
// its SQL text is one of these); everything else is plain SQL at its call
// site.
const (
	qChunk        = `SELECT ` + chunkColumns + ` FROM chunks WHERE id = ? AND deleted IS NULL`
	qHost         = `SELECT ` + hostColumns + ` FROM hosts WHERE id = ?`
	qHolders      = `SELECT id, host, state FROM grants WHERE chunk = ? AND state IN ` + activeStates + ` ORDER BY id`
	qHostHeld     = `SELECT coalesce(sum(c.size), 0) FROM grants g JOIN chunks c ON c.id = g.chunk WHERE g.host = ? AND g.state IN ` + activeStates
	qInsertGrant  = `INSERT INTO grants (chunk, host, state, created, updated) VALUES (?, ?, ?, ?, ?)`
	qGrant        = `SELECT ` + grantColumns + ` FROM grants WHERE id = ?`
	qExtents      = `SELECT dpa, length, tag, shared_seq FROM extents WHERE grant_id = ? ORDER BY idx`
	qInsertExtent = `INSERT INTO extents (grant_id, idx, dpa, length, tag, shared_seq) VALUES (?, ?, ?, ?, ?, ?)`
	qChunkByTag   = `SELECT ` + chunkColumns + ` FROM chunks WHERE tag = ? AND deleted IS NULL`
	qChunkExtents = `SELECT dpa, length FROM chunk_extents WHERE chunk = ? ORDER BY idx`
	// The default host quota, which every grant of a host without its own
	// quota reads (defaultquota.go).
	qMeta       = `SELECT value FROM meta WHERE key = ?`
	qPoolLength = `SELECT coalesce(sum(length), 0) FROM regions`
	qHeads      = `SELECT count(*) FROM hosts`
	qHeartbeat  = `INSERT INTO meta (key, value) VALUES ('heartbeat', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`
	// Every active grant and their extents (Grants with only Active set:
	// the telemetry's layout after each change, reconcile). The partial
	// index holds only those, where the planner (no statistics) would
	// scan every grant ever made.
	qActiveGrants  = `SELECT ` + grantColumns + ` FROM grants INDEXED BY grants_one_active WHERE state IN ` + activeStates + ` ORDER BY id`
	qActiveExtents = `SELECT grant_id, dpa, length, tag, shared_seq FROM extents
		WHERE grant_id IN (SELECT id FROM grants INDEXED BY grants_one_active WHERE state IN ` + activeStates + `) ORDER BY grant_id, idx`
	// Reserve (CreateChunk) and its placement, which run once per chunk.
	qRegions         = `SELECT ` + regionColumns + ` FROM regions ORDER BY idx`
	qRegion          = `SELECT ` + regionColumns + ` FROM regions WHERE idx = ?`
	qInsertChunk     = `INSERT INTO chunks (name, region, size, tag, sharable, created) VALUES (?, ?, ?, ?, ?, ?)`
	qInsertPlacement = `INSERT INTO chunk_extents (chunk, idx, dpa, length) VALUES (?, ?, ?, ?)`
	// qDeleteChunk deletes a live chunk with no active grant; when it
	// matches nothing, DeleteChunk finds out which rule refused.
	qDeleteChunk = `UPDATE chunks SET deleted = ? WHERE id = ? AND deleted IS NULL
		AND NOT EXISTS (SELECT 1 FROM grants WHERE chunk = chunks.id AND state IN ` + activeStates + `)`
	// qAdmit is everything a grant intent checks, in one row (admitIntent),
	// but what the host holds (the writer's cache has it, heldBy: a sum
	// over the host's grants cost 50 µs at 60 of them): the live chunk,
	// whether the host exists and its own quota, the default quota's
	// inputs (defaultquota.go), the chunk's active grants, how many of
	// them are this host's, and the chunk's placement as "dpa length …" in
	// order (qChunkExtents; one statement fewer than reading its rows).
	// No row: the chunk does not exist. It reads the host through scalar
	// subqueries and no join: with a join of tables one of which a bound
	// parameter selects (chunks × hosts, or grants × chunks for the
	// holding), SQLite re-planned the whole statement at most executions
	// (sqlite3_stmt_status REPREPARE), a third of its cost.
	qAdmit = `SELECT c.id, c.name, c.region, c.size, c.tag, c.sharable, c.created,
		(SELECT count(*) FROM hosts WHERE id = ?2),
		coalesce((SELECT quota FROM hosts WHERE id = ?2), 0),
		(SELECT value FROM meta WHERE key = '` + metaDefaultQuota + `'),
		(SELECT coalesce(sum(length), 0) FROM regions),
		(SELECT count(*) FROM hosts),
		(SELECT count(*) FROM grants WHERE chunk = c.id AND state IN ` + activeStates + `),
		(SELECT count(*) FROM grants WHERE chunk = c.id AND host = ?2 AND state IN ` + activeStates + `),
		(SELECT group_concat(idx || ' ' || dpa || ' ' || length, ' ') FROM chunk_extents WHERE chunk = c.id)
		FROM chunks c WHERE c.id = ?1 AND c.deleted IS NULL`
)

// qMove moves a grant from one of the source states from and reads it
// back. The states are written into the SQL, not bound: a bound value
// compared with the state column, which the partial index grants_one_active
// is defined on, makes SQLite plan the statement again at every execution
// (the plan may depend on the value), which costs more than the update.
func qMove(from []dcd.GrantState) string {
	states := make([]string, len(from))
	for i, st := range from {
		states[i] = "'" + strings.ReplaceAll(string(st), "'", "''") + "'"
	}
	return `UPDATE grants SET state = ?, reason = CASE WHEN ? THEN ? ELSE reason END, updated = ? ` +
		`WHERE id = ? AND state IN (` + strings.Join(states, ", ") + `) RETURNING chunk, host, reason, created`
}

// The source states of the ledger's grant moves (grants.go).
var (
	fromAdding    = []dcd.GrantState{dcd.GrantAdding}
	fromGranted   = []dcd.GrantState{dcd.GrantGranted}
	fromReleasing = []dcd.GrantState{dcd.GrantReleasing}
	fromActive    = []dcd.GrantState{dcd.GrantAdding, dcd.GrantGranted, dcd.GrantReleasing}
)

// hotStatements lists what prepare readies: the constants above and the
// grant moves the ledger makes (from one state, or from any active one).
func hotStatements() []string {
	return []string{qChunk, qChunkByTag, qChunkExtents, qHost, qHolders, qHostHeld, qInsertGrant, qGrant, qExtents,
		qInsertExtent, qMeta, qPoolLength, qHeads, qHeartbeat, qAdmit,
		qMove(fromAdding), qMove(fromGranted), qMove(fromReleasing), qMove(fromActive),
		qRegions, qRegion, qInsertChunk, qInsertPlacement, qDeleteChunk,
		qActiveGrants, qActiveExtents}
}
