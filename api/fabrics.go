package api

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// Fabrics/CXL: the CXL fabric between the hosts and the device, with one
// initiator endpoint per host, one target endpoint per LD, one zone per
// host and a Connection per grant.

func (s *Server) fabricRoutes() {
	if s.capacity == nil {
		return
	}
	s.Handle(http.MethodGet, FabricsURI, PrivLogin, func(c echo.Context) error {
		return s.WriteCollection(c, Collection{ODataID: FabricsURI, ODataType: "#FabricCollection.FabricCollection",
			Name: "Fabrics", Members: append([]string{FabricURI}, s.exportFabrics(PrincipalOf(c))...),
			Expand: s.expandFabric})
	})
	s.Handle(http.MethodGet, FabricURI, PrivLogin, func(c echo.Context) error {
		return s.WriteResource(c, http.StatusOK, s.fabric())
	})
}

func (s *Server) fabric() Obj {
	return Obj{
		"@odata.id":   FabricURI,
		"@odata.type": "#Fabric.v1_4_0.Fabric",
		"Id":          "CXL",
		"Name":        "CXL Fabric",
		"Description": "The hosts' CXL links to the multi-headed device",
		"FabricType":  "CXL",
		"MaxZones":    len(s.mgr.Box().Heads),
		"Status":      status("Enabled"),
		"Endpoints":   Link(EndpointsURI),
		"Zones":       Link(ZonesURI),
		"Connections": Link(ConnectionsURI),
		"Links":       Obj{"ManagedBy": Links(managerURI)},
	}
}
