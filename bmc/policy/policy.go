// Package policy runs the board-management policy of the memory box on
// top of a bmc.BoardController:
//
//   - fan control: a step curve from the smallest temperature margin (how
//     far the hottest sensor is below its caution threshold) to a fan
//     duty, raised at once and lowered only with hysteresis, with a
//     fail-safe to full duty when a temperature cannot be read or a fan
//     has failed;
//   - alarms: every board event is published and logged through a Sink,
//     with Redfish ResourceEvent message IDs and arguments;
//   - a software watchdog for the daemon that calls a hook when the loop
//     (or anything else that kicks it) stalls;
//   - safe head power control: before cutting power to a host head the
//     capacity granted to that host is fenced through HeadFence, and
//     recovered after power-on (Loop implements bmc.HeadResetter).
package policy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"cxlpool/bmc"
)

// HeadFence protects the capacity of a host head across a power cut. The
// dcd Manager implements it. Both methods are idempotent and may be called
// for a host that holds nothing.
type HeadFence interface {
	// Fence returns once host can no longer be harmed by losing power:
	//   1. no new grant to host starts: adds for it fail (dcd.ErrLinkDown
	//      or ErrConflict) until Recover, and adds in flight are cancelled
	//      or awaited;
	//   2. every active grant of host has been released with a forced
	//      release (the host will not answer, it is about to lose power),
	//      asking the device to sanitize the capacity before reuse;
	//   3. the ledger says so (the grants end released, or lost, with a
	//      reason naming the power cycle).
	// If Fence fails, power is not cut and Recover is called to lift
	// whatever part of the fence took effect.
	Fence(ctx context.Context, host int) error
	// Recover lifts the fence after power is back on (or after a power
	// cut was abandoned): it reconciles the ledger with the device's view
	// of host (extent lists, pending adds) and lets grants to host start
	// again.
	Recover(ctx context.Context, host int) error
}

// Severity of a log entry (Redfish LogEntry.Severity).
type Severity string

// Severities.
const (
	SeverityOK       Severity = "OK"
	SeverityWarning  Severity = "Warning"
	SeverityCritical Severity = "Critical"
)

// LogEntry is one event-log record, ready for a Redfish LogEntry.
type LogEntry struct {
	Time     time.Time
	Severity Severity
	// MessageID is a registry message, e.g.
	// "ResourceEvent.1.4.ResourceWarningThresholdExceeded"; Args fill its
	// %1, %2….
	MessageID string
	Args      []string
	Message   string // the event's own text
	// Origin is the board item concerned: a sensor, fan or PSU ID,
	// "Head<n>" or "BoardController".
	Origin string
}

// Sink receives the policy's alarms. Implementations must not block for
// long: the loop calls them inline.
type Sink interface {
	// Event publishes a board event to subscribers (Redfish EventService).
	Event(ev bmc.Event)
	// Log appends an entry to the event log (Redfish LogService).
	Log(e LogEntry)
}

// Step is one step of the fan curve: while the smallest temperature
// margin is below Below °C, the fans run at least at Duty %.
type Step struct {
	Below float64
	Duty  float64
}

// Defaults.
var (
	// DefaultCurve: 30 % with 20 °C of margin or more, then 50, 75 and
	// 100 % below 20, 10 and 5 °C.
	DefaultCurve = []Step{{Below: 20, Duty: 50}, {Below: 10, Duty: 75}, {Below: 5, Duty: 100}}
)

// Default values for zero Config fields.
const (
	DefaultBaseDuty   = 30.0
	DefaultHysteresis = 3.0 // °C
	DefaultInterval   = 5 * time.Second
	DefaultWatchdog   = time.Minute
	DefaultCycleOff   = 5 * time.Second
)

// Config configures a Loop.
type Config struct {
	Board bmc.BoardController // required
	Fence HeadFence           // required for power cuts (ForceOff, cycles)
	Sink  Sink                // required
	// Curve and BaseDuty define the fan curve; Curve steps must have
	// decreasing Below and increasing Duty.
	Curve    []Step
	BaseDuty float64
	// Hysteresis is how much margin beyond a step's Below the fans need
	// before they slow down a step.
	Hysteresis float64
	// Interval is the control period (default 5 s).
	Interval time.Duration
	// Watchdog is how long the loop may go without completing a step
	// before OnStall is called (default 1 min); OnStall nil only logs.
	Watchdog time.Duration
	OnStall  func(stalled time.Duration)
	// CycleOff is how long a head stays off in a power cycle (default 5 s).
	CycleOff time.Duration
	Clock    func() time.Time
	// Sleep waits d or until ctx ends (default a timer); tests replace it.
	Sleep  func(ctx context.Context, d time.Duration) error
	Logger *slog.Logger
}

// Loop is the policy loop. Create it with New, run it with Run; Step and
// ResetHead may also be called directly.
type Loop struct {
	cfg Config
	log *slog.Logger
	wd  *Watchdog

	mu      sync.Mutex
	level   int     // current curve step: 0 = base, i+1 = Curve[i]
	duty    float64 // last duty commanded, NaN before the first
	sensors map[string]bmc.Sensor
	busy    map[int]bool // heads with a reset in progress
}

var _ bmc.HeadResetter = (*Loop)(nil)

// New checks cfg and returns a loop.
func New(cfg Config) (*Loop, error) {
	if cfg.Board == nil || cfg.Sink == nil {
		return nil, errors.New("policy: config: Board and Sink are required")
	}
	if cfg.Curve == nil {
		cfg.Curve = DefaultCurve
	}
	for i, s := range cfg.Curve {
		if s.Duty < 0 || s.Duty > 100 || i > 0 && (s.Below >= cfg.Curve[i-1].Below || s.Duty < cfg.Curve[i-1].Duty) {
			return nil, fmt.Errorf("policy: config: fan curve step %d %+v out of order", i, s)
		}
	}
	if cfg.BaseDuty == 0 {
		cfg.BaseDuty = DefaultBaseDuty
	}
	if cfg.Hysteresis == 0 {
		cfg.Hysteresis = DefaultHysteresis
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Watchdog <= 0 {
		cfg.Watchdog = DefaultWatchdog
	}
	if cfg.CycleOff <= 0 {
		cfg.CycleOff = DefaultCycleOff
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	l := &Loop{cfg: cfg, log: cfg.Logger, duty: math.NaN(), sensors: map[string]bmc.Sensor{}, busy: map[int]bool{}}
	hook := cfg.OnStall
	l.wd = NewWatchdog(cfg.Watchdog, cfg.Clock, func(d time.Duration) {
		l.log.Error("policy: loop stalled", "for", d)
		l.cfg.Sink.Log(LogEntry{Time: cfg.Clock(), Severity: SeverityCritical, Origin: "PolicyLoop",
			MessageID: "ResourceEvent.1.4.ResourceStatusChangedCritical", Args: []string{"PolicyLoop", "Critical"},
			Message: fmt.Sprintf("board policy loop stalled for %s", d.Round(time.Second))})
		if hook != nil {
			hook(d)
		}
	})
	return l, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Watchdog returns the loop's watchdog, which other daemon loops may kick
// too.
func (l *Loop) Watchdog() *Watchdog { return l.wd }

// Run steps the loop every Interval, forwards board events as alarms and
// runs the watchdog, until ctx ends.
func (l *Loop) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { l.wd.Run(ctx, l.cfg.Interval) })
	l.wd.Kick()
	t := time.NewTicker(l.cfg.Interval)
	defer t.Stop()
	events := l.cfg.Board.Events()
	if err := l.Step(ctx); err != nil {
		l.log.Warn("policy: step", "err", err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			l.Alarm(ev)
		case <-t.C:
			if err := l.Step(ctx); err != nil {
				l.log.Warn("policy: step", "err", err)
			}
		}
	}
}

// Step runs one control iteration: it reads the sensors, picks the fan
// duty from the smallest margin of a temperature sensor (intake sensors
// excluded) below its caution (else critical) threshold, commands it when
// it changed (or a fan does not run at it), and kicks the watchdog. The fail-safe duty is 100 %: with any temperature
// sensor unreadable or any fan failed the remaining fans run flat out.
func (l *Loop) Step(ctx context.Context) error {
	sensors, err := l.cfg.Board.Sensors(ctx)
	if err != nil {
		return fmt.Errorf("policy: read sensors: %w", err)
	}
	fans, err := l.cfg.Board.Fans(ctx)
	if err != nil {
		return fmt.Errorf("policy: read fans: %w", err)
	}
	margin, blind := math.Inf(1), false
	l.mu.Lock()
	for _, s := range sensors {
		l.sensors[s.ID] = s
		// Fans cannot cool the air they draw in: inlet sensors say
		// nothing about whether they spin fast enough.
		if s.ReadingType != bmc.Temperature || s.PhysicalContext == "Intake" {
			continue
		}
		if !s.Valid {
			blind = true
			continue
		}
		limit := s.Thresholds.UpperCaution
		if limit == nil {
			limit = s.Thresholds.UpperCritical
		}
		if limit != nil {
			margin = min(margin, *limit-s.Reading)
		}
	}
	failed := false
	for _, f := range fans {
		if f.Health == bmc.Critical || !f.SpeedValid {
			failed = true
		}
	}
	l.level = l.nextLevel(margin)
	duty := l.cfg.BaseDuty
	if l.level > 0 {
		duty = l.cfg.Curve[l.level-1].Duty
	}
	if blind || failed {
		duty = 100
	}
	changed := duty != l.duty
	l.duty = duty
	l.mu.Unlock()

	var errs []error
	for _, f := range fans {
		if !changed && math.Abs(f.DutyPercent-duty) < 0.5 {
			continue
		}
		if err := l.cfg.Board.SetFanDuty(ctx, f.ID, duty); err != nil {
			errs = append(errs, fmt.Errorf("policy: set %s to %g %%: %w", f.ID, duty, err))
		}
	}
	if changed {
		l.log.Info("policy: fan duty", "duty", duty, "margin", margin, "blind", blind, "fan_failed", failed)
	}
	l.wd.Kick()
	return errors.Join(errs...)
}

// nextLevel applies the curve with hysteresis: up at once, down one or
// more steps only when the margin clears the step's bound by Hysteresis.
// Called with mu held.
func (l *Loop) nextLevel(margin float64) int {
	at := func(m float64) int {
		lv := 0
		for i, s := range l.cfg.Curve {
			if m < s.Below {
				lv = i + 1
			}
		}
		return lv
	}
	target := at(margin)
	if target >= l.level {
		return target
	}
	return max(target, at(margin-l.cfg.Hysteresis))
}

// Duty returns the fan duty the loop last chose (NaN before its first
// step).
func (l *Loop) Duty() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.duty
}

// Alarm publishes ev and logs it with its registry message.
func (l *Loop) Alarm(ev bmc.Event) {
	l.cfg.Sink.Event(ev)
	e := LogEntry{Time: ev.Time, Message: ev.Message, Origin: ev.SensorID, Severity: severity(ev.Health)}
	if e.Time.IsZero() {
		e.Time = l.cfg.Clock()
	}
	const reg = "ResourceEvent.1.4."
	switch ev.Kind {
	case bmc.EventThreshold:
		l.mu.Lock()
		s := l.sensors[ev.SensorID]
		l.mu.Unlock()
		worse := rank(ev.Level) > rank(ev.PreviousLevel)
		lv := ev.Level
		if !worse {
			lv = ev.PreviousLevel
		}
		id := "ResourceErrorThreshold"
		if lv == bmc.LevelUpperCaution || lv == bmc.LevelLowerCaution {
			id = "ResourceWarningThreshold"
		}
		if worse {
			id += "Exceeded"
		} else {
			id += "Cleared"
			e.Severity = SeverityOK
		}
		e.MessageID = reg + id
		e.Args = []string{ev.SensorID, thresholdValue(s.Thresholds, lv)}
	case bmc.EventHeadPower:
		e.MessageID = reg + "ResourcePoweredOn"
		if ev.PowerState == bmc.PowerOff {
			e.MessageID = reg + "ResourcePoweredOff"
		}
		e.Args = []string{ev.SensorID}
	default:
		origin := ev.SensorID
		if origin == "" {
			origin = "BoardController"
			e.Origin = origin
		}
		e.MessageID = reg + "ResourceStatusChanged" + string(healthOr(ev.Health))
		e.Args = []string{origin, string(healthOr(ev.Health))}
	}
	l.cfg.Sink.Log(e)
}

func healthOr(h bmc.Health) bmc.Health {
	if h == "" {
		return bmc.OK
	}
	return h
}

func severity(h bmc.Health) Severity {
	switch h {
	case bmc.Warning:
		return SeverityWarning
	case bmc.Critical:
		return SeverityCritical
	}
	return SeverityOK
}

// rank orders levels by severity regardless of direction.
func rank(l bmc.Level) int {
	switch l {
	case bmc.LevelUpperCaution, bmc.LevelLowerCaution:
		return 1
	case bmc.LevelUpperCritical, bmc.LevelLowerCritical:
		return 2
	case bmc.LevelUpperFatal, bmc.LevelLowerFatal:
		return 3
	}
	return 0
}

// thresholdValue formats the threshold of level lv, or "" if unknown.
func thresholdValue(t bmc.Thresholds, lv bmc.Level) string {
	var p *float64
	switch lv {
	case bmc.LevelUpperCaution:
		p = t.UpperCaution
	case bmc.LevelUpperCritical:
		p = t.UpperCritical
	case bmc.LevelUpperFatal:
		p = t.UpperFatal
	case bmc.LevelLowerCaution:
		p = t.LowerCaution
	case bmc.LevelLowerCritical:
		p = t.LowerCritical
	case bmc.LevelLowerFatal:
		p = t.LowerFatal
	}
	if p == nil {
		return ""
	}
	return strconv.FormatFloat(*p, 'g', -1, 64)
}
