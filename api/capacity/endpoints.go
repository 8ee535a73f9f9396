package capacity

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
)

// Endpoints of the CXL fabric: per host an initiator (Id "Host<LD>", the
// host's processor side) and a target (Id "DCD-LD<LD>", the device's
// logical device that host reaches), both connected through the head's
// port. Connections name the initiator; the target follows from it. Host
// accounts see only their own two.

func (s *Server) endpointRoutes() {
	if s.capacity == nil {
		return
	}
	s.Handle(http.MethodGet, pool.EndpointsURI, redfish.PrivLogin, func(c echo.Context) error {
		v, err := s.view(c.Request().Context())
		if err != nil {
			return err
		}
		var members []string
		for _, ld := range v.visibleHosts(redfish.PrincipalOf(c)) {
			members = append(members, pool.InitiatorURI(ld), pool.TargetURI(ld))
		}
		return s.WriteCollection(c, redfish.Collection{ODataID: pool.EndpointsURI, ODataType: "#EndpointCollection.EndpointCollection",
			Name: "CXL Endpoints", Members: members,
			Expand: func(uri string) (any, error) {
				id, _ := pool.RefID(uri, pool.EndpointsURI)
				h, initiator, _ := parseEndpointID(id)
				return endpoint(v, h, initiator), nil
			}})
	})
	s.Handle(http.MethodGet, pool.EndpointsURI+"/:id", redfish.PrivLogin, func(c echo.Context) error {
		v, err := s.view(c.Request().Context())
		if err != nil {
			return err
		}
		h, initiator, ok := parseEndpointID(c.Param("id"))
		if !ok || !hostVisible(redfish.PrincipalOf(c), v, h) {
			return redfish.ErrResourceNotFound("Endpoint", c.Param("id"))
		}
		return s.WriteResource(c, http.StatusOK, endpoint(v, h, initiator))
	})
}

// parseEndpointID reads an Endpoint Id: "Host3" is host 3's initiator,
// "DCD-LD3" the target of LD 3.
func parseEndpointID(id string) (h dcd.HostID, initiator, ok bool) {
	if ld, found := strings.CutPrefix(id, pool.TargetPrefix); found {
		h, ok = parseLD(ld)
		return h, false, ok
	}
	h, err := pool.ParseSystemID(id)
	return h, true, err == nil
}

func endpoint(v *poolView, h dcd.HostID, initiator bool) redfish.Obj {
	head, _ := v.head(h)
	var conns []string
	for _, g := range v.hostGrants(h) {
		conns = append(conns, pool.ConnectionURI(g.ID))
	}
	o := redfish.Obj{
		"@odata.type":      "#Endpoint.v1_8_2.Endpoint",
		"EndpointProtocol": "CXL",
		"Status":           pool.Status(linkState(head)),
		"Links": redfish.Obj{
			"ConnectedPorts": redfish.Links(pool.PortURI(head.Port)),
			"Zones":          redfish.Links(pool.ZoneURI(h)),
			"Connections":    redfish.Links(conns...),
		},
	}
	if initiator {
		o["@odata.id"] = pool.InitiatorURI(h)
		o["Id"] = pool.SystemID(h)
		o["Name"] = pool.SystemID(h) + " Initiator"
		o["Description"] = "The CXL root port of " + pool.SystemID(h)
		o["ConnectedEntities"] = []redfish.Obj{{"EntityType": "Processor", "EntityRole": "Initiator", "EntityLink": redfish.Link(pool.SystemURI(h))}}
		return o
	}
	id := strings.TrimPrefix(pool.TargetURI(h), pool.EndpointsURI+"/")
	o["@odata.id"] = pool.TargetURI(h)
	o["Id"] = id
	o["Name"] = "Logical Device " + id[len(pool.TargetPrefix):] + " Target"
	o["Description"] = "The device's logical device " + pool.SystemID(h) + " reaches"
	o["ConnectedEntities"] = []redfish.Obj{{"EntityType": "CXLDevice", "EntityRole": "Target", "EntityLink": redfish.Link(pool.LogicalDeviceURI(h))}}
	return o
}
