package sqlite

import (
	"context"
	"fmt"

	"cxlpool/dcd"
	"cxlpool/fabric/cci"
)

// maxPlacementExtents bounds how many pieces one chunk may be placed in: a
// prescriptive add carries them all, and every piece is an extent the host
// and the device track.
const maxPlacementExtents = 64

// span is a DPA range [dpa, dpa+length).
type span struct{ dpa, length uint64 }

func (s span) end() uint64 { return s.dpa + s.length }

// place chooses where in region r a new chunk of size bytes lives: the
// lowest free blocks, first fit. Blocks are busy while a live chunk is
// placed on them, an active grant holds them (grants of chunks placed
// before placements existed) or an orphan covers them. The choice is made
// inside the transaction that records it, so two reservations never get
// the same blocks.
func place(r dcd.Region, size uint64, busy []span) ([]span, error) {
	var out []span
	need := size
	at := r.Base
	end := r.Base + r.Length
	take := func(lo, hi uint64) {
		// Whole blocks only, counted from the region's base.
		lo = r.Base + (lo-r.Base+r.BlockSize-1)/r.BlockSize*r.BlockSize
		hi = r.Base + (hi-r.Base)/r.BlockSize*r.BlockSize
		if hi <= lo || need == 0 {
			return
		}
		n := min(hi-lo, need)
		if k := len(out); k > 0 && out[k-1].end() == lo {
			out[k-1].length += n
		} else {
			out = append(out, span{lo, n})
		}
		need -= n
	}
	for _, b := range busy {
		if b.dpa > at {
			take(at, min(b.dpa, end))
		}
		at = max(at, b.end())
		if need == 0 || at >= end {
			break
		}
	}
	if at < end {
		take(at, end)
	}
	switch {
	case need > 0:
		return nil, fmt.Errorf("%d bytes free in region %d, %d needed: %w", size-need, r.Index, size, dcd.ErrNoCapacity)
	case len(out) > maxPlacementExtents:
		return nil, fmt.Errorf("region %d's free capacity is in more than %d pieces; delete or release chunks to defragment it: %w",
			r.Index, maxPlacementExtents, dcd.ErrNoCapacity)
	}
	return out, nil
}

// insertPlacement records chunk's placement.
func insertPlacement(ctx context.Context, tx *Tx, chunk dcd.ChunkID, spans []span) error {
	for i, s := range spans {
		if _, err := tx.ExecContext(ctx, qInsertPlacement,
			chunk, i, i64(s.dpa), i64(s.length)); err != nil {
			return fmt.Errorf("placement %d: %w", i, err)
		}
	}
	return nil
}

// placementExtents turns a chunk's spans into the extents a prescriptive
// add sends: each tagged with the chunk's tag, numbered in order for a
// sharable chunk (its shared sequence).
func placementExtents(c dcd.Chunk, spans []span) []cci.Extent {
	if len(spans) == 0 {
		return nil
	}
	out := make([]cci.Extent, len(spans))
	for i, s := range spans {
		out[i] = cci.Extent{DPA: s.dpa, Length: s.length, Tag: c.Tag}
		if c.Sharable {
			out[i].SharedSeq = uint16(i)
		}
	}
	return out
}

// loadPlacement fills c.Extents from the ledger.
func loadPlacement(ctx context.Context, tx *Tx, c *dcd.Chunk) error {
	rows, err := tx.QueryContext(ctx, qChunkExtents, c.ID)
	if err != nil {
		return fmt.Errorf("chunk %d placement: %w", c.ID, err)
	}
	defer rows.Close()
	var spans []span
	for rows.Next() {
		var dpa, length int64
		if err := rows.Scan(&dpa, &length); err != nil {
			return fmt.Errorf("chunk %d placement: %w", c.ID, err)
		}
		spans = append(spans, span{u64(dpa), u64(length)})
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("chunk %d placement: %w", c.ID, err)
	}
	c.Extents = placementExtents(*c, spans)
	return nil
}

// placeLate places a chunk reserved before placements existed.
func placeLate(ctx context.Context, tx *Tx, c dcd.Chunk) ([]cci.Extent, error) {
	r, err := scanRegion(tx.QueryRowContext(ctx, qRegion, c.Region))
	if err != nil {
		return nil, fmt.Errorf("region %d: %w", c.Region, err)
	}
	v, err := busySpans(ctx, tx, r)
	if err != nil {
		return nil, err
	}
	spans, err := place(r, c.Size, v.busy)
	if err != nil {
		return nil, err
	}
	if err := insertPlacement(ctx, tx, c.ID, spans); err != nil {
		return nil, err
	}
	return placementExtents(c, spans), nil
}
