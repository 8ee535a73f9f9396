package history

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Trigger is a set of numeric thresholds on one metric (DMTF Triggers:
// NumericThresholds). A nil threshold is not checked.
type Trigger struct {
	ID, Name, Description string
	Metric                string
	// Subjects limits the trigger to these series of Metric; empty: all.
	Subjects []string
	// The thresholds, in the metric's units. A reading above an upper one
	// (strictly) or below a lower one crosses it.
	UpperCritical, UpperWarning, LowerWarning, LowerCritical *float64
	// Hysteresis is how far back inside a threshold a reading must come
	// before its alert clears (or drops from Critical to Warning), so that
	// a reading hovering at the threshold does not raise an event a round.
	Hysteresis float64
	Enabled    bool
}

// Level is an alert's severity.
type Level int

const (
	LevelOK Level = iota
	LevelWarning
	LevelCritical
)

func (l Level) String() string {
	switch l {
	case LevelWarning:
		return "Warning"
	case LevelCritical:
		return "Critical"
	}
	return "OK"
}

// Bound names the threshold a reading crossed.
type Bound string

const (
	UpperCritical Bound = "UpperCritical"
	UpperWarning  Bound = "UpperWarning"
	LowerWarning  Bound = "LowerWarning"
	LowerCritical Bound = "LowerCritical"
)

// Upper reports whether b is an upper threshold.
func (b Bound) Upper() bool { return b == UpperCritical || b == UpperWarning }

func (b Bound) level() Level {
	if b == UpperCritical || b == LowerCritical {
		return LevelCritical
	}
	return LevelWarning
}

// threshold returns the bound's value, if set.
func (t Trigger) threshold(b Bound) (float64, bool) {
	var p *float64
	switch b {
	case UpperCritical:
		p = t.UpperCritical
	case UpperWarning:
		p = t.UpperWarning
	case LowerWarning:
		p = t.LowerWarning
	case LowerCritical:
		p = t.LowerCritical
	}
	if p == nil {
		return 0, false
	}
	return *p, true
}

// Threshold returns the bound's value, if set.
func (t Trigger) Threshold(b Bound) (float64, bool) { return t.threshold(b) }

// Applies reports whether the trigger watches series s.
func (t Trigger) Applies(s Series) bool {
	return t.Enabled && s.Metric == t.Metric && (len(t.Subjects) == 0 || slices.Contains(t.Subjects, s.Subject))
}

// Validate checks what an administrator may set: an Id, a metric, at
// least one threshold, finite values in order (LowerCritical ≤
// LowerWarning < UpperWarning ≤ UpperCritical) and a hysteresis ≥ 0.
func (t Trigger) Validate() error {
	bad := func(f string, a ...any) error {
		return fmt.Errorf("%w: trigger %q: %s", ErrInvalid, t.ID, fmt.Sprintf(f, a...))
	}
	if t.ID == "" || strings.ContainsAny(t.ID, "/?#% ") {
		return bad("the Id must be non-empty, without '/', '?', '#', '%%' or spaces")
	}
	if t.Metric == "" {
		return bad("no metric")
	}
	var set []float64
	for _, b := range []Bound{LowerCritical, LowerWarning, UpperWarning, UpperCritical} {
		v, ok := t.threshold(b)
		if !ok {
			continue
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return bad("%s is not a finite number", b)
		}
		set = append(set, v)
	}
	if len(set) == 0 {
		return bad("no threshold: set at least one of UpperCritical, UpperWarning, LowerWarning, LowerCritical")
	}
	lc, lcOK := t.threshold(LowerCritical)
	lw, lwOK := t.threshold(LowerWarning)
	uw, uwOK := t.threshold(UpperWarning)
	uc, ucOK := t.threshold(UpperCritical)
	switch {
	case lcOK && lwOK && lc > lw:
		return bad("LowerCritical (%g) is above LowerWarning (%g)", lc, lw)
	case uwOK && ucOK && uw > uc:
		return bad("UpperWarning (%g) is above UpperCritical (%g)", uw, uc)
	}
	lowest, highest := math.Inf(1), math.Inf(-1)
	for _, x := range []struct {
		v  float64
		ok bool
	}{{lc, lcOK}, {lw, lwOK}} {
		if x.ok {
			highest = math.Max(highest, x.v)
		}
	}
	for _, x := range []struct {
		v  float64
		ok bool
	}{{uw, uwOK}, {uc, ucOK}} {
		if x.ok {
			lowest = math.Min(lowest, x.v)
		}
	}
	if highest >= lowest {
		return bad("the lower thresholds (up to %g) must be below the upper ones (from %g)", highest, lowest)
	}
	if t.Hysteresis < 0 || math.IsNaN(t.Hysteresis) || math.IsInf(t.Hysteresis, 0) {
		return bad("HysteresisReading must be a finite number ≥ 0")
	}
	return nil
}

// classify is the worst threshold v is beyond, taking the hysteresis into
// account for the thresholds prev (the open alert, if any) already crossed:
// those hold until v is back by Hysteresis.
func (t Trigger) classify(v float64, prev *Alert) (Bound, bool) {
	beyond := func(b Bound) bool {
		th, ok := t.threshold(b)
		if !ok {
			return false
		}
		margin := 0.0
		if prev != nil && (prev.Bound == b || (prev.Bound.level() == LevelCritical && prev.Bound.Upper() == b.Upper())) {
			margin = t.Hysteresis
		}
		if b.Upper() {
			return v > th-margin
		}
		return v < th+margin
	}
	for _, b := range []Bound{UpperCritical, LowerCritical, UpperWarning, LowerWarning} {
		if beyond(b) {
			return b, true
		}
	}
	return "", false
}

// Alert is an open alert: a series beyond one of a trigger's thresholds.
type Alert struct {
	Trigger string
	Subject string
	Metric  string
	Bound   Bound
	// Threshold and Reading are the crossed threshold and the last reading.
	Threshold, Reading float64
	Since              time.Time // when it opened
	Updated            time.Time // when its level last changed
	Acknowledged       bool
	AckedBy            string
	AckedAt            time.Time
}

// Level is the alert's severity.
func (a Alert) Level() Level { return a.Bound.level() }

// Transition is a change of a series' alert state, for the event it
// raises: MessageKey is the Telemetry registry message.
type Transition struct {
	Alert      Alert // the alert after the change (Bound empty when cleared)
	Cleared    bool
	MessageKey string // e.g. "Telemetry.TriggerNumericAboveUpperCritical"
	Args       []string
	Time       time.Time
}

// Evaluate checks one reading of series s against t, given the open alert
// (nil if none): next is the alert afterwards (nil: none), tr the
// transition to announce (nil: nothing changed but the reading).
func Evaluate(t Trigger, s Series, v float64, prev *Alert, now time.Time) (next *Alert, tr *Transition) {
	b, crossed := t.classify(v, prev)
	num := func(x float64) string { return fmt.Sprintf("%g", x) }
	if !crossed {
		if prev == nil {
			return nil, nil
		}
		a := *prev
		a.Reading = v
		return nil, &Transition{Alert: a, Cleared: true, Time: now,
			MessageKey: "Telemetry.TriggerNumericReadingNormal", Args: []string{s.String(), num(v), t.ID}}
	}
	th, _ := t.threshold(b)
	if prev != nil && prev.Bound == b {
		a := *prev
		a.Reading = v
		return &a, nil
	}
	a := Alert{Trigger: t.ID, Subject: s.Subject, Metric: s.Metric, Bound: b, Threshold: th, Reading: v, Since: now, Updated: now}
	if prev != nil {
		a.Since = prev.Since
		// A worse level needs a new acknowledgement; a better one keeps it.
		if b.level() <= prev.Level() {
			a.Acknowledged, a.AckedBy, a.AckedAt = prev.Acknowledged, prev.AckedBy, prev.AckedAt
		}
	}
	var key string
	switch {
	case prev != nil && prev.Level() == LevelCritical && b.level() == LevelWarning && b.Upper() == prev.Bound.Upper():
		// Back from critical but still outside the normal range.
		key = "TriggerNumericBelowUpperCritical"
		if !b.Upper() {
			key = "TriggerNumericAboveLowerCritical"
		}
		th, _ = t.threshold(prev.Bound)
	case b == UpperCritical:
		key = "TriggerNumericAboveUpperCritical"
	case b == UpperWarning:
		key = "TriggerNumericAboveUpperWarning"
	case b == LowerCritical:
		key = "TriggerNumericBelowLowerCritical"
	default:
		key = "TriggerNumericBelowLowerWarning"
	}
	return &a, &Transition{Alert: a, Time: now, MessageKey: "Telemetry." + key,
		Args: []string{s.String(), num(v), num(th), t.ID}}
}
