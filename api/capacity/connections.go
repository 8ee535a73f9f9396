package capacity

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/oemschema"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
)

// Connections: one per grant (a host's access to a chunk; Id = grant Id),
// listed while the grant is active (being added, granted, being
// released).
//
// POST grants a chunk to one or more initiator endpoints. What can be
// checked at once (the body, visibility, quota, sharability, the host's
// link) is answered at once; then the device offers the capacity and the
// request continues as a task: 202 with a task monitor, always, because
// the answer depends on hosts. The task ends Completed with the 201 a
// quick create would have given (Location and body of the first
// Connection; with several initiators the task's messages name every
// Connection created) or Exception (host rejected, timed out, link down,
// device failure). It is all or nothing: a host that does not accept gets
// nothing (the Manager withdraws the offer), and when several hosts were
// named the capacity the others accepted is released again. Naming a
// chunk another Connection already holds shares it (sharable chunks only).
//
// DELETE releases the capacity from the host with sanitize on release,
// forced if the host does not give it back in time. It too answers 202
// with a task (the host must answer), which ends Completed with 204.

// connectionReleaseGiveUp bounds how long a release task waits for the
// device before it reports the release as still in progress.
const connectionReleaseGiveUp = 10 * time.Minute

type connectionCreate struct {
	ConnectionType  string `json:"ConnectionType" enum:"Memory"`
	MemoryChunkInfo []struct {
		MemoryChunk        *pool.ODataRef `json:"MemoryChunk" rf:"required"`
		AccessCapabilities []string       `json:"AccessCapabilities" enum:"Read|Write"`
		AccessState        any            `json:"AccessState" rf:"readonly"`
	} `json:"MemoryChunkInfo" rf:"required"`
	Links *struct {
		InitiatorEndpoints []pool.ODataRef `json:"InitiatorEndpoints" rf:"required"`
		TargetEndpoints    []pool.ODataRef `json:"TargetEndpoints"`
	} `json:"Links" rf:"required"`
	ID     any `json:"Id" rf:"readonly"`
	Name   any `json:"Name" rf:"readonly"`
	Status any `json:"Status" rf:"readonly"`
	Oem    any `json:"Oem" rf:"readonly"`
}

func (s *Server) connectionRoutes() {
	if s.capacity == nil {
		return
	}
	s.Handle(http.MethodGet, pool.ConnectionsURI, redfish.PrivLogin, s.getConnections)
	s.Handle(http.MethodPost, pool.ConnectionsURI, redfish.PrivConfigureComponents|redfish.PrivHostCapacity, s.postConnection)
	s.Handle(http.MethodGet, pool.ConnectionsURI+"/:id", redfish.PrivLogin, s.getConnection)
	s.Handle(http.MethodDelete, pool.ConnectionsURI+"/:id", redfish.PrivConfigureComponents|redfish.PrivHostCapacity, s.deleteConnection)
}

func (s *Server) getConnections(c echo.Context) error {
	v, err := s.view(c.Request().Context())
	if err != nil {
		return err
	}
	p := redfish.PrincipalOf(c)
	col, err := v.cachedCollection(p, "connections", redfish.Collection{ODataID: pool.ConnectionsURI,
		ODataType: "#ConnectionCollection.ConnectionCollection", Name: "CXL Connections",
		Expand: func(uri string) (any, error) {
			id, _ := pool.RefID(uri, pool.ConnectionsURI)
			n, _ := pool.ParseID(id)
			g, _ := v.grant(dcd.GrantID(n))
			ch, _ := v.chunk(g.Chunk)
			return connectionBody(g, ch), nil
		}}, func() []string {
		members := make([]string, 0, len(v.grants))
		for _, g := range v.grants {
			if p.CanSeeHost(redfish.HostID(g.Host)) {
				members = append(members, pool.ConnectionURI(g.ID))
			}
		}
		return members
	})
	if err != nil {
		return err
	}
	return s.WriteCollection(c, col)
}

// lookupConnection finds the active grant the path names, if the caller
// may see it.
func (s *Server) lookupConnection(c echo.Context) (dcd.Grant, dcd.Chunk, error) {
	v, err := s.view(c.Request().Context())
	if err != nil {
		return dcd.Grant{}, dcd.Chunk{}, err
	}
	n, ok := pool.ParseID(c.Param("id"))
	g, found := v.grant(dcd.GrantID(n))
	if !ok || !found || !redfish.PrincipalOf(c).CanSeeHost(redfish.HostID(g.Host)) {
		return dcd.Grant{}, dcd.Chunk{}, redfish.ErrResourceNotFound("Connection", c.Param("id"))
	}
	ch, ok := v.chunk(g.Chunk)
	if !ok {
		ch = dcd.Chunk{ID: g.Chunk}
	}
	return g, ch, nil
}

func (s *Server) getConnection(c echo.Context) error {
	g, ch, err := s.lookupConnection(c)
	if err != nil {
		return err
	}
	return s.WriteResource(c, http.StatusOK, connectionBody(g, ch))
}

// exactlyOne refuses an array property that must hold one element (a
// Connection, local or exported, names one chunk).
func exactlyOne(prop string, n int) error {
	switch {
	case n == 0:
		return redfish.NewError(http.StatusBadRequest, redfish.M("Base.ArraySizeTooShort", prop, 1).WithRelated(prop))
	case n > 1:
		return redfish.NewError(http.StatusBadRequest, redfish.M("Base.ArraySizeTooLong", prop, 1).WithRelated(prop))
	}
	return nil
}

func (s *Server) postConnection(c echo.Context) error {
	var req connectionCreate
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	if err := exactlyOne("MemoryChunkInfo", len(req.MemoryChunkInfo)); err != nil {
		return err
	}
	info := req.MemoryChunkInfo[0]
	// CXL memory is read-write: a host either maps the capacity or not.
	if caps := info.AccessCapabilities; caps != nil && !(slices.Contains(caps, "Read") && slices.Contains(caps, "Write")) {
		return pool.ErrPropertyValueIncorrect("MemoryChunkInfo/0/AccessCapabilities", strings.Join(caps, ","))
	}
	inits := req.Links.InitiatorEndpoints
	if len(inits) == 0 {
		return redfish.NewError(http.StatusBadRequest, redfish.M("Base.ArraySizeTooShort", "Links/InitiatorEndpoints", 1).WithRelated("Links/InitiatorEndpoints"))
	}
	ctx := c.Request().Context()
	p := redfish.PrincipalOf(c)
	v, err := s.view(ctx)
	if err != nil {
		return err
	}
	const chunkProp = "MemoryChunkInfo/0/MemoryChunk"
	id, ok := pool.RefID(info.MemoryChunk.ID, pool.ChunksURI)
	if !ok {
		return redfish.ErrPropertyValueFormat(info.MemoryChunk.ID, chunkProp)
	}
	n, ok := pool.ParseID(id)
	ch, found := v.chunk(dcd.ChunkID(n))
	if !ok || !found || !s.chunkVisible(p, v, ch) {
		return pool.ErrMissingAtURI(info.MemoryChunk.ID, chunkProp)
	}
	hosts := make([]dcd.HostID, 0, len(inits))
	for i, ref := range inits {
		prop := "Links/InitiatorEndpoints/" + strconv.Itoa(i)
		eid, ok := pool.RefID(ref.ID, pool.EndpointsURI)
		if !ok {
			return redfish.ErrPropertyValueFormat(ref.ID, prop)
		}
		h, initiator, ok := parseEndpointID(eid)
		if !ok || !hostVisible(p, v, h) {
			return pool.ErrMissingAtURI(ref.ID, prop)
		}
		if !initiator {
			return pool.ErrPropertyValueIncorrect(prop, ref.ID)
		}
		if j := slices.Index(hosts, h); j >= 0 {
			return redfish.ErrPropertyValueConflict(prop, "Links/InitiatorEndpoints/"+strconv.Itoa(j))
		}
		hosts = append(hosts, h)
	}
	for i, ref := range req.Links.TargetEndpoints {
		if !slices.ContainsFunc(hosts, func(h dcd.HostID) bool { return refMatches(ref.ID, pool.TargetURI(h)) }) {
			return redfish.ErrPropertyValueConflict("Links/TargetEndpoints/"+strconv.Itoa(i), "Links/InitiatorEndpoints")
		}
	}
	chunkTarget := redfish.Target{Type: "MemoryChunks", ID: id, URI: pool.ChunkURI(ch.ID)}
	if len(hosts) > 1 && !ch.Sharable {
		return errNotSharable(v, ch, chunkTarget, "").WithCause(
			fmt.Errorf("connect chunk %d to %d hosts: %w", ch.ID, len(hosts), dcd.ErrNotSharable))
	}
	begun := make([]dcd.Grant, 0, len(hosts))
	for _, h := range hosts {
		g, err := s.mgr.BeginGrant(ctx, ch.ID, h)
		if err != nil {
			s.capacity.invalidate()
			s.undoGrants(begun)
			return grantRefused(v, ch, h, err, chunkTarget)
		}
		begun = append(begun, g)
	}
	s.capacity.invalidate()
	names := make([]string, len(hosts))
	for i, h := range hosts {
		names[i] = pool.SystemID(h)
	}
	opts := redfish.TaskOptions{
		Name:   fmt.Sprintf("Connect memory chunk %d to %s", ch.ID, strings.Join(names, ", ")),
		Target: redfish.Target{Type: "Connection", ID: strconv.FormatInt(int64(begun[0].ID), 10), URI: pool.ConnectionURI(begun[0].ID)},
	}
	if len(hosts) == 1 {
		opts.Host = pool.HostRef(hosts[0])
	}
	t := s.StartTask(c, opts, func(ctx context.Context, _ *redfish.Task) (redfish.TaskResult, error) {
		return s.finishGrants(ctx, ch, begun)
	})
	return s.Accepted(c, t)
}

// grantRefused explains a grant the ledger refused at once, naming the
// rule with the figures of the view: sharability and quota; other
// refusals map as FromDomain says.
func grantRefused(v *poolView, ch dcd.Chunk, h dcd.HostID, err error, t redfish.Target) error {
	switch {
	case errors.Is(err, dcd.ErrNotSharable):
		holder := ""
		for _, g := range v.chunkGrants(ch.ID) {
			if g.Host != h {
				holder = pool.SystemID(g.Host)
				break
			}
		}
		return errNotSharable(v, ch, t, holder).WithCause(err)
	case errors.Is(err, dcd.ErrQuotaExceeded):
		var used uint64
		for _, g := range v.hostGrants(h) {
			if c, ok := v.chunk(g.Chunk); ok {
				used += c.Size
			}
		}
		return pool.ErrQuota(h, v.quota(h), used, ch.Size).WithCause(err)
	}
	return pool.FromDomain(err, t)
}

// errNotSharable is 409 for connecting a chunk of a region that is not
// sharable to a second host (holder, if one holds it) or to several.
func errNotSharable(v *poolView, ch dcd.Chunk, t redfish.Target, holder string) *redfish.Error {
	why := "it cannot be connected to several hosts at once"
	if holder != "" {
		why = holder + " holds it, and it is connected to one host at a time"
	}
	region := "its region"
	if r, ok := v.region(ch.Region); ok && !r.Sharable {
		region = fmt.Sprintf("region %d, which is not sharable", r.Index)
	}
	fix := "Reserve a chunk in a sharable region (Oem.CxlPool.Sharable true; poolctl request SIZE --shared) and share that"
	if holder != "" {
		fix = "Release it from " + holder + " first, or reserve a chunk in a sharable region (Oem.CxlPool.Sharable true; " +
			"poolctl request SIZE --shared) and share that"
	}
	m := redfish.M("Base.PropertyValueResourceConflict", "MemoryChunkInfo", t.ID, t.URI)
	m.Resolution = fmt.Sprintf("Memory chunk %d is not sharable (it is in %s): %s. %s.", ch.ID, region, why, fix)
	return redfish.NewError(http.StatusConflict, m)
}

// refMatches compares a body's @odata.id with a URI, tolerating a
// trailing slash.
func refMatches(ref, uri string) bool { return strings.TrimSuffix(ref, "/") == uri }

// finishGrants waits for every host's answer. All granted: the first
// Connection is the result. Any failure: what the others accepted is
// released again and the first failure is the task's error.
func (s *Server) finishGrants(ctx context.Context, ch dcd.Chunk, begun []dcd.Grant) (redfish.TaskResult, error) {
	var done []dcd.Grant
	var firstErr error
	for _, g := range begun {
		ng, err := s.mgr.AwaitGrant(ctx, g.ID)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		done = append(done, ng)
	}
	s.capacity.invalidate()
	if firstErr != nil {
		for _, g := range done {
			if _, err := s.releaseGrant(ctx, g.ID); err != nil {
				s.log.Error("releasing the part of a failed multi-host grant", "grant", g.ID, "err", err)
			}
		}
		s.capacity.invalidate()
		return redfish.TaskResult{}, firstErr
	}
	msgs := make([]redfish.Msg, 0, len(done))
	for _, g := range done {
		msgs = append(msgs, redfish.M("ResourceEvent.ResourceStateChanged", pool.ConnectionURI(g.ID), "Enabled"))
	}
	return redfish.TaskResult{Status: http.StatusCreated, Location: pool.ConnectionURI(done[0].ID),
		Body: connectionBody(done[0], ch), Messages: msgs}, nil
}

// undoGrants gives back grants begun for a request that failed before
// its task started: each is awaited and, if its host accepted, released.
func (s *Server) undoGrants(gs []dcd.Grant) {
	for _, g := range gs {
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			if _, err := s.mgr.AwaitGrant(s.ctx, g.ID); err != nil {
				return // failed: nothing was granted
			}
			if _, err := s.releaseGrant(s.ctx, g.ID); err != nil {
				s.log.Error("releasing a grant of a failed request", "grant", g.ID, "err", err)
			}
			s.capacity.invalidate()
		}()
	}
}

// releaseGrant releases a grant and waits until the device has taken the
// capacity back.
func (s *Server) releaseGrant(ctx context.Context, id dcd.GrantID) (dcd.Grant, error) {
	if _, err := s.mgr.BeginRelease(ctx, id); err != nil {
		return dcd.Grant{}, err
	}
	return s.awaitRelease(ctx, id)
}

// awaitRelease follows a grant in the ledger until it leaves releasing
// (the Manager's flow publishes every step; the timer covers a missed
// notification).
func (s *Server) awaitRelease(ctx context.Context, id dcd.GrantID) (dcd.Grant, error) {
	ch, cancel := s.mgr.Subscribe(16)
	defer cancel()
	giveUp := time.NewTimer(connectionReleaseGiveUp)
	defer giveUp.Stop()
	for {
		g, err := s.mgr.Ledger().Grant(ctx, id)
		if err != nil {
			return g, err
		}
		if g.State != dcd.GrantReleasing {
			return g, nil
		}
		select {
		case <-ctx.Done():
			return g, ctx.Err()
		case <-giveUp.C:
			return g, fmt.Errorf("grant %d still releasing after %s: %w", id, connectionReleaseGiveUp, dcd.ErrDeviceBusy)
		case <-ch:
		case <-time.After(time.Second):
		}
	}
}

func (s *Server) deleteConnection(c echo.Context) error {
	g, ch, err := s.lookupConnection(c)
	if err != nil {
		return err
	}
	if err := s.IfMatch(c, connectionBody(g, ch)); err != nil {
		return err
	}
	target := redfish.Target{Type: "Connection", ID: c.Param("id"), URI: pool.ConnectionURI(g.ID)}
	_, err = s.mgr.BeginRelease(c.Request().Context(), g.ID)
	s.capacity.invalidate()
	if err != nil {
		return pool.FromDomain(err, target)
	}
	return s.releaseTask(c, g, target, "Release")
}

// releaseTask answers 202 with a task that ends when g's release does:
// 204 once released (or lost), an error naming the state it ended in.
func (s *Server) releaseTask(c echo.Context, g dcd.Grant, target redfish.Target, verb string) error {
	host := g.Host
	t := s.StartTask(c, redfish.TaskOptions{
		Name:   fmt.Sprintf("%s memory chunk %d from %s", verb, g.Chunk, pool.SystemID(g.Host)),
		Host:   pool.HostRef(host),
		Target: target,
	}, func(ctx context.Context, _ *redfish.Task) (redfish.TaskResult, error) {
		ng, err := s.awaitRelease(ctx, g.ID)
		s.capacity.invalidate()
		if err != nil {
			return redfish.TaskResult{}, err
		}
		if ng.State != dcd.GrantReleased && ng.State != dcd.GrantLost {
			return redfish.TaskResult{}, fmt.Errorf("grant %d ended %s: %w", g.ID, ng.State, dcd.ErrDevice)
		}
		return redfish.TaskResult{Status: http.StatusNoContent}, nil
	})
	return s.Accepted(c, t)
}

// connectionState is a grant's Status.State and MemoryChunkInfo
// AccessState.
func connectionState(g dcd.Grant) (state, access string) {
	switch g.State {
	case dcd.GrantGranted:
		return "Enabled", "Optimized"
	case dcd.GrantAdding:
		return "Starting", "Transitioning"
	case dcd.GrantReleasing:
		return "Disabled", "Transitioning"
	}
	return "Absent", "Unavailable"
}

func connectionBody(g dcd.Grant, ch dcd.Chunk) redfish.Obj {
	id := strconv.FormatInt(int64(g.ID), 10)
	state, access := connectionState(g)
	oem := redfish.Obj{
		"GrantState":  string(g.State),
		"GrantedMiB":  pool.MiB(g.Size()),
		"ExtentCount": len(g.Extents),
		"Created":     g.Created.UTC().Format(redfish.TimeFormat),
	}
	if g.State == dcd.GrantGranted {
		oem["Memory"] = redfish.Link(pool.SystemMemoryURI(g.Host, g.Chunk))
	}
	return redfish.Obj{
		"@odata.id":      pool.ConnectionURI(g.ID),
		"@odata.type":    "#Connection.v1_4_0.Connection",
		"Id":             id,
		"Name":           "Connection " + id,
		"Description":    fmt.Sprintf("Memory chunk %d for %s", ch.ID, pool.SystemID(g.Host)),
		"ConnectionType": "Memory",
		"MemoryChunkInfo": []redfish.Obj{{
			"MemoryChunk":        redfish.Link(pool.ChunkURI(ch.ID)),
			"AccessCapabilities": []string{"Read", "Write"},
			"AccessState":        access,
		}},
		"Links": redfish.Obj{
			"InitiatorEndpoints": redfish.Links(pool.InitiatorURI(g.Host)),
			"TargetEndpoints":    redfish.Links(pool.TargetURI(g.Host)),
		},
		"Status": pool.Status(state),
		"Oem":    oemschema.Oem("Connection", oem),
	}
}
