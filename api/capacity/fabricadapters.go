package capacity

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
	"cxlpool/fabric"
	"cxlpool/fabric/cci"
)

// FabricAdapters/DCD holds the device's host-facing ports (one per head),
// so that Endpoints can name the port a host is connected through
// (Endpoint.Links.ConnectedPorts). Values are the heads' link state from
// Get Multi-Headed Info (5501h). Host accounts see only their own port.

func (s *Server) fabricAdapterRoutes() {
	if s.capacity == nil {
		return
	}
	s.Handle(http.MethodGet, pool.FabricAdaptersURI, redfish.PrivLogin, func(c echo.Context) error {
		return s.WriteCollection(c, redfish.Collection{ODataID: pool.FabricAdaptersURI, ODataType: "#FabricAdapterCollection.FabricAdapterCollection",
			Name: "Fabric Adapters", Members: []string{pool.FabricAdapterURI},
			Expand: func(string) (any, error) { return s.fabricAdapter(), nil }})
	})
	s.Handle(http.MethodGet, pool.FabricAdapterURI, redfish.PrivLogin, func(c echo.Context) error {
		return s.WriteResource(c, http.StatusOK, s.fabricAdapter())
	})
	s.Handle(http.MethodGet, pool.PortsURI, redfish.PrivLogin, func(c echo.Context) error {
		p := redfish.PrincipalOf(c)
		heads := map[string]fabric.Head{}
		var members []string
		for _, h := range sortedHeads(s.mgr.Box()) {
			if p.CanSeeHost(redfish.HostID(h.LD)) {
				members = append(members, pool.PortURI(h.Port))
				heads[pool.PortURI(h.Port)] = h
			}
		}
		return s.WriteCollection(c, redfish.Collection{ODataID: pool.PortsURI, ODataType: "#PortCollection.PortCollection",
			Name: "DCD Host Ports", Members: members,
			Expand: func(uri string) (any, error) { return port(heads[uri]), nil }})
	})
	s.Handle(http.MethodGet, pool.PortsURI+"/:port", redfish.PrivLogin, func(c echo.Context) error {
		n, err := strconv.ParseUint(c.Param("port"), 10, 8)
		if err == nil && c.Param("port") == strconv.FormatUint(n, 10) {
			for _, h := range s.mgr.Box().Heads {
				if h.Port == uint8(n) && redfish.PrincipalOf(c).CanSeeHost(redfish.HostID(h.LD)) {
					return s.WriteResource(c, http.StatusOK, port(h))
				}
			}
		}
		return redfish.ErrResourceNotFound("Port", c.Param("port"))
	})
}

func (s *Server) fabricAdapter() redfish.Obj {
	id := s.mgr.Box().Identity
	return redfish.Obj{
		"@odata.id":       pool.FabricAdapterURI,
		"@odata.type":     "#FabricAdapter.v1_5_3.FabricAdapter",
		"Id":              "DCD",
		"Name":            "DCD Host Ports",
		"Description":     "The multi-headed device's host-facing CXL ports, one per head",
		"FabricType":      "CXL",
		"SerialNumber":    pool.SerialString(id.Serial),
		"FirmwareVersion": id.FirmwareRevision,
		"Ports":           redfish.Link(pool.PortsURI),
		"Status":          pool.Status("Enabled"),
		"Links": redfish.Obj{
			"PCIeDevices":   redfish.Links(pool.DCDURI),
			"MemoryDomains": redfish.Links(pool.MemoryDomainURI),
		},
	}
}

// speedGTs is the per-lane rate of a PCIe link speed code (1 = 2.5 GT/s
// … 6 = 64 GT/s).
func speedGTs(code uint8) float64 {
	rates := []float64{0, 2.5, 5, 8, 16, 32, 64}
	if int(code) < len(rates) {
		return rates[code]
	}
	return 0
}

// port describes one head. Speeds are the raw signalling rate of all
// lanes (per-lane GT/s × width).
func port(h fabric.Head) redfish.Obj {
	linkStatus := "LinkDown"
	switch {
	case h.LinkUp:
		linkStatus = "LinkUp"
	case h.LTSSM == cci.LTSSMDetect:
		linkStatus = "NoLink"
	}
	ld := dcd.HostID(h.LD)
	o := redfish.Obj{
		"@odata.id":    pool.PortURI(h.Port),
		"@odata.type":  "#Port.v1_18_0.Port",
		"Id":           strconv.Itoa(int(h.Port)),
		"Name":         "Head Port " + strconv.Itoa(int(h.Port)),
		"Description":  "The head " + pool.SystemID(ld) + " is attached to",
		"PortId":       strconv.Itoa(int(h.Port)),
		"PortProtocol": "CXL",
		"PortType":     "UpstreamPort",
		"PortMedium":   "Electrical",
		"LinkState":    "Enabled",
		"LinkStatus":   linkStatus,
		"Width":        h.MaxWidth,
		"ActiveWidth":  h.NegotiatedWidth,
		"MaxSpeedGbps": speedGTs(h.MaxSpeed) * float64(h.MaxWidth),
		"CXL":          redfish.Obj{"MaxLogicalDeviceCount": 1},
		"Status":       pool.Status(linkState(h)),
		"Links":        redfish.Obj{"AssociatedEndpoints": redfish.Links(pool.InitiatorURI(ld), pool.TargetURI(ld))},
	}
	if h.LinkUp {
		o["CurrentSpeedGbps"] = speedGTs(h.CurrentSpeed) * float64(h.NegotiatedWidth)
	}
	return o
}
