package telemetry

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/oemschema"
	"cxlpool/api/redfish"
	"cxlpool/history"
)

// The box's history (package history, sampled every 10 s by the
// appliance) served as Redfish MetricReports, one per part of the box:
//
//	TelemetryService/MetricReports/PoolHistory     pool capacity by state, free %, stranded chunks, grant/release rates, certificate
//	TelemetryService/MetricReports/HostHistory     each host's granted bytes, share of its quota, link changes
//	TelemetryService/MetricReports/SensorHistory   every board and management computer sensor
//	TelemetryService/MetricReports/ExportHistory   export throughput (bytes read and written per second)
//	TelemetryService/MetricReports/CHMUHistory     hot-page collector records per second, the hottest unit's accesses
//
// with a MetricReportDefinition each (Periodic, 10 s). A report holds one
// MetricValue per bucket and series: MetricId, MetricProperty (the
// resource the series is about), Timestamp (the bucket's start) and
// MetricValue (the bucket's mean), with the bucket's Min, Max and sample
// count in Oem.CxlPool. The window is an OEM query: ?start= and ?end=
// (RFC 3339; the last hour by default), ?metric= (one MetricId) and
// ?points= (at most this many buckets per series, 360 by default, up to
// 1440; the buckets widen to fit). Windows within the last day read the
// 10 s tier, older ones the 5 min tier (a month).
//
// Host accounts read HostHistory with only their own host's series; the
// others need ApplianceView (they span the box).

const (
	historyDefaultWindow = time.Hour
	historyDefaultPoints = 360
	historyMaxPoints     = 1440
)

// historyReport is one MetricReport of the history and the metrics it
// holds (by MetricId prefix; PoolHistory takes the rest).
type historyReport struct {
	id, name, prefix string
}

var historyReports = []historyReport{
	{"PoolHistory", "Pool capacity over time", ""},
	{"HostHistory", "Per-host capacity over time", "Host"},
	{"SensorHistory", "Sensor readings over time", "Sensor"},
	{"ExportHistory", "Export throughput over time", "Export"},
	{"CHMUHistory", "Hot-page activity over time", "CHMU"},
}

// historyReportOf is the report a metric belongs to.
func historyReportOf(metric string) string {
	for _, r := range historyReports[1:] {
		if strings.HasPrefix(metric, r.prefix) {
			return r.id
		}
	}
	return historyReports[0].id
}

func findHistoryReport(id string) (historyReport, bool) {
	i := slices.IndexFunc(historyReports, func(r historyReport) bool { return r.id == id })
	if i < 0 {
		return historyReport{}, false
	}
	return historyReports[i], true
}

// historySubjectURI is the resource a series is about (MetricProperty).
func historySubjectURI(s history.Series) string {
	switch {
	case strings.HasPrefix(s.Metric, "Host") && s.Subject != "":
		return pool.SystemsURI + "/" + s.Subject
	case strings.HasPrefix(s.Metric, "Sensor") && s.Subject != "":
		return sensorsURI + "/" + s.Subject
	case strings.HasPrefix(s.Metric, "Export"):
		return pool.RDMAFabricURI
	case strings.HasPrefix(s.Metric, "CHMU"):
		return telemetryServiceURI
	case strings.HasPrefix(s.Metric, "Certificate"):
		return httpsCertMemberURI
	}
	return pool.MemoryDomainURI
}

// historyVisible: a host sees HostHistory (its own series); the rest
// needs ApplianceView.
func historyVisible(p *redfish.Principal, id string) bool {
	return p.Has(redfish.PrivApplianceView) || id == "HostHistory"
}

// seriesVisible: a host's series only to accounts that may see the host.
func seriesVisible(p *redfish.Principal, s history.Series) bool {
	if p.Has(redfish.PrivApplianceView) {
		return true
	}
	h, err := pool.ParseSystemID(s.Subject)
	return err == nil && strings.HasPrefix(s.Metric, "Host") && p.CanSeeHost(redfish.HostID(h))
}

// historyMembers lists the history's reports (or definitions) p may read.
func (s *Server) historyMembers(p *redfish.Principal, base string) []string {
	if s.cfg.History == nil {
		return nil
	}
	var out []string
	for _, r := range historyReports {
		if historyVisible(p, r.id) {
			out = append(out, base+"/"+r.id)
		}
	}
	return out
}

// isHistoryReport says whether id names one of the history's reports.
func (s *Server) isHistoryReport(id string) bool {
	_, ok := findHistoryReport(id)
	return ok && s.cfg.History != nil
}

// historyDefinition is a history report's MetricReportDefinition.
func (s *Server) historyDefinition(ctx context.Context, id string) redfish.Obj {
	r, _ := findHistoryReport(id)
	series, err := s.cfg.History.Series(ctx)
	if err != nil {
		s.log.Warn("history: listing series", "err", err)
	}
	props := map[string][]string{}
	var ids []string
	for _, x := range series {
		if historyReportOf(x.Metric) != id {
			continue
		}
		if _, ok := props[x.Metric]; !ok {
			ids = append(ids, x.Metric)
		}
		if u := historySubjectURI(x); !slices.Contains(props[x.Metric], u) {
			props[x.Metric] = append(props[x.Metric], u)
		}
	}
	metrics := []redfish.Obj{}
	step := duration(s.cfg.History.Interval())
	for _, m := range ids {
		metrics = append(metrics, redfish.Obj{"MetricId": m, "MetricProperties": props[m], "CollectionFunction": "Average",
			"CollectionDuration": step, "CollectionTimeScope": "Interval"})
	}
	return redfish.Obj{
		"@odata.id":                     reportDefinitionsURI + "/" + id,
		"@odata.type":                   "#MetricReportDefinition.v1_4_7.MetricReportDefinition",
		"Id":                            id,
		"Name":                          r.name,
		"Description":                   "Sampled every 10 s; kept at 10 s resolution for a day and 5 min for a month (min, mean, max per bucket)",
		"MetricReportDefinitionType":    "Periodic",
		"Schedule":                      redfish.Obj{"RecurrenceInterval": step},
		"MetricReportDefinitionEnabled": true,
		"ReportUpdates":                 "AppendWrapsWhenFull",
		"ReportActions":                 []string{"LogToMetricReportsCollection"},
		"ReportTimespan":                duration(history.CoarseKeep),
		"Metrics":                       metrics,
		"MetricReport":                  redfish.Link(metricReportsURI + "/" + id),
		"Status":                        redfish.Obj{"State": "Enabled", "Health": "OK"},
	}
}

// historyWindow reads ?start, ?end, ?metric and ?points.
type historyWindow struct {
	from, to time.Time
	step     time.Duration
	metric   string
}

func (s *Server) historyWindow(c echo.Context) (historyWindow, error) {
	now := s.cfg.History.Now().UTC()
	w := historyWindow{to: now, from: now.Add(-historyDefaultWindow), metric: c.QueryParam("metric")}
	for _, q := range []struct {
		name string
		dst  *time.Time
	}{{"start", &w.from}, {"end", &w.to}} {
		if v := c.QueryParam(q.name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				e := redfish.ErrQueryValue(v, q.name)
				e.Messages[0].Resolution = "start and end are RFC 3339 times, e.g. 2026-12-02T03:00:00Z."
				return w, e
			}
			*q.dst = t.UTC()
		}
	}
	points := historyDefaultPoints
	if v := c.QueryParam("points"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > historyMaxPoints {
			e := redfish.ErrQueryValue(v, "points")
			e.Messages[0].Resolution = "points is a whole number from 1 to " + strconv.Itoa(historyMaxPoints) + "."
			return w, e
		}
		points = n
	}
	step, err := history.Window(now, w.from, w.to, points)
	if err != nil {
		e := redfish.ErrQueryValue(c.QueryParam("end"), "end")
		e.Messages[0].Resolution = "The window's end must be after its start: " + err.Error() + "."
		return w, e
	}
	w.step = step
	return w, nil
}

// historyReportBody is one history MetricReport over w.
func (s *Server) historyReportBody(ctx context.Context, p *redfish.Principal, id string, w historyWindow) (redfish.Obj, error) {
	r, _ := findHistoryReport(id)
	series, err := s.cfg.History.Series(ctx)
	if err != nil {
		return nil, redfish.ErrInternal(err)
	}
	values := []redfish.Obj{}
	for _, x := range series {
		if historyReportOf(x.Metric) != id || !seriesVisible(p, x) || (w.metric != "" && x.Metric != w.metric) {
			continue
		}
		pts, err := s.cfg.History.Query(ctx, x, w.from, w.to, w.step)
		if err != nil {
			return nil, redfish.ErrInternal(err)
		}
		prop := historySubjectURI(x)
		for _, pt := range pts {
			values = append(values, redfish.Obj{"MetricId": x.Metric, "MetricProperty": prop,
				"Timestamp": pt.Time.Format(time.RFC3339), "MetricValue": strconv.FormatFloat(pt.Mean, 'g', 6, 64),
				"Oem": oemschema.Oem("MetricValue", redfish.Obj{"Min": pt.Min, "Max": pt.Max, "Samples": pt.Count})})
		}
	}
	return redfish.Obj{
		"@odata.id":              metricReportsURI + "/" + id,
		"@odata.type":            "#MetricReport.v1_5_2.MetricReport",
		"Id":                     id,
		"Name":                   r.name,
		"Timestamp":              w.to.Format(time.RFC3339),
		"MetricReportDefinition": redfish.Link(reportDefinitionsURI + "/" + id),
		"MetricValues":           values,
		"Oem": oemschema.Oem("MetricReport", redfish.Obj{"Start": w.from.Format(time.RFC3339), "End": w.to.Format(time.RFC3339),
			"IntervalSeconds": int64(w.step / time.Second)}),
	}, nil
}

// serveHistoryReport answers GET MetricReports/<history report>.
func (s *Server) serveHistoryReport(c echo.Context, id string) error {
	p := redfish.PrincipalOf(c)
	if !historyVisible(p, id) {
		return redfish.ErrResourceNotFound("MetricReport", id)
	}
	w, err := s.historyWindow(c)
	if err != nil {
		return err
	}
	body, err := s.historyReportBody(c.Request().Context(), p, id, w)
	if err != nil {
		return err
	}
	return s.WriteResource(c, http.StatusOK, body)
}

// serveHistoryDefinition answers GET MetricReportDefinitions/<history report>.
func (s *Server) serveHistoryDefinition(c echo.Context, id string) error {
	if !historyVisible(redfish.PrincipalOf(c), id) {
		return redfish.ErrResourceNotFound("MetricReportDefinition", id)
	}
	return s.WriteResource(c, http.StatusOK, s.historyDefinition(c.Request().Context(), id))
}

// historyServiceLinks adds the history's reports and the triggers to the
// TelemetryService (the CHMU's part may be missing).
func (s *Server) historyServiceLinks(o redfish.Obj) {
	if s.cfg.History == nil {
		return
	}
	o["MetricReportDefinitions"] = redfish.Link(reportDefinitionsURI)
	o["MetricReports"] = redfish.Link(metricReportsURI)
	o["Triggers"] = redfish.Link(triggersURI)
}

// URIs of other packages' resources that history series are about.
const (
	sensorsURI         = pool.ChassisURI + "/Sensors"                              // api/board
	httpsCertMemberURI = pool.ManagerURI + "/NetworkProtocol/HTTPS/Certificates/1" // api/manager
)
