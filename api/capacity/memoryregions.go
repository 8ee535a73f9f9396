package capacity

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
	"cxlpool/fabric"
	"cxlpool/fabric/cci"
)

// MemoryRegions: the DC regions as one LD sees them, with the extents
// that LD holds in each (from the device's extent list when the service
// has the device link, otherwise from the ledger's record of what the
// host accepted).

func (s *Server) memoryRegionRoutes() {
	if s.capacity == nil {
		return
	}
	s.Handle(http.MethodGet, pool.LogicalDevicesURI+"/:ld/MemoryRegions", redfish.PrivLogin, s.getMemoryRegions)
	s.Handle(http.MethodGet, pool.LogicalDevicesURI+"/:ld/MemoryRegions/:n", redfish.PrivLogin, s.getMemoryRegion)
}

func (s *Server) getMemoryRegions(c echo.Context) error {
	ctx := c.Request().Context()
	v, err := s.view(ctx)
	if err != nil {
		return err
	}
	h, ok := parseLD(c.Param("ld"))
	if !ok || !hostVisible(redfish.PrincipalOf(c), v, h) {
		return redfish.ErrResourceNotFound("CXLLogicalDevice", c.Param("ld"))
	}
	uri := pool.LogicalDeviceURI(h) + "/MemoryRegions"
	members := make([]string, 0, len(v.box.Regions))
	for _, r := range v.box.Regions {
		members = append(members, pool.MemoryRegionURI(h, r.Index))
	}
	var exts []cci.Extent
	var extErr error
	loaded := false
	return s.WriteCollection(c, redfish.Collection{ODataID: uri, ODataType: "#MemoryRegionCollection.MemoryRegionCollection",
		Name: "Memory Regions of LD " + strconv.Itoa(int(h)), Members: members,
		Expand: func(m string) (any, error) {
			if !loaded {
				exts, extErr = s.ldExtents(ctx, v, h)
				loaded = true
			}
			if extErr != nil {
				return nil, extErr
			}
			id, _ := pool.RefID(m, uri)
			n, _ := strconv.Atoi(id)
			r, _ := v.region(n)
			return memoryRegion(v, h, r, exts), nil
		}})
}

func (s *Server) getMemoryRegion(c echo.Context) error {
	ctx := c.Request().Context()
	v, err := s.view(ctx)
	if err != nil {
		return err
	}
	h, ok := parseLD(c.Param("ld"))
	if !ok || !hostVisible(redfish.PrincipalOf(c), v, h) {
		return redfish.ErrResourceNotFound("CXLLogicalDevice", c.Param("ld"))
	}
	n, err := strconv.Atoi(c.Param("n"))
	r, found := v.region(n)
	if err != nil || !found || c.Param("n") != strconv.Itoa(n) {
		return redfish.ErrResourceNotFound("MemoryRegion", c.Param("n"))
	}
	exts, err := s.ldExtents(ctx, v, h)
	if err != nil {
		return err
	}
	return s.WriteResource(c, http.StatusOK, memoryRegion(v, h, r, exts))
}

// ldExtents is every extent LD h holds.
func (s *Server) ldExtents(ctx context.Context, v *poolView, h dcd.HostID) ([]cci.Extent, error) {
	if s.cfg.Device == nil {
		var out []cci.Extent
		for _, g := range v.hostGrants(h) {
			if holds(g) {
				out = append(out, g.Extents...)
			}
		}
		return out, nil
	}
	list, err := s.cfg.Device.Extents(ctx, uint16(h))
	if err != nil {
		if !errors.Is(err, fabric.ErrTimeout) && !errors.Is(err, fabric.ErrClosed) {
			err = fmt.Errorf("%w: extent list of LD %d: %v", dcd.ErrDevice, h, err)
		}
		return nil, pool.FromDomain(err, redfish.Target{Type: "CXLLogicalDevice", ID: strconv.Itoa(int(h)), URI: pool.LogicalDeviceURI(h)})
	}
	return list.Extents, nil
}

func memoryRegion(v *poolView, h dcd.HostID, r fabric.Region, all []cci.Extent) redfish.Obj {
	var exts []cci.Extent
	for _, e := range all {
		if r.Contains(e.DPA, e.Length) {
			exts = append(exts, e)
		}
	}
	slices.SortFunc(exts, func(a, b cci.Extent) int { return cmp.Compare(a.DPA, b.DPA) })
	// The chunks providing this LD's capacity here: each chunk's tag
	// names its extents.
	chunks := []redfish.Obj{}
	for _, g := range v.hostGrants(h) {
		ch, ok := v.chunk(g.Chunk)
		if !ok || ch.Region != r.Index || !holds(g) {
			continue
		}
		o := redfish.Obj{"ChunkLink": redfish.Link(pool.ChunkURI(ch.ID))}
		for _, e := range exts {
			if e.Tag == ch.Tag {
				o["ChunkOffsetMiB"] = pool.MiB(e.DPA - r.Base)
				break
			}
		}
		chunks = append(chunks, o)
	}
	return redfish.Obj{
		"@odata.id":           pool.MemoryRegionURI(h, r.Index),
		"@odata.type":         "#MemoryRegion.v1_0_3.MemoryRegion",
		"Id":                  strconv.Itoa(r.Index),
		"Name":                "Dynamic Capacity Region " + strconv.Itoa(r.Index),
		"RegionNumber":        r.Index,
		"RegionType":          "Dynamic",
		"RegionBaseOffsetMiB": pool.MiB(r.Base),
		"RegionSizeMiB":       pool.MiB(r.Length),
		"BlockSizeMiB":        pool.MiB(r.BlockSize),
		"ShareableRegion":     r.Sharable,
		"SanitizeOnRelease":   r.SanitizeOnRelease,
		"NonVolatileRegion":   false,
		"ExtentsCount":        len(exts),
		"MemoryExtents":       extentsMiB(exts, r.Base),
		"MemoryChunks":        chunks,
		"Status":              pool.Status("Enabled"),
	}
}
