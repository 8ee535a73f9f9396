package board

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"cxlpool/bmc"
)

// Sensors of Chassis/Pool: every numeric sensor of the board controller
// (temperatures, fan speeds, PSU power and voltage) with its reading,
// thresholds and status, and the management computer's own sensors
// (Linux hwmon) under Ids that start with "Mgmt_" and link the Manager.
// Without an answering board controller the collection lists the
// management computer's sensors only, and a board sensor answers 503
// saying why.

// mgmtSensorPrefix starts the Ids of the management computer's sensors,
// so they can never collide with the board's.
const mgmtSensorPrefix = "Mgmt_"

func (s *Server) sensorRoutes(b Board) {
	s.Handle(http.MethodGet, SensorsURI, redfish.PrivLogin, func(c echo.Context) error {
		ctx := c.Request().Context()
		all, boardErr := allSensors(ctx, b)
		if boardErr != nil && !errors.Is(boardErr, bmc.ErrUnavailable) {
			return pool.FromDomain(boardErr, redfish.Target{Type: "SensorCollection", URI: SensorsURI})
		}
		byURI := map[string]redfish.Obj{}
		members := make([]string, 0, len(all))
		for _, o := range all {
			u := o["@odata.id"].(string)
			members = append(members, u)
			byURI[u] = o
		}
		if boardErr != nil {
			s.log.Debug("sensors: the board's are left out", "err", boardErr)
		}
		return s.WriteCollection(c, redfish.Collection{ODataID: SensorsURI, ODataType: "#SensorCollection.SensorCollection",
			Name: "Sensors", Members: members,
			Expand: func(uri string) (any, error) { return byURI[uri], nil }})
	})
	s.Handle(http.MethodGet, SensorsURI+"/:id", redfish.PrivLogin, func(c echo.Context) error {
		ctx := c.Request().Context()
		id := c.Param("id")
		if hw, ok := strings.CutPrefix(id, mgmtSensorPrefix); ok {
			list, err := b.ManagerSensors(ctx)
			if err != nil {
				return pool.FromDomain(err, redfish.Target{Type: "Sensor", ID: id, URI: SensorsURI + "/" + id})
			}
			for _, se := range list {
				if se.ID == hw {
					return s.WriteResource(c, http.StatusOK, sensorBody(se, id, pool.ManagerURI))
				}
			}
			return redfish.ErrResourceNotFound("Sensor", id)
		}
		se, err := b.Sensor(ctx, id)
		if err != nil {
			return pool.FromDomain(err, redfish.Target{Type: "Sensor", ID: id, URI: SensorsURI + "/" + id})
		}
		return s.WriteResource(c, http.StatusOK, sensorBody(se, id, boardRelated(ctx, b, id)))
	})
}

// allSensors returns the bodies of the board's sensors (an error if it
// cannot be read) and of the management computer's.
func allSensors(ctx context.Context, b Board) ([]redfish.Obj, error) {
	var out []redfish.Obj
	board, boardErr := b.Sensors(ctx)
	if boardErr == nil {
		fans, _ := b.Fans(ctx)
		psus, _ := b.PowerSupplies(ctx)
		related := relatedItems(fans, psus)
		for _, se := range board {
			out = append(out, sensorBody(se, se.ID, related[se.ID]))
		}
	}
	mgmt, err := b.ManagerSensors(ctx)
	if err != nil {
		return nil, err
	}
	for _, se := range mgmt {
		out = append(out, sensorBody(se, mgmtSensorPrefix+se.ID, pool.ManagerURI))
	}
	return out, boardErr
}

// relatedItems maps board sensor Ids to the fan or PSU they measure.
func relatedItems(fans []bmc.Fan, psus []bmc.PowerSupply) map[string]string {
	m := map[string]string{}
	for _, f := range fans {
		if f.SensorID != "" {
			m[f.SensorID] = FansURI + "/" + f.ID
		}
	}
	for _, p := range psus {
		for _, id := range p.SensorIDs {
			m[id] = PowerSuppliesURI + "/" + p.ID
		}
	}
	return m
}

// boardRelated is the fan or PSU a board sensor measures, if any.
func boardRelated(ctx context.Context, b Board, id string) string {
	fans, _ := b.Fans(ctx)
	psus, _ := b.PowerSupplies(ctx)
	return relatedItems(fans, psus)[id]
}

func sensorBody(se bmc.Sensor, id, related string) redfish.Obj {
	o := redfish.Obj{
		"@odata.id":    SensorsURI + "/" + id,
		"@odata.type":  "#Sensor.v1_12_0.Sensor",
		"Id":           id,
		"Name":         se.Name,
		"ReadingType":  string(se.ReadingType),
		"ReadingUnits": se.ReadingType.Units(),
		"Reading":      readingOrNull(se.Reading, se.Valid),
		"Status":       boardStatus(se.State, se.Health),
	}
	if se.PhysicalContext != "" {
		o["PhysicalContext"] = se.PhysicalContext
	}
	if se.ReadingRangeMax > se.ReadingRangeMin {
		o["ReadingRangeMin"], o["ReadingRangeMax"] = se.ReadingRangeMin, se.ReadingRangeMax
	}
	if se.Valid && !se.Updated.IsZero() {
		o["ReadingTime"] = se.Updated.UTC().Format(redfish.TimeFormat)
	}
	if th := thresholdsBody(se.Thresholds); len(th) > 0 {
		o["Thresholds"] = th
	}
	if related != "" {
		o["RelatedItem"] = redfish.Links(related)
	}
	return o
}

func thresholdsBody(t bmc.Thresholds) redfish.Obj {
	o := redfish.Obj{}
	for _, th := range []struct {
		name string
		v    *float64
	}{
		{"UpperCaution", t.UpperCaution}, {"UpperCritical", t.UpperCritical}, {"UpperFatal", t.UpperFatal},
		{"LowerCaution", t.LowerCaution}, {"LowerCritical", t.LowerCritical}, {"LowerFatal", t.LowerFatal},
	} {
		if th.v == nil {
			continue
		}
		x := redfish.Obj{"Reading": *th.v}
		if t.Hysteresis > 0 {
			x["HysteresisReading"] = t.Hysteresis
		}
		o[th.name] = x
	}
	return o
}
