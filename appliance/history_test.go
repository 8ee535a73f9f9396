package appliance_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"cxlpool/appliance"
	"cxlpool/dcd"
	"cxlpool/history"
)

// TestHistoryAssembled: the daemon samples the pool, every host, the
// change rates and the CHMU into history.db, and what it kept is read
// back by the next daemon on the same data directory, with the default
// triggers created once.
func TestHistoryAssembled(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	app, stop := startTelApp(t, appliance.Config{DataDir: dir})
	t.Cleanup(stop)
	if app.History == nil {
		t.Fatal("no history")
	}
	ch, err := app.Manager.Reserve(ctx, dcd.ReserveRequest{Size: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.Manager.Grant(ctx, ch.ID, 2); err != nil {
		t.Fatal(err)
	}
	if err := app.History.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	series, _ := app.History.Series(ctx)
	for _, want := range []history.Series{
		{Metric: appliance.MetricPoolFreeBytes}, {Metric: appliance.MetricPoolFreePercent}, {Metric: appliance.MetricGrantsPerMinute},
		{Metric: appliance.MetricHostGrantedBytes, Subject: "Host2"}, {Metric: appliance.MetricHostLinkChanges, Subject: "Host7"},
		{Metric: appliance.MetricCHMUTopUnit},
	} {
		if !slices.Contains(series, want) {
			t.Errorf("series %v lack %v", series, want)
		}
	}
	if v, _ := app.History.Latest(history.Series{Metric: appliance.MetricHostGrantedBytes, Subject: "Host2"}); v != 1<<30 {
		t.Errorf("Host2 granted: got %g, want 1 GiB", v)
	}
	// The grant reaches the rates through the Manager's change feed: poll
	// rounds (bounded) until one counted it.
	rate := history.Series{Metric: appliance.MetricGrantsPerMinute}
	for deadline := time.Now().Add(20 * time.Second); ; {
		pts, _ := app.History.Query(ctx, rate, time.Now().Add(-time.Hour), time.Now().Add(time.Minute), history.FineStep)
		if slices.ContainsFunc(pts, func(p history.Point) bool { return p.Max > 0 }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("grants per minute after a grant: %v, want a bucket above 0", pts)
		}
		if err := app.History.Sample(ctx); err != nil {
			t.Fatal(err)
		}
	}
	trig, err := app.History.Trigger(ctx, "PoolFreeLow")
	if err != nil {
		t.Fatal(err)
	}
	trig.Enabled = false
	if err := app.History.SetTrigger(ctx, trig); err != nil {
		t.Fatal(err)
	}
	stop()

	app2, stop2 := startTelApp(t, appliance.Config{DataDir: dir})
	t.Cleanup(stop2)
	pts, err := app2.History.Query(ctx, history.Series{Metric: appliance.MetricHostGrantedBytes, Subject: "Host2"},
		time.Now().Add(-time.Hour), time.Now().Add(time.Minute), history.FineStep)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(pts, func(p history.Point) bool { return p.Max == 1<<30 }) {
		t.Errorf("after a restart, Host2's history %v lacks the 1 GiB it held", pts)
	}
	if trig, _ := app2.History.Trigger(ctx, "PoolFreeLow"); trig.Enabled {
		t.Error("the default trigger was created again over the administrator's change")
	}
}
