package history

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Source reads one round of samples. A source that fails is logged and
// skipped for the round; the others still count.
type Source struct {
	Name string
	Read func(ctx context.Context, now time.Time) ([]Sample, error)
}

// Config is a Service's dependencies.
type Config struct {
	Store   Store
	Sources []Source
	// Defaults are the triggers created on first start (when the store
	// has never held any).
	Defaults []Trigger
	Clock    func() time.Time
	Logger   *slog.Logger
	// Interval is the sampling period (FineStep).
	Interval time.Duration
}

// Service samples its sources into the store and checks the triggers.
// Safe for concurrent use.
type Service struct {
	cfg Config
	log *slog.Logger

	round sync.Mutex // one sampling round at a time: alerts follow readings in order

	mu     sync.Mutex
	subs   map[chan Transition]struct{}
	latest map[Series]float64 // the last round's readings
}

// New opens the service on its store, creating the default triggers on
// first start. It does not sample until Run.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("history: no store: %w", ErrInvalid)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = FineStep
	}
	s := &Service{cfg: cfg, log: cfg.Logger, subs: map[chan Transition]struct{}{}, latest: map[Series]float64{}}
	_, ok, err := cfg.Store.Triggers(ctx)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	if !ok {
		for _, t := range cfg.Defaults {
			if err := t.Validate(); err != nil {
				return nil, fmt.Errorf("history: default %w", err)
			}
			if err := cfg.Store.PutTrigger(ctx, t); err != nil {
				return nil, fmt.Errorf("history: default trigger %s: %w", t.ID, err)
			}
		}
	}
	return s, nil
}

// Run samples every Interval until ctx ends, the first round at once so
// that a restart leaves no gap longer than the restart itself.
func (s *Service) Run(ctx context.Context) {
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	for {
		if err := s.Sample(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("history: sampling", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Sample runs one round: reads every source, stores the samples and
// checks them against the triggers, announcing each transition.
func (s *Service) Sample(ctx context.Context) error {
	s.round.Lock()
	defer s.round.Unlock()
	now := s.cfg.Clock()
	var samples []Sample
	for _, src := range s.cfg.Sources {
		got, err := src.Read(ctx, now)
		if err != nil {
			s.log.Debug("history: source skipped this round", "source", src.Name, "err", err)
		}
		samples = append(samples, got...)
	}
	err := s.cfg.Store.Add(ctx, now, samples)
	if err != nil && !errors.Is(err, ErrFull) {
		return fmt.Errorf("history: %w", err)
	}
	if errors.Is(err, ErrFull) {
		s.log.Warn("history: series limit reached; new series are not kept", "err", err)
	}
	s.mu.Lock()
	clear(s.latest)
	for _, x := range samples {
		s.latest[x.Series] = x.Value
	}
	s.mu.Unlock()
	return s.evaluate(ctx, now, samples)
}

// evaluate checks samples against every enabled trigger. A series that
// was not read this round keeps its alert as it was (a sensor that did
// not answer does not clear its alert).
func (s *Service) evaluate(ctx context.Context, now time.Time, samples []Sample) error {
	triggers, _, err := s.cfg.Store.Triggers(ctx)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	alerts, err := s.cfg.Store.Alerts(ctx)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	open := map[[2]string]*Alert{}
	for i := range alerts {
		open[[2]string{alerts[i].Trigger, alerts[i].Subject}] = &alerts[i]
	}
	var errs []error
	for _, t := range triggers {
		for _, x := range samples {
			if !t.Applies(x.Series) {
				continue
			}
			key := [2]string{t.ID, x.Subject}
			next, tr := Evaluate(t, x.Series, x.Value, open[key], now)
			switch {
			case next == nil && open[key] != nil:
				errs = append(errs, s.cfg.Store.DeleteAlert(ctx, t.ID, x.Subject))
			case next != nil:
				errs = append(errs, s.cfg.Store.PutAlert(ctx, *next))
			}
			if tr != nil {
				s.announce(*tr)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("history: alerts: %w", err)
	}
	return nil
}

// announce delivers tr to every subscriber; a subscriber whose buffer is
// full misses it (the alert itself stays listed).
func (s *Service) announce(tr Transition) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.subs {
		select {
		case ch <- tr:
		default:
			s.log.Warn("history: a subscriber missed an alert transition", "trigger", tr.Alert.Trigger)
		}
	}
}

// Subscribe delivers the alert transitions until cancel.
func (s *Service) Subscribe(buf int) (<-chan Transition, func()) {
	ch := make(chan Transition, buf)
	s.mu.Lock()
	s.subs[ch] = struct{}{}
	s.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			s.mu.Lock()
			delete(s.subs, ch)
			s.mu.Unlock()
		})
	}
}

// Query returns a series' points in [from, to) at step (see Window).
func (s *Service) Query(ctx context.Context, series Series, from, to time.Time, step time.Duration) ([]Point, error) {
	return s.cfg.Store.Query(ctx, series, from, to, step)
}

// Series lists the series kept.
func (s *Service) Series(ctx context.Context) ([]Series, error) { return s.cfg.Store.Series(ctx) }

// Latest is the last round's reading of a series.
func (s *Service) Latest(series Series) (float64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.latest[series]
	return v, ok
}

// Interval is the sampling period.
func (s *Service) Interval() time.Duration { return s.cfg.Interval }

// Now is the service's clock.
func (s *Service) Now() time.Time { return s.cfg.Clock() }

// Triggers lists the triggers, sorted by Id.
func (s *Service) Triggers(ctx context.Context) ([]Trigger, error) {
	ts, _, err := s.cfg.Store.Triggers(ctx)
	return ts, err
}

// Trigger returns one trigger.
func (s *Service) Trigger(ctx context.Context, id string) (Trigger, error) {
	ts, err := s.Triggers(ctx)
	if err != nil {
		return Trigger{}, err
	}
	i := slices.IndexFunc(ts, func(t Trigger) bool { return t.ID == id })
	if i < 0 {
		return Trigger{}, fmt.Errorf("%w: trigger %q", ErrNotFound, id)
	}
	return ts[i], nil
}

// SetTrigger replaces an existing trigger after validating it. Its open
// alerts are cleared without an event when the trigger is disabled or no
// longer watches their series; the next round re-checks the others
// against the new thresholds.
func (s *Service) SetTrigger(ctx context.Context, t Trigger) error {
	if err := t.Validate(); err != nil {
		return err
	}
	s.round.Lock()
	defer s.round.Unlock()
	if _, err := s.Trigger(ctx, t.ID); err != nil {
		return err
	}
	if err := s.cfg.Store.PutTrigger(ctx, t); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	alerts, err := s.cfg.Store.Alerts(ctx)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	for _, a := range alerts {
		if a.Trigger == t.ID && !t.Applies(Series{Metric: a.Metric, Subject: a.Subject}) {
			if err := s.cfg.Store.DeleteAlert(ctx, a.Trigger, a.Subject); err != nil {
				return fmt.Errorf("history: %w", err)
			}
		}
	}
	return nil
}

// Alerts lists the open alerts, worst first, then oldest.
func (s *Service) Alerts(ctx context.Context) ([]Alert, error) {
	as, err := s.cfg.Store.Alerts(ctx)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	slices.SortStableFunc(as, func(a, b Alert) int {
		if a.Level() != b.Level() {
			return int(b.Level()) - int(a.Level())
		}
		return a.Since.Compare(b.Since)
	})
	return as, nil
}

// Acknowledge marks an open alert acknowledged by user; it stays open
// until its series is back in range.
func (s *Service) Acknowledge(ctx context.Context, trigger, subject, user string) (Alert, error) {
	s.round.Lock()
	defer s.round.Unlock()
	as, err := s.cfg.Store.Alerts(ctx)
	if err != nil {
		return Alert{}, fmt.Errorf("history: %w", err)
	}
	i := slices.IndexFunc(as, func(a Alert) bool { return a.Trigger == trigger && a.Subject == subject })
	if i < 0 {
		return Alert{}, fmt.Errorf("%w: no open alert of trigger %q for %q", ErrNotFound, trigger, subject)
	}
	a := as[i]
	a.Acknowledged, a.AckedBy, a.AckedAt = true, user, s.cfg.Clock()
	if err := s.cfg.Store.PutAlert(ctx, a); err != nil {
		return Alert{}, fmt.Errorf("history: %w", err)
	}
	return a, nil
}

// Close closes the store.
func (s *Service) Close() error { return s.cfg.Store.Close() }
