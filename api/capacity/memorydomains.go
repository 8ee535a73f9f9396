package capacity

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/oemschema"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
)

// MemoryDomains/Pool is the pool of dynamic capacity chunks are carved
// from: every DC region of the device.

func (s *Server) memoryDomainRoutes() {
	if s.capacity == nil {
		return
	}
	s.Handle(http.MethodGet, pool.MemoryDomainsURI, redfish.PrivLogin, func(c echo.Context) error {
		v, err := s.view(c.Request().Context())
		if err != nil {
			return err
		}
		return s.WriteCollection(c, redfish.Collection{ODataID: pool.MemoryDomainsURI, ODataType: "#MemoryDomainCollection.MemoryDomainCollection",
			Name: "Memory Domains", Members: []string{pool.MemoryDomainURI},
			Expand: func(string) (any, error) { return s.memoryDomain(v, redfish.PrincipalOf(c)), nil }})
	})
	s.Handle(http.MethodGet, pool.MemoryDomainURI, redfish.PrivLogin, func(c echo.Context) error {
		v, err := s.view(c.Request().Context())
		if err != nil {
			return err
		}
		return s.WriteResource(c, http.StatusOK, s.memoryDomain(v, redfish.PrincipalOf(c)))
	})
}

func (s *Server) memoryDomain(v *poolView, p *redfish.Principal) redfish.Obj {
	u := v.usage()
	var lds []string
	for _, h := range v.heads {
		if p.CanSeeHost(redfish.HostID(h.LD)) {
			lds = append(lds, pool.LogicalDeviceURI(dcd.HostID(h.LD)))
		}
	}
	regions := make([]redfish.Obj, 0, len(v.box.Regions))
	for _, r := range v.box.Regions {
		reg := redfish.Obj{
			"Region":            r.Index,
			"Sharable":          r.Sharable,
			"SizeMiB":           pool.MiB(r.Length),
			"FreeMiB":           pool.MiB(v.regionFree(r)),
			"BlockSizeMiB":      pool.MiB(r.BlockSize),
			"SanitizeOnRelease": r.SanitizeOnRelease,
		}
		// A region that does not clear what a host releases itself gets
		// no new chunks (dcd's rule); say so where capacity is shown.
		if err := dcd.AllocationRefusal(dcd.Region{Index: r.Index, SanitizeOnRelease: r.SanitizeOnRelease}); err != nil {
			reg["AllocationRefused"] = err.Error()
		}
		regions = append(regions, reg)
	}
	oem := redfish.Obj{"FreeMiB": pool.MiB(u.free), "Regions": regions}
	if p.Has(redfish.PrivApplianceView) {
		oem["DefaultHostQuotaMiB"] = pool.MiB(v.defaultQuota.Bytes)
		oem["DefaultHostQuotaIsFairShare"] = v.defaultQuota.FairShare
		oem["ReservedMiB"] = pool.MiB(u.reserved)
		oem["GrantedMiB"] = pool.MiB(u.granted)
		oem["SharedMiB"] = pool.MiB(u.shared)
		oem["OrphanedMiB"] = pool.MiB(u.orphaned)
	}
	if p.IsHost() {
		h := dcd.HostID(*p.HostID)
		oem["QuotaMiB"] = pool.MiB(v.quota(h)) // what limits it: its own quota, else the default
		// HeldMiB is what counts against the quota: chunks the host
		// reserved itself and those it holds or is being given.
		oem["HeldMiB"] = pool.MiB(s.hostCommitted(v, h))
	}
	st := pool.Status("Enabled")
	if len(v.stranded) > 0 {
		// Capacity lost grants strand is neither usable nor free
		// (stranded.go).
		st["Health"] = "Warning"
		if p.Has(redfish.PrivApplianceView) { // whose chunks they are is not a host's business
			oem["StrandedChunks"] = len(v.stranded)
			oem["StrandedMiB"] = pool.MiB(v.strandedBytes())
		}
	}
	block := pool.MiB(v.blockSize())
	return redfish.Obj{
		"@odata.id":                 pool.MemoryDomainURI,
		"@odata.type":               "#MemoryDomain.v1_5_1.MemoryDomain",
		"Id":                        "Pool",
		"Name":                      "CXL Memory Pool",
		"Description":               "The device's dynamic capacity, from which memory chunks are reserved",
		"MemorySizeMiB":             pool.MiB(u.total),
		"AllowsMemoryChunkCreation": true,
		"AllowsBlockProvisioning":   false,
		"AllowsMirroring":           false,
		"AllowsSparing":             false,
		"MinMemoryChunkSizeMiB":     block,
		"MemoryChunkIncrementMiB":   block,
		"MemoryChunks":              redfish.Link(pool.ChunksURI),
		"Status":                    st,
		"Links":                     redfish.Obj{"CXLLogicalDevices": redfish.Links(lds...)},
		"Actions": redfish.Obj{"Oem": redfish.Obj{"#CxlPool.FreeStrandedChunks": redfish.Obj{"target": FreeStrandedURI,
			"title": "Free every chunk stranded by lost grants"}}},
		"Oem": oemschema.Oem("MemoryDomain", oem),
	}
}

// hostCommitted is what counts against a host's quota: the chunks it
// reserved itself and those it holds or is being given, each once.
func (s *Server) hostCommitted(v *poolView, h dcd.HostID) uint64 {
	var n uint64
	for _, ch := range v.chunks {
		if o, ok := s.capacity.owner(ch); ok && o == h {
			n += ch.Size
			continue
		}
		for _, g := range v.chunkGrants(ch.ID) {
			if g.Host == h {
				n += ch.Size
				break
			}
		}
	}
	return n
}
