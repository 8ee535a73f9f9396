package telemetry

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/dcd"
	"cxlpool/fabric"
	"cxlpool/fabric/cci"
	"cxlpool/hmu/agg"
)

// followLedger is a ledger whose active grants the test sets; it counts
// the reads (one per layout rebuild).
type followLedger struct {
	dcd.Ledger // only Grants is called
	mu         sync.Mutex
	active     []dcd.Grant
	reads      int
	err        error // what Grants fails with, if set
}

func (l *followLedger) Grants(context.Context, dcd.GrantFilter) ([]dcd.Grant, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reads++
	if l.err != nil {
		return nil, l.err
	}
	return append([]dcd.Grant(nil), l.active...), nil
}

func (l *followLedger) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.err = err
}

func (l *followLedger) set(active []dcd.Grant) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.active = active
}

func (l *followLedger) readCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reads
}

type followManager struct{ led *followLedger }

func (m followManager) Box() fabric.Box                           { return fabric.Box{} }
func (m followManager) Ledger() dcd.Ledger                        { return m.led }
func (m followManager) Subscribe(int) (<-chan dcd.Change, func()) { panic("not used") }

// layoutView is what a layout answers, for comparing two of them.
func layoutView(l *agg.Layout) map[int][]cci.Extent {
	v := map[int][]cci.Extent{agg.Shared: l.Extents(agg.Shared)}
	for _, h := range l.Hosts() {
		v[h] = l.Extents(h)
	}
	return v
}

// TestLayoutFollowsABurst: a burst of grants and releases, each announced
// as its own change, leaves the layout a full rebuild from the ledger gives
// after the last change, from the changes alone: the ledger is read to
// check the copy, far fewer times than the changes; a change after a quiet
// spell is followed as well.
func TestLayoutFollowsABurst(t *testing.T) {
	led := &followLedger{}
	s := &Service{log: slog.New(slog.DiscardHandler),
		cfg: Tuning{LayoutInterval: 20 * time.Millisecond, LayoutVerify: 200 * time.Millisecond},
		mgr: followManager{led}, layout: agg.NewLiveLayout(nil)}
	changes := make(chan dcd.Change, 1024)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); s.followGrants(ctx, changes) }()
	defer func() { cancel(); <-done }()

	grant := func(i int) dcd.Grant {
		return dcd.Grant{ID: dcd.GrantID(i + 1), Host: dcd.HostID(i % 8), State: dcd.GrantGranted,
			Extents: []cci.Extent{{DPA: uint64(i) << 28, Length: 1 << 28}}}
	}
	var active []dcd.Grant
	const n = 400
	for i := range n {
		g := grant(i)
		active = append(active, g)
		if i%3 == 2 { // every third round releases the oldest grant again
			rel := active[0]
			active = active[1:]
			rel.State = dcd.GrantReleased
			led.set(append([]dcd.Grant(nil), active...))
			changes <- dcd.Change{Kind: dcd.ChangeGrant, Grant: &rel}
			continue
		}
		led.set(append([]dcd.Grant(nil), active...))
		changes <- dcd.Change{Kind: dcd.ChangeGrant, Grant: &g}
	}
	want := layoutView(agg.LayoutFromGrants(active))
	waitLayout(t, s, want)
	if got := led.readCount(); got >= n/4 {
		t.Errorf("a burst of %d changes took %d rebuilds, want fewer than %d", n, got, n/4)
	}

	// Quiet, then one release: followed too.
	rel := active[len(active)-1]
	active = active[:len(active)-1]
	led.set(append([]dcd.Grant(nil), active...))
	rel.State = dcd.GrantReleased
	changes <- dcd.Change{Kind: dcd.ChangeGrant, Grant: &rel}
	waitLayout(t, s, layoutView(agg.LayoutFromGrants(active)))
}

// waitLayout polls (bounded) until the service's layout shows want.
func waitLayout(t *testing.T, s *Service, want map[int][]cci.Extent) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := layoutView(s.layout.Load())
		diff := cmp.Diff(want, got)
		if diff == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("layout never matched a full rebuild (-want +got):\n%s", diff)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestEndedGrantLeavesLayoutAtOnce: a grant that ended is out of the
// layout before the next rebuild, however long the interval: another host
// may get its range meanwhile, and its accesses must not be shown to the
// host that held it.
func TestEndedGrantLeavesLayoutAtOnce(t *testing.T) {
	led := &followLedger{}
	a := dcd.Grant{ID: 1, Host: 2, State: dcd.GrantGranted, Extents: []cci.Extent{{DPA: 0, Length: 1 << 28}}}
	b := dcd.Grant{ID: 2, Host: 5, State: dcd.GrantGranted, Extents: []cci.Extent{{DPA: 1 << 28, Length: 1 << 28}}}
	led.set([]dcd.Grant{a, b})
	// As New does: the layout is built before the follower starts.
	s, changes := followFixture(t, led, Tuning{LayoutInterval: time.Hour, LayoutVerify: time.Hour})

	// Within the hour: the release of a is followed at once, the ledger
	// not read again.
	reads := led.readCount()
	rel := a
	rel.State = dcd.GrantReleased
	led.set([]dcd.Grant{b})
	changes <- dcd.Change{Kind: dcd.ChangeGrant, Grant: &rel}
	waitLayout(t, s, layoutView(agg.LayoutFromGrants([]dcd.Grant{b})))
	if got := led.readCount(); got != reads {
		t.Errorf("ledger read %d times for the release, want 0 (the rebuild waits for the interval)", got-reads)
	}
}

// followFixture starts followGrants on a Service with the given tuning
// over led, returning the change channel.
func followFixture(t *testing.T, led *followLedger, tuning Tuning) (*Service, chan<- dcd.Change) {
	t.Helper()
	s := &Service{log: slog.New(slog.DiscardHandler), cfg: tuning, mgr: followManager{led}, layout: agg.NewLiveLayout(nil)}
	if err := s.rebuildLayout(t.Context()); err != nil {
		t.Fatal(err)
	}
	changes := make(chan dcd.Change, 16)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); s.followGrants(ctx, changes) }()
	t.Cleanup(func() { cancel(); <-done })
	return s, changes
}

// TestFollowWithoutTheLedger: a granted grant's change carries its
// extents, so it joins the layout after the interval with no ledger read,
// and a release leaves it again, still without one (the check of the copy
// waits for LayoutVerify).
func TestFollowWithoutTheLedger(t *testing.T) {
	led := &followLedger{}
	s, changes := followFixture(t, led, Tuning{LayoutInterval: time.Millisecond, LayoutVerify: time.Hour})
	reads := led.readCount()
	a := dcd.Grant{ID: 7, Host: 3, State: dcd.GrantGranted, Extents: []cci.Extent{{DPA: 1 << 30, Length: 1 << 28}}}
	changes <- dcd.Change{Kind: dcd.ChangeGrant, Grant: &a}
	waitLayout(t, s, layoutView(agg.LayoutFromGrants([]dcd.Grant{a})))
	rel := a
	rel.State = dcd.GrantReleased
	changes <- dcd.Change{Kind: dcd.ChangeGrant, Grant: &rel}
	waitLayout(t, s, layoutView(agg.LayoutFromGrants(nil)))
	if got := led.readCount(); got != reads {
		t.Errorf("ledger read %d times, want 0: the changes said everything", got-reads)
	}
}

// TestFollowReadsTheLedger: a change the copy cannot apply (a device
// event; a granted grant without its extents) is followed by a read of the
// ledger within the interval, and a change lost to a full subscription is
// corrected by the check of the copy after LayoutVerify.
func TestFollowReadsTheLedger(t *testing.T) {
	a := dcd.Grant{ID: 1, Host: 2, State: dcd.GrantGranted, Extents: []cci.Extent{{DPA: 0, Length: 1 << 28}}}
	b := dcd.Grant{ID: 2, Host: 5, State: dcd.GrantGranted, Extents: []cci.Extent{{DPA: 1 << 28, Length: 1 << 28}}}
	bare := a
	bare.Extents = nil
	for _, tc := range []struct {
		name   string
		tuning Tuning
		change dcd.Change
	}{
		{"device event", Tuning{LayoutInterval: time.Millisecond, LayoutVerify: time.Hour},
			dcd.Change{Kind: dcd.ChangeDevice, Message: "inventory"}},
		{"granted without extents", Tuning{LayoutInterval: time.Millisecond, LayoutVerify: time.Hour},
			dcd.Change{Kind: dcd.ChangeGrant, Grant: &bare}},
		// b's own change was lost; a's arrives and the check finds b.
		{"lost change", Tuning{LayoutInterval: time.Millisecond, LayoutVerify: 20 * time.Millisecond},
			dcd.Change{Kind: dcd.ChangeGrant, Grant: &a}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			led := &followLedger{}
			s, changes := followFixture(t, led, tc.tuning)
			led.set([]dcd.Grant{a, b})
			changes <- tc.change
			waitLayout(t, s, layoutView(agg.LayoutFromGrants([]dcd.Grant{a, b})))
		})
	}
}

// TestRebuildGap: rebuilds are spaced by the configured interval until
// they cost more than a tenth of it, then by ten times their cost.
func TestRebuildGap(t *testing.T) {
	for _, tc := range []struct {
		interval, cost, want time.Duration
	}{
		{20 * time.Millisecond, 0, 20 * time.Millisecond},
		{20 * time.Millisecond, time.Millisecond, 20 * time.Millisecond},
		{20 * time.Millisecond, 2 * time.Millisecond, 20 * time.Millisecond},
		{20 * time.Millisecond, 3 * time.Millisecond, 30 * time.Millisecond},
		{20 * time.Millisecond, 25 * time.Millisecond, 250 * time.Millisecond},
	} {
		if got := rebuildGap(tc.interval, tc.cost); got != tc.want {
			t.Errorf("rebuildGap(%v, %v) = %v, want %v", tc.interval, tc.cost, got, tc.want)
		}
	}
}

// TestFollowWhileTheLedgerFails: a granted grant's change reaches the
// layout from the copy even when every read of the ledger fails, and the
// ledger is read again, and followed, once it answers.
func TestFollowWhileTheLedgerFails(t *testing.T) {
	led := &followLedger{}
	s, changes := followFixture(t, led, Tuning{LayoutInterval: time.Millisecond, LayoutVerify: time.Millisecond})
	led.fail(errors.New("ledger unavailable"))
	a := dcd.Grant{ID: 1, Host: 2, State: dcd.GrantGranted, Extents: []cci.Extent{{DPA: 0, Length: 1 << 28}}}
	b := dcd.Grant{ID: 2, Host: 5, State: dcd.GrantGranted, Extents: []cci.Extent{{DPA: 1 << 28, Length: 1 << 28}}}
	time.Sleep(5 * time.Millisecond) // the verify read due with the change, not a timed assertion
	changes <- dcd.Change{Kind: dcd.ChangeGrant, Grant: &a}
	waitLayout(t, s, layoutView(agg.LayoutFromGrants([]dcd.Grant{a})))
	// b's change is lost; the ledger answers again and has it.
	led.set([]dcd.Grant{a, b})
	led.fail(nil)
	waitLayout(t, s, layoutView(agg.LayoutFromGrants([]dcd.Grant{a, b})))
}
