package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/dcd"
	"cxlpool/dcd/ledgertest"
	"cxlpool/fabric/cci"
)

func openTemp(t *testing.T, opts Options) (*Ledger, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := Open(t.Context(), path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l, path
}

// openAdding opens a ledger with the test inventory, one chunk of a block
// and host's grant of it still adding.
func openAdding(t *testing.T, host dcd.HostID) (*Ledger, dcd.GrantIntent) {
	t.Helper()
	ctx := t.Context()
	l, _ := openTemp(t, Options{})
	t.Cleanup(func() { l.Close() })
	if err := l.SyncInventory(ctx, ledgertest.Inventory()); err != nil {
		t.Fatal(err)
	}
	c, err := l.CreateChunk(ctx, dcd.Chunk{Region: ledgertest.Region0, Size: ledgertest.Block})
	if err != nil {
		t.Fatal(err)
	}
	in, err := l.BeginGrant(ctx, c.ID, host, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l, in
}

func TestContract(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T) dcd.Ledger {
		l, _ := openTemp(t, Options{})
		return l
	})
}

// snapshot is everything a ledger reports.
type snapshot struct {
	Hosts   []dcd.Host
	Regions []dcd.Region
	Chunks  []dcd.Chunk
	Grants  []dcd.Grant
	Orphans []dcd.Orphan
}

func takeSnapshot(t *testing.T, l *Ledger) snapshot {
	t.Helper()
	ctx := t.Context()
	var s snapshot
	var err error
	check := func(what string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	s.Hosts, err = l.Hosts(ctx)
	check("Hosts")
	s.Regions, err = l.Regions(ctx)
	check("Regions")
	s.Chunks, err = l.Chunks(ctx)
	check("Chunks")
	s.Grants, err = l.Grants(ctx, dcd.GrantFilter{})
	check("Grants")
	s.Orphans, err = l.Orphans(ctx)
	check("Orphans")
	return s
}

func TestReopenPersists(t *testing.T) {
	ctx := t.Context()
	now := time.Date(2026, 3, 4, 5, 6, 7, 891011121, time.FixedZone("CET", 3600))
	clock := func() time.Time { return now }
	l, path := openTemp(t, Options{Clock: clock})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(l.SyncInventory(ctx, ledgertest.Inventory()))
	must(l.SetHostQuota(ctx, 1, 1<<63+5))
	a, err := l.CreateChunk(ctx, dcd.Chunk{Name: "a", Region: ledgertest.Region1, Size: 4 * ledgertest.Block, Sharable: true})
	must(err)
	if !a.Created.Equal(now) {
		t.Errorf("Created: got %v, want the clock's %v", a.Created, now)
	}
	b, err := l.CreateChunk(ctx, dcd.Chunk{Name: "b", Region: ledgertest.Region0, Size: ledgertest.Block})
	must(err)
	gone, err := l.CreateChunk(ctx, dcd.Chunk{Name: "gone", Region: ledgertest.Region0, Size: ledgertest.Block})
	must(err)
	must(l.DeleteChunk(ctx, gone.ID))
	g1, err := l.BeginGrant(ctx, a.ID, 1, nil)
	must(err)
	_, err = l.CompleteGrant(ctx, g1.ID, []cci.Extent{{DPA: 1 << 30, Length: 4 * ledgertest.Block, Tag: a.Tag, SharedSeq: 7}})
	must(err)
	g2, err := l.BeginGrant(ctx, b.ID, 2, nil)
	must(err)
	_, err = l.FailGrant(ctx, g2.ID, "host rejected")
	must(err)
	_, err = l.BeginGrant(ctx, a.ID, 3, nil)
	must(err)
	tag := cci.NewTag()
	must(l.RecordOrphan(ctx, dcd.Orphan{Host: 6, Tag: tag, Extents: []cci.Extent{{DPA: 1 << 35, Length: 1 << 21, Tag: tag}}}))
	before := takeSnapshot(t, l)
	must(l.Close())

	l2, err := Open(ctx, path, Options{})
	must(err)
	t.Cleanup(func() { l2.Close() })
	after := takeSnapshot(t, l2)
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("ledger after reopen mismatch (-before +after):\n%s", diff)
	}
	if len(after.Chunks) != 2 || len(after.Grants) != 3 || len(after.Orphans) != 1 {
		t.Errorf("after reopen: got %d chunks %d grants %d orphans, want 2 3 1",
			len(after.Chunks), len(after.Grants), len(after.Orphans))
	}
	// The serial and the deleted chunk's tag survive too.
	inv := ledgertest.Inventory()
	inv.Serial++
	if err := l2.SyncInventory(ctx, inv); !errors.Is(err, dcd.ErrConflict) {
		t.Errorf("SyncInventory with another serial after reopen: got %v, want %v", err, dcd.ErrConflict)
	}
	if _, err := l2.CreateChunk(ctx, dcd.Chunk{Region: ledgertest.Region0, Size: ledgertest.Block, Tag: gone.Tag}); !errors.Is(err, dcd.ErrConflict) {
		t.Errorf("CreateChunk with the deleted chunk's tag after reopen: got %v, want %v", err, dcd.ErrConflict)
	}
}

// schemaVersions returns the versions recorded in the database at path.
func schemaVersions(t *testing.T, path string) []int {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(t.Context(), `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatalf("schema_migrations: %v", err)
	}
	defer rows.Close()
	var got []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// checkVersions fails unless the database at path records exactly the
// versions 1..n.
func checkVersions(t *testing.T, path string, n int) {
	t.Helper()
	var want []int
	for v := 1; v <= n; v++ {
		want = append(want, v)
	}
	if diff := cmp.Diff(want, schemaVersions(t, path)); diff != "" {
		t.Errorf("schema versions mismatch (-want +got):\n%s", diff)
	}
}

// migrateRaw applies steps to the database at path without opening a Ledger.
func migrateRaw(t *testing.T, path string, steps []string) error {
	t.Helper()
	dsn, _, err := dataSourceName(path, "")
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	return migrate(t.Context(), db, steps, slog.New(slog.DiscardHandler), time.Now)
}

func TestMigrationsIdempotent(t *testing.T) {
	l, path := openTemp(t, Options{})
	ctx := t.Context()
	if err := l.SyncInventory(ctx, ledgertest.Inventory()); err != nil {
		t.Fatal(err)
	}
	before := takeSnapshot(t, l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		l, err := Open(ctx, path, Options{})
		if err != nil {
			t.Fatalf("Open #%d: %v", i+2, err)
		}
		if diff := cmp.Diff(before, takeSnapshot(t, l)); diff != "" {
			t.Errorf("reopen #%d changed the ledger (-before +after):\n%s", i+2, diff)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		checkVersions(t, path, len(migrations))
	}
}

func TestMigrationsUpgrade(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	// A database created by the first release.
	if err := migrateRaw(t, path, migrations[:1]); err != nil {
		t.Fatalf("migrate to version 1: %v", err)
	}
	checkVersions(t, path, 1)
	l, err := Open(t.Context(), path, Options{})
	if err != nil {
		t.Fatalf("Open a version 1 database: %v", err)
	}
	if err := l.SyncInventory(t.Context(), ledgertest.Inventory()); err != nil {
		t.Fatalf("SyncInventory after upgrade: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	checkVersions(t, path, len(migrations))

	// A later release appends a migration: only it is applied, and it sees
	// the data the earlier ones hold.
	next := append(migrations[:len(migrations):len(migrations)],
		`CREATE TABLE upgrade_probe AS SELECT count(*) AS hosts FROM hosts`)
	if err := migrateRaw(t, path, next); err != nil {
		t.Fatalf("migrate to version %d: %v", len(next), err)
	}
	checkVersions(t, path, len(next))
	if err := migrateRaw(t, path, next); err != nil {
		t.Fatalf("migrate to version %d again: %v", len(next), err)
	}
	checkVersions(t, path, len(next))
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var hosts int
	if err := db.QueryRowContext(t.Context(), `SELECT hosts FROM upgrade_probe`).Scan(&hosts); err != nil {
		t.Fatal(err)
	}
	if hosts != ledgertest.NumHosts {
		t.Errorf("migration %d saw %d hosts, want %d", len(next), hosts, ledgertest.NumHosts)
	}

	// This release refuses the newer database rather than misread it.
	if l, err := Open(t.Context(), path, Options{}); err == nil {
		l.Close()
		t.Errorf("Open a version %d database: got nil error, want refusal", len(next))
	}
}

func TestMigrationFailureRollsBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	bad := append(migrations[:len(migrations):len(migrations)], `CREATE TABLE half (x INTEGER); SELECT no_such_function()`)
	if err := migrateRaw(t, path, bad); err == nil {
		t.Fatal("migrate with a failing step: got nil error, want failure")
	}
	checkVersions(t, path, len(migrations))
	// The failed step left nothing behind, so a fixed one applies cleanly.
	fixed := append(migrations[:len(migrations):len(migrations)], `CREATE TABLE half (x INTEGER)`)
	if err := migrateRaw(t, path, fixed); err != nil {
		t.Fatalf("migrate with the fixed step: %v", err)
	}
	checkVersions(t, path, len(fixed))
}

func TestPragmas(t *testing.T) {
	for _, tc := range []struct {
		sync string
		want int // PRAGMA synchronous: always 1 (NORMAL); durable commits fsync the WAL themselves
	}{
		{"", 1},
		{"FULL", 1},
		{"normal", 1},
	} {
		t.Run(tc.sync, func(t *testing.T) {
			l, _ := openTemp(t, Options{Synchronous: tc.sync})
			defer l.Close()
			ctx := t.Context()
			var mode string
			var sync, fk, busy int
			for _, q := range []struct {
				pragma string
				dest   any
			}{
				{"journal_mode", &mode},
				{"synchronous", &sync},
				{"foreign_keys", &fk},
				{"busy_timeout", &busy},
			} {
				if err := l.wc.QueryRowContext(ctx, "PRAGMA "+q.pragma).Scan(q.dest); err != nil {
					t.Fatalf("PRAGMA %s: %v", q.pragma, err)
				}
			}
			if mode != "wal" {
				t.Errorf("journal_mode: got %q, want %q", mode, "wal")
			}
			if sync != tc.want {
				t.Errorf("synchronous: got %d, want %d", sync, tc.want)
			}
			if fk != 1 {
				t.Errorf("foreign_keys: got %d, want 1", fk)
			}
			if busy != int(busyTimeout.Milliseconds()) {
				t.Errorf("busy_timeout: got %d, want %d", busy, busyTimeout.Milliseconds())
			}
			// Foreign keys are enforced, not just switched on.
			_, err := l.wc.ExecContext(ctx, `INSERT INTO grants (chunk, host, state, created, updated) VALUES (999, 999, 'adding', 0, 0)`)
			if err == nil {
				t.Errorf("insert a grant of no chunk: got nil error, want a foreign key failure")
			}
		})
	}
}

func TestOpenInvalid(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		path string
		opts Options
	}{
		{"empty path", "", Options{}},
		{"query in path", filepath.Join(dir, "a?mode=ro"), Options{}},
		{"synchronous OFF", filepath.Join(dir, "b.db"), Options{Synchronous: "OFF"}},
		{"missing directory", filepath.Join(dir, "no", "such", "c.db"), Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Open(t.Context(), tc.path, tc.opts)
			if err == nil {
				l.Close()
				t.Fatalf("Open(%q, %+v): got nil error, want failure", tc.path, tc.opts)
			}
		})
	}
}

func TestPing(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	l, _ := openTemp(t, Options{Clock: func() time.Time { return now }})
	defer l.Close()
	if err := l.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	var got string
	if err := l.wc.QueryRowContext(t.Context(), `SELECT value FROM meta WHERE key = 'heartbeat'`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if want := now.Format(time.RFC3339Nano); got != want {
		t.Errorf("heartbeat: got %q, want %q", got, want)
	}
}

func TestClockStampsRows(t *testing.T) {
	ctx := t.Context()
	now := time.Date(2026, 5, 6, 7, 8, 9, 10, time.UTC)
	l, _ := openTemp(t, Options{Clock: func() time.Time { return now }})
	defer l.Close()
	if err := l.SyncInventory(ctx, ledgertest.Inventory()); err != nil {
		t.Fatal(err)
	}
	c, err := l.CreateChunk(ctx, dcd.Chunk{Region: ledgertest.Region0, Size: ledgertest.Block})
	if err != nil {
		t.Fatal(err)
	}
	in, err := l.BeginGrant(ctx, c.ID, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := in.Grant
	begun := now
	now = now.Add(time.Second)
	g, err = l.FailGrant(ctx, g.ID, "timeout")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.RecordOrphan(ctx, dcd.Orphan{Host: 1, Tag: cci.NewTag()}); err != nil {
		t.Fatal(err)
	}
	orphans, err := l.Orphans(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type stamps struct{ Chunk, GrantCreated, GrantUpdated, Orphan time.Time }
	want := stamps{begun, begun, now, now}
	got := stamps{c.Created, g.Created, g.Updated, orphans[0].Found}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("time stamps mismatch (-want +got):\n%s", diff)
	}
}

func TestIsBusy(t *testing.T) {
	ctx := t.Context()
	l, path := openTemp(t, Options{})
	defer l.Close()
	// Another process (here: another handle with no busy timeout) cannot
	// write while the ledger holds the write lock.
	conn := l.wc
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(context.Background(), `ROLLBACK`)
	other, err := sql.Open("sqlite", path+"?_busy_timeout=0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	_, err = other.ExecContext(ctx, `BEGIN IMMEDIATE`)
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"locked database", err, true},
		{"wrapped", errors.Join(errors.New("context"), err), true},
		{"domain error", dcd.ErrConflict, false},
		{"nil", nil, false},
	} {
		if got := isBusy(tc.err); got != tc.want {
			t.Errorf("isBusy(%s: %v): got %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestInventoryMissingHostKept(t *testing.T) {
	ctx := t.Context()
	l, _ := openTemp(t, Options{})
	defer l.Close()
	if err := l.SyncInventory(ctx, ledgertest.Inventory()); err != nil {
		t.Fatal(err)
	}
	if err := l.SetHostQuota(ctx, 7, 1<<30); err != nil {
		t.Fatal(err)
	}
	inv := ledgertest.Inventory()
	inv.Hosts = inv.Hosts[:7] // host 7 no longer discovered
	if err := l.SyncInventory(ctx, inv); err != nil {
		t.Fatal(err)
	}
	got, err := l.Host(ctx, 7)
	if err != nil {
		t.Fatalf("Host(7) after it went missing: %v", err)
	}
	want := dcd.Host{ID: 7, Port: 7, Name: "host7", Quota: 1 << 30, LinkUp: false}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Host(7) mismatch (-want +got):\n%s", diff)
	}
}

func TestConflictMessage(t *testing.T) {
	ctx := t.Context()
	l, g := openAdding(t, 2)
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"begin release", func() error { _, err := l.BeginRelease(ctx, g.ID); return err },
			fmt.Sprintf("ledger: begin release %d: grant is adding, want granted or releasing: conflicts with the current state", g.ID)},
		{"complete release", func() error { _, err := l.CompleteRelease(ctx, g.ID); return err },
			fmt.Sprintf("ledger: complete release %d: grant is adding, want releasing: conflicts with the current state", g.ID)},
		{"begin grant", func() error { _, err := l.BeginGrant(ctx, g.Chunk.ID, 2, nil); return err },
			fmt.Sprintf("ledger: begin grant chunk %d host 2: host already has grant %d (adding) of the chunk: conflicts with the current state", g.Chunk.ID, g.ID)},
	} {
		err := tc.call()
		if err == nil {
			t.Errorf("%s: got nil error, want %q", tc.name, tc.want)
			continue
		}
		if got := err.Error(); got != tc.want {
			t.Errorf("%s: got error %q, want %q", tc.name, got, tc.want)
		}
	}
}

// Durable ledgers fsync the WAL after each commit themselves; relaxed
// commits skip that and still land in the same database.
func TestDurability(t *testing.T) {
	for _, tc := range []struct {
		sync    string
		durable bool
	}{{"", true}, {"FULL", true}, {"NORMAL", false}} {
		t.Run(tc.sync, func(t *testing.T) {
			l, path := openTemp(t, Options{Synchronous: tc.sync})
			ctx := t.Context()
			if l.durable != tc.durable {
				t.Errorf("durable = %v, want %v", l.durable, tc.durable)
			}
			if err := l.relaxedTx(ctx, func(tx *Tx) error {
				_, err := tx.ExecContext(ctx, `INSERT INTO meta (key, value) VALUES ('relaxed', 'yes')`)
				return err
			}); err != nil {
				t.Fatalf("relaxedTx: %v", err)
			}
			if err := l.Ping(ctx); err != nil {
				t.Fatalf("Ping: %v", err)
			}
			if _, err := os.Stat(path + "-wal"); err != nil {
				t.Errorf("write-ahead log: %v", err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l2, err := Open(ctx, path, Options{Synchronous: tc.sync})
			if err != nil {
				t.Fatal(err)
			}
			defer l2.Close()
			var v string
			if err := l2.wc.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'relaxed'`).Scan(&v); err != nil || v != "yes" {
				t.Errorf("relaxed commit after reopen: %q, %v; want yes", v, err)
			}
		})
	}
}

func TestHotStatementsPrepared(t *testing.T) {
	l, _ := openTemp(t, Options{})
	defer l.Close()
	for _, q := range hotStatements() {
		if l.stmts[q] == nil {
			t.Errorf("not prepared: %s", q)
		}
	}
}

// TestPlacementMigration: a chunk some host held before chunks were placed
// keeps where the device put it; one nobody held is placed at its next
// grant, beside the first.
func TestPlacementMigration(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "ledger.db")
	if err := migrateRaw(t, path, migrations[:1]); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	const blk = ledgertest.Block
	held := cci.NewTag()
	idle := cci.NewTag()
	for _, q := range []string{
		`INSERT INTO hosts (id, port, name, link_up) VALUES (1, 1, 'Host1', 1)`,
		`INSERT INTO regions (idx, base, length, block_size, sharable, sanitize_on_release) VALUES (0, 0, ` + fmt.Sprint(64*blk) + `, ` + fmt.Sprint(blk) + `, 0, 1)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// The device had put the held chunk at block 3.
	if _, err := db.ExecContext(ctx, `INSERT INTO chunks (id, name, region, size, tag, sharable, created) VALUES (1, 'held', 0, ?, ?, 0, 0), (2, 'idle', 0, ?, ?, 0, 0)`,
		2*blk, held[:], blk, idle[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO grants (id, chunk, host, state, created, updated) VALUES (1, 1, 1, 'granted', 0, 0)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO extents (grant_id, idx, dpa, length, tag, shared_seq) VALUES (1, 0, 0, ?, ?, 0), (1, 1, ?, ?, ?, 0)`,
		blk, held[:], 3*blk, blk, held[:]); err != nil {
		t.Fatal(err)
	}
	db.Close()

	l, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c1, err := l.Chunk(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := []cci.Extent{{DPA: 0, Length: blk, Tag: held}, {DPA: 3 * blk, Length: blk, Tag: held}}
	if diff := cmp.Diff(want, c1.Extents); diff != "" {
		t.Errorf("held chunk's placement after the upgrade (-want +got):\n%s", diff)
	}
	c2, err := l.Chunk(ctx, 2)
	if err != nil || len(c2.Extents) != 0 {
		t.Fatalf("idle chunk before its grant: %v, %v; want no placement yet", c2.Extents, err)
	}
	in, err := l.BeginGrant(ctx, 2, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	want = []cci.Extent{{DPA: blk, Length: blk, Tag: idle}}
	if diff := cmp.Diff(want, in.Chunk.Extents); diff != "" {
		t.Errorf("idle chunk placed at its grant (-want +got):\n%s", diff)
	}
}

// TestGrantAndChunk: the one-snapshot read returns what Grant and Chunk
// return apart, and an unknown grant is ErrNotFound.
func TestGrantAndChunk(t *testing.T) {
	l, _ := openTemp(t, Options{})
	defer l.Close()
	ctx := t.Context()
	if err := l.SyncInventory(ctx, ledgertest.Inventory()); err != nil {
		t.Fatal(err)
	}
	c, err := l.CreateChunk(ctx, dcd.Chunk{Region: ledgertest.Region0, Size: ledgertest.Block})
	if err != nil {
		t.Fatal(err)
	}
	g, err := l.BeginGrant(ctx, c.ID, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantG, err := l.Grant(ctx, g.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantC, err := l.Chunk(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	gotG, gotC, err := l.GrantAndChunk(ctx, g.ID)
	if err != nil {
		t.Fatalf("GrantAndChunk: %v", err)
	}
	if diff := cmp.Diff(wantG, gotG); diff != "" {
		t.Errorf("grant (-Grant +GrantAndChunk):\n%s", diff)
	}
	if diff := cmp.Diff(wantC, gotC); diff != "" {
		t.Errorf("chunk (-Chunk +GrantAndChunk):\n%s", diff)
	}
	if _, _, err := l.GrantAndChunk(ctx, g.ID+100); !errors.Is(err, dcd.ErrNotFound) {
		t.Errorf("unknown grant: got %v, want ErrNotFound", err)
	}
}
