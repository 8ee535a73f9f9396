package sqlite

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/dcd"
	"cxlpool/dcd/ledgertest"
)

// holdWriter runs a write transaction that waits for release, so the
// transactions started meanwhile queue behind it; it returns once the
// writer is held.
func holdWriter(t *testing.T, l *Ledger) (release func(), done <-chan error) {
	t.Helper()
	held, rel := make(chan struct{}), make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		_, err := l.run(context.Background(), nil, func(tx *Tx) error {
			close(held)
			<-rel
			return nil
		})
		errc <- err
	}()
	<-held
	return func() { close(rel) }, errc
}

// waitQueued polls (bounded) until n transactions queue for the writer.
func waitQueued(t *testing.T, l *Ledger, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l.w.mu.Lock()
		got := len(l.w.queue)
		l.w.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d transactions queued, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func metaValue(t *testing.T, l *Ledger, key string) (string, bool) {
	t.Helper()
	var v string
	err := l.rdb.QueryRowContext(t.Context(), `SELECT value FROM meta WHERE key = ?`, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return v, true
}

// TestBatchKeepsTransactionsApart: transactions queued together commit in
// one SQLite transaction (one commit number), a failing one is rolled back
// alone and never seen by the next, and one whose caller gave up while
// queued does not run at all.
func TestBatchKeepsTransactionsApart(t *testing.T) {
	l, _ := openTemp(t, Options{})
	defer l.Close()
	release, held := holdWriter(t, l)

	type outcome struct {
		seq uint64
		err error
	}
	errRefused := errors.New("refused by its own rule")
	gone, cancel := context.WithCancel(context.Background())
	var sawB bool
	jobs := []struct {
		name string
		ctx  context.Context
		fn   func(*Tx) error
	}{
		{"a", context.Background(), func(tx *Tx) error {
			_, err := tx.ExecContext(gone, `INSERT INTO meta (key, value) VALUES ('a', 'x')`)
			return err
		}},
		{"b", context.Background(), func(tx *Tx) error {
			if _, err := tx.ExecContext(t.Context(), `INSERT INTO meta (key, value) VALUES ('b', 'x')`); err != nil {
				return err
			}
			return errRefused
		}},
		{"gone", gone, func(tx *Tx) error {
			_, err := tx.ExecContext(t.Context(), `INSERT INTO meta (key, value) VALUES ('gone', 'x')`)
			return err
		}},
		{"c", context.Background(), func(tx *Tx) error {
			var n int
			if err := tx.QueryRowContext(t.Context(), `SELECT count(*) FROM meta WHERE key = 'b'`).Scan(&n); err != nil {
				return err
			}
			sawB = n > 0
			_, err := tx.ExecContext(t.Context(), `INSERT INTO meta (key, value) VALUES ('c', 'x')`)
			return err
		}},
	}
	out := make([]outcome, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seq, err := l.run(j.ctx, nil, j.fn)
			out[i] = outcome{seq, err}
		}()
		waitQueued(t, l, i+1) // in this order
	}
	// Job a's statement runs under the cancelled context, and must not be
	// interrupted by it: the batch does not follow any caller's context.
	cancel()
	release()
	if err := <-held; err != nil {
		t.Fatalf("the holding transaction: %v", err)
	}
	wg.Wait()

	if out[0].err != nil || out[3].err != nil {
		t.Fatalf("a: %v, c: %v; want both committed", out[0].err, out[3].err)
	}
	if out[0].seq != out[3].seq || out[0].seq == 0 {
		t.Errorf("commit numbers a %d, c %d: want one batch's", out[0].seq, out[3].seq)
	}
	if !errors.Is(out[1].err, errRefused) {
		t.Errorf("b: %v, want its own error", out[1].err)
	}
	if !errors.Is(out[2].err, context.Canceled) {
		t.Errorf("a transaction whose caller gave up while queued: %v, want context.Canceled", out[2].err)
	}
	if sawB {
		t.Error("the transaction after a failed one saw its change")
	}
	got := map[string]bool{}
	for _, k := range []string{"a", "b", "gone", "c"} {
		_, got[k] = metaValue(t, l, k)
	}
	if diff := cmp.Diff(map[string]bool{"a": true, "b": false, "gone": false, "c": true}, got); diff != "" {
		t.Errorf("committed keys (-want +got):\n%s", diff)
	}
}

// TestBatchFailsAsOne: when the batch itself fails (SQLite ended the
// transaction under it), no transaction of it is committed and each
// caller is told.
func TestBatchFailsAsOne(t *testing.T) {
	l, _ := openTemp(t, Options{})
	defer l.Close()
	release, held := holdWriter(t, l)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, fn := range []func(*Tx) error{
		func(tx *Tx) error {
			_, err := tx.ExecContext(t.Context(), `INSERT INTO meta (key, value) VALUES ('first', 'x')`)
			return err
		},
		func(tx *Tx) error {
			// What an I/O error or a full disk does: SQLite ends the
			// whole transaction itself, savepoints and all.
			if _, err := tx.ExecContext(t.Context(), `ROLLBACK`); err != nil {
				return err
			}
			return errors.New("the disk failed")
		},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = l.run(context.Background(), nil, fn)
		}()
		waitQueued(t, l, i+1)
	}
	release()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if errs[0] == nil || errs[1] == nil {
		t.Errorf("errors %v, %v: want both told the batch failed", errs[0], errs[1])
	}
	if _, ok := metaValue(t, l, "first"); ok {
		t.Error("a transaction of a failed batch was committed")
	}
	// The writer is free again.
	if err := l.Ping(t.Context()); err != nil {
		t.Fatalf("Ping after a failed batch: %v", err)
	}
}

const envBatchChild = "CXLPOOL_BATCH_CHILD"

func TestMain(m *testing.M) {
	if path := os.Getenv(envBatchChild); path != "" {
		if err := batchChild(path); err != nil {
			fmt.Fprintln(os.Stderr, "batch child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// batchChild grants chunks from 8 hosts at once, printing each grant once
// BeginGrant has returned (durable), until it is killed.
func batchChild(path string) error {
	ctx := context.Background()
	l, err := Open(ctx, path, Options{})
	if err != nil {
		return err
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	errc := make(chan error, ledgertest.NumHosts)
	for h := range ledgertest.NumHosts {
		go func() {
			for {
				c, err := l.CreateChunk(ctx, dcd.Chunk{Region: 2, Size: ledgertest.Block})
				if err != nil {
					errc <- err
					return
				}
				g, err := l.BeginGrant(ctx, c.ID, dcd.HostID(h), nil)
				if err != nil {
					errc <- err
					return
				}
				mu.Lock()
				fmt.Fprintf(out, "ack %d %d %d\n", g.ID, g.Grant.Chunk, g.Host)
				out.Flush()
				mu.Unlock()
			}
		}()
	}
	return <-errc
}

// TestCrashDuringBatchesKeepsAcknowledgedGrants kills (SIGKILL) a process
// that grants from 8 hosts at once, so that their intents share batches,
// and checks after reopening that every grant it acknowledged is in the
// ledger as acknowledged, and that ids are not reused after the restart.
func TestCrashDuringBatchesKeepsAcknowledgedGrants(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	path := filepath.Join(t.TempDir(), "ledger.db")
	setup, err := Open(t.Context(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	inv := ledgertest.Inventory()
	inv.Regions = append(inv.Regions, dcd.Region{Index: 2, Base: 1 << 40, Length: 1 << 40, BlockSize: ledgertest.Block})
	if err := setup.SyncInventory(t.Context(), inv); err != nil {
		t.Fatal(err)
	}
	if err := setup.Close(); err != nil {
		t.Fatal(err)
	}

	acked := map[dcd.GrantID]dcd.Grant{}
	var maxID dcd.GrantID
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envBatchChild+"="+path)
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		n := 0
		for sc.Scan() && n < 150+50*round { // kill in the middle of the storm
			f := strings.Fields(sc.Text())
			if len(f) != 4 || f[0] != "ack" {
				t.Fatalf("child said %q", sc.Text())
			}
			id, _ := strconv.ParseInt(f[1], 10, 64)
			chunk, _ := strconv.ParseInt(f[2], 10, 64)
			host, _ := strconv.ParseInt(f[3], 10, 64)
			g := dcd.Grant{ID: dcd.GrantID(id), Chunk: dcd.ChunkID(chunk), Host: dcd.HostID(host), State: dcd.GrantAdding}
			if _, seen := acked[g.ID]; g.ID <= maxID && !seen {
				t.Errorf("round %d: grant id %d reused after a restart (ids up to %d were given before)", round, g.ID, maxID)
			}
			acked[g.ID] = g
			n++
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()

		l, err := Open(t.Context(), path, Options{})
		if err != nil {
			t.Fatalf("reopen after the kill: %v", err)
		}
		grants, err := l.Grants(t.Context(), dcd.GrantFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		have := map[dcd.GrantID]dcd.Grant{}
		for _, g := range grants {
			have[g.ID] = dcd.Grant{ID: g.ID, Chunk: g.Chunk, Host: g.Host, State: g.State}
			maxID = max(maxID, g.ID)
		}
		for id, want := range acked {
			if got := have[id]; !cmp.Equal(got, want) {
				t.Errorf("round %d: acknowledged grant %d: got %+v after the restart, want %+v", round, id, got, want)
			}
		}
	}
	if len(acked) == 0 {
		t.Fatal("the child acknowledged no grant")
	}
}

// TestReadOnWriter: a read run on the writer's connection sees what was
// committed before it, and, queued in a batch, what the batch's earlier
// transactions changed; its answer comes only once that batch committed,
// so a batch that fails never shows it a change that was then lost.
func TestReadOnWriter(t *testing.T) {
	readKey := func(key string, got *string) func(*Tx) error {
		return func(tx *Tx) error {
			return tx.QueryRowContext(t.Context(), `SELECT value FROM meta WHERE key = ?`, key).Scan(got)
		}
	}
	insert := func(key string) func(*Tx) error {
		return func(tx *Tx) error {
			_, err := tx.ExecContext(t.Context(), `INSERT INTO meta (key, value) VALUES (?, 'x')`, key)
			return err
		}
	}
	t.Run("alone", func(t *testing.T) {
		l, _ := openTemp(t, Options{})
		defer l.Close()
		if _, err := l.run(t.Context(), nil, insert("k")); err != nil {
			t.Fatal(err)
		}
		var got string
		if err := l.readOnWriter(t.Context(), readKey("k", &got)); err != nil || got != "x" {
			t.Fatalf("read = %q, %v; want x, nil", got, err)
		}
		err := l.readOnWriter(t.Context(), readKey("missing", &got))
		if !errors.Is(err, sql.ErrNoRows) {
			t.Errorf("read of a missing row: %v, want sql.ErrNoRows", err)
		}
		// The writer is free after a failed read.
		if err := l.Ping(t.Context()); err != nil {
			t.Fatalf("Ping after a failed read: %v", err)
		}
	})
	for _, tc := range []struct {
		name       string
		batchFails bool
	}{
		{"in a batch that commits", false},
		{"in a batch that fails", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := openTemp(t, Options{})
			defer l.Close()
			release, held := holdWriter(t, l)
			var got string
			var readErr error
			committedWhenTold := false
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = l.run(context.Background(), nil, insert("k"))
			}()
			waitQueued(t, l, 1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				readErr = l.readOnWriter(context.Background(), readKey("k", &got))
				if readErr == nil {
					_, committedWhenTold = metaValue(t, l, "k")
				}
			}()
			waitQueued(t, l, 2)
			if tc.batchFails {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, _ = l.run(context.Background(), nil, func(tx *Tx) error {
						// SQLite ending the whole transaction, as an I/O
						// error does.
						if _, err := tx.ExecContext(t.Context(), `ROLLBACK`); err != nil {
							return err
						}
						return errors.New("the disk failed")
					})
				}()
				waitQueued(t, l, 3)
			}
			release()
			if err := <-held; err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			if tc.batchFails {
				if readErr == nil {
					t.Errorf("read in a failed batch = %q, nil; want the batch's error", got)
				}
				if _, ok := metaValue(t, l, "k"); ok {
					t.Error("the failed batch's write was committed")
				}
				return
			}
			if readErr != nil || got != "x" {
				t.Fatalf("read = %q, %v; want the earlier transaction's x", got, readErr)
			}
			if !committedWhenTold {
				t.Error("the read was answered before its batch committed")
			}
		})
	}
}

// TestWriteCallerGivesUp: the writer's statements do not follow the
// caller's context (runWrite), yet a caller that gives up while its
// transaction runs still has it rolled back, never committed.
func TestWriteCallerGivesUp(t *testing.T) {
	l, _ := openTemp(t, Options{})
	defer l.Close()
	ctx, cancel := context.WithCancel(t.Context())
	ran := false
	_, err := l.run(ctx, nil, func(tx *Tx) error {
		cancel()
		// Runs although the caller gave up: a statement is not interrupted.
		if _, err := tx.ExecContext(ctx, `INSERT INTO meta (key, value) VALUES ('k', 'x')`); err != nil {
			return err
		}
		ran = true
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("run = %v, want context.Canceled", err)
	}
	if !ran {
		t.Error("the statement after the caller gave up was interrupted")
	}
	if _, ok := metaValue(t, l, "k"); ok {
		t.Error("a transaction whose caller gave up was committed")
	}
	if err := l.Ping(t.Context()); err != nil {
		t.Fatalf("Ping after it: %v", err)
	}
}
