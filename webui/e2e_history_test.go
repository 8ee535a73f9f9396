package webui_test

import (
	"context"
	"math"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"cxlpool/api/apitest"
	"cxlpool/appliance"
	"cxlpool/history"
	historystore "cxlpool/history/sqlite"
)

// seedHistory writes the last hour of history, one round every 10 s, into
// the box's store beside the running service (which has sampled once, so
// that the series exist): hosts growing their grants, sensors drifting,
// exports reading. Only the test does this; the box samples itself.
func seedHistory(t *testing.T, env *apitest.Env) {
	t.Helper()
	ctx := context.Background()
	if err := env.App.History.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	series, err := env.App.History.Series(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := historystore.Open(ctx, filepath.Join(env.Config.DataDir, appliance.HistoryFile), historystore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	const rounds = 360
	for i := range rounds {
		at := now.Add(time.Duration(i-rounds) * history.FineStep)
		f := float64(i) / rounds
		var round []history.Sample
		for _, x := range series {
			var v float64
			switch {
			// Rising and falling back to what the box holds now (nothing).
			case x.Metric == appliance.MetricHostGrantedBytes:
				n := float64(x.Subject[len(x.Subject)-1] - '0')
				v = math.Round(4*f*(1-f)*(2+n)) * (1 << 30)
			case x.Metric == appliance.MetricPoolFreeBytes:
				v = (1024 - 4*f*(1-f)*44) * (1 << 30)
			case x.Metric == appliance.MetricPoolGrantedBytes:
				v = 4 * f * (1 - f) * 36 * (1 << 30)
			case x.Metric == appliance.MetricPoolReservedBytes:
				v = 4 * f * (1 - f) * 8 * (1 << 30)
			case strings.HasPrefix(x.Metric, appliance.MetricSensorPrefix):
				v = 30 + 5*math.Sin(f*6)
			case x.Metric == appliance.MetricExportReadBps:
				v = 200 * (1 << 20) * f
			default:
				continue
			}
			round = append(round, history.Sample{Series: x, Value: v})
		}
		if err := st.Add(ctx, at, round); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHistoryAndAlertsInBrowser: the dashboard opens with sparklines and
// the per-host chart of the last hour already drawn, and so do the sensor
// and export charts; the time axes read as wall-clock times. An alert
// raised by a threshold shows in the notification area and the
// dashboard's health; an operator acknowledges it there; an administrator
// edits the threshold on the alerts page, after which the next round
// clears the alert. A read-only user sees the alerts without buttons.
func TestHistoryAndAlertsInBrowser(t *testing.T) {
	skipBrowser(t)
	env := apitest.NewServer(t)
	seedHistory(t, env)
	b := newBrowser(t, env.HTTP.URL)

	// The other triggers stay quiet (the fixture's hwmon has an 86 °C
	// sensor, the test certificate's term follows the API's clock).
	for _, id := range []string{"TemperatureHigh", "CertificateExpiry", "HostOverQuota", "LinkFlaps", "LostGrants"} {
		if r := env.Admin.Patch("/redfish/v1/TelemetryService/Triggers/"+id, map[string]any{"TriggerEnabled": false}); r.Status != 200 {
			t.Fatalf("disable %s: %s", id, r)
		}
	}
	// Free is 100 %: a warning below 101 % raises an alert at the next round.
	r := env.Admin.Patch("/redfish/v1/TelemetryService/Triggers/PoolFreeLow",
		map[string]any{"NumericThresholds": map[string]any{"LowerWarning": map[string]any{"Reading": 101}}})
	if r.Status != 200 {
		t.Fatalf("PATCH trigger: %s", r)
	}
	if err := env.App.History.Sample(context.Background()); err != nil {
		t.Fatal(err)
	}

	b.login(apitest.UserOperator, apitest.UserPassword)
	b.page("dashboard", "Dashboard")
	b.wait("pool sparklines", `document.querySelectorAll('#pool-sparks svg.spark').length === 3`)
	b.wait("per-host chart with the hour", `(() => { const c = document.querySelector('#host-history'); return c && Number(c.dataset.points) >= 150 && c.querySelector('canvas'); })()`)
	b.wait("alerts in health", `document.querySelector('#health-alerts') && document.querySelector('#health-alerts').textContent.includes('1 open, 1 new')`)
	b.wait("notification count", `document.querySelector('#notify-count') && document.querySelector('#notify-count').textContent === '1'`)
	// Wall-clock tick labels: HH:MM over an hour, HH:MM:SS under ten minutes, never milliseconds.
	eval[any](b, `import('/ui/js/chart.js').then((m) => { window.testClock = [m.clock(1764646200, false), m.clock(1764646200.5, true)].join(' '); }), 0`)
	b.wait("clock labels", `window.testClock`)
	if labels := eval[string](b, `window.testClock`); !regexp.MustCompile(`^\d\d:\d\d \d\d:\d\d:\d\d$`).MatchString(labels) {
		t.Errorf("clock labels %q: want HH:MM HH:MM:SS", labels)
	}
	b.shot("history-01-dashboard")
	b.do("open the notifications", chromedp.Click(chromedp.CSS("#notify-btn")))
	b.wait("the alert listed", `document.querySelector('#notify-list') && document.querySelector('#notify-list').textContent.includes('PoolFreePercent')`)
	b.shot("history-02-notifications")
	b.clickLabel("Acknowledge Pool free capacity low for PoolFreePercent")
	b.wait("acknowledged", `document.querySelector('#notify-list') && document.querySelector('#notify-list').textContent.includes('acknowledged by operator') && !document.querySelector('#notify-count')`)
	b.page("board", "Sensors, fans & power")
	b.wait("temperature chart with the hour", `(() => { const c = document.querySelector('#temp-chart'); return c && Number(c.dataset.points) >= 300; })()`)
	b.shot("history-03-sensors")
	b.page("exports", "Exports")
	b.wait("export history chart", `(() => { const c = document.querySelector('#export-history'); return c && Number(c.dataset.points) >= 300; })()`)
	b.page("alerts", "Alerts & thresholds")
	if n := eval[int](b, `document.querySelectorAll('#triggers button').length`); n != 0 {
		t.Errorf("operator: %d edit buttons, want none (thresholds are the administrators')", n)
	}
	b.logout()

	b.login(apitest.UserReadOnly, apitest.UserPassword)
	b.page("alerts", "Alerts & thresholds")
	b.wait("the open alert", `document.querySelector('#alerts-open') && document.querySelector('#alerts-open').textContent.includes('acknowledged by operator')`)
	if n := eval[int](b, `document.querySelectorAll('main button').length`); n != 0 {
		t.Errorf("read-only user: %d buttons on the alerts page, want none", n)
	}
	b.logout()

	b.login("admin", apitest.AdminPassword)
	b.page("alerts", "Alerts & thresholds")
	b.wait("triggers listed", `document.querySelectorAll('#triggers tbody tr').length >= 6`)
	b.clickLabel("Edit Pool free capacity low")
	b.wait("form", `document.querySelector('#th-LowerWarning')`)
	b.do("set the warning to 20 %",
		chromedp.SetValue(chromedp.CSS("#th-LowerWarning"), ""),
		chromedp.SendKeys(chromedp.CSS("#th-LowerWarning"), "20"),
		chromedp.Click(chromedp.CSS("#trigger-save")))
	b.wait("saved", `!document.querySelector('#trigger-form') && document.querySelector('#trigger-PoolFreeLow').textContent.includes('20 %')`)
	b.shot("history-04-thresholds")
	// A bad order is refused with the box's reason.
	b.clickLabel("Edit Pool free capacity low")
	b.allow(400, "/Triggers/PoolFreeLow")
	b.do("a critical threshold above the warning",
		chromedp.SetValue(chromedp.CSS("#th-LowerCritical"), ""),
		chromedp.SendKeys(chromedp.CSS("#th-LowerCritical"), "50"),
		chromedp.Click(chromedp.CSS("#trigger-save")))
	b.wait("refusal shown", `document.querySelector('#trigger-form') && document.querySelector('#trigger-form').textContent.includes('LowerCritical (50) is above LowerWarning (20)')`)
	b.do("cancel", chromedp.Click(chromedp.CSS(`#trigger-form button[type=button]`)))
	if err := env.App.History.Sample(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.wait("alert cleared", `document.querySelector('#alerts-open') && document.querySelector('#alerts-open').textContent.includes('No open alerts')`)
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("browser errors:\n%s", strings.Join(errs, "\n"))
	}
}
