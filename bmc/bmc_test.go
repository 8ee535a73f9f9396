package bmc

import "testing"

func TestClassify(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	th := Thresholds{UpperCaution: f(70), UpperCritical: f(85), UpperFatal: f(95), LowerCaution: f(10), LowerCritical: f(5)}
	tests := []struct {
		v      float64
		want   Level
		health Health
	}{
		{40, LevelNormal, OK},
		{70, LevelUpperCaution, Warning},
		{84.9, LevelUpperCaution, Warning},
		{85, LevelUpperCritical, Critical},
		{100, LevelUpperFatal, Critical},
		{10, LevelLowerCaution, Warning},
		{-3, LevelLowerCritical, Critical},
	}
	for _, tt := range tests {
		got := th.Classify(tt.v)
		if got != tt.want || got.Health() != tt.health {
			t.Errorf("Classify(%v): got %q (%s), want %q (%s)", tt.v, got, got.Health(), tt.want, tt.health)
		}
	}
	if got := (Thresholds{}).Classify(1e9); got != LevelNormal {
		t.Errorf("no thresholds: got %q, want normal", got)
	}
	units := map[ReadingType]string{Temperature: "Cel", Rotational: "{rev}/min", Voltage: "V", Power: "W", Current: "A", Percent: "%"}
	for rt, want := range units {
		if got := rt.Units(); got != want {
			t.Errorf("%s.Units(): got %q, want %q", rt, got, want)
		}
	}
}
