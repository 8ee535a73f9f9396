package capacity

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/oemschema"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
	"cxlpool/rdma"
)

// Lost capacity. When reconcile finds that the device no longer holds what
// a grant held (the virtual box restarted with empty memory, a device was
// replaced or reset), it marks the grant lost; the chunk stays reserved in
// the ledger, so its capacity is neither usable by its host nor free for
// anyone else: it is stranded. The service
//
//   - announces every lost grant with a Critical ResourceEvent on the chunk
//     (ResourceStatusChangedCritical, with a Resolution saying what to do),
//     including those lost at start, before the API existed, which it finds
//     in the ledger;
//   - shows a stranded chunk with Status.Health Critical and
//     Oem.CxlPool.Stranded, and the pool (MemoryDomains/Pool) with
//     Status.Health Warning and Oem.CxlPool.StrandedChunks/StrandedMiB;
//   - frees every stranded chunk in one step with the OEM action
//     #CxlPool.FreeStrandedChunks on MemoryDomains/Pool.
//
// A chunk is stranded while no host holds it (no active grant) and one of
// its grants was lost since the chunk was last released: a release in
// between means a host held and gave back valid memory after the loss.
// Connecting the chunk again is the other way out (the host gets new,
// zeroed memory), freeing it the usual one.
//
// Exports from before a restart that rdma.Service.Restore did not bring
// back are announced too (ResourceErrorsDetected, Warning), once Restore
// has run.
//
// The lost grants are tracked from the ledger at setup and then from the
// Manager's change notifications; a notification the Manager drops (a
// subscriber 1024 changes behind) can hide a loss until the next start,
// never show a chunk stranded that is not, since the view also checks the
// chunk's active grants.

// FreeStrandedURI is the target of the #CxlPool.FreeStrandedChunks action.
const FreeStrandedURI = pool.MemoryDomainURI + "/Actions/Oem/CxlPool.FreeStrandedChunks"

// Event messages of lost capacity.
const (
	MsgStatusCritical = "ResourceEvent.ResourceStatusChangedCritical"
	MsgErrorsDetected = "ResourceEvent.ResourceErrorsDetected"
)

// lostSinceRelease are the grants of a chunk (any order) lost since the
// chunk was last released, by Id.
func lostSinceRelease(gs []dcd.Grant) []dcd.Grant {
	gs = slices.Clone(gs)
	slices.SortFunc(gs, func(a, b dcd.Grant) int { return int(a.ID - b.ID) })
	var lost []dcd.Grant
	for _, g := range gs {
		switch g.State {
		case dcd.GrantReleased:
			lost = nil
		case dcd.GrantLost:
			lost = append(lost, g)
		}
	}
	return lost
}

// scanLost reads the lost grants of every chunk from the ledger: those lost
// before the service started (the reconcile at start runs first).
func (c *capacity) scanLost(ctx context.Context) error {
	led := c.s.mgr.Ledger()
	chunks, err := led.Chunks(ctx)
	if err != nil {
		return err
	}
	lost := map[dcd.ChunkID][]dcd.Grant{}
	for _, ch := range chunks {
		gs, err := led.Grants(ctx, dcd.GrantFilter{Chunk: ch.ID})
		if err != nil {
			return err
		}
		if l := lostSinceRelease(gs); len(l) > 0 && !slices.ContainsFunc(gs, func(g dcd.Grant) bool { return g.State.Active() }) {
			lost[ch.ID] = l
		}
	}
	c.lmu.Lock()
	c.lost = lost
	c.lmu.Unlock()
	return nil
}

// noteChange keeps the lost grants current; it returns the grant the
// change reports lost, if it does.
func (c *capacity) noteChange(ch dcd.Change) *dcd.Grant {
	c.lmu.Lock()
	defer c.lmu.Unlock()
	switch {
	case ch.Kind == dcd.ChangeChunk && ch.Message == "deleted":
		delete(c.lost, ch.Chunk)
	case ch.Kind == dcd.ChangeGrant && ch.Grant != nil && ch.Grant.State == dcd.GrantReleased:
		delete(c.lost, ch.Grant.Chunk)
	case ch.Kind == dcd.ChangeGrant && ch.Grant != nil && ch.Grant.State == dcd.GrantLost:
		g := *ch.Grant
		if !slices.ContainsFunc(c.lost[g.Chunk], func(o dcd.Grant) bool { return o.ID == g.ID }) {
			c.lost[g.Chunk] = append(c.lost[g.Chunk], g)
		}
		return &g
	}
	return nil
}

// strandedOf returns, for the view being built, the lost grants of the
// chunks that are stranded in it.
func (c *capacity) strandedOf(v *poolView) map[dcd.ChunkID][]dcd.Grant {
	c.lmu.Lock()
	defer c.lmu.Unlock()
	out := map[dcd.ChunkID][]dcd.Grant{}
	for id, gs := range c.lost {
		if _, ok := v.chunk(id); ok && len(v.byChunk[id]) == 0 {
			out[id] = slices.Clone(gs)
		}
	}
	return out
}

// announceLost publishes the Critical event of a lost grant, once per
// grant in this process.
func (c *capacity) announceLost(g dcd.Grant) {
	c.lmu.Lock()
	done := c.announced[g.ID]
	c.announced[g.ID] = true
	c.lmu.Unlock()
	if done {
		return
	}
	host := g.Host
	uri := pool.ChunkURI(g.Chunk)
	reason := g.Reason
	if reason == "" {
		reason = "the device no longer holds this capacity"
	}
	c.s.Publish(redfish.Event{MessageKey: MsgStatusCritical, Args: []string{uri, "Critical"}, Origin: uri, Host: pool.HostRef(host),
		Resolution: fmt.Sprintf("%s's grant of memory chunk %d (Connection %d) was lost: %s. The host's data in it is gone. "+
			"While no host holds the chunk it stays reserved and strands its capacity: free it (DELETE %s, or the "+
			"#CxlPool.FreeStrandedChunks action of %s for every stranded chunk; poolctl free --stranded), or connect it "+
			"again to give a host new, zeroed memory.", pool.SystemID(g.Host), g.Chunk, g.ID, reason, uri, pool.MemoryDomainURI)})
}

// announceStartLosses publishes the events of the grants found lost at
// setup, and of the exports the restart did not bring back once the
// export service has tried. Called from startFeeders, after the push
// subscriptions run, so that they get these events too.
func (s *Server) announceStartLosses() {
	if c := s.capacity; c != nil {
		c.lmu.Lock()
		var gs []dcd.Grant
		for _, l := range c.lost {
			gs = append(gs, l...)
		}
		c.lmu.Unlock()
		slices.SortFunc(gs, func(a, b dcd.Grant) int { return int(a.ID - b.ID) })
		for _, g := range gs {
			c.announceLost(g)
		}
	}
	if s.cfg.Exports == nil {
		return
	}
	x := s.cfg.Exports
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		select {
		case <-s.ctx.Done():
			return
		case <-x.Restored():
		}
		for _, u := range x.Unrestored() {
			s.Publish(unrestoredEvent(u))
		}
	}()
}

// unrestoredEvent is the Warning event of an export a restart did not
// bring back.
func unrestoredEvent(u rdma.Unrestored) redfish.Event {
	return redfish.Event{MessageKey: MsgErrorsDetected, Args: []string{pool.ExportURI(u.ID), "not restored after the restart: " + u.Reason},
		Origin: pool.ChunkURI(u.Chunk),
		Resolution: fmt.Sprintf("Export %s of memory chunk %d to client %s is gone and its token no longer works. "+
			"If the client still needs the memory, export the chunk again (POST %s; poolctl export create %d --client %s) "+
			"and give it the new token.", u.ID, u.Chunk, u.Client, pool.RDMAConnectionsURI, u.Chunk, u.Client)}
}

// strandedMiB sums the stranded chunks of a view.
func (v *poolView) strandedBytes() uint64 {
	var n uint64
	for id := range v.stranded {
		if ch, ok := v.chunk(id); ok {
			n += ch.Size
		}
	}
	return n
}

// lostGrantsBody describes a stranded chunk's lost grants for
// Oem.CxlPool.LostGrants.
func lostGrantsBody(gs []dcd.Grant, p *redfish.Principal) []redfish.Obj {
	out := make([]redfish.Obj, 0, len(gs))
	for _, g := range gs {
		if !p.CanSeeHost(redfish.HostID(g.Host)) {
			continue
		}
		out = append(out, redfish.Obj{"Connection": strconv.FormatInt(int64(g.ID), 10), "SystemId": pool.SystemID(g.Host),
			"Reason": g.Reason, "Lost": g.Updated.UTC().Format(redfish.TimeFormat)})
	}
	return out
}

func (s *Server) strandedRoutes() {
	if s.capacity == nil {
		return
	}
	s.Handle(http.MethodPost, FreeStrandedURI, redfish.PrivConfigureComponents, s.freeStranded)
}

// freeStranded frees every chunk that is stranded when it runs, each as a
// DELETE of it would (a chunk a host connected meanwhile is no longer
// stranded and stays). It answers 200 with the freed chunks in
// Oem.CxlPool (FreedChunks, FreedMiB); a chunk that cannot be freed stops
// it with that chunk's error, the ones before it staying freed (each free
// is complete on its own), and the message names them.
func (s *Server) freeStranded(c echo.Context) error {
	var req struct{}
	if c.Request().ContentLength != 0 {
		if err := s.Decode(c, &req); err != nil {
			return err
		}
	}
	ctx := c.Request().Context()
	v, err := s.view(ctx)
	if err != nil {
		return err
	}
	ids := make([]dcd.ChunkID, 0, len(v.stranded))
	for id := range v.stranded {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	freed := make([]string, 0, len(ids))
	var freedBytes uint64
	for _, id := range ids {
		ch, _ := v.chunk(id)
		err := s.mgr.DeleteChunk(ctx, id)
		s.capacity.invalidate()
		if err != nil {
			e := pool.FromDomain(err, redfish.Target{Type: "MemoryChunks", ID: strconv.FormatInt(int64(id), 10), URI: pool.ChunkURI(id)})
			if len(freed) > 0 {
				e.Messages = append(e.Messages, redfish.Msg{Key: "Base.GeneralError", Resolution: fmt.Sprintf(
					"Before chunk %d refused, these stranded chunks were freed: %v.", id, freed)})
			}
			return e
		}
		if err := s.capacity.dropOwner(context.WithoutCancel(ctx), id); err != nil {
			s.log.Error("forgetting the owner of a deleted chunk", "chunk", id, "err", err)
		}
		freed = append(freed, pool.ChunkURI(id))
		freedBytes += ch.Size
	}
	s.log.Info("stranded chunks freed", "chunks", len(freed), "pool.MiB", pool.MiB(freedBytes), "user", redfish.PrincipalOf(c).User)
	links := make([]redfish.Obj, 0, len(freed))
	for _, u := range freed {
		links = append(links, redfish.Link(u))
	}
	return s.WriteResource(c, http.StatusOK, redfish.Obj{
		"@Message.ExtendedInfo": []redfish.Message{s.Registries().Resolve(redfish.Msg{Key: "Base.Success",
			Resolution: fmt.Sprintf("Freed %d stranded chunks (%d MiB).", len(freed), pool.MiB(freedBytes))})},
		"Oem": oemschema.Oem("FreedStrandedChunks", redfish.Obj{"FreedChunks": links, "FreedMiB": pool.MiB(freedBytes)}),
	})
}
