package sqlite

import (
	"testing"

	"cxlpool/dcd"
)

// A release begun with a reason keeps it through to released, and a
// repeated begin (a restarted fence) neither fails nor moves the grant.
func TestBeginReleaseReason(t *testing.T) {
	ctx := t.Context()
	l, g := openAdding(t, 3)
	if _, err := l.BeginReleaseReason(ctx, g.ID, "too early"); err == nil {
		t.Fatal("BeginReleaseReason of an adding grant: got nil error, want a conflict")
	}
	if _, err := l.CompleteGrant(ctx, g.ID, nil); err != nil {
		t.Fatal(err)
	}
	const why = "forced release for a power cycle of head 3"
	for i := range 2 {
		got, err := l.BeginReleaseReason(ctx, g.ID, why)
		if err != nil {
			t.Fatalf("BeginReleaseReason #%d: %v", i+1, err)
		}
		if got.State != dcd.GrantReleasing || got.Reason != why {
			t.Errorf("BeginReleaseReason #%d: got %s %q, want releasing %q", i+1, got.State, got.Reason, why)
		}
	}
	done, err := l.CompleteRelease(ctx, g.ID)
	if err != nil {
		t.Fatal(err)
	}
	if done.State != dcd.GrantReleased || done.Reason != why {
		t.Errorf("CompleteRelease: got %s %q, want released %q", done.State, done.Reason, why)
	}
}
