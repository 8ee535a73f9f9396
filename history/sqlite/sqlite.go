// Package sqlite implements history.Store on a SQLite file (modernc's
// pure-Go driver). Each series has a row per bucket in each tier (10 s
// and 5 min) holding the count, sum, min and max of its samples, merged
// by an upsert, so that a restart loses only the round in flight. The
// size is bounded: at most MaxSeries series (128 by default), each with
// at most 8640 fine and 8640 coarse buckets of some 40 bytes on disk
// (TestSizeOfADay), each tier pruned to its retention on every round:
// about 85 MiB at most. Durability is relaxed (synchronous=NORMAL): a power loss
// may lose the last seconds of history, never the file.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" driver

	"cxlpool/history"
)

// Options tunes a Store.
type Options struct {
	Logger *slog.Logger
	// MaxSeries bounds the series kept (128: about 85 MiB at a month's
	// steady state, 40 B per bucket and 17,280 buckets a series).
	MaxSeries int
}

// Store is a history.Store in one SQLite file.
type Store struct {
	db        *sql.DB
	log       *slog.Logger
	maxSeries int

	mu     sync.Mutex
	series map[history.Series]int64 // known series and their ids
}

const tierFine, tierCoarse = 0, 1

var migrations = []string{`
CREATE TABLE series (
	id      INTEGER PRIMARY KEY,
	metric  TEXT NOT NULL,
	subject TEXT NOT NULL,
	UNIQUE (metric, subject)
) STRICT;
CREATE TABLE points (
	series INTEGER NOT NULL REFERENCES series(id),
	tier   INTEGER NOT NULL,
	bucket INTEGER NOT NULL, -- unix seconds, a multiple of the tier's step
	n      INTEGER NOT NULL,
	sum    REAL NOT NULL,
	min    REAL NOT NULL,
	max    REAL NOT NULL,
	PRIMARY KEY (series, tier, bucket)
) STRICT, WITHOUT ROWID;
CREATE INDEX points_age ON points (tier, bucket);
CREATE TABLE triggers (
	id   TEXT PRIMARY KEY,
	body TEXT NOT NULL -- history.Trigger as JSON
) STRICT;
CREATE TABLE alerts (
	trigger TEXT NOT NULL,
	subject TEXT NOT NULL,
	body    TEXT NOT NULL, -- history.Alert as JSON
	PRIMARY KEY (trigger, subject)
) STRICT;
CREATE TABLE meta (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
) STRICT;
`}

// Open opens (creating if needed) the store at path.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxSeries <= 0 {
		opts.MaxSeries = 128
	}
	if path == "" || strings.ContainsRune(path, '?') {
		return nil, fmt.Errorf("history store: path %q: must be non-empty and without '?': %w", path, history.ErrInvalid)
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("history store: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	s := &Store{db: db, log: opts.Logger, maxSeries: opts.MaxSeries, series: map[history.Series]int64{}}
	if err := s.migrate(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("history store: open %s: %w", path, err), db.Close())
	}
	rows, err := db.QueryContext(ctx, `SELECT id, metric, subject FROM series`)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("history store: %w", err), db.Close())
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var x history.Series
		if err := rows.Scan(&id, &x.Metric, &x.Subject); err != nil {
			return nil, errors.Join(fmt.Errorf("history store: %w", err), db.Close())
		}
		s.series[x] = id
	}
	if err := rows.Err(); err != nil {
		return nil, errors.Join(fmt.Errorf("history store: %w", err), db.Close())
	}
	return s, nil
}

func (s *Store) migrate(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY) STRICT`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var current int
	if err := s.db.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if current > len(migrations) {
		return fmt.Errorf("migrate: database schema version %d is newer than this program's %d", current, len(migrations))
	}
	for v := current + 1; v <= len(migrations); v++ {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if _, err := tx.ExecContext(ctx, migrations[v-1]); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("migrate: version %d: %w", v, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version) VALUES (?)`, v); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("migrate: version %d: %w", v, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migrate: version %d: %w", v, err)
		}
	}
	return nil
}

// Add implements history.Store: one transaction per round.
func (s *Store) Add(ctx context.Context, t time.Time, samples []history.Sample) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("history store: %w", err)
	}
	defer tx.Rollback() // a no-op after Commit
	added := map[history.Series]int64{}
	var full []string
	up, err := tx.PrepareContext(ctx, `INSERT INTO points (series, tier, bucket, n, sum, min, max) VALUES (?, ?, ?, 1, ?, ?, ?)
		ON CONFLICT (series, tier, bucket) DO UPDATE SET n = n + 1, sum = sum + excluded.sum,
		min = min(min, excluded.min), max = max(max, excluded.max)`)
	if err != nil {
		return fmt.Errorf("history store: %w", err)
	}
	defer up.Close()
	for _, x := range samples {
		id, ok := s.series[x.Series]
		if !ok {
			id, ok = added[x.Series]
		}
		if !ok {
			if len(s.series)+len(added) >= s.maxSeries {
				full = append(full, x.Series.String())
				continue
			}
			if err := tx.QueryRowContext(ctx, `INSERT INTO series (metric, subject) VALUES (?, ?) RETURNING id`,
				x.Metric, x.Subject).Scan(&id); err != nil {
				return fmt.Errorf("history store: series %s: %w", x.Series, err)
			}
			added[x.Series] = id
		}
		for _, tier := range []struct {
			n    int
			step time.Duration
		}{{tierFine, history.FineStep}, {tierCoarse, history.CoarseStep}} {
			b := history.BucketOf(t, tier.step).Unix()
			if _, err := up.ExecContext(ctx, id, tier.n, b, x.Value, x.Value, x.Value); err != nil {
				return fmt.Errorf("history store: %s: %w", x.Series, err)
			}
		}
	}
	for _, tier := range []struct {
		n    int
		keep time.Duration
	}{{tierFine, history.FineKeep}, {tierCoarse, history.CoarseKeep}} {
		if _, err := tx.ExecContext(ctx, `DELETE FROM points WHERE tier = ? AND bucket < ?`, tier.n, t.Add(-tier.keep).Unix()); err != nil {
			return fmt.Errorf("history store: prune: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("history store: %w", err)
	}
	for k, v := range added {
		s.series[k] = v
	}
	if len(full) > 0 {
		return fmt.Errorf("%w (%d series): not kept: %s", history.ErrFull, s.maxSeries, strings.Join(full, ", "))
	}
	return nil
}

// Query implements history.Store.
func (s *Store) Query(ctx context.Context, x history.Series, from, to time.Time, step time.Duration) ([]history.Point, error) {
	s.mu.Lock()
	id, ok := s.series[x]
	s.mu.Unlock()
	if !ok {
		return nil, nil
	}
	tier := tierFine
	if step >= history.CoarseStep && step%history.CoarseStep == 0 {
		tier = tierCoarse
	}
	st := int64(step / time.Second)
	if st <= 0 {
		return nil, fmt.Errorf("%w: step %s is under a second", history.ErrInvalid, step)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT (bucket / ?) * ? AS b, sum(n), sum(sum), min(min), max(max)
		FROM points WHERE series = ? AND tier = ? AND bucket >= ? AND bucket < ?
		GROUP BY b ORDER BY b`, st, st, id, tier, history.BucketOf(from, step).Unix(),
		// Buckets starting before to, to the nanosecond (to.Unix() alone would
		// drop the bucket of a sample taken in the same second as to).
		to.Add(time.Second-time.Nanosecond).Unix())
	if err != nil {
		return nil, fmt.Errorf("history store: %w", err)
	}
	defer rows.Close()
	var out []history.Point
	for rows.Next() {
		var b int64
		var n int
		var sum float64
		var p history.Point
		if err := rows.Scan(&b, &n, &sum, &p.Min, &p.Max); err != nil {
			return nil, fmt.Errorf("history store: %w", err)
		}
		p.Time, p.Count, p.Mean = time.Unix(b, 0).UTC(), n, sum/float64(n)
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("history store: %w", err)
	}
	return out, nil
}

// Series implements history.Store.
func (s *Store) Series(context.Context) ([]history.Series, error) {
	s.mu.Lock()
	out := make([]history.Series, 0, len(s.series))
	for k := range s.series {
		out = append(out, k)
	}
	s.mu.Unlock()
	history.SortSeries(out)
	return out, nil
}

// Triggers implements history.Store.
func (s *Store) Triggers(ctx context.Context) ([]history.Trigger, bool, error) {
	var seeded int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM meta WHERE key = 'triggers-seeded'`).Scan(&seeded); err != nil {
		return nil, false, fmt.Errorf("history store: %w", err)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT body FROM triggers ORDER BY id`)
	if err != nil {
		return nil, false, fmt.Errorf("history store: %w", err)
	}
	defer rows.Close()
	var out []history.Trigger
	for rows.Next() {
		var body string
		var t history.Trigger
		if err := rows.Scan(&body); err != nil {
			return nil, false, fmt.Errorf("history store: %w", err)
		}
		if err := json.Unmarshal([]byte(body), &t); err != nil {
			return nil, false, fmt.Errorf("history store: trigger: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("history store: %w", err)
	}
	return out, seeded > 0, nil
}

// PutTrigger implements history.Store.
func (s *Store) PutTrigger(ctx context.Context, t history.Trigger) error {
	body, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("history store: %w", err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("history store: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO triggers (id, body) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET body = excluded.body`, t.ID, string(body)); err != nil {
		return fmt.Errorf("history store: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO meta (key, value) VALUES ('triggers-seeded', '1')`); err != nil {
		return fmt.Errorf("history store: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("history store: %w", err)
	}
	return nil
}

// Alerts implements history.Store.
func (s *Store) Alerts(ctx context.Context) ([]history.Alert, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT body FROM alerts ORDER BY trigger, subject`)
	if err != nil {
		return nil, fmt.Errorf("history store: %w", err)
	}
	defer rows.Close()
	var out []history.Alert
	for rows.Next() {
		var body string
		var a history.Alert
		if err := rows.Scan(&body); err != nil {
			return nil, fmt.Errorf("history store: %w", err)
		}
		if err := json.Unmarshal([]byte(body), &a); err != nil {
			return nil, fmt.Errorf("history store: alert: %w", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("history store: %w", err)
	}
	return out, nil
}

// PutAlert implements history.Store.
func (s *Store) PutAlert(ctx context.Context, a history.Alert) error {
	body, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("history store: %w", err)
	}
	if _, err := s.db.ExecContext(ctx, `INSERT INTO alerts (trigger, subject, body) VALUES (?, ?, ?)
		ON CONFLICT (trigger, subject) DO UPDATE SET body = excluded.body`, a.Trigger, a.Subject, string(body)); err != nil {
		return fmt.Errorf("history store: %w", err)
	}
	return nil
}

// DeleteAlert implements history.Store.
func (s *Store) DeleteAlert(ctx context.Context, trigger, subject string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM alerts WHERE trigger = ? AND subject = ?`, trigger, subject); err != nil {
		return fmt.Errorf("history store: %w", err)
	}
	return nil
}

// Close implements history.Store.
func (s *Store) Close() error { return s.db.Close() }
