package telemetry

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/gorilla/websocket"
	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/oemschema"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
	"cxlpool/fabric/cci"
	"cxlpool/hmu/agg"
	"cxlpool/hmu/stream"
)

// The TelemetryService's metric definitions, reports, placement hints
// and the WebSocket stream of frames.

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
		return pool.SystemURI(dcd.HostID(scope))
	}
	return pool.MemoryDomainURI
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
	if t.s.cfg.Grants == nil {
		return holder{}
	}
	grants, err := t.s.cfg.Grants(ctx)
	if err != nil {
		t.s.log.Debug("telemetry: no capacity view for unit links", "err", err)
		return holder{}
	}
	return holder{grants: grants}
}

func (h holder) uri(scope int, dpa uint64) string {
	for _, g := range h.grants {
		if scope >= 0 && int(g.Host) != scope {
			continue
		}
		for _, e := range g.Extents {
			if dpa >= e.DPA && dpa < e.End() {
				if scope >= 0 {
					return pool.SystemMemoryURI(g.Host, g.Chunk)
				}
				return pool.ChunkURI(g.Chunk)
			}
		}
	}
	return pool.MemoryDomainURI
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
		return redfish.ErrResourceNotFound("Stream", pool.SystemID(dcd.HostID(scope)))
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
