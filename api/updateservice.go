package api

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// UpdateService: the resource and the firmware that is running (the
// appliance's own and the device's). The upload flow, its
// MultipartHttpPushUri and the image slots come with the image work; until
// then nothing is advertised that would not work.

func (s *Server) updateServiceRoutes() {
	if s.capacity == nil {
		return
	}
	s.Handle(http.MethodGet, UpdateServiceURI, PrivLogin, func(c echo.Context) error {
		return s.WriteResource(c, http.StatusOK, Obj{
			"@odata.id":         UpdateServiceURI,
			"@odata.type":       "#UpdateService.v1_17_0.UpdateService",
			"Id":                "UpdateService",
			"Name":              "Update Service",
			"ServiceEnabled":    true,
			"Status":            status("Enabled"),
			"FirmwareInventory": Link(FirmwareInventoryURI),
		})
	})
	s.Handle(http.MethodGet, FirmwareInventoryURI, PrivLogin, func(c echo.Context) error {
		inv := s.firmwareInventory()
		members := make([]string, 0, len(inv))
		byURI := map[string]Obj{}
		for _, o := range inv {
			u := o["@odata.id"].(string)
			members = append(members, u)
			byURI[u] = o
		}
		return s.WriteCollection(c, Collection{ODataID: FirmwareInventoryURI,
			ODataType: "#SoftwareInventoryCollection.SoftwareInventoryCollection",
			Name:      "Firmware Inventory", Members: members,
			Expand: func(uri string) (any, error) { return byURI[uri], nil }})
	})
	s.Handle(http.MethodGet, FirmwareInventoryURI+"/:id", PrivLogin, func(c echo.Context) error {
		for _, o := range s.firmwareInventory() {
			if o["Id"] == c.Param("id") {
				return s.WriteResource(c, http.StatusOK, o)
			}
		}
		return ErrResourceNotFound("SoftwareInventory", c.Param("id"))
	})
}

// firmwareInventory is the running firmware: the Fabric Manager (this
// service's build) and the device's firmware revision.
func (s *Server) firmwareInventory() []Obj {
	return []Obj{{
		"@odata.id":   FirmwareInventoryURI + "/FM",
		"@odata.type": "#SoftwareInventory.v1_13_0.SoftwareInventory",
		"Id":          "FM",
		"Name":        "Fabric Manager Firmware",
		"Version":     s.cfg.FirmwareVersion,
		"Updateable":  false,
		"Active":      true,
		"Status":      status("Enabled"),
		"RelatedItem": Links(managerURI),
	}, {
		"@odata.id":   FirmwareInventoryURI + "/DCD",
		"@odata.type": "#SoftwareInventory.v1_13_0.SoftwareInventory",
		"Id":          "DCD",
		"Name":        "Dynamic Capacity Device Firmware",
		"Version":     s.mgr.Box().Identity.FirmwareRevision,
		"Updateable":  false,
		"Active":      true,
		"Status":      status("Enabled"),
		"RelatedItem": Links(DCDURI),
	}}
}
