// Package sqlite implements dcd.Ledger on a SQLite database (the pure-Go
// modernc.org/sqlite driver, so the firmware builds with CGO_ENABLED=0).
//
// The ledger is the write-ahead record of every capacity decision, so a
// committed transaction must survive a power loss: the database runs in WAL
// mode with synchronous=FULL by default. All access goes through one
// connection, which serializes transactions inside the process (SQLite
// allows one writer anyway) and keeps per-connection pragmas consistent.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"cxlpool/dcd"
)

// Options configures a Ledger.
type Options struct {
	// Logger receives migration and retry notices; nil discards them.
	Logger *slog.Logger
	// Clock stamps rows; nil means time.Now.
	Clock func() time.Time
	// Synchronous is the durability of a commit: "FULL" (the default, a
	// committed intent survives power loss: the WAL is fsynced after each
	// commit, exactly as SQLite's synchronous=FULL does) or "NORMAL" (WAL
	// commits are not fsynced; a power loss may undo the last ones).
	Synchronous string
}

// Ledger is a dcd.Ledger stored in one SQLite file. It is safe for
// concurrent use.
type Ledger struct {
	db    *sql.DB
	log   *slog.Logger
	clock func() time.Time
	// durable: fsync the WAL after every commit except relaxed ones.
	durable bool
	walPath string
	stmts   map[string]*sql.Stmt // prepared hot statements, by SQL text
}

// Tx is a ledger transaction. Its query methods use the ledger's prepared
// statement when the SQL text is one of the hot ones (the pure-Go driver
// parses SQL text on every call, a large share of a small transaction) and
// plain queries otherwise, so callers write SQL as usual.
type Tx struct {
	*sql.Tx
	stmts map[string]*sql.Stmt
}

// ExecContext runs a statement.
func (t *Tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st, ok := t.stmts[query]; ok {
		return t.Tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return t.Tx.ExecContext(ctx, query, args...)
}

// QueryContext runs a query.
func (t *Tx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st, ok := t.stmts[query]; ok {
		return t.Tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return t.Tx.QueryContext(ctx, query, args...)
}

// QueryRowContext runs a query that returns one row.
func (t *Tx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st, ok := t.stmts[query]; ok {
		return t.Tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return t.Tx.QueryRowContext(ctx, query, args...)
}

// prepare readies the statements of the grant path, which runs on every
// grant and release, at open, while no transaction holds the connection.
func (l *Ledger) prepare(ctx context.Context) error {
	l.stmts = make(map[string]*sql.Stmt)
	for _, q := range hotStatements() {
		st, err := l.db.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("prepare %q: %w", q, err)
		}
		l.stmts[q] = st
	}
	return nil
}

var _ dcd.Ledger = (*Ledger)(nil)
var _ dcd.ReasonedReleaser = (*Ledger)(nil)

// busyTimeout is how long SQLite itself waits for a lock held by another
// process (an admin tool, a backup) before reporting SQLITE_BUSY.
const busyTimeout = 5 * time.Second

// busyRetries is how many times tx re-runs a transaction that still failed
// with SQLITE_BUSY after busyTimeout; the retry backoff grows linearly.
const (
	busyRetries = 3
	busyBackoff = 50 * time.Millisecond
)

// Open opens (creating if needed) the ledger at path and brings its schema
// up to date.
func Open(ctx context.Context, path string, opts Options) (*Ledger, error) {
	l := &Ledger{log: opts.Logger, clock: opts.Clock}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if l.clock == nil {
		l.clock = time.Now
	}
	dsn, level, err := dataSourceName(path, opts.Synchronous)
	l.durable, l.walPath = level == "FULL", path+"-wal"
	if err != nil {
		return nil, fmt.Errorf("ledger: open %s: %w", path, err)
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("ledger: open %s: %w", path, err)
	}
	// One connection: transactions queue in database/sql instead of
	// fighting over SQLite's write lock, and no connection can miss the
	// pragmas (they are re-applied from the DSN on every new connection).
	db.SetMaxOpenConns(1)
	l.db = db
	if err := migrate(ctx, db, migrations, l.log, l.clock); err != nil {
		return nil, errors.Join(fmt.Errorf("ledger: open %s: %w", path, err), db.Close())
	}
	if err := l.prepare(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("ledger: open %s: %w", path, err), db.Close())
	}
	return l, nil
}

// dataSourceName builds the modernc DSN: the path, then the per-connection
// pragmas. _txlock=immediate makes write transactions take the write lock at
// BEGIN, so two processes cannot deadlock upgrading read locks.
func dataSourceName(path, synchronous string) (dsn, level string, err error) {
	if path == "" || strings.ContainsRune(path, '?') {
		return "", "", fmt.Errorf("path %q: must be non-empty and without '?': %w", path, dcd.ErrInvalid)
	}
	switch s := strings.ToUpper(synchronous); s {
	case "":
		synchronous = "FULL"
	case "FULL", "NORMAL":
		synchronous = s
	default:
		return "", "", fmt.Errorf("synchronous %q: want FULL or NORMAL: %w", synchronous, dcd.ErrInvalid)
	}
	q := url.Values{}
	q.Set("_busy_timeout", fmt.Sprint(busyTimeout.Milliseconds()))
	q.Set("_journal_mode", "WAL")
	// The connection itself never waits for the disk: durable commits
	// fsync the WAL themselves (syncWAL), so that outcomes reconcile can
	// rebuild commit without an fsync and without switching pragmas.
	q.Set("_synchronous", "NORMAL")
	q.Set("_foreign_keys", "on")
	q.Set("_txlock", "immediate")
	return path + "?" + q.Encode(), synchronous, nil
}

// Close closes the database.
func (l *Ledger) Close() error {
	for _, st := range l.stmts {
		st.Close()
	}
	if err := l.db.Close(); err != nil {
		return fmt.Errorf("ledger: close: %w", err)
	}
	return nil
}

// Ping performs one tiny durable write transaction (the heartbeat row). The
// daemon uses it as a liveness write; benchmarks use it as the cost of a bare
// commit at the configured durability.
func (l *Ledger) Ping(ctx context.Context) error {
	now := l.now().Format(time.RFC3339Nano)
	err := l.tx(ctx, func(tx *Tx) error {
		_, err := tx.ExecContext(ctx, qHeartbeat, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("ledger: ping: %w", err)
	}
	return nil
}

// tx runs fn in one write transaction, committing if fn returns nil. A
// transaction that fails with SQLITE_BUSY (another process held the lock for
// longer than the busy timeout) is retried a few times from the start, so fn
// must not have effects outside tx.
func (l *Ledger) tx(ctx context.Context, fn func(*Tx) error) error {
	if err := l.run(ctx, nil, fn); err != nil {
		return err
	}
	return l.syncWAL()
}

// syncWAL makes every commit so far durable: in WAL mode a commit is frames
// appended to the -wal file, so one fsync of it is what synchronous=FULL
// does at each commit. The file is opened by name each time, because
// SQLite may recreate it; a missing file means everything is already
// checkpointed into the database, which SQLite syncs when it checkpoints.
func (l *Ledger) syncWAL() error {
	if !l.durable {
		return nil
	}
	f, err := os.OpenFile(l.walPath, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sync the write-ahead log: %w", err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync the write-ahead log: %w", err)
	}
	return nil
}

// read runs fn in one read transaction, so multi-query reads see one
// snapshot.
func (l *Ledger) read(ctx context.Context, fn func(*Tx) error) error {
	return l.run(ctx, &sql.TxOptions{ReadOnly: true}, fn)
}

// relaxedTx runs fn in one write transaction whose commit does not wait
// for the disk. It is for outcomes that reconcile rebuilds from the device
// after a power loss (a host accepted, refused or released capacity),
// never for intents: WAL frames are appended in order, so the next durable
// commit or checkpoint persists the relaxed ones too, and a power cut can
// only roll the ledger back to the intent, which reconcile completes the
// same way. This halves the fsyncs of a grant.
func (l *Ledger) relaxedTx(ctx context.Context, fn func(*Tx) error) error {
	return l.run(ctx, nil, fn)
}

func (l *Ledger) run(ctx context.Context, opts *sql.TxOptions, fn func(*Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := l.runOnce(ctx, opts, fn)
		if err == nil || !isBusy(err) || attempt > busyRetries {
			return err
		}
		l.log.Warn("ledger: database busy, retrying transaction", "attempt", attempt, "err", err)
		t := time.NewTimer(time.Duration(attempt) * busyBackoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}

func (l *Ledger) runOnce(ctx context.Context, opts *sql.TxOptions, fn func(*Tx) error) error {
	stx, err := l.db.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	tx := &Tx{Tx: stx, stmts: l.stmts}
	if err := fn(tx); err != nil {
		if rbErr := tx.Rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
			// ErrTxDone: the driver already ended it (cancelled context).
			return errors.Join(err, rbErr)
		}
		return err
	}
	return tx.Commit()
}

// isBusy reports whether err is SQLite's "try again later".
func isBusy(err error) bool {
	var e *msqlite.Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code() & 0xff { // primary code of an extended result code
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return true
	}
	return false
}

// Integers: SQLite stores signed 64-bit integers and database/sql refuses
// uint64 values with the high bit set, so unsigned quantities (addresses,
// lengths, quotas) are stored bit-for-bit as int64 and compared in Go.
func i64(u uint64) int64 { return int64(u) }
func u64(i int64) uint64 { return uint64(i) }

// Times are stored as Unix nanoseconds and returned in UTC.
func unixNano(t time.Time) int64 { return t.UnixNano() }
func fromNano(n int64) time.Time { return time.Unix(0, n).UTC() }

// now is the clock's time as it will read back from the database.
func (l *Ledger) now() time.Time { return fromNano(unixNano(l.clock())) }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
