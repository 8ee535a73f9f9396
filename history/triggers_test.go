package history_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/history"
)

func f(v float64) *float64 { return &v }

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// TestEvaluate walks one series through a trigger's thresholds: each
// crossing names the Telemetry registry message of its direction, a
// reading inside the hysteresis keeps the alert, and the way back clears.
func TestEvaluate(t *testing.T) {
	tr := history.Trigger{ID: "Temp", Metric: "Temperature", UpperWarning: f(70), UpperCritical: f(85),
		LowerWarning: f(5), Hysteresis: 2, Enabled: true}
	s := history.Series{Metric: "Temperature", Subject: "Inlet"}
	steps := []struct {
		v     float64
		bound history.Bound // of the open alert afterwards; "" none
		key   string        // the transition's message; "" none
	}{
		{50, "", ""},
		{71, history.UpperWarning, "Telemetry.TriggerNumericAboveUpperWarning"},
		{69, history.UpperWarning, ""}, // within the hysteresis: still open, no event
		{86, history.UpperCritical, "Telemetry.TriggerNumericAboveUpperCritical"},
		{84, history.UpperCritical, ""},
		{80, history.UpperWarning, "Telemetry.TriggerNumericBelowUpperCritical"},
		{67, "", "Telemetry.TriggerNumericReadingNormal"},
		{4, history.LowerWarning, "Telemetry.TriggerNumericBelowLowerWarning"},
		{8, "", "Telemetry.TriggerNumericReadingNormal"},
	}
	var open *history.Alert
	for i, st := range steps {
		next, got := history.Evaluate(tr, s, st.v, open, t0.Add(time.Duration(i)*time.Second))
		var bound history.Bound
		if next != nil {
			bound = next.Bound
		}
		var key string
		if got != nil {
			key = got.MessageKey
		}
		if bound != st.bound || key != st.key {
			t.Errorf("step %d (%g): got alert %q event %q, want %q %q", i, st.v, bound, key, st.bound, st.key)
		}
		open = next
	}
}

// TestEvaluateArgs: the message arguments are the series, the reading,
// the threshold and the trigger, as the registry's message takes them.
func TestEvaluateArgs(t *testing.T) {
	tr := history.Trigger{ID: "PoolFreeLow", Metric: "PoolFreePercent", LowerWarning: f(20), LowerCritical: f(10), Enabled: true}
	_, got := history.Evaluate(tr, history.Series{Metric: "PoolFreePercent"}, 7.5, nil, t0)
	want := []string{"PoolFreePercent", "7.5", "10", "PoolFreeLow"}
	if diff := cmp.Diff(want, got.Args); diff != "" {
		t.Errorf("args (-want +got):\n%s", diff)
	}
	if got, want := got.Alert.Level(), history.LevelCritical; got != want {
		t.Errorf("level: got %v, want %v", got, want)
	}
}

// TestEvaluateAcknowledgement: an acknowledgement survives a better level
// but not a worse one.
func TestEvaluateAcknowledgement(t *testing.T) {
	tr := history.Trigger{ID: "T", Metric: "M", UpperWarning: f(1), UpperCritical: f(2), Enabled: true}
	s := history.Series{Metric: "M"}
	a, _ := history.Evaluate(tr, s, 1.5, nil, t0)
	a.Acknowledged = true
	worse, _ := history.Evaluate(tr, s, 3, a, t0)
	if worse.Acknowledged {
		t.Error("acknowledgement kept when the alert became critical")
	}
	worse.Acknowledged = true
	better, _ := history.Evaluate(tr, s, 1.5, worse, t0)
	if !better.Acknowledged {
		t.Error("acknowledgement lost when the alert went back to warning")
	}
	if !better.Since.Equal(t0) {
		t.Errorf("since: got %v, want the first crossing %v", better.Since, t0)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		tr   history.Trigger
		ok   bool
	}{
		{"ok", history.Trigger{ID: "A", Metric: "M", UpperCritical: f(1)}, true},
		{"no id", history.Trigger{Metric: "M", UpperCritical: f(1)}, false},
		{"slash in id", history.Trigger{ID: "a/b", Metric: "M", UpperCritical: f(1)}, false},
		{"no metric", history.Trigger{ID: "A", UpperCritical: f(1)}, false},
		{"no threshold", history.Trigger{ID: "A", Metric: "M"}, false},
		{"warning above critical", history.Trigger{ID: "A", Metric: "M", UpperWarning: f(3), UpperCritical: f(2)}, false},
		{"lower above upper", history.Trigger{ID: "A", Metric: "M", LowerWarning: f(3), UpperWarning: f(2)}, false},
		{"negative hysteresis", history.Trigger{ID: "A", Metric: "M", UpperWarning: f(3), Hysteresis: -1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.tr.Validate()
			if got := err == nil; got != tc.ok {
				t.Errorf("Validate: got %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, history.ErrInvalid) {
				t.Errorf("Validate: %v is not ErrInvalid", err)
			}
		})
	}
}

func TestWindow(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to time.Time
		max      int
		want     time.Duration
	}{
		{"last hour", t0.Add(-time.Hour), t0, 720, history.FineStep},
		{"last day", t0.Add(-24 * time.Hour), t0, 720, 160 * time.Second},
		{"last week", t0.Add(-7 * 24 * time.Hour), t0, 0, history.CoarseStep},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := history.Window(t0, tc.from, tc.to, tc.max)
			if err != nil || got != tc.want {
				t.Errorf("Window: got %v, %v, want %v", got, err, tc.want)
			}
		})
	}
	if _, err := history.Window(t0, t0, t0.Add(-time.Second), 0); !errors.Is(err, history.ErrInvalid) {
		t.Errorf("reversed window: got %v, want ErrInvalid", err)
	}
}
