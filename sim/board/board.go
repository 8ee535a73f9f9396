// Package board simulates the memory box's board controller: a PLDM
// terminus (DSP0240 base discovery, DSP0248 platform monitoring and
// control) that the virtual box serves as a second MCTP endpoint (EID 9 by
// default) on the same device link as the DCD.
//
// Behind the PDR repository sits a small thermal and electrical model on
// an injectable clock: DIMM banks and the memory controller heat up with
// the load the box drives into them (SetLoad, SetBankLoad) and are cooled
// by the air the fans move; fan speed follows the commanded duty with
// spin-up lag; the outlet temperature follows total heat over airflow;
// PSUs share the DC load and report input/output power and voltage. Every
// temperature and fan speed is a first-order system, integrated lazily
// whenever the board is asked or polled. Faults: a failed fan (stops, its
// speed falls through its thresholds), a sensor that stops answering (its
// requests go unanswered), a PSU lost (reads zero, health critical, the
// other PSUs carry the load). Numeric threshold crossings and state
// changes are sent to the event receiver the FM set with SetEventReceiver
// as PlatformEventMessages, from Poll (which Serve runs periodically).
//
// Wiring: Handle is an mctp.Handler body for an endpoint at Config.EID;
// Serve runs such an endpoint on a PacketLink; Attach splits one link
// between the board and whatever else serves it (the DCD), so a box
// serves both with one call (see Attach).
package board

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"cxlpool/bmc/pldm"
	"cxlpool/fabric/mctp"
)

// Config describes the simulated board. Zero fields take the defaults.
type Config struct {
	EID       mctp.EID // default 9
	TID       uint8    // PLDM terminus ID (default 1)
	Heads     int      // host heads with power control, 1–8 (default 8)
	DIMMBanks int      // 1–16 (default 4)
	Fans      int      // 1–16 (default 4)
	PSUs      int      // 1–4 (default 2)
	// Ambient is the inlet air temperature in °C (default 25).
	Ambient float64
	// InitialDuty is the fans' duty cycle at power-on in % (default 40).
	InitialDuty float64
	// MTU is the MCTP payload size of the endpoint Serve runs (default 64).
	MTU int
	// PollInterval is how often Serve advances the model and sends events
	// (default 1 s).
	PollInterval time.Duration
	// EventTimeout bounds one PlatformEventMessage (default 1 s); an event
	// the receiver does not acknowledge is dropped.
	EventTimeout time.Duration
	Clock        func() time.Time
	Logger       *slog.Logger
	// OnHeadPower is told when a head's power effecter switches it on or
	// off, so the box can drop or raise that head's link. It runs with
	// the board's lock held and must not call back into the board.
	OnHeadPower func(head int, on bool)
}

func (c *Config) setDefaults() error {
	if c.EID == mctp.EIDNull {
		c.EID = pldm.DefaultBoardEID
	}
	if c.EID == mctp.EIDBroadcast {
		return errors.New("board: config: broadcast EID is not assignable")
	}
	if c.TID == 0 {
		c.TID = 1
	}
	def := func(v *int, d, lo, hi int, what string) error {
		if *v == 0 {
			*v = d
		}
		if *v < lo || *v > hi {
			return fmt.Errorf("board: config: %s %d not in %d…%d", what, *v, lo, hi)
		}
		return nil
	}
	if err := errors.Join(
		def(&c.Heads, 8, 1, pldm.MaxComposite, "heads"),
		def(&c.DIMMBanks, 4, 1, 16, "DIMM banks"),
		def(&c.Fans, 4, 1, 16, "fans"),
		def(&c.PSUs, 2, 1, 4, "PSUs"),
	); err != nil {
		return err
	}
	if c.Ambient == 0 {
		c.Ambient = 25
	}
	if c.InitialDuty == 0 {
		c.InitialDuty = 40
	}
	if c.InitialDuty < minDuty || c.InitialDuty > 100 {
		return fmt.Errorf("board: config: initial duty %g not in %d…100", c.InitialDuty, minDuty)
	}
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
	if c.EventTimeout <= 0 {
		c.EventTimeout = time.Second
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Board is one simulated board controller. It is safe for concurrent use.
type Board struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	m        *model
	last     time.Time
	num      []*numSensor
	states   []*stateSensor
	numEff   []*numEffecter
	stateEff []*stateEffecter
	records  [][]byte // encoded PDRs; record handle = index+1
	receiver mctp.EID // 0 = no event receiver
	pending  []pldm.SensorEvent
	req      pldm.Requester
	buildErr error

	sendMu sync.Mutex // Polls send one at a time, in order
}

// New builds a board at steady state for its initial inputs.
func New(cfg Config) (*Board, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	b := &Board{cfg: cfg, log: cfg.Logger, m: newModel(cfg), last: cfg.Clock()}
	if err := b.build(); err != nil {
		return nil, err
	}
	for _, s := range b.num {
		s.evaluate(b.m)
		s.previous = s.present
		s.event = s.present
	}
	for _, s := range b.states {
		s.present = s.read(b.m)
		s.previous = append([]uint8(nil), s.present...)
	}
	return b, nil
}

// EID returns the board's MCTP endpoint ID.
func (b *Board) EID() mctp.EID { return b.cfg.EID }

// SetRequester sets how the board sends requests (PlatformEventMessage):
// normally the mctp.Endpoint that serves Handle. Serve sets it itself.
func (b *Board) SetRequester(r pldm.Requester) {
	b.mu.Lock()
	b.req = r
	b.mu.Unlock()
}

// advanceLocked brings the model to the clock's now and re-evaluates every
// sensor, queueing events for changes. Called with mu held.
func (b *Board) advanceLocked() {
	now := b.cfg.Clock()
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.m.advance(dt)
		b.last = now
	}
	for _, s := range b.num {
		if ev, changed := s.evaluate(b.m); changed && !s.silent {
			b.queueLocked(ev)
		}
	}
	for _, s := range b.states {
		now := s.read(b.m)
		for i := range now {
			if now[i] != s.present[i] {
				s.previous[i] = s.present[i]
				prev := s.present[i]
				s.present[i] = now[i]
				if !s.silent {
					b.queueLocked(pldm.SensorEvent{SensorID: s.pdr.SensorID, Class: pldm.StateSensorEvent,
						Offset: uint8(i), State: now[i], PreviousState: prev})
				}
			}
		}
	}
}

// maxPending bounds the event queue while no receiver drains it.
const maxPending = 256

func (b *Board) queueLocked(ev pldm.SensorEvent) {
	if b.receiver == mctp.EIDNull {
		return
	}
	if len(b.pending) >= maxPending {
		b.pending = b.pending[1:]
	}
	b.pending = append(b.pending, ev)
}

// Poll advances the model to the clock's present and sends every queued
// event to the event receiver, in order. An event the receiver does not
// acknowledge within EventTimeout is dropped (and logged). Poll returns
// the first send error, if any.
func (b *Board) Poll(ctx context.Context) error {
	b.sendMu.Lock()
	defer b.sendMu.Unlock()
	b.mu.Lock()
	b.advanceLocked()
	evs, dst, r := b.pending, b.receiver, b.req
	b.pending = nil
	b.mu.Unlock()
	if len(evs) == 0 || dst == mctp.EIDNull || r == nil {
		return nil
	}
	c := pldm.NewClient(r, pldm.ClientConfig{EID: dst, Timeout: b.cfg.EventTimeout, Retries: -1})
	var first error
	for _, ev := range evs {
		data, err := ev.MarshalBinary()
		if err == nil {
			_, err = c.PlatformEvent(ctx, pldm.PlatformEventMessageReq{
				FormatVersion: pldm.PlatformEventFormatVersion, TID: b.cfg.TID, Class: pldm.EventClassSensor, Data: data})
		}
		if err != nil {
			b.log.Debug("board: event not delivered", "sensor", ev.SensorID, "err", err)
			if first == nil {
				first = fmt.Errorf("board: event for sensor %d: %w", ev.SensorID, err)
			}
			if ctx.Err() != nil {
				return first
			}
		}
	}
	return first
}

// Run calls Poll every PollInterval until ctx ends.
func (b *Board) Run(ctx context.Context) {
	t := time.NewTicker(b.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = b.Poll(ctx)
		}
	}
}

// update applies f to the model after bringing it up to date, so the
// change takes effect from now on.
func (b *Board) update(f func(m *model) error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked()
	return f(b.m)
}

// SetLoad sets every DIMM bank's utilisation (0–1, clamped): the input the
// box drives from its telemetry workloads.
func (b *Board) SetLoad(util float64) {
	_ = b.update(func(m *model) error {
		for i := range m.bankLoad {
			m.bankLoad[i] = clamp01(util)
		}
		return nil
	})
}

// SetBankLoad sets one DIMM bank's utilisation (0–1, clamped).
func (b *Board) SetBankLoad(bank int, util float64) error {
	return b.update(func(m *model) error {
		if bank < 0 || bank >= len(m.bankLoad) {
			return fmt.Errorf("board: DIMM bank %d of %d", bank, len(m.bankLoad))
		}
		m.bankLoad[bank] = clamp01(util)
		return nil
	})
}

// SetAmbient sets the inlet air temperature in °C.
func (b *Board) SetAmbient(celsius float64) {
	_ = b.update(func(m *model) error { m.ambient = celsius; return nil })
}

// FailFan stops fan i (0-based; its PDRs and name say i+1) or repairs it.
func (b *Board) FailFan(i int, failed bool) error {
	return b.update(func(m *model) error {
		if i < 0 || i >= len(m.fanFailed) {
			return fmt.Errorf("board: fan %d of %d", i, len(m.fanFailed))
		}
		m.fanFailed[i] = failed
		return nil
	})
}

// LosePSU takes PSU i (0-based) off line or restores it.
func (b *Board) LosePSU(i int, lost bool) error {
	return b.update(func(m *model) error {
		if i < 0 || i >= len(m.psuLost) {
			return fmt.Errorf("board: PSU %d of %d", i, len(m.psuLost))
		}
		m.psuLost[i] = lost
		return nil
	})
}

// SilenceSensor makes the sensor named name (as in its auxiliary names
// PDR, e.g. "Inlet Temp") stop answering requests and sending events, or
// answer again.
func (b *Board) SilenceSensor(name string, silent bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.num {
		if s.name == name {
			s.silent = silent
			return nil
		}
	}
	for _, s := range b.states {
		if s.name == name {
			s.silent = silent
			return nil
		}
	}
	return fmt.Errorf("board: no sensor named %q", name)
}

// SensorID returns the PLDM sensor ID of the sensor named name.
func (b *Board) SensorID(name string) (uint16, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.num {
		if s.name == name {
			return s.pdr.SensorID, true
		}
	}
	for _, s := range b.states {
		if s.name == name {
			return s.pdr.SensorID, true
		}
	}
	return 0, false
}

// Snapshot is the model's state, in engineering units, for tests and the
// simulator's own telemetry.
type Snapshot struct {
	Ambient, Outlet, MemoryController float64
	Banks                             []float64 // °C per DIMM bank
	FanDuty, FanRPM                   []float64
	FanFailed, PSULost                []bool
	PSUOutputWatts, PSUInputWatts     []float64
	HeadOn                            []bool
	Identify                          bool
	Receiver                          mctp.EID // 0 = none set
}

// Snapshot advances the model to now and returns its state.
func (b *Board) Snapshot() Snapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked()
	m := b.m
	s := Snapshot{
		Ambient: m.ambient, Outlet: m.outlet, MemoryController: m.mcTemp,
		Banks:     append([]float64(nil), m.bankTemp...),
		FanDuty:   append([]float64(nil), m.fanDuty...),
		FanRPM:    append([]float64(nil), m.fanRPM...),
		FanFailed: append([]bool(nil), m.fanFailed...),
		PSULost:   append([]bool(nil), m.psuLost...),
		HeadOn:    append([]bool(nil), m.headOn...),
		Identify:  m.identify,
		Receiver:  b.receiver,
	}
	for i := range m.psuLost {
		out, in, _, _ := m.psu(i)
		s.PSUOutputWatts = append(s.PSUOutputWatts, out)
		s.PSUInputWatts = append(s.PSUInputWatts, in)
	}
	return s
}

func clamp01(v float64) float64 { return min(max(v, 0), 1) }
