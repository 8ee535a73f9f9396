package capacity

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/oemschema"
	"cxlpool/api/redfish"
	"cxlpool/fabric/linuxcxl"
)

// Local CXL memory devices: the Type 3 devices the Linux CXL driver bound
// on the management computer itself (a QEMU cxl-type3 device in the VM
// test, the board's expanders on hardware), shown beside the pooled DCD as
// PCIeDevices/Local-<serial>. They are read fresh on every request: the
// driver's view changes with hot-plug and the reads are cheap.

const localCXLPrefix = "Local-"

// localCXLID is a memdev's PCIeDevice Id; serials are stable where memN
// names follow probe order.
func localCXLID(d linuxcxl.MemDev) string { return localCXLPrefix + pool.SerialString(d.Serial) }

// localCXL lists the devices, logging (not failing on) a read error so
// that the collection still shows the DCD.
func (s *Server) localCXL() []linuxcxl.MemDev {
	if s.cfg.LocalCXL == nil {
		return nil
	}
	devs, err := s.cfg.LocalCXL()
	if err != nil {
		s.log.Warn("listing local CXL memory devices", "err", err)
		return nil
	}
	return devs
}

func (s *Server) localCXLRoutes() {
	if s.capacity == nil || s.cfg.LocalCXL == nil {
		return
	}
	s.Handle(http.MethodGet, pool.PCIeDevicesURI+"/:id", redfish.PrivLogin, func(c echo.Context) error {
		id := c.Param("id")
		if strings.HasPrefix(id, localCXLPrefix) {
			devs, err := s.cfg.LocalCXL()
			if err != nil {
				return redfish.ErrInternal(err)
			}
			for _, d := range devs {
				if localCXLID(d) == id {
					return s.WriteResource(c, http.StatusOK, localCXLDevice(d))
				}
			}
		}
		return redfish.ErrResourceNotFound("PCIeDevice", id)
	})
}

func localCXLDevice(d linuxcxl.MemDev) redfish.Obj {
	id := localCXLID(d)
	health := "OK"
	if d.IdentifyError != "" {
		// The driver bound it but its mailbox does not answer.
		health = "Warning"
	}
	oem := redfish.Obj{"Name": d.Name, "RAMBytes": d.RAMSize, "PMEMBytes": d.PMEMSize, "NUMANode": d.NUMANode}
	if d.Host != "" {
		oem["Host"] = d.Host
	}
	if d.IdentifyError != "" {
		oem["IdentifyError"] = d.IdentifyError
	}
	o := redfish.Obj{
		"@odata.id":    pool.PCIeDevicesURI + "/" + id,
		"@odata.type":  "#PCIeDevice.v1_21_0.PCIeDevice",
		"Id":           id,
		"Name":         "Local CXL Memory Device " + d.Name,
		"Description":  "A CXL Type 3 memory device on the management computer, found through the Linux CXL driver",
		"DeviceType":   "SingleFunction",
		"SerialNumber": pool.SerialString(d.Serial),
		"Status":       redfish.Obj{"State": "Enabled", "Health": health},
		"CXLDevice":    redfish.Obj{"DeviceType": "Type3"},
		"Oem":          oemschema.Oem("LocalCXLDevice", oem),
	}
	if d.FirmwareVersion != "" {
		o["FirmwareVersion"] = d.FirmwareVersion
	}
	return o
}
