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
// at start, after a device reset and whenever events were lost. Flows that
// are in flight in this process are left to finish on their own.
func (m *Manager) Reconcile(ctx context.Context) (ReconcileReport, error) {
	// One reconcile at a time: two would both act on the same snapshot.
	m.reconcileMu.Lock()
	defer m.reconcileMu.Unlock()
	var rep ReconcileReport
	tags, err := m.cfg.Device.Tags(ctx)
	if err != nil {
		return rep, fmt.Errorf("read tag list: %w", err)
	}
	lists := make(map[HostID][]cci.Extent)
	for _, h := range m.Box().Heads {
		l, err := m.cfg.Device.Extents(ctx, h.LD)
		if err != nil {
			return rep, fmt.Errorf("read extent list of host %d: %w", h.LD, err)
		}
		lists[HostID(h.LD)] = l.Extents
	}
	chunks, err := m.cfg.Ledger.Chunks(ctx)
	if err != nil {
		return rep, err
	}
	byID := make(map[ChunkID]Chunk, len(chunks))
	chunkOf := make(map[cci.Tag]Chunk, len(chunks))
	for _, c := range chunks {
		byID[c.ID] = c
		chunkOf[c.Tag] = c
	}
	grants, err := m.cfg.Ledger.Grants(ctx, GrantFilter{Active: true})
	if err != nil {
		return rep, err
	}

	explained := make(map[hostTag]bool)
	for _, g := range grants {
		c, ok := byID[g.Chunk]
		if !ok {
			return rep, fmt.Errorf("active grant %d names chunk %d, which the ledger does not have: %w", g.ID, g.Chunk, ErrConflict)
		}
		key := hostTag{g.Host, c.Tag}
		explained[key] = true
		if m.inFlight(g.ID) {
			continue
		}
		var held []cci.Extent
		for _, e := range lists[g.Host] {
			if e.Tag == c.Tag {
				held = append(held, e)
			}
		}
		ti, _ := tags.Find(c.Tag)
		pending := ti.HasPending(uint16(g.Host))
		switch g.State {
		case GrantAdding:
			switch {
			case pending:
				m.spawn(ctx, g.ID, func(ctx context.Context) Grant { return m.runAdd(ctx, g, c, false, true, nil) })
				rep.Resumed++
			case len(held) > 0:
				m.completeGrant(ctx, g, held)
				rep.Granted++
			default:
				m.failGrant(ctx, g, fmt.Errorf("%w: the add did not take effect on the device (interrupted)", ErrDevice))
				rep.Failed++
			}
		case GrantGranted:
			if len(held) == 0 && !pending {
				ng, err := m.cfg.Ledger.MarkLost(ctx, g.ID, "the device no longer holds this capacity")
				if errors.Is(err, ErrConflict) {
					continue // a flow finished it after the snapshot
				}
				if err != nil {
					return rep, err
				}
				m.log.Error("granted capacity lost", "grant", g.ID, "host", g.Host, "chunk", g.Chunk)
				m.publish(Change{Kind: ChangeGrant, Chunk: g.Chunk, Host: g.Host, Grant: &ng, Message: "lost"})
				rep.Lost++
			} else if !sameExtents(held, g.Extents) {
				m.log.Warn("device extents differ from the ledger", "grant", g.ID, "device", len(held), "ledger", len(g.Extents))
			}
		case GrantReleasing:
			if len(held) > 0 || pending {
				m.spawn(ctx, g.ID, func(ctx context.Context) Grant { return m.runRelease(ctx, g, c, true, false) })
				rep.Resumed++
				continue
			}
			ng, err := m.cfg.Ledger.CompleteRelease(ctx, g.ID)
			if errors.Is(err, ErrConflict) {
				continue // a flow finished it after the snapshot
			}
			if err != nil {
				return rep, err
			}
			m.publish(Change{Kind: ChangeGrant, Chunk: g.Chunk, Host: g.Host, Grant: &ng, Message: "released"})
			rep.Released++
		}
	}

	// Accepted capacity no grant explains. Under a live chunk's tag it can
	// only come from an add this FM sent while its intent was still being
	// committed when it stopped: the host uses it, so adopt it. Anything
	// else is kept out of circulation as an orphan.
	onDevice := make(map[hostTag]bool)
	for host, exts := range lists {
		held := make(map[cci.Tag][]cci.Extent)
		for _, e := range exts {
			held[e.Tag] = append(held[e.Tag], e)
		}
		for tag, es := range held {
			onDevice[hostTag{host, tag}] = true
			if explained[hostTag{host, tag}] {
				continue
			}
			if c, ok := chunkOf[tag]; ok {
				ng, err := m.cfg.Ledger.AdoptGrant(ctx, c.ID, host, es)
				if err == nil {
					m.log.Warn("adopted capacity granted before its intent was durable", "grant", ng.ID, "chunk", c.ID, "host", host)
					m.publish(Change{Kind: ChangeGrant, Chunk: c.ID, Host: host, Grant: &ng, Message: "granted"})
					rep.Adopted++
					continue
				}
				m.log.Error("cannot adopt capacity under a chunk's tag", "chunk", c.ID, "host", host, "err", err)
			}
			if err := m.cfg.Ledger.RecordOrphan(ctx, Orphan{Host: host, Tag: tag, Extents: es, Found: m.cfg.Clock()}); err != nil {
				return rep, err
			}
			m.log.Error("orphaned capacity on the device", "host", host, "tag", tag, "extents", len(es))
			m.publish(Change{Kind: ChangeOrphan, Host: host, Message: "orphaned capacity " + tag.String()})
			rep.Orphans++
		}
	}
	// Offers nobody asked for (the ledger always writes its intent first):
	// nothing was accepted yet, so withdrawing loses no data.
	for _, t := range tags.Tags {
		for _, h := range m.Box().Heads {
			key := hostTag{HostID(h.LD), t.Tag}
			if !t.HasPending(h.LD) || explained[key] {
				continue
			}
			req := fabric.ReleaseRequest{Host: h.LD, Policy: fabric.ReleaseTagBased, Forced: true, Sanitize: true, Tag: t.Tag}
			if err := m.cfg.Device.Release(ctx, req); err != nil {
				m.log.Warn("withdrawing an unknown pending offer", "host", h.LD, "tag", t.Tag, "err", err)
				continue
			}
			rep.Withdrawn++
		}
	}
	orphans, err := m.cfg.Ledger.Orphans(ctx)
	if err != nil {
		return rep, err
	}
	for _, o := range orphans {
		if !onDevice[hostTag{o.Host, o.Tag}] {
			if err := m.cfg.Ledger.ClearOrphan(ctx, o.Host, o.Tag); err != nil {
				return rep, err
			}
		}
	}
	if rep != (ReconcileReport{}) {
		m.log.Info("reconciled with the device", "granted", rep.Granted, "failed", rep.Failed, "released", rep.Released,
			"lost", rep.Lost, "resumed", rep.Resumed, "adopted", rep.Adopted, "orphans", rep.Orphans, "withdrawn", rep.Withdrawn)
	}
	return rep, nil
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
	held, err := m.holds(ctx, host, tag)
	if err != nil {
		return fmt.Errorf("release orphan %s: %w", tag, deviceErr(err))
	}
	if held {
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
