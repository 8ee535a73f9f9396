package dcd_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/dcd"
	"cxlpool/sim"
)

// TestFenceAndRecover is a head power cycle as bmc/policy drives it: the
// fence takes back everything host 3 holds (forced: the host does not
// answer), sanitized, recorded with the power cycle as the reason, leaves
// other hosts' shared access alone, refuses grants until Recover, and is
// idempotent both ways.
func TestFenceAndRecover(t *testing.T) {
	s := newStack(t, nil)
	ctx := ctxT(t)
	changes, cancel := s.m.Subscribe(256)
	defer cancel()

	solo, err := s.m.Reserve(ctx, dcd.ReserveRequest{Name: "solo", Size: gib, Region: -1})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	shared, err := s.m.Reserve(ctx, dcd.ReserveRequest{Name: "shared", Size: gib, Region: -1, Sharable: true})
	if err != nil {
		t.Fatalf("Reserve sharable: %v", err)
	}
	later, err := s.m.Reserve(ctx, dcd.ReserveRequest{Name: "later", Size: gib, Region: -1})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	gSolo, err := s.m.Grant(ctx, solo.ID, 3)
	if err != nil {
		t.Fatalf("Grant solo to 3: %v", err)
	}
	gShared3, err := s.m.Grant(ctx, shared.ID, 3)
	if err != nil {
		t.Fatalf("Grant shared to 3: %v", err)
	}
	gShared5, err := s.m.Grant(ctx, shared.ID, 5)
	if err != nil {
		t.Fatalf("Grant shared to 5: %v", err)
	}
	secret := bytes.Repeat([]byte("head-3 "), 256)
	dpa := gSolo.Extents[0].DPA
	if _, err := s.box.Host(3).WriteAt(secret, dpa); err != nil {
		t.Fatalf("host 3 WriteAt: %v", err)
	}
	// The head is about to lose power: its host answers nothing.
	s.box.Host(3).SetPolicy(sim.Policy{Mode: sim.NeverAnswer})

	for i := range 2 {
		if err := s.m.Fence(ctx, 3); err != nil {
			t.Fatalf("Fence #%d: %v", i+1, err)
		}
	}
	if l, err := s.dev.Extents(ctx, 3); err != nil || len(l.Extents) != 0 {
		t.Errorf("device extents of host 3 after Fence: got %d (%v), want none", len(l.Extents), err)
	}
	for _, id := range []dcd.GrantID{gSolo.ID, gShared3.ID} {
		g, err := s.led.Grant(ctx, id)
		if err != nil {
			t.Fatalf("ledger Grant(%d): %v", id, err)
		}
		if g.State != dcd.GrantReleased || !strings.Contains(g.Reason, "power cycle of head 3") {
			t.Errorf("grant %d after Fence: got %s %q, want released naming the power cycle", id, g.State, g.Reason)
		}
	}
	if g, err := s.led.Grant(ctx, gShared5.ID); err != nil || g.State != dcd.GrantGranted {
		t.Errorf("host 5's shared grant after fencing host 3: got %s (%v), want granted", g.State, err)
	}
	if n := len(s.deviceHolds(t, 5, shared.Tag)); n == 0 {
		t.Error("host 5 lost its shared access when host 3 was fenced")
	}
	if why, ok := s.m.Fenced(3); !ok || why == "" {
		t.Errorf("Fenced(3) = %q, %v; want fenced with a reason", why, ok)
	}
	if _, err := s.m.Grant(ctx, later.ID, 3); !errors.Is(err, dcd.ErrFenced) {
		t.Errorf("Grant to a fenced host: got %v, want ErrFenced", err)
	}

	// The capacity went back sanitized: another host sees zeros.
	g4, err := s.m.Grant(ctx, solo.ID, 4)
	if err != nil {
		t.Fatalf("Grant solo to 4 after the fence: %v", err)
	}
	for _, e := range g4.Extents {
		if e.DPA <= dpa && dpa < e.End() {
			buf := make([]byte, len(secret))
			if _, err := s.box.Host(4).ReadAt(buf, dpa); err != nil {
				t.Fatalf("host 4 ReadAt: %v", err)
			}
			if !bytes.Equal(buf, make([]byte, len(buf))) {
				t.Error("host 4 reads host 3's data: the fenced release was not sanitized")
			}
		}
	}

	s.box.Host(3).SetPolicy(sim.Policy{Mode: sim.AcceptAll})
	for i := range 2 {
		if err := s.m.Recover(ctx, 3); err != nil {
			t.Fatalf("Recover #%d: %v", i+1, err)
		}
	}
	if _, ok := s.m.Fenced(3); ok {
		t.Error("Fenced(3) after Recover: still fenced")
	}
	if g, err := s.m.Grant(ctx, later.ID, 3); err != nil || g.State != dcd.GrantGranted {
		t.Errorf("Grant after Recover: got %s, %v; want granted", g.State, err)
	}
	var msgs []string
	for len(changes) > 0 {
		if c := <-changes; c.Kind == dcd.ChangeHost && c.Host == 3 {
			msgs = append(msgs, c.Message)
		}
	}
	if diff := cmp.Diff([]string{"fenced for a head power cycle", "fence lifted"}, msgs); diff != "" {
		t.Errorf("host 3 changes (-want +got):\n%s", diff)
	}
}

// A grant whose add is in flight when the fence goes up is awaited, then
// released with the rest.
func TestFenceWaitsForAddInFlight(t *testing.T) {
	s := newStack(t, nil)
	ctx := ctxT(t)
	c, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: gib, Region: -1})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	s.box.Host(3).SetPolicy(sim.Policy{Mode: sim.AcceptAll, Delay: 300 * time.Millisecond})
	g, err := s.m.BeginGrant(ctx, c.ID, 3)
	if err != nil {
		t.Fatalf("BeginGrant: %v", err)
	}
	if err := s.m.Fence(ctx, 3); err != nil {
		t.Fatalf("Fence: %v", err)
	}
	got, err := s.led.Grant(ctx, g.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != dcd.GrantReleased {
		t.Errorf("grant in flight at the fence: got %s (%s), want released after it was granted", got.State, got.Reason)
	}
	if n := len(s.deviceHolds(t, 3, c.Tag)); n != 0 {
		t.Errorf("host 3 holds %d extents after Fence, want none", n)
	}
}

func TestFenceUnknownHost(t *testing.T) {
	s := newStack(t, nil)
	ctx := context.Background()
	for name, f := range map[string]func(context.Context, int) error{"Fence": s.m.Fence, "Recover": s.m.Recover} {
		for _, host := range []int{-1, 99} {
			if err := f(ctx, host); !errors.Is(err, dcd.ErrNotFound) {
				t.Errorf("%s(%d): got %v, want ErrNotFound", name, host, err)
			}
		}
	}
}
