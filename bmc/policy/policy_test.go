package policy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/bmc"
)

// fakeBoard is an in-memory bmc.BoardController that records commands in
// a journal shared with fakeFence, so tests can check their order.
type fakeBoard struct {
	mu       sync.Mutex
	journal  *[]string
	sensors  []bmc.Sensor
	fans     []bmc.Fan
	heads    []bmc.HeadPower
	powerErr error
	events   chan bmc.Event
}

func (b *fakeBoard) log(format string, args ...any) {
	*b.journal = append(*b.journal, fmt.Sprintf(format, args...))
}

func (b *fakeBoard) Sensors(context.Context) ([]bmc.Sensor, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]bmc.Sensor(nil), b.sensors...), nil
}

func (b *fakeBoard) Sensor(_ context.Context, id string) (bmc.Sensor, error) {
	return bmc.Sensor{}, bmc.ErrNotFound
}

func (b *fakeBoard) Fans(context.Context) ([]bmc.Fan, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]bmc.Fan(nil), b.fans...), nil
}

func (b *fakeBoard) SetFanDuty(_ context.Context, id string, pct float64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.log("duty %s %g", id, pct)
	for i := range b.fans {
		if b.fans[i].ID == id {
			b.fans[i].DutyPercent = pct
		}
	}
	return nil
}

func (b *fakeBoard) PowerSupplies(context.Context) ([]bmc.PowerSupply, error) { return nil, nil }

func (b *fakeBoard) HeadPower(context.Context) ([]bmc.HeadPower, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]bmc.HeadPower(nil), b.heads...), nil
}

func (b *fakeBoard) SetHeadPower(_ context.Context, host int, s bmc.PowerState) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.log("power %d %s", host, s)
	if b.powerErr != nil {
		return b.powerErr
	}
	b.heads[host].State = s
	return nil
}

func (b *fakeBoard) Identify(context.Context) (bool, error)  { return false, nil }
func (b *fakeBoard) SetIdentify(context.Context, bool) error { return nil }
func (b *fakeBoard) Events() <-chan bmc.Event                { return b.events }

type fakeFence struct {
	mu       sync.Mutex
	journal  *[]string
	fenceErr error
}

func (f *fakeFence) Fence(_ context.Context, host int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	*f.journal = append(*f.journal, fmt.Sprintf("fence %d", host))
	return f.fenceErr
}

func (f *fakeFence) Recover(_ context.Context, host int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	*f.journal = append(*f.journal, fmt.Sprintf("recover %d", host))
	return nil
}

type recordSink struct {
	mu     sync.Mutex
	events []bmc.Event
	logs   []LogEntry
	notify chan struct{} // if set, receives after every Event
}

func (s *recordSink) Event(ev bmc.Event) {
	s.mu.Lock()
	s.events = append(s.events, ev)
	s.mu.Unlock()
	if s.notify != nil {
		s.notify <- struct{}{}
	}
}

func (s *recordSink) Log(e LogEntry) {
	s.mu.Lock()
	s.logs = append(s.logs, e)
	s.mu.Unlock()
}

func ptr(v float64) *float64 { return &v }

func temp(id string, v float64) bmc.Sensor {
	return bmc.Sensor{ID: id, ReadingType: bmc.Temperature, Reading: v, Valid: true, State: bmc.Enabled, Health: bmc.OK,
		Thresholds: bmc.Thresholds{UpperCaution: ptr(75), UpperCritical: ptr(85)}}
}

type harness struct {
	journal []string
	board   *fakeBoard
	fence   *fakeFence
	sink    *recordSink
	loop    *Loop
}

func newHarness(t *testing.T, mod func(*Config)) *harness {
	t.Helper()
	h := &harness{sink: &recordSink{}}
	h.board = &fakeBoard{journal: &h.journal, events: make(chan bmc.Event, 8),
		sensors: []bmc.Sensor{temp("DIMM", 40), temp("Inlet", 25)},
		fans: []bmc.Fan{{ID: "Fan1", SpeedValid: true, Health: bmc.OK, DutyPercent: 40},
			{ID: "Fan2", SpeedValid: true, Health: bmc.OK, DutyPercent: 40}},
		heads: []bmc.HeadPower{{Host: 0, State: bmc.PowerOn}, {Host: 1, State: bmc.PowerOn}, {Host: 2, State: bmc.PowerOn}, {Host: 3, State: bmc.PowerOff}}}
	h.fence = &fakeFence{journal: &h.journal}
	cfg := Config{Board: h.board, Fence: h.fence, Sink: h.sink,
		Sleep: func(_ context.Context, d time.Duration) error {
			h.journal = append(h.journal, "sleep "+d.String())
			return nil
		}}
	if mod != nil {
		mod(&cfg)
	}
	l, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.loop = l
	return h
}

func TestFanCurve(t *testing.T) {
	h := newHarness(t, nil)
	// Caution at 75 °C: margins 35, 19, 9, 11, 13, 4, 25, 35.
	steps := []struct {
		dimm float64
		want float64
	}{
		{40, 30}, {56, 50}, {66, 75},
		{64, 75}, // 11 °C margin: within 3 °C of the 10 °C step, hold
		{62, 50}, // 13 °C: clear, one step down
		{71, 100}, {50, 30}, {40, 30},
	}
	for i, st := range steps {
		h.board.sensors[0].Reading = st.dimm
		h.journal = nil
		if err := h.loop.Step(context.Background()); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := h.loop.Duty(); got != st.want {
			t.Errorf("step %d at %.0f °C: got duty %g %%, want %g %%", i, st.dimm, got, st.want)
		}
		for _, f := range h.board.fans {
			if f.DutyPercent != st.want {
				t.Errorf("step %d: %s at %g %%, want %g %%", i, f.ID, f.DutyPercent, st.want)
			}
		}
		if i == len(steps)-1 && len(h.journal) != 0 {
			t.Errorf("unchanged duty re-sent: %v", h.journal)
		}
	}
}

func TestFailSafe(t *testing.T) {
	tests := []struct {
		name string
		mod  func(b *fakeBoard)
	}{
		{"unreadable temperature", func(b *fakeBoard) { b.sensors[1].Valid = false }},
		{"failed fan", func(b *fakeBoard) { b.fans[1].Health = bmc.Critical }},
		{"fan speed unreadable", func(b *fakeBoard) { b.fans[0].SpeedValid = false }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			tt.mod(h.board)
			if err := h.loop.Step(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := h.loop.Duty(); got != 100 {
				t.Errorf("got duty %g %%, want 100 %%", got)
			}
		})
	}
	h := newHarness(t, nil)
	if !math.IsNaN(h.loop.Duty()) {
		t.Errorf("duty before the first step: got %g, want NaN", h.loop.Duty())
	}
	if _, err := New(Config{Board: h.board, Sink: h.sink, Curve: []Step{{Below: 5, Duty: 50}, {Below: 10, Duty: 75}}}); err == nil {
		t.Errorf("New with an out-of-order curve: got nil error")
	}
}

func TestAlarms(t *testing.T) {
	h := newHarness(t, nil)
	if err := h.loop.Step(context.Background()); err != nil { // learns the thresholds
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		ev   bmc.Event
		want LogEntry
	}{
		{bmc.Event{Time: now, Kind: bmc.EventThreshold, SensorID: "DIMM", Level: bmc.LevelUpperCaution, Health: bmc.Warning, Message: "m"},
			LogEntry{Time: now, Severity: SeverityWarning, MessageID: "ResourceEvent.1.4.ResourceWarningThresholdExceeded", Args: []string{"DIMM", "75"}, Message: "m", Origin: "DIMM"}},
		{bmc.Event{Time: now, Kind: bmc.EventThreshold, SensorID: "DIMM", Level: bmc.LevelUpperCritical, PreviousLevel: bmc.LevelUpperCaution, Health: bmc.Critical},
			LogEntry{Time: now, Severity: SeverityCritical, MessageID: "ResourceEvent.1.4.ResourceErrorThresholdExceeded", Args: []string{"DIMM", "85"}, Origin: "DIMM"}},
		{bmc.Event{Time: now, Kind: bmc.EventThreshold, SensorID: "DIMM", Level: bmc.LevelUpperCaution, PreviousLevel: bmc.LevelUpperCritical, Health: bmc.Warning},
			LogEntry{Time: now, Severity: SeverityOK, MessageID: "ResourceEvent.1.4.ResourceErrorThresholdCleared", Args: []string{"DIMM", "85"}, Origin: "DIMM"}},
		{bmc.Event{Time: now, Kind: bmc.EventFanFailed, SensorID: "Fan1", Health: bmc.Critical},
			LogEntry{Time: now, Severity: SeverityCritical, MessageID: "ResourceEvent.1.4.ResourceStatusChangedCritical", Args: []string{"Fan1", "Critical"}, Origin: "Fan1"}},
		{bmc.Event{Time: now, Kind: bmc.EventPSURestored, SensorID: "PSU2", Health: bmc.OK},
			LogEntry{Time: now, Severity: SeverityOK, MessageID: "ResourceEvent.1.4.ResourceStatusChangedOK", Args: []string{"PSU2", "OK"}, Origin: "PSU2"}},
		{bmc.Event{Time: now, Kind: bmc.EventHeadPower, SensorID: "Head3", PowerState: bmc.PowerOff, Health: bmc.OK},
			LogEntry{Time: now, Severity: SeverityOK, MessageID: "ResourceEvent.1.4.ResourcePoweredOff", Args: []string{"Head3"}, Origin: "Head3"}},
		{bmc.Event{Time: now, Kind: bmc.EventControllerDown, Health: bmc.Critical},
			LogEntry{Time: now, Severity: SeverityCritical, MessageID: "ResourceEvent.1.4.ResourceStatusChangedCritical", Args: []string{"BoardController", "Critical"}, Origin: "BoardController"}},
	}
	for _, tt := range tests {
		h.sink.logs = nil
		h.loop.Alarm(tt.ev)
		if diff := cmp.Diff([]LogEntry{tt.want}, h.sink.logs); diff != "" {
			t.Errorf("%s %s: log mismatch (-want +got):\n%s", tt.ev.Kind, tt.ev.SensorID, diff)
		}
	}
	if len(h.sink.events) != len(tests) {
		t.Errorf("events published: got %d, want %d", len(h.sink.events), len(tests))
	}
}

func TestResetHead(t *testing.T) {
	errBoom := errors.New("boom")
	tests := []struct {
		name    string
		host    int
		typ     bmc.ResetType
		mod     func(h *harness)
		want    []string
		wantErr error
	}{
		{"power cycle", 2, bmc.ResetPowerCycle, nil,
			[]string{"fence 2", "power 2 Off", "sleep 5s", "power 2 On", "recover 2"}, nil},
		{"force restart of an off head just powers on", 3, bmc.ResetForceRestart, nil,
			[]string{"power 3 On", "recover 3"}, nil},
		{"force off", 1, bmc.ResetForceOff, nil, []string{"fence 1", "power 1 Off"}, nil},
		{"force off of an off head", 3, bmc.ResetForceOff, nil, nil, nil},
		{"on", 3, bmc.ResetOn, nil, []string{"power 3 On", "recover 3"}, nil},
		{"on of an on head recovers", 0, bmc.ResetOn, nil, []string{"recover 0"}, nil},
		{"fence fails: power stays on", 1, bmc.ResetForceOff, func(h *harness) { h.fence.fenceErr = errBoom },
			[]string{"fence 1", "recover 1"}, errBoom},
		{"power off fails: fence lifted", 1, bmc.ResetPowerCycle, func(h *harness) { h.board.powerErr = errBoom },
			[]string{"fence 1", "power 1 Off", "recover 1"}, errBoom},
		{"unknown head", 4, bmc.ResetOn, nil, nil, bmc.ErrNotFound},
		{"unsupported type", 1, "Nmi", nil, nil, bmc.ErrInvalid},
		{"no fence", 1, bmc.ResetForceOff, func(h *harness) { h.loop.cfg.Fence = nil }, nil, bmc.ErrUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			if tt.mod != nil {
				tt.mod(h)
			}
			err := h.loop.ResetHead(context.Background(), tt.host, tt.typ)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Errorf("got error %v, want %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, h.journal); diff != "" {
				t.Errorf("journal mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResetHeadBusy(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	h := newHarness(t, func(c *Config) {
		c.Sleep = func(ctx context.Context, _ time.Duration) error {
			close(entered)
			<-release
			return nil
		}
	})
	done := make(chan error)
	go func() { done <- h.loop.ResetHead(context.Background(), 2, bmc.ResetPowerCycle) }()
	<-entered
	if err := h.loop.ResetHead(context.Background(), 2, bmc.ResetOn); !errors.Is(err, bmc.ErrBusy) {
		t.Errorf("second reset of head 2: got %v, want ErrBusy", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Errorf("power cycle: %v", err)
	}
	if err := h.loop.ResetHead(context.Background(), 2, bmc.ResetOn); err != nil {
		t.Errorf("reset after the cycle ended: %v", err)
	}
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestWatchdog(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	var fired []time.Duration
	w := NewWatchdog(10*time.Second, clk.Now, func(d time.Duration) { fired = append(fired, d) })
	steps := []struct {
		advance time.Duration
		kick    bool
		stalled bool
	}{
		{5 * time.Second, false, false},
		{6 * time.Second, false, true},  // 11 s without a kick: fires
		{5 * time.Second, false, true},  // still stalled, does not fire again
		{0, true, false},                // kicked: re-armed
		{11 * time.Second, false, true}, // fires again
	}
	for i, st := range steps {
		clk.Advance(st.advance)
		if st.kick {
			w.Kick()
		}
		if got := w.Check(); got != st.stalled {
			t.Errorf("step %d: stalled %v, want %v", i, got, st.stalled)
		}
	}
	if diff := cmp.Diff([]time.Duration{11 * time.Second, 11 * time.Second}, fired); diff != "" {
		t.Errorf("hook calls (-want +got):\n%s", diff)
	}
}

func TestLoopWatchdogLogs(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	var stalled time.Duration
	h := newHarness(t, func(c *Config) {
		c.Clock = clk.Now
		c.Watchdog = time.Minute
		c.OnStall = func(d time.Duration) { stalled = d }
	})
	if err := h.loop.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Minute)
	if !h.loop.Watchdog().Check() || stalled != 2*time.Minute {
		t.Fatalf("watchdog after 2 min without a step: hook got %v, want 2m0s", stalled)
	}
	if n := len(h.sink.logs); n != 1 || h.sink.logs[0].Severity != SeverityCritical {
		t.Errorf("logs: got %+v, want one critical entry", h.sink.logs)
	}
}

// TestRunForwardsEvents runs the loop briefly: the first step sets the
// fans and board events come out of the sink.
func TestRunForwardsEvents(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Interval = time.Hour })
	h.sink.notify = make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- h.loop.Run(ctx) }()
	h.board.events <- bmc.Event{Kind: bmc.EventPSULost, SensorID: "PSU1", Health: bmc.Critical}
	close(h.board.events)
	<-h.sink.notify
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if got := h.loop.Duty(); got != 30 {
		t.Errorf("duty after the first step: got %g, want 30", got)
	}
}
