package board

import (
	"context"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"cxlpool/bmc"
)

// PowerSubsystem of Chassis/Pool: the board's power supplies. Each
// PowerSupply shows its state (a lost PSU is UnavailableOffline, Critical,
// with LineInputStatus LossOfInput) and links its Metrics: input and
// output power and voltage, each pointing at the Sensor it comes from.

func (s *Server) powerRoutes(b Board) {
	s.Handle(http.MethodGet, PowerSubsystemURI, redfish.PrivLogin, func(c echo.Context) error {
		psus, err := b.PowerSupplies(c.Request().Context())
		if err != nil {
			return pool.FromDomain(err, redfish.Target{Type: "PowerSubsystem", ID: "PowerSubsystem", URI: PowerSubsystemURI})
		}
		health := bmc.OK
		for _, p := range psus {
			health = worse(health, p.Health)
		}
		return s.WriteResource(c, http.StatusOK, redfish.Obj{
			"@odata.id":     PowerSubsystemURI,
			"@odata.type":   "#PowerSubsystem.v1_1_3.PowerSubsystem",
			"Id":            "PowerSubsystem",
			"Name":          "Power Subsystem",
			"Description":   "The memory box's power supplies, from its board controller",
			"PowerSupplies": redfish.Link(PowerSuppliesURI),
			"Status":        boardStatus(bmc.Enabled, health),
		})
	})
	s.Handle(http.MethodGet, PowerSuppliesURI, redfish.PrivLogin, func(c echo.Context) error {
		psus, err := b.PowerSupplies(c.Request().Context())
		if err != nil {
			return pool.FromDomain(err, redfish.Target{Type: "PowerSupplyCollection", URI: PowerSuppliesURI})
		}
		byURI := map[string]bmc.PowerSupply{}
		members := make([]string, 0, len(psus))
		for _, p := range psus {
			u := PowerSuppliesURI + "/" + p.ID
			members = append(members, u)
			byURI[u] = p
		}
		return s.WriteCollection(c, redfish.Collection{ODataID: PowerSuppliesURI, ODataType: "#PowerSupplyCollection.PowerSupplyCollection",
			Name: "Power Supplies", Members: members,
			Expand: func(uri string) (any, error) { return powerSupplyBody(byURI[uri]), nil }})
	})
	s.Handle(http.MethodGet, PowerSuppliesURI+"/:id", redfish.PrivLogin, func(c echo.Context) error {
		p, err := findPSU(c.Request().Context(), b, c.Param("id"))
		if err != nil {
			return err
		}
		return s.WriteResource(c, http.StatusOK, powerSupplyBody(p))
	})
	s.Handle(http.MethodGet, PowerSuppliesURI+"/:id/Metrics", redfish.PrivLogin, func(c echo.Context) error {
		ctx := c.Request().Context()
		p, err := findPSU(ctx, b, c.Param("id"))
		if err != nil {
			return err
		}
		sensors, err := b.Sensors(ctx)
		if err != nil {
			return pool.FromDomain(err, redfish.Target{Type: "PowerSupplyMetrics", ID: "Metrics", URI: PowerSuppliesURI + "/" + p.ID + "/Metrics"})
		}
		return s.WriteResource(c, http.StatusOK, powerSupplyMetrics(p, sensors))
	})
}

// findPSU returns the PSU with Id id.
func findPSU(ctx context.Context, b Board, id string) (bmc.PowerSupply, error) {
	psus, err := b.PowerSupplies(ctx)
	if err != nil {
		return bmc.PowerSupply{}, pool.FromDomain(err, redfish.Target{Type: "PowerSupply", ID: id, URI: PowerSuppliesURI + "/" + id})
	}
	for _, p := range psus {
		if p.ID == id {
			return p, nil
		}
	}
	return bmc.PowerSupply{}, redfish.ErrResourceNotFound("PowerSupply", id)
}

func powerSupplyBody(p bmc.PowerSupply) redfish.Obj {
	line := "Normal"
	if p.State != bmc.Enabled {
		line = "LossOfInput"
	}
	return redfish.Obj{
		"@odata.id":       PowerSuppliesURI + "/" + p.ID,
		"@odata.type":     "#PowerSupply.v1_6_0.PowerSupply",
		"Id":              p.ID,
		"Name":            p.Name,
		"PowerSupplyType": "AC",
		"LineInputStatus": line,
		"Metrics":         redfish.Link(PowerSuppliesURI + "/" + p.ID + "/Metrics"),
		"Status":          boardStatus(p.State, p.Health),
	}
}

// powerSupplyMetrics shows p's readings, each linked to the sensor it
// comes from (told apart as the board controller does: by reading type
// and "Input"/"Output" in the sensor's name).
func powerSupplyMetrics(p bmc.PowerSupply, sensors []bmc.Sensor) redfish.Obj {
	o := redfish.Obj{
		"@odata.id":   PowerSuppliesURI + "/" + p.ID + "/Metrics",
		"@odata.type": "#PowerSupplyMetrics.v1_2_0.PowerSupplyMetrics",
		"Id":          "Metrics",
		"Name":        p.Name + " Metrics",
		"Status":      boardStatus(p.State, p.Health),
	}
	byID := map[string]bmc.Sensor{}
	for _, se := range sensors {
		byID[se.ID] = se
	}
	for _, id := range p.SensorIDs {
		se, ok := byID[id]
		if !ok {
			continue
		}
		excerpt := redfish.Obj{"DataSourceUri": SensorsURI + "/" + id, "Reading": readingOrNull(se.Reading, se.Valid)}
		input := strings.Contains(strings.ToLower(se.Name), "input")
		switch {
		case se.ReadingType == bmc.Power && input:
			o["InputPowerWatts"] = excerpt
		case se.ReadingType == bmc.Power:
			o["OutputPowerWatts"] = excerpt
		case se.ReadingType == bmc.Voltage && input:
			o["InputVoltage"] = excerpt
		case se.ReadingType == bmc.Voltage:
			o["RailVoltage"] = []redfish.Obj{excerpt}
		}
	}
	return o
}
