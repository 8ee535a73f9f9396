package dcd

import (
	"context"
	"fmt"
)

// QuotaChanged is the Message of the ChangeHost that SetHostQuota
// publishes, so that subscribers can tell a setting from a link or fence
// state.
const QuotaChanged = "quota changed"

// SetHostQuota sets host's quota in bytes (0: no limit) and tells
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
