package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"

	"cxlpool/dcd"
	"cxlpool/fabric/cci"
)

// CreateChunk reserves c.Size bytes in region c.Region. The admission check
// and the insert are one transaction, so two concurrent requests cannot both
// take the last free bytes. A zero c.Tag gets a fresh one; ID and Created are
// filled in.
func (l *Ledger) CreateChunk(ctx context.Context, c dcd.Chunk) (dcd.Chunk, error) {
	err := l.tx(ctx, func(tx *Tx) error {
		r, err := scanRegion(tx.QueryRowContext(ctx, qRegion, c.Region))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("unknown region: %w", dcd.ErrInvalid)
		}
		if err != nil {
			return err
		}
		if c.Size == 0 || c.Size%r.BlockSize != 0 || c.Size > math.MaxInt64 {
			return fmt.Errorf("size must be a positive multiple of the block size %d: %w", r.BlockSize, dcd.ErrInvalid)
		}
		if c.Sharable && !r.Sharable {
			// Both: the request is invalid, and why is that sharing is
			// not possible there.
			return fmt.Errorf("region is not sharable: %w: %w", dcd.ErrNotSharable, dcd.ErrInvalid)
		}
		v, err := busySpans(ctx, tx, r)
		if err != nil {
			return err
		}
		if free := regionFree(r, v); c.Size > free {
			return fmt.Errorf("%d bytes free in the region: %w", free, dcd.ErrNoCapacity)
		}
		spans, err := place(r, c.Size, v.busy)
		if err != nil {
			return err
		}
		if c.Tag.IsZero() {
			c.Tag = cci.NewTag()
		} else {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM chunks WHERE tag = ?`, c.Tag[:]).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return fmt.Errorf("tag %s already used: %w", c.Tag, dcd.ErrConflict)
			}
		}
		c.Created = l.now()
		res, err := tx.ExecContext(ctx, qInsertChunk,
			c.Name, c.Region, i64(c.Size), c.Tag[:], boolInt(c.Sharable), unixNano(c.Created))
		if err != nil {
			return err
		}
		id, err := res.LastInsertId()
		if err != nil {
			return err
		}
		c.ID = dcd.ChunkID(id)
		c.Extents = placementExtents(c, spans)
		return insertPlacement(ctx, tx, c.ID, spans)
	})
	if err != nil {
		return dcd.Chunk{}, fmt.Errorf("ledger: create chunk %q region %d size %d: %w", c.Name, c.Region, c.Size, err)
	}
	return c, nil
}

// regionFree is the region's length minus what its live chunks reserve
// and the orphaned extents that fall inside it (orphaned capacity is never
// handed out).
func regionFree(r dcd.Region, v busyView) uint64 {
	used := v.reserved
	for _, o := range v.orphans {
		used = addSat(used, overlap(o.dpa, o.length, r.Base, r.Length))
	}
	if used >= r.Length {
		return 0
	}
	return r.Length - used
}

// overlap is the length of [a, a+alen) ∩ [b, b+blen), saturating at the top
// of the address space.
func overlap(a, alen, b, blen uint64) uint64 {
	lo, hi := max(a, b), min(addSat(a, alen), addSat(b, blen))
	if hi <= lo {
		return 0
	}
	return hi - lo
}

func addSat(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}

const chunkColumns = `id, name, region, size, tag, sharable, created`

func scanChunk(row interface{ Scan(...any) error }) (dcd.Chunk, error) {
	var c dcd.Chunk
	var size, created int64
	var tag []byte
	if err := row.Scan(&c.ID, &c.Name, &c.Region, &size, &tag, &c.Sharable, &created); err != nil {
		return dcd.Chunk{}, err
	}
	var err error
	c.Tag, err = toTag(tag)
	c.Size, c.Created = u64(size), fromNano(created)
	return c, err
}

func toTag(b []byte) (cci.Tag, error) {
	var t cci.Tag
	if len(b) != len(t) {
		return t, fmt.Errorf("stored tag has %d bytes, want %d", len(b), len(t))
	}
	copy(t[:], b)
	return t, nil
}

// getChunk returns a live chunk, or dcd.ErrNotFound for an unknown or
// deleted one.
func getChunk(ctx context.Context, tx *Tx, id dcd.ChunkID) (dcd.Chunk, error) {
	c, err := scanChunk(tx.QueryRowContext(ctx, qChunk, id))
	if errors.Is(err, sql.ErrNoRows) {
		err = dcd.ErrNotFound
	}
	if err == nil {
		err = loadPlacement(ctx, tx, &c)
	}
	if err != nil {
		return dcd.Chunk{}, fmt.Errorf("chunk %d: %w", id, err)
	}
	return c, nil
}

// Chunk returns a live chunk, or dcd.ErrNotFound.
func (l *Ledger) Chunk(ctx context.Context, id dcd.ChunkID) (dcd.Chunk, error) {
	var c dcd.Chunk
	err := l.read(ctx, func(tx *Tx) error {
		var err error
		c, err = getChunk(ctx, tx, id)
		return err
	})
	if err != nil {
		return dcd.Chunk{}, fmt.Errorf("ledger: %w", err)
	}
	return c, nil
}

// ChunkByTag returns the live chunk tagged tag, or dcd.ErrNotFound.
func (l *Ledger) ChunkByTag(ctx context.Context, tag cci.Tag) (dcd.Chunk, error) {
	var c dcd.Chunk
	err := l.read(ctx, func(tx *Tx) error {
		var err error
		c, err = scanChunk(tx.QueryRowContext(ctx, qChunkByTag, tag[:]))
		if errors.Is(err, sql.ErrNoRows) {
			err = dcd.ErrNotFound
		}
		if err == nil {
			err = loadPlacement(ctx, tx, &c)
		}
		return err
	})
	if err != nil {
		return dcd.Chunk{}, fmt.Errorf("ledger: chunk tagged %s: %w", tag, err)
	}
	return c, nil
}

// Chunks returns the live chunks by ID.
func (l *Ledger) Chunks(ctx context.Context) ([]dcd.Chunk, error) {
	var chunks []dcd.Chunk
	err := l.read(ctx, func(tx *Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT `+chunkColumns+` FROM chunks WHERE deleted IS NULL ORDER BY id`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			c, err := scanChunk(rows)
			if err != nil {
				return err
			}
			chunks = append(chunks, c)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return loadPlacements(ctx, tx, chunks)
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: chunks: %w", err)
	}
	return chunks, nil
}

// DeleteChunk frees a chunk's reservation. The row stays (deleted) so its
// grants keep their history and its tag is never issued again.
func (l *Ledger) DeleteChunk(ctx context.Context, id dcd.ChunkID) error {
	err := l.tx(ctx, func(tx *Tx) error {
		// The common case in one statement; only a delete it refuses
		// reads why (the chunk is unknown, or has active grants).
		res, err := tx.ExecContext(ctx, qDeleteChunk, unixNano(l.now()), id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return err
		}
		if _, err := getChunk(ctx, tx, id); err != nil {
			return err
		}
		var active int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM grants WHERE chunk = ? AND state IN `+activeStates,
			id).Scan(&active); err != nil {
			return err
		}
		if active > 0 {
			return fmt.Errorf("%d active grants: %w", active, dcd.ErrConflict)
		}
		// Live and without active grants, yet not deleted: impossible
		// inside one transaction.
		return errors.New("chunk is live with no active grant but was not deleted")
	})
	if err != nil {
		return fmt.Errorf("ledger: delete chunk %d: %w", id, err)
	}
	return nil
}

// loadPlacements fills the placement of every chunk in chunks (sorted by
// ID) with one query.
func loadPlacements(ctx context.Context, tx *Tx, chunks []dcd.Chunk) error {
	rows, err := tx.QueryContext(ctx, `SELECT ce.chunk, ce.dpa, ce.length FROM chunk_extents ce
		JOIN chunks c ON c.id = ce.chunk WHERE c.deleted IS NULL ORDER BY ce.chunk, ce.idx`)
	if err != nil {
		return fmt.Errorf("placements: %w", err)
	}
	defer rows.Close()
	spans := make(map[dcd.ChunkID][]span)
	for rows.Next() {
		var id dcd.ChunkID
		var dpa, length int64
		if err := rows.Scan(&id, &dpa, &length); err != nil {
			return fmt.Errorf("placements: %w", err)
		}
		spans[id] = append(spans[id], span{u64(dpa), u64(length)})
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("placements: %w", err)
	}
	for i := range chunks {
		chunks[i].Extents = placementExtents(chunks[i], spans[chunks[i].ID])
	}
	return nil
}
