package manager

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/oemschema"
	"cxlpool/api/redfish"
	"cxlpool/image/update"
)

// UpdateService: the resource and the firmware that is running (the
// appliance's own and the device's). On the image (Config.Update set) it
// also advertises the multipart push (updatepush.go) and lists both A/B
// image slots; elsewhere nothing is advertised that would not work.

func (s *Server) updateServiceRoutes() {
	if !s.pool.Serving() {
		return
	}
	s.Handle(http.MethodGet, pool.UpdateServiceURI, redfish.PrivLogin, func(c echo.Context) error {
		o := redfish.Obj{
			"@odata.id":         pool.UpdateServiceURI,
			"@odata.type":       "#UpdateService.v1_17_0.UpdateService",
			"Id":                "UpdateService",
			"Name":              "Update Service",
			"ServiceEnabled":    true,
			"Status":            pool.Status("Enabled"),
			"FirmwareInventory": redfish.Link(pool.FirmwareInventoryURI),
		}
		if s.cfg.Update != nil {
			o["MultipartHttpPushUri"] = UpdateUploadURI
			o["MultipartHttpPushUri@Redfish.OperationApplyTimeSupport"] = redfish.Obj{
				"@odata.type":     "#Settings.v1_4_0.OperationApplyTimeSupport",
				"SupportedValues": s.applyTimes(),
			}
			o["MaxImageSizeBytes"] = s.cfg.MaxImageBytes
		}
		return s.WriteResource(c, http.StatusOK, o)
	})
	s.Handle(http.MethodGet, pool.FirmwareInventoryURI, redfish.PrivLogin, func(c echo.Context) error {
		inv := s.firmwareInventory()
		members := make([]string, 0, len(inv))
		byURI := map[string]redfish.Obj{}
		for _, o := range inv {
			u := o["@odata.id"].(string)
			members = append(members, u)
			byURI[u] = o
		}
		return s.WriteCollection(c, redfish.Collection{ODataID: pool.FirmwareInventoryURI,
			ODataType: "#SoftwareInventoryCollection.SoftwareInventoryCollection",
			Name:      "Firmware Inventory", Members: members,
			Expand: func(uri string) (any, error) { return byURI[uri], nil }})
	})
	s.Handle(http.MethodGet, pool.FirmwareInventoryURI+"/:id", redfish.PrivLogin, func(c echo.Context) error {
		for _, o := range s.firmwareInventory() {
			if o["Id"] == c.Param("id") {
				return s.WriteResource(c, http.StatusOK, o)
			}
		}
		return redfish.ErrResourceNotFound("SoftwareInventory", c.Param("id"))
	})
}

// firmwareInventory is the running firmware: the Fabric Manager (this
// service's build) and the device's firmware revision, then the image
// slots when the box runs from the image.
func (s *Server) firmwareInventory() []redfish.Obj {
	return append(s.runningFirmware(), s.slotInventory()...)
}

func (s *Server) runningFirmware() []redfish.Obj {
	return []redfish.Obj{{
		"@odata.id":   pool.FirmwareInventoryURI + "/FM",
		"@odata.type": "#SoftwareInventory.v1_13_0.SoftwareInventory",
		"Id":          "FM",
		"Name":        "Fabric Manager Firmware",
		"Version":     s.cfg.FirmwareVersion,
		"Updateable":  false,
		"Active":      true,
		"Status":      pool.Status("Enabled"),
		"RelatedItem": redfish.Links(pool.ManagerURI),
	}, {
		"@odata.id":   pool.FirmwareInventoryURI + "/DCD",
		"@odata.type": "#SoftwareInventory.v1_13_0.SoftwareInventory",
		"Id":          "DCD",
		"Name":        "Dynamic Capacity Device Firmware",
		"Version":     s.mgr.Box().Identity.FirmwareRevision,
		"Updateable":  false,
		"Active":      true,
		"Status":      pool.Status("Enabled"),
		"RelatedItem": redfish.Links(pool.DCDURI),
	}}
}

// imageSlotID is a slot's SoftwareInventory Id ("a" → "Image-A").
func imageSlotID(slot string) string { return "Image-" + strings.ToUpper(slot) }

// inactiveSlot is the slot a push writes: the one the box is not running.
func inactiveSlot(slots []update.SlotStatus) string {
	for _, st := range slots {
		if st.Running {
			return update.Other(st.Slot)
		}
	}
	return update.SlotB
}

// slotInventory lists the A/B image slots. A slot table that cannot be
// read is logged and left out rather than failing the whole inventory.
func (s *Server) slotInventory() []redfish.Obj {
	if s.cfg.Update == nil {
		return nil
	}
	slots, err := s.cfg.Update.Slots()
	if err != nil {
		s.log.Warn("reading the image slots", "err", err)
		return nil
	}
	out := make([]redfish.Obj, 0, len(slots))
	for _, st := range slots {
		id := imageSlotID(st.Slot)
		// A verified slot the box does not run is the spare it falls
		// back to (or tries next).
		state, health := "StandbySpare", "OK"
		switch {
		case st.Running:
			state = "Enabled"
		case st.State == update.StateEmpty:
			state = "Absent"
		case st.State == update.StateWriting:
			state = "Updating"
		case st.State == update.StateBad:
			state, health = "UnavailableOffline", "Critical"
		}
		oem := redfish.Obj{"State": st.State, "Trial": st.Trial, "Active": st.Active, "Running": st.Running,
			"SecurityVersion": st.SecurityVersion}
		if st.Error != "" {
			oem["Error"] = st.Error
		}
		o := redfish.Obj{
			"@odata.id":   pool.FirmwareInventoryURI + "/" + id,
			"@odata.type": "#SoftwareInventory.v1_13_0.SoftwareInventory",
			"Id":          id,
			"Name":        "Box Image Slot " + strings.ToUpper(st.Slot),
			"Description": "One of the two A/B slots the box boots its signed image from",
			// The running slot cannot be written; the other takes the
			// next push.
			"Updateable":  !st.Running,
			"Active":      st.Running,
			"Status":      redfish.Obj{"State": state, "Health": health},
			"RelatedItem": redfish.Links(pool.ManagerURI),
			"Oem":         oemschema.Oem("SoftwareInventory", oem),
		}
		if st.Version != "" {
			o["Version"] = st.Version
		}
		if st.Size > 0 {
			o["SizeBytes"] = st.Size
		}
		out = append(out, o)
	}
	return out
}
