package sqlite

// The statements of the grant path, which runs on every grant and release.
// They are prepared once at open (Tx uses a prepared statement whenever
// its SQL text is one of these); everything else is plain SQL at its call
// site.
const (
	qChunk         = `SELECT ` + chunkColumns + ` FROM chunks WHERE id = ? AND deleted IS NULL`
	qHost          = `SELECT ` + hostColumns + ` FROM hosts WHERE id = ?`
	qHolders       = `SELECT id, host, state FROM grants WHERE chunk = ? AND state IN ` + activeStates + ` ORDER BY id`
	qHostHeld      = `SELECT coalesce(sum(c.size), 0) FROM grants g JOIN chunks c ON c.id = g.chunk WHERE g.host = ? AND g.state IN ` + activeStates
	qInsertGrant   = `INSERT INTO grants (chunk, host, state, created, updated) VALUES (?, ?, ?, ?, ?)`
	qGrant         = `SELECT ` + grantColumns + ` FROM grants WHERE id = ?`
	qExtents       = `SELECT dpa, length, tag, shared_seq FROM extents WHERE grant_id = ? ORDER BY idx`
	qDeleteExtents = `DELETE FROM extents WHERE grant_id = ?`
	qInsertExtent  = `INSERT INTO extents (grant_id, idx, dpa, length, tag, shared_seq) VALUES (?, ?, ?, ?, ?, ?)`
	qChunkByTag    = `SELECT ` + chunkColumns + ` FROM chunks WHERE tag = ? AND deleted IS NULL`
	qChunkExtents  = `SELECT dpa, length FROM chunk_extents WHERE chunk = ? ORDER BY idx`
	// The default host quota, which every grant of a host without its own
	// quota reads (defaultquota.go).
	qMeta       = `SELECT value FROM meta WHERE key = ?`
	qPoolLength = `SELECT coalesce(sum(length), 0) FROM regions`
	qHeads      = `SELECT count(*) FROM hosts`
	qHeartbeat  = `INSERT INTO meta (key, value) VALUES ('heartbeat', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`
)

// qMove moves a grant from one of n source states and reads it back.
func qMove(n int) string {
	return `UPDATE grants SET state = ?, reason = CASE WHEN ? THEN ? ELSE reason END, updated = ? ` +
		`WHERE id = ? AND state IN (` + placeholders(n) + `) RETURNING chunk, host, reason, created`
}

// hotStatements lists what prepare readies: the constants above and the
// grant moves the ledger makes (from one state, or from any active one).
func hotStatements() []string {
	return []string{qChunk, qChunkByTag, qChunkExtents, qHost, qHolders, qHostHeld, qInsertGrant, qGrant, qExtents,
		qDeleteExtents, qInsertExtent, qMeta, qPoolLength, qHeads, qHeartbeat, qMove(1), qMove(3)}
}
