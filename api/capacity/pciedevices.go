package capacity

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/oemschema"
	"cxlpool/api/redfish"
)

// PCIeDevices/DCD is the multi-headed Dynamic Capacity Device, described
// from what discovery read from it (Identify, Identify Memory Device, Get
// DCD Info, the region configuration).

func (s *Server) pcieDeviceRoutes() {
	if s.capacity == nil {
		return
	}
	s.Handle(http.MethodGet, pool.PCIeDevicesURI, redfish.PrivLogin, func(c echo.Context) error {
		members, byURI := []string{pool.DCDURI}, map[string]redfish.Obj{}
		for _, d := range s.localCXL() { // localcxl.go
			o := localCXLDevice(d)
			u := o["@odata.id"].(string)
			members, byURI[u] = append(members, u), o
		}
		return s.WriteCollection(c, redfish.Collection{ODataID: pool.PCIeDevicesURI, ODataType: "#PCIeDeviceCollection.PCIeDeviceCollection",
			Name: "PCIe Devices", Members: members,
			Expand: func(uri string) (any, error) {
				if o, ok := byURI[uri]; ok {
					return o, nil
				}
				return s.dcdDevice(), nil
			}})
	})
	s.Handle(http.MethodGet, pool.DCDURI, redfish.PrivLogin, func(c echo.Context) error {
		return s.WriteResource(c, http.StatusOK, s.dcdDevice())
	})
}

// Add and release policy bits of Get DCD Info (5600h).
var (
	addPolicyNames     = []string{"Free", "Contiguous", "Prescriptive"}
	releasePolicyNames = []string{"TagBased", "Prescriptive"}
)

func policies(mask uint16, names []string) []string {
	out := []string{}
	for i, n := range names {
		if mask&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return out
}

func hex4(v uint16) string { return fmt.Sprintf("0x%04X", v) }

func (s *Server) dcdDevice() redfish.Obj {
	box := s.mgr.Box()
	id := box.Identity
	blocks := make([]redfish.Obj, 0, len(box.Regions))
	sor := make([]redfish.Obj, 0, len(box.Regions))
	for _, r := range box.Regions {
		blocks = append(blocks, redfish.Obj{"RegionNumber": r.Index, "BlockSizeMiB": []uint64{pool.MiB(r.BlockSize)}})
		sor = append(sor, redfish.Obj{"RegionNumber": r.Index, "SanitizationOnReleaseSupported": r.SanitizeOnRelease || r.SoRConfigurable})
	}
	st := "Enabled"
	if len(box.Heads) == 0 {
		st = "UnavailableOffline"
	}
	return redfish.Obj{
		"@odata.id":       pool.DCDURI,
		"@odata.type":     "#PCIeDevice.v1_21_0.PCIeDevice",
		"Id":              "DCD",
		"Name":            "Multi-headed Dynamic Capacity Device",
		"Description":     "The CXL Type 3 memory device whose dynamic capacity the pool hands out",
		"DeviceType":      "SingleFunction",
		"Model":           fmt.Sprintf("%04X:%04X", id.VendorID, id.DeviceID),
		"SerialNumber":    pool.SerialString(id.Serial),
		"FirmwareVersion": id.FirmwareRevision,
		"Status":          pool.Status(st),
		"CXLDevice": redfish.Obj{
			// A device holding dynamic capacity is a memory expander.
			"DeviceType":              "Type3",
			"MaxNumberLogicalDevices": len(box.Heads),
			"DynamicCapacity": redfish.Obj{
				"MaxDynamicCapacityRegions":        len(box.Regions),
				"MaxHosts":                         len(box.Heads),
				"TotalDynamicCapacityMiB":          pool.MiB(box.TotalDynamic),
				"AddCapacityPoliciesSupported":     policies(box.AddPolicies, addPolicyNames),
				"ReleaseCapacityPoliciesSupported": policies(box.ReleasePolicies, releasePolicyNames),
				"MemoryBlockSizesSupported":        blocks,
				"SanitizationOnReleaseSupport":     sor,
			},
		},
		"CXLLogicalDevices": redfish.Link(pool.LogicalDevicesURI),
		"Links":             redfish.Obj{"Chassis": redfish.Links(pool.ChassisURI)},
		"Oem": oemschema.Oem("DynamicCapacityDevice", redfish.Obj{
			"VendorId":          hex4(id.VendorID),
			"DeviceId":          hex4(id.DeviceID),
			"SubsystemVendorId": hex4(id.SubsystemVendorID),
			"SubsystemId":       hex4(id.SubsysID),
			"TotalCapacityMiB":  pool.MiB(id.TotalCapacity),
			"ExtentsPerHost":    box.ExtentsPerHost,
			"TagsPerHost":       box.TagsPerHost,
		}),
	}
}
