package sqlite

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Write transactions that arrive while the writer is busy run together in
// one SQLite transaction (a batch), each inside its own savepoint: with
// several hosts granting and releasing at once, the writer is what they
// queue for, and a commit (the WAL frames of every page the transaction
// dirtied, the wal-index, the locks) costs more than most of the
// transactions themselves. A batch commits its pages once, however many
// callers changed them.
//
// What each caller sees is what it saw alone:
//   - its fn runs once per attempt against everything committed before
//     and the batch's earlier transactions, as if they had committed
//     just before (they are serialized, as on one connection);
//   - a fn that fails is rolled back to its savepoint: the batch's other
//     transactions are neither rolled back nor shown its changes;
//   - its commit number is the batch's, taken after COMMIT returned, so a
//     durable caller still waits for an fsync that began after its change
//     was committed (makeDurable);
//   - a failure of the batch itself (BEGIN, COMMIT, a savepoint) fails or
//     retries every transaction in it, none committed: no partial state.
//
// A caller whose transaction is alone in the queue runs it exactly as
// before batching (no savepoint, its own context), so a lone grant pays
// nothing for this.

// maxBatch bounds how many transactions share one SQLite transaction, so
// the first of them does not wait behind an unbounded queue.
const maxBatch = 16

// Savepoint statements of a batch: one savepoint at a time, released
// before the next transaction's, so one name serves all.
const (
	qSavepoint  = `SAVEPOINT batch_job`
	qRollbackTo = `ROLLBACK TO batch_job`
	qReleaseSP  = `RELEASE batch_job`
)

// writer is the queue of write transactions waiting for the connection.
// One caller at a time leads: it runs the queue's head as a batch, then
// hands the lead to the first caller still queued.
type writer struct {
	mu      sync.Mutex
	queue   []*writeJob
	leading bool
}

// writeJob is one caller's write transaction, or a read that runs on the
// writer's connection (readOnWriter).
type writeJob struct {
	ctx  context.Context
	fn   func(*Tx) error
	done chan writeResult // buffered: the leader never blocks on it
	read bool             // fn only reads: no savepoint, no write lock alone
	// queued, if set, is called once the job is in the queue: every write
	// queued after it runs after it (writeQueued).
	queued func()
}

// writeResult ends a job's wait: its outcome, or the lead of the next batch.
type writeResult struct {
	lead bool
	seq  uint64
	err  error
}

// write runs fn in a write transaction, alone or in a batch, and returns
// its commit number.
func (l *Ledger) write(ctx context.Context, fn func(*Tx) error) (uint64, error) {
	return l.enqueue(&writeJob{ctx: ctx, fn: fn, done: make(chan writeResult, 1)})
}

// writeQueued is write calling queued once fn's transaction is in the
// writer's queue, before it runs: any write queued after that call runs
// after fn's, so a caller may act on fn's result (tell someone) while it
// commits, as long as reads are fenced (readFence).
func (l *Ledger) writeQueued(ctx context.Context, fn func(*Tx) error, queued func()) (uint64, error) {
	return l.enqueue(&writeJob{ctx: ctx, fn: fn, done: make(chan writeResult, 1), queued: queued})
}

// readOnWriter runs fn, which only reads, on the writer's connection: alone
// in a deferred read transaction, or inside the batch being committed,
// after the writes queued before it. A read on a reader connection after
// any commit finds its page cache dropped (in WAL mode SQLite discards a
// connection's whole cache when the database changed) and reads every page
// it touches again, which made the release path's one read cost more CPU
// than its write; the writer's cache is current. Its answer is given once
// the batch has committed, so it never reports a batch-mate's change that
// was then lost, and a retried batch runs fn again. It is for the reads of
// the grant and release flows, which queue for the writer anyway, never
// for the API's reads: those must not queue in front of the writes.
func (l *Ledger) readOnWriter(ctx context.Context, fn func(*Tx) error) error {
	_, err := l.enqueue(&writeJob{ctx: ctx, fn: fn, done: make(chan writeResult, 1), read: true})
	return err
}

// enqueue runs j, alone or in a batch, and returns its commit number.
func (l *Ledger) enqueue(j *writeJob) (uint64, error) {
	w := &l.w
	w.mu.Lock()
	w.queue = append(w.queue, j)
	lead := !w.leading
	w.leading = true
	w.mu.Unlock()
	if j.queued != nil {
		j.queued()
	}
	if !lead {
		// Not on ctx: once queued, the job runs or is refused by the
		// leader (which checks ctx first), never left half done.
		if r := <-j.done; !r.lead {
			return r.seq, r.err
		}
	}
	// Leading: j is the queue's head.
	w.mu.Lock()
	n := min(len(w.queue), maxBatch)
	batch := make([]*writeJob, n)
	copy(batch, w.queue)
	w.queue = append(w.queue[:0], w.queue[n:]...)
	w.mu.Unlock()

	l.runBatch(batch)

	w.mu.Lock()
	var next *writeJob
	if len(w.queue) > 0 {
		next = w.queue[0]
	} else {
		w.leading = false
	}
	w.mu.Unlock()
	if next != nil {
		next.done <- writeResult{lead: true}
	}
	r := <-j.done
	return r.seq, r.err
}

// runBatch runs the jobs and tells each its outcome.
func (l *Ledger) runBatch(jobs []*writeJob) {
	if len(jobs) == 1 {
		j := jobs[0]
		once := func() (uint64, error) { return l.runOnce(j.ctx, nil, j.fn) }
		if j.read {
			once = func() (uint64, error) { return 0, l.runRead(j.ctx, j.fn) }
		}
		seq, err := l.retryBusy(j.ctx, once)
		j.done <- writeResult{seq: seq, err: err}
		return
	}
	errs := make([]error, len(jobs))
	seq, err := l.retryBusy(context.Background(), func() (uint64, error) { return l.runBatchOnce(jobs, errs) })
	for i, j := range jobs {
		switch {
		case err != nil:
			j.done <- writeResult{err: err}
		case errs[i] != nil:
			j.done <- writeResult{err: errs[i]}
		default:
			j.done <- writeResult{seq: seq}
		}
	}
}

// runBatchOnce runs every job in one transaction, each in a savepoint,
// setting errs[i] for those whose fn failed (rolled back alone), and
// commits. An error is the batch's own: nothing was committed.
func (l *Ledger) runBatchOnce(jobs []*writeJob, errs []error) (uint64, error) {
	// The batch's statements do not follow any one caller's context:
	// one caller giving up must not interrupt (and so roll back) the
	// others' work. A caller's context is checked before its fn runs.
	ctx := context.Background()
	return l.runWrite(ctx, func(tx *Tx) error {
		return l.runJobs(ctx, tx, jobs, errs)
	})
}

// runJobs runs the batch's jobs in tx, each in its savepoint; an error is
// the batch's own.
func (l *Ledger) runJobs(ctx context.Context, tx *Tx, jobs []*writeJob, errs []error) error {
	for i, j := range jobs {
		errs[i] = nil
		if err := j.ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		if j.read {
			// Nothing to undo if it fails; its answer waits for COMMIT.
			errs[i] = j.fn(tx)
			continue
		}
		if _, err := tx.ExecContext(ctx, qSavepoint); err != nil {
			return fmt.Errorf("batch savepoint: %w", err)
		}
		if ferr := j.fn(tx); ferr != nil {
			errs[i] = ferr
			if _, err := tx.ExecContext(ctx, qRollbackTo); err != nil {
				// SQLite rolled the whole transaction back itself (an
				// I/O error, a full disk): the batch fails as one.
				return errors.Join(fmt.Errorf("batch rollback to savepoint: %w", err), ferr)
			}
		}
		if _, err := tx.ExecContext(ctx, qReleaseSP); err != nil {
			return fmt.Errorf("batch release savepoint: %w", err)
		}
	}
	return nil
}

// retryBusy runs once until it succeeds, fails other than with
// SQLITE_BUSY (another process held the lock for longer than the busy
// timeout), or has been retried busyRetries times, backing off linearly.
// once re-runs the transaction from its start, so its fn must not have
// effects outside it.
func (l *Ledger) retryBusy(ctx context.Context, once func() (uint64, error)) (uint64, error) {
	for attempt := 1; ; attempt++ {
		seq, err := once()
		if err == nil || !isBusy(err) || attempt > busyRetries {
			return seq, err
		}
		l.log.Warn("ledger: database busy, retrying transaction", "attempt", attempt, "err", err)
		t := time.NewTimer(time.Duration(attempt) * busyBackoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}
