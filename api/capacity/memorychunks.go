package capacity

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"unicode"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/oemschema"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
	"cxlpool/fabric/cci"
)

// MemoryChunks: reservations of pool capacity. POST reserves (nothing is
// sent to the device until the chunk is first connected), DELETE returns
// the capacity to the pool (409 while any host holds or is being given
// it).
//
// Host accounts may reserve chunks themselves: such a chunk is recorded
// as theirs, so they see it, may connect it to their own initiator and
// may delete it. What a host has reserved plus what it holds counts
// against its quota (dcd.Host.Quota, or the default quota where that is 0), checked at
// reservation as the ledger checks it at grant time. A host sees only
// the chunks it reserved or holds, and in them only itself.

// maxNameLength bounds a chunk's name.
const maxNameLength = 64

type chunkCreate struct {
	MemoryChunkSizeMiB int64  `json:"MemoryChunkSizeMiB" rf:"required"`
	AddressRangeType   string `json:"AddressRangeType" enum:"Volatile"`
	// DisplayName is the DMTF spelling of Oem.CxlPool.Name.
	DisplayName *string `json:"DisplayName"`
	Oem         *struct {
		CxlPool *struct {
			// Sharable asks for a chunk several hosts may share. It
			// defaults to the region's ShareableRegion when Region
			// is given, else false.
			Sharable *bool `json:"Sharable"`
			// Region picks the DC region (else the first that fits).
			Region  *int    `json:"Region"`
			Name    *string `json:"Name"`
			Tag     any     `json:"Tag" rf:"readonly"`
			Owner   any     `json:"Owner" rf:"readonly"`
			Grants  any     `json:"Grants" rf:"readonly"`
			Created any     `json:"Created" rf:"readonly"`
		} `json:"CxlPool"`
	} `json:"Oem"`
	ID                    any `json:"Id" rf:"readonly"`
	Name                  any `json:"Name" rf:"readonly"`
	AddressRangeOffsetMiB any `json:"AddressRangeOffsetMiB" rf:"readonly"`
	Status                any `json:"Status" rf:"readonly"`
	Links                 any `json:"Links" rf:"readonly"`
}

func (s *Server) memoryChunkRoutes() {
	if s.capacity == nil {
		return
	}
	s.Handle(http.MethodGet, pool.ChunksURI, redfish.PrivLogin, s.getChunks)
	s.Handle(http.MethodPost, pool.ChunksURI, redfish.PrivConfigureComponents|redfish.PrivHostCapacity, s.postChunk)
	s.Handle(http.MethodGet, pool.ChunksURI+"/:id", redfish.PrivLogin, s.getChunk)
	s.Handle(http.MethodDelete, pool.ChunksURI+"/:id", redfish.PrivConfigureComponents|redfish.PrivHostCapacity, s.deleteChunk)
	s.strandedRoutes()
}

func (s *Server) getChunks(c echo.Context) error {
	v, err := s.view(c.Request().Context())
	if err != nil {
		return err
	}
	p := redfish.PrincipalOf(c)
	col, err := v.cachedCollection(p, "chunks", redfish.Collection{ODataID: pool.ChunksURI,
		ODataType: "#MemoryChunksCollection.MemoryChunksCollection", Name: "Memory Chunks",
		Expand: func(uri string) (any, error) {
			id, _ := pool.RefID(uri, pool.ChunksURI)
			n, _ := pool.ParseID(id)
			ch, _ := v.chunk(dcd.ChunkID(n))
			return s.chunkBody(v, p, ch), nil
		}}, func() []string {
		members := make([]string, 0, len(v.chunks))
		for _, ch := range v.chunks {
			if s.chunkVisible(p, v, ch) {
				members = append(members, pool.ChunkURI(ch.ID))
			}
		}
		return members
	})
	if err != nil {
		return err
	}
	return s.WriteCollection(c, col)
}

// lookupChunk finds the chunk the path names, if the caller may see it.
func (s *Server) lookupChunk(c echo.Context) (*poolView, dcd.Chunk, error) {
	v, err := s.view(c.Request().Context())
	if err != nil {
		return nil, dcd.Chunk{}, err
	}
	n, ok := pool.ParseID(c.Param("id"))
	ch, found := v.chunk(dcd.ChunkID(n))
	if !ok || !found || !s.chunkVisible(redfish.PrincipalOf(c), v, ch) {
		return nil, dcd.Chunk{}, redfish.ErrResourceNotFound("MemoryChunks", c.Param("id"))
	}
	return v, ch, nil
}

func (s *Server) getChunk(c echo.Context) error {
	v, ch, err := s.lookupChunk(c)
	if err != nil {
		return err
	}
	return s.WriteResource(c, http.StatusOK, s.chunkBody(v, redfish.PrincipalOf(c), ch))
}

func (s *Server) deleteChunk(c echo.Context) error {
	v, ch, err := s.lookupChunk(c)
	if err != nil {
		return err
	}
	if err := s.IfMatch(c, s.chunkBody(v, redfish.PrincipalOf(c), ch)); err != nil {
		return err
	}
	ctx := c.Request().Context()
	err = s.mgr.DeleteChunk(ctx, ch.ID)
	s.capacity.invalidate()
	if err != nil {
		return pool.FromDomain(err, redfish.Target{Type: "MemoryChunks", ID: c.Param("id"), URI: pool.ChunkURI(ch.ID)})
	}
	if err := s.capacity.dropOwner(context.WithoutCancel(ctx), ch.ID); err != nil {
		s.log.Error("forgetting the owner of a deleted chunk", "chunk", ch.ID, "err", err)
	}
	return s.NoContent(c)
}

// validName accepts printable names of at most maxNameLength characters.
func validName(prop, name string) error {
	if len([]rune(name)) > maxNameLength {
		return redfish.NewError(http.StatusBadRequest, redfish.M("Base.StringValueTooLong", name, maxNameLength).WithRelated(prop))
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return redfish.ErrPropertyValueFormat(name, prop)
		}
	}
	return nil
}

func (s *Server) postChunk(c echo.Context) error {
	var req chunkCreate
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	ctx := c.Request().Context()
	p := redfish.PrincipalOf(c)
	v, err := s.view(ctx)
	if err != nil {
		return err
	}
	rr := dcd.ReserveRequest{Region: -1}
	sizeText := strconv.FormatInt(req.MemoryChunkSizeMiB, 10)
	if req.MemoryChunkSizeMiB <= 0 || req.MemoryChunkSizeMiB > math.MaxInt64/mebibyte {
		return redfish.ErrPropertyValueOutOfRange(sizeText, "MemoryChunkSizeMiB")
	}
	rr.Size = uint64(req.MemoryChunkSizeMiB) * mebibyte
	var oemName *string
	if req.Oem != nil && req.Oem.CxlPool != nil {
		o := req.Oem.CxlPool
		oemName = o.Name
		if o.Region != nil {
			r, ok := v.region(*o.Region)
			if !ok {
				return redfish.ErrPropertyValueNotInList(strconv.Itoa(*o.Region), "Oem/CxlPool/Region")
			}
			rr.Region, rr.Sharable = r.Index, r.Sharable
		}
		if o.Sharable != nil {
			if *o.Sharable && rr.Region >= 0 && !rr.Sharable {
				return redfish.ErrPropertyValueConflict("Oem/CxlPool/Sharable", "Oem/CxlPool/Region")
			}
			rr.Sharable = *o.Sharable
		}
	}
	switch {
	case req.DisplayName != nil && oemName != nil && *req.DisplayName != *oemName:
		return redfish.ErrPropertyValueConflict("DisplayName", "Oem/CxlPool/Name")
	case req.DisplayName != nil:
		rr.Name = *req.DisplayName
		if err := validName("DisplayName", rr.Name); err != nil {
			return err
		}
	case oemName != nil:
		rr.Name = *oemName
		if err := validName("Oem/CxlPool/Name", rr.Name); err != nil {
			return err
		}
	}
	// The increment valid in the region that will be used: the given
	// one's block size, or one valid in every region.
	block := v.blockSize()
	if r, ok := v.region(rr.Region); ok {
		block = r.BlockSize
	}
	if block == 0 || rr.Size%block != 0 {
		e := pool.ErrPropertyValueIncorrect("MemoryChunkSizeMiB", sizeText)
		if block > 0 {
			up := (rr.Size/block + 1) * block
			alt := fmt.Sprintf("%d MiB", pool.MiB(up))
			if down := rr.Size / block * block; down > 0 {
				alt = fmt.Sprintf("%d MiB or %d MiB", pool.MiB(down), pool.MiB(up))
			}
			e.Messages[0].Resolution = fmt.Sprintf("Chunk sizes are multiples of %d MiB, the device's block size "+
				"(MemoryChunkIncrementMiB of %s): %s MiB is not. Use %s.", pool.MiB(block), pool.MemoryDomainURI, sizeText, alt)
		}
		return e
	}
	if rr.Sharable {
		found := false
		for _, r := range v.box.Regions {
			found = found || r.Sharable
		}
		if !found {
			e := pool.ErrPropertyValueIncorrect("Oem/CxlPool/Sharable", "true")
			e.Messages[0].Resolution = "No DC region of the device is sharable (Oem.CxlPool.Regions of " + pool.MemoryDomainURI +
				"), so no chunk can be shared between hosts. Reserve it without Sharable."
			return e
		}
	}
	if err := v.fitsOneRegion(rr); err != nil {
		return err
	}
	target := redfish.Target{Type: "MemoryDomain", ID: "Pool", URI: pool.MemoryDomainURI}
	if p.IsHost() {
		// The quota check and the reservation are one step per server.
		s.capacity.reserveMu.Lock()
		defer s.capacity.reserveMu.Unlock()
		if v, err = s.view(ctx); err != nil {
			return err
		}
		h, err := s.mgr.Ledger().Host(ctx, dcd.HostID(*p.HostID))
		if err != nil {
			return pool.FromDomain(err, target)
		}
		quota := v.quota(h.ID) // its own, else the default: no host takes the pool by default
		if used := s.hostCommitted(v, h.ID); quota > 0 && (rr.Size > quota || used > quota-rr.Size) {
			return pool.ErrQuota(h.ID, quota, used, rr.Size).WithCause(dcd.ErrQuotaExceeded)
		}
	}
	ch, err := s.mgr.Reserve(ctx, rr)
	if err != nil {
		return pool.FromDomain(err, target)
	}
	if p.IsHost() {
		if err := s.capacity.setOwner(ctx, ch, dcd.HostID(*p.HostID)); err != nil {
			// Without the record the host could not see its chunk:
			// take the reservation back.
			if derr := s.mgr.DeleteChunk(context.WithoutCancel(ctx), ch.ID); derr != nil {
				s.log.Error("undoing a reservation", "chunk", ch.ID, "err", derr)
			}
			s.capacity.invalidate()
			return redfish.ErrInternal(err)
		}
	}
	s.capacity.invalidate()
	if v, err = s.view(ctx); err != nil {
		return err
	}
	return s.WriteCreated(c, pool.ChunkURI(ch.ID), s.chunkBody(v, p, ch))
}

// chunkState is the chunk's Status.State from its (visible) grants:
// StandbyOffline while only reserved (it awaits a Connection), Starting
// while being offered, Enabled while held, Disabled while being released.
func chunkState(gs []dcd.Grant) string {
	st := "StandbyOffline"
	for _, g := range gs {
		switch {
		case g.State == dcd.GrantGranted:
			return "Enabled"
		case g.State == dcd.GrantAdding:
			st = "Starting"
		case g.State == dcd.GrantReleasing && st == "StandbyOffline":
			st = "Disabled"
		}
	}
	return st
}

func (s *Server) chunkBody(v *poolView, p *redfish.Principal, ch dcd.Chunk) redfish.Obj {
	var gs []dcd.Grant
	for _, g := range v.chunkGrants(ch.ID) {
		if p.CanSeeHost(redfish.HostID(g.Host)) {
			gs = append(gs, g)
		}
	}
	endpoints := make([]string, 0, len(gs))
	lds := make([]string, 0, len(gs))
	regions := make([]string, 0, len(gs))
	grants := make([]redfish.Obj, 0, len(gs))
	offset, placed := uint64(math.MaxUint64), false
	var extents []cci.Extent
	for _, g := range gs {
		endpoints = append(endpoints, pool.InitiatorURI(g.Host))
		lds = append(lds, pool.LogicalDeviceURI(g.Host))
		regions = append(regions, pool.MemoryRegionURI(g.Host, ch.Region))
		grants = append(grants, redfish.Obj{"Connection": redfish.Link(pool.ConnectionURI(g.ID)), "SystemId": pool.SystemID(g.Host), "State": string(g.State)})
		if holds(g) {
			for _, e := range g.Extents {
				offset, placed = min(offset, e.DPA), true
			}
			extents = append(extents, g.Extents...)
		}
	}
	oem := redfish.Obj{
		"Sharable": ch.Sharable,
		"Region":   ch.Region,
		"Tag":      ch.Tag.String(),
		"Created":  ch.Created.UTC().Format(redfish.TimeFormat),
		"Grants":   grants,
	}
	if ch.Name != "" {
		oem["Name"] = ch.Name
	}
	if placed {
		oem["Extents"] = extentsBody(extents) // chunkextents.go
	}
	if h, ok := s.capacity.owner(ch); ok && p.CanSeeHost(redfish.HostID(h)) {
		oem["Owner"] = pool.SystemID(h)
	}
	st := pool.Status(chunkState(gs))
	if lost, ok := v.stranded[ch.ID]; ok {
		// Its grants were lost and no host holds it (stranded.go).
		st["Health"] = "Critical"
		oem["Stranded"] = true
		oem["LostGrants"] = lostGrantsBody(lost, p)
	}
	o := redfish.Obj{
		"@odata.id":          pool.ChunkURI(ch.ID),
		"@odata.type":        "#MemoryChunks.v1_6_2.MemoryChunks",
		"Id":                 strconv.FormatInt(int64(ch.ID), 10),
		"Name":               "Memory Chunk " + strconv.FormatInt(int64(ch.ID), 10),
		"MemoryChunkSizeMiB": pool.MiB(ch.Size),
		"AddressRangeType":   "Volatile",
		"Status":             st,
		"Links": redfish.Obj{
			"Endpoints":         redfish.Links(endpoints...),
			"CXLLogicalDevices": redfish.Links(lds...),
			"MemoryRegions":     redfish.Links(regions...),
		},
		"Oem": oemschema.Oem("MemoryChunks", oem),
	}
	if ch.Name != "" {
		o["DisplayName"] = ch.Name
	}
	if placed {
		o["AddressRangeOffsetMiB"] = pool.MiB(offset)
	}
	return o
}
