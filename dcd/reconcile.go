package dcd

import (
	"context"
	"errors"
	"fmt"

	"cxlpool/fabric"
	"cxlpool/fabric/cci"
)

// ReconcileReport says what a reconcile found and did.
type ReconcileReport struct {
	Granted   int // adding → granted: the host had accepted before the crash
	Failed    int // adding → failed: the add never took effect
	Released  int // releasing → released: the device had finished
	Lost      int // granted → lost: the device no longer holds the capacity
	Resumed   int // flows still in progress on the device, now driven again
	Adopted   int // accepted under a chunk's tag before the intent was durable
	Orphans   int // capacity on the device no ledger row explains
	Withdrawn int // pending offers nobody asked for, withdrawn
}

type hostTag struct {
	host HostID
	tag  cci.Tag
}

// Reconcile brings the ledger into agreement with the device, which is the
// truth about who holds what (see shared/specs/ledger-design.md). It runs
// at start, after a device reset and whenever events were lost, beside the
// ordinary flows.
//
// A snapshot of the device and of the ledger is only used to find the
// (host, tag) pairs that may disagree: the two reads cannot be taken at one
// instant, so a flow that finishes between them would be judged on stale
// state (a released grant adopted back, a completed one marked lost). Each
// candidate is then judged by settle on fresh reads of both, taken under
// the locks every flow of that chunk and host holds, so nothing can change
// them meanwhile except a host giving capacity back on its own, whose event
// brings its own settle.
func (m *Manager) Reconcile(ctx context.Context) (ReconcileReport, error) {
	// One reconcile at a time: two would act on the same candidates.
	m.reconcileMu.Lock()
	defer m.reconcileMu.Unlock()
	var rep ReconcileReport
	tags, err := m.cfg.Device.Tags(ctx)
	if err != nil {
		return rep, fmt.Errorf("read tag list: %w", err)
	}
	held := make(map[hostTag][]cci.Extent)
	for _, h := range m.Box().Heads {
		l, err := m.cfg.Device.Extents(ctx, h.LD)
		if err != nil {
			return rep, fmt.Errorf("read extent list of host %d: %w", h.LD, err)
		}
		for _, e := range l.Extents {
			if e.Length > 0 {
				k := hostTag{HostID(h.LD), e.Tag}
				held[k] = append(held[k], e)
			}
		}
	}
	m.mu.Lock()
	hook := m.hookAfterSnapshot
	m.mu.Unlock()
	if hook != nil {
		hook()
	}
	chunks, err := m.cfg.Ledger.Chunks(ctx)
	if err != nil {
		return rep, err
	}
	byID := make(map[ChunkID]Chunk, len(chunks))
	for _, c := range chunks {
		byID[c.ID] = c
	}
	grants, err := m.cfg.Ledger.Grants(ctx, GrantFilter{Active: true})
	if err != nil {
		return rep, err
	}
	orphans, err := m.cfg.Ledger.Orphans(ctx)
	if err != nil {
		return rep, err
	}

	var order []hostTag
	cand := make(map[hostTag]bool)
	add := func(k hostTag) {
		if !cand[k] {
			cand[k] = true
			order = append(order, k)
		}
	}
	explained := make(map[hostTag]bool)
	for _, g := range grants {
		c, ok := byID[g.Chunk]
		if !ok {
			// Reserved after the chunks were read (a live chunk is
			// never deleted while it has active grants): its own
			// flow is driving it.
			continue
		}
		k := hostTag{g.Host, c.Tag}
		explained[k] = true
		if m.inFlight(g.ID) {
			continue
		}
		ti, _ := tags.Find(c.Tag)
		pending := ti.HasPending(uint16(g.Host))
		switch {
		case g.State != GrantGranted:
			add(k) // an adding or releasing grant nobody drives
		case len(held[k]) == 0 && !pending:
			add(k)
		case !sameExtents(held[k], g.Extents):
			m.log.Warn("device extents differ from the ledger", "grant", g.ID, "device", len(held[k]), "ledger", len(g.Extents))
		}
	}
	recorded := make(map[hostTag]bool)
	for _, o := range orphans {
		k := hostTag{o.Host, o.Tag}
		recorded[k] = true
		if len(held[k]) == 0 {
			add(k) // gone from the device: forget it
		}
	}
	for k := range held {
		if !explained[k] && !recorded[k] {
			add(k)
		}
	}
	for _, t := range tags.Tags {
		for _, h := range m.Box().Heads {
			if k := (hostTag{HostID(h.LD), t.Tag}); t.HasPending(h.LD) && !explained[k] {
				add(k)
			}
		}
	}

	chunkOf := make(map[cci.Tag]Chunk, len(chunks))
	for _, c := range chunks {
		chunkOf[c.Tag] = c
	}
	var errs []error
	for _, k := range order {
		var c *Chunk
		if x, ok := chunkOf[k.tag]; ok {
			c = &x
		}
		if err := m.settle(ctx, k.host, k.tag, c, &rep); err != nil {
			errs = append(errs, err)
		}
	}
	if rep != (ReconcileReport{}) {
		m.log.Info("reconciled with the device", "granted", rep.Granted, "failed", rep.Failed, "released", rep.Released,
			"lost", rep.Lost, "resumed", rep.Resumed, "adopted", rep.Adopted, "orphans", rep.Orphans, "withdrawn", rep.Withdrawn)
	}
	return rep, errors.Join(errs...)
}

// settle judges what host holds under tag, on the device and in the
// ledger as they are now, and brings the ledger (or, for offers nobody
// asked for, the device) into agreement. c is the live chunk whose tag it
// is, if any. It holds the chunk's lock throughout, which every flow of
// the chunk holds while it changes either side, and leaves alone what a
// flow of this process is driving.
func (m *Manager) settle(ctx context.Context, host HostID, tag cci.Tag, c *Chunk, rep *ReconcileReport) error {
	if c != nil {
		defer m.lockChunk(c.ID)()
	}
	// Not the host's lock: a flow of another chunk holds it while it
	// waits for the host, and what this settles must not wait for that.
	// Only the withdrawal below sends the host's head a command.
	if m.flowOn(host, tag) {
		return nil
	}
	var g *Grant
	if c != nil {
		if fresh, err := m.cfg.Ledger.Chunk(ctx, c.ID); err == nil {
			c = &fresh
		} else if !errors.Is(err, ErrNotFound) {
			return err
		} else {
			c = nil // deleted meanwhile: its tag is nobody's now
		}
	}
	if c != nil {
		gs, err := m.cfg.Ledger.Grants(ctx, GrantFilter{Host: &host, Chunk: c.ID, Active: true})
		if err != nil {
			return err
		}
		if len(gs) > 0 {
			g = &gs[0]
			if m.inFlight(g.ID) {
				return nil
			}
		}
	}
	st, exts, err := m.addStatus(ctx, host, tag)
	if err != nil {
		return fmt.Errorf("settle host %d tag %s: %w", host, tag, err)
	}
	if g == nil {
		return m.settleUnexplained(ctx, host, tag, c, st, exts, rep)
	}
	switch g.State {
	case GrantAdding:
		switch st {
		case addPending:
			m.spawnFlow(ctx, *g, c.Tag, flowAdd, func(ctx context.Context) Grant {
				var out Grant
				m.runAdd(ctx, *g, *c, false, true, nil, nil, func(g Grant) { out = g }) // without an intent, done runs before runAdd returns
				return out
			})
			rep.Resumed++
		case addAccepted:
			m.completeGrant(ctx, *g, exts)
			rep.Granted++
		default:
			// Its flow gave up without an outcome (the device did not
			// answer) or the Fabric Manager stopped before it had one:
			// either way the device never took the add.
			m.failGrant(ctx, *g, fmt.Errorf("%w: the add did not take effect on the device: it could not be asked in time, or the Fabric Manager stopped", ErrDeviceUnreachable))
			rep.Failed++
		}
	case GrantGranted:
		if st != addNone {
			return nil
		}
		if err := m.loseGrant(ctx, *g, "the device no longer holds this capacity"); err != nil {
			return err
		}
		rep.Lost++
	case GrantReleasing:
		if st != addNone {
			m.spawnFlow(ctx, *g, c.Tag, flowRelease, func(ctx context.Context) Grant { return m.runRelease(ctx, *g, *c, true, false) })
			rep.Resumed++
			return nil
		}
		ng, err := m.cfg.Ledger.CompleteRelease(ctx, g.ID)
		if err != nil {
			return err
		}
		m.publish(Change{Kind: ChangeGrant, Chunk: g.Chunk, Host: g.Host, Grant: &ng, Message: "released"})
		rep.Released++
	}
	return nil
}

// settleUnexplained handles what the device shows for host under tag when
// no active grant explains it.
func (m *Manager) settleUnexplained(ctx context.Context, host HostID, tag cci.Tag, c *Chunk, st addState, exts []cci.Extent, rep *ReconcileReport) error {
	switch st {
	case addAccepted:
		// Under a live chunk's tag it can only come from an add this FM
		// sent while its intent was still being committed when it
		// stopped: the host uses it, so adopt it. Anything else is kept
		// out of circulation as an orphan.
		if c != nil {
			ng, err := m.cfg.Ledger.AdoptGrant(ctx, c.ID, host, exts)
			if err == nil {
				m.log.Warn("adopted capacity granted before its intent was durable", "grant", ng.ID, "chunk", c.ID, "host", host)
				m.publish(Change{Kind: ChangeGrant, Chunk: c.ID, Host: host, Grant: &ng, Message: "granted"})
				rep.Adopted++
				return nil
			}
			m.log.Error("cannot adopt capacity under a chunk's tag", "chunk", c.ID, "host", host, "err", err)
		}
		if err := m.cfg.Ledger.RecordOrphan(ctx, Orphan{Host: host, Tag: tag, Extents: exts, Found: m.cfg.Clock()}); err != nil {
			return err
		}
		m.log.Error("orphaned capacity on the device", "host", host, "tag", tag, "extents", len(exts))
		m.publish(Change{Kind: ChangeOrphan, Host: host, Message: "orphaned capacity " + tag.String()})
		rep.Orphans++
	case addPending:
		// An offer nobody asked for (the ledger always writes its intent
		// first): nothing was accepted yet, so withdrawing loses no data.
		req := fabric.ReleaseRequest{Host: uint16(host), Policy: fabric.ReleaseTagBased, Forced: true, Sanitize: true, Tag: tag}
		unlock := m.lockHost(host)
		err := m.cfg.Device.Release(ctx, req)
		unlock()
		if err != nil {
			m.log.Warn("withdrawing an unknown pending offer", "host", host, "tag", tag, "err", err)
			return nil
		}
		rep.Withdrawn++
	default:
		if err := m.cfg.Ledger.ClearOrphan(ctx, host, tag); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	return nil
}

// loseGrant records that the device no longer holds g's capacity (its
// host gave it back on its own, or the device lost it), after the
// capacity guard has cut every other path to it.
func (m *Manager) loseGrant(ctx context.Context, g Grant, reason string) error {
	var ng Grant
	record := func() error {
		var err error
		ng, err = m.cfg.Ledger.MarkLost(ctx, g.ID, reason)
		return err
	}
	var err error
	if m.cfg.Guard != nil {
		err = m.cfg.Guard.Leaving(ctx, g, true, record)
	} else {
		err = record()
	}
	if err != nil {
		return fmt.Errorf("grant %d lost: %w", g.ID, err)
	}
	m.log.Error("granted capacity lost", "grant", g.ID, "host", g.Host, "chunk", g.Chunk, "reason", reason)
	m.publish(Change{Kind: ChangeGrant, Chunk: g.Chunk, Host: g.Host, Grant: &ng, Message: "lost"})
	return nil
}

// ReleaseOrphan gives orphaned capacity back to the pool: a forced,
// sanitizing release of the tag from the host.
func (m *Manager) ReleaseOrphan(ctx context.Context, host HostID, tag cci.Tag) error {
	defer m.lockHost(host)()
	// Watching the host marks the release as expected, so its Capacity
	// Released event does not look like a host acting on its own.
	defer m.unwatch(host, m.watch(host))
	req := fabric.ReleaseRequest{Host: uint16(host), Policy: fabric.ReleaseTagBased, Forced: true, Sanitize: true, Tag: tag}
	var size uint64
	os, err := m.cfg.Ledger.Orphans(ctx)
	if err != nil {
		return err
	}
	found := false
	for _, o := range os {
		if o.Host == host && o.Tag == tag {
			found = true
			for _, e := range o.Extents {
				size += e.Length
			}
		}
	}
	if !found {
		return fmt.Errorf("orphan %s on host %d: %w", tag, host, ErrNotFound)
	}
	req.Length = size
	if err := m.retryBusy(ctx, func() error { return m.cfg.Device.Release(ctx, req) }); err != nil && !errors.Is(err, cci.InvalidInput) {
		return fmt.Errorf("release orphan %s: %w", tag, deviceErr(err))
	}
	// Held or still offered: an orphan has no grant, so nothing rules
	// out a pending offer of its tag.
	st, _, err := m.addStatus(ctx, host, tag)
	if err != nil {
		return fmt.Errorf("release orphan %s: %w", tag, deviceErr(err))
	}
	if st != addNone {
		return fmt.Errorf("release orphan %s: the device still holds it: %w", tag, ErrDevice)
	}
	// A reconcile that ran meanwhile may have cleared it already.
	if err := m.cfg.Ledger.ClearOrphan(ctx, host, tag); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	m.publish(Change{Kind: ChangeOrphan, Host: host, Message: "orphan released " + tag.String()})
	return nil
}

func (m *Manager) inFlight(id GrantID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.flights[id]
	return ok
}

func sameExtents(a, b []cci.Extent) bool {
	if len(a) != len(b) {
		return false
	}
	seen := make(map[cci.Extent]int, len(a))
	for _, e := range a {
		seen[e]++
	}
	for _, e := range b {
		if seen[e] == 0 {
			return false
		}
		seen[e]--
	}
	return true
}
