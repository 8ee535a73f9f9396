package history_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/history"
	"cxlpool/history/sqlite"
)

// reading is a source whose value the test sets.
type reading struct {
	mu sync.Mutex
	v  float64
}

func (r *reading) set(v float64) { r.mu.Lock(); r.v = v; r.mu.Unlock() }

func (r *reading) source() history.Source {
	return history.Source{Name: "test", Read: func(context.Context, time.Time) ([]history.Sample, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return []history.Sample{{Series: history.Series{Metric: "PoolFreePercent"}, Value: r.v}}, nil
	}}
}

func newService(t *testing.T, path string, r *reading, now *time.Time) *history.Service {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := history.New(ctx, history.Config{Store: st, Sources: []history.Source{r.source()},
		Defaults: []history.Trigger{{ID: "PoolFreeLow", Metric: "PoolFreePercent", LowerWarning: f(20), LowerCritical: f(10), Enabled: true}},
		Clock:    func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	return svc
}

// TestServiceAlertLifecycle: a crossing opens an alert and announces it,
// the acknowledgement is kept across a restart, and the way back clears
// the alert with a ReadingNormal event. An administrator's change of the
// defaults is not undone by the next start.
func TestServiceAlertLifecycle(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "history.db")
	now := t0
	r := &reading{v: 50}
	svc := newService(t, path, r, &now)
	ch, cancel := svc.Subscribe(8)
	defer cancel()
	if err := svc.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	r.set(5)
	now = now.Add(history.FineStep)
	if err := svc.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	tr := <-ch
	if got, want := tr.MessageKey, "Telemetry.TriggerNumericBelowLowerCritical"; got != want {
		t.Errorf("event: got %s, want %s", got, want)
	}
	if _, err := svc.Acknowledge(ctx, "PoolFreeLow", "", "admin"); err != nil {
		t.Fatal(err)
	}
	trig, _ := svc.Trigger(ctx, "PoolFreeLow")
	trig.LowerWarning = f(30)
	if err := svc.SetTrigger(ctx, trig); err != nil {
		t.Fatal(err)
	}
	svc.Close()

	svc = newService(t, path, r, &now) // the restart
	ch, cancel = svc.Subscribe(8)
	defer cancel()
	as, _ := svc.Alerts(ctx)
	want := []history.Alert{{Trigger: "PoolFreeLow", Metric: "PoolFreePercent", Bound: history.LowerCritical, Threshold: 10, Reading: 5,
		Since: now, Updated: now, Acknowledged: true, AckedBy: "admin", AckedAt: now}}
	if diff := cmp.Diff(want, as); diff != "" {
		t.Errorf("alerts after restart (-want +got):\n%s", diff)
	}
	if trig, _ := svc.Trigger(ctx, "PoolFreeLow"); *trig.LowerWarning != 30 {
		t.Errorf("LowerWarning after restart: got %g, want 30 (the administrator's)", *trig.LowerWarning)
	}
	r.set(60)
	now = now.Add(history.FineStep)
	if err := svc.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := (<-ch).MessageKey, "Telemetry.TriggerNumericReadingNormal"; got != want {
		t.Errorf("event: got %s, want %s", got, want)
	}
	if as, _ := svc.Alerts(ctx); len(as) != 0 {
		t.Errorf("alerts after recovery: %v", as)
	}
	pts, err := svc.Query(ctx, history.Series{Metric: "PoolFreePercent"}, t0, now.Add(time.Second), history.FineStep)
	if err != nil {
		t.Fatal(err)
	}
	var got []float64
	for _, p := range pts {
		got = append(got, p.Mean)
	}
	if diff := cmp.Diff([]float64{50, 5, 60}, got); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
}

// TestSetTriggerDisableClears: disabling a trigger drops its open alerts.
func TestSetTriggerDisableClears(t *testing.T) {
	ctx := context.Background()
	now := t0
	r := &reading{v: 1}
	svc := newService(t, filepath.Join(t.TempDir(), "h.db"), r, &now)
	if err := svc.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	if as, _ := svc.Alerts(ctx); len(as) != 1 {
		t.Fatalf("alerts: got %d, want 1", len(as))
	}
	trig, _ := svc.Trigger(ctx, "PoolFreeLow")
	trig.Enabled = false
	if err := svc.SetTrigger(ctx, trig); err != nil {
		t.Fatal(err)
	}
	if as, _ := svc.Alerts(ctx); len(as) != 0 {
		t.Errorf("alerts after disabling: %v", as)
	}
}
