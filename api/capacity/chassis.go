package capacity

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
)

// Chassis/Pool is the memory box itself. Its environmental resources
// (ThermalSubsystem, PowerSubsystem, Sensors) belong to the board
// controller and are linked only once this build serves them.

// chassisSubsystems are the Chassis navigation properties other files
// may serve, with their URIs.
var chassisSubsystems = []struct{ prop, uri string }{
	{"ThermalSubsystem", pool.ChassisURI + "/ThermalSubsystem"},
	{"PowerSubsystem", pool.ChassisURI + "/PowerSubsystem"},
	{"Sensors", pool.ChassisURI + "/Sensors"},
	{"EnvironmentMetrics", pool.ChassisURI + "/EnvironmentMetrics"},
}

func (s *Server) chassisRoutes() {
	if s.capacity == nil {
		return
	}
	s.Handle(http.MethodGet, pool.ChassisCollectionURI, redfish.PrivLogin, func(c echo.Context) error {
		return s.WriteCollection(c, redfish.Collection{ODataID: pool.ChassisCollectionURI, ODataType: "#ChassisCollection.ChassisCollection",
			Name: "Chassis", Members: []string{pool.ChassisURI},
			Expand: func(string) (any, error) { return s.chassis(), nil }})
	})
	s.Handle(http.MethodGet, pool.ChassisURI, redfish.PrivLogin, func(c echo.Context) error {
		return s.WriteResource(c, http.StatusOK, s.chassis())
	})
}

func (s *Server) chassis() redfish.Obj {
	box := s.mgr.Box()
	id := box.Identity
	o := redfish.Obj{
		"@odata.id":     pool.ChassisURI,
		"@odata.type":   "#Chassis.v1_28_0.Chassis",
		"Id":            "Pool",
		"Name":          "CXL Memory Pool",
		"Description":   "The memory box: a multi-headed Dynamic Capacity Device shared by its hosts",
		"ChassisType":   "Enclosure",
		"Model":         fmt.Sprintf("CXL Type 3 multi-headed DCD %04X:%04X", id.VendorID, id.DeviceID),
		"SerialNumber":  pool.SerialString(id.Serial),
		"PowerState":    "On",
		"Status":        pool.Status("Enabled"),
		"PCIeDevices":   redfish.Link(pool.PCIeDevicesURI),
		"MemoryDomains": redfish.Link(pool.MemoryDomainsURI),
		"Links":         redfish.Obj{"ManagedBy": redfish.Links(pool.ManagerURI)},
	}
	if s.HasRoute(pool.FabricAdaptersURI) {
		o["FabricAdapters"] = redfish.Link(pool.FabricAdaptersURI)
	}
	for _, sub := range chassisSubsystems {
		if s.HasRoute(sub.uri) {
			o[sub.prop] = redfish.Link(sub.uri)
		}
	}
	s.chassisBoard(o) // the identify LED (headpower.go)
	return o
}
