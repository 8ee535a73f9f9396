package dcd_test

import (
	"context"
	"testing"
	"time"

	"cxlpool/dcd"
)

// TestGrantWaitsForAFlowHoldingItsLocks: a grant sends its add from the
// intent's transaction only when its chunk's and host's locks are free;
// while another flow holds them the add is not on the device, and once
// they are free the grant completes as usual.
func TestGrantWaitsForAFlowHoldingItsLocks(t *testing.T) {
	s := newStack(t, nil)
	ctx := ctxT(t)
	const host = dcd.HostID(4)
	c, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: blk, Region: 0})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	release := dcd.HoldFlowLocks(s.m, c.ID, host)
	g, err := s.m.BeginGrant(ctx, c.ID, host)
	if err != nil {
		release()
		t.Fatalf("BeginGrant: %v", err)
	}
	// The intent is durable and the flow waits for the locks: the grant
	// cannot finish (whatever the window given it) and the host holds
	// nothing of the chunk.
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	if g, err := s.m.AwaitGrant(wctx, g.ID); err == nil {
		t.Errorf("grant finished (%s) while its chunk's and host's locks were held", g.State)
	}
	cancel()
	for _, e := range s.box.Host(int(host)).Extents() {
		if e.Tag == c.Tag {
			t.Errorf("host holds %+v of the chunk while its lock was held", e)
		}
	}
	release()
	got, err := s.m.AwaitGrant(ctx, g.ID)
	if err != nil {
		t.Fatalf("AwaitGrant: %v", err)
	}
	if got.State != dcd.GrantGranted || got.Size() != blk {
		t.Errorf("grant: got %s with %d bytes, want granted with %d", got.State, got.Size(), blk)
	}
	list, err := s.dev.Extents(ctx, uint16(host))
	if err != nil {
		t.Fatalf("Extents: %v", err)
	}
	var held uint64
	for _, e := range list.Extents {
		if e.Tag == c.Tag {
			held += e.Length
		}
	}
	if held != blk {
		t.Errorf("host holds %d bytes of the chunk, want %d", held, blk)
	}
}
