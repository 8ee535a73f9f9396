package capacity

import (
	"context"
	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"cxlpool/dcd"
	"cxlpool/host/report"
	"cxlpool/host/share"
)

// Host agents (cmd/cxlhost, host/agent) and the box:
//
//   - POST Systems/HostN/Actions/Oem/CxlPool.HostReport: the agent's
//     report of the capacity its host holds (host/report.Report), on every
//     change and as a heartbeat. Only HostN's own HostUser account may
//     report for HostN (others: 404 for another host's system, 403 for an
//     account of no host). The Memory of the System then shows, in
//     Oem.CxlPool.Host, what the host did with each grant (accepted by the
//     host, usable on the host, in use, release refused); the System shows
//     the agent in Oem.CxlPool.HostAgent (Reporting, or Silent past the
//     report's TTL).
//   - POST Fabrics/CXL/Connections/N/Actions/Oem/CxlPool.ForceRelease: an
//     administrator's or operator's forced release. A release the host has
//     not answered is never forced while its agent says the memory is in
//     use (dcd.Config.InUse); this is the only way to force it then. Host
//     accounts may not.
//   - POST Systems/HostN/Actions/Oem/CxlPool.AttachShare {"Share","SizeMiB"}
//     and CxlPool.LeaveShare {"Share"}: shared attach by host accounts
//     (host/share): create or join the sharable chunk named Share, and free
//     it once nobody holds it. Refused unless an administrator allowed HostN
//     the share: CxlPool.AllowShare {"Share","Allow"} (ConfigureComponents,
//     not host accounts).

// Action targets.
const (
	hostReportAction   = "/Actions/Oem/CxlPool.HostReport"
	attachShareAction  = "/Actions/Oem/CxlPool.AttachShare"
	leaveShareAction   = "/Actions/Oem/CxlPool.LeaveShare"
	allowShareAction   = "/Actions/Oem/CxlPool.AllowShare"
	forceReleaseAction = "/Actions/Oem/CxlPool.ForceRelease"
)

// sharesFile keeps the share allowances in the data directory.
const sharesFile = "shares.json"

func (s *Server) hostReportRoutes() {
	if s.cfg.HostReports == nil {
		s.cfg.HostReports = report.New(report.Config{Clock: s.deps.Clock})
	}
	if s.cfg.Shares == nil {
		p, err := share.Open(s.cfg.DataDir + "/" + sharesFile)
		if err != nil {
			s.RouteError(err)
			return
		}
		s.cfg.Shares = p
	}
	s.Handle(http.MethodPost, pool.SystemsURI+"/:id"+hostReportAction, redfish.PrivHostCapacity, s.postHostReport)
	s.Handle(http.MethodPost, pool.ConnectionsURI+"/:id"+forceReleaseAction, redfish.PrivConfigureComponents, s.postForceRelease)
	s.Handle(http.MethodPost, pool.SystemsURI+"/:id"+attachShareAction, redfish.PrivConfigureComponents|redfish.PrivHostCapacity, s.postAttachShare)
	s.Handle(http.MethodPost, pool.SystemsURI+"/:id"+leaveShareAction, redfish.PrivConfigureComponents|redfish.PrivHostCapacity, s.postLeaveShare)
	s.Handle(http.MethodPost, pool.SystemsURI+"/:id"+allowShareAction, redfish.PrivConfigureComponents, s.postAllowShare)
}

// errOnlyOwnHost is 403 for a host action by an account of no host or of
// another host (the rule named in the Resolution).
func errOnlyOwnHost(what string, h dcd.HostID) *redfish.Error {
	m := redfish.M("Base.InsufficientPrivilege")
	m.Resolution = fmt.Sprintf("Only the HostUser account bound to %s %s.", pool.SystemID(h), what)
	return redfish.NewError(http.StatusForbidden, m)
}

func (s *Server) postHostReport(c echo.Context) error {
	_, h, err := s.lookupSystem(c)
	if err != nil {
		return err
	}
	p := redfish.PrincipalOf(c)
	if !p.IsHost() || *p.HostID != redfish.HostID(h) {
		return errOnlyOwnHost("reports its host's state (its agent, cxlhost, does)", h)
	}
	var r report.Report
	if err := s.Decode(c, &r); err != nil {
		return err
	}
	if err := s.cfg.HostReports.Put(uint16(h), r); err != nil {
		var inv *report.ErrInvalid
		if errors.As(err, &inv) {
			e := pool.ErrPropertyValueIncorrect(inv.Prop, "")
			e.Messages[0].Resolution = "The report is refused whole: " + inv.Why + "."
			return e.WithCause(err)
		}
		return redfish.ErrInternal(err)
	}
	return s.NoContent(c)
}

// hostMemoryState is Oem.CxlPool.Host of a Memory: what the host's agent
// last said about the grant's tag. The ledger's granted state is
// "accepted by the host" (it answered the add); Usable is whether the
// host surfaced it as memory an application maps.
func (s *Server) hostMemoryState(h dcd.HostID, tag string) redfish.Obj {
	t, snap, ok := s.cfg.HostReports.Tag(uint16(h), tag)
	o := redfish.Obj{"Accepted": true}
	switch {
	case !ok && snap.At.IsZero():
		o["State"] = "NotReported" // no agent reports for this host
		return o
	case !snap.Fresh:
		o["State"] = "AgentSilent"
		o["Reported"] = snap.At.UTC().Format(redfish.TimeFormat)
		return o
	case !ok:
		o["State"] = "NotSurfaced" // the agent reports, without this tag
		o["Usable"] = false
		o["Reported"] = snap.At.UTC().Format(redfish.TimeFormat)
		return o
	}
	state := map[string]string{
		report.StateAccepted: "NotSurfaced", report.StateOnline: "Usable", report.StateInUse: "InUse",
		report.StateReleaseRefused: "ReleaseRefusedInUse", report.StateReleasing: "Releasing",
	}[t.State]
	o["State"] = state
	o["Usable"] = t.Usable
	o["InUse"] = t.InUse
	o["Reported"] = snap.At.UTC().Format(redfish.TimeFormat)
	if t.Mode != "" {
		o["Mode"] = t.Mode
	}
	if t.Path != "" {
		o["Path"] = t.Path
	}
	return o
}

// systemHostAgent adds Oem.CxlPool.HostAgent and Shares to a System.
func (s *Server) systemHostAgent(o redfish.Obj, h dcd.HostID) {
	oem, ok := o["Oem"].(map[string]any)
	if !ok {
		return
	}
	x, ok := oem["CxlPool"].(map[string]any)
	if !ok {
		return
	}
	a := redfish.Obj{"State": "None"}
	if snap, ok := s.cfg.HostReports.Get(uint16(h)); ok {
		a["State"] = "Reporting"
		if !snap.Fresh {
			a["State"] = "Silent"
		}
		// Not the report's time: the System's redfish.ETag would change at
		// every heartbeat and fail every If-Match PATCH (the Memory
		// resources, read-only, carry it).
		a["TagCount"] = len(snap.Tags)
		if snap.Agent != "" {
			a["Agent"] = snap.Agent
		}
	}
	x["HostAgent"] = a
	x["Shares"] = append([]string{}, s.cfg.Shares.Shares(uint16(h))...)
}

func (s *Server) postForceRelease(c echo.Context) error {
	g, _, err := s.lookupConnection(c)
	if err != nil {
		return err
	}
	if redfish.PrincipalOf(c).IsHost() {
		return redfish.ErrInsufficientPrivilege()
	}
	target := redfish.Target{Type: "Connection", ID: c.Param("id"), URI: pool.ConnectionURI(g.ID)}
	if _, err := s.mgr.ForceRelease(c.Request().Context(), g.ID); err != nil {
		s.capacity.invalidate()
		return pool.FromDomain(err, target)
	}
	s.capacity.invalidate()
	return s.releaseTask(c, g, target, "Force the release of")
}

type shareRequest struct {
	Share   string `json:"Share" rf:"required"`
	SizeMiB int64  `json:"SizeMiB"`
	Allow   *bool  `json:"Allow"`
}

// shareAllowed checks the share's name and HostN's allowance.
func (s *Server) shareAllowed(name string, h dcd.HostID) error {
	if err := share.ValidName(name); err != nil {
		e := redfish.ErrPropertyValueFormat(name, "Share")
		e.Messages[0].Resolution = strings.TrimPrefix(share.ErrBadName.Error(), "share: ") + "."
		return e.WithCause(err)
	}
	if !s.cfg.Shares.Allowed(name, uint16(h)) {
		m := redfish.M("Base.InsufficientPrivilege")
		m.Resolution = fmt.Sprintf("%s is not allowed share %q: an administrator allows it (POST %s%s {\"Share\": %q, \"Allow\": true}; "+
			"poolctl hosts %s --allow-share %s). Shares are closed by default.", pool.SystemID(h), name, pool.SystemURI(h), allowShareAction, name,
			pool.SystemID(h), name)
		return redfish.NewError(http.StatusForbidden, m)
	}
	return nil
}

// shareChunk finds share name's chunk: sharable, named name, and reserved
// by a host allowed the share (or by an administrator).
func (s *Server) shareChunk(v *poolView, name string) (dcd.Chunk, bool) {
	for _, ch := range v.chunks {
		if !ch.Sharable || ch.Name != name {
			continue
		}
		if o, ok := s.capacity.owner(ch); ok && !s.cfg.Shares.Allowed(name, uint16(o)) {
			continue
		}
		return ch, true
	}
	return dcd.Chunk{}, false
}

func (s *Server) postAttachShare(c echo.Context) error {
	_, h, err := s.lookupSystem(c)
	if err != nil {
		return err
	}
	var req shareRequest
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	if req.SizeMiB <= 0 || req.SizeMiB > math.MaxInt64/mebibyte {
		return redfish.ErrPropertyValueOutOfRange(strconv.FormatInt(req.SizeMiB, 10), "SizeMiB")
	}
	if err := s.shareAllowed(req.Share, h); err != nil {
		return err
	}
	ctx := c.Request().Context()
	// Finding or creating the share's chunk is one step per server.
	s.capacity.reserveMu.Lock()
	defer s.capacity.reserveMu.Unlock()
	v, err := s.view(ctx)
	if err != nil {
		return err
	}
	size := uint64(req.SizeMiB) * mebibyte
	ch, found := s.shareChunk(v, req.Share)
	if found {
		if ch.Size != size {
			e := pool.ErrPropertyValueIncorrect("SizeMiB", strconv.FormatInt(req.SizeMiB, 10))
			e.Messages[0].Resolution = fmt.Sprintf("Share %q is %d MiB (memory chunk %d): every host of a share maps the same bytes. Ask for %d MiB.",
				req.Share, pool.MiB(ch.Size), ch.ID, pool.MiB(ch.Size))
			return e
		}
		for _, g := range v.chunkGrants(ch.ID) {
			if g.Host == h {
				return redfish.ErrResourceAlreadyExists("Connection", "Share", req.Share)
			}
		}
	} else {
		rr := dcd.ReserveRequest{Name: req.Share, Size: size, Region: -1, Sharable: true}
		if err := v.fitsOneRegion(rr); err != nil {
			return err
		}
		if ch, err = s.mgr.Reserve(ctx, rr); err != nil {
			return pool.FromDomain(err, redfish.Target{Type: "MemoryDomain", ID: "Pool", URI: pool.MemoryDomainURI})
		}
		if err := s.capacity.setOwner(ctx, ch, h); err != nil {
			if derr := s.mgr.DeleteChunk(context.WithoutCancel(ctx), ch.ID); derr != nil {
				s.log.Error("undoing a share's reservation", "chunk", ch.ID, "err", derr)
			}
			s.capacity.invalidate()
			return redfish.ErrInternal(err)
		}
		s.capacity.invalidate()
		if v, err = s.view(ctx); err != nil {
			return err
		}
	}
	chunkTarget := redfish.Target{Type: "MemoryChunks", ID: strconv.FormatInt(int64(ch.ID), 10), URI: pool.ChunkURI(ch.ID)}
	g, err := s.mgr.BeginGrant(ctx, ch.ID, h)
	s.capacity.invalidate()
	if err != nil {
		if !found {
			_ = s.dropShareChunk(context.WithoutCancel(ctx), ch.ID) // logged
		}
		return grantRefused(v, ch, h, err, chunkTarget)
	}
	t := s.StartTask(c, redfish.TaskOptions{
		Name:   fmt.Sprintf("Attach %s to share %s (memory chunk %d)", pool.SystemID(h), req.Share, ch.ID),
		Host:   pool.HostRef(h),
		Target: redfish.Target{Type: "Connection", ID: strconv.FormatInt(int64(g.ID), 10), URI: pool.ConnectionURI(g.ID)},
	}, func(ctx context.Context, _ *redfish.Task) (redfish.TaskResult, error) {
		res, err := s.finishGrants(ctx, ch, []dcd.Grant{g})
		if err != nil && !found {
			_ = s.dropShareChunk(context.WithoutCancel(ctx), ch.ID) // nobody holds the new share: no chunk left behind (logged)
		}
		return res, err
	})
	return s.Accepted(c, t)
}

// dropShareChunk frees a share's chunk nobody holds.
func (s *Server) dropShareChunk(ctx context.Context, id dcd.ChunkID) error {
	err := s.mgr.DeleteChunk(ctx, id)
	s.capacity.invalidate()
	if err != nil {
		s.log.Warn("freeing a share's chunk", "chunk", id, "err", err)
		return err
	}
	if err := s.capacity.dropOwner(context.WithoutCancel(ctx), id); err != nil {
		s.log.Error("forgetting the owner of a share's chunk", "chunk", id, "err", err)
	}
	return nil
}

func (s *Server) postLeaveShare(c echo.Context) error {
	v, h, err := s.lookupSystem(c)
	if err != nil {
		return err
	}
	var req shareRequest
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	if err := s.shareAllowed(req.Share, h); err != nil {
		return err
	}
	s.capacity.reserveMu.Lock()
	defer s.capacity.reserveMu.Unlock()
	ch, ok := s.shareChunk(v, req.Share)
	if !ok {
		return redfish.ErrResourceNotFound("Share", req.Share)
	}
	if gs := v.chunkGrants(ch.ID); len(gs) > 0 {
		e := redfish.ErrResourceInUse()
		e.Messages[0].Resolution = fmt.Sprintf("Other hosts still hold share %q; the last to leave frees it.", req.Share)
		if slices.ContainsFunc(gs, func(g dcd.Grant) bool { return g.Host == h }) {
			e.Messages[0].Resolution = fmt.Sprintf("%s still holds share %q: detach it first.", pool.SystemID(h), req.Share)
		}
		return e
	}
	if err := s.dropShareChunk(c.Request().Context(), ch.ID); err != nil {
		return pool.FromDomain(err, redfish.Target{Type: "MemoryChunks", ID: strconv.FormatInt(int64(ch.ID), 10), URI: pool.ChunkURI(ch.ID)})
	}
	return s.NoContent(c)
}

func (s *Server) postAllowShare(c echo.Context) error {
	_, h, err := s.lookupSystem(c)
	if err != nil {
		return err
	}
	if redfish.PrincipalOf(c).IsHost() {
		return redfish.ErrInsufficientPrivilege()
	}
	var req shareRequest
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	if req.Allow == nil {
		return redfish.ErrPropertyMissing("Allow")
	}
	if err := s.cfg.Shares.Set(req.Share, uint16(h), *req.Allow); err != nil {
		if errors.Is(err, share.ErrBadName) {
			return redfish.ErrPropertyValueFormat(req.Share, "Share").WithCause(err)
		}
		return redfish.ErrInternal(err)
	}
	return s.NoContent(c)
}
