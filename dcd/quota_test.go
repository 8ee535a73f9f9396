package dcd_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/dcd"
)

// TestSetHostQuota: the Manager stores a quota, tells subscribers, and the
// quota limits grants to the host from then on; a quota below what the
// host holds keeps the holding but refuses more; an unknown host changes
// nothing and publishes nothing.
func TestSetHostQuota(t *testing.T) {
	s := newStack(t, nil)
	ctx := ctxT(t)
	held, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: 2 * gib, Region: -1})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if _, err := s.m.Grant(ctx, held.ID, 2); err != nil {
		t.Fatalf("Grant: %v", err)
	}
	more, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: gib, Region: -1})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	changes, cancel := s.m.Subscribe(64)
	defer cancel()

	for _, tc := range []struct {
		name    string
		host    dcd.HostID
		quota   uint64
		wantErr error
		// grantErr is what granting `more` (1 GiB) to host 2 gives
		// afterwards; nil grants are released again.
		grantErr error
	}{
		{"below what the host holds", 2, gib, nil, dcd.ErrQuotaExceeded},
		{"exactly what it holds", 2, 2 * gib, nil, dcd.ErrQuotaExceeded},
		{"room for one more chunk", 2, 3 * gib, nil, nil},
		{"no limit", 2, 0, nil, nil},
		{"unknown host", 42, gib, dcd.ErrNotFound, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, err := s.led.Host(ctx, 2)
			if err != nil {
				t.Fatalf("Host: %v", err)
			}
			err = s.m.SetHostQuota(ctx, tc.host, tc.quota)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("SetHostQuota(%d, %d): got %v, want %v", tc.host, tc.quota, err, tc.wantErr)
			}
			h, err := s.led.Host(ctx, 2)
			if err != nil {
				t.Fatalf("Host: %v", err)
			}
			want := []dcd.Change{{Kind: dcd.ChangeHost, Host: 2, Message: dcd.QuotaChanged}}
			wantQuota := tc.quota
			if tc.wantErr != nil {
				want, wantQuota = nil, before.Quota // nothing changed
			}
			if h.Quota != wantQuota {
				t.Errorf("host 2 quota: got %d, want %d", h.Quota, wantQuota)
			}
			// SetHostQuota publishes before it returns.
			if diff := cmp.Diff(want, hostChanges(changes)); diff != "" {
				t.Errorf("published host changes (-want +got):\n%s", diff)
			}
			if tc.wantErr != nil {
				return
			}
			g, err := s.m.Grant(ctx, more.ID, 2)
			if !errors.Is(err, tc.grantErr) {
				t.Fatalf("grant of 1 GiB more: got %v, want %v", err, tc.grantErr)
			}
			// The host keeps what it held whatever the quota.
			if got := s.deviceHolds(t, 2, held.Tag); len(got) == 0 {
				t.Errorf("host 2 lost its capacity after a quota of %d", tc.quota)
			}
			if err == nil {
				if _, err := s.m.Release(ctx, g.ID); err != nil {
					t.Fatalf("Release: %v", err)
				}
			}
		})
	}
}

// hostChanges drains a subscription and returns its host changes (the
// grant flows' are skipped), without their times.
func hostChanges(ch <-chan dcd.Change) []dcd.Change {
	var out []dcd.Change
	for {
		select {
		case c := <-ch:
			if c.Kind == dcd.ChangeHost {
				out = append(out, dcd.Change{Kind: c.Kind, Host: c.Host, Message: c.Message})
			}
		default:
			return out
		}
	}
}

// TestDefaultHostQuota: a host without a quota of its own is limited by
// the default, a fair share of the pool until one is set; the Manager
// tells subscribers of every such host when it changes.
func TestDefaultHostQuota(t *testing.T) {
	s := newStack(t, nil) // which sets the default to 0 (no limit)
	ctx := ctxT(t)
	d, err := s.m.DefaultHostQuota(ctx)
	if err != nil || d != (dcd.DefaultQuota{}) {
		t.Fatalf("DefaultHostQuota: %+v, %v; want 0, set", d, err)
	}
	changes, cancel := s.m.Subscribe(64)
	defer cancel()
	if err := s.m.SetDefaultHostQuota(ctx, gib); err != nil {
		t.Fatal(err)
	}
	hosts, err := s.led.Hosts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range hosts {
		if c := <-changes; c.Kind != dcd.ChangeHost || c.Message != dcd.QuotaChanged {
			t.Errorf("change: got %+v, want a quota change of a host", c)
		}
	}
	c, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: 2 * gib, Region: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.m.Grant(ctx, c.ID, 3); !errors.Is(err, dcd.ErrQuotaExceeded) {
		t.Errorf("grant over the default: got %v, want ErrQuotaExceeded", err)
	}
	h, _ := s.led.Host(ctx, 3)
	if q, err := s.m.EffectiveQuota(ctx, h); err != nil || q != gib {
		t.Errorf("EffectiveQuota(host 3) = %d, %v; want %d", q, err, gib)
	}
	if err := s.m.SetHostQuota(ctx, 3, 2*gib); err != nil {
		t.Fatal(err)
	}
	if _, err := s.m.Grant(ctx, c.ID, 3); err != nil {
		t.Errorf("grant within the host's own quota: %v", err)
	}
}
