package capacity

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
)

// CXLLogicalDevices: one per host head. In this box every head owns one
// LD and the LD-ID is the host's Id, so LD n is Host n's view of the
// device. Host accounts see only their own.

func (s *Server) logicalDeviceRoutes() {
	if s.capacity == nil {
		return
	}
	s.Handle(http.MethodGet, pool.LogicalDevicesURI, redfish.PrivLogin, s.getLogicalDevices)
	s.Handle(http.MethodGet, pool.LogicalDevicesURI+"/:ld", redfish.PrivLogin, s.getLogicalDevice)
}

func (s *Server) getLogicalDevices(c echo.Context) error {
	v, err := s.view(c.Request().Context())
	if err != nil {
		return err
	}
	p := redfish.PrincipalOf(c)
	var members []string
	for _, h := range v.heads {
		if p.CanSeeHost(redfish.HostID(h.LD)) {
			members = append(members, pool.LogicalDeviceURI(dcd.HostID(h.LD)))
		}
	}
	return s.WriteCollection(c, redfish.Collection{ODataID: pool.LogicalDevicesURI, ODataType: "#CXLLogicalDeviceCollection.CXLLogicalDeviceCollection",
		Name: "CXL Logical Devices", Members: members,
		Expand: func(uri string) (any, error) {
			id, _ := pool.RefID(uri, pool.LogicalDevicesURI)
			h, _ := parseLD(id)
			return s.logicalDevice(v, h), nil
		}})
}

func (s *Server) getLogicalDevice(c echo.Context) error {
	v, err := s.view(c.Request().Context())
	if err != nil {
		return err
	}
	h, ok := parseLD(c.Param("ld"))
	if !ok || !hostVisible(redfish.PrincipalOf(c), v, h) {
		return redfish.ErrResourceNotFound("CXLLogicalDevice", c.Param("ld"))
	}
	return s.WriteResource(c, http.StatusOK, s.logicalDevice(v, h))
}

// gcxlid is the Global CXL Logical Device Identifier: the device serial
// number's octets, most significant first, and the LD-ID.
func gcxlid(serial uint64, ld dcd.HostID) string {
	b := make([]byte, 0, 28)
	for i := 7; i >= 0; i-- {
		b = fmt.Appendf(b, "%02X", byte(serial>>(8*i)))
		if i > 0 {
			b = append(b, '-')
		}
	}
	return fmt.Sprintf("%s:%04X", b, uint16(ld))
}

func (s *Server) logicalDevice(v *poolView, h dcd.HostID) redfish.Obj {
	head, _ := v.head(h)
	var held uint64
	var chunks []string
	for _, g := range v.hostGrants(h) {
		if holds(g) {
			held += g.Size()
			chunks = append(chunks, pool.ChunkURI(g.Chunk))
		}
	}
	return redfish.Obj{
		"@odata.id":   pool.LogicalDeviceURI(h),
		"@odata.type": "#CXLLogicalDevice.v1_3_0.CXLLogicalDevice",
		"Id":          strconv.Itoa(int(h)),
		"Name":        "Logical Device " + strconv.Itoa(int(h)),
		"Description": "The logical device " + pool.SystemID(h) + " reaches through head port " + strconv.Itoa(int(head.Port)),
		"Identifiers": []redfish.Obj{{
			"DurableName":       gcxlid(v.box.Identity.Serial, h),
			"DurableNameFormat": "GCXLID",
		}},
		"SemanticsSupported": []string{"CXLio", "CXLmem"},
		"MemorySizeMiB":      pool.MiB(held),
		"MemoryRegions":      redfish.Link(pool.LogicalDeviceURI(h) + "/MemoryRegions"),
		"Status":             pool.Status(linkState(head)),
		"Links": redfish.Obj{
			"Endpoints":     redfish.Links(pool.TargetURI(h)),
			"MemoryChunks":  redfish.Links(chunks...),
			"MemoryDomains": redfish.Links(pool.MemoryDomainURI),
		},
	}
}
