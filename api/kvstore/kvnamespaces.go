package kvstore

import (
	"context"
	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"encoding/hex"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"cxlpool/api/oemschema"
	"cxlpool/dcd"
	"cxlpool/kv"
	"cxlpool/rdma"
)

// KV-cache namespaces (package kv): an OEM collection of the box's
// KV-cache store. A namespace's blocks live in chunks of shared Dynamic
// Capacity granted to every member host; hosts reach its index with the
// KV protocol (kv/wire) and a per-host token.
//
//   - GET the collection and each namespace (appliance roles).
//   - POST the collection {Name, ChunkSizeMiB, QuotaMiB, Hosts:["Host0",…]}
//     creates it with one chunk granted to every host; the 201 answer
//     carries each host's token (Tokens), the only time it is shown.
//   - PATCH {QuotaMiB} resizes: under what it holds, its coldest chunks
//     are released after their blocks are evicted (pinned blocks refuse).
//   - DELETE ends its sessions, evicts everything, releases its chunks.
//   - POST …/Actions/CxlPool.Join {Host} adds a host (its token in the
//     answer); …/Actions/CxlPool.Leave {Host} removes one.
//   - POST …/Actions/CxlPool.Export {Client} exports every chunk to a
//     remote rack (rdma, read-write) with one per-namespace token, shown
//     once in Remote.Token: the rack's key to the index (as host
//     RackHost) and to every chunk's export; chunks added later are
//     exported with it, chunks that leave are revoked first. Exporting
//     again replaces token and exports. …/Actions/CxlPool.Unexport {}
//     revokes them. GET shows Remote (the rack and the exports) without
//     the token.
//
// Only ConfigureComponents (administrators, operators) changes them: a
// namespace takes pool capacity and hands tokens out.

// URIs of the KV namespaces.
const KVNamespacesURI = "/redfish/v1/Oem/CxlPool/KVNamespaces"

// KVNamespaceURI is one namespace.
func KVNamespaceURI(name string) string { return KVNamespacesURI + "/" + name }

// kvChangeTimeout bounds a create, resize, join or delete: each grants or
// releases chunks on every member host.
const kvChangeTimeout = 2 * time.Minute

type kvNamespaceCreate struct {
	Name         *string  `json:"Name" rf:"required"`
	ChunkSizeMiB *uint64  `json:"ChunkSizeMiB" rf:"required"`
	QuotaMiB     *uint64  `json:"QuotaMiB"`
	Hosts        []string `json:"Hosts" rf:"required"`
	ID           any      `json:"Id" rf:"readonly"`
	Members      any      `json:"Members" rf:"readonly"`
	Chunks       any      `json:"Chunks" rf:"readonly"`
	Stats        any      `json:"Stats" rf:"readonly"`
	Tokens       any      `json:"Tokens" rf:"readonly"`
}

type kvNamespacePatch struct {
	QuotaMiB *uint64 `json:"QuotaMiB" rf:"required"`
	ID       any     `json:"Id" rf:"readonly"`
	Name     any     `json:"Name" rf:"readonly"`
}

type kvHostAction struct {
	Host *string `json:"Host" rf:"required"`
}

type kvExportAction struct {
	Client *string `json:"Client" rf:"required"`
}

func (s *Server) kvNamespaceRoutes() {
	if s.cfg.KV == nil {
		return
	}
	s.Handle(http.MethodGet, KVNamespacesURI, redfish.PrivApplianceView, s.getKVNamespaces)
	s.Handle(http.MethodPost, KVNamespacesURI, redfish.PrivConfigureComponents, s.postKVNamespace)
	s.Handle(http.MethodGet, KVNamespacesURI+"/:id", redfish.PrivApplianceView, s.getKVNamespace)
	s.Handle(http.MethodPatch, KVNamespacesURI+"/:id", redfish.PrivConfigureComponents, s.patchKVNamespace)
	s.Handle(http.MethodDelete, KVNamespacesURI+"/:id", redfish.PrivConfigureComponents, s.deleteKVNamespace)
	s.Handle(http.MethodPost, KVNamespacesURI+"/:id/Actions/CxlPool.Join", redfish.PrivConfigureComponents, s.kvJoin)
	s.Handle(http.MethodPost, KVNamespacesURI+"/:id/Actions/CxlPool.Leave", redfish.PrivConfigureComponents, s.kvLeave)
	s.Handle(http.MethodPost, KVNamespacesURI+"/:id/Actions/CxlPool.Export", redfish.PrivConfigureComponents, s.kvExport)
	s.Handle(http.MethodPost, KVNamespacesURI+"/:id/Actions/CxlPool.Unexport", redfish.PrivConfigureComponents, s.kvUnexport)
	s.feedKVEvents() // kvevents.go
}

// kvErr maps a kv error to its Redfish error, naming the rule.
func kvErr(err error, name string) *redfish.Error {
	var e *redfish.Error
	if errors.As(err, &e) {
		return e
	}
	general := func(status int, resolution string) *redfish.Error {
		return redfish.NewError(status, redfish.Msg{Key: "Base.GeneralError", Resolution: resolution}).WithCause(err)
	}
	switch {
	case errors.Is(err, kv.ErrNotFound):
		return redfish.ErrResourceNotFound("KVNamespace", name).WithCause(err)
	case errors.Is(err, kv.ErrInvalid):
		return general(http.StatusBadRequest, "The request is not valid for a KV namespace: "+kvReason(err)+
			". Correct the request and resubmit it.")
	case errors.Is(err, kv.ErrConflict):
		return general(http.StatusConflict, "The namespace's state does not allow this: "+kvReason(err)+".")
	case errors.Is(err, kv.ErrPinned):
		return general(http.StatusConflict, "A chunk to release still holds blocks that clients pin or are writing: "+
			kvReason(err)+". Retry when they are unpinned, or choose a larger quota.")
	case errors.Is(err, kv.ErrNoSpace):
		return redfish.NewError(http.StatusConflict, redfish.M("Base.ResourceExhaustion", KVNamespaceURI(name))).WithCause(err)
	case errors.Is(err, kv.ErrUnavailable):
		return redfish.ErrServiceUnavailable(pool.RetryDeviceSeconds).WithCause(err)
	}
	return pool.FromDomain(err, redfish.Target{Type: "KVNamespace", ID: name, URI: KVNamespaceURI(name)})
}

// kvReason is the innermost reason of a kv error.
func kvReason(err error) string {
	s := err.Error()
	for _, sentinel := range []error{kv.ErrInvalid, kv.ErrConflict, kv.ErrPinned} {
		if t := sentinel.Error(); len(s) > len(t)+2 && s[len(s)-len(t)-2:] == ": "+t {
			s = s[:len(s)-len(t)-2]
		}
	}
	if len(s) > 4 && s[:4] == "kv: " {
		s = s[4:]
	}
	return s
}

func kvBody(ns kv.Namespace) redfish.Obj {
	members := make([]string, 0, len(ns.Members))
	systems := make([]redfish.Obj, 0, len(ns.Members))
	for _, h := range ns.Members {
		members = append(members, pool.SystemID(h))
		systems = append(systems, redfish.Link(pool.SystemURI(h)))
	}
	chunks := make([]redfish.Obj, 0, len(ns.Chunks))
	for _, c := range ns.Chunks {
		chunks = append(chunks, redfish.Obj{"MemoryChunk": redfish.Link(pool.ChunkURI(c.ID)), "Tag": c.Tag.String(), "SizeMiB": c.Size >> 20})
	}
	return redfish.Obj{
		"@odata.id":    KVNamespaceURI(ns.Name),
		"@odata.type":  oemschema.Type("KVNamespace"),
		"Id":           ns.Name,
		"Name":         ns.Name,
		"ChunkSizeMiB": ns.ChunkSize >> 20,
		"QuotaMiB":     ns.Quota >> 20,
		"Hosts":        members,
		"Created":      ns.Created.UTC().Format(time.RFC3339),
		"Chunks":       chunks,
		"Stats": redfish.Obj{
			"Blocks": ns.Stats.Blocks, "UsedBytes": ns.Stats.Used, "ReservedBytes": ns.Stats.Reserved, "FreeBytes": ns.Stats.Free,
			"CapacityMiB": ns.Stats.Capacity >> 20, "Evictions": ns.Stats.Evictions, "Sessions": ns.Stats.Sessions,
		},
		"Systems": systems,
	}
}

// kvTokens is the Tokens property: each host's token, shown once.
func kvTokens(toks map[dcd.HostID]kv.Token) []redfish.Obj {
	hosts := make([]dcd.HostID, 0, len(toks))
	for h := range toks {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	out := make([]redfish.Obj, 0, len(hosts))
	for _, h := range hosts {
		out = append(out, redfish.Obj{"Host": pool.SystemID(h), "Token": tokenHex(toks[h])})
	}
	return out
}

func (s *Server) getKVNamespaces(c echo.Context) error {
	all := s.cfg.KV.Namespaces()
	members := make([]string, 0, len(all))
	by := map[string]kv.Namespace{}
	for _, ns := range all {
		u := KVNamespaceURI(ns.Name)
		members = append(members, u)
		by[u] = ns
	}
	return s.WriteCollection(c, redfish.Collection{ODataID: KVNamespacesURI, ODataType: oemschema.Type("KVNamespaceCollection"),
		Name: "KV-Cache Namespaces", Members: members,
		Expand: func(uri string) (any, error) { return kvBody(by[uri]), nil }})
}

func (s *Server) lookupKV(c echo.Context) (kv.Namespace, redfish.Obj, error) {
	name := c.Param("id")
	ns, err := s.cfg.KV.Namespace(name)
	if err != nil {
		return ns, nil, redfish.ErrResourceNotFound("KVNamespace", name)
	}
	body := kvBody(ns)
	if ra, err := s.cfg.KV.Exports(name); err == nil {
		body["Remote"] = kvRemote(ra)
	}
	return ns, body, nil
}

// kvRemote is the Remote property (null: not exported).
func kvRemote(ra kv.RemoteAccess) any {
	if ra.Rack == "" {
		return nil
	}
	exps := make([]redfish.Obj, 0, len(ra.Exports))
	for _, e := range ra.Exports {
		exps = append(exps, redfish.Obj{"MemoryChunk": redfish.Link(pool.ChunkURI(e.Chunk)), "Tag": e.Tag.String(),
			"Export": string(e.Export), "RDMAConnection": redfish.Link(pool.ExportURI(e.Export)), "Length": e.Length})
	}
	return redfish.Obj{"Client": ra.Rack, "Exports": exps}
}

func (s *Server) kvExport(c echo.Context) error {
	ns, _, err := s.lookupKV(c)
	if err != nil {
		return err
	}
	var req kvExportAction
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), kvChangeTimeout)
	defer cancel()
	ra, err := s.cfg.KV.Export(ctx, ns.Name, *req.Client)
	if err != nil && ra.Rack == "" {
		return kvErr(err, ns.Name)
	}
	// err with ra set: exported, but an old export's revocation failed;
	// the new one stands (the old records are dropped as their chunks'
	// grants change, or at the next Sweep). Logged, not refused.
	if err != nil {
		s.log.Warn("kv export: revoking the previous exports", "namespace", ns.Name, "err", err)
	}
	got, err := s.cfg.KV.Namespace(ns.Name)
	if err != nil {
		return kvErr(err, ns.Name)
	}
	body := kvBody(got)
	remote := kvRemote(ra).(redfish.Obj)
	// The token is the same 32 bytes for both protocols: hex as the
	// hosts' KV tokens, base64url as exports' tokens are shown.
	remote["Token"] = tokenHex(ra.Token)
	remote["ExportToken"] = rdma.Token(ra.Token).String()
	body["Remote"] = remote
	c.Response().Header().Set("Cache-Control", "no-store")
	s.Publish(redfish.Event{MessageKey: redfish.MsgResourceChanged, Origin: KVNamespaceURI(ns.Name)})
	return s.WriteResource(c, http.StatusOK, body)
}

func (s *Server) kvUnexport(c echo.Context) error {
	ns, _, err := s.lookupKV(c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), kvChangeTimeout)
	defer cancel()
	if err := s.cfg.KV.Unexport(ctx, ns.Name); err != nil {
		return kvErr(err, ns.Name)
	}
	_, body, err := s.lookupKV(c)
	if err != nil {
		return err
	}
	s.Publish(redfish.Event{MessageKey: redfish.MsgResourceChanged, Origin: KVNamespaceURI(ns.Name)})
	return s.WriteResource(c, http.StatusOK, body)
}

func (s *Server) getKVNamespace(c echo.Context) error {
	_, body, err := s.lookupKV(c)
	if err != nil {
		return err
	}
	return s.WriteResource(c, http.StatusOK, body)
}

// kvHost parses a host's system Id for property prop.
func (s *Server) kvHost(id, prop string) (dcd.HostID, error) {
	h, err := pool.ParseSystemID(id)
	if err != nil {
		return 0, redfish.ErrPropertyValueFormat(id, prop)
	}
	if _, ok := s.mgr.Box().Head(uint16(h)); !ok {
		return 0, pool.ErrMissingAtURI(pool.SystemURI(h), prop)
	}
	return h, nil
}

func tokenHex(t kv.Token) string { return hex.EncodeToString(t[:]) }

func (s *Server) postKVNamespace(c echo.Context) error {
	var req kvNamespaceCreate
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	if len(req.Hosts) == 0 {
		return redfish.ErrPropertyMissing("Hosts")
	}
	cr := kv.CreateRequest{Name: *req.Name, ChunkSize: *req.ChunkSizeMiB << 20}
	if *req.ChunkSizeMiB == 0 || *req.ChunkSizeMiB > 1<<30 {
		return redfish.ErrPropertyValueOutOfRange(strconv.FormatUint(*req.ChunkSizeMiB, 10), "ChunkSizeMiB")
	}
	if req.QuotaMiB != nil {
		if *req.QuotaMiB < *req.ChunkSizeMiB || *req.QuotaMiB > 1<<30 {
			return redfish.ErrPropertyValueOutOfRange(strconv.FormatUint(*req.QuotaMiB, 10), "QuotaMiB")
		}
		cr.Quota = *req.QuotaMiB << 20
	}
	for i, id := range req.Hosts {
		h, err := s.kvHost(id, "Hosts/"+strconv.Itoa(i))
		if err != nil {
			return err
		}
		if slices.Contains(cr.Hosts, h) {
			return redfish.ErrPropertyValueConflict("Hosts/"+strconv.Itoa(i), "Hosts")
		}
		cr.Hosts = append(cr.Hosts, h)
	}
	if _, err := s.cfg.KV.Namespace(cr.Name); err == nil {
		return redfish.ErrResourceAlreadyExists("KVNamespace", "Name", cr.Name)
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), kvChangeTimeout)
	defer cancel()
	ns, toks, err := s.cfg.KV.Create(ctx, cr)
	if err != nil {
		if errors.Is(err, kv.ErrConflict) {
			return redfish.ErrResourceAlreadyExists("KVNamespace", "Name", cr.Name)
		}
		return kvErr(err, cr.Name)
	}
	body := kvBody(ns)
	body["Tokens"] = kvTokens(toks)
	// The tokens are secrets: no cache keeps the answer.
	c.Response().Header().Set("Cache-Control", "no-store")
	s.Publish(redfish.Event{MessageKey: redfish.MsgResourceCreated, Origin: KVNamespaceURI(ns.Name)})
	return s.WriteCreated(c, KVNamespaceURI(ns.Name), body)
}

func (s *Server) patchKVNamespace(c echo.Context) error {
	ns, body, err := s.lookupKV(c)
	if err != nil {
		return err
	}
	if err := s.IfMatch(c, body); err != nil {
		return err
	}
	var req kvNamespacePatch
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	if *req.QuotaMiB < ns.ChunkSize>>20 || *req.QuotaMiB > 1<<30 {
		return redfish.ErrPropertyValueOutOfRange(strconv.FormatUint(*req.QuotaMiB, 10), "QuotaMiB")
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), kvChangeTimeout)
	defer cancel()
	got, err := s.cfg.KV.Resize(ctx, ns.Name, *req.QuotaMiB<<20)
	if err != nil {
		return kvErr(err, ns.Name)
	}
	s.Publish(redfish.Event{MessageKey: redfish.MsgResourceChanged, Origin: KVNamespaceURI(ns.Name)})
	return s.WriteResource(c, http.StatusOK, kvBody(got))
}

func (s *Server) deleteKVNamespace(c echo.Context) error {
	ns, body, err := s.lookupKV(c)
	if err != nil {
		return err
	}
	if err := s.IfMatch(c, body); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), kvChangeTimeout)
	defer cancel()
	if err := s.cfg.KV.Delete(ctx, ns.Name); err != nil {
		return kvErr(err, ns.Name)
	}
	s.Publish(redfish.Event{MessageKey: redfish.MsgResourceRemoved, Origin: KVNamespaceURI(ns.Name)})
	return s.NoContent(c)
}

// kvHostChange runs a Join or Leave of the body's Host and answers the
// namespace after it, with what change returns added (Join's token).
func (s *Server) kvHostChange(c echo.Context, change func(ctx context.Context, name string, h dcd.HostID) (redfish.Obj, error)) error {
	ns, _, err := s.lookupKV(c)
	if err != nil {
		return err
	}
	var req kvHostAction
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	h, err := s.kvHost(*req.Host, "Host")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), kvChangeTimeout)
	defer cancel()
	extra, err := change(ctx, ns.Name, h)
	if err != nil {
		return kvErr(err, ns.Name)
	}
	got, err := s.cfg.KV.Namespace(ns.Name)
	if err != nil {
		return kvErr(err, ns.Name)
	}
	body := kvBody(got)
	for k, v := range extra {
		body[k] = v
	}
	s.Publish(redfish.Event{MessageKey: redfish.MsgResourceChanged, Origin: KVNamespaceURI(ns.Name)})
	return s.WriteResource(c, http.StatusOK, body)
}

func (s *Server) kvJoin(c echo.Context) error {
	return s.kvHostChange(c, func(ctx context.Context, name string, h dcd.HostID) (redfish.Obj, error) {
		tok, err := s.cfg.KV.Join(ctx, name, h)
		if err != nil {
			return nil, err
		}
		// The token is a secret: no cache keeps the answer.
		c.Response().Header().Set("Cache-Control", "no-store")
		return redfish.Obj{"Tokens": kvTokens(map[dcd.HostID]kv.Token{h: tok})}, nil
	})
}

func (s *Server) kvLeave(c echo.Context) error {
	return s.kvHostChange(c, func(ctx context.Context, name string, h dcd.HostID) (redfish.Obj, error) {
		return nil, s.cfg.KV.Leave(ctx, name, h)
	})
}
