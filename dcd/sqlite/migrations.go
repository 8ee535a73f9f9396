package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"
)

// migrations are the schema versions in order: migrations[i] takes the
// database from version i to version i+1. Never edit a released entry;
// append a new one (one line here plus its SQL).
var migrations = []string{
	migration1,
	migration2,
}

// migration2 gives chunks a placement: the DPA ranges the ledger chose for
// them, added prescriptively (see dcd.Chunk). A chunk that some host holds
// keeps where the device put it (the extents of its oldest holding grant);
// a chunk nobody holds gets its placement at its next grant.
const migration2 = `
CREATE TABLE chunk_extents (
	chunk  INTEGER NOT NULL REFERENCES chunks (id),
	idx    INTEGER NOT NULL,
	dpa    INTEGER NOT NULL,
	length INTEGER NOT NULL CHECK (length <> 0),
	PRIMARY KEY (chunk, idx)
) STRICT;
INSERT INTO chunk_extents (chunk, idx, dpa, length)
	SELECT g.chunk, e.idx, e.dpa, e.length FROM extents e JOIN grants g ON g.id = e.grant_id
	WHERE g.id IN (
		SELECT min(h.id) FROM grants h JOIN chunks c ON c.id = h.chunk
		WHERE c.deleted IS NULL AND h.state IN ('granted', 'releasing')
			AND EXISTS (SELECT 1 FROM extents x WHERE x.grant_id = h.id)
		GROUP BY h.chunk);
`

// migration1 is the first schema. Unsigned 64-bit quantities are stored
// bit-for-bit in INTEGER columns (see i64), times as Unix nanoseconds.
const migration1 = `
CREATE TABLE meta (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
) STRICT;
INSERT INTO meta (key, value) VALUES ('heartbeat', '');

CREATE TABLE hosts (
	id      INTEGER PRIMARY KEY CHECK (id BETWEEN 0 AND 65535), -- LD-ID
	port    INTEGER NOT NULL CHECK (port BETWEEN 0 AND 255),
	name    TEXT NOT NULL,
	quota   INTEGER NOT NULL DEFAULT 0, -- bytes, 0 = no limit
	link_up INTEGER NOT NULL CHECK (link_up IN (0, 1))
) STRICT;

CREATE TABLE regions (
	idx                 INTEGER PRIMARY KEY CHECK (idx >= 0),
	base                INTEGER NOT NULL,
	length              INTEGER NOT NULL,
	block_size          INTEGER NOT NULL CHECK (block_size <> 0),
	sharable            INTEGER NOT NULL CHECK (sharable IN (0, 1)),
	sanitize_on_release INTEGER NOT NULL CHECK (sanitize_on_release IN (0, 1))
) STRICT;

-- Chunks are soft-deleted: grants keep pointing at them for history, and
-- the UNIQUE tag keeps a tag from ever naming a second allocation.
CREATE TABLE chunks (
	id       INTEGER PRIMARY KEY AUTOINCREMENT,
	name     TEXT NOT NULL,
	region   INTEGER NOT NULL REFERENCES regions (idx),
	size     INTEGER NOT NULL CHECK (size > 0),
	tag      BLOB NOT NULL UNIQUE CHECK (length(tag) = 16),
	sharable INTEGER NOT NULL CHECK (sharable IN (0, 1)),
	created  INTEGER NOT NULL,
	deleted  INTEGER -- NULL while live
) STRICT;
CREATE INDEX chunks_live_by_region ON chunks (region) WHERE deleted IS NULL;

CREATE TABLE grants (
	id      INTEGER PRIMARY KEY AUTOINCREMENT,
	chunk   INTEGER NOT NULL REFERENCES chunks (id),
	host    INTEGER NOT NULL REFERENCES hosts (id),
	state   TEXT NOT NULL CHECK (state IN ('adding', 'granted', 'releasing', 'released', 'failed', 'lost')),
	reason  TEXT NOT NULL DEFAULT '',
	created INTEGER NOT NULL,
	updated INTEGER NOT NULL
) STRICT;
CREATE INDEX grants_by_chunk ON grants (chunk, state);
CREATE INDEX grants_by_host ON grants (host, state);
-- A host holds at most one active grant of a chunk (also checked in Go, with
-- a better error; this is the backstop).
CREATE UNIQUE INDEX grants_one_active ON grants (chunk, host)
	WHERE state IN ('adding', 'granted', 'releasing');

-- extents are exactly the cci.Extent values a host accepted, in order.
CREATE TABLE extents (
	grant_id   INTEGER NOT NULL REFERENCES grants (id) ON DELETE CASCADE,
	idx        INTEGER NOT NULL,
	dpa        INTEGER NOT NULL,
	length     INTEGER NOT NULL,
	tag        BLOB NOT NULL CHECK (length(tag) = 16),
	shared_seq INTEGER NOT NULL CHECK (shared_seq BETWEEN 0 AND 65535),
	PRIMARY KEY (grant_id, idx)
) STRICT;

CREATE TABLE orphans (
	id    INTEGER PRIMARY KEY AUTOINCREMENT,
	host  INTEGER NOT NULL REFERENCES hosts (id),
	tag   BLOB NOT NULL CHECK (length(tag) = 16),
	found INTEGER NOT NULL,
	UNIQUE (host, tag)
) STRICT;

CREATE TABLE orphan_extents (
	orphan_id  INTEGER NOT NULL REFERENCES orphans (id) ON DELETE CASCADE,
	idx        INTEGER NOT NULL,
	dpa        INTEGER NOT NULL,
	length     INTEGER NOT NULL,
	tag        BLOB NOT NULL CHECK (length(tag) = 16),
	shared_seq INTEGER NOT NULL CHECK (shared_seq BETWEEN 0 AND 65535),
	PRIMARY KEY (orphan_id, idx)
) STRICT;
`

// migrate brings db to len(steps), applying each missing step and recording
// it in schema_migrations in one transaction, so a crash leaves the schema at
// a whole version. It refuses a database newer than steps.
func migrate(ctx context.Context, db *sql.DB, steps []string, log *slog.Logger, clock func() time.Time) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		applied_at INTEGER NOT NULL
	) STRICT`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for i, step := range steps {
		version := i + 1
		applied, err := migrateStep(ctx, db, version, len(steps), step, clock)
		if err != nil {
			return fmt.Errorf("migrate: version %d: %w", version, err)
		}
		if applied {
			log.Info("ledger: applied schema migration", "version", version)
		}
	}
	return nil
}

// migrateStep applies one version unless the database already has it. The
// version is re-read inside the write transaction so two processes opening
// the same new file cannot both apply it.
func migrateStep(ctx context.Context, db *sql.DB, version, latest int, step string, clock func() time.Time) (bool, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback() // a no-op after Commit; the error of a failed step wins
	var current int
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return false, err
	}
	if current > latest {
		return false, fmt.Errorf("database schema version %d is newer than this program's %d", current, latest)
	}
	if current >= version {
		return false, nil
	}
	if current != version-1 {
		return false, fmt.Errorf("database schema version %d, want %d", current, version-1)
	}
	if _, err := tx.ExecContext(ctx, step); err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`,
		version, unixNano(clock())); err != nil {
		return false, err
	}
	return true, tx.Commit()
}
