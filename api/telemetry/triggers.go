package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/oemschema"
	"cxlpool/api/redfish"
	"cxlpool/history"
)

// The box's alerts as DMTF Triggers (TelemetryService/Triggers): numeric
// thresholds on the history's metrics (metrichistory.go), checked every
// sampling round. The defaults (appliance.DefaultTriggers) are created on
// first start: pool free below 20 % / 10 %, a host over 90 % / 100 % of
// its quota, temperatures, link flaps, stranded chunks of lost grants,
// HTTPS certificate expiry.
//
//   - GET Triggers, Triggers/{id} (ApplianceView): the thresholds
//     (NumericThresholds, HysteresisReading), the metric (MetricIds), the
//     series it is limited to (MetricProperties; none: every series of the
//     metric), Status.Health the worst open alert, and the open alerts in
//     Oem.CxlPool.Alerts (series, severity, reading, since, acknowledged).
//   - PATCH Triggers/{id} (ConfigureManager: administrators):
//     TriggerEnabled, HysteresisReading, MetricProperties and each
//     threshold's Reading (null removes it). Thresholds must stay ordered.
//   - POST Triggers/{id}/Actions/Oem/CxlPool.Acknowledge
//     {"MetricProperty": URI} (ConfigureComponents): the alert of that
//     series is acknowledged (kept on the box); MetricProperty may be left
//     out when the trigger has one open alert. It stays open until the
//     reading is back in range.
//
// A crossing raises a RedfishEvent with the Telemetry registry's message
// (TriggerNumericAboveUpperCritical, …BelowLowerWarning, …ReadingNormal
// when it clears), OriginOfCondition the trigger, MessageSeverity from
// the registry; an alert on a host's series is visible to that host.
// Not supported: creating or deleting triggers (the set is the box's),
// DwellTime, discrete triggers.

const triggersURI = telemetryServiceURI + "/Triggers"

func triggerURI(id string) string { return triggersURI + "/" + id }

func acknowledgeURI(id string) string { return triggerURI(id) + "/Actions/Oem/CxlPool.Acknowledge" }

func (s *Server) triggerRoutes() {
	h := s.cfg.History
	if h == nil {
		return
	}
	s.Handle(http.MethodGet, triggersURI, redfish.PrivApplianceView, func(c echo.Context) error {
		ctx := c.Request().Context()
		ts, err := h.Triggers(ctx)
		if err != nil {
			return redfish.ErrInternal(err)
		}
		alerts, err := h.Alerts(ctx)
		if err != nil {
			return redfish.ErrInternal(err)
		}
		var ids []string
		byURI := map[string]redfish.Obj{}
		for _, t := range ts {
			ids = append(ids, triggerURI(t.ID))
			byURI[triggerURI(t.ID)] = triggerBody(t, alerts)
		}
		return s.WriteCollection(c, redfish.Collection{ODataID: triggersURI, ODataType: "#TriggersCollection.TriggersCollection",
			Name: "Triggers", Members: ids, Expand: func(uri string) (any, error) { return byURI[uri], nil }})
	})
	s.Handle(http.MethodGet, triggersURI+"/:id", redfish.PrivApplianceView, func(c echo.Context) error {
		body, err := s.triggerResource(c.Request().Context(), c.Param("id"))
		if err != nil {
			return err
		}
		return s.WriteResource(c, http.StatusOK, body)
	})
	s.Handle(http.MethodPatch, triggersURI+"/:id", redfish.PrivConfigureManager, s.patchTrigger)
	s.Handle(http.MethodPost, triggersURI+"/:id/Actions/Oem/CxlPool.Acknowledge", redfish.PrivConfigureComponents, s.acknowledgeAlert)
	s.feedAlerts(h)
}

// feedAlerts publishes the history's alert transitions as events until
// the service stops.
func (s *Server) feedAlerts(h *history.Service) {
	ch, cancel := h.Subscribe(256)
	pool.Feed(s.ctx, s.bg, ch, cancel, func(tr history.Transition) { s.Publish(alertEvent(tr)) })
}

// alertEvent is the event of an alert transition.
func alertEvent(tr history.Transition) redfish.Event {
	ev := redfish.Event{MessageKey: tr.MessageKey, Args: tr.Args, Origin: triggerURI(tr.Alert.Trigger)}
	x := history.Series{Metric: tr.Alert.Metric, Subject: tr.Alert.Subject}
	if h, err := pool.ParseSystemID(x.Subject); err == nil {
		ev.Host = pool.HostRef(h)
	}
	if !tr.Cleared {
		ev.Resolution = fmt.Sprintf("%s is about %s. Acknowledge it in the console's notifications (or POST %s); "+
			"an administrator may change the thresholds with PATCH %s.", x, historySubjectURI(x), acknowledgeURI(tr.Alert.Trigger), triggerURI(tr.Alert.Trigger))
	}
	return ev
}

func (s *Server) triggerResource(ctx context.Context, id string) (redfish.Obj, error) {
	t, err := s.cfg.History.Trigger(ctx, id)
	if errors.Is(err, history.ErrNotFound) {
		return nil, redfish.ErrResourceNotFound("Triggers", id)
	}
	if err != nil {
		return nil, redfish.ErrInternal(err)
	}
	alerts, err := s.cfg.History.Alerts(ctx)
	if err != nil {
		return nil, redfish.ErrInternal(err)
	}
	return triggerBody(t, alerts), nil
}

var triggerBounds = []history.Bound{history.UpperCritical, history.UpperWarning, history.LowerWarning, history.LowerCritical}

func triggerBody(t history.Trigger, alerts []history.Alert) redfish.Obj {
	th := redfish.Obj{}
	for _, b := range triggerBounds {
		v, ok := t.Threshold(b)
		if !ok {
			continue
		}
		act := "Decreasing"
		if b.Upper() {
			act = "Increasing"
		}
		th[string(b)] = redfish.Obj{"Reading": v, "Activation": act}
	}
	state := "Enabled"
	if !t.Enabled {
		state = "Disabled"
	}
	health := history.LevelOK
	open := []redfish.Obj{}
	for _, a := range alerts {
		if a.Trigger != t.ID {
			continue
		}
		health = max(health, a.Level())
		x := history.Series{Metric: a.Metric, Subject: a.Subject}
		o := redfish.Obj{"MetricProperty": historySubjectURI(x), "Series": x.String(), "Severity": a.Level().String(),
			"Threshold": string(a.Bound), "ThresholdReading": a.Threshold, "Reading": a.Reading,
			"Since": a.Since.UTC().Format(timeLayout), "Acknowledged": a.Acknowledged}
		if a.Acknowledged {
			o["AcknowledgedBy"] = a.AckedBy
			o["AcknowledgedAt"] = a.AckedAt.UTC().Format(timeLayout)
		}
		open = append(open, o)
	}
	body := redfish.Obj{
		"@odata.id":         triggerURI(t.ID),
		"@odata.type":       "#Triggers.v1_4_0.Triggers",
		"Id":                t.ID,
		"Name":              t.Name,
		"Description":       t.Description,
		"MetricType":        "Numeric",
		"TriggerEnabled":    t.Enabled,
		"TriggerActions":    []string{"RedfishEvent"},
		"MetricIds":         []string{t.Metric},
		"NumericThresholds": th,
		"HysteresisReading": t.Hysteresis,
		"Status":            redfish.Obj{"State": state, "Health": health.String()},
		"Actions": redfish.Obj{"Oem": redfish.Obj{"#CxlPool.Acknowledge": redfish.Obj{"target": acknowledgeURI(t.ID),
			"title": "Acknowledge an open alert of this trigger"}}},
		"Oem": oemschema.Oem("Trigger", redfish.Obj{"Alerts": open}),
	}
	if len(t.Subjects) > 0 {
		var props []string
		for _, sub := range t.Subjects {
			props = append(props, historySubjectURI(history.Series{Metric: t.Metric, Subject: sub}))
		}
		body["MetricProperties"] = props
	}
	return body
}

const timeLayout = "2006-01-02T15:04:05Z07:00"

type thresholdPatch struct {
	Reading    *float64 `json:"Reading" rf:"nullable"`
	Activation *string  `json:"Activation" enum:"Increasing|Decreasing|Either"`
	DwellTime  *string  `json:"DwellTime"`
}

type triggerPatch struct {
	TriggerEnabled    *bool     `json:"TriggerEnabled"`
	HysteresisReading *float64  `json:"HysteresisReading"`
	MetricProperties  *[]string `json:"MetricProperties"`
	NumericThresholds *struct {
		UpperCritical *thresholdPatch `json:"UpperCritical"`
		UpperWarning  *thresholdPatch `json:"UpperWarning"`
		LowerWarning  *thresholdPatch `json:"LowerWarning"`
		LowerCritical *thresholdPatch `json:"LowerCritical"`
	} `json:"NumericThresholds"`
}

func (s *Server) patchTrigger(c echo.Context) error {
	ctx := c.Request().Context()
	id := c.Param("id")
	t, err := s.cfg.History.Trigger(ctx, id)
	if errors.Is(err, history.ErrNotFound) {
		return redfish.ErrResourceNotFound("Triggers", id)
	}
	if err != nil {
		return redfish.ErrInternal(err)
	}
	var req triggerPatch
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	cur, err := s.triggerResource(ctx, id)
	if err != nil {
		return err
	}
	if err := s.IfMatch(c, cur); err != nil {
		return err
	}
	if req.TriggerEnabled != nil {
		t.Enabled = *req.TriggerEnabled
	}
	if req.HysteresisReading != nil {
		t.Hysteresis = *req.HysteresisReading
	}
	if nt := req.NumericThresholds; nt != nil {
		for _, x := range []struct {
			p   *thresholdPatch
			dst **float64
			b   history.Bound
		}{{nt.UpperCritical, &t.UpperCritical, history.UpperCritical}, {nt.UpperWarning, &t.UpperWarning, history.UpperWarning},
			{nt.LowerWarning, &t.LowerWarning, history.LowerWarning}, {nt.LowerCritical, &t.LowerCritical, history.LowerCritical}} {
			if x.p == nil {
				continue
			}
			prop := "NumericThresholds/" + string(x.b)
			want := "Decreasing"
			if x.b.Upper() {
				want = "Increasing"
			}
			if x.p.Activation != nil && *x.p.Activation != want {
				e := redfish.ErrPropertyValueNotInList(*x.p.Activation, prop+"/Activation")
				e.Messages[0].Resolution = "An upper threshold activates Increasing and a lower one Decreasing on this box."
				return e
			}
			if x.p.DwellTime != nil {
				e := redfish.ErrPropertyNotWritable(prop + "/DwellTime")
				e.Messages[0].Resolution = "The box raises an alert at the first sample beyond a threshold; DwellTime is not supported."
				return e
			}
			*x.dst = x.p.Reading
		}
	}
	if req.MetricProperties != nil {
		subjects, err := s.triggerSubjects(ctx, t.Metric, *req.MetricProperties)
		if err != nil {
			return err
		}
		t.Subjects = subjects
	}
	if err := s.cfg.History.SetTrigger(ctx, t); err != nil {
		if errors.Is(err, history.ErrInvalid) {
			e := redfish.ErrPropertyValueConflict("NumericThresholds", "HysteresisReading")
			e.Messages[0].Resolution = err.Error() + "."
			return e
		}
		return redfish.ErrInternal(err)
	}
	s.log.Info("trigger changed", "trigger", id, "user", redfish.PrincipalOf(c).User)
	s.Publish(redfish.Event{MessageKey: redfish.MsgResourceChanged, Origin: triggerURI(id)})
	body, err := s.triggerResource(ctx, id)
	if err != nil {
		return err
	}
	return s.WriteResource(c, http.StatusOK, body)
}

// triggerSubjects maps MetricProperties to the series subjects of metric:
// each must be the URI of a series the box keeps (or a host's system).
func (s *Server) triggerSubjects(ctx context.Context, metric string, uris []string) ([]string, error) {
	series, err := s.cfg.History.Series(ctx)
	if err != nil {
		return nil, redfish.ErrInternal(err)
	}
	var out []string
	for i, u := range uris {
		j := slices.IndexFunc(series, func(x history.Series) bool { return x.Metric == metric && historySubjectURI(x) == u })
		if j < 0 {
			e := redfish.ErrPropertyValueNotInList(u, "MetricProperties/"+strconv.Itoa(i))
			e.Messages[0].Resolution = "Each MetricProperties entry is the URI of a resource the box keeps " + metric +
				" for (see the MetricProperties of its MetricReportDefinition); an empty list watches them all."
			return nil, e
		}
		if !slices.Contains(out, series[j].Subject) {
			out = append(out, series[j].Subject)
		}
	}
	return out, nil
}

type acknowledgeRequest struct {
	MetricProperty *string `json:"MetricProperty"`
}

func (s *Server) acknowledgeAlert(c echo.Context) error {
	ctx := c.Request().Context()
	id := c.Param("id")
	if _, err := s.cfg.History.Trigger(ctx, id); err != nil {
		return redfish.ErrResourceNotFound("Triggers", id)
	}
	var req acknowledgeRequest
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	alerts, err := s.cfg.History.Alerts(ctx)
	if err != nil {
		return redfish.ErrInternal(err)
	}
	var mine []history.Alert
	for _, a := range alerts {
		if a.Trigger == id && (req.MetricProperty == nil || historySubjectURI(history.Series{Metric: a.Metric, Subject: a.Subject}) == *req.MetricProperty) {
			mine = append(mine, a)
		}
	}
	switch {
	case len(mine) == 0 && req.MetricProperty != nil:
		e := redfish.ErrPropertyValueNotInList(*req.MetricProperty, "MetricProperty")
		e.Messages[0].Resolution = "No open alert of trigger " + id + " is about this resource (it may have cleared): see the trigger's Oem.CxlPool.Alerts."
		return e
	case len(mine) == 0:
		return redfish.NewError(http.StatusBadRequest, redfish.Msg{Key: "Base.ActionNotSupported", Args: []string{"CxlPool.Acknowledge"},
			Resolution: "Trigger " + id + " has no open alert to acknowledge."})
	case len(mine) > 1:
		e := redfish.ErrPropertyMissing("MetricProperty")
		e.Messages[0].Resolution = "Trigger " + id + " has several open alerts: name the one to acknowledge by its MetricProperty."
		return e
	}
	user := redfish.PrincipalOf(c).User
	if _, err := s.cfg.History.Acknowledge(ctx, id, mine[0].Subject, user); err != nil {
		if errors.Is(err, history.ErrNotFound) {
			return redfish.NewError(http.StatusConflict, redfish.Msg{Key: "Base.ResourceInUse",
				Resolution: "The alert cleared while it was being acknowledged."})
		}
		return redfish.ErrInternal(err)
	}
	s.log.Info("alert acknowledged", "trigger", id, "series", mine[0].Subject, "user", user)
	s.Publish(redfish.Event{MessageKey: redfish.MsgResourceChanged, Origin: triggerURI(id)})
	body, err := s.triggerResource(ctx, id)
	if err != nil {
		return err
	}
	return s.WriteResource(c, http.StatusOK, body)
}
