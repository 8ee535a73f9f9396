package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"cxlpool/dcd"
	"cxlpool/fabric/cci"
)

// activeStates is the SQL list of dcd.GrantState.Active states.
const activeStates = `('adding', 'granted', 'releasing')`

// BeginGrant writes the intent to add chunk to host (state adding). The
// admission checks and the insert are one transaction.
func (l *Ledger) BeginGrant(ctx context.Context, chunk dcd.ChunkID, host dcd.HostID, checked func(dcd.GrantIntent)) (dcd.GrantIntent, error) {
	g, durable, err := l.BeginGrantStaged(ctx, chunk, host, checked)
	if err != nil {
		return g, err
	}
	if err := durable(); err != nil {
		return dcd.GrantIntent{}, err
	}
	return g, nil
}

// BeginGrantStaged is BeginGrant returning as soon as the intent is
// committed (dcd.StagedGranter): durable then returns once it is on disk.
func (l *Ledger) BeginGrantStaged(ctx context.Context, chunk dcd.ChunkID, host dcd.HostID, checked func(dcd.GrantIntent)) (dcd.GrantIntent, func() error, error) {
	var g dcd.GrantIntent
	called := false
	seq, err := l.runDurable(ctx, func(tx *Tx) error {
		if called {
			// The caller already acted on the first attempt's grant id;
			// a re-run would insert another. Fail and let it undo.
			return errRetryAfterChecked
		}
		a, err := admitIntent(ctx, tx, chunk, host)
		if err != nil {
			return err
		}
		c, holders := a.chunk, a.holders
		if len(c.Extents) == 0 && holders == 0 {
			// Reserved before chunks were placed: place it now, so
			// its add is prescriptive like every other.
			if c.Extents, err = placeLate(ctx, tx, c); err != nil {
				return err
			}
		}
		if quota := a.quota; quota > 0 {
			if used := a.held; c.Size > quota || used > quota-c.Size {
				return fmt.Errorf("host holds %d of %d bytes, chunk needs %d: %w", used, quota, c.Size, dcd.ErrQuotaExceeded)
			}
		}
		now := l.now()
		res, err := tx.ExecContext(ctx, qInsertGrant,
			chunk, host, dcd.GrantAdding, unixNano(now), unixNano(now))
		if err != nil {
			return err
		}
		id, err := res.LastInsertId()
		g = dcd.GrantIntent{
			Grant:  dcd.Grant{ID: dcd.GrantID(id), Chunk: chunk, Host: host, State: dcd.GrantAdding, Created: now, Updated: now},
			Chunk:  c,
			Others: holders > 0,
		}
		if err == nil && checked != nil {
			called = true
			checked(g)
		}
		return err
	})
	if err != nil {
		return dcd.GrantIntent{}, nil, fmt.Errorf("ledger: begin grant chunk %d host %d: %w", chunk, host, err)
	}
	durable := func() error {
		if err := l.makeDurable(seq); err != nil {
			return fmt.Errorf("ledger: begin grant chunk %d host %d: %w", chunk, host, err)
		}
		return nil
	}
	return g, durable, nil
}

// errRetryAfterChecked stops a busy retry of a BeginGrant whose caller has
// already been told the checks passed.
var errRetryAfterChecked = errors.New("the database was busy after the device command started")

// AdoptGrant records capacity the device holds for host under chunk's tag
// that no committed intent explains, as granted with exactly extents.
func (l *Ledger) AdoptGrant(ctx context.Context, chunk dcd.ChunkID, host dcd.HostID, extents []cci.Extent) (dcd.Grant, error) {
	var g dcd.Grant
	err := l.tx(ctx, func(tx *Tx) error {
		if _, _, _, err := admit(ctx, tx, chunk, host); err != nil {
			return err
		}
		now := l.now()
		res, err := tx.ExecContext(ctx, `INSERT INTO grants (chunk, host, state, reason, created, updated) VALUES (?, ?, ?, ?, ?, ?)`,
			chunk, host, dcd.GrantGranted, "adopted from the device after a restart", unixNano(now), unixNano(now))
		if err != nil {
			return err
		}
		id, err := res.LastInsertId()
		if err != nil {
			return err
		}
		if err := insertExtents(ctx, tx, dcd.GrantID(id), extents); err != nil {
			return err
		}
		g = dcd.Grant{ID: dcd.GrantID(id), Chunk: chunk, Host: host, State: dcd.GrantGranted,
			Extents: slices.Clone(extents), Reason: "adopted from the device after a restart", Created: now, Updated: now}
		return nil
	})
	if err != nil {
		return dcd.Grant{}, fmt.Errorf("ledger: adopt grant chunk %d host %d: %w", chunk, host, err)
	}
	return g, nil
}

// admit applies the rules every new grant of chunk to host must pass: both
// exist, the host has no active grant of the chunk, and a non-sharable
// chunk has no active grant to another host. It returns how many other
// active grants the chunk has.
func admit(ctx context.Context, tx *Tx, chunk dcd.ChunkID, host dcd.HostID) (dcd.Chunk, dcd.Host, int, error) {
	c, err := getChunk(ctx, tx, chunk)
	if err != nil {
		return c, dcd.Host{}, 0, err
	}
	h, err := getHost(ctx, tx, host)
	if err != nil {
		return c, h, 0, err
	}
	rows, err := tx.QueryContext(ctx, qHolders, chunk)
	if err != nil {
		return c, h, 0, err
	}
	type holder struct {
		id    dcd.GrantID
		host  dcd.HostID
		state dcd.GrantState
	}
	var holders []holder
	for rows.Next() {
		var x holder
		if err := rows.Scan(&x.id, &x.host, &x.state); err != nil {
			rows.Close()
			return c, h, 0, err
		}
		holders = append(holders, x)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return c, h, 0, err
	}
	for _, x := range holders {
		if x.host == host {
			return c, h, 0, fmt.Errorf("host already has grant %d (%s) of the chunk: %w", x.id, x.state, dcd.ErrConflict)
		}
	}
	if len(holders) > 0 && !c.Sharable {
		return c, h, 0, fmt.Errorf("chunk is granted to host %d (grant %d): %w: %w",
			holders[0].host, holders[0].id, dcd.ErrNotSharable, dcd.ErrConflict)
	}
	return c, h, len(holders), nil
}

// intentAdmission is what the intent's transaction reads before it
// inserts: the chunk with its placement, how many active grants it has,
// the host's effective quota and what the host holds.
type intentAdmission struct {
	chunk   dcd.Chunk
	holders int
	quota   uint64 // 0: no limit
	held    uint64
}

// admitIntent applies admit's rules and reads the chunk's placement, the
// host's quota and its holding in one statement (qAdmit) instead of the
// eight the separate lookups take: the intent's transaction is the part of
// a grant that queues for the single writer and comes before its fsync,
// so every statement in it is latency every grant pays. Whenever the rules
// refuse (or a row is missing) it asks admit, whose answer names the
// exact cause, so the errors are those of the separate lookups.
func admitIntent(ctx context.Context, tx *Tx, chunk dcd.ChunkID, host dcd.HostID) (intentAdmission, error) {
	var a intentAdmission
	var size, created, hostQuota, pool, heads int64
	var tag []byte
	var meta, placement sql.NullString
	var hostKnown, holders, mine int
	err := tx.QueryRowContext(ctx, qAdmit, chunk, host).Scan(
		&a.chunk.ID, &a.chunk.Name, &a.chunk.Region, &size, &tag, &a.chunk.Sharable, &created,
		&hostKnown, &hostQuota, &meta, &pool, &heads, &holders, &mine, &placement)
	if errors.Is(err, sql.ErrNoRows) || err == nil && (hostKnown == 0 || mine > 0 || holders > 0 && !a.chunk.Sharable) {
		// Unknown chunk or host, or a conflict: admit says which.
		if _, _, _, aerr := admit(ctx, tx, chunk, host); aerr != nil {
			return a, aerr
		}
		// admit found nothing wrong: the database changed between the
		// two statements, which one write transaction rules out.
		return a, fmt.Errorf("admission of chunk %d for host %d read inconsistent rows", chunk, host)
	}
	if err != nil {
		return a, err
	}
	if a.chunk.Tag, err = toTag(tag); err != nil {
		return a, err
	}
	a.chunk.Size, a.chunk.Created = u64(size), fromNano(created)
	spans, err := parseSpans(placement.String)
	if err != nil {
		return a, fmt.Errorf("chunk %d placement: %w", chunk, err)
	}
	a.chunk.Extents = placementExtents(a.chunk, spans)
	a.holders = holders
	if a.held, err = heldBy(ctx, tx, host); err != nil {
		return a, err
	}
	// The effective quota: the host's own, else the administrator's
	// default, else the fair share (as defaultQuota computes it).
	switch {
	case hostQuota != 0:
		a.quota = u64(hostQuota)
	case meta.Valid:
		n, perr := strconv.ParseUint(meta.String, 10, 64)
		if perr != nil {
			return a, fmt.Errorf("stored default quota %q: %w", meta.String, perr)
		}
		a.quota = n
	case heads > 0:
		a.quota = u64(pool) / uint64(heads) &^ (1<<20 - 1)
	}
	return a, nil
}

// parseSpans reads qAdmit's placement column: "idx dpa length" triples
// of the stored (bit-for-bit int64) values, separated by spaces, in any
// order; "" is none. The spans come back in idx order. The column carries
// idx instead of asking group_concat for ORDER BY idx, which opens a
// temporary b-tree in every grant's admission (a third of that query's
// time when measured alone); sorting a handful of spans here is cheaper.
func parseSpans(s string) ([]span, error) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return nil, nil
	}
	if len(f)%3 != 0 {
		return nil, fmt.Errorf("placement %q: want idx, dpa and length triples", s)
	}
	type indexed struct {
		idx int64
		s   span
	}
	out := make([]indexed, 0, len(f)/3)
	for i := 0; i < len(f); i += 3 {
		var v [3]int64
		for k := range v {
			n, err := strconv.ParseInt(f[i+k], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("placement %q: %w", s, err)
			}
			v[k] = n
		}
		out = append(out, indexed{v[0], span{u64(v[1]), u64(v[2])}})
	}
	slices.SortFunc(out, func(a, b indexed) int { return cmp.Compare(a.idx, b.idx) })
	spans := make([]span, len(out))
	for i, x := range out {
		spans[i] = x.s
	}
	return spans, nil
}

// CompleteGrant moves adding → granted, recording exactly extents.
func (l *Ledger) CompleteGrant(ctx context.Context, id dcd.GrantID, extents []cci.Extent) (dcd.Grant, error) {
	return l.move(ctx, "complete grant", id, move{
		from: fromAdding, to: dcd.GrantGranted,
		setExtents: true, extents: extents, derivable: true,
	})
}

// CompleteGrantQueued is CompleteGrant calling queued, with the grant's new
// Updated time, once the outcome is queued for the writer and before it
// commits (dcd.QueuedCompleter): any write queued after that runs after
// it, and any read that begins after it waits for it (readFence).
func (l *Ledger) CompleteGrantQueued(ctx context.Context, id dcd.GrantID, extents []cci.Extent, queued func(updated time.Time)) (dcd.Grant, error) {
	return l.move(ctx, "complete grant", id, move{
		from: fromAdding, to: dcd.GrantGranted,
		setExtents: true, extents: extents, derivable: true,
		queued: queued,
	})
}

// FailGrant moves adding → failed.
func (l *Ledger) FailGrant(ctx context.Context, id dcd.GrantID, reason string) (dcd.Grant, error) {
	return l.move(ctx, "fail grant", id, move{
		from: fromAdding, to: dcd.GrantFailed,
		setReason: true, reason: reason, derivable: true,
	})
}

// BeginRelease moves granted → releasing; a grant already releasing is
// returned unchanged, so a restarted release can repeat it.
func (l *Ledger) BeginRelease(ctx context.Context, id dcd.GrantID) (dcd.Grant, error) {
	return l.move(ctx, "begin release", id, move{
		from: fromGranted, to: dcd.GrantReleasing, stay: true,
	})
}

// BeginReleaseReason is BeginRelease recording why the release was
// started (dcd.ReasonedReleaser); the reason stays once it is released.
func (l *Ledger) BeginReleaseReason(ctx context.Context, id dcd.GrantID, reason string) (dcd.Grant, error) {
	return l.move(ctx, "begin release", id, move{
		from: fromGranted, to: dcd.GrantReleasing, stay: true,
		setReason: true, reason: reason,
	})
}

// CompleteRelease moves releasing → released. The extents stay as history.
func (l *Ledger) CompleteRelease(ctx context.Context, id dcd.GrantID) (dcd.Grant, error) {
	return l.move(ctx, "complete release", id, move{
		from: fromReleasing, to: dcd.GrantReleased, derivable: true,
	})
}

// MarkLost moves an active grant (adding, granted, releasing) to lost.
func (l *Ledger) MarkLost(ctx context.Context, id dcd.GrantID, reason string) (dcd.Grant, error) {
	return l.move(ctx, "mark lost", id, move{
		from: fromActive, to: dcd.GrantLost,
		setReason: true, reason: reason,
	})
}

// move is one state transition of a grant.
type move struct {
	from       []dcd.GrantState // allowed source states
	to         dcd.GrantState
	stay       bool // a grant already in `to` is returned unchanged
	setReason  bool
	reason     string
	setExtents bool // record the extents (from adding only: it has none yet)
	extents    []cci.Extent
	// derivable marks outcomes that reconcile can rebuild from the device
	// (adding → granted/failed, releasing → released): they commit
	// without waiting for fsync, see relaxedTx.
	derivable bool
	// queued, if set, is called with the grant's new Updated time once a
	// derivable move is in the writer's queue (CompleteGrantQueued).
	queued func(updated time.Time)
}

func (l *Ledger) move(ctx context.Context, op string, id dcd.GrantID, m move) (dcd.Grant, error) {
	if m.setExtents && !slices.Equal(m.from, fromAdding) {
		return dcd.Grant{}, fmt.Errorf("ledger: %s %d: extents are recorded only for a grant leaving adding", op, id)
	}
	var g dcd.Grant
	run := l.tx
	if m.derivable {
		run = l.relaxedTx
	}
	// A move told at queueing records the time it told, in every attempt.
	at := l.now()
	if m.queued != nil {
		if !m.derivable {
			return dcd.Grant{}, fmt.Errorf("ledger: %s %d: only an outcome the device can rebuild is told before it commits", op, id)
		}
		t := l.fence.take()
		defer l.fence.put(t)
		run = func(ctx context.Context, fn func(*Tx) error) error {
			_, err := l.writeQueued(ctx, fn, func() { m.queued(at) })
			return err
		}
	}
	err := run(ctx, func(tx *Tx) error {
		// The common case in one statement: the grant is in a source
		// state, so update it and read it back together. Only when that
		// matches nothing does the slow path find out why.
		now := at
		if m.queued == nil {
			now = l.now()
		}
		g = dcd.Grant{ID: id, State: m.to, Updated: now}
		var created int64
		err := tx.QueryRowContext(ctx, qMove(m.from), m.to, m.setReason, m.reason, unixNano(now), id).
			Scan(&g.Chunk, &g.Host, &g.Reason, &created)
		switch {
		case err == nil:
			g.Created = fromNano(created)
			if m.setExtents {
				// Only a grant leaving adding gets its extents, once,
				// and an adding grant has none (ids are never reused):
				// nothing to delete first, which is one statement fewer
				// in every grant's outcome.
				if err := insertExtents(ctx, tx, id, m.extents); err != nil {
					return err
				}
				g.Extents = slices.Clone(m.extents)
				return nil
			}
			g.Extents, err = getExtents(ctx, tx, id)
			return err
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		if g, err = getGrant(ctx, tx, id); err != nil {
			return err
		}
		if m.stay && g.State == m.to {
			return nil
		}
		if !slices.Contains(m.from, g.State) {
			want := m.from
			if m.stay {
				want = append(slices.Clone(want), m.to)
			}
			return fmt.Errorf("grant is %s, want %s: %w", g.State, joinStates(want), dcd.ErrConflict)
		}
		// The update matched nothing, yet the grant is in a source state:
		// impossible inside one transaction.
		return fmt.Errorf("grant is %s but could not be moved to %s", g.State, m.to)
	})
	if err != nil {
		return dcd.Grant{}, fmt.Errorf("ledger: %s %d: %w", op, id, err)
	}
	return g, nil
}

// insertExtents records a grant's extents in their order.
func insertExtents(ctx context.Context, tx *Tx, id dcd.GrantID, extents []cci.Extent) error {
	for i, e := range extents {
		if _, err := tx.ExecContext(ctx, qInsertExtent,
			id, i, i64(e.DPA), i64(e.Length), e.Tag[:], e.SharedSeq); err != nil {
			return fmt.Errorf("extent %d: %w", i, err)
		}
	}
	return nil
}

func joinStates(states []dcd.GrantState) string {
	s := make([]string, len(states))
	for i, st := range states {
		s[i] = string(st)
	}
	return strings.Join(s, " or ")
}

const grantColumns = `id, chunk, host, state, reason, created, updated`

func scanGrant(row interface{ Scan(...any) error }) (dcd.Grant, error) {
	var g dcd.Grant
	var created, updated int64
	if err := row.Scan(&g.ID, &g.Chunk, &g.Host, &g.State, &g.Reason, &created, &updated); err != nil {
		return dcd.Grant{}, err
	}
	g.Created, g.Updated = fromNano(created), fromNano(updated)
	return g, nil
}

func scanExtent(row interface{ Scan(...any) error }, dest ...any) (cci.Extent, error) {
	var e cci.Extent
	var dpa, length int64
	var tag []byte
	if err := row.Scan(append(dest, &dpa, &length, &tag, &e.SharedSeq)...); err != nil {
		return cci.Extent{}, err
	}
	var err error
	e.Tag, err = toTag(tag)
	e.DPA, e.Length = u64(dpa), u64(length)
	return e, err
}

// getGrant returns one grant with its extents, or dcd.ErrNotFound.
func getGrant(ctx context.Context, tx *Tx, id dcd.GrantID) (dcd.Grant, error) {
	g, err := scanGrant(tx.QueryRowContext(ctx, qGrant, id))
	if errors.Is(err, sql.ErrNoRows) {
		err = dcd.ErrNotFound
	}
	if err != nil {
		return dcd.Grant{}, fmt.Errorf("grant %d: %w", id, err)
	}
	if g.Extents, err = getExtents(ctx, tx, id); err != nil {
		return dcd.Grant{}, err
	}
	return g, nil
}

// getExtents returns a grant's extents in their order.
func getExtents(ctx context.Context, tx *Tx, id dcd.GrantID) ([]cci.Extent, error) {
	rows, err := tx.QueryContext(ctx, qExtents, id)
	if err != nil {
		return nil, fmt.Errorf("grant %d extents: %w", id, err)
	}
	defer rows.Close()
	var out []cci.Extent
	for rows.Next() {
		e, err := scanExtent(rows)
		if err != nil {
			return nil, fmt.Errorf("grant %d extents: %w", id, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("grant %d extents: %w", id, err)
	}
	return out, nil
}

// Grant returns one grant with its extents, or dcd.ErrNotFound.
func (l *Ledger) Grant(ctx context.Context, id dcd.GrantID) (dcd.Grant, error) {
	var g dcd.Grant
	err := l.read(ctx, func(tx *Tx) error {
		var err error
		g, err = getGrant(ctx, tx, id)
		return err
	})
	if err != nil {
		return dcd.Grant{}, fmt.Errorf("ledger: %w", err)
	}
	return g, nil
}

// GrantAndChunk returns grant id and its chunk from one snapshot
// (dcd.GrantChunkReader). It is the release path's read, so it runs on the
// writer's connection (readOnWriter).
func (l *Ledger) GrantAndChunk(ctx context.Context, id dcd.GrantID) (dcd.Grant, dcd.Chunk, error) {
	var g dcd.Grant
	var c dcd.Chunk
	err := l.readOnWriter(ctx, func(tx *Tx) error {
		var err error
		if g, err = getGrant(ctx, tx, id); err != nil {
			return err
		}
		c, err = getChunk(ctx, tx, g.Chunk)
		return err
	})
	if err != nil {
		return dcd.Grant{}, dcd.Chunk{}, fmt.Errorf("ledger: %w", err)
	}
	return g, c, nil
}

// Grants returns the grants f selects, with their extents, by ID.
func (l *Ledger) Grants(ctx context.Context, f dcd.GrantFilter) ([]dcd.Grant, error) {
	var where []string
	var args []any
	if f.Host != nil {
		where, args = append(where, `host = ?`), append(args, *f.Host)
	}
	if f.Chunk != 0 {
		where, args = append(where, `chunk = ?`), append(args, f.Chunk)
	}
	if f.Active {
		where = append(where, `state IN `+activeStates)
	}
	cond := ``
	if len(where) > 0 {
		cond = ` WHERE ` + strings.Join(where, ` AND `)
	}
	qGrants := `SELECT ` + grantColumns + ` FROM grants` + cond + ` ORDER BY id`
	qGrantExtents := `SELECT grant_id, dpa, length, tag, shared_seq FROM extents
			WHERE grant_id IN (SELECT id FROM grants` + cond + `) ORDER BY grant_id, idx`
	if f.Active && f.Host == nil && f.Chunk == 0 {
		// Every active grant (the telemetry's layout, reconcile), from
		// the partial index of active grants, prepared.
		qGrants, qGrantExtents = qActiveGrants, qActiveExtents
	}
	var grants []dcd.Grant
	err := l.read(ctx, func(tx *Tx) error {
		rows, err := tx.QueryContext(ctx, qGrants, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		index := make(map[dcd.GrantID]int)
		for rows.Next() {
			g, err := scanGrant(rows)
			if err != nil {
				return err
			}
			index[g.ID] = len(grants)
			grants = append(grants, g)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		if len(grants) == 0 {
			return nil
		}
		ext, err := tx.QueryContext(ctx, qGrantExtents, args...)
		if err != nil {
			return fmt.Errorf("extents: %w", err)
		}
		defer ext.Close()
		for ext.Next() {
			var id dcd.GrantID
			e, err := scanExtent(ext, &id)
			if err != nil {
				return fmt.Errorf("extents: %w", err)
			}
			if i, ok := index[id]; ok {
				grants[i].Extents = append(grants[i].Extents, e)
			}
		}
		return ext.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: grants: %w", err)
	}
	return grants, nil
}
