package capacity

import (
	"context"
	"errors"
	"fmt"
	"net"
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
	"cxlpool/rdma"
)

// Fabrics/RDMA: remote racks that are not cabled to the box reach pool
// memory over the network (package rdma). The fabric is served only when
// the appliance has an export service (Config.Exports), and it is an
// appliance matter: host accounts do not see it.
//
//   - One Connection per export (Id = the export's random Id): a remote
//     client's access to a chunk, or part of it, with a secret token.
//     POST creates an export and its 201 answer carries the token
//     (Oem.CxlPool.Token) - the only time it is ever shown, so the answer
//     is marked Cache-Control: no-store. GET shows the export without it,
//     with traffic counters; DELETE revokes it: operations in flight fail
//     and nothing reaches the memory once the 204 is sent.
//   - Endpoints: one target, "Pool", for the box's export server, and one
//     initiator per remote client name that has exports. A client
//     endpoint exists while the client has exports: POST creates it on the
//     fly when it names a new client in Oem.CxlPool.Client.
//
// Only roles with ConfigureComponents (Administrator, Operator) create and
// revoke exports. Host accounts may not export memory, not even chunks
// they hold: an export lets a network client reach the memory outside the
// host's control and outside the CXL fabric's per-host isolation, so it
// is the appliance operator's decision. Exports follow their chunk's
// capacity: releasing the chunk's last grant revokes them first
// (dcd.Config.Guard, rdma.Service.Leaving), and expired exports are revoked by the
// export service.

// RemoteClientURI is the initiator Endpoint of a remote client.
func RemoteClientURI(name string) string { return pool.RDMAEndpointsURI + "/" + name }

// maxClientName bounds a remote client's name, which is also its
// endpoint's Id.
const maxClientName = 64

// validClientName accepts names that can be an Id as they are: 1-64 of
// [A-Za-z0-9._-], starting with a letter or digit, and not the target's.
func validClientName(name string) bool {
	if name == "" || len(name) > maxClientName || name == pool.PoolTargetID {
		return false
	}
	for i, c := range []byte(name) {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

// exportRevokeTimeout bounds how long a DELETE waits for the operations
// in flight on the export to drain (the transports abort their I/O at
// once, so this is a backstop).
const exportRevokeTimeout = 30 * time.Second

// maxExportTTL bounds a relative expiry.
const maxExportTTL = 100 * 366 * 24 * time.Hour

type exportCreate struct {
	ConnectionType  string `json:"ConnectionType" enum:"Memory"`
	MemoryChunkInfo []struct {
		MemoryChunk        *pool.ODataRef `json:"MemoryChunk" rf:"required"`
		AccessCapabilities []string       `json:"AccessCapabilities" enum:"Read|Write"`
		AccessState        any            `json:"AccessState" rf:"readonly"`
	} `json:"MemoryChunkInfo" rf:"required"`
	Links *struct {
		InitiatorEndpoints []pool.ODataRef `json:"InitiatorEndpoints"`
		TargetEndpoints    []pool.ODataRef `json:"TargetEndpoints"`
	} `json:"Links"`
	Oem *struct {
		CxlPool *exportCreateOem `json:"CxlPool"`
	} `json:"Oem"`
	ID     any `json:"Id" rf:"readonly"`
	Name   any `json:"Name" rf:"readonly"`
	Status any `json:"Status" rf:"readonly"`
}

// exportCreateOem is Oem.CxlPool of a new export.
type exportCreateOem struct {
	// Client names the remote client (and its endpoint, created if new).
	Client *string `json:"Client"`
	// Offset and Length select part of the chunk, in bytes (Length 0 or
	// absent: to the end).
	Offset *uint64 `json:"Offset"`
	Length *uint64 `json:"Length"`
	// Expiry is a date-time or an ISO 8601 duration from now ("PT1H").
	Expiry  *string `json:"Expiry"`
	Token   any     `json:"Token" rf:"readonly"`
	Created any     `json:"Created" rf:"readonly"`
	Traffic any     `json:"Traffic" rf:"readonly"`
}

func (s *Server) exportRoutes() {
	if s.cfg.Exports == nil || s.capacity == nil {
		return
	}
	s.Handle(http.MethodGet, pool.RDMAFabricURI, redfish.PrivApplianceView, func(c echo.Context) error {
		return s.WriteResource(c, http.StatusOK, s.rdmaFabric())
	})
	s.Handle(http.MethodGet, pool.RDMAEndpointsURI, redfish.PrivApplianceView, s.getRDMAEndpoints)
	s.Handle(http.MethodGet, pool.RDMAEndpointsURI+"/:id", redfish.PrivApplianceView, s.getRDMAEndpoint)
	s.Handle(http.MethodGet, pool.RDMAConnectionsURI, redfish.PrivApplianceView, s.getExports)
	s.Handle(http.MethodPost, pool.RDMAConnectionsURI, redfish.PrivConfigureComponents, s.postExport)
	s.Handle(http.MethodGet, pool.RDMAConnectionsURI+"/:id", redfish.PrivApplianceView, s.getExport)
	s.Handle(http.MethodDelete, pool.RDMAConnectionsURI+"/:id", redfish.PrivConfigureComponents, s.deleteExport)
}

// exportFabrics are the Fabrics members the RDMA fabric adds for p.
func (s *Server) exportFabrics(p *redfish.Principal) []string {
	if s.cfg.Exports == nil || s.capacity == nil || !p.Has(redfish.PrivApplianceView) {
		return nil
	}
	return []string{pool.RDMAFabricURI}
}

// expandFabric is a Fabrics member for $expand.
func (s *Server) expandFabric(uri string) (any, error) {
	if uri == pool.RDMAFabricURI {
		return s.rdmaFabric(), nil
	}
	return s.fabric(), nil
}

// exportProtocol is the fabric's and its endpoints' protocol.
func (s *Server) exportProtocol() string {
	if s.cfg.ExportVerbs {
		return "RoCEv2"
	}
	return "TCP"
}

// exportState is the export server's Status.State.
func (s *Server) exportState() string {
	if s.cfg.ExportAddr == nil {
		return "Disabled" // exports can be made, but no server listens
	}
	return "Enabled"
}

func (s *Server) rdmaFabric() redfish.Obj {
	oem := redfish.Obj{"Transport": s.exportProtocol()}
	if a := s.cfg.ExportAddr; a != nil {
		oem["Address"] = a.String()
	}
	return redfish.Obj{
		"@odata.id":   pool.RDMAFabricURI,
		"@odata.type": "#Fabric.v1_4_0.Fabric",
		"Id":          "RDMA",
		"Name":        "RDMA Fabric",
		"Description": "Remote racks' one-sided READ, WRITE and atomics on exported pool memory over the network",
		"FabricType":  s.exportProtocol(),
		"Status":      pool.Status(s.exportState()),
		"Endpoints":   redfish.Link(pool.RDMAEndpointsURI),
		"Connections": redfish.Link(pool.RDMAConnectionsURI),
		"Links":       redfish.Obj{"ManagedBy": redfish.Links(pool.ManagerURI)},
		"Oem":         oemschema.Oem("Fabric", oem),
	}
}

// exportsByClient groups the live exports by remote client, oldest first
// within each.
func (s *Server) exportsByClient() (map[string][]rdma.Export, []rdma.Export) {
	all := s.cfg.Exports.List()
	by := map[string][]rdma.Export{}
	for _, x := range all {
		by[x.Client] = append(by[x.Client], x)
	}
	return by, all
}

func (s *Server) getRDMAEndpoints(c echo.Context) error {
	by, all := s.exportsByClient()
	members := []string{pool.PoolTargetURI}
	names := make([]string, 0, len(by))
	for name := range by {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		members = append(members, RemoteClientURI(name))
	}
	return s.WriteCollection(c, redfish.Collection{ODataID: pool.RDMAEndpointsURI, ODataType: "#EndpointCollection.EndpointCollection",
		Name: "RDMA Endpoints", Members: members,
		Expand: func(uri string) (any, error) {
			if uri == pool.PoolTargetURI {
				return s.poolTarget(all), nil
			}
			name, _ := pool.RefID(uri, pool.RDMAEndpointsURI)
			return s.remoteClient(name, by[name]), nil
		}})
}

func (s *Server) getRDMAEndpoint(c echo.Context) error {
	id := c.Param("id")
	by, all := s.exportsByClient()
	if id == pool.PoolTargetID {
		return s.WriteResource(c, http.StatusOK, s.poolTarget(all))
	}
	xs := by[id]
	if len(xs) == 0 {
		return redfish.ErrResourceNotFound("Endpoint", id)
	}
	return s.WriteResource(c, http.StatusOK, s.remoteClient(id, xs))
}

// poolTarget is the export server's endpoint: the exported chunks are
// its connected entities.
func (s *Server) poolTarget(all []rdma.Export) redfish.Obj {
	conns := make([]string, 0, len(all))
	var chunks []dcd.ChunkID
	for _, x := range all {
		conns = append(conns, pool.ExportURI(x.ID))
		if !slices.Contains(chunks, x.Chunk) {
			chunks = append(chunks, x.Chunk)
		}
	}
	slices.Sort(chunks)
	entities := make([]redfish.Obj, 0, len(chunks))
	for _, ch := range chunks {
		entities = append(entities, redfish.Obj{"EntityType": "MemoryChunk", "EntityRole": "Target", "EntityLink": redfish.Link(pool.ChunkURI(ch))})
	}
	o := redfish.Obj{
		"@odata.id":         pool.PoolTargetURI,
		"@odata.type":       "#Endpoint.v1_8_2.Endpoint",
		"Id":                pool.PoolTargetID,
		"Name":              "Pool Memory Target",
		"Description":       "The box's export server, through which remote clients reach exported pool memory",
		"EndpointProtocol":  s.exportProtocol(),
		"ConnectedEntities": entities,
		"Status":            pool.Status(s.exportState()),
		"Links":             redfish.Obj{"Connections": redfish.Links(conns...)},
	}
	if td := s.exportTransport(); td != nil {
		o["IPTransportDetails"] = []redfish.Obj{td}
	}
	return o
}

// exportTransport describes where the export server listens, as
// Endpoint.IPTransportDetails; the address is left out when the server
// listens on every address.
func (s *Server) exportTransport() redfish.Obj {
	a, ok := s.cfg.ExportAddr.(*net.TCPAddr)
	if !ok || a == nil {
		return nil
	}
	td := redfish.Obj{"TransportProtocol": "TCP", "Port": a.Port}
	switch {
	case a.IP == nil || a.IP.IsUnspecified():
	case a.IP.To4() != nil:
		td["IPv4Address"] = redfish.Obj{"Address": a.IP.String()}
	default:
		td["IPv6Address"] = redfish.Obj{"Address": a.IP.String()}
	}
	return td
}

// remoteClient is a remote client's initiator endpoint. The client's own
// side (its network controller) is outside this service, so the entity
// has no link.
func (s *Server) remoteClient(name string, xs []rdma.Export) redfish.Obj {
	conns := make([]string, 0, len(xs))
	for _, x := range xs {
		conns = append(conns, pool.ExportURI(x.ID))
	}
	return redfish.Obj{
		"@odata.id":         RemoteClientURI(name),
		"@odata.type":       "#Endpoint.v1_8_2.Endpoint",
		"Id":                name,
		"Name":              "Remote Client " + name,
		"Description":       "A remote client that reaches exported pool memory over the network",
		"EndpointProtocol":  s.exportProtocol(),
		"ConnectedEntities": []redfish.Obj{{"EntityType": "NetworkController", "EntityRole": "Initiator"}},
		"Status":            pool.Status("Enabled"),
		"Links":             redfish.Obj{"Connections": redfish.Links(conns...)},
	}
}

func (s *Server) getExports(c echo.Context) error {
	all := s.cfg.Exports.List()
	members := make([]string, 0, len(all))
	byURI := make(map[string]rdma.Export, len(all))
	for _, x := range all {
		u := pool.ExportURI(x.ID)
		members = append(members, u)
		byURI[u] = x
	}
	return s.WriteCollection(c, redfish.Collection{ODataID: pool.RDMAConnectionsURI,
		ODataType: "#ConnectionCollection.ConnectionCollection", Name: "RDMA Connections", Members: members,
		Expand: func(uri string) (any, error) {
			x := byURI[uri]
			tr, _ := s.cfg.Exports.Traffic(x.ID) // revoked meanwhile: zero counters
			return exportBody(x, tr), nil
		}})
}

// lookupExport finds the export the path names.
func (s *Server) lookupExport(c echo.Context) (redfish.Obj, rdma.ExportID, error) {
	id := rdma.ExportID(c.Param("id"))
	if !id.Valid() {
		return nil, id, redfish.ErrResourceNotFound("Connection", c.Param("id"))
	}
	x, err := s.cfg.Exports.Get(id)
	if err != nil {
		return nil, id, redfish.ErrResourceNotFound("Connection", string(id))
	}
	tr, _ := s.cfg.Exports.Traffic(id)
	return exportBody(x, tr), id, nil
}

func (s *Server) getExport(c echo.Context) error {
	body, _, err := s.lookupExport(c)
	if err != nil {
		return err
	}
	return s.WriteResource(c, http.StatusOK, body)
}

func (s *Server) deleteExport(c echo.Context) error {
	body, id, err := s.lookupExport(c)
	if err != nil {
		return err
	}
	if err := s.IfMatch(c, body); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), exportRevokeTimeout)
	defer cancel()
	if err := s.cfg.Exports.Revoke(ctx, id); err != nil {
		if errors.Is(err, rdma.ErrNotFound) {
			return redfish.ErrResourceNotFound("Connection", string(id)) // revoked meanwhile
		}
		return pool.FromDomain(err, redfish.Target{Type: "Connection", ID: string(id), URI: pool.ExportURI(id)})
	}
	s.Publish(redfish.Event{MessageKey: redfish.MsgResourceRemoved, Origin: pool.ExportURI(id)})
	return s.NoContent(c)
}

func (s *Server) postExport(c echo.Context) error {
	var req exportCreate
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	if err := exactlyOne("MemoryChunkInfo", len(req.MemoryChunkInfo)); err != nil {
		return err
	}
	info := req.MemoryChunkInfo[0]
	perms, err := exportPerms(info.AccessCapabilities)
	if err != nil {
		return err
	}
	var oem exportCreateOem
	if req.Oem != nil && req.Oem.CxlPool != nil {
		oem = *req.Oem.CxlPool
	}
	client, err := s.exportClient(req, oem)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
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
	if !ok || !found {
		return pool.ErrMissingAtURI(info.MemoryChunk.ID, chunkProp)
	}
	cr := rdma.CreateRequest{Chunk: ch.ID, Client: client, Perms: perms}
	if oem.Offset != nil {
		cr.Offset = *oem.Offset
		if cr.Offset >= ch.Size {
			return redfish.ErrPropertyValueOutOfRange(strconv.FormatUint(cr.Offset, 10), "Oem/CxlPool/Offset")
		}
	}
	if oem.Length != nil {
		cr.Length = *oem.Length
		if cr.Length > ch.Size-cr.Offset {
			return redfish.ErrPropertyValueOutOfRange(strconv.FormatUint(cr.Length, 10), "Oem/CxlPool/Length")
		}
	}
	if oem.Expiry != nil {
		if cr.Expiry, cr.TTL, ok = parseExpiry(*oem.Expiry); !ok {
			return redfish.ErrPropertyValueFormat(*oem.Expiry, "Oem/CxlPool/Expiry")
		}
	}
	x, err := s.cfg.Exports.Create(ctx, cr)
	if err != nil {
		return exportError(err, redfish.Target{Type: "MemoryChunks", ID: id, URI: pool.ChunkURI(ch.ID)})
	}
	uri := pool.ExportURI(x.ID)
	s.Publish(redfish.Event{MessageKey: redfish.MsgResourceCreated, Origin: uri})
	body := exportBody(x, rdma.Traffic{})
	body["Oem"].(redfish.Obj)["CxlPool"].(redfish.Obj)["Token"] = x.Token.String()
	c.Response().Header().Set("Cache-Control", "no-store")
	return s.WriteCreated(c, uri, body)
}

// exportPerms reads AccessCapabilities: absent means read and write.
func exportPerms(caps []string) (rdma.Perm, error) {
	if caps == nil {
		return rdma.PermReadWrite, nil
	}
	var p rdma.Perm
	for _, c := range caps {
		switch c {
		case "Read":
			p |= rdma.PermRead
		case "Write":
			p |= rdma.PermWrite
		}
	}
	if p == 0 {
		const prop = "MemoryChunkInfo/0/AccessCapabilities"
		return 0, redfish.NewError(http.StatusBadRequest, redfish.M("Base.ArraySizeTooShort", prop, 1).WithRelated(prop))
	}
	return p, nil
}

// exportClient finds the remote client a new export is for: named by
// Oem.CxlPool.Client (a new client's endpoint is created with the
// export), or by an existing client endpoint in Links.InitiatorEndpoints;
// both may be given if they agree.
func (s *Server) exportClient(req exportCreate, oem exportCreateOem) (string, error) {
	const linkProp = "Links/InitiatorEndpoints/0"
	var linked, ref string
	if l := req.Links; l != nil {
		if len(l.InitiatorEndpoints) > 1 {
			return "", redfish.NewError(http.StatusBadRequest, redfish.M("Base.ArraySizeTooLong", "Links/InitiatorEndpoints", 1).WithRelated("Links/InitiatorEndpoints"))
		}
		if len(l.InitiatorEndpoints) == 1 {
			ref = l.InitiatorEndpoints[0].ID
			id, ok := pool.RefID(ref, pool.RDMAEndpointsURI)
			if !ok {
				return "", redfish.ErrPropertyValueFormat(ref, linkProp)
			}
			if id == pool.PoolTargetID {
				return "", pool.ErrPropertyValueIncorrect(linkProp, ref)
			}
			linked = id
		}
		for i, t := range l.TargetEndpoints {
			if !refMatches(t.ID, pool.PoolTargetURI) {
				return "", pool.ErrPropertyValueIncorrect("Links/TargetEndpoints/"+strconv.Itoa(i), t.ID)
			}
		}
	}
	if oem.Client != nil {
		name := *oem.Client
		if !validClientName(name) {
			return "", redfish.ErrPropertyValueFormat(name, "Oem/CxlPool/Client")
		}
		if linked != "" && linked != name {
			return "", redfish.ErrPropertyValueConflict("Oem/CxlPool/Client", linkProp)
		}
		return name, nil
	}
	if linked == "" {
		return "", redfish.ErrPropertyMissing("Oem/CxlPool/Client")
	}
	if by, _ := s.exportsByClient(); len(by[linked]) == 0 {
		return "", pool.ErrMissingAtURI(ref, linkProp)
	}
	return linked, nil
}

// parseExpiry reads Oem.CxlPool.Expiry: an RFC 3339 date-time, or an
// ISO 8601 duration counted from creation by the export service's clock.
func parseExpiry(s string) (at time.Time, ttl time.Duration, ok bool) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, 0, true
	}
	d, ok := parseISODuration(s)
	return time.Time{}, d, ok
}

// parseISODuration reads a positive ISO 8601 duration of days, hours,
// minutes and seconds ("P1D", "PT1H30M", "PT0.5S"), as Redfish writes
// durations, of at most maxExportTTL.
func parseISODuration(s string) (time.Duration, bool) {
	rest, ok := strings.CutPrefix(s, "P")
	if !ok || rest == "" {
		return 0, false
	}
	var total float64
	inTime := false
	rank := 0 // units must come in order: D, then T, H, M, S
	for rest != "" {
		if rest[0] == 'T' {
			if inTime || len(rest) == 1 {
				return 0, false
			}
			inTime, rest = true, rest[1:]
			continue
		}
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.') {
			i++
		}
		if i == 0 || i == len(rest) || i > 15 {
			return 0, false
		}
		n, err := strconv.ParseFloat(rest[:i], 64)
		if err != nil {
			return 0, false
		}
		var unit time.Duration
		var r int
		switch u := rest[i]; {
		case !inTime && u == 'D':
			unit, r = 24*time.Hour, 1
		case inTime && u == 'H':
			unit, r = time.Hour, 2
		case inTime && u == 'M':
			unit, r = time.Minute, 3
		case inTime && u == 'S':
			unit, r = time.Second, 4
		default:
			return 0, false
		}
		if r <= rank {
			return 0, false
		}
		rank = r
		total += n * float64(unit)
		if total > float64(maxExportTTL) {
			return 0, false
		}
		rest = rest[i+1:]
	}
	d := time.Duration(total)
	return d, d > 0
}

// exportError maps the export service's refusals; the rest are the
// common domain errors.
func exportError(err error, t redfish.Target) *redfish.Error {
	switch {
	case errors.Is(err, rdma.ErrNoExtents):
		return redfish.NewError(http.StatusConflict, redfish.Msg{Key: "Base.GeneralError", Resolution: "The memory chunk holds no " +
			"capacity on the device yet. Connect it to a host (Fabrics/CXL/Connections) first, then export it."}).WithCause(err)
	case errors.Is(err, rdma.ErrTooMany):
		return redfish.NewError(http.StatusConflict, redfish.M("Base.CreateLimitReachedForResource")).WithCause(err)
	case errors.Is(err, dcd.ErrInvalid):
		reason := strings.TrimSuffix(err.Error(), ": "+rdma.ErrInvalid.Error())
		reason = strings.ReplaceAll(reason, "rdma: ", "")
		return redfish.NewError(http.StatusBadRequest, redfish.Msg{Key: "Base.GeneralError", Resolution: "The export request is " +
			"not valid: " + reason + ". Correct the request and resubmit it."}).WithCause(err)
	}
	return pool.FromDomain(err, t)
}

// exportBody is an export's Connection, without its token.
func exportBody(x rdma.Export, tr rdma.Traffic) redfish.Obj {
	id := string(x.ID)
	caps := []string{}
	if x.Perms.Has(rdma.PermRead) {
		caps = append(caps, "Read")
	}
	if x.Perms.Has(rdma.PermWrite) {
		caps = append(caps, "Write")
	}
	oem := redfish.Obj{
		"Client":  x.Client,
		"Offset":  x.Offset,
		"Length":  x.Length,
		"Created": x.Created.UTC().Format(redfish.TimeFormat),
		"Traffic": redfish.Obj{
			"Reads": tr.Reads, "Writes": tr.Writes, "Atomics": tr.Atomics,
			"BytesRead": tr.BytesRead, "BytesWritten": tr.BytesWritten,
		},
	}
	if !x.Expiry.IsZero() {
		oem["Expiry"] = x.Expiry.UTC().Format(redfish.TimeFormat)
	}
	return redfish.Obj{
		"@odata.id":      pool.ExportURI(x.ID),
		"@odata.type":    "#Connection.v1_4_0.Connection",
		"Id":             id,
		"Name":           "Export " + id,
		"Description":    fmt.Sprintf("Memory chunk %d for remote client %s", x.Chunk, x.Client),
		"ConnectionType": "Memory",
		"MemoryChunkInfo": []redfish.Obj{{
			"MemoryChunk":        redfish.Link(pool.ChunkURI(x.Chunk)),
			"AccessCapabilities": caps,
			"AccessState":        "Optimized",
		}},
		"Links": redfish.Obj{
			"InitiatorEndpoints": redfish.Links(RemoteClientURI(x.Client)),
			"TargetEndpoints":    redfish.Links(pool.PoolTargetURI),
		},
		"Status": pool.Status("Enabled"),
		"Oem":    oemschema.Oem("Export", oem),
	}
}
