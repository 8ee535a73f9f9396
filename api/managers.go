package api

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

const (
	managersURI = "/redfish/v1/Managers"
	managerURI  = managersURI + "/FM"
)

func (s *Server) managerRoutes() {
	s.Handle(http.MethodGet, managersURI, PrivLogin, func(c echo.Context) error {
		return s.WriteCollection(c, Collection{ODataID: managersURI, ODataType: "#ManagerCollection.ManagerCollection",
			Name: "Managers", Members: []string{managerURI},
			Expand: func(string) (any, error) { return s.manager(PrincipalOf(c)), nil }})
	})
	s.Handle(http.MethodGet, managerURI, PrivLogin, func(c echo.Context) error {
		return s.WriteResource(c, http.StatusOK, s.manager(PrincipalOf(c)))
	})
}

// manager is the appliance itself: the Fabric Manager of the CXL fabric.
func (s *Server) manager(p *Principal) Obj {
	now := s.now()
	health := "OK"
	o := Obj{
		"@odata.id":             managerURI,
		"@odata.type":           "#Manager.v1_24_0.Manager",
		"Id":                    "FM",
		"Name":                  "CXL Fabric Manager",
		"Description":           "The memory box's Fabric Manager: runs the multi-headed DCD and keeps the capacity ledger",
		"ManagerType":           "FabricManager",
		"Manufacturer":          "cxlpool",
		"Model":                 "cxlpool FM",
		"FirmwareVersion":       s.cfg.FirmwareVersion,
		"UUID":                  s.uuid,
		"ServiceEntryPointUUID": s.uuid,
		"PowerState":            "On",
		"DateTime":              now.Format(timeFormat),
		"DateTimeLocalOffset":   "+00:00",
		"Status":                Obj{"State": "Enabled", "Health": health},
		"Links":                 Obj{},
	}
	if s.HasRoute("/redfish/v1/Fabrics") {
		o["Links"].(Obj)["ManagerForFabrics"] = Links(FabricURI)
	}
	if s.mgr != nil {
		o["SerialNumber"] = serialString(s.mgr.Box().Identity.Serial)
	}
	if s.HasRoute("/redfish/v1/Chassis") {
		o["Links"].(Obj)["ManagerForChassis"] = Links(ChassisURI)
		o["Links"].(Obj)["ManagerInChassis"] = Link(ChassisURI)
	}
	if p.Has(PrivApplianceView) {
		o["LogServices"] = Link(logServicesURI)
	}
	// NetworkProtocol, EthernetInterfaces (networkprotocol.go)
	s.managerNetworkLinks(o, p)
	s.managerSettings(o) // managerpatch.go: clock, image slots, Reset
	// consistency.go: the CxlPool.CheckConsistency action
	s.addConsistencyAction(o, p)
	return o
}

func serialString(n uint64) string {
	const hex = "0123456789ABCDEF"
	b := make([]byte, 16)
	for i := 15; i >= 0; i-- {
		b[i] = hex[n&0xf]
		n >>= 4
	}
	return string(b)
}
