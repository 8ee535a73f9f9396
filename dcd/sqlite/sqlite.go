// Package sqlite implements dcd.Ledger on a SQLite database (the pure-Go
// modernc.org/sqlite driver, so the firmware builds with CGO_ENABLED=0).
//
// The ledger is the write-ahead record of every capacity decision, so a
// committed transaction must survive a power loss: the database runs in WAL
// mode with synchronous=FULL by default. Every write goes through one
// connection, which serializes write transactions inside the process
// (SQLite allows one writer anyway); reads take a small pool of their own,
// because in WAL mode readers never wait for the writer, so a listing of
// grants never holds up a grant. Write transactions that queue for the
// writer together share one SQLite transaction, each in a savepoint
// (batch.go). Concurrent durable commits share their fsync (group
// commit): each still returns only once an fsync that began after its own
// commit has finished.
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
	"sync"
	"sync/atomic"
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
	db    *sql.DB   // the writer's pool of one connection
	wc    *sql.Conn // that connection, held from Open to Close
	rdb   *sql.DB   // read-only connections (query_only)
	log   *slog.Logger
	clock func() time.Time
	// durable: fsync the WAL after every commit except relaxed ones.
	durable bool
	walPath string
	stmts   map[string]*sql.Stmt // prepared hot statements, by SQL text, on wc
	rstmts  map[string]*sql.Stmt // the same, on the read connections

	// commits counts write transactions committed so far; a commit takes
	// its number after COMMIT returned, so every commit numbered up to a
	// value read before an fsync starts is covered by that fsync.
	commits atomic.Uint64
	group   groupSync
	// queued counts durable writes that have asked for the writer
	// (entered) and whose transaction has ended (ended), committed or not:
	// an fsync about to start waits for those already queued
	// (awaitQueued), so one fsync covers them all.
	queued struct {
		entered, ended atomic.Uint64
		signal         chan struct{} // a durable write ended; buffered 1
		wait           time.Duration // the longest an fsync waits for them
	}
	// syncFn makes the WAL durable: syncWAL, or a test's stand-in.
	syncFn func() error
	// w queues write transactions for the connection and batches them
	// (batch.go).
	w writer
	// fence keeps reads behind outcomes already told (readFence).
	fence readFence
	// busy is the writer's cache of the DPA ranges that are not free
	// (busy.go).
	busy busyCache
}

// groupSync lets concurrent durable commits share one fsync: one caller
// at a time syncs (the leader), the others wait for it and return if it
// covered their commit, else one of them leads the next.
type groupSync struct {
	mu      sync.Mutex
	done    *sync.Cond // broadcast when a sync ends
	running bool       // a leader is syncing
	synced  uint64     // every commit numbered up to this is durable
}

// Tx is a ledger transaction. Its query methods use the ledger's prepared
// statement when the SQL text is one of the hot ones (the pure-Go driver
// parses SQL text on every call, a large share of a small transaction) and
// plain queries otherwise, so callers write SQL as usual.
type Tx struct {
	tx    *sql.Tx   // a read transaction; nil in a write transaction
	wc    *sql.Conn // a write transaction's connection, between BEGIN and COMMIT
	stmts map[string]*sql.Stmt
	// ctx, when set, replaces the callers' contexts: on the writer's
	// connection statements are not cancelled (runWrite), and a batch's
	// (batch.go) must not be interrupted by any one caller giving up.
	ctx context.Context
	// busy is the writer's busy-span cache, set with wc (busy.go).
	busy *busyCache
}

// ExecContext runs a statement.
func (t *Tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if t.ctx != nil {
		ctx = t.ctx
	}
	st, ok := t.stmts[query]
	switch {
	case t.wc != nil && ok:
		return st.ExecContext(ctx, args...)
	case t.wc != nil:
		return t.wc.ExecContext(ctx, query, args...)
	case ok:
		return t.tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return t.tx.ExecContext(ctx, query, args...)
}

// QueryContext runs a query.
func (t *Tx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if t.ctx != nil {
		ctx = t.ctx
	}
	st, ok := t.stmts[query]
	switch {
	case t.wc != nil && ok:
		return st.QueryContext(ctx, args...)
	case t.wc != nil:
		return t.wc.QueryContext(ctx, query, args...)
	case ok:
		return t.tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return t.tx.QueryContext(ctx, query, args...)
}

// QueryRowContext runs a query that returns one row.
func (t *Tx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if t.ctx != nil {
		ctx = t.ctx
	}
	st, ok := t.stmts[query]
	switch {
	case t.wc != nil && ok:
		return st.QueryRowContext(ctx, args...)
	case t.wc != nil:
		return t.wc.QueryRowContext(ctx, query, args...)
	case ok:
		return t.tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return t.tx.QueryRowContext(ctx, query, args...)
}

// prepare readies the statements of the grant path, which runs on every
// grant and release, at open, while no transaction holds the connection.
func (l *Ledger) prepare(ctx context.Context) error {
	var err error
	if l.stmts, err = prepareOn(ctx, l.wc, append(writerStatements, busyStatements...)...); err != nil {
		return err
	}
	l.rstmts, err = prepareOn(ctx, l.rdb)
	return err
}

// prepareOn prepares the hot statements and extra on db (a statement
// belongs to the *sql.DB or *sql.Conn it was prepared on).
func prepareOn(ctx context.Context, db interface {
	PrepareContext(context.Context, string) (*sql.Stmt, error)
}, extra ...string) (map[string]*sql.Stmt, error) {
	stmts := make(map[string]*sql.Stmt)
	for _, q := range append(hotStatements(), extra...) {
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			for _, st := range stmts {
				st.Close()
			}
			return nil, fmt.Errorf("prepare %q: %w", q, err)
		}
		stmts[q] = st
	}
	return stmts, nil
}

var _ dcd.Ledger = (*Ledger)(nil)
var _ dcd.ReasonedReleaser = (*Ledger)(nil)
var _ dcd.StagedGranter = (*Ledger)(nil)
var _ dcd.GrantChunkReader = (*Ledger)(nil)

// busyTimeout is how long SQLite itself waits for a lock held by another
// process (an admin tool, a backup) before reporting SQLITE_BUSY.
const busyTimeout = 5 * time.Second

// busyRetries is how many times tx re-runs a transaction that still failed
// with SQLITE_BUSY after busyTimeout; the retry backoff grows linearly.
const (
	busyRetries = 3
	busyBackoff = 50 * time.Millisecond
)

// readConns is how many read transactions run at once beside the writer.
const readConns = 4

// Open opens (creating if needed) the ledger at path and brings its schema
// up to date.
func Open(ctx context.Context, path string, opts Options) (*Ledger, error) {
	l := &Ledger{log: opts.Logger, clock: opts.Clock}
	l.group.done = sync.NewCond(&l.group.mu)
	l.queued.signal, l.queued.wait = make(chan struct{}, 1), coalesceWait
	l.syncFn = l.syncWAL
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
	// One connection: write transactions queue in the ledger (batch.go)
	// instead of fighting over SQLite's write lock, and no connection can
	// miss the pragmas (they are re-applied from the DSN on every new
	// connection).
	db.SetMaxOpenConns(1)
	l.db = db
	if err := migrate(ctx, db, migrations, l.log, l.clock); err != nil {
		return nil, errors.Join(fmt.Errorf("ledger: open %s: %w", path, err), db.Close())
	}
	// The writer holds its connection: a write transaction is then its
	// prepared BEGIN IMMEDIATE, statements and COMMIT, without a
	// database/sql transaction around it (which parses BEGIN and COMMIT
	// anew each time and watches the caller's context from a goroutine
	// of its own: together more than a small transaction's statements).
	wc, err := db.Conn(ctx)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("ledger: open %s: %w", path, err), db.Close())
	}
	l.wc = wc
	// The busy-span cache's log and triggers live on the writer's
	// connection alone (TEMP), created before the statements that use
	// them are prepared.
	if _, err := wc.ExecContext(ctx, busySchema); err != nil {
		return nil, errors.Join(fmt.Errorf("ledger: open %s: busy-span cache: %w", path, err), wc.Close(), db.Close())
	}
	// The readers open only once the schema is current; query_only makes
	// SQLite itself refuse a write that strayed onto them.
	rdb, err := sql.Open("sqlite", dsn+"&_pragma=query_only(1)")
	if err != nil {
		return nil, errors.Join(fmt.Errorf("ledger: open %s: %w", path, err), wc.Close(), db.Close())
	}
	rdb.SetMaxOpenConns(readConns)
	rdb.SetMaxIdleConns(readConns)
	l.rdb = rdb
	if err := l.prepare(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("ledger: open %s: %w", path, err), l.closeDBs())
	}
	return l, nil
}

// dataSourceName builds the modernc DSN: the path, then the per-connection
// pragmas. _txlock=immediate makes the transactions database/sql begins
// (the migrations) take the write lock at BEGIN, as runWrite's BEGIN
// IMMEDIATE does, so two processes cannot deadlock upgrading read locks.
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
	if err := l.closeDBs(); err != nil {
		return fmt.Errorf("ledger: close: %w", err)
	}
	return nil
}

func (l *Ledger) closeDBs() error {
	for _, st := range l.stmts {
		st.Close()
	}
	for _, st := range l.rstmts {
		st.Close()
	}
	// Readers first: the writer's close may checkpoint and remove the
	// WAL, which it only does when it is the last connection.
	return errors.Join(l.rdb.Close(), l.wc.Close(), l.db.Close())
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
	seq, err := l.runDurable(ctx, fn)
	if err != nil {
		return err
	}
	return l.makeDurable(seq)
}

// runDurable is run for a write whose caller then waits for makeDurable:
// it counts as queued while it waits for the writer and runs.
func (l *Ledger) runDurable(ctx context.Context, fn func(*Tx) error) (uint64, error) {
	l.queued.entered.Add(1)
	defer func() {
		l.queued.ended.Add(1)
		select {
		case l.queued.signal <- struct{}{}:
		default:
		}
	}()
	return l.run(ctx, nil, fn)
}

// coalesceWait bounds how long an fsync waits for durable writes already
// queued for the writer (one batch, normally well under it).
const coalesceWait = time.Millisecond

// awaitQueued returns once every durable write that was queued when it was
// called has ended, or after queued.wait (coalesceWait). With hosts
// granting and releasing at once, the writer commits the next batch while
// an fsync runs, and that batch's callers then paid an fsync of their own;
// waiting for a batch already queued lets one fsync cover it, at the cost
// of that batch to the leader. With eight hosts it took the fsyncs from
// 1.2 to 0.95 per grant-and-release round. A lone grant finds nothing
// queued and waits for nothing.
func (l *Ledger) awaitQueued() {
	want := l.queued.entered.Load()
	if l.queued.ended.Load() >= want {
		return
	}
	t := time.NewTimer(l.queued.wait)
	defer t.Stop()
	for l.queued.ended.Load() < want {
		select {
		case <-l.queued.signal:
		case <-t.C:
			return
		}
	}
}

// makeDurable returns once every commit numbered up to seq is on disk: at
// once if a finished fsync already covered it, after the running one if
// that covers it, else after an fsync it runs itself. A failed fsync
// advances nothing, so its waiters try again (each reports its own error).
func (l *Ledger) makeDurable(seq uint64) error {
	if !l.durable {
		return nil
	}
	g := &l.group
	g.mu.Lock()
	for g.running && g.synced < seq {
		g.done.Wait()
	}
	if g.synced >= seq {
		g.mu.Unlock()
		return nil
	}
	g.running = true
	g.mu.Unlock()
	l.awaitQueued()
	target := l.commits.Load() // ≥ seq: later commits ride along

	err := l.syncFn()

	g.mu.Lock()
	g.running = false
	if err == nil && target > g.synced {
		g.synced = target
	}
	g.done.Broadcast()
	g.mu.Unlock()
	return err
}

// syncWAL makes every commit so far durable: in WAL mode a commit is frames
// appended to the -wal file, so one fsync of it is what synchronous=FULL
// does at each commit; fdatasync, as SQLite itself syncs on Linux, since
// what a reader needs is the frames and the file's size, not its
// timestamps (whose journal commit would double the cost of a WAL that is
// only being overwritten). The file is opened by name each time, because
// SQLite may recreate it; a missing file means everything is already
// checkpointed into the database, which SQLite syncs when it checkpoints.
func (l *Ledger) syncWAL() error {
	f, err := os.OpenFile(l.walPath, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sync the write-ahead log: %w", err)
	}
	err = dataSync(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync the write-ahead log: %w", err)
	}
	return nil
}

// fenceMax bounds how long a read waits for outcomes already told
// (readFence): far above the writer's queue (milliseconds), far below an
// API client's patience.
const fenceMax = time.Second

// read runs fn in one read transaction, so multi-query reads see one
// snapshot.
func (l *Ledger) read(ctx context.Context, fn func(*Tx) error) error {
	switch err := l.fence.wait(ctx, fenceMax); {
	case errors.Is(err, errFenceTimeout):
		l.log.Warn("ledger: reading without outcomes already told", "err", err, "waited", fenceMax)
	case err != nil:
		return err
	}
	_, err := l.run(ctx, &sql.TxOptions{ReadOnly: true}, fn)
	return err
}

// relaxedTx runs fn in one write transaction whose commit does not wait
// for the disk. It is for outcomes that reconcile rebuilds from the device
// after a power loss (a host accepted, refused or released capacity),
// never for intents: WAL frames are appended in order, so the next durable
// commit or checkpoint persists the relaxed ones too, and a power cut can
// only roll the ledger back to the intent, which reconcile completes the
// same way. This halves the fsyncs of a grant.
func (l *Ledger) relaxedTx(ctx context.Context, fn func(*Tx) error) error {
	_, err := l.run(ctx, nil, fn)
	return err
}

// run runs fn in one transaction and returns the commit's number (0 for
// a read). Writes queue for the one writer connection and may share a
// SQLite transaction with others queued beside them (batch.go).
func (l *Ledger) run(ctx context.Context, opts *sql.TxOptions, fn func(*Tx) error) (uint64, error) {
	if opts == nil || !opts.ReadOnly {
		return l.write(ctx, fn)
	}
	return l.retryBusy(ctx, func() (uint64, error) { return l.runOnce(ctx, opts, fn) })
}

// errTxDone: the driver already ended the transaction (a cancelled
// context), so there is nothing to roll back.
var errTxDone = sql.ErrTxDone

func (l *Ledger) runOnce(ctx context.Context, opts *sql.TxOptions, fn func(*Tx) error) (uint64, error) {
	if opts == nil || !opts.ReadOnly {
		return l.runWrite(ctx, fn)
	}
	stx, err := l.rdb.BeginTx(ctx, opts)
	if err != nil {
		return 0, err
	}
	tx := &Tx{tx: stx, stmts: l.rstmts}
	if err := fn(tx); err != nil {
		if rbErr := stx.Rollback(); rbErr != nil && !errors.Is(rbErr, errTxDone) {
			// ErrTxDone: the driver already ended it (cancelled context).
			return 0, errors.Join(err, rbErr)
		}
		return 0, err
	}
	return 0, stx.Commit()
}

// Statements of the writer's own transaction control, prepared on wc.
const (
	qBegin     = `BEGIN IMMEDIATE`
	qBeginRead = `BEGIN DEFERRED`
	qCommit    = `COMMIT`
	qRollback  = `ROLLBACK`
)

// writerStatements are prepared on the writer's connection beside the
// hot statements: its transaction control and a batch's savepoints.
var writerStatements = []string{qBegin, qBeginRead, qCommit, qRollback, qSavepoint, qRollbackTo, qReleaseSP}

// runWrite runs fn in one write transaction on the writer's connection and
// returns its commit number. BEGIN IMMEDIATE takes the write lock at once,
// so two processes cannot deadlock upgrading read locks. A transaction
// whose ctx ended before COMMIT is rolled back.
//
// Its statements run under a context that cannot be cancelled (stmtCtx), so
// a caller that gives up stops its transaction before COMMIT, not inside a
// statement: for a cancellable context the driver starts a goroutine per
// statement to watch it (and database/sql one more per query), which on
// two cores cost every transaction of the grant path a wake-up of the
// other core for each statement, for statements that take microseconds.
func (l *Ledger) runWrite(ctx context.Context, fn func(*Tx) error) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	sctx := stmtCtx(ctx)
	if _, err := l.stmts[qBegin].ExecContext(sctx); err != nil {
		return 0, err
	}
	tx := &Tx{wc: l.wc, stmts: l.stmts, ctx: sctx, busy: &l.busy}
	if err := fn(tx); err != nil {
		return 0, l.rollback(err)
	}
	if err := ctx.Err(); err != nil {
		return 0, l.rollback(err)
	}
	// COMMIT itself is not interrupted: it either happened or not.
	if _, err := l.stmts[qCommit].ExecContext(sctx); err != nil {
		return 0, l.rollback(err)
	}
	return l.commits.Add(1), nil
}

// stmtCtx is the context the writer's statements run under: ctx's values
// without its cancellation (runWrite says why).
func stmtCtx(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// runRead runs fn, which only reads, in a deferred transaction on the
// writer's connection (readOnWriter): it takes no write lock, and its
// statements see one snapshot.
func (l *Ledger) runRead(ctx context.Context, fn func(*Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sctx := stmtCtx(ctx)
	if _, err := l.stmts[qBeginRead].ExecContext(sctx); err != nil {
		return err
	}
	tx := &Tx{wc: l.wc, stmts: l.stmts, ctx: sctx, busy: &l.busy}
	if err := fn(tx); err != nil {
		return l.rollback(err)
	}
	if _, err := l.stmts[qCommit].ExecContext(sctx); err != nil {
		return l.rollback(err)
	}
	return nil
}

// rollback ends the writer's transaction after err. SQLite may have ended
// it already (an interrupted or failed statement, a failed COMMIT), which
// is no second error.
func (l *Ledger) rollback(err error) error {
	if _, rbErr := l.stmts[qRollback].ExecContext(context.Background()); rbErr != nil &&
		!strings.Contains(rbErr.Error(), "no transaction is active") {
		return errors.Join(err, rbErr)
	}
	return err
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
