package telemetry

import (
	"context"
	"crypto/sha256"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/oemschema"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
	"cxlpool/fabric/cci"
	"cxlpool/hmu"
	"cxlpool/hmu/agg"
	"cxlpool/hmu/stream"
)

// TelemetryService: hot pages from the box's CXL Hotness Monitoring Unit.
//
//   - MetricDefinitions: what each metric means (accesses, held and cold
//     bytes, the top-K error bound, monitored units, a hot unit's accesses).
//   - MetricReportDefinitions and MetricReports, one per host ("Host<n>"),
//     for capacity several hosts share ("Shared") and for the whole pool
//     ("Pool"). Reports are generated on request from the collector's
//     summary: decayed accesses per scope and the hottest units, each with
//     its DPA and error bound in Oem.CxlPool and the Memory (host) or
//     MemoryChunks (pool) resource holding it as MetricProperty.
//   - Placement hints per host are in Oem.CxlPool.Hints of the host's
//     MetricReport: the units to keep close (Promote) and the memory that
//     has gone cold (Shrink: candidates to give back).
//   - The CHMU configuration is an administrator setting:
//     Oem.CxlPool.CHMU on TelemetryService (GET; PATCH needs
//     ConfigureManager), validated against every instance's capabilities;
//     a change resets the counters and is kept across restarts.
//   - A WebSocket stream of binary heatmap and top-K frames (hmu/stream
//     format) at Oem.CxlPool.StreamUri. The upgrade request authenticates
//     like any request (X-Auth-Token or Basic) or, for browsers, which
//     cannot set headers on a WebSocket, with ?ticket= from a POST to
//     Oem.CxlPool.StreamTicketUri (single use, valid 30 s).
//
// Host accounts see only their own definition, report and hints, and
// their stream carries only their own frames: a heatmap masked to the
// cells they hold, their top-K and the hot units of the shared capacity
// they hold. Without a CHMU (a real device started without --chmu) the
// service shows ServiceEnabled false and its other resources answer 503
// ServiceDisabled.

// Telemetry is what the TelemetryService is a view of: the appliance's
// CHMU pipeline (appliance.Telemetry).
type Telemetry interface {
	// Report, Top and Hints are the collector's summaries (hmu/agg);
	// scopes are host IDs, agg.Shared and agg.Pool.
	Report() agg.Report
	Top(scope, n int) []agg.Hot
	Hints(host, n int) agg.Hints
	// Extents lists what a host holds, as the collector maps it.
	Extents(host int) []cci.Extent
	// Hosts is the number of hosts tracked (IDs 0 … Hosts−1).
	Hosts() int
	// CHMUConfig is the instances' configuration and whether they count.
	CHMUConfig() (hmu.Config, bool, error)
	// CHMUCaps is instance 0's capabilities and the number of instances.
	CHMUCaps() (hmu.Caps, int)
	// ValidateCHMU checks a configuration against every instance.
	ValidateCHMU(hmu.Config) error
	// SetCHMU applies and keeps a configuration (a counter reset).
	SetCHMU(ctx context.Context, c hmu.Config, enabled bool) error
	// Stream is a scope's frame hub: agg.Pool for everything, or a host.
	Stream(scope int) *stream.Hub
	// FrameInterval is the stream's frame period.
	FrameInterval() time.Duration
}

const (
	telemetryServiceURI  = "/redfish/v1/TelemetryService"
	metricDefinitionsURI = telemetryServiceURI + "/MetricDefinitions"
	reportDefinitionsURI = telemetryServiceURI + "/MetricReportDefinitions"
	metricReportsURI     = telemetryServiceURI + "/MetricReports"
	// TelemetryStreamURI is the WebSocket stream of heatmap and top-K frames.
	TelemetryStreamURI = telemetryServiceURI + "/Oem/CxlPool/Stream"
	// TelemetryTicketURI issues single-use stream tickets (POST).
	TelemetryTicketURI = telemetryServiceURI + "/Oem/CxlPool/StreamTicket"

	scopeShared = "Shared"
	scopePool   = "Pool"

	// reportTopN is how many hot units a MetricReport lists.
	reportTopN = 32
	// hintTopN is how many units a host's hints ask it to promote.
	hintTopN = 16
	// ticketTTL is how long a stream ticket may wait to be used.
	ticketTTL = 30 * time.Second
	// maxTickets bounds the outstanding tickets.
	maxTickets = 1024
)

// Metric Ids (MetricDefinitions/<Id>).
const (
	metricAccesses  = "Accesses"
	metricHeld      = "HeldBytes"
	metricCold      = "ColdBytes"
	metricBound     = "ErrorBound"
	metricMonitored = "MonitoredUnits"
	metricHotUnit   = "HotUnitAccesses"
)

var metricDefinitions = []struct {
	id, name, desc, typ, dataType, units string
}{
	{metricAccesses, "Accesses", "Accesses the CHMU counted in the scope, decayed by half every collector epoch.", "Numeric", "Decimal", "{access}"},
	{metricHeld, "Held bytes", "Pool capacity the scope holds.", "Gauge", "Integer", "By"},
	{metricCold, "Cold bytes", "Held capacity in heatmap cells with no counted access in about the last epoch.", "Gauge", "Integer", "By"},
	{metricBound, "Top-K error bound", "No hot unit's count in the scope exceeds its true decayed count by more than this (Space-Saving minimum).", "Numeric", "Integer", "{access}"},
	{metricMonitored, "Monitored units", "Units the scope's Space-Saving summary tracks.", "Gauge", "Integer", "{unit}"},
	{metricHotUnit, "Hot unit accesses", "Decayed accesses of one hot unit; its DPA, size and error bound are in Oem.CxlPool.", "Numeric", "Integer", "{access}"},
}

var accessTypes = []struct {
	a    hmu.AccessType
	name string
}{
	{hmu.AccessNonTEERead, "NonTEERead"}, {hmu.AccessNonTEEWrite, "NonTEEWrite"}, {hmu.AccessNonTEEReadWrite, "NonTEEReadWrite"},
	{hmu.AccessRead, "Read"}, {hmu.AccessWrite, "Write"}, {hmu.AccessReadWrite, "ReadWrite"},
}

func accessName(a hmu.AccessType) string {
	for _, t := range accessTypes {
		if t.a == a {
			return t.name
		}
	}
	return strconv.Itoa(int(a))
}

// telemetryAPI is the TelemetryService's state: the pipeline and the
// outstanding stream tickets.
type telemetryAPI struct {
	s   *Server
	tel Telemetry // nil: telemetry disabled

	mu      sync.Mutex
	tickets map[[sha256.Size]byte]streamTicket
}

// streamTicket is bound to the account's identity and, for Basic, to
// its password at issue: a ticket outlives neither.
type streamTicket struct {
	accountUID   string
	sessionID    string
	passwordHash string
	expires      time.Time
}

func (s *Server) telemetryRoutes() {
	t := &telemetryAPI{s: s, tel: s.cfg.Telemetry, tickets: map[[sha256.Size]byte]streamTicket{}}
	s.Handle(http.MethodGet, telemetryServiceURI, redfish.PrivLogin, func(c echo.Context) error {
		return s.WriteResource(c, http.StatusOK, t.service(redfish.PrincipalOf(c)))
	})
	s.Handle(http.MethodPatch, telemetryServiceURI, redfish.PrivConfigureManager, t.patchService)
	s.Handle(http.MethodGet, metricDefinitionsURI, redfish.PrivLogin, t.enabled(func(c echo.Context) error {
		var ids []string
		for _, d := range metricDefinitions {
			ids = append(ids, metricDefinitionsURI+"/"+d.id)
		}
		return s.WriteCollection(c, redfish.Collection{ODataID: metricDefinitionsURI, ODataType: "#MetricDefinitionCollection.MetricDefinitionCollection",
			Name: "Metric Definitions", Members: ids, Expand: func(uri string) (any, error) {
				id, _ := pool.RefID(uri, metricDefinitionsURI)
				return metricDefinition(id), nil
			}})
	}))
	s.Handle(http.MethodGet, metricDefinitionsURI+"/:id", redfish.PrivLogin, t.enabled(func(c echo.Context) error {
		d := metricDefinition(c.Param("id"))
		if d == nil {
			return redfish.ErrResourceNotFound("MetricDefinition", c.Param("id"))
		}
		return s.WriteResource(c, http.StatusOK, d)
	}))
	// The reports and definitions are the CHMU's and the history's
	// (metrichistory.go); either may be missing.
	s.Handle(http.MethodGet, reportDefinitionsURI, redfish.PrivLogin, t.enabledOrHistory(func(c echo.Context) error {
		return s.WriteCollection(c, redfish.Collection{ODataID: reportDefinitionsURI,
			ODataType: "#MetricReportDefinitionCollection.MetricReportDefinitionCollection",
			Name:      "Metric Report Definitions", Members: t.allMembers(redfish.PrincipalOf(c), reportDefinitionsURI),
			Expand: func(uri string) (any, error) {
				id, _ := pool.RefID(uri, reportDefinitionsURI)
				if s.isHistoryReport(id) {
					return s.historyDefinition(c.Request().Context(), id), nil
				}
				return t.definition(id), nil
			}})
	}))
	s.Handle(http.MethodGet, reportDefinitionsURI+"/:id", redfish.PrivLogin, t.historyOr(s.serveHistoryDefinition, func(c echo.Context) error {
		id := c.Param("id")
		if !t.visible(redfish.PrincipalOf(c), id) {
			return redfish.ErrResourceNotFound("MetricReportDefinition", id)
		}
		return s.WriteResource(c, http.StatusOK, t.definition(id))
	}))
	s.Handle(http.MethodGet, metricReportsURI, redfish.PrivLogin, t.enabledOrHistory(func(c echo.Context) error {
		p := redfish.PrincipalOf(c)
		// A collection's expansion is the default hour of each history report.
		var w historyWindow
		if s.cfg.History != nil {
			var err error
			if w, err = s.historyWindow(c); err != nil {
				return err
			}
		}
		return s.WriteCollection(c, redfish.Collection{ODataID: metricReportsURI, ODataType: "#MetricReportCollection.MetricReportCollection",
			Name: "Metric Reports", Members: t.allMembers(p, metricReportsURI),
			Expand: func(uri string) (any, error) {
				id, _ := pool.RefID(uri, metricReportsURI)
				if s.isHistoryReport(id) {
					return s.historyReportBody(c.Request().Context(), p, id, w)
				}
				return t.report(c.Request().Context(), id)
			}})
	}))
	s.Handle(http.MethodGet, metricReportsURI+"/:id", redfish.PrivLogin, t.historyOr(s.serveHistoryReport, func(c echo.Context) error {
		id := c.Param("id")
		if !t.visible(redfish.PrincipalOf(c), id) {
			return redfish.ErrResourceNotFound("MetricReport", id)
		}
		r, err := t.report(c.Request().Context(), id)
		if err != nil {
			return err
		}
		return s.WriteResource(c, http.StatusOK, r)
	}))
	s.Handle(http.MethodPost, TelemetryTicketURI, redfish.PrivLogin, t.enabled(t.issueTicket))
	// Public: the handler authenticates itself, by ticket or by headers.
	s.Handle(http.MethodGet, TelemetryStreamURI, redfish.Public, t.serveStream)
}

// enabled answers 503 ServiceDisabled while there is no CHMU.
func (t *telemetryAPI) enabled(h echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if t.tel == nil {
			return errTelemetryDisabled()
		}
		return h(c)
	}
}

// enabledOrHistory serves a collection the CHMU and the history share:
// 503 ServiceDisabled only when there is neither.
func (t *telemetryAPI) enabledOrHistory(h echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if t.tel == nil && t.s.cfg.History == nil {
			return errTelemetryDisabled()
		}
		return h(c)
	}
}

// historyOr serves the history's report or definition ids with hist and
// the CHMU's with h (503 while there is no CHMU).
func (t *telemetryAPI) historyOr(hist func(echo.Context, string) error, h echo.HandlerFunc) echo.HandlerFunc {
	chmu := t.enabled(h)
	return func(c echo.Context) error {
		if id := c.Param("id"); t.s.isHistoryReport(id) {
			return hist(c, id)
		}
		return chmu(c)
	}
}

// allMembers are the CHMU's members (if any) and the history's.
func (t *telemetryAPI) allMembers(p *redfish.Principal, base string) []string {
	var out []string
	if t.tel != nil {
		out = t.members(p, base)
	}
	return append(out, t.s.historyMembers(p, base)...)
}

func errTelemetryDisabled() *redfish.Error {
	return redfish.NewError(http.StatusServiceUnavailable, redfish.M("Base.ServiceDisabled", telemetryServiceURI))
}

// --- scopes ---

// scopeIDs are the report and definition Ids in order: hosts, Shared, Pool.
func (t *telemetryAPI) scopeIDs() []string {
	var ids []string
	for h := range t.tel.Hosts() {
		ids = append(ids, pool.SystemID(dcd.HostID(h)))
	}
	return append(ids, scopeShared, scopePool)
}

// scopeOf parses a report Id into a collector scope.
func (t *telemetryAPI) scopeOf(id string) (int, bool) {
	switch id {
	case scopeShared:
		return agg.Shared, true
	case scopePool:
		return agg.Pool, true
	}
	h, err := pool.ParseSystemID(id)
	if err != nil || int(h) >= t.tel.Hosts() {
		return 0, false
	}
	return int(h), true
}

// visible: host accounts see their own scope only; Shared and Pool span
// hosts and need PrivApplianceView.
func (t *telemetryAPI) visible(p *redfish.Principal, id string) bool {
	sc, ok := t.scopeOf(id)
	switch {
	case !ok:
		return false
	case sc < 0:
		return p.Has(redfish.PrivApplianceView)
	}
	return p.CanSeeHost(redfish.HostID(sc))
}

func (t *telemetryAPI) members(p *redfish.Principal, base string) []string {
	var out []string
	for _, id := range t.scopeIDs() {
		if t.visible(p, id) {
			out = append(out, base+"/"+id)
		}
	}
	return out
}

// --- TelemetryService and the CHMU setting ---

func (t *telemetryAPI) service(p *redfish.Principal) redfish.Obj {
	o := redfish.Obj{
		"@odata.id":   telemetryServiceURI,
		"@odata.type": "#TelemetryService.v1_4_1.TelemetryService",
		"Id":          "TelemetryService",
		"Name":        "Telemetry Service",
		"Description": "Hot pages of the pool from the CXL Hotness Monitoring Unit",
	}
	t.s.historyServiceLinks(o) // metrichistory.go, triggers.go
	if t.tel == nil {
		o["ServiceEnabled"] = false
		o["Status"] = redfish.Obj{"State": "Disabled", "Health": "OK"}
		o["Oem"] = oemschema.Oem("TelemetryService", redfish.Obj{"DisabledReason": "the device's CHMU is not reachable: start the daemon with --chmu PATH[@OFFSET] or --chmu pci:BDF"})
		return o
	}
	o["ServiceEnabled"] = true
	o["Status"] = redfish.Obj{"State": "Enabled", "Health": "OK"}
	o["MetricDefinitions"] = redfish.Link(metricDefinitionsURI)
	o["MetricReportDefinitions"] = redfish.Link(reportDefinitionsURI)
	o["MetricReports"] = redfish.Link(metricReportsURI)
	o["MinCollectionInterval"] = duration(t.tel.FrameInterval())
	oem := redfish.Obj{
		"StreamUri":       TelemetryStreamURI,
		"StreamTicketUri": TelemetryTicketURI,
		"FramesPerSecond": math.Round(float64(time.Second)/float64(t.tel.FrameInterval())*100) / 100,
	}
	if p.Has(redfish.PrivApplianceView) {
		cfg, enabled, err := t.tel.CHMUConfig()
		if err == nil {
			oem["CHMU"] = chmuBody(cfg, enabled)
		} else {
			t.s.log.Warn("reading the CHMU configuration", "err", err)
		}
		caps, n := t.tel.CHMUCaps()
		oem["CHMUCapabilities"] = capsBody(caps, n)
	}
	o["Oem"] = oemschema.Oem("TelemetryService", oem)
	return o
}
