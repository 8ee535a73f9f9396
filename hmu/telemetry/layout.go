package telemetry

import (
	"context"
	"time"

	"cxlpool/dcd"
	"cxlpool/fabric/cci"
	"cxlpool/hmu/agg"
	"cxlpool/sim"
)

// followGrants keeps the layout in step with capacity changes. Most
// changes say all the layout needs: a grant that became granted carries its
// extents, and one that ended names itself, so the follower applies them to
// its copy of the active grants and rebuilds the layout from memory. Reading
// every active grant from the ledger instead cost a median 5 ms at 480
// grants on the 2-core build machine, a tenth of the CPU of a box granting
// and releasing at full rate, for an answer the changes already gave.
//
//   - A grant that ended leaves the layout at once (dropFromLayout): its
//     range may be granted to another host within the interval, whose
//     accesses must not be shown to this one.
//   - A granted grant joins it at most Tuning.LayoutInterval after the last
//     rebuild from memory (or layoutShare times that rebuild's cost), so a
//     burst rebuilds far fewer times than it changes.
//   - A change the copy cannot apply (a device or host event, a grant
//     without its extents) rebuilds from the ledger on the same schedule.
//   - The subscription drops changes when its buffer is full, so while
//     changes come the ledger is also read at most Tuning.LayoutVerify
//     after the last read (or layoutShare times its cost), and every 10 s
//     regardless: the last change of a burst is checked against the
//     ledger, and a lost one corrected, within that bound.
//
// The intervals are real time, not the service's clock: they bound CPU,
// they stamp nothing.
func (t *Service) followGrants(ctx context.Context, changes <-chan dcd.Change) {
	backstop := time.NewTicker(10 * time.Second)
	defer backstop.Stop()
	var (
		mem    pace // a change the copy applied, not yet in the layout
		ledger pace // the ledger to be read: soon, or to verify the copy
		soon   bool // ledger.pending wants LayoutInterval, not LayoutVerify
		timer  = time.NewTimer(0)
		due    <-chan time.Time // set while the timer runs
	)
	mem.last, ledger.last = time.Now(), time.Now()
	defer timer.Stop()
	<-timer.C
	for {
		select {
		case <-ctx.Done():
			return
		case c, ok := <-changes:
			if !ok {
				return
			}
			if !layoutChange(c) {
				break
			}
			ledger.pending = true
			switch t.applyChange(c) {
			case changeApplied:
				mem.pending = true
			case changeUnknown:
				soon = true
			}
		case <-due:
		case <-backstop.C:
			ledger.pending, soon = true, true
		}
		now := time.Now()
		ledgerGap := t.cfg.LayoutVerify
		if soon {
			ledgerGap = t.cfg.LayoutInterval
		}
		switch {
		case ledger.ready(now, ledgerGap):
			applied := mem.pending
			soon, mem.pending = false, false
			ledger.run(func() {
				if err := t.rebuildLayout(ctx); err != nil && ctx.Err() == nil {
					// Tried again after the gap; what the copy applied
					// meanwhile reaches the layout now, or a ledger
					// that keeps failing would keep it out.
					t.log.Warn("telemetry: rebuilding the host layout", "err", err)
					ledger.pending = true
					if applied {
						t.layoutFromCopy()
					}
				}
			})
		case mem.ready(now, t.cfg.LayoutInterval):
			mem.run(t.layoutFromCopy)
		}
		// Wake for the earliest rebuild still pending (a reset timer
		// delivers no stale tick).
		wait, ok := ledger.wait(now, ledgerGap)
		if w, mok := mem.wait(now, t.cfg.LayoutInterval); mok && (!ok || w < wait) {
			wait, ok = w, true
		}
		if ok {
			timer.Reset(max(wait, time.Millisecond))
			due = timer.C
		} else {
			timer.Stop()
			due = nil
		}
	}
}

// pace spaces one kind of rebuild: pending says one is wanted, last when
// the last began, cost what it took.
type pace struct {
	pending bool
	last    time.Time
	cost    time.Duration
}

// ready reports whether a pending rebuild may run now, gap (or
// layoutShare times its last cost) after the last one began.
func (p *pace) ready(now time.Time, gap time.Duration) bool {
	return p.pending && now.Sub(p.last) >= rebuildGap(gap, p.cost)
}

// wait is how long until a pending rebuild may run.
func (p *pace) wait(now time.Time, gap time.Duration) (time.Duration, bool) {
	if !p.pending {
		return 0, false
	}
	return rebuildGap(gap, p.cost) - now.Sub(p.last), true
}

// run runs a rebuild and times it.
func (p *pace) run(rebuild func()) {
	p.pending, p.last = false, time.Now()
	rebuild()
	p.cost = time.Since(p.last)
}

// layoutShare is how many times its own cost a rebuild waits, at least,
// after the last one began: rebuilds take at most 1/layoutShare of the
// time during a burst.
const layoutShare = 10

// rebuildGap is the least time between the starts of two rebuilds: the
// configured interval, or layoutShare times what the last one took.
func rebuildGap(interval, cost time.Duration) time.Duration {
	return max(interval, layoutShare*cost)
}

// layoutChange reports whether c may change which host holds which DPA:
// a reservation, a deletion, an intent to add and an intent to release
// move no extents, and rebuilding reads every active grant.
func layoutChange(c dcd.Change) bool {
	if c.Kind == dcd.ChangeChunk {
		return false
	}
	return c.Grant == nil || (c.Grant.State != dcd.GrantAdding && c.Grant.State != dcd.GrantReleasing)
}

// The outcomes of applyChange.
const (
	changeNone    = iota // nothing the layout shows changed
	changeApplied        // the copy changed: rebuild from it
	changeUnknown        // only the ledger can say: read it
)

// applyChange applies c to the copy of the active grants: a grant that
// ended leaves it and the layout at once; a granted grant with its
// extents joins the copy.
func (t *Service) applyChange(c dcd.Change) int {
	g := c.Grant
	switch {
	case g == nil:
		return changeUnknown
	case !g.State.Active():
		t.dropFromLayout(g.ID)
		return changeNone
	case g.State == dcd.GrantGranted && len(g.Extents) > 0:
		if t.grants == nil {
			t.grants = make(map[dcd.GrantID]copied)
		}
		t.grants[g.ID] = copied{grant: *g}
		return changeApplied
	}
	return changeUnknown
}

// rebuildLayout maps DPA to hosts from the ledger's active grants and, on
// the virtual box, starts or stops the hosts' workloads to match.
func (t *Service) rebuildLayout(ctx context.Context) error {
	grants, err := t.mgr.Ledger().Grants(ctx, dcd.GrantFilter{Active: true})
	if err != nil {
		return err
	}
	t.grants = make(map[dcd.GrantID]copied, len(grants))
	for _, g := range grants {
		t.grants[g.ID] = copied{grant: g}
	}
	t.layoutFromCopy()
	return nil
}

// layoutFromCopy builds the layout from the copy of the active grants
// (no ledger read) and syncs the virtual box's workloads with it.
func (t *Service) layoutFromCopy() {
	l := layoutOf(t.grants, true)
	t.layout.Store(l)
	t.syncWorkloads(l)
}

// dropFromLayout takes grant id out of the copy and, if the layout shows
// it, out of the layout: the cheap half of a rebuild, for a grant that
// ended. A grant that came and went between two rebuilds (most of them,
// on a box granting and releasing at full rate) costs no rebuild at all.
func (t *Service) dropFromLayout(id dcd.GrantID) {
	c, ok := t.grants[id]
	if !ok {
		return
	}
	delete(t.grants, id)
	if !c.shown {
		return
	}
	// The layout in use is the one the shown grants build: cut the grant
	// out of it, or build it again from them where shared capacity makes
	// that inexact. Grants that joined the copy since stay out: they wait
	// for their rebuild, or every drop would show them and the next drop
	// would rebuild again.
	if l, ok := t.layout.Load().Without(int(c.grant.Host), c.grant.Extents); ok {
		t.layout.Store(l)
		return
	}
	t.layout.Store(layoutOf(t.grants, false))
}

// copied is an active grant in the follower's copy; shown says the
// layout in use was built with it.
type copied struct {
	grant dcd.Grant
	shown bool
}

// layoutOf is agg.LayoutFromGrants over the copy: every grant in it,
// marking each shown, or (all false) only those already shown.
func layoutOf(grants map[dcd.GrantID]copied, all bool) *agg.Layout {
	per := make(map[int][]cci.Extent, 8)
	for id, c := range grants {
		if !c.shown && !all {
			continue
		}
		if g := c.grant; g.State.Active() {
			per[int(g.Host)] = append(per[int(g.Host)], g.Extents...)
		}
		if !c.shown {
			c.shown = true
			grants[id] = c
		}
	}
	return agg.NewLayout(per)
}

// syncWorkloads runs the configured workload on every host that holds
// capacity and stops it on hosts that hold none.
func (t *Service) syncWorkloads(l *agg.Layout) {
	if t.box == nil || t.workld == SimWorkloadNone {
		return
	}
	t.workMu.Lock()
	defer t.workMu.Unlock()
	want := map[int]sim.WorkloadKind{}
	shared := l.Extents(agg.Shared)
	for _, h := range l.Hosts() {
		kind := sim.WorkloadKind(t.workld)
		if t.workld == SimWorkloadMixed {
			switch {
			case overlapsAny(l.Extents(h), shared):
				kind = sim.WorkloadKVCache
			case h%2 == 0:
				kind = sim.WorkloadZipf
			default:
				kind = sim.WorkloadHotSet
			}
		}
		want[h] = kind
	}
	for h, k := range want {
		if t.started[h] == k {
			continue
		}
		if err := t.box.StartWorkload(h, k, sim.WorkloadParams{}); err != nil {
			t.log.Warn("telemetry: starting a sim workload", "host", h, "err", err)
			continue
		}
		t.started[h] = k
	}
	for h := range t.started {
		if _, ok := want[h]; !ok {
			t.box.StopWorkload(h)
			delete(t.started, h)
		}
	}
}

// stopWorkloads stops every workload the service started.
func (t *Service) stopWorkloads() {
	if t.box == nil {
		return
	}
	t.workMu.Lock()
	defer t.workMu.Unlock()
	for h := range t.started {
		t.box.StopWorkload(h)
	}
	clear(t.started)
}

func overlapsAny(a, b []cci.Extent) bool {
	for _, x := range a {
		for _, y := range b {
			if x.DPA < y.End() && y.DPA < x.End() {
				return true
			}
		}
	}
	return false
}
