package manager

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
)

func (s *Server) managerRoutes() {
	s.Handle(http.MethodGet, pool.ManagersURI, redfish.PrivLogin, func(c echo.Context) error {
		return s.WriteCollection(c, redfish.Collection{ODataID: pool.ManagersURI, ODataType: "#ManagerCollection.ManagerCollection",
			Name: "Managers", Members: []string{pool.ManagerURI},
			Expand: func(string) (any, error) { return s.manager(redfish.PrincipalOf(c)), nil }})
	})
	s.Handle(http.MethodGet, pool.ManagerURI, redfish.PrivLogin, func(c echo.Context) error {
		return s.WriteResource(c, http.StatusOK, s.manager(redfish.PrincipalOf(c)))
	})
}

// manager is the appliance itself: the Fabric Manager of the CXL fabric.
func (s *Server) manager(p *redfish.Principal) redfish.Obj {
	now := s.now()
	health := "OK"
	o := redfish.Obj{
		"@odata.id":             pool.ManagerURI,
		"@odata.type":           "#Manager.v1_24_0.Manager",
		"Id":                    "FM",
		"Name":                  "CXL Fabric Manager",
		"Description":           "The memory box's Fabric Manager: runs the multi-headed DCD and keeps the capacity ledger",
		"ManagerType":           "FabricManager",
		"Manufacturer":          "cxlpool",
		"Model":                 "cxlpool FM",
		"FirmwareVersion":       s.cfg.FirmwareVersion,
		"UUID":                  s.UUID(),
		"ServiceEntryPointUUID": s.UUID(),
		"PowerState":            "On",
		"DateTime":              now.Format(redfish.TimeFormat),
		"DateTimeLocalOffset":   "+00:00",
		"Status":                redfish.Obj{"State": "Enabled", "Health": health},
		"Links":                 redfish.Obj{},
	}
	if s.HasRoute("/redfish/v1/Fabrics") {
		o["Links"].(redfish.Obj)["ManagerForFabrics"] = redfish.Links(pool.FabricURI)
	}
	if s.mgr != nil {
		o["SerialNumber"] = pool.SerialString(s.mgr.Box().Identity.Serial)
	}
	if s.HasRoute("/redfish/v1/Chassis") {
		o["Links"].(redfish.Obj)["ManagerForChassis"] = redfish.Links(pool.ChassisURI)
		o["Links"].(redfish.Obj)["ManagerInChassis"] = redfish.Link(pool.ChassisURI)
	}
	if p.Has(redfish.PrivApplianceView) {
		o["LogServices"] = redfish.Link(logServicesURI)
	}
	// NetworkProtocol, EthernetInterfaces (networkprotocol.go)
	s.managerNetworkLinks(o, p)
	s.managerSettings(o) // managerpatch.go: clock, image slots, Reset
	// consistency.go: the CxlPool.CheckConsistency action
	s.addConsistencyAction(o, p)
	if s.cfg.FleetStatus != nil {
		s.cfg.FleetStatus(o) // api/fleetview: Warning while the box is not in its fleet
	}
	return o
}
