// Package history keeps the box's downsampled history and its alerts.
//
// A Service samples its Sources every 10 s (pool capacity, per-host
// grants, grant and release rates, export throughput, sensors, CHMU
// activity: what the appliance wires in) and hands each round to a Store,
// which keeps two tiers of buckets per series: 10 s for a day and 5 min
// for a month, each bucket the min, mean and max of the samples that fell
// into it. A Store bounds its size (a fixed number of series, each tier
// pruned to its retention), so the data partition cannot fill up.
//
// The same round is checked against the Triggers: numeric thresholds an
// administrator edits (pool free below N %, a host over its quota, sensor
// limits, link flaps, lost grants, certificate expiry; the defaults are
// created on first start). A series crossing a threshold opens an Alert
// and a Transition is delivered to subscribers (the API turns it into a
// Redfish event of DMTF's Telemetry registry); coming back clears it. An
// administrator's acknowledgement is kept with the alert.
//
// What it does not do: sub-10 s resolution (the CHMU stream has that),
// discrete triggers (every trigger is numeric), DwellTime (a crossing
// counts at the first sample beyond the threshold), per-subject
// thresholds within one trigger (make a second trigger with the subject
// in Subjects).
package history

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// The tiers: 10 s buckets for a day, 5 min buckets for a month.
const (
	FineStep    = 10 * time.Second
	FineKeep    = 24 * time.Hour
	CoarseStep  = 5 * time.Minute
	CoarseKeep  = 30 * 24 * time.Hour
	coarseAfter = FineKeep // windows reaching further back read the coarse tier
)

// ErrInvalid marks a request the history refuses (a bad trigger, an
// unknown one, a window that ends before it starts).
var ErrInvalid = errors.New("history: invalid")

// ErrNotFound marks an unknown trigger or alert.
var ErrNotFound = errors.New("history: not found")

// ErrFull is a new series refused because the store keeps its maximum
// number of series.
var ErrFull = errors.New("history: series limit reached")

// Series names one time series: a metric and what it is about (a host's
// Id, a sensor's, an export's; empty for the pool).
type Series struct {
	Metric  string
	Subject string
}

func (s Series) String() string {
	if s.Subject == "" {
		return s.Metric
	}
	return s.Metric + "/" + s.Subject
}

// Sample is one reading of a series.
type Sample struct {
	Series
	Value float64
}

// Point is one bucket of a series: the samples taken in [Time, Time+step).
type Point struct {
	Time           time.Time
	Min, Mean, Max float64
	Count          int
}

// Step is the bucket width Query answers for a window starting at from:
// the fine tier while it still holds from, else the coarse one.
func Step(now, from time.Time) time.Duration {
	if from.Before(now.Add(-coarseAfter)) {
		return CoarseStep
	}
	return FineStep
}

// Store keeps series and the alert state. Implementations are safe for
// concurrent use.
type Store interface {
	// Add records the samples of one round taken at t into both tiers and
	// drops buckets older than their tier's retention. A sample of a new
	// series beyond the store's limit is dropped and Add returns ErrFull
	// (after recording the others).
	Add(ctx context.Context, t time.Time, samples []Sample) error
	// Query returns s's buckets of width step (FineStep, CoarseStep or a
	// multiple of either, merged) in [from, to), oldest first.
	Query(ctx context.Context, s Series, from, to time.Time, step time.Duration) ([]Point, error)
	// Series lists the series kept, sorted.
	Series(ctx context.Context) ([]Series, error)

	// Triggers lists the triggers, sorted by ID; ok is false before the
	// first PutTrigger ever (the service then creates the defaults).
	Triggers(ctx context.Context) (ts []Trigger, ok bool, err error)
	PutTrigger(ctx context.Context, t Trigger) error
	// Alerts lists the open alerts; PutAlert writes one (keyed by trigger
	// and subject) and DeleteAlert clears it.
	Alerts(ctx context.Context) ([]Alert, error)
	PutAlert(ctx context.Context, a Alert) error
	DeleteAlert(ctx context.Context, trigger, subject string) error
	Close() error
}

// Merge folds points into buckets of width step (a multiple of theirs),
// for stores that cannot merge themselves and for tests.
func Merge(points []Point, step time.Duration) []Point {
	var out []Point
	for _, p := range points {
		b := BucketOf(p.Time, step)
		if n := len(out); n > 0 && out[n-1].Time.Equal(b) {
			o := &out[n-1]
			total := o.Count + p.Count
			o.Mean = (o.Mean*float64(o.Count) + p.Mean*float64(p.Count)) / float64(total)
			o.Min, o.Max, o.Count = math.Min(o.Min, p.Min), math.Max(o.Max, p.Max), total
			continue
		}
		p.Time = b
		out = append(out, p)
	}
	return out
}

// BucketOf is the start of the bucket of width step holding t, counted
// from the Unix epoch (time.Truncate counts from year 1, which differs
// for steps that do not divide a day).
func BucketOf(t time.Time, step time.Duration) time.Time {
	st := int64(step / time.Second)
	if st <= 0 {
		return t
	}
	u := t.Unix()
	b := u - u%st
	if u < 0 && u%st != 0 {
		b -= st
	}
	return time.Unix(b, 0).UTC()
}

// Window checks a query window and picks its step: at least the tier's
// and at most maxPoints buckets.
func Window(now, from, to time.Time, maxPoints int) (time.Duration, error) {
	if !to.After(from) {
		return 0, fmt.Errorf("%w: the window ends (%s) before it starts (%s)", ErrInvalid,
			to.Format(time.RFC3339), from.Format(time.RFC3339))
	}
	step := Step(now, from)
	if maxPoints > 0 {
		for to.Sub(from)/step > time.Duration(maxPoints) {
			step *= 2
		}
	}
	return step, nil
}

// SortSeries orders series by metric, then subject.
func SortSeries(ss []Series) {
	slices.SortFunc(ss, func(a, b Series) int {
		if a.Metric != b.Metric {
			if a.Metric < b.Metric {
				return -1
			}
			return 1
		}
		switch {
		case a.Subject < b.Subject:
			return -1
		case a.Subject > b.Subject:
			return 1
		}
		return 0
	})
}
