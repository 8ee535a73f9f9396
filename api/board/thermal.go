package board

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/oemschema"
	"cxlpool/api/redfish"
	"cxlpool/bmc"
)

// ThermalSubsystem of Chassis/Pool: the board's fans and its temperature
// readings. A Fan's SpeedPercent.Reading is the duty the fan is driven at
// (what the policy loop commands), SpeedRPM what it actually turns at, so
// a failed fan shows a high duty, a speed near zero and Health Critical.
// ThermalMetrics lists every temperature sensor (each links to its Sensor)
// and summarises intake, exhaust and the hottest internal reading.

func (s *Server) thermalRoutes(b Board) {
	s.Handle(http.MethodGet, ThermalSubsystemURI, redfish.PrivLogin, func(c echo.Context) error {
		ctx := c.Request().Context()
		fans, err := b.Fans(ctx)
		if err != nil {
			return pool.FromDomain(err, redfish.Target{Type: "ThermalSubsystem", ID: "ThermalSubsystem", URI: ThermalSubsystemURI})
		}
		sensors, err := b.Sensors(ctx)
		if err != nil {
			return pool.FromDomain(err, redfish.Target{Type: "ThermalSubsystem", ID: "ThermalSubsystem", URI: ThermalSubsystemURI})
		}
		return s.WriteResource(c, http.StatusOK, thermalSubsystem(fans, sensors))
	})
	s.Handle(http.MethodGet, FansURI, redfish.PrivLogin, func(c echo.Context) error {
		fans, err := b.Fans(c.Request().Context())
		if err != nil {
			return pool.FromDomain(err, redfish.Target{Type: "FanCollection", URI: FansURI})
		}
		byURI := map[string]bmc.Fan{}
		members := make([]string, 0, len(fans))
		for _, f := range fans {
			u := FansURI + "/" + f.ID
			members = append(members, u)
			byURI[u] = f
		}
		return s.WriteCollection(c, redfish.Collection{ODataID: FansURI, ODataType: "#FanCollection.FanCollection",
			Name: "Fans", Members: members,
			Expand: func(uri string) (any, error) { return fanBody(byURI[uri]), nil }})
	})
	s.Handle(http.MethodGet, FansURI+"/:id", redfish.PrivLogin, func(c echo.Context) error {
		fans, err := b.Fans(c.Request().Context())
		if err != nil {
			return pool.FromDomain(err, redfish.Target{Type: "Fan", ID: c.Param("id"), URI: FansURI + "/" + c.Param("id")})
		}
		for _, f := range fans {
			if f.ID == c.Param("id") {
				return s.WriteResource(c, http.StatusOK, fanBody(f))
			}
		}
		return redfish.ErrResourceNotFound("Fan", c.Param("id"))
	})
	s.Handle(http.MethodGet, ThermalMetricsURI, redfish.PrivLogin, func(c echo.Context) error {
		sensors, err := b.Sensors(c.Request().Context())
		if err != nil {
			return pool.FromDomain(err, redfish.Target{Type: "ThermalMetrics", ID: "ThermalMetrics", URI: ThermalMetricsURI})
		}
		return s.WriteResource(c, http.StatusOK, thermalMetrics(sensors))
	})
}

func thermalSubsystem(fans []bmc.Fan, sensors []bmc.Sensor) redfish.Obj {
	health := bmc.OK
	for _, f := range fans {
		health = worse(health, f.Health)
	}
	for _, se := range sensors {
		if se.ReadingType == bmc.Temperature {
			health = worse(health, se.Health)
		}
	}
	return redfish.Obj{
		"@odata.id":      ThermalSubsystemURI,
		"@odata.type":    "#ThermalSubsystem.v1_5_0.ThermalSubsystem",
		"Id":             "ThermalSubsystem",
		"Name":           "Thermal Subsystem",
		"Description":    "The memory box's fans and temperatures, from its board controller",
		"Fans":           redfish.Link(FansURI),
		"ThermalMetrics": redfish.Link(ThermalMetricsURI),
		"Status":         boardStatus(bmc.Enabled, health),
	}
}

func fanBody(f bmc.Fan) redfish.Obj {
	speed := redfish.Obj{"Reading": f.DutyPercent}
	if f.SpeedValid {
		speed["SpeedRPM"] = f.SpeedRPM
	}
	o := redfish.Obj{
		"@odata.id":       FansURI + "/" + f.ID,
		"@odata.type":     "#Fan.v1_6_0.Fan",
		"Id":              f.ID,
		"Name":            f.Name,
		"PhysicalContext": "Chassis",
		"SpeedPercent":    speed,
		"Status":          boardStatus(f.State, f.Health),
	}
	if f.SensorID != "" {
		// The speed sensor is a Rotational one; the Fan's own
		// DataSourceUri would have to be a Percent sensor.
		o["Oem"] = oemschema.Oem("Fan", redfish.Obj{"SpeedSensor": redfish.Link(SensorsURI + "/" + f.SensorID)})
	}
	return o
}

func thermalMetrics(sensors []bmc.Sensor) redfish.Obj {
	readings := []redfish.Obj{}
	summary := redfish.Obj{}
	var hottest *bmc.Sensor
	for i, se := range sensors {
		if se.ReadingType != bmc.Temperature {
			continue
		}
		uri := SensorsURI + "/" + se.ID
		r := redfish.Obj{"DataSourceUri": uri, "DeviceName": se.Name, "Reading": readingOrNull(se.Reading, se.Valid)}
		if se.PhysicalContext != "" {
			r["PhysicalContext"] = se.PhysicalContext
		}
		readings = append(readings, r)
		excerpt := redfish.Obj{"DataSourceUri": uri, "Reading": readingOrNull(se.Reading, se.Valid)}
		switch strings.ToLower(se.PhysicalContext) {
		case "intake":
			if _, ok := summary["Intake"]; !ok {
				summary["Intake"] = excerpt
			}
		case "exhaust":
			if _, ok := summary["Exhaust"]; !ok {
				summary["Exhaust"] = excerpt
			}
		default:
			if se.Valid && (hottest == nil || se.Reading > hottest.Reading) {
				hottest = &sensors[i]
			}
		}
	}
	if hottest != nil {
		summary["Internal"] = redfish.Obj{"DataSourceUri": SensorsURI + "/" + hottest.ID, "Reading": hottest.Reading}
	}
	return redfish.Obj{
		"@odata.id":                  ThermalMetricsURI,
		"@odata.type":                "#ThermalMetrics.v1_3_2.ThermalMetrics",
		"Id":                         "ThermalMetrics",
		"Name":                       "Thermal Metrics",
		"TemperatureReadingsCelsius": readings,
		"TemperatureSummaryCelsius":  summary,
	}
}
