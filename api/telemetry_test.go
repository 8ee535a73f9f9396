package api_test

import (
	"encoding/json"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"cxlpool/api"
	"cxlpool/api/apitest"
	"cxlpool/fabric/cci"
	"cxlpool/hmu/stream"
	"cxlpool/sim"
)

const (
	telemetryURI = "/redfish/v1/TelemetryService"
	reportsURI   = telemetryURI + "/MetricReports"
	reportDefURI = telemetryURI + "/MetricReportDefinitions"
)

// normaliseReport replaces what the collector measures (values, times),
// leaving the report's shape.
func normaliseReport(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			switch k {
			case "MetricValue", "Timestamp":
				x[k] = "<" + k + ">"
			default:
				x[k] = normaliseReport(e)
			}
		}
	case []any:
		for i, e := range x {
			x[i] = normaliseReport(e)
		}
	}
	return v
}

// TestTelemetryResources: the service, its collections and a report
// validate; goldens for the service and a host's report; host accounts
// see only their own scope.
func TestTelemetryResources(t *testing.T) {
	env := apitest.NewServer(t)
	a := env.Admin
	checkGolden(t, "telemetryservice", telemetryURI, a.GetOK(telemetryURI))
	chunk := reserve(t, a, blockMiB, nil)
	connect(t, a, chunk, 0)
	connect(t, a, reserve(t, a, blockMiB, nil), 1)

	rep := a.GetOK(reportsURI + "/Host0")
	for _, mv := range get(rep, "MetricValues").([]any) {
		if get(mv, "MetricId") == "HeldBytes" && get(mv, "MetricValue") != strconv.Itoa(blockMiB<<20) {
			t.Errorf("Host0 HeldBytes: got %v, want %d", get(mv, "MetricValue"), blockMiB<<20)
		}
	}
	if got := get(rep, "Oem", "CxlPool", "Hints", "Shrink", 0, "Memory", "@odata.id"); got != systemURI(0)+"/Memory/"+path.Base(chunk) {
		t.Errorf("Host0 shrink hint: got %v, want its idle chunk's Memory", got)
	}
	checkGolden(t, "metricreport-host0", reportsURI+"/Host0", normaliseReport(rep).(map[string]any))
	for _, u := range []string{telemetryURI + "/MetricDefinitions", telemetryURI + "/MetricDefinitions/HotUnitAccesses",
		reportDefURI, reportDefURI + "/Pool", reportDefURI + "/Host1", reportsURI, reportsURI + "/Pool", reportsURI + "/Shared",
		reportsURI + "?$expand=.", reportDefURI + "?$expand=."} {
		a.GetOK(u)
	}

	all := []string{}
	for h := range 8 {
		all = append(all, reportsURI+"/Host"+strconv.Itoa(h))
	}
	all = append(all, reportsURI+"/Shared", reportsURI+"/Pool")
	// and the history's (metrichistory.go)
	for _, id := range []string{"PoolHistory", "HostHistory", "SensorHistory", "ExportHistory", "CHMUHistory"} {
		all = append(all, reportsURI+"/"+id)
	}
	if got := members(t, env.ReadOnly, reportsURI); !slices.Equal(got, all) {
		t.Errorf("reports seen by a reader: %v", got)
	}
	for _, tc := range []struct {
		c    *apitest.Client
		mine string
	}{{env.Host0, "Host0"}, {env.Host1, "Host1"}} {
		// A host also reads HostHistory, with its own series only.
		if got := members(t, tc.c, reportsURI); !slices.Equal(got, []string{reportsURI + "/" + tc.mine, reportsURI + "/HostHistory"}) {
			t.Errorf("reports seen by %s: %v", tc.c.User, got)
		}
		if got := members(t, tc.c, reportDefURI); !slices.Equal(got, []string{reportDefURI + "/" + tc.mine, reportDefURI + "/HostHistory"}) {
			t.Errorf("report definitions seen by %s: %v", tc.c.User, got)
		}
		tc.c.GetOK(reportsURI + "/" + tc.mine)
		for _, other := range []string{"Host0", "Host1", "Shared", "Pool", "Host9", "Bogus"} {
			if other == tc.mine {
				continue
			}
			wantStatus(t, tc.c.User+" reading "+other, tc.c.Get(reportsURI+"/"+other), http.StatusNotFound, "ResourceNotFound")
			wantStatus(t, tc.c.User+" reading "+other+"'s definition", tc.c.Get(reportDefURI+"/"+other), http.StatusNotFound, "ResourceNotFound")
		}
		if svc := tc.c.GetOK(telemetryURI); get(svc, "Oem", "CxlPool", "CHMU") != nil {
			t.Errorf("%s sees the CHMU configuration", tc.c.User)
		}
	}
	wantStatus(t, "anonymous", env.Anon.Get(reportsURI+"/Pool"), http.StatusUnauthorized, "NoValidSession")
}

// TestTelemetryCHMUSetting: the CHMU configuration is an administrator
// setting, validated against the instance's capabilities.
func TestTelemetryCHMUSetting(t *testing.T) {
	env := apitest.NewServer(t)
	chmu := func(props map[string]any) map[string]any {
		return map[string]any{"Oem": map[string]any{"CxlPool": map[string]any{"CHMU": props}}}
	}
	for _, c := range []*apitest.Client{env.Operator, env.ReadOnly, env.Host0} {
		wantStatus(t, c.User+" PATCH", c.Patch(telemetryURI, chmu(map[string]any{"Threshold": 9})), http.StatusForbidden, "InsufficientPrivilege")
	}
	for _, tc := range []struct {
		name  string
		props map[string]any
		msg   string
	}{
		{"unsupported unit", map[string]any{"UnitBytes": 3000}, "PropertyValueNotInList"},
		{"unit too large", map[string]any{"UnitBytes": 1 << 30}, "PropertyValueNotInList"},
		{"unknown access type", map[string]any{"AccessType": "Sometimes"}, "PropertyValueNotInList"},
		{"zero threshold", map[string]any{"Threshold": 0}, "PropertyValueOutOfRange"},
		{"epoch too fine", map[string]any{"EpochMilliseconds": 0.05}, "PropertyValueOutOfRange"},
		{"epoch beyond the device", map[string]any{"EpochMilliseconds": 3_000_000}, "PropertyValueNotInList"},
		{"down-sampling not a power of two", map[string]any{"DownSamplingFactor": 3}, "PropertyValueNotInList"},
		{"down-sampling beyond the device", map[string]any{"DownSamplingFactor": 1024}, "PropertyValueNotInList"},
		{"fill threshold past the ring", map[string]any{"FillThreshold": 4096}, "PropertyValueNotInList"},
		{"range past the bitmap", map[string]any{"Ranges": []int{1 << 20}}, "PropertyValueNotInList"},
		{"ranges of strings", map[string]any{"Ranges": []string{"x"}}, "PropertyValueTypeError"},
		{"unknown property", map[string]any{"Colour": "red"}, "PropertyUnknown"},
		{"enabled as a string", map[string]any{"Enabled": "yes"}, "PropertyValueTypeError"},
	} {
		wantStatus(t, tc.name, env.Admin.Patch(telemetryURI, chmu(tc.props)), http.StatusBadRequest, tc.msg)
	}
	wantStatus(t, "stale If-Match", env.Admin.Patch(telemetryURI, chmu(map[string]any{"Threshold": 9}), "If-Match", `"stale"`),
		http.StatusPreconditionFailed, "")
	wantStatus(t, "read-only ServiceEnabled", env.Admin.Patch(telemetryURI, map[string]any{"ServiceEnabled": false}), http.StatusBadRequest, "PropertyNotWritable")

	r := env.Admin.Patch(telemetryURI, chmu(map[string]any{"Threshold": 9, "UnitBytes": 8192, "EpochMilliseconds": 250,
		"AccessType": "Read", "DownSamplingFactor": 2, "Ranges": []int{0, 3}, "Enabled": false}))
	if r.Status != http.StatusOK {
		t.Fatalf("PATCH CHMU: got %s, want 200", r)
	}
	apitest.Validate(t, r.Body)
	got := get(r.JSON(t), "Oem", "CxlPool", "CHMU")
	want := map[string]any{"Threshold": 9.0, "UnitBytes": 8192.0, "EpochMilliseconds": 250.0, "AccessType": "Read",
		"DownSamplingFactor": 2.0, "Ranges": []any{0.0, 3.0}, "Enabled": false}
	for k, v := range want {
		if g := get(got, k); !equalJSON(g, v) {
			t.Errorf("after PATCH, CHMU %s: got %v, want %v", k, g, v)
		}
	}
	if cfg, enabled, _ := env.App.Telemetry.CHMUConfig(); cfg.UnitSize != 8192 || cfg.Threshold != 9 || enabled {
		t.Errorf("device configuration after PATCH: %+v, enabled %v", cfg, enabled)
	}
	r = env.Admin.Patch(telemetryURI, chmu(map[string]any{"Ranges": nil, "Enabled": true}))
	if r.Status != http.StatusOK || get(r.JSON(t), "Oem", "CxlPool", "CHMU", "Ranges") != nil ||
		get(r.JSON(t), "Oem", "CxlPool", "CHMU", "Enabled") != true {
		t.Errorf("PATCH Ranges null, Enabled: got %s", r)
	}
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestTelemetryDisabled: without a CHMU the service says so and its
// resources answer 503 ServiceDisabled.
func TestTelemetryDisabled(t *testing.T) {
	env := apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) { c.Telemetry = nil }})
	svc := env.Admin.GetOK(telemetryURI)
	if svc["ServiceEnabled"] != false || get(svc, "Status", "State") != "Disabled" || get(svc, "Oem", "CxlPool", "DisabledReason") == nil {
		t.Errorf("disabled TelemetryService: %v", svc)
	}
	for _, u := range []string{reportsURI + "/Pool", reportDefURI + "/Pool", telemetryURI + "/MetricDefinitions", api.TelemetryStreamURI} {
		wantStatus(t, "GET "+u, env.Admin.Get(u), http.StatusServiceUnavailable, "ServiceDisabled")
	}
	// The history's reports do not need a CHMU.
	if got := members(t, env.Admin, reportsURI); len(got) != 5 || got[0] != reportsURI+"/PoolHistory" {
		t.Errorf("reports without a CHMU: got %v, want the history's five", got)
	}
	noHistory := apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) { c.Telemetry, c.History = nil, nil }})
	for _, u := range []string{reportsURI, reportDefURI} {
		wantStatus(t, "GET "+u+" without history", noHistory.Admin.Get(u), http.StatusServiceUnavailable, "ServiceDisabled")
	}
	wantStatus(t, "PATCH", env.Admin.Patch(telemetryURI, map[string]any{}), http.StatusServiceUnavailable, "ServiceDisabled")
	wantStatus(t, "ticket", env.Admin.Post(api.TelemetryTicketURI, nil), http.StatusServiceUnavailable, "ServiceDisabled")
}

type hotUnit struct {
	dpa    uint64
	shared bool
	memory string
}

// hotUnits lists a report's hot units.
func hotUnits(t *testing.T, rep map[string]any) []hotUnit {
	t.Helper()
	var out []hotUnit
	for _, mv := range get(rep, "MetricValues").([]any) {
		if get(mv, "MetricId") != "HotUnitAccesses" {
			continue
		}
		shared, _ := get(mv, "Oem", "CxlPool", "Shared").(bool)
		out = append(out, hotUnit{dpa: uint64(get(mv, "Oem", "CxlPool", "DPA").(float64)), shared: shared, memory: get(mv, "MetricProperty").(string)})
	}
	return out
}

func inExtents(dpa uint64, es []cci.Extent) bool {
	return slices.ContainsFunc(es, func(e cci.Extent) bool { return dpa >= e.DPA && dpa < e.End() })
}

func extentsOf(env *apitest.Env, host int, tag string) []cci.Extent {
	var out []cci.Extent
	for _, e := range env.App.Box.Host(host).Extents() {
		if e.Tag.String() == tag {
			out = append(out, e)
		}
	}
	return out
}

func wsDial(t *testing.T, env *apitest.Env, uri string, hdr http.Header) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	return websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(env.HTTP.URL, "http")+uri, hdr)
}

// readFrames reads frames until it has a heatmap and a top-K of every
// scope in want.
func readFrames(t *testing.T, c *websocket.Conn, want ...int16) (stream.Heatmap, map[int16]stream.TopK) {
	t.Helper()
	var hm stream.Heatmap
	tops := map[int16]stream.TopK{}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	for hm.Cells == nil || slices.ContainsFunc(want, func(s int16) bool { _, ok := tops[s]; return !ok }) {
		_, msg, err := c.ReadMessage()
		if err != nil {
			t.Fatalf("reading frames: %v", err)
		}
		hd, err := stream.DecodeHeader(msg)
		if err != nil {
			t.Fatal(err)
		}
		switch hd.Kind {
		case stream.KindHeatmap:
			if hm, err = stream.DecodeHeatmap(msg); err != nil {
				t.Fatal(err)
			}
		case stream.KindTopK:
			k, err := stream.DecodeTopK(msg)
			if err != nil {
				t.Fatal(err)
			}
			tops[k.Scope] = k
		}
	}
	return hm, tops
}

// TestTelemetryKVCacheEndToEnd grants two hosts private capacity and a
// shared prefix, runs the virtual box's KV-cache workload on both, and
// reads what each sees: hot units in its own extents and in the shared
// prefix, over the MetricReport and over the WebSocket stream.
func TestTelemetryKVCacheEndToEnd(t *testing.T) {
	env := apitest.NewServer(t)
	a := env.Admin
	shared := reserve(t, a, blockMiB, map[string]any{"Sharable": true})
	sharedTag := get(a.GetOK(shared), "Oem", "CxlPool", "Tag").(string)
	connect(t, a, shared, 0)
	connect(t, a, shared, 1)
	priv := map[int]string{}
	for _, h := range []int{0, 1} {
		priv[h] = reserve(t, a, blockMiB, nil)
		connect(t, a, priv[h], h)
	}
	for _, h := range []int{0, 1} {
		if err := env.App.Box.StartWorkload(h, sim.WorkloadKVCache, sim.WorkloadParams{Rate: 50_000}); err != nil {
			t.Fatal(err)
		}
	}
	sharedExt := extentsOf(env, 0, sharedTag)

	for _, tc := range []struct {
		h int
		c *apitest.Client
	}{{0, env.Host0}, {1, env.Host1}} {
		privTag := get(a.GetOK(priv[tc.h]), "Oem", "CxlPool", "Tag").(string)
		privExt := extentsOf(env, tc.h, privTag)
		var units []hotUnit
		deadline := time.Now().Add(30 * time.Second)
		for {
			units = hotUnits(t, tc.c.GetOK(reportsURI+"/Host"+strconv.Itoa(tc.h)))
			if slices.ContainsFunc(units, func(u hotUnit) bool { return u.shared }) && slices.ContainsFunc(units, func(u hotUnit) bool { return !u.shared }) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Host%d: no private and shared hot units after 30 s: %+v", tc.h, units)
			}
			time.Sleep(20 * time.Millisecond)
		}
		for _, u := range units {
			wantExt, wantMem := privExt, systemURI(tc.h)+"/Memory/"+path.Base(priv[tc.h])
			if u.shared {
				wantExt, wantMem = sharedExt, systemURI(tc.h)+"/Memory/"+path.Base(shared)
			}
			if !inExtents(u.dpa, wantExt) || u.memory != wantMem {
				t.Errorf("Host%d hot unit %#x (shared %v) in %s: want inside %+v in %s", tc.h, u.dpa, u.shared, u.memory, wantExt, wantMem)
			}
		}
	}
	pool := a.GetOK(reportsURI + "/Pool")
	if len(hotUnits(t, pool)) == 0 || get(pool, "Oem", "CxlPool", "Collector", "Records").(float64) == 0 {
		t.Errorf("pool report without hot units or records: %v", get(pool, "Oem"))
	}

	// The stream as Host0, with a ticket as a browser would: only cells
	// wholly inside what Host0 holds carry heat, and only its scopes.
	r := env.Host0.Post(api.TelemetryTicketURI, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("ticket: got %s", r)
	}
	uri := r.JSON(t)["StreamUri"].(string)
	c, _, err := wsDial(t, env, uri, nil)
	if err != nil {
		t.Fatalf("stream with a ticket: %v", err)
	}
	held := env.App.Box.Host(0).Extents()
	var hm stream.Heatmap
	deadline := time.Now().Add(30 * time.Second)
	for {
		var tops map[int16]stream.TopK
		hm, tops = readFrames(t, c, 0, -1)
		for s := range tops {
			if s != 0 && s != -1 {
				t.Errorf("Host0's stream carries scope %d", s)
			}
		}
		if slices.ContainsFunc(hm.Cells, func(q uint8) bool { return q != 0 }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Host0's heatmap stayed cold for 30 s")
		}
	}
	c.Close()
	cell := uint64(1) << hm.CellShift
	for i, q := range hm.Cells {
		lo, hi := uint64(i)*cell, uint64(i+1)*cell
		if q != 0 && !slices.ContainsFunc(held, func(e cci.Extent) bool { return lo >= e.DPA && hi <= e.End() }) {
			t.Errorf("Host0 heatmap cell %d [%#x, %#x) shows heat outside Host0's extents", i, lo, hi)
		}
	}
	if _, resp, err := wsDial(t, env, uri, nil); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("reused ticket: got %v, want 401", err)
	}

	// The stream as the admin, with the session header: every scope.
	c, _, err = wsDial(t, env, api.TelemetryStreamURI, http.Header{"X-Auth-Token": {a.Token}})
	if err != nil {
		t.Fatalf("stream with a session token: %v", err)
	}
	hm, _ = readFrames(t, c, 0, 1, -1, -2)
	c.Close()
	if len(hm.Cells) == 0 {
		t.Error("admin heatmap has no cells")
	}
}

// TestTelemetryStreamAuth: the stream's upgrade is authenticated like
// any request, tickets are single use and short-lived.
func TestTelemetryStreamAuth(t *testing.T) {
	env := apitest.NewServer(t)
	if _, resp, err := wsDial(t, env, api.TelemetryStreamURI, nil); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no credentials: got %v, want 401", err)
	}
	if _, resp, err := wsDial(t, env, api.TelemetryStreamURI+"?ticket=forged", nil); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("forged ticket: got %v, want 401", err)
	}
	wantStatus(t, "anonymous ticket", env.Anon.Post(api.TelemetryTicketURI, nil), http.StatusUnauthorized, "NoValidSession")
	r := env.Admin.Post(api.TelemetryTicketURI, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("ticket: got %s", r)
	}
	env.Clock.Advance(31 * time.Second)
	if _, resp, err := wsDial(t, env, r.JSON(t)["StreamUri"].(string), nil); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("expired ticket: got %v, want 401", err)
	}
	// A ticket dies with the session it was issued in.
	s := env.Login(apitest.UserReadOnly, apitest.UserPassword)
	r = s.Post(api.TelemetryTicketURI, nil)
	if d := env.Admin.Delete(s.Session); d.Status != http.StatusNoContent {
		t.Fatalf("delete session: %s", d)
	}
	if _, resp, err := wsDial(t, env, r.JSON(t)["StreamUri"].(string), nil); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("ticket of a closed session: got %v, want 401", err)
	}
	// Basic credentials open it; a plain GET is not an upgrade.
	hdr := http.Header{}
	req, _ := http.NewRequest(http.MethodGet, "/", nil)
	req.SetBasicAuth(apitest.UserReadOnly, apitest.UserPassword)
	hdr.Set("Authorization", req.Header.Get("Authorization"))
	c, _, err := wsDial(t, env, api.TelemetryStreamURI, hdr)
	if err != nil {
		t.Fatalf("stream with Basic: %v", err)
	}
	c.Close()
	wantStatus(t, "plain GET", env.Admin.Get(api.TelemetryStreamURI), http.StatusBadRequest, "HeaderMissing")
}
