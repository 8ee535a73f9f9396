package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

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
	s.Handle(http.MethodGet, ZonesURI, redfish.PrivLogin, func(c echo.Context) error {
		v, err := s.view(c.Request().Context())
		if err != nil {
			return err
		}
		var members []string
		for _, ld := range v.visibleHosts(redfish.PrincipalOf(c)) {
			members = append(members, ZoneURI(ld))
		}
		return s.WriteCollection(c, redfish.Collection{ODataID: ZonesURI, ODataType: "#ZoneCollection.ZoneCollection",
			Name: "CXL Zones", Members: members,
			Expand: func(uri string) (any, error) {
				id, _ := refID(uri, ZonesURI)
				h, _ := ParseSystemID(id)
				return zone(v, h), nil
			}})
	})
	s.Handle(http.MethodGet, ZonesURI+"/:id", redfish.PrivLogin, func(c echo.Context) error {
		v, err := s.view(c.Request().Context())
		if err != nil {
			return err
		}
		h, err := ParseSystemID(c.Param("id"))
		if err != nil || !hostVisible(redfish.PrincipalOf(c), v, h) {
			return redfish.ErrResourceNotFound("Zone", c.Param("id"))
		}
		return s.WriteResource(c, http.StatusOK, zone(v, h))
	})
}

func zone(v *poolView, h dcd.HostID) redfish.Obj {
	head, _ := v.head(h)
	return redfish.Obj{
		"@odata.id":   ZoneURI(h),
		"@odata.type": "#Zone.v1_6_3.Zone",
		"Id":          SystemID(h),
		"Name":        SystemID(h) + " Zone",
		"Description": "What " + SystemID(h) + " can reach: its own logical device",
		"ZoneType":    "ZoneOfEndpoints",
		"Status":      status(linkState(head)),
		"Links":       redfish.Obj{"Endpoints": redfish.Links(InitiatorURI(h), TargetURI(h))},
	}
}
