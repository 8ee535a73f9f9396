package sqlite

import (
	"context"
	"fmt"

	"cxlpool/dcd"
	"cxlpool/fabric/cci"
)

// RecordOrphan remembers capacity the device holds under a tag no ledger row
// explains. Recording the same host and tag again replaces the extents and
// keeps the first Found time; a zero o.Found means now.
func (l *Ledger) RecordOrphan(ctx context.Context, o dcd.Orphan) error {
	err := l.tx(ctx, func(tx *Tx) error {
		if _, err := getHost(ctx, tx, o.Host); err != nil {
			return err
		}
		found := o.Found
		if found.IsZero() {
			found = l.now()
		}
		var id int64
		if err := tx.QueryRowContext(ctx, `INSERT INTO orphans (host, tag, found) VALUES (?, ?, ?)
			ON CONFLICT (host, tag) DO UPDATE SET host = excluded.host
			RETURNING id`, o.Host, o.Tag[:], unixNano(found)).Scan(&id); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM orphan_extents WHERE orphan_id = ?`, id); err != nil {
			return err
		}
		for i, e := range o.Extents {
			if _, err := tx.ExecContext(ctx, `INSERT INTO orphan_extents (orphan_id, idx, dpa, length, tag, shared_seq) VALUES (?, ?, ?, ?, ?, ?)`,
				id, i, i64(e.DPA), i64(e.Length), e.Tag[:], e.SharedSeq); err != nil {
				return fmt.Errorf("extent %d: %w", i, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ledger: record orphan host %d tag %s: %w", o.Host, o.Tag, err)
	}
	return nil
}

// ClearOrphan forgets an orphan once the device released it; an unknown
// host and tag is dcd.ErrNotFound.
func (l *Ledger) ClearOrphan(ctx context.Context, host dcd.HostID, tag cci.Tag) error {
	err := l.tx(ctx, func(tx *Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM orphans WHERE host = ? AND tag = ?`, host, tag[:])
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return dcd.ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ledger: clear orphan host %d tag %s: %w", host, tag, err)
	}
	return nil
}

// Orphans returns the recorded orphans in the order they were first found.
func (l *Ledger) Orphans(ctx context.Context) ([]dcd.Orphan, error) {
	var orphans []dcd.Orphan
	err := l.read(ctx, func(tx *Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT id, host, tag, found FROM orphans ORDER BY id`)
		if err != nil {
			return err
		}
		defer rows.Close()
		index := make(map[int64]int)
		for rows.Next() {
			var id, found int64
			var o dcd.Orphan
			var tag []byte
			if err := rows.Scan(&id, &o.Host, &tag, &found); err != nil {
				return err
			}
			if o.Tag, err = toTag(tag); err != nil {
				return err
			}
			o.Found = fromNano(found)
			index[id] = len(orphans)
			orphans = append(orphans, o)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		ext, err := tx.QueryContext(ctx, `SELECT orphan_id, dpa, length, tag, shared_seq FROM orphan_extents ORDER BY orphan_id, idx`)
		if err != nil {
			return fmt.Errorf("extents: %w", err)
		}
		defer ext.Close()
		for ext.Next() {
			var id int64
			e, err := scanExtent(ext, &id)
			if err != nil {
				return fmt.Errorf("extents: %w", err)
			}
			if i, ok := index[id]; ok {
				orphans[i].Extents = append(orphans[i].Extents, e)
			}
		}
		return ext.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: orphans: %w", err)
	}
	return orphans, nil
}
