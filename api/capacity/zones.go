package capacity

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
)

// Zones: one ZoneOfEndpoints per host, holding its initiator and the
// target of its LD. A multi-headed device isolates heads in hardware, so
// the zones are fixed: they describe the isolation, nobody edits them.

func (s *Server) zoneRoutes() {
	if s.capacity == nil {
		return
	}
	s.Handle(http.MethodGet, pool.ZonesURI, redfish.PrivLogin, func(c echo.Context) error {
		v, err := s.view(c.Request().Context())
		if err != nil {
			return err
		}
		var members []string
		for _, ld := range v.visibleHosts(redfish.PrincipalOf(c)) {
			members = append(members, pool.ZoneURI(ld))
		}
		return s.WriteCollection(c, redfish.Collection{ODataID: pool.ZonesURI, ODataType: "#ZoneCollection.ZoneCollection",
			Name: "CXL Zones", Members: members,
			Expand: func(uri string) (any, error) {
				id, _ := pool.RefID(uri, pool.ZonesURI)
				h, _ := pool.ParseSystemID(id)
				return zone(v, h), nil
			}})
	})
	s.Handle(http.MethodGet, pool.ZonesURI+"/:id", redfish.PrivLogin, func(c echo.Context) error {
		v, err := s.view(c.Request().Context())
		if err != nil {
			return err
		}
		h, err := pool.ParseSystemID(c.Param("id"))
		if err != nil || !hostVisible(redfish.PrincipalOf(c), v, h) {
			return redfish.ErrResourceNotFound("Zone", c.Param("id"))
		}
		return s.WriteResource(c, http.StatusOK, zone(v, h))
	})
}

func zone(v *poolView, h dcd.HostID) redfish.Obj {
	head, _ := v.head(h)
	return redfish.Obj{
		"@odata.id":   pool.ZoneURI(h),
		"@odata.type": "#Zone.v1_6_3.Zone",
		"Id":          pool.SystemID(h),
		"Name":        pool.SystemID(h) + " Zone",
		"Description": "What " + pool.SystemID(h) + " can reach: its own logical device",
		"ZoneType":    "ZoneOfEndpoints",
		"Status":      pool.Status(linkState(head)),
		"Links":       redfish.Obj{"Endpoints": redfish.Links(pool.InitiatorURI(h), pool.TargetURI(h))},
	}
}
