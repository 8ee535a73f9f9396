package capacity

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/oemschema"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
)

// Systems/{id}/Memory: the pool memory a host holds, one logical Memory
// per granted chunk (Id = the chunk's Id), backed by that chunk
// (Links.MemoryMediaSources). Capacity being offered is not memory the
// host has yet, so it does not appear. Capacity being released does, as
// Disabled, until the host has let go: a release waits while the host's
// agent says a program maps it, and that (Oem.CxlPool.Host.State
// ReleaseRefusedInUse) is what an administrator needs to see then.

func (s *Server) systemMemoryRoutes() {
	if s.capacity == nil {
		return
	}
	s.hostReportRoutes() // what host agents report (hostreports.go)
	s.Handle(http.MethodGet, pool.SystemsURI+"/:id/Memory", redfish.PrivLogin, func(c echo.Context) error {
		v, h, err := s.lookupSystem(c)
		if err != nil {
			return err
		}
		uri := pool.SystemURI(h) + "/Memory"
		byURI := map[string]dcd.Grant{}
		var members []string
		for _, g := range v.hostGrants(h) {
			if hostHolds(g) {
				m := pool.SystemMemoryURI(h, g.Chunk)
				members = append(members, m)
				byURI[m] = g
			}
		}
		return s.WriteCollection(c, redfish.Collection{ODataID: uri, ODataType: "#MemoryCollection.MemoryCollection",
			Name: pool.SystemID(h) + " Pool Memory", Members: members,
			Expand: func(m string) (any, error) { return s.memory(v, byURI[m]), nil }})
	})
	s.Handle(http.MethodGet, pool.SystemsURI+"/:id/Memory/:mem", redfish.PrivLogin, func(c echo.Context) error {
		v, h, err := s.lookupSystem(c)
		if err != nil {
			return err
		}
		if n, ok := pool.ParseID(c.Param("mem")); ok {
			for _, g := range v.hostGrants(h) {
				if g.Chunk == dcd.ChunkID(n) && hostHolds(g) {
					return s.WriteResource(c, http.StatusOK, s.memory(v, g))
				}
			}
		}
		return redfish.ErrResourceNotFound("Memory", c.Param("mem"))
	})
}

// hostHolds reports whether g is memory the host has: granted, or being
// released and not yet given back.
func hostHolds(g dcd.Grant) bool {
	return g.State == dcd.GrantGranted || g.State == dcd.GrantReleasing
}

func (s *Server) memory(v *poolView, g dcd.Grant) redfish.Obj {
	id := strconv.FormatInt(int64(g.Chunk), 10)
	o := redfish.Obj{
		"@odata.id":            pool.SystemMemoryURI(g.Host, g.Chunk),
		"@odata.type":          "#Memory.v1_23_0.Memory",
		"Id":                   id,
		"Name":                 "Pool Memory " + id,
		"Description":          "CXL memory lent by the pool: memory chunk " + id,
		"MemoryDeviceType":     "Logical",
		"MemoryType":           "DRAM",
		"OperatingMemoryModes": []string{"Volatile"},
		"CapacityMiB":          pool.MiB(g.Size()),
		"Enabled":              true,
		"Status":               pool.Status("Enabled"),
		"Links": redfish.Obj{
			"MemoryMediaSources": redfish.Links(pool.ChunkURI(g.Chunk)),
			"Endpoints":          redfish.Links(pool.TargetURI(g.Host)),
		},
	}
	oem := redfish.Obj{"Connection": redfish.Link(pool.ConnectionURI(g.ID)), "ExtentCount": len(g.Extents)}
	if ch, ok := v.chunk(g.Chunk); ok {
		o["Links"].(redfish.Obj)["MemoryRegionMediaSources"] = redfish.Links(pool.MemoryRegionURI(g.Host, ch.Region))
		oem["Host"] = s.hostMemoryState(g.Host, ch.Tag.String()) // hostreports.go
	}
	if g.State == dcd.GrantReleasing {
		o["Enabled"] = false
		o["Status"] = pool.Status("Disabled")
	}
	o["Oem"] = oemschema.Oem("Memory", oem)
	return o
}
