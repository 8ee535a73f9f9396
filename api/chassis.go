package api

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"cxlpool/api/redfish"
)

// Chassis/Pool is the memory box itself. Its environmental resources
// (ThermalSubsystem, PowerSubsystem, Sensors) belong to the board
// controller and are linked only once this build serves them.

// chassisSubsystems are the Chassis navigation properties other files
// may serve, with their URIs.
var chassisSubsystems = []struct{ prop, uri string }{
	{"ThermalSubsystem", ChassisURI + "/ThermalSubsystem"},
	{"PowerSubsystem", ChassisURI + "/PowerSubsystem"},
	{"Sensors", ChassisURI + "/Sensors"},
	{"EnvironmentMetrics", ChassisURI + "/EnvironmentMetrics"},
}

func (s *Server) chassisRoutes() {
	if s.capacity == nil {
		return
	}
	s.Handle(http.MethodGet, ChassisCollectionURI, redfish.PrivLogin, func(c echo.Context) error {
		return s.WriteCollection(c, redfish.Collection{ODataID: ChassisCollectionURI, ODataType: "#ChassisCollection.ChassisCollection",
			Name: "Chassis", Members: []string{ChassisURI},
			Expand: func(string) (any, error) { return s.chassis(), nil }})
	})
	s.Handle(http.MethodGet, ChassisURI, redfish.PrivLogin, func(c echo.Context) error {
		return s.WriteResource(c, http.StatusOK, s.chassis())
	})
}

func (s *Server) chassis() redfish.Obj {
	box := s.mgr.Box()
	id := box.Identity
	o := redfish.Obj{
		"@odata.id":     ChassisURI,
		"@odata.type":   "#Chassis.v1_28_0.Chassis",
		"Id":            "Pool",
		"Name":          "CXL Memory Pool",
		"Description":   "The memory box: a multi-headed Dynamic Capacity Device shared by its hosts",
		"ChassisType":   "Enclosure",
		"Model":         fmt.Sprintf("CXL Type 3 multi-headed DCD %04X:%04X", id.VendorID, id.DeviceID),
		"SerialNumber":  serialString(id.Serial),
		"PowerState":    "On",
		"Status":        status("Enabled"),
		"PCIeDevices":   redfish.Link(PCIeDevicesURI),
		"MemoryDomains": redfish.Link(MemoryDomainsURI),
		"Links":         redfish.Obj{"ManagedBy": redfish.Links(managerURI)},
	}
	if s.HasRoute(FabricAdaptersURI) {
		o["FabricAdapters"] = redfish.Link(FabricAdaptersURI)
	}
	for _, sub := range chassisSubsystems {
		if s.HasRoute(sub.uri) {
			o[sub.prop] = redfish.Link(sub.uri)
		}
	}
	s.chassisBoard(o) // the identify LED (headpower.go)
	return o
}
