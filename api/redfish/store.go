package redfish

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// AccountsFile is the accounts database's name inside the data directory.
// It is separate from the capacity ledger: credentials and logs have their
// own life cycle (backups, wiping) and must not share its write lock.
const AccountsFile = "accounts.db"

// storeMigrations take the accounts database from version i to i+1. Never
// edit a released entry; append.
var storeMigrations = []string{`
CREATE TABLE accounts (
	id            INTEGER PRIMARY KEY,
	username      TEXT NOT NULL UNIQUE,
	password_hash TEXT NOT NULL,
	role          TEXT NOT NULL,
	enabled       INTEGER NOT NULL CHECK (enabled IN (0, 1)),
	host_id       INTEGER CHECK (host_id BETWEEN 0 AND 65535), -- LD-ID of a host-bound account
	password_change_required INTEGER NOT NULL DEFAULT 0 CHECK (password_change_required IN (0, 1)),
	created       INTEGER NOT NULL,
	updated       INTEGER NOT NULL
) STRICT;

CREATE TABLE settings (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
) STRICT;

-- log_entries holds the EventLog and the AuditLog, each bounded.
CREATE TABLE log_entries (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	log        TEXT NOT NULL,
	created    INTEGER NOT NULL,
	severity   TEXT NOT NULL,
	message_id TEXT NOT NULL,
	message    TEXT NOT NULL,
	args       TEXT NOT NULL, -- JSON array of strings
	origin     TEXT NOT NULL, -- @odata.id of the resource, or ''
	host_id    INTEGER,        -- the host the entry is about, if any
	username   TEXT NOT NULL,
	method     TEXT NOT NULL,
	uri        TEXT NOT NULL,
	status     INTEGER NOT NULL,
	client     TEXT NOT NULL
) STRICT;
CREATE INDEX log_entries_by_log ON log_entries (log, id);

CREATE TABLE subscriptions (
	id                INTEGER PRIMARY KEY AUTOINCREMENT,
	destination       TEXT NOT NULL,
	context           TEXT NOT NULL,
	protocol          TEXT NOT NULL,
	registry_prefixes TEXT NOT NULL, -- JSON array
	message_ids       TEXT NOT NULL, -- JSON array
	owner             TEXT NOT NULL,
	created           INTEGER NOT NULL
) STRICT;
`, `
-- chunk_owners records which host reserved a chunk itself (chunkowners.go).
CREATE TABLE chunk_owners (
	chunk_id INTEGER PRIMARY KEY,
	tag      BLOB NOT NULL CHECK (length(tag) = 16),
	host_id  INTEGER NOT NULL CHECK (host_id BETWEEN 0 AND 65535),
	created  INTEGER NOT NULL
) STRICT;
`, `
-- Account Ids are never handed out again (AUTOINCREMENT keeps the largest
-- ever given in sqlite_sequence), and every account gets a uid: a random
-- identity that owned objects (tasks, sessions, stream tickets,
-- subscriptions) are bound to, so that nothing an account leaves behind can
-- be inherited by another, whatever its Id or name.
CREATE TABLE accounts_v3 (
	id            INTEGER PRIMARY KEY AUTOINCREMENT,
	uid           TEXT NOT NULL UNIQUE CHECK (length(uid) = 32),
	username      TEXT NOT NULL UNIQUE,
	password_hash TEXT NOT NULL,
	role          TEXT NOT NULL,
	enabled       INTEGER NOT NULL CHECK (enabled IN (0, 1)),
	host_id       INTEGER CHECK (host_id BETWEEN 0 AND 65535),
	password_change_required INTEGER NOT NULL DEFAULT 0 CHECK (password_change_required IN (0, 1)),
	created       INTEGER NOT NULL,
	updated       INTEGER NOT NULL
) STRICT;
INSERT INTO accounts_v3 (id, uid, username, password_hash, role, enabled, host_id, password_change_required, created, updated)
	SELECT id, lower(hex(randomblob(16))), username, password_hash, role, enabled, host_id, password_change_required,
		created, updated FROM accounts;
DROP TABLE accounts;
ALTER TABLE accounts_v3 RENAME TO accounts;
ALTER TABLE subscriptions ADD COLUMN owner_uid TEXT NOT NULL DEFAULT '';
UPDATE subscriptions SET owner_uid = coalesce((SELECT uid FROM accounts WHERE username = subscriptions.owner), '');
`}

// Account is a local user account.
type Account struct {
	ID int64
	// UID is the account's immutable identity (32 hex digits), never
	// shown: what the account owns is bound to it, not to the Id.
	UID                    string
	UserName               string
	PasswordHash           string
	Role                   string
	Enabled                bool
	HostID                 *HostID
	PasswordChangeRequired bool
	Created, Updated       time.Time
}

// LogEntry is one row of the EventLog or AuditLog.
type LogEntry struct {
	ID        int64
	Log       string
	Created   time.Time
	Severity  string
	MessageID string
	Message   string
	Args      []string
	Origin    string
	HostID    *HostID
	UserName  string
	Method    string
	URI       string
	Status    int
	Client    string
}

// Subscription is a persisted event destination.
type Subscription struct {
	ID               int64
	Destination      string
	Context          string
	Protocol         string
	RegistryPrefixes []string
	MessageIDs       []string
	Owner            string // the user name, for display
	OwnerUID         string // the owning account (Account.UID)
	Created          time.Time
}

// Store is the accounts database. Accounts are few, so they are also kept
// in memory (write-through): authentication never waits for SQLite.
type Store struct {
	db    *sql.DB
	clock func() time.Time

	mu       sync.RWMutex
	accounts map[int64]Account
}

// DB is the accounts database, for the tables of the resources the
// service serves (its migrations create them).
func (s *Store) DB() *sql.DB { return s.db }

var ErrDuplicate = errors.New("duplicate")

func openStore(ctx context.Context, path string, clock func() time.Time) (*Store, error) {
	if path == "" || strings.ContainsRune(path, '?') {
		return nil, fmt.Errorf("accounts db: bad path %q", path)
	}
	q := url.Values{}
	q.Set("_busy_timeout", "5000")
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "FULL")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("accounts db: %w", err)
	}
	db.SetMaxOpenConns(1) // one writer; transactions queue in database/sql
	s := &Store{db: db, clock: clock, accounts: map[int64]Account{}}
	if err := s.migrate(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("accounts db: %w", err), db.Close())
	}
	// Password hashes: readable by the daemon's user only.
	if err := os.Chmod(path, 0o600); err != nil {
		return nil, errors.Join(fmt.Errorf("accounts db: %w", err), db.Close())
	}
	if err := s.loadAccounts(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("accounts db: %w", err), db.Close())
	}
	return s, nil
}

func (s *Store) close() error { return s.db.Close() }

func (s *Store) migrate(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL) STRICT`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for i, step := range storeMigrations {
		version := i + 1
		err := s.tx(ctx, func(tx *sql.Tx) error {
			var current int
			if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
				return err
			}
			if current > len(storeMigrations) {
				return fmt.Errorf("schema version %d is newer than this program's %d", current, len(storeMigrations))
			}
			if current >= version {
				return nil
			}
			if _, err := tx.ExecContext(ctx, step); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`,
				version, s.clock().UnixNano())
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate: version %d: %w", version, err)
		}
	}
	return nil
}

func (s *Store) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		if rb := tx.Rollback(); rb != nil && !errors.Is(rb, sql.ErrTxDone) {
			return errors.Join(err, rb)
		}
		return err
	}
	return tx.Commit()
}

func nullHost(h *HostID) any {
	if h == nil {
		return nil
	}
	return int64(*h)
}

func hostFrom(n sql.NullInt64) *HostID {
	if !n.Valid {
		return nil
	}
	h := HostID(n.Int64)
	return &h
}

func (s *Store) loadAccounts(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, `SELECT id, uid, username, password_hash, role, enabled, host_id,
		password_change_required, created, updated FROM accounts`)
	if err != nil {
		return err
	}
	defer rows.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for rows.Next() {
		var a Account
		var host sql.NullInt64
		var created, updated int64
		if err := rows.Scan(&a.ID, &a.UID, &a.UserName, &a.PasswordHash, &a.Role, &a.Enabled, &host,
			&a.PasswordChangeRequired, &created, &updated); err != nil {
			return err
		}
		a.HostID = hostFrom(host)
		a.Created, a.Updated = time.Unix(0, created).UTC(), time.Unix(0, updated).UTC()
		s.accounts[a.ID] = a
	}
	return rows.Err()
}

// Accounts returns all accounts ordered by Id.
func (s *Store) Accounts() []Account {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Account, 0, len(s.accounts))
	for _, a := range s.accounts {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b Account) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

func (s *Store) Account(id int64) (Account, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	a, ok := s.accounts[id]
	return a, ok
}

// AccountByUID returns the account whose identity is uid.
func (s *Store) AccountByUID(uid string) (Account, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, a := range s.accounts {
		if a.UID == uid {
			return a, true
		}
	}
	return Account{}, false
}

func (s *Store) AccountByName(name string) (Account, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, a := range s.accounts {
		if a.UserName == name {
			return a, true
		}
	}
	return Account{}, false
}

// CreateAccount inserts a; errDuplicate if the user name is taken.
func (s *Store) CreateAccount(ctx context.Context, a Account) (Account, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.accounts {
		if o.UserName == a.UserName {
			return Account{}, ErrDuplicate
		}
	}
	now := s.clock().UTC()
	a.Created, a.Updated = now, now
	a.UID = randomString("0123456789abcdef", 32)
	err := s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO accounts (uid, username, password_hash, role, enabled, host_id,
			password_change_required, created, updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			a.UID, a.UserName, a.PasswordHash, a.Role, a.Enabled, nullHost(a.HostID), a.PasswordChangeRequired,
			now.UnixNano(), now.UnixNano())
		if err != nil {
			return err
		}
		a.ID, err = res.LastInsertId()
		return err
	})
	if err != nil {
		return Account{}, fmt.Errorf("accounts db: create %q: %w", a.UserName, err)
	}
	s.accounts[a.ID] = a
	return a, nil
}

// UpdateAccount writes a (by ID); errDuplicate if renamed onto another.
func (s *Store) UpdateAccount(ctx context.Context, a Account) (Account, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.accounts {
		if o.UserName == a.UserName && o.ID != a.ID {
			return Account{}, ErrDuplicate
		}
	}
	old, ok := s.accounts[a.ID]
	if !ok {
		return Account{}, fmt.Errorf("accounts db: update %d: no such account", a.ID)
	}
	a.UID = old.UID // immutable
	a.Updated = s.clock().UTC()
	err := s.tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE accounts SET username = ?, password_hash = ?, role = ?, enabled = ?,
			host_id = ?, password_change_required = ?, updated = ? WHERE id = ?`,
			a.UserName, a.PasswordHash, a.Role, a.Enabled, nullHost(a.HostID), a.PasswordChangeRequired,
			a.Updated.UnixNano(), a.ID)
		return err
	})
	if err != nil {
		return Account{}, fmt.Errorf("accounts db: update %d: %w", a.ID, err)
	}
	s.accounts[a.ID] = a
	return a, nil
}

func (s *Store) DeleteAccount(ctx context.Context, id int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM accounts WHERE id = ?`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("accounts db: delete %d: %w", id, err)
	}
	delete(s.accounts, id)
	return nil
}

// Setting returns a stored setting, or def.
func (s *Store) Setting(ctx context.Context, key, def string) (string, error) {
	var v string
	err := s.db.QueryRowContext(ctx, `SELECT value FROM settings WHERE key = ?`, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return def, nil
	}
	if err != nil {
		return "", fmt.Errorf("accounts db: setting %s: %w", key, err)
	}
	return v, nil
}

func (s *Store) SetSettings(ctx context.Context, kv map[string]string) error {
	err := s.tx(ctx, func(tx *sql.Tx) error {
		for k, v := range kv {
			if _, err := tx.ExecContext(ctx, `INSERT INTO settings (key, value) VALUES (?, ?)
				ON CONFLICT (key) DO UPDATE SET value = excluded.value`, k, v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("accounts db: settings: %w", err)
	}
	return nil
}

// AppendLog adds an entry and keeps at most limit entries in its log.
func (s *Store) AppendLog(ctx context.Context, e LogEntry, limit int) (LogEntry, error) {
	args, err := json.Marshal(NonNil(e.Args))
	if err != nil {
		return e, err
	}
	err = s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO log_entries (log, created, severity, message_id, message, args,
			origin, host_id, username, method, uri, status, client) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			e.Log, e.Created.UnixNano(), e.Severity, e.MessageID, e.Message, string(args), e.Origin,
			nullHost(e.HostID), e.UserName, e.Method, e.URI, e.Status, e.Client)
		if err != nil {
			return err
		}
		if e.ID, err = res.LastInsertId(); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM log_entries WHERE log = ? AND id <= (
			SELECT id FROM log_entries WHERE log = ? ORDER BY id DESC LIMIT 1 OFFSET ?)`, e.Log, e.Log, limit)
		return err
	})
	if err != nil {
		return e, fmt.Errorf("accounts db: append %s log: %w", e.Log, err)
	}
	return e, nil
}

func NonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

const logColumns = `id, log, created, severity, message_id, message, args, origin, host_id, username, method, uri, status, client`

func scanLog(sc interface{ Scan(...any) error }) (LogEntry, error) {
	var e LogEntry
	var created int64
	var args string
	var host sql.NullInt64
	if err := sc.Scan(&e.ID, &e.Log, &created, &e.Severity, &e.MessageID, &e.Message, &args, &e.Origin, &host,
		&e.UserName, &e.Method, &e.URI, &e.Status, &e.Client); err != nil {
		return e, err
	}
	e.Created = time.Unix(0, created).UTC()
	e.HostID = hostFrom(host)
	if err := json.Unmarshal([]byte(args), &e.Args); err != nil {
		return e, err
	}
	return e, nil
}

// LogEntries returns a log's entries, oldest first; host filters to the
// entries about that host when non-nil.
func (s *Store) LogEntries(ctx context.Context, log string, host *HostID) ([]LogEntry, error) {
	q := `SELECT ` + logColumns + ` FROM log_entries WHERE log = ?`
	args := []any{log}
	if host != nil {
		q += ` AND host_id = ?`
		args = append(args, int64(*host))
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY id`, args...)
	if err != nil {
		return nil, fmt.Errorf("accounts db: %s log: %w", log, err)
	}
	defer rows.Close()
	var out []LogEntry
	for rows.Next() {
		e, err := scanLog(rows)
		if err != nil {
			return nil, fmt.Errorf("accounts db: %s log: %w", log, err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// LogEntry returns one entry; ok is false if there is none.
func (s *Store) LogEntry(ctx context.Context, log string, id int64) (LogEntry, bool, error) {
	e, err := scanLog(s.db.QueryRowContext(ctx, `SELECT `+logColumns+` FROM log_entries WHERE log = ? AND id = ?`, log, id))
	if errors.Is(err, sql.ErrNoRows) {
		return e, false, nil
	}
	if err != nil {
		return e, false, fmt.Errorf("accounts db: %s log entry %d: %w", log, id, err)
	}
	return e, true, nil
}

func (s *Store) ClearLog(ctx context.Context, log string) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM log_entries WHERE log = ?`, log)
		return err
	})
}

func (s *Store) CreateSubscription(ctx context.Context, sub Subscription) (Subscription, error) {
	rp, _ := json.Marshal(NonNil(sub.RegistryPrefixes))
	mi, _ := json.Marshal(NonNil(sub.MessageIDs))
	sub.Created = s.clock().UTC()
	err := s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO subscriptions (destination, context, protocol, registry_prefixes,
			message_ids, owner, owner_uid, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, sub.Destination, sub.Context, sub.Protocol,
			string(rp), string(mi), sub.Owner, sub.OwnerUID, sub.Created.UnixNano())
		if err != nil {
			return err
		}
		sub.ID, err = res.LastInsertId()
		return err
	})
	if err != nil {
		return sub, fmt.Errorf("accounts db: create subscription: %w", err)
	}
	return sub, nil
}

func (s *Store) Subscriptions(ctx context.Context) ([]Subscription, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, destination, context, protocol, registry_prefixes, message_ids,
		owner, owner_uid, created FROM subscriptions ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("accounts db: subscriptions: %w", err)
	}
	defer rows.Close()
	var out []Subscription
	for rows.Next() {
		var sub Subscription
		var rp, mi string
		var created int64
		if err := rows.Scan(&sub.ID, &sub.Destination, &sub.Context, &sub.Protocol, &rp, &mi, &sub.Owner, &sub.OwnerUID, &created); err != nil {
			return nil, fmt.Errorf("accounts db: subscriptions: %w", err)
		}
		if err := errors.Join(json.Unmarshal([]byte(rp), &sub.RegistryPrefixes), json.Unmarshal([]byte(mi), &sub.MessageIDs)); err != nil {
			return nil, fmt.Errorf("accounts db: subscription %d: %w", sub.ID, err)
		}
		sub.Created = time.Unix(0, created).UTC()
		out = append(out, sub)
	}
	return out, rows.Err()
}

func (s *Store) DeleteSubscription(ctx context.Context, id int64) (bool, error) {
	var n int64
	err := s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM subscriptions WHERE id = ?`, id)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("accounts db: delete subscription %d: %w", id, err)
	}
	return n > 0, nil
}
