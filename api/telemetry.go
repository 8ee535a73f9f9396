package api

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math"
	"math/bits"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/labstack/echo/v4"

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
				id, _ := refID(uri, metricDefinitionsURI)
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
	s.Handle(http.MethodGet, reportDefinitionsURI, redfish.PrivLogin, t.enabled(func(c echo.Context) error {
		return s.WriteCollection(c, redfish.Collection{ODataID: reportDefinitionsURI,
			ODataType: "#MetricReportDefinitionCollection.MetricReportDefinitionCollection",
			Name:      "Metric Report Definitions", Members: t.members(redfish.PrincipalOf(c), reportDefinitionsURI),
			Expand: func(uri string) (any, error) {
				id, _ := refID(uri, reportDefinitionsURI)
				return t.definition(id), nil
			}})
	}))
	s.Handle(http.MethodGet, reportDefinitionsURI+"/:id", redfish.PrivLogin, t.enabled(func(c echo.Context) error {
		id := c.Param("id")
		if !t.visible(redfish.PrincipalOf(c), id) {
			return redfish.ErrResourceNotFound("MetricReportDefinition", id)
		}
		return s.WriteResource(c, http.StatusOK, t.definition(id))
	}))
	s.Handle(http.MethodGet, metricReportsURI, redfish.PrivLogin, t.enabled(func(c echo.Context) error {
		p := redfish.PrincipalOf(c)
		return s.WriteCollection(c, redfish.Collection{ODataID: metricReportsURI, ODataType: "#MetricReportCollection.MetricReportCollection",
			Name: "Metric Reports", Members: t.members(p, metricReportsURI),
			Expand: func(uri string) (any, error) {
				id, _ := refID(uri, metricReportsURI)
				return t.report(c.Request().Context(), id)
			}})
	}))
	s.Handle(http.MethodGet, metricReportsURI+"/:id", redfish.PrivLogin, t.enabled(func(c echo.Context) error {
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

func errTelemetryDisabled() *redfish.Error {
	return redfish.NewError(http.StatusServiceUnavailable, redfish.M("Base.ServiceDisabled", telemetryServiceURI))
}

// --- scopes ---

// scopeIDs are the report and definition Ids in order: hosts, Shared, Pool.
func (t *telemetryAPI) scopeIDs() []string {
	var ids []string
	for h := range t.tel.Hosts() {
		ids = append(ids, SystemID(dcd.HostID(h)))
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
	h, err := ParseSystemID(id)
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

// duration formats d as an ISO 8601 duration ("PT0.1S").
func duration(d time.Duration) string {
	return "PT" + strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "S"
}

func epochMS(e hmu.Epoch) float64 { return float64(e.Duration()) / float64(time.Millisecond) }

func chmuBody(c hmu.Config, enabled bool) redfish.Obj {
	mode := "Epoch"
	if c.Mode == hmu.ModeAlwaysOn {
		mode = "AlwaysOn"
	}
	var ranges any
	if c.Ranges != nil {
		ranges = slices.Clone(c.Ranges)
	}
	return redfish.Obj{
		"Enabled":            enabled,
		"AccessType":         accessName(c.Access),
		"UnitBytes":          c.UnitSize,
		"Threshold":          c.Threshold,
		"Mode":               mode,
		"EpochMilliseconds":  epochMS(c.Epoch),
		"DownSamplingFactor": uint64(1) << c.DSFactor,
		"RandomDownSampling": c.RandomDS,
		"OverflowInterrupt":  c.OverflowIRQ,
		"LevelInterrupt":     c.LevelIRQ,
		"FillThreshold":      c.FillThreshold,
		"Ranges":             ranges,
	}
}

func capsBody(c hmu.Caps, instances int) redfish.Obj {
	access := []string{}
	for _, t := range accessTypes {
		if c.CanTrack(t.a) {
			access = append(access, t.name)
		}
	}
	units, ds := []uint64{}, []uint64{}
	for n := range 32 {
		if c.UnitSizes>>n&1 == 1 {
			units = append(units, 256<<n)
		}
		if n < 16 && c.DownSampling>>n&1 == 1 {
			ds = append(ds, 1<<n)
		}
	}
	modes := []string{}
	if c.EpochMode {
		modes = append(modes, "Epoch")
	}
	if c.AlwaysOn {
		modes = append(modes, "AlwaysOn")
	}
	return redfish.Obj{
		"Instances":            instances,
		"HotlistEntries":       c.HotlistSize,
		"AccessTypes":          access,
		"UnitBytes":            units,
		"DownSamplingFactors":  ds,
		"Modes":                modes,
		"MinEpochMilliseconds": epochMS(c.MinEpoch),
		"MaxEpochMilliseconds": epochMS(c.MaxEpoch),
		"RangeBytes":           hmu.RangeGranule,
		"RangeCount":           c.BitmapBits(),
		"RandomDownSampling":   c.RandomDS,
		"OverflowInterrupt":    c.OverflowIRQ,
		"LevelInterrupt":       c.LevelIRQ,
	}
}

type telemetryPatch struct {
	Oem *struct {
		CxlPool *struct {
			CHMU *chmuPatch `json:"CHMU"`
		} `json:"CxlPool"`
	} `json:"Oem"`
	ServiceEnabled *bool  `json:"ServiceEnabled" rf:"readonly"`
	ID             string `json:"Id" rf:"readonly"`
	Name           string `json:"Name" rf:"readonly"`
}

type chmuPatch struct {
	Enabled            *bool    `json:"Enabled"`
	AccessType         *string  `json:"AccessType" enum:"NonTEERead|NonTEEWrite|NonTEEReadWrite|Read|Write|ReadWrite"`
	UnitBytes          *uint64  `json:"UnitBytes"`
	Threshold          *uint32  `json:"Threshold"`
	Mode               *string  `json:"Mode" enum:"Epoch|AlwaysOn"`
	EpochMilliseconds  *float64 `json:"EpochMilliseconds"`
	DownSamplingFactor *uint64  `json:"DownSamplingFactor"`
	RandomDownSampling *bool    `json:"RandomDownSampling"`
	OverflowInterrupt  *bool    `json:"OverflowInterrupt"`
	LevelInterrupt     *bool    `json:"LevelInterrupt"`
	FillThreshold      *uint16  `json:"FillThreshold"`
	// Ranges: null tracks every range, a list tracks those 256 MiB ranges.
	Ranges json.RawMessage `json:"Ranges" rf:"nullable"`
}

// chmuEdit is one property of a PATCH: its path, value and effect.
type chmuEdit struct {
	prop  string
	value string
	apply func(*hmu.Config) *redfish.Error
}

// edits turns a CHMU patch into its property edits, in a fixed order.
func (p *chmuPatch) edits() []chmuEdit {
	const base = "Oem/CxlPool/CHMU/"
	var out []chmuEdit
	add := func(prop string, v any, f func(*hmu.Config) *redfish.Error) {
		out = append(out, chmuEdit{prop: base + prop, value: redfish.ValueText(v), apply: f})
	}
	if v := p.AccessType; v != nil {
		add("AccessType", *v, func(c *hmu.Config) *redfish.Error {
			for _, t := range accessTypes {
				if t.name == *v {
					c.Access = t.a
				}
			}
			return nil
		})
	}
	if v := p.UnitBytes; v != nil {
		add("UnitBytes", *v, func(c *hmu.Config) *redfish.Error { c.UnitSize = *v; return nil })
	}
	if v := p.Threshold; v != nil {
		add("Threshold", *v, func(c *hmu.Config) *redfish.Error {
			if *v == 0 {
				return redfish.ErrPropertyValueOutOfRange("0", base+"Threshold")
			}
			c.Threshold = *v
			return nil
		})
	}
	if v := p.Mode; v != nil {
		add("Mode", *v, func(c *hmu.Config) *redfish.Error {
			c.Mode = hmu.ModeEpoch
			if *v == "AlwaysOn" {
				c.Mode = hmu.ModeAlwaysOn
			}
			return nil
		})
	}
	if v := p.EpochMilliseconds; v != nil {
		add("EpochMilliseconds", *v, func(c *hmu.Config) *redfish.Error {
			e, ok := epochOf(*v)
			if !ok {
				return redfish.ErrPropertyValueOutOfRange(redfish.ValueText(*v), base+"EpochMilliseconds")
			}
			c.Epoch = e
			return nil
		})
	}
	if v := p.DownSamplingFactor; v != nil {
		add("DownSamplingFactor", *v, func(c *hmu.Config) *redfish.Error {
			if *v == 0 || bits.OnesCount64(*v) != 1 || *v > 1<<15 {
				return redfish.ErrPropertyValueNotInList(redfish.ValueText(*v), base+"DownSamplingFactor")
			}
			c.DSFactor = uint8(bits.TrailingZeros64(*v))
			return nil
		})
	}
	if v := p.RandomDownSampling; v != nil {
		add("RandomDownSampling", *v, func(c *hmu.Config) *redfish.Error { c.RandomDS = *v; return nil })
	}
	if v := p.OverflowInterrupt; v != nil {
		add("OverflowInterrupt", *v, func(c *hmu.Config) *redfish.Error { c.OverflowIRQ = *v; return nil })
	}
	if v := p.LevelInterrupt; v != nil {
		add("LevelInterrupt", *v, func(c *hmu.Config) *redfish.Error { c.LevelIRQ = *v; return nil })
	}
	if v := p.FillThreshold; v != nil {
		add("FillThreshold", *v, func(c *hmu.Config) *redfish.Error { c.FillThreshold = *v; return nil })
	}
	if p.Ranges != nil {
		add("Ranges", string(p.Ranges), func(c *hmu.Config) *redfish.Error {
			var rs []uint64
			if err := json.Unmarshal(p.Ranges, &rs); err != nil {
				return redfish.ErrPropertyValueType(string(p.Ranges), base+"Ranges")
			}
			c.Ranges = rs // nil for null: every range
			if c.Ranges == nil && string(p.Ranges) != "null" {
				c.Ranges = []uint64{}
			}
			return nil
		})
	}
	return out
}

// epochOf expresses ms as a CHMU epoch (a multiplier of 1–4095 of
// 100 µs, 1 ms, 10 ms, 100 ms or 1 s), preferring the finest scale.
func epochOf(ms float64) (hmu.Epoch, bool) {
	if !(ms > 0) || ms > 4095*1000 {
		return hmu.Epoch{}, false
	}
	ns := math.Round(ms * 1e6)
	for scale := uint8(1); scale <= 5; scale++ {
		unit := float64(hmu.Epoch{Scale: scale, Multiplier: 1}.Duration())
		if m := ns / unit; m == math.Trunc(m) && m >= 1 && m <= 4095 {
			return hmu.Epoch{Scale: scale, Multiplier: uint16(m)}, true
		}
	}
	return hmu.Epoch{}, false
}

func (t *telemetryAPI) patchService(c echo.Context) error {
	if t.tel == nil {
		return errTelemetryDisabled()
	}
	var req telemetryPatch
	if err := t.s.Decode(c, &req); err != nil {
		return err
	}
	p := redfish.PrincipalOf(c)
	if err := t.s.IfMatch(c, t.service(p)); err != nil {
		return err
	}
	if req.Oem == nil || req.Oem.CxlPool == nil || req.Oem.CxlPool.CHMU == nil {
		return t.s.WriteResource(c, http.StatusOK, t.service(p))
	}
	patch := req.Oem.CxlPool.CHMU
	cur, enabled, err := t.tel.CHMUConfig()
	if err != nil {
		return redfish.ErrInternal(err)
	}
	if patch.Enabled != nil {
		enabled = *patch.Enabled
	}
	edits := patch.edits()
	// Each change alone must suit the device, so a refusal names the
	// property; then all of them together.
	next := cur
	for _, e := range edits {
		one := cur
		if err := e.apply(&one); err != nil {
			return err
		}
		if err := t.tel.ValidateCHMU(one); err != nil {
			return redfish.ErrPropertyValueNotInList(e.value, e.prop).WithCause(err)
		}
		_ = e.apply(&next)
	}
	if err := t.tel.ValidateCHMU(next); err != nil {
		return redfish.ErrPropertyValueConflict(edits[0].prop, edits[len(edits)-1].prop).WithCause(err)
	}
	if err := t.tel.SetCHMU(c.Request().Context(), next, enabled); err != nil {
		if errors.Is(err, hmu.ErrUnsupported) {
			return redfish.NewError(http.StatusBadRequest, redfish.M("Base.GeneralError")).WithCause(err)
		}
		return redfish.ErrInternal(err)
	}
	t.s.Publish(redfish.Event{MessageKey: redfish.MsgResourceChanged, Origin: telemetryServiceURI})
	return t.s.WriteResource(c, http.StatusOK, t.service(p))
}

// --- definitions ---

func metricDefinition(id string) redfish.Obj {
	for _, d := range metricDefinitions {
		if d.id == id {
			return redfish.Obj{
				"@odata.id":      metricDefinitionsURI + "/" + d.id,
				"@odata.type":    "#MetricDefinition.v1_3_5.MetricDefinition",
				"Id":             d.id,
				"Name":           d.name,
				"Description":    d.desc,
				"MetricType":     d.typ,
				"MetricDataType": d.dataType,
				"Units":          d.units,
				"Implementation": "Calculated",
				"IsLinear":       true,
			}
		}
	}
	return nil
}

// scopeSubject is the resource a scope's whole-scope metrics are about.
func scopeSubject(scope int) string {
	if scope >= 0 {
		return SystemURI(dcd.HostID(scope))
	}
	return MemoryDomainURI
}

// scopeMetrics lists a scope's metric Ids in report order.
func scopeMetrics(scope int) []string {
	if scope == agg.Pool {
		return []string{metricAccesses, metricMonitored, metricBound, metricHotUnit}
	}
	return []string{metricAccesses, metricHeld, metricCold, metricMonitored, metricBound, metricHotUnit}
}

func scopeName(id string) string {
	switch id {
	case scopeShared:
		return "capacity shared by several hosts"
	case scopePool:
		return "the whole pool"
	}
	return id + "'s pool memory"
}

func (t *telemetryAPI) definition(id string) redfish.Obj {
	sc, _ := t.scopeOf(id)
	var metrics []redfish.Obj
	for _, m := range scopeMetrics(sc) {
		metrics = append(metrics, redfish.Obj{"MetricId": m, "MetricProperties": []string{scopeSubject(sc)}, "CollectionTimeScope": "Interval"})
	}
	return redfish.Obj{
		"@odata.id":                     reportDefinitionsURI + "/" + id,
		"@odata.type":                   "#MetricReportDefinition.v1_4_7.MetricReportDefinition",
		"Id":                            id,
		"Name":                          "Hot pages of " + scopeName(id),
		"Description":                   "Decayed CHMU access counts and the hottest units (Space-Saving top-K), generated on request",
		"MetricReportDefinitionType":    "OnRequest",
		"MetricReportDefinitionEnabled": true,
		"ReportUpdates":                 "Overwrite",
		"ReportActions":                 []string{"LogToMetricReportsCollection"},
		"Metrics":                       metrics,
		"MetricReport":                  redfish.Link(metricReportsURI + "/" + id),
		"Status":                        redfish.Obj{"State": "Enabled", "Health": "OK"},
	}
}

// --- reports ---

// holder finds the memory resource of a unit: the host's Memory for the
// grant holding dpa (host scopes), else the chunk.
type holder struct {
	grants []dcd.Grant
}

func (t *telemetryAPI) holder(ctx context.Context) holder {
	if t.s.capacity == nil {
		return holder{}
	}
	v, err := t.s.capacity.snapshot(ctx)
	if err != nil {
		t.s.log.Debug("telemetry: no capacity view for unit links", "err", err)
		return holder{}
	}
	return holder{grants: v.grants}
}

func (h holder) uri(scope int, dpa uint64) string {
	for _, g := range h.grants {
		if scope >= 0 && int(g.Host) != scope {
			continue
		}
		for _, e := range g.Extents {
			if dpa >= e.DPA && dpa < e.End() {
				if scope >= 0 {
					return SystemMemoryURI(g.Host, g.Chunk)
				}
				return ChunkURI(g.Chunk)
			}
		}
	}
	return MemoryDomainURI
}

// within keeps the hot units inside extents.
func within(hot []agg.Hot, extents []cci.Extent) []agg.Hot {
	var out []agg.Hot
	for _, u := range hot {
		if slices.ContainsFunc(extents, func(e cci.Extent) bool { return u.DPA >= e.DPA && u.DPA < e.End() }) {
			out = append(out, u)
		}
	}
	return out
}

func count(v float64) string { return strconv.FormatFloat(math.Round(v), 'f', 0, 64) }

func (t *telemetryAPI) report(ctx context.Context, id string) (redfish.Obj, error) {
	sc, ok := t.scopeOf(id)
	if !ok {
		return nil, redfish.ErrResourceNotFound("MetricReport", id)
	}
	now := t.s.now().Format(time.RFC3339)
	rep := t.tel.Report()
	var sr agg.ScopeReport
	for _, r := range rep.Scopes {
		if r.Scope == sc {
			sr = r
		}
	}
	subject := scopeSubject(sc)
	mv := func(metric, value, prop string) redfish.Obj {
		return redfish.Obj{"MetricId": metric, "MetricValue": value, "Timestamp": now, "MetricProperty": prop}
	}
	values := []redfish.Obj{mv(metricAccesses, count(sr.Accesses), subject)}
	if sc != agg.Pool {
		values = append(values,
			mv(metricHeld, strconv.FormatUint(sr.HeldBytes, 10), subject),
			mv(metricCold, strconv.FormatUint(sr.ColdBytes, 10), subject))
	}
	values = append(values,
		mv(metricMonitored, strconv.Itoa(sr.Monitored), subject),
		mv(metricBound, strconv.FormatUint(sr.ErrorBound, 10), subject))

	hold := t.holder(ctx)
	hot := t.tel.Top(sc, reportTopN)
	type unit struct {
		agg.Hot
		shared bool
	}
	units := make([]unit, 0, len(hot))
	for _, u := range hot {
		units = append(units, unit{Hot: u})
	}
	if sc >= 0 {
		// A host also sees the hot units of the shared capacity it holds.
		for _, u := range within(t.tel.Top(agg.Shared, 4*reportTopN), t.tel.Extents(sc)) {
			units = append(units, unit{Hot: u, shared: true})
		}
		slices.SortStableFunc(units, func(a, b unit) int { return cmp.Compare(b.Count, a.Count) })
		units = units[:min(len(units), reportTopN)]
	}
	for _, u := range units {
		v := mv(metricHotUnit, strconv.FormatUint(u.Count, 10), hold.uri(sc, u.DPA))
		oem := redfish.Obj{"DPA": u.DPA, "Bytes": u.Size, "ErrorBound": u.Err}
		if sc >= 0 {
			oem["Shared"] = u.shared
		}
		v["Oem"] = oemschema.Oem("MetricValue", oem)
		values = append(values, v)
	}

	oem := redfish.Obj{"UnitBytes": rep.UnitSize}
	if sc >= 0 {
		oem["Hints"] = t.hints(sc, hold)
	}
	if sc == agg.Pool {
		st := rep.Stats
		oem["Collector"] = redfish.Obj{"Records": st.Records, "Accesses": st.Weight, "Unmapped": st.Unmapped, "Drains": st.Drains,
			"DrainErrors": st.DrainErrors, "Overflows": st.Overflows, "Epochs": st.Epochs, "Resets": st.Resets}
	}
	return redfish.Obj{
		"@odata.id":              metricReportsURI + "/" + id,
		"@odata.type":            "#MetricReport.v1_5_2.MetricReport",
		"Id":                     id,
		"Name":                   "Hot pages of " + scopeName(id),
		"Timestamp":              now,
		"MetricReportDefinition": redfish.Link(reportDefinitionsURI + "/" + id),
		"MetricValues":           values,
		"Oem":                    oemschema.Oem("MetricReport", oem),
	}, nil
}

// hints is a host's placement advice: the units to keep close and the
// memory that has gone cold.
func (t *telemetryAPI) hints(host int, hold holder) redfish.Obj {
	h := t.tel.Hints(host, hintTopN)
	promote := []redfish.Obj{}
	for _, u := range h.Promote {
		promote = append(promote, redfish.Obj{"DPA": u.DPA, "Bytes": u.Size, "Accesses": u.Count, "ErrorBound": u.Err,
			"Memory": redfish.Link(hold.uri(host, u.DPA))})
	}
	shrink := []redfish.Obj{}
	for _, a := range h.Shrink {
		o := redfish.Obj{"Bytes": a.Bytes, "ColdBytes": a.ColdBytes}
		if len(a.Extents) > 0 {
			o["Memory"] = redfish.Link(hold.uri(host, a.Extents[0].DPA))
		}
		shrink = append(shrink, o)
	}
	return redfish.Obj{"Promote": promote, "Shrink": shrink, "HeldBytes": h.HeldBytes, "ColdBytes": h.ColdBytes}
}

// --- stream ---

// issueTicket answers a single-use ticket that opens the stream as the
// caller, for clients (browsers) that cannot send headers with a
// WebSocket upgrade.
func (t *telemetryAPI) issueTicket(c echo.Context) error {
	p := redfish.PrincipalOf(c)
	var raw [32]byte
	_, _ = rand.Read(raw[:])
	tok := base64.RawURLEncoding.EncodeToString(raw[:])
	now := t.s.now()
	t.mu.Lock()
	for k, v := range t.tickets {
		if now.After(v.expires) {
			delete(t.tickets, k)
		}
	}
	if len(t.tickets) >= maxTickets {
		t.mu.Unlock()
		return redfish.ErrServiceUnavailable(int(ticketTTL / time.Second))
	}
	t.tickets[sha256.Sum256([]byte(tok))] = streamTicket{accountUID: p.AccountUID, sessionID: p.SessionID,
		passwordHash: p.PasswordHash, expires: now.Add(ticketTTL)}
	t.mu.Unlock()
	return t.s.WriteResource(c, http.StatusOK, redfish.Obj{
		"Ticket":           tok,
		"ExpiresInSeconds": int(ticketTTL / time.Second),
		"StreamUri":        TelemetryStreamURI + "?ticket=" + tok,
	})
}

// redeem turns a ticket into its principal, once.
func (t *telemetryAPI) redeem(tok string) (*redfish.Principal, bool) {
	h := sha256.Sum256([]byte(tok))
	t.mu.Lock()
	tk, ok := t.tickets[h]
	delete(t.tickets, h)
	t.mu.Unlock()
	if !ok || t.s.now().After(tk.expires) {
		return nil, false
	}
	acct, found := t.s.Store().AccountByUID(tk.accountUID)
	if !found || !acct.Enabled {
		return nil, false
	}
	p := t.s.Auth().Principal(acct, tk.sessionID)
	p.PasswordHash = tk.passwordHash
	if !t.s.Auth().Valid(p) { // session ended, or (Basic) password changed
		return nil, false
	}
	return p, true
}

// serveStream upgrades to the WebSocket stream of the caller's scope:
// everything for appliance viewers, its own frames for a host.
func (t *telemetryAPI) serveStream(c echo.Context) error {
	var p *redfish.Principal
	if tok := c.QueryParam("ticket"); tok != "" {
		var ok bool
		if p, ok = t.redeem(tok); !ok {
			return redfish.ErrNoValidSession()
		}
	} else {
		var err error
		if p, err = t.s.Auth().Authenticate(c); err != nil {
			return err
		}
	}
	redfish.SetPrincipal(c, p)
	if t.tel == nil {
		return errTelemetryDisabled()
	}
	scope := agg.Pool
	switch {
	case p.IsHost():
		scope = int(*p.HostID)
	case !p.Has(redfish.PrivApplianceView):
		return redfish.ErrInsufficientPrivilege()
	}
	hub := t.tel.Stream(scope)
	if hub == nil {
		return redfish.ErrResourceNotFound("Stream", SystemID(dcd.HostID(scope)))
	}
	if !websocket.IsWebSocketUpgrade(c.Request()) {
		return redfish.NewError(http.StatusBadRequest, redfish.M("Base.HeaderMissing", "Upgrade: websocket"))
	}
	// The stream ends when its principal does (authenticator.watch):
	// the handler closes the socket when the request's context ends.
	alive, stop := t.s.Auth().Watch(c.Request().Context(), p)
	defer stop()
	stream.NewHandler(hub, stream.HandlerConfig{Logger: t.s.log}).ServeHTTP(c.Response(), c.Request().WithContext(alive))
	return nil
}
