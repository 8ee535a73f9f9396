package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"

	"cxlpool/dcd"
)

// SyncInventory records what discovery found. Hosts are upserted keeping the
// administrator's name and quota (a new host is named "host<N>" unless
// discovery supplied a name); hosts missing from inv are kept, for their
// grant history, but marked link down. Regions are upserted as found. The
// device serial is stored on first sight; a different non-zero serial fails
// with dcd.ErrConflict, because mixing two devices' ledgers would hand out
// capacity that does not exist.
func (l *Ledger) SyncInventory(ctx context.Context, inv dcd.Inventory) error {
	err := l.tx(ctx, func(tx *Tx) error {
		if err := syncSerial(ctx, tx, inv.Serial); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE hosts SET link_up = 0`); err != nil {
			return err
		}
		for _, h := range inv.Hosts {
			name := h.Name
			if name == "" {
				name = fmt.Sprintf("host%d", h.ID)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO hosts (id, port, name, quota, link_up) VALUES (?, ?, ?, ?, ?)
				ON CONFLICT (id) DO UPDATE SET port = excluded.port, link_up = excluded.link_up`,
				h.ID, h.Port, name, i64(h.Quota), boolInt(h.LinkUp)); err != nil {
				return fmt.Errorf("host %d: %w", h.ID, err)
			}
		}
		for _, r := range inv.Regions {
			if r.Index < 0 || r.BlockSize == 0 {
				return fmt.Errorf("region %d: index must be >= 0 and block size > 0: %w", r.Index, dcd.ErrInvalid)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO regions (idx, base, length, block_size, sharable, sanitize_on_release)
				VALUES (?, ?, ?, ?, ?, ?)
				ON CONFLICT (idx) DO UPDATE SET base = excluded.base, length = excluded.length,
					block_size = excluded.block_size, sharable = excluded.sharable,
					sanitize_on_release = excluded.sanitize_on_release`,
				r.Index, i64(r.Base), i64(r.Length), i64(r.BlockSize), boolInt(r.Sharable), boolInt(r.SanitizeOnRelease)); err != nil {
				return fmt.Errorf("region %d: %w", r.Index, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ledger: sync inventory serial %d: %w", inv.Serial, err)
	}
	return nil
}

// syncSerial stores serial, or checks it against the stored one. Zero means
// "unknown" on either side and matches anything.
func syncSerial(ctx context.Context, tx *Tx, serial uint64) error {
	var stored string
	err := tx.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'serial'`).Scan(&stored)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return err
	default:
		old, err := strconv.ParseUint(stored, 10, 64)
		if err != nil {
			return fmt.Errorf("stored serial %q: %w", stored, err)
		}
		if old != 0 && serial != 0 && old != serial {
			return fmt.Errorf("device serial %d differs from the ledger's %d (a different device?): %w",
				serial, old, dcd.ErrConflict)
		}
		if old != 0 || serial == 0 {
			return nil
		}
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO meta (key, value) VALUES ('serial', ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`, strconv.FormatUint(serial, 10))
	return err
}

const hostColumns = `id, port, name, quota, link_up`

func scanHost(row interface{ Scan(...any) error }) (dcd.Host, error) {
	var h dcd.Host
	var quota int64
	if err := row.Scan(&h.ID, &h.Port, &h.Name, &quota, &h.LinkUp); err != nil {
		return dcd.Host{}, err
	}
	h.Quota = u64(quota)
	return h, nil
}

// Hosts returns all known hosts by LD-ID.
func (l *Ledger) Hosts(ctx context.Context) ([]dcd.Host, error) {
	var hosts []dcd.Host
	err := l.read(ctx, func(tx *Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT `+hostColumns+` FROM hosts ORDER BY id`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			h, err := scanHost(rows)
			if err != nil {
				return err
			}
			hosts = append(hosts, h)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: hosts: %w", err)
	}
	return hosts, nil
}

// Host returns one host, or dcd.ErrNotFound.
func (l *Ledger) Host(ctx context.Context, id dcd.HostID) (dcd.Host, error) {
	var h dcd.Host
	err := l.read(ctx, func(tx *Tx) error {
		var err error
		h, err = getHost(ctx, tx, id)
		return err
	})
	if err != nil {
		return dcd.Host{}, fmt.Errorf("ledger: %w", err)
	}
	return h, nil
}

func getHost(ctx context.Context, tx *Tx, id dcd.HostID) (dcd.Host, error) {
	h, err := scanHost(tx.QueryRowContext(ctx, qHost, id))
	if errors.Is(err, sql.ErrNoRows) {
		err = dcd.ErrNotFound
	}
	if err != nil {
		return dcd.Host{}, fmt.Errorf("host %d: %w", id, err)
	}
	return h, nil
}

// SetHostQuota sets a host's quota in bytes (0: the default quota applies). It applies to
// grants begun from now on; existing grants are kept.
func (l *Ledger) SetHostQuota(ctx context.Context, id dcd.HostID, quota uint64) error {
	err := l.tx(ctx, func(tx *Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE hosts SET quota = ? WHERE id = ?`, i64(quota), id)
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
		return fmt.Errorf("ledger: set host %d quota %d: %w", id, quota, err)
	}
	return nil
}

const regionColumns = `idx, base, length, block_size, sharable, sanitize_on_release`

func scanRegion(row interface{ Scan(...any) error }) (dcd.Region, error) {
	var r dcd.Region
	var base, length, block int64
	if err := row.Scan(&r.Index, &base, &length, &block, &r.Sharable, &r.SanitizeOnRelease); err != nil {
		return dcd.Region{}, err
	}
	r.Base, r.Length, r.BlockSize = u64(base), u64(length), u64(block)
	return r, nil
}

// Regions returns all known regions by index.
func (l *Ledger) Regions(ctx context.Context) ([]dcd.Region, error) {
	var regions []dcd.Region
	err := l.read(ctx, func(tx *Tx) error {
		rows, err := tx.QueryContext(ctx, qRegions)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			r, err := scanRegion(rows)
			if err != nil {
				return err
			}
			regions = append(regions, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: regions: %w", err)
	}
	return regions, nil
}
