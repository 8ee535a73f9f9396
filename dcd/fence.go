package dcd

import (
	"context"
	"errors"
	"fmt"

	"cxlpool/fabric"
)

// ReasonedReleaser is an optional Ledger extension: BeginRelease that also
// records why the release was started, kept on the grant once it is
// released, so the ledger tells a forced release for a power cycle from a
// host or an administrator giving capacity back. dcd/sqlite implements it;
// with a ledger that does not, fenced releases are recorded without one.
type ReasonedReleaser interface {
	BeginReleaseReason(ctx context.Context, id GrantID, reason string) (Grant, error)
}

// fenceRounds bounds Fence's release-and-check rounds: the first releases
// what the ledger knows, later ones what a reconcile found besides.
const fenceRounds = 3

// Fence protects host's capacity across a power cut of its head (it
// implements bmc/policy's HeadFence together with Recover):
//
//  1. grants to host are refused with ErrFenced from now until Recover;
//     grants that were already past that check are awaited;
//  2. every flow of host in flight (adds, releases) is awaited;
//  3. every active grant of host is released with a forced, sanitizing
//     release (the host is about to lose power and cannot answer), the
//     ledger recording the power cycle as the reason; adds the ledger
//     left unresolved are withdrawn; orphans of host are released;
//  4. Fence returns nil only once the device holds nothing for host (no
//     extents, no pending offers) and the ledger no active grant.
//
// It is idempotent. If it fails the fence stays up; the caller decides
// (bmc/policy leaves the power on and calls Recover).
func (m *Manager) Fence(ctx context.Context, host int) error {
	h, err := m.fenceHost(host)
	if err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	why := fmt.Sprintf("head %d is being power-cycled", host)
	m.admit.Lock() // waits for grants past the check to register their flows
	m.mu.Lock()
	_, already := m.fenced[h]
	m.fenced[h] = why
	m.mu.Unlock()
	m.admit.Unlock()
	if !already {
		m.log.Info("host fenced for a head power cycle", "host", host)
		m.publish(Change{Kind: ChangeHost, Host: h, Message: "fenced for a head power cycle"})
	}
	reason := fmt.Sprintf("forced release for a power cycle of head %d; the device sanitizes the capacity", host)
	for round := 0; ; round++ {
		if err := m.settleHost(ctx, h); err != nil {
			return fmt.Errorf("fence host %d: %w", host, err)
		}
		extents, pending, active, err := m.hostHoldings(ctx, h)
		if err != nil {
			return fmt.Errorf("fence host %d: %w", host, err)
		}
		if extents == 0 && pending == 0 && active == 0 {
			m.log.Info("host fenced: the device holds nothing for it", "host", host, "rounds", round)
			return nil
		}
		if round == fenceRounds {
			return fmt.Errorf("fence host %d: after %d rounds the device still holds %d extents and %d pending offers, the ledger %d active grants: %w",
				host, round, extents, pending, active, ErrDevice)
		}
		if round > 0 {
			// Something the ledger did not explain: let reconcile
			// turn it into grants or orphans, which the next release
			// pass gives back.
			if _, err := m.Reconcile(ctx); err != nil {
				return fmt.Errorf("fence host %d: %w", host, err)
			}
		}
		if err := m.releaseHost(ctx, h, reason); err != nil {
			return fmt.Errorf("fence host %d: %w", host, err)
		}
	}
}

// Recover lifts the fence of host after its head is powered on again (or
// a power cut was abandoned): it reconciles the ledger with the device and
// lets grants to host start again. It is idempotent. The fence is lifted
// even when the reconcile fails (its error is returned): the device stays
// the truth, and the next reconcile (after any device event, or a later
// Recover) settles the ledger.
func (m *Manager) Recover(ctx context.Context, host int) error {
	h, err := m.fenceHost(host)
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	_, rerr := m.Reconcile(ctx)
	m.admit.Lock()
	m.mu.Lock()
	_, was := m.fenced[h]
	delete(m.fenced, h)
	m.mu.Unlock()
	m.admit.Unlock()
	if was {
		m.log.Info("host fence lifted", "host", host)
		m.publish(Change{Kind: ChangeHost, Host: h, Message: "fence lifted"})
	}
	if rerr != nil {
		return fmt.Errorf("recover host %d: %w", host, rerr)
	}
	return nil
}

// Fenced reports whether grants to host are refused because of a power
// cycle, and why.
func (m *Manager) Fenced(host HostID) (why string, fenced bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	why, fenced = m.fenced[host]
	return why, fenced
}

func (m *Manager) fenceReason(h HostID) string {
	why, _ := m.Fenced(h)
	return why
}

// fenceHost checks that host names a head of the box.
func (m *Manager) fenceHost(host int) (HostID, error) {
	if host < 0 || host > 0xFFFF {
		return 0, fmt.Errorf("host %d: %w", host, ErrNotFound)
	}
	if _, ok := m.Box().Head(uint16(host)); !ok {
		return 0, fmt.Errorf("host %d: %w", host, ErrNotFound)
	}
	return HostID(host), nil
}

// settleHost waits until no flow of an active grant of h is in flight.
// New grants to h are refused meanwhile, so the wait ends (each flow is
// bounded by the add or release timeout).
func (m *Manager) settleHost(ctx context.Context, h HostID) error {
	for {
		grants, err := m.cfg.Ledger.Grants(ctx, GrantFilter{Host: &h, Active: true})
		if err != nil {
			return err
		}
		var wait *flight
		m.mu.Lock()
		for _, g := range grants {
			if f := m.flights[g.ID]; f != nil {
				wait = f
				break
			}
		}
		m.mu.Unlock()
		if wait == nil {
			return nil
		}
		select {
		case <-wait.done:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the host's flows: %w", ctx.Err())
		}
	}
}

// hostHoldings counts what the device holds for h (accepted extents,
// pending offers) and the ledger's active grants of h.
func (m *Manager) hostHoldings(ctx context.Context, h HostID) (extents, pending, active int, err error) {
	list, err := m.cfg.Device.Extents(ctx, uint16(h))
	if err != nil {
		return 0, 0, 0, deviceErr(err)
	}
	for _, e := range list.Extents {
		if e.Length > 0 {
			extents++
		}
	}
	tags, err := m.cfg.Device.Tags(ctx)
	if err != nil {
		return 0, 0, 0, deviceErr(err)
	}
	for _, t := range tags.Tags {
		if t.HasPending(uint16(h)) {
			pending++
		}
	}
	grants, err := m.cfg.Ledger.Grants(ctx, GrantFilter{Host: &h, Active: true})
	if err != nil {
		return 0, 0, 0, err
	}
	return extents, pending, len(grants), nil
}

// releaseHost starts a forced release of every active grant of h, withdraws
// adds nobody drives any more, releases h's orphans, and waits for the
// flows it started.
func (m *Manager) releaseHost(ctx context.Context, h HostID, reason string) error {
	grants, err := m.cfg.Ledger.Grants(ctx, GrantFilter{Host: &h, Active: true})
	if err != nil {
		return err
	}
	var errs []error
	for _, g := range grants {
		if m.inFlight(g.ID) {
			continue // a flow that started after the settle; the next round waits for it
		}
		switch g.State {
		case GrantGranted:
			if _, err := m.beginRelease(ctx, g.ID, true, reason); err != nil && !errors.Is(err, ErrConflict) {
				errs = append(errs, err)
			}
		case GrantReleasing, GrantAdding:
			c, err := m.cfg.Ledger.Chunk(ctx, g.Chunk)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if g.State == GrantReleasing {
				m.spawnFlow(ctx, g, c.Tag, flowRelease, func(ctx context.Context) Grant { return m.runRelease(ctx, g, c, true, true) })
			} else {
				m.spawnFlow(ctx, g, c.Tag, flowAdd, func(ctx context.Context) Grant { return m.withdrawForFence(ctx, g, c) })
			}
		}
	}
	orphans, err := m.cfg.Ledger.Orphans(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, o := range orphans {
		if o.Host != h {
			continue
		}
		if err := m.ReleaseOrphan(ctx, o.Host, o.Tag); err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, err)
		}
	}
	if err := m.settleHost(ctx, h); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// withdrawForFence resolves an add the ledger left in progress with no
// flow driving it: the offer is withdrawn with a forced release, and the
// grant fails as fenced; if the host had accepted it meanwhile it is
// recorded as granted, for the next round to release.
func (m *Manager) withdrawForFence(ctx context.Context, g Grant, c Chunk) Grant {
	defer m.lockChunk(g.Chunk)()
	defer m.lockHost(g.Host)()
	defer m.unwatch(g.Host, m.watch(g.Host))
	st, exts, err := m.addStatus(ctx, g.Host, c.Tag)
	if err != nil {
		m.log.Warn("fence: reading add status", "grant", g.ID, "err", err)
		return g
	}
	switch st {
	case addAccepted:
		return m.completeGrant(ctx, g, exts)
	case addPending:
		req := fabric.ReleaseRequest{Host: uint16(g.Host), Policy: fabric.ReleaseTagBased, Forced: true, Sanitize: true, Length: c.Size, Tag: c.Tag}
		if err := m.retryBusy(ctx, func() error { return m.cfg.Device.Release(ctx, req) }); err != nil {
			m.log.Warn("fence: withdrawing a pending add", "grant", g.ID, "err", err)
			return g
		}
		if st, _, err := m.addStatus(ctx, g.Host, c.Tag); err != nil || st != addNone {
			return g
		}
	}
	return m.failGrant(ctx, g, fmt.Errorf("%w: the add was withdrawn before a power cycle of head %d", ErrFenced, g.Host))
}
