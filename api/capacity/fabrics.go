package capacity

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
)

// Fabrics/CXL: the CXL fabric between the hosts and the device, with one
// initiator endpoint per host, one target endpoint per LD, one zone per
// host and a Connection per grant.

func (s *Server) fabricRoutes() {
	if s.capacity == nil {
		return
	}
	s.Handle(http.MethodGet, pool.FabricsURI, redfish.PrivLogin, func(c echo.Context) error {
		return s.WriteCollection(c, redfish.Collection{ODataID: pool.FabricsURI, ODataType: "#FabricCollection.FabricCollection",
			Name: "Fabrics", Members: append([]string{pool.FabricURI}, s.exportFabrics(redfish.PrincipalOf(c))...),
			Expand: s.expandFabric})
	})
	s.Handle(http.MethodGet, pool.FabricURI, redfish.PrivLogin, func(c echo.Context) error {
		return s.WriteResource(c, http.StatusOK, s.fabric())
	})
}

func (s *Server) fabric() redfish.Obj {
	return redfish.Obj{
		"@odata.id":   pool.FabricURI,
		"@odata.type": "#Fabric.v1_4_0.Fabric",
		"Id":          "CXL",
		"Name":        "CXL Fabric",
		"Description": "The hosts' CXL links to the multi-headed device",
		"FabricType":  "CXL",
		"MaxZones":    len(s.mgr.Box().Heads),
		"Status":      pool.Status("Enabled"),
		"Endpoints":   redfish.Link(pool.EndpointsURI),
		"Zones":       redfish.Link(pool.ZonesURI),
		"Connections": redfish.Link(pool.ConnectionsURI),
		"Links":       redfish.Obj{"ManagedBy": redfish.Links(pool.ManagerURI)},
	}
}
