package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"

	"cxlpool/dcd"
)

// metaDefaultQuota is the meta key of the administrator's default host
// quota in bytes ("0": no limit). Without it the default is a fair share.
const metaDefaultQuota = "default_host_quota"

// DefaultHostQuota is the quota of hosts that have none of their own: the
// administrator's setting if one was made, else a fair share of the pool
// (its regions' length over the number of heads, in whole MiB).
func (l *Ledger) DefaultHostQuota(ctx context.Context) (dcd.DefaultQuota, error) {
	var d dcd.DefaultQuota
	err := l.read(ctx, func(tx *Tx) error {
		var err error
		d, err = defaultQuota(ctx, tx)
		return err
	})
	if err != nil {
		return d, fmt.Errorf("ledger: default host quota: %w", err)
	}
	return d, nil
}

// SetDefaultHostQuota sets the default quota in bytes (0: no limit).
func (l *Ledger) SetDefaultHostQuota(ctx context.Context, quota uint64) error {
	err := l.tx(ctx, func(tx *Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO meta (key, value) VALUES (?, ?)
			ON CONFLICT (key) DO UPDATE SET value = excluded.value`, metaDefaultQuota, strconv.FormatUint(quota, 10))
		return err
	})
	if err != nil {
		return fmt.Errorf("ledger: set default host quota %d: %w", quota, err)
	}
	return nil
}

func defaultQuota(ctx context.Context, tx *Tx) (dcd.DefaultQuota, error) {
	var v string
	err := tx.QueryRowContext(ctx, qMeta, metaDefaultQuota).Scan(&v)
	if err == nil {
		n, perr := strconv.ParseUint(v, 10, 64)
		if perr != nil {
			return dcd.DefaultQuota{}, fmt.Errorf("stored default quota %q: %w", v, perr)
		}
		return dcd.DefaultQuota{Bytes: n}, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return dcd.DefaultQuota{}, err
	}
	var pool, heads int64
	if err := tx.QueryRowContext(ctx, qPoolLength).Scan(&pool); err != nil {
		return dcd.DefaultQuota{}, err
	}
	if err := tx.QueryRowContext(ctx, qHeads).Scan(&heads); err != nil {
		return dcd.DefaultQuota{}, err
	}
	d := dcd.DefaultQuota{FairShare: true}
	if heads > 0 {
		d.Bytes = u64(pool) / uint64(heads) &^ (1<<20 - 1)
	}
	return d, nil
}
