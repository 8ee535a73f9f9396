package telemetry

import (
	"context"
	"time"

	"cxlpool/dcd"
	"cxlpool/fabric/cci"
	"cxlpool/hmu/agg"
	"cxlpool/sim"
)

// followGrants rebuilds the layout after capacity changes, and every 10 s
// in case a burst of changes overflowed the subscription. A rebuild reads
// every active grant, so a busy pool (hundreds of grants and releases a
// second) would spend a good share of a core on it: the first change
// after a quiet spell rebuilds at once, later ones at most once per
// Tuning.LayoutInterval, and the last change of a burst always gets a
// rebuild that reads the ledger after it. A rebuild's cost grows with the
// grants (a median 5 ms at 480 on the 2-core build machine: a quarter of
// a core at the 20 ms interval), so the interval also grows with what the
// last rebuild took (rebuildGap): a burst never spends more than a tenth
// of a core on the layout. The interval is real time, not the service's
// clock: it bounds CPU, it stamps nothing.
func (t *Service) followGrants(ctx context.Context, changes <-chan dcd.Change) {
	backstop := time.NewTicker(10 * time.Second)
	defer backstop.Stop()
	var (
		pending bool               // a change since the last rebuild began
		due     <-chan time.Time   // set while a rebuild waits for the interval
		last    = time.Now()       // when the last rebuild began
		cost    time.Duration      // how long the last rebuild took
		timer   = time.NewTimer(0) // reused for due
	)
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
			pending = pending || layoutChange(c)
			if c.Grant != nil && !c.Grant.State.Active() {
				// A grant that ended leaves the layout now, not at the
				// next rebuild: its range may be granted to another host
				// within the interval, whose accesses must not be shown
				// to this one.
				t.dropFromLayout(c.Grant.ID)
			}
		case <-due:
			due = nil
		case <-backstop.C:
			pending = true
		}
		if !pending || due != nil {
			continue
		}
		if wait := rebuildGap(t.cfg.LayoutInterval, cost) - time.Since(last); wait > 0 {
			timer.Reset(wait)
			due = timer.C
			continue
		}
		pending, last = false, time.Now()
		if err := t.rebuildLayout(ctx); err != nil && ctx.Err() == nil {
			t.log.Warn("telemetry: rebuilding the host layout", "err", err)
		}
		cost = time.Since(last)
	}
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

// rebuildLayout maps DPA to hosts from the ledger's active grants and, on
// the virtual box, starts or stops the hosts' workloads to match.
func (t *Service) rebuildLayout(ctx context.Context) error {
	grants, err := t.mgr.Ledger().Grants(ctx, dcd.GrantFilter{Active: true})
	if err != nil {
		return err
	}
	l := agg.LayoutFromGrants(grants)
	t.grants = grants
	t.layout.Store(l)
	t.syncWorkloads(l)
	return nil
}

// dropFromLayout rebuilds the layout from the grants it was built from
// without grant id (no ledger read): the cheap half of a rebuild, for a
// grant that ended.
func (t *Service) dropFromLayout(id dcd.GrantID) {
	kept := make([]dcd.Grant, 0, len(t.grants))
	for _, g := range t.grants {
		if g.ID != id {
			kept = append(kept, g)
		}
	}
	if len(kept) == len(t.grants) {
		return
	}
	t.grants = kept
	t.layout.Store(agg.LayoutFromGrants(kept))
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
