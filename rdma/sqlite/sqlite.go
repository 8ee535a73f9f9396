// Package sqlite keeps the exports of package rdma in a SQLite database
// (the pure-Go modernc.org/sqlite driver), so that they survive a restart
// of the daemon. It implements rdma.Store.
//
// Records hold the SHA-256 of each export's token, never the token: a
// copy of the file opens nothing. Writes are rare (an export created or
// revoked), so every commit is fully synchronous (WAL, synchronous=FULL):
// an export whose Create returned, or whose Revoke returned, stays so
// after a power loss.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"cxlpool/dcd"
	"cxlpool/rdma"
)

// File is the store's file name in the daemon's data directory.
const File = "exports.db"

// Options configures a Store.
type Options struct {
	// Logger receives migration notices; nil discards them.
	Logger *slog.Logger
	// Clock stamps schema migrations; nil means time.Now.
	Clock func() time.Time
}

// Store is an rdma.Store in one SQLite file. It is safe for concurrent
// use.
type Store struct {
	db *sql.DB
}

var _ rdma.Store = (*Store)(nil)

// migrations are the schema versions in order: migrations[i] takes the
// database from version i to version i+1. Never edit a released entry;
// append a new one. Times are Unix nanoseconds (expiry 0: never); grants
// is the comma-separated list of rdma.Record.Grants.
var migrations = []string{`
CREATE TABLE exports (
	id         TEXT PRIMARY KEY,
	chunk      INTEGER NOT NULL,
	client     TEXT NOT NULL,
	perms      INTEGER NOT NULL,
	byte_off   INTEGER NOT NULL,
	byte_len   INTEGER NOT NULL,
	expiry     INTEGER NOT NULL,
	created    INTEGER NOT NULL,
	token_hash BLOB NOT NULL CHECK (length(token_hash) = 32),
	grants     TEXT NOT NULL
) STRICT;
`}

// Open opens (creating if needed) the store at path and brings its schema
// up to date.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if path == "" || strings.ContainsRune(path, '?') {
		return nil, fmt.Errorf("exports store: path %q: must be non-empty and without '?': %w", path, dcd.ErrInvalid)
	}
	q := url.Values{}
	q.Set("_busy_timeout", "5000")
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "FULL")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("exports store: open %s: %w", path, err)
	}
	// One connection: the pragmas above hold for every statement.
	db.SetMaxOpenConns(1)
	if err := migrate(ctx, db, opts.Logger, opts.Clock); err != nil {
		return nil, errors.Join(fmt.Errorf("exports store: open %s: %w", path, err), db.Close())
	}
	return &Store{db: db}, nil
}

// migrate applies the missing schema versions, each with its row in
// schema_migrations in one transaction. It refuses a newer database.
func migrate(ctx context.Context, db *sql.DB, log *slog.Logger, clock func() time.Time) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		applied_at INTEGER NOT NULL
	) STRICT`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for i, step := range migrations {
		if err := migrateStep(ctx, db, i+1, step, clock); err != nil {
			return fmt.Errorf("migrate: version %d: %w", i+1, err)
		}
	}
	log.Debug("exports store: schema up to date", "version", len(migrations))
	return nil
}

func migrateStep(ctx context.Context, db *sql.DB, version int, step string, clock func() time.Time) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // a no-op after Commit
	var current int
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return err
	}
	switch {
	case current > len(migrations):
		return fmt.Errorf("database schema version %d is newer than this program's %d", current, len(migrations))
	case current >= version:
		return nil
	case current != version-1:
		return fmt.Errorf("database schema version %d, want %d", current, version-1)
	}
	if _, err := tx.ExecContext(ctx, step); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`,
		version, clock().UnixNano()); err != nil {
		return err
	}
	return tx.Commit()
}

// Close closes the database.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("exports store: close: %w", err)
	}
	return nil
}

// Save implements rdma.Store; saving an existing ID replaces its record.
func (s *Store) Save(ctx context.Context, r rdma.Record) error {
	var expiry int64
	if !r.Expiry.IsZero() {
		expiry = r.Expiry.UnixNano()
	}
	grants := make([]string, len(r.Grants))
	for i, g := range r.Grants {
		grants[i] = strconv.FormatInt(int64(g), 10)
	}
	_, err := s.db.ExecContext(ctx, `INSERT OR REPLACE INTO exports
		(id, chunk, client, perms, byte_off, byte_len, expiry, created, token_hash, grants)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		string(r.ID), int64(r.Chunk), r.Client, int64(r.Perms), int64(r.Offset), int64(r.Length),
		expiry, r.Created.UnixNano(), r.TokenHash[:], strings.Join(grants, ","))
	if err != nil {
		return fmt.Errorf("exports store: save %s: %w", r.ID, err)
	}
	return nil
}

// Delete implements rdma.Store.
func (s *Store) Delete(ctx context.Context, id rdma.ExportID) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM exports WHERE id = ?`, string(id)); err != nil {
		return fmt.Errorf("exports store: delete %s: %w", id, err)
	}
	return nil
}

// Load implements rdma.Store: every record, oldest first.
func (s *Store) Load(ctx context.Context) ([]rdma.Record, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, chunk, client, perms, byte_off, byte_len, expiry, created, token_hash, grants
		FROM exports ORDER BY created, id`)
	if err != nil {
		return nil, fmt.Errorf("exports store: load: %w", err)
	}
	defer rows.Close()
	var out []rdma.Record
	for rows.Next() {
		var (
			r                                        rdma.Record
			id, grants                               string
			chunk, perms, offset, length, exp, creat int64
			hash                                     []byte
		)
		if err := rows.Scan(&id, &chunk, &r.Client, &perms, &offset, &length, &exp, &creat, &hash, &grants); err != nil {
			return nil, fmt.Errorf("exports store: load: %w", err)
		}
		r.ID, r.Chunk, r.Perms = rdma.ExportID(id), dcd.ChunkID(chunk), rdma.Perm(perms)
		r.Offset, r.Length = uint64(offset), uint64(length)
		if exp != 0 {
			r.Expiry = time.Unix(0, exp).UTC()
		}
		r.Created = time.Unix(0, creat).UTC()
		copy(r.TokenHash[:], hash)
		for g := range strings.SplitSeq(grants, ",") {
			if g == "" {
				continue
			}
			n, err := strconv.ParseInt(g, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("exports store: load %s: grant %q: %w", id, g, err)
			}
			r.Grants = append(r.Grants, dcd.GrantID(n))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("exports store: load: %w", err)
	}
	return out, nil
}
