package api_test

import (
	"context"
	"net/http"
	"slices"
	"testing"

	"cxlpool/api/apitest"
)

const (
	triggersURI  = "/redfish/v1/TelemetryService/Triggers"
	poolFreeLow  = triggersURI + "/PoolFreeLow"
	poolHistory  = "/redfish/v1/TelemetryService/MetricReports/PoolHistory"
	hostHistory  = "/redfish/v1/TelemetryService/MetricReports/HostHistory"
	eventEntries = "/redfish/v1/Managers/FM/LogServices/EventLog/Entries?$expand=."
)

// sample runs one history round now.
func sample(t *testing.T, env *apitest.Env) {
	t.Helper()
	if env.App.History == nil {
		t.Fatal("the appliance has no history")
	}
	if err := env.App.History.Sample(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// eventLogIDs lists the EventLog's MessageIds.
func eventLogIDs(t *testing.T, env *apitest.Env) []string {
	t.Helper()
	var out []string
	for _, m := range env.Admin.GetOK(eventEntries)["Members"].([]any) {
		out = append(out, m.(map[string]any)["MessageId"].(string))
	}
	return out
}

// TestHistoryReports: the history's reports and definitions are listed
// beside the CHMU's, validate, and hold the sampled series with their
// bucket's min and max; a host account reads only its own host's series.
func TestHistoryReports(t *testing.T) {
	env := apitest.NewServer(t)
	sample(t, env)
	col := env.Admin.GetOK("/redfish/v1/TelemetryService/MetricReports")
	var ids []string
	for _, m := range col["Members"].([]any) {
		ids = append(ids, m.(map[string]any)["@odata.id"].(string))
	}
	for _, want := range []string{poolHistory, hostHistory} {
		if !slices.Contains(ids, want) {
			t.Errorf("MetricReports: %v lacks %s", ids, want)
		}
	}
	env.Admin.GetOK("/redfish/v1/TelemetryService/MetricReportDefinitions/PoolHistory")
	rep := env.Admin.GetOK(poolHistory)
	var free []any
	for _, v := range rep["MetricValues"].([]any) {
		mv := v.(map[string]any)
		if mv["MetricId"] == "PoolFreePercent" {
			free = append(free, mv)
		}
	}
	// The history's own sampler may have run a round beside the test's
	// (its 10 s tick): at least one, each of an empty pool.
	if len(free) == 0 {
		t.Fatalf("PoolFreePercent values: got none, want the sampled round's: %v", rep["MetricValues"])
	}
	mv := free[len(free)-1].(map[string]any)
	if got, want := mv["MetricValue"], "100"; got != want {
		t.Errorf("PoolFreePercent of an empty pool: got %v, want %v", got, want)
	}
	if got, want := mv["MetricProperty"], "/redfish/v1/Chassis/Pool/MemoryDomains/Pool"; got != want {
		t.Errorf("MetricProperty: got %v, want %v", got, want)
	}
	// The host's view: only its own host.
	hrep := env.Host0.GetOK(hostHistory)
	for _, v := range hrep["MetricValues"].([]any) {
		if p := v.(map[string]any)["MetricProperty"]; p != "/redfish/v1/Systems/Host0" {
			t.Errorf("Host0 sees a value about %v", p)
		}
	}
	if r := env.Host0.Get(poolHistory); r.Status != http.StatusNotFound {
		t.Errorf("PoolHistory as a host: got %d, want 404", r.Status)
	}
	for _, bad := range []string{"?start=yesterday", "?points=0", "?start=2030-01-01T00:00:00Z&end=2029-01-01T00:00:00Z"} {
		if r := env.Admin.Get(poolHistory + bad); r.Status != http.StatusBadRequest {
			t.Errorf("GET %s: got %d, want 400: %s", bad, r.Status, r.Body)
		}
	}
}

// TestTriggerAlertLifecycle: the default triggers exist; an
// administrator's threshold makes the next round raise a Telemetry event
// of the right severity and an open alert; an operator acknowledges it;
// the way back clears it with ReadingNormal. A read-only user may not
// edit, an operator may not edit, bad thresholds are refused naming why.
func TestTriggerAlertLifecycle(t *testing.T) {
	env := apitest.NewServer(t)
	col := env.Admin.GetOK(triggersURI + "?$expand=.")
	var ids []string
	for _, m := range col["Members"].([]any) {
		apitest.Validate(t, mustJSON(t, m))
		ids = append(ids, m.(map[string]any)["Id"].(string))
	}
	for _, want := range []string{"PoolFreeLow", "HostOverQuota", "TemperatureHigh", "LinkFlaps", "LostGrants", "CertificateExpiry"} {
		if !slices.Contains(ids, want) {
			t.Errorf("triggers %v lack the default %s", ids, want)
		}
	}
	for _, c := range []*apitest.Client{env.ReadOnly, env.Operator} {
		if r := c.Patch(poolFreeLow, map[string]any{"TriggerEnabled": false}); r.Status != http.StatusForbidden {
			t.Errorf("PATCH as %s: got %d, want 403", c.User, r.Status)
		}
	}
	if r := env.Admin.Patch(poolFreeLow, map[string]any{"NumericThresholds": map[string]any{"LowerCritical": map[string]any{"Reading": 50}}}); r.Status != http.StatusBadRequest {
		t.Errorf("LowerCritical above LowerWarning: got %d, want 400: %s", r.Status, r.Body)
	}
	// Free is 100 %: a warning below 101 % crosses at once.
	r := env.Admin.Patch(poolFreeLow, map[string]any{"NumericThresholds": map[string]any{"LowerWarning": map[string]any{"Reading": 101}}})
	if r.Status != http.StatusOK {
		t.Fatalf("PATCH: got %d: %s", r.Status, r.Body)
	}
	sample(t, env)
	trig := env.Admin.GetOK(poolFreeLow)
	if got, want := trig["Status"].(map[string]any)["Health"], "Warning"; got != want {
		t.Errorf("Health with an open alert: got %v, want %v", got, want)
	}
	alerts := trig["Oem"].(map[string]any)["CxlPool"].(map[string]any)["Alerts"].([]any)
	if len(alerts) != 1 || alerts[0].(map[string]any)["Acknowledged"] != false {
		t.Fatalf("alerts: got %v, want one unacknowledged", alerts)
	}
	if ids := eventLogIDs(t, env); !slices.Contains(ids, "Telemetry.1.1.TriggerNumericBelowLowerWarning") {
		t.Errorf("EventLog %v lacks the crossing", ids)
	}
	if r := env.ReadOnly.Post(poolFreeLow+"/Actions/Oem/CxlPool.Acknowledge", map[string]any{}); r.Status != http.StatusForbidden {
		t.Errorf("acknowledge as read-only: got %d, want 403", r.Status)
	}
	if r := env.Operator.Post(poolFreeLow+"/Actions/Oem/CxlPool.Acknowledge", map[string]any{"MetricProperty": "/redfish/v1/Systems/Host1"}); r.Status != http.StatusBadRequest {
		t.Errorf("acknowledge of a series with no alert: got %d, want 400", r.Status)
	}
	if r := env.Operator.Post(poolFreeLow+"/Actions/Oem/CxlPool.Acknowledge", map[string]any{}); r.Status != http.StatusOK {
		t.Fatalf("acknowledge: got %d: %s", r.Status, r.Body)
	}
	trig = env.Admin.GetOK(poolFreeLow)
	a := trig["Oem"].(map[string]any)["CxlPool"].(map[string]any)["Alerts"].([]any)[0].(map[string]any)
	if a["Acknowledged"] != true || a["AcknowledgedBy"] != apitest.UserOperator {
		t.Errorf("after acknowledge: %v", a)
	}
	r = env.Admin.Patch(poolFreeLow, map[string]any{"NumericThresholds": map[string]any{"LowerWarning": map[string]any{"Reading": 20}}})
	if r.Status != http.StatusOK {
		t.Fatalf("PATCH back: got %d: %s", r.Status, r.Body)
	}
	sample(t, env)
	trig = env.Admin.GetOK(poolFreeLow)
	if got := trig["Oem"].(map[string]any)["CxlPool"].(map[string]any)["Alerts"].([]any); len(got) != 0 {
		t.Errorf("alerts after recovery: %v", got)
	}
	if ids := eventLogIDs(t, env); !slices.Contains(ids, "Telemetry.1.1.TriggerNumericReadingNormal") {
		t.Errorf("EventLog %v lacks the recovery", ids)
	}
}
