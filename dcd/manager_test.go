package dcd_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/appliance"
	"cxlpool/dcd"
	"cxlpool/fabric"
	"cxlpool/fabric/cci"
	"cxlpool/host/report"
	"cxlpool/sim"
)

const (
	blk = 256 << 20
	gib = 1 << 30
)

// stack is a whole daemon on an in-process virtual box, as cxlpoold runs it.
type stack struct {
	app *appliance.Appliance
	m   *dcd.Manager
	box *sim.Box
	dev fabric.Device
	led dcd.Ledger
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func newStack(t *testing.T, mod func(*appliance.Config)) *stack {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg := appliance.Config{
		Device:         appliance.DeviceSim,
		DataDir:        t.TempDir(),
		Sim:            sim.DefaultConfig(),
		Logger:         testLogger(t),
		AddTimeout:     2 * time.Second,
		ReleaseTimeout: 2 * time.Second,
	}
	if mod != nil {
		mod(&cfg)
	}
	app, err := appliance.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("appliance.Open: %v", err)
	}
	if err := app.Start(ctx); err != nil {
		app.Close()
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		app.Manager.Wait()
		app.Close()
	})
	// The flows are tested without the default host quota (a fair share
	// of these small boxes); quota tests set what they test.
	if err := app.Manager.SetDefaultHostQuota(ctx, 0); err != nil {
		t.Fatalf("SetDefaultHostQuota: %v", err)
	}
	return &stack{app: app, m: app.Manager, box: app.Box, dev: app.Device, led: app.Ledger}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// deviceHolds returns the extents host holds on the device under tag.
func (s *stack) deviceHolds(t *testing.T, host dcd.HostID, tag cci.Tag) []cci.Extent {
	t.Helper()
	l, err := s.dev.Extents(ctxT(t), uint16(host))
	if err != nil {
		t.Fatalf("Extents(%d): %v", host, err)
	}
	var out []cci.Extent
	for _, e := range l.Extents {
		if e.Tag == tag {
			out = append(out, e)
		}
	}
	return out
}

func TestGrantReleaseDelete(t *testing.T) {
	s := newStack(t, nil)
	ctx := ctxT(t)
	c, err := s.m.Reserve(ctx, dcd.ReserveRequest{Name: "kv", Size: 4 * gib, Region: -1})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if c.Region != 0 || c.Sharable {
		t.Errorf("Reserve placed chunk in region %d sharable=%v, want region 0 not sharable", c.Region, c.Sharable)
	}
	g, err := s.m.Grant(ctx, c.ID, 3)
	if err != nil {
		t.Fatalf("Grant: %v", err)
	}
	if g.State != dcd.GrantGranted || g.Size() != 4*gib {
		t.Fatalf("Grant = state %s size %d, want granted %d", g.State, g.Size(), uint64(4*gib))
	}
	held := s.deviceHolds(t, 3, c.Tag)
	if diff := cmp.Diff(g.Extents, held); diff != "" {
		t.Errorf("ledger extents differ from the device's (-ledger +device):\n%s", diff)
	}

	// The host's writes are real, and released capacity comes back zeroed.
	host := s.box.Host(3)
	data := bytes.Repeat([]byte("kv-cache"), 512)
	if _, err := host.WriteAt(data, held[0].DPA); err != nil {
		t.Fatalf("host WriteAt: %v", err)
	}
	rg, err := s.m.Release(ctx, g.ID)
	if err != nil {
		t.Fatalf("Release: %v", err)
	}
	if rg.State != dcd.GrantReleased {
		t.Errorf("Release state = %s, want released", rg.State)
	}
	if got := s.deviceHolds(t, 3, c.Tag); len(got) != 0 {
		t.Errorf("device still holds %d extents after release", len(got))
	}
	g2, err := s.m.Grant(ctx, c.ID, 5)
	if err != nil {
		t.Fatalf("Grant to host 5 after release: %v", err)
	}
	buf := make([]byte, len(data))
	for _, e := range g2.Extents {
		if e.DPA <= held[0].DPA && held[0].DPA < e.End() {
			if _, err := s.box.Host(5).ReadAt(buf, held[0].DPA); err != nil {
				t.Fatalf("host 5 ReadAt: %v", err)
			}
			if !bytes.Equal(buf, make([]byte, len(buf))) {
				t.Errorf("host 5 reads another host's released data, want zeros")
			}
		}
	}
	if err := s.m.DeleteChunk(ctx, c.ID); !errors.Is(err, dcd.ErrConflict) {
		t.Errorf("DeleteChunk while granted: got %v, want ErrConflict", err)
	}
	if _, err := s.m.Release(ctx, g2.ID); err != nil {
		t.Fatalf("Release host 5: %v", err)
	}
	if err := s.m.DeleteChunk(ctx, c.ID); err != nil {
		t.Errorf("DeleteChunk: %v", err)
	}
	if _, err := s.led.Chunk(ctx, c.ID); !errors.Is(err, dcd.ErrNotFound) {
		t.Errorf("Chunk after delete: got %v, want ErrNotFound", err)
	}
}

func TestGrantOutcomes(t *testing.T) {
	tests := []struct {
		name    string
		policy  sim.Policy
		link    bool
		wantErr error
		want    dcd.GrantState
	}{
		{"accept", sim.Policy{Mode: sim.AcceptAll}, true, nil, dcd.GrantGranted},
		{"reject", sim.Policy{Mode: sim.Reject}, true, dcd.ErrHostRejected, dcd.GrantFailed},
		{"never answers", sim.Policy{Mode: sim.NeverAnswer}, true, dcd.ErrHostTimeout, dcd.GrantFailed},
		{"slow but in time", sim.Policy{Mode: sim.AcceptAll, Delay: 100 * time.Millisecond}, true, nil, dcd.GrantGranted},
		{"link down", sim.Policy{Mode: sim.AcceptAll}, false, dcd.ErrLinkDown, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStack(t, func(c *appliance.Config) { c.AddTimeout = 500 * time.Millisecond })
			ctx := ctxT(t)
			s.box.Host(2).SetPolicy(tt.policy)
			if !tt.link {
				s.box.SetLink(2, false)
				waitFor(t, func() bool { h, _ := s.m.Box().Head(2); return !h.LinkUp })
			}
			c, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: 2 * gib, Region: -1})
			if err != nil {
				t.Fatalf("Reserve: %v", err)
			}
			g, err := s.m.Grant(ctx, c.ID, 2)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Grant: got error %v, want %v", err, tt.wantErr)
			}
			if g.State != tt.want {
				t.Errorf("grant state = %q, want %q", g.State, tt.want)
			}
			wantHeld := 0
			if tt.want == dcd.GrantGranted {
				wantHeld = 8
			}
			if got := s.deviceHolds(t, 2, c.Tag); len(got) == 0 && wantHeld > 0 || len(got) > 0 && wantHeld == 0 {
				t.Errorf("device holds %d extents of the chunk, want %v", len(got), wantHeld > 0)
			}
			tags, err := s.dev.Tags(ctx)
			if err != nil {
				t.Fatalf("Tags: %v", err)
			}
			if ti, ok := tags.Find(c.Tag); ok && ti.HasPending(2) {
				t.Errorf("an offer to host 2 is still pending after the grant ended")
			}
			if tt.want == dcd.GrantFailed {
				// Nothing is half-granted: the chunk goes to another host.
				if _, err := s.m.Grant(ctx, c.ID, 4); err != nil {
					t.Errorf("Grant to host 4 after a failed grant: %v", err)
				}
			}
		})
	}
}

func TestPartialAccept(t *testing.T) {
	s := newStack(t, nil)
	ctx := ctxT(t)
	// Fragment region 0 so a 1 GiB add is offered as several extents.
	var cs []dcd.Chunk
	for i := 0; i < 4; i++ {
		c, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: blk, Region: 0})
		if err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		if _, err := s.m.Grant(ctx, c.ID, 0); err != nil {
			t.Fatalf("Grant: %v", err)
		}
		cs = append(cs, c)
	}
	for _, i := range []int{0, 2} {
		gs, _ := s.led.Grants(ctx, dcd.GrantFilter{Chunk: cs[i].ID, Active: true})
		if _, err := s.m.Release(ctx, gs[0].ID); err != nil {
			t.Fatalf("Release: %v", err)
		}
		// A chunk owns its blocks until it is deleted.
		if err := s.m.DeleteChunk(ctx, cs[i].ID); err != nil {
			t.Fatalf("DeleteChunk: %v", err)
		}
	}
	s.box.Host(1).SetPolicy(sim.Policy{Mode: sim.AcceptPart, AcceptN: 1})
	c, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: 4 * blk, Region: 0})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	g, err := s.m.Grant(ctx, c.ID, 1)
	if err != nil {
		t.Fatalf("Grant: %v", err)
	}
	held := s.deviceHolds(t, 1, c.Tag)
	if len(held) != 1 {
		t.Fatalf("device holds %d extents, want exactly the 1 accepted", len(held))
	}
	if diff := cmp.Diff(held, g.Extents); diff != "" {
		t.Errorf("ledger records something other than what was accepted (-device +ledger):\n%s", diff)
	}
	if g.Size() >= c.Size {
		t.Errorf("grant size %d, want less than the chunk's %d", g.Size(), c.Size)
	}
}

func TestSharedChunk(t *testing.T) {
	s := newStack(t, nil)
	ctx := ctxT(t)
	c, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: 2 * gib, Region: -1, Sharable: true})
	if err != nil {
		t.Fatalf("Reserve sharable: %v", err)
	}
	if c.Region != 1 {
		t.Fatalf("sharable chunk in region %d, want 1", c.Region)
	}
	var grants []dcd.Grant
	for _, h := range []dcd.HostID{1, 6, 7} {
		g, err := s.m.Grant(ctx, c.ID, h)
		if err != nil {
			t.Fatalf("Grant to host %d: %v", h, err)
		}
		grants = append(grants, g)
	}
	want := s.deviceHolds(t, 1, c.Tag)
	for _, h := range []dcd.HostID{6, 7} {
		if diff := cmp.Diff(want, s.deviceHolds(t, h, c.Tag)); diff != "" {
			t.Errorf("host %d sees different shared extents (-host1 +host%d):\n%s", h, h, diff)
		}
	}
	// Host 1 writes, host 7 reads the same bytes: it is one memory.
	msg := []byte("shared prefix")
	if _, err := s.box.Host(1).WriteAt(msg, want[0].DPA); err != nil {
		t.Fatalf("WriteAt: %v", err)
	}
	got := make([]byte, len(msg))
	if _, err := s.box.Host(7).ReadAt(got, want[0].DPA); err != nil {
		t.Fatalf("ReadAt: %v", err)
	}
	if !bytes.Equal(got, msg) {
		t.Errorf("host 7 read %q, want %q", got, msg)
	}
	if _, err := s.m.Release(ctx, grants[0].ID); err != nil {
		t.Fatalf("Release host 1: %v", err)
	}
	if n := len(s.deviceHolds(t, 7, c.Tag)); n == 0 {
		t.Errorf("host 7 lost the shared capacity when host 1 released it")
	}
	for _, g := range grants[1:] {
		if _, err := s.m.Release(ctx, g.ID); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	tags, err := s.dev.Tags(ctx)
	if err != nil {
		t.Fatalf("Tags: %v", err)
	}
	if _, ok := tags.Find(c.Tag); ok {
		t.Errorf("tag still on the device after the last host released it")
	}
}

func TestAdmission(t *testing.T) {
	s := newStack(t, func(c *appliance.Config) {
		c.Sim.Capacity = 8 * gib // two regions of 4 GiB
	})
	ctx := ctxT(t)
	if _, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: 5 * gib, Region: -1}); !errors.Is(err, dcd.ErrNoCapacity) {
		t.Errorf("Reserve beyond capacity: got %v, want ErrNoCapacity", err)
	}
	if _, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: blk + 1, Region: -1}); !errors.Is(err, dcd.ErrInvalid) {
		t.Errorf("Reserve of a non-block multiple: got %v, want ErrInvalid", err)
	}
	if _, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: blk, Region: 0, Sharable: true}); !errors.Is(err, dcd.ErrNotSharable) {
		t.Errorf("sharable chunk in region 0: got %v, want ErrNotSharable", err)
	}
	if _, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: blk, Region: 9}); !errors.Is(err, dcd.ErrNotFound) {
		t.Errorf("Reserve in region 9: got %v, want ErrNotFound", err)
	}
	c, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: 2 * gib, Region: -1})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if _, err := s.m.Grant(ctx, c.ID, 0); err != nil {
		t.Fatalf("Grant: %v", err)
	}
	if _, err := s.m.Grant(ctx, c.ID, 1); !errors.Is(err, dcd.ErrNotSharable) {
		t.Errorf("granting a non-sharable chunk to a second host: got %v, want ErrNotSharable", err)
	}
	if _, err := s.m.Grant(ctx, c.ID, 0); !errors.Is(err, dcd.ErrConflict) {
		t.Errorf("granting the same chunk twice: got %v, want ErrConflict", err)
	}
	if err := s.led.SetHostQuota(ctx, 2, gib); err != nil {
		t.Fatalf("SetHostQuota: %v", err)
	}
	c2, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: 2 * gib, Region: -1})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if _, err := s.m.Grant(ctx, c2.ID, 2); !errors.Is(err, dcd.ErrQuotaExceeded) {
		t.Errorf("grant over quota: got %v, want ErrQuotaExceeded", err)
	}
	if _, err := s.m.Grant(ctx, 999, 2); !errors.Is(err, dcd.ErrNotFound) {
		t.Errorf("grant of an unknown chunk: got %v, want ErrNotFound", err)
	}
	if _, err := s.m.Grant(ctx, c2.ID, 42); !errors.Is(err, dcd.ErrNotFound) {
		t.Errorf("grant to an unknown host: got %v, want ErrNotFound", err)
	}
}

func TestBusyDeviceIsRetried(t *testing.T) {
	s := newStack(t, nil)
	ctx := ctxT(t)
	c, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: gib, Region: -1})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	s.box.Faults().Busy(3)
	if _, err := s.m.Grant(ctx, c.ID, 4); err != nil {
		t.Errorf("Grant through 3 Busy answers: %v", err)
	}
}

func TestReleaseIsForcedWhenHostIgnoresIt(t *testing.T) {
	s := newStack(t, func(c *appliance.Config) { c.ReleaseTimeout = 300 * time.Millisecond })
	ctx := ctxT(t)
	c, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: gib, Region: -1})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	g, err := s.m.Grant(ctx, c.ID, 6)
	if err != nil {
		t.Fatalf("Grant: %v", err)
	}
	s.box.Host(6).SetPolicy(sim.Policy{Mode: sim.NeverAnswer})
	rg, err := s.m.Release(ctx, g.ID)
	if err != nil {
		t.Fatalf("Release: %v", err)
	}
	if rg.State != dcd.GrantReleased {
		t.Errorf("state = %s, want released", rg.State)
	}
	if n := len(s.deviceHolds(t, 6, c.Tag)); n != 0 {
		t.Errorf("host 6 still holds %d extents after a forced release", n)
	}
}

func TestReconcileOrphans(t *testing.T) {
	s := newStack(t, func(c *appliance.Config) { c.Sim.Capacity = 8 * gib })
	ctx := ctxT(t)
	// Capacity added behind the ledger's back, with a tag it never wrote.
	stray := cci.NewTag()
	if err := s.dev.Add(ctx, fabric.AddRequest{Host: 5, Policy: fabric.AddFree, Region: 0, Length: 2 * gib, Tag: stray}); err != nil {
		t.Fatalf("device Add: %v", err)
	}
	waitFor(t, func() bool { return len(s.deviceHolds(t, 5, stray)) > 0 })
	rep, err := s.m.Reconcile(ctx)
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if rep.Orphans != 1 {
		t.Errorf("Reconcile found %d orphans, want 1", rep.Orphans)
	}
	// The orphaned capacity is never promised to anyone else.
	if _, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: 3 * gib, Region: 0}); !errors.Is(err, dcd.ErrNoCapacity) {
		t.Errorf("Reserve into orphaned capacity: got %v, want ErrNoCapacity", err)
	}
	if err := s.m.ReleaseOrphan(ctx, 5, stray); err != nil {
		t.Fatalf("ReleaseOrphan: %v", err)
	}
	os, err := s.led.Orphans(ctx)
	if err != nil || len(os) != 0 {
		t.Errorf("Orphans after release = %v, %v; want none", os, err)
	}
	if _, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: 3 * gib, Region: 0}); err != nil {
		t.Errorf("Reserve after the orphan was released: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestDeviceResetDuringGrant(t *testing.T) {
	s := newStack(t, func(c *appliance.Config) {
		c.AddTimeout = 5 * time.Second
		c.FM.PollInterval = 50 * time.Millisecond
	})
	ctx := ctxT(t)
	held, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: gib, Region: -1})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	kept, err := s.m.Grant(ctx, held.ID, 1)
	if err != nil {
		t.Fatalf("Grant: %v", err)
	}
	s.box.Host(3).SetPolicy(sim.Policy{Mode: sim.NeverAnswer})
	c, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: gib, Region: -1})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	g, err := s.m.BeginGrant(ctx, c.ID, 3)
	if err != nil {
		t.Fatalf("BeginGrant: %v", err)
	}
	waitFor(t, func() bool {
		tags, err := s.dev.Tags(ctx)
		ti, ok := tags.Find(c.Tag)
		return err == nil && ok && ti.HasPending(3)
	})
	s.box.Faults().Reset() // the pending offer is lost with the device's volatile state
	got, err := s.m.AwaitGrant(ctx, g.ID)
	if !errors.Is(err, dcd.ErrDevice) || got.State != dcd.GrantFailed {
		t.Fatalf("grant across a device reset: state %s err %v, want failed with ErrDevice", got.State, err)
	}
	if err := s.m.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	// What the device kept (accepted extents) is still granted, and the
	// box works normally afterwards.
	if n := len(s.deviceHolds(t, 1, held.Tag)); n == 0 {
		t.Errorf("host 1 lost its granted capacity across the reset")
	}
	if g, err := s.led.Grant(ctx, kept.ID); err != nil || g.State != dcd.GrantGranted {
		t.Errorf("grant kept across the reset: %s %v, want granted", g.State, err)
	}
	s.box.Host(3).SetPolicy(sim.Policy{Mode: sim.AcceptAll})
	if _, err := s.m.Grant(ctx, c.ID, 3); err != nil {
		t.Errorf("Grant after the reset: %v", err)
	}
}

func TestLinkFlap(t *testing.T) {
	s := newStack(t, nil)
	ctx := ctxT(t)
	c, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: gib, Region: -1})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	changes, cancel := s.m.Subscribe(64)
	defer cancel()
	s.box.SetLink(4, false)
	waitFor(t, func() bool { h, _ := s.m.Box().Head(4); return !h.LinkUp })
	if _, err := s.m.Grant(ctx, c.ID, 4); !errors.Is(err, dcd.ErrLinkDown) {
		t.Errorf("Grant to a host whose link is down: got %v, want ErrLinkDown", err)
	}
	// The ledger records the link after the model changed (reads do not
	// queue behind that write): wait for it.
	waitFor(t, func() bool { h, err := s.led.Host(ctx, 4); return err == nil && !h.LinkUp })
	s.box.SetLink(4, true)
	waitFor(t, func() bool { h, _ := s.m.Box().Head(4); return h.LinkUp })
	if _, err := s.m.Grant(ctx, c.ID, 4); err != nil {
		t.Errorf("Grant after the link came back: %v", err)
	}
	var msgs []string
	for len(changes) > 0 {
		ch := <-changes
		if ch.Kind == dcd.ChangeHost {
			msgs = append(msgs, ch.Message)
		}
	}
	if diff := cmp.Diff([]string{"link down", "link up"}, msgs); diff != "" {
		t.Errorf("host changes published (-want +got):\n%s", diff)
	}
}

func TestHostGivesCapacityBack(t *testing.T) {
	s := newStack(t, nil)
	ctx := ctxT(t)
	c, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: gib, Region: -1})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	g, err := s.m.Grant(ctx, c.ID, 2)
	if err != nil {
		t.Fatalf("Grant: %v", err)
	}
	// The host releases on its own (4803h without a request from the FM).
	if err := s.box.Host(2).Release(ctx, c.Tag); err != nil {
		t.Fatalf("host Release: %v", err)
	}
	waitFor(t, func() bool {
		got, err := s.led.Grant(ctx, g.ID)
		return err == nil && got.State == dcd.GrantLost
	})
	// The chunk is free to be granted again.
	if _, err := s.m.Grant(ctx, c.ID, 3); err != nil {
		t.Errorf("Grant after the host gave the chunk back: %v", err)
	}
}

// Grants of one sharable chunk to several hosts at once: whichever flow
// runs first places the capacity, the others share it.
func TestConcurrentSharedGrants(t *testing.T) {
	s := newStack(t, nil)
	ctx := ctxT(t)
	for round := 0; round < 5; round++ {
		c, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: gib, Region: -1, Sharable: true})
		if err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		var ids []dcd.GrantID
		for h := dcd.HostID(0); h < 4; h++ {
			g, err := s.m.BeginGrant(ctx, c.ID, h)
			if err != nil {
				t.Fatalf("BeginGrant host %d: %v", h, err)
			}
			ids = append(ids, g.ID)
		}
		for i, id := range ids {
			if g, err := s.m.AwaitGrant(ctx, id); err != nil || g.State != dcd.GrantGranted {
				t.Fatalf("round %d host %d: %s %v, want granted", round, i, g.State, err)
			}
		}
		want := s.deviceHolds(t, 0, c.Tag)
		for h := dcd.HostID(1); h < 4; h++ {
			if diff := cmp.Diff(want, s.deviceHolds(t, h, c.Tag)); diff != "" {
				t.Errorf("round %d: host %d holds other extents than host 0 (-0 +%d):\n%s", round, h, h, diff)
			}
		}
		for _, id := range ids {
			if _, err := s.m.Release(ctx, id); err != nil {
				t.Fatalf("Release: %v", err)
			}
		}
	}
}

// A host whose agent says the memory is in use keeps it past the release
// timeout: the release waits (announced once), the device still holds the
// extents; an administrator's ForceRelease then takes it.
func TestReleaseWaitsWhileHostInUse(t *testing.T) {
	s := newStack(t, func(c *appliance.Config) { c.ReleaseTimeout = 100 * time.Millisecond })
	ctx := ctxT(t)
	c, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: gib, Region: -1})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	g, err := s.m.Grant(ctx, c.ID, 6)
	if err != nil {
		t.Fatalf("Grant: %v", err)
	}
	s.box.Host(6).SetPolicy(sim.Policy{Mode: sim.NeverAnswer})
	if err := s.app.HostReports.Put(6, report.Report{Tags: []report.Tag{
		{Tag: c.Tag.String(), Accepted: true, Usable: true, InUse: true, State: report.StateInUse},
	}}); err != nil {
		t.Fatal(err)
	}
	changes, stop := s.m.Subscribe(64)
	defer stop()
	if _, err := s.m.BeginRelease(ctx, g.ID); err != nil {
		t.Fatalf("BeginRelease: %v", err)
	}
	for waited := false; !waited; {
		select {
		case ch := <-changes:
			waited = ch.Grant != nil && ch.Grant.ID == g.ID && ch.Message == dcd.ReleaseWaitsMessage
		case <-ctx.Done():
			t.Fatal("no 'release waits' change")
		}
	}
	if n := len(s.deviceHolds(t, 6, c.Tag)); n == 0 {
		t.Fatal("the host lost the memory its agent says is in use")
	}
	if got, err := s.led.Grant(ctx, g.ID); err != nil || got.State != dcd.GrantReleasing {
		t.Fatalf("grant = %s, %v; want still releasing", got.State, err)
	}
	if _, err := s.m.ForceRelease(ctx, g.ID); err != nil {
		t.Fatalf("ForceRelease: %v", err)
	}
	waitFor(t, func() bool { rg, err := s.led.Grant(ctx, g.ID); return err == nil && rg.State == dcd.GrantReleased })
	if n := len(s.deviceHolds(t, 6, c.Tag)); n != 0 {
		t.Errorf("host 6 still holds %d extents after the forced release", n)
	}
}

// ForceRelease of a granted grant releases it without asking the host.
func TestForceReleaseOfGrantedGrant(t *testing.T) {
	s := newStack(t, nil)
	ctx := ctxT(t)
	c, err := s.m.Reserve(ctx, dcd.ReserveRequest{Size: gib, Region: -1})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	g, err := s.m.Grant(ctx, c.ID, 5)
	if err != nil {
		t.Fatalf("Grant: %v", err)
	}
	s.box.Host(5).SetPolicy(sim.Policy{Mode: sim.NeverAnswer})
	if _, err := s.m.ForceRelease(ctx, g.ID); err != nil {
		t.Fatalf("ForceRelease: %v", err)
	}
	waitFor(t, func() bool { rg, err := s.led.Grant(ctx, g.ID); return err == nil && rg.State == dcd.GrantReleased })
}
