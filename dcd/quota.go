package dcd

import (
	"context"
	"fmt"
)

// QuotaChanged is the Message of the ChangeHost that SetHostQuota
// publishes, so that subscribers can tell a setting from a link or fence
// state.
const QuotaChanged = "quota changed"

// SetHostQuota sets host's quota in bytes (0: the default quota applies,
// DefaultHostQuota) and tells
// subscribers. The quota limits every grant to the host begun from now on,
// whoever asks for it (the ledger checks it in BeginGrant, under the same
// transaction as the intent); capacity the host already holds is kept even
// above a lowered quota, which then refuses further grants until the host
// is back under it. An unknown host is ErrNotFound.
func (m *Manager) SetHostQuota(ctx context.Context, host HostID, quota uint64) error {
	if err := m.cfg.Ledger.SetHostQuota(ctx, host, quota); err != nil {
		return fmt.Errorf("set host %d quota: %w", host, err)
	}
	m.log.Info("host quota set", "host", host, "bytes", quota)
	m.publish(Change{Kind: ChangeHost, Host: host, Message: QuotaChanged})
	return nil
}

// DefaultQuota is the quota of hosts without one of their own.
type DefaultQuota struct {
	Bytes uint64 // 0: no limit
	// FairShare: no administrator set it; it is the pool's capacity
	// over the number of heads, so that no host takes all of the pool
	// by default.
	FairShare bool
}

// DefaultHostQuota returns the default quota.
func (m *Manager) DefaultHostQuota(ctx context.Context) (DefaultQuota, error) {
	return m.cfg.Ledger.DefaultHostQuota(ctx)
}

// SetDefaultHostQuota sets the quota of every host that has none of its
// own (0: no limit), checked like a host's own quota from now on, and
// tells subscribers of each such host.
func (m *Manager) SetDefaultHostQuota(ctx context.Context, quota uint64) error {
	if err := m.cfg.Ledger.SetDefaultHostQuota(ctx, quota); err != nil {
		return fmt.Errorf("set default host quota: %w", err)
	}
	m.log.Info("default host quota set", "bytes", quota)
	hosts, err := m.cfg.Ledger.Hosts(ctx)
	if err != nil {
		return nil // set; only the notification is lost
	}
	for _, h := range hosts {
		if h.Quota == 0 {
			m.publish(Change{Kind: ChangeHost, Host: h.ID, Message: QuotaChanged})
		}
	}
	return nil
}

// EffectiveQuota is what limits grants to h: its own quota, else the
// default (0: no limit).
func (m *Manager) EffectiveQuota(ctx context.Context, h Host) (uint64, error) {
	if h.Quota > 0 {
		return h.Quota, nil
	}
	d, err := m.cfg.Ledger.DefaultHostQuota(ctx)
	if err != nil {
		return 0, fmt.Errorf("host %d quota: %w", h.ID, err)
	}
	return d.Bytes, nil
}
