package pldm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"cxlpool/bmc"
	"cxlpool/fabric/mctp"
)

// State sets (DSP0249) the Controller understands.
const (
	StateSetHealth      uint16 = 1   // 1 Normal, 2 Non-Critical, 3 Critical, 4 Fatal, 5–10 upper/lower variants
	StateSetIdentify    uint16 = 17  // 1 Unasserted, 2 Asserted
	StateSetDevicePower uint16 = 257 // 1 Fully On, 4 Off
)

// Values of the state sets above.
const (
	HealthNormal       = 1
	IdentifyUnasserted = 1
	IdentifyAsserted   = 2
	DevicePowerOn      = 1
	DevicePowerOff     = 4
)

// Controller defaults.
const (
	DefaultMaxAge          = 2 * time.Second
	DefaultReadTimeout     = time.Second
	DefaultReprobeInterval = 30 * time.Second
	DefaultEventBuffer     = 64
)

// ControllerConfig configures a Controller. Zero fields take the defaults.
type ControllerConfig struct {
	// ReceiverEID is the EID of the endpoint whose handler passes PLDM
	// requests to Controller.Handle (the daemon's own EID on the device
	// link). Discover registers it with SetEventReceiver; 0 leaves events
	// off and the controller relies on polling.
	ReceiverEID mctp.EID
	// MaxAge is how old cached readings may be before a read refreshes
	// them (default 2 s).
	MaxAge time.Duration
	// ReadTimeout bounds one sensor read, retries included (default 1 s).
	ReadTimeout time.Duration
	// ReprobeInterval is how long a sensor that did not answer is reported
	// unavailable without being asked again (default 30 s), so one dead
	// sensor does not stall every refresh.
	ReprobeInterval time.Duration
	// EventBuffer is the Events channel capacity (default 64); events that
	// do not fit are dropped and answered loggingRejected.
	EventBuffer int
	Clock       func() time.Time
	Logger      *slog.Logger
}

// Controller is the daemon's view of the board controller: it discovers
// the terminus and its PDR repository, maps the PDRs onto the bmc domain
// (sensors, fans, PSUs, head power, identify LED), keeps a reading cache,
// and turns PlatformEventMessages into bmc.Events. It implements
// bmc.BoardController.
//
// Mapping conventions (the board's PDRs carry no Redfish names):
//   - names come from the Sensor/Effecter Auxiliary Names PDRs ("en"), IDs
//     are the names without spaces and punctuation ("Inlet Temp" →
//     "InletTemp");
//   - a fan is the entity (93 Fan, i): its RPM sensor and its % effecter;
//   - a PSU is the entity (120 Power supply, i): its W and V sensors, told
//     apart as input or output by "Input"/"Output" in their names, and a
//     Health State (set 1) state sensor;
//   - head power is a state effecter (and state sensor) of set 257 Device
//     Power State whose composite n is host n;
//   - the identify LED is a state effecter (and sensor) of set 17.
type Controller struct {
	c   *Client
	cfg ControllerConfig
	log *slog.Logger

	refreshMu sync.Mutex // one refresh at a time

	mu          sync.Mutex
	tid         uint8
	ready       bool
	lastRefresh time.Time
	sensors     map[uint16]*sensorEntry // numeric, by PLDM sensor ID
	byName      map[string]*sensorEntry // by bmc ID
	states      map[uint16]*stateEntry
	fans        []*fanEntry
	psus        []*psuEntry
	headSensor  *stateEntry
	headEff     *StateEffecterPDR
	headState   []bmc.PowerState
	identSensor *stateEntry
	identEff    *StateEffecterPDR
	identOn     bool
	closed      bool
	down        bool // the last refresh got no answer at all
	dropped     int  // events that did not fit the channel
	events      chan bmc.Event
}

type sensorEntry struct {
	pdr       *NumericSensorPDR
	s         bmc.Sensor
	deadUntil time.Time
	fan       *fanEntry
	seen      bool // answered at least once
}

type stateEntry struct {
	pdr       *StateSensorPDR
	name      string
	present   []uint8
	valid     bool
	deadUntil time.Time
}

type fanEntry struct {
	id, name string
	instance uint16
	speed    *sensorEntry
	duty     *NumericEffecterPDR
	dutyPct  float64
}

type psuEntry struct {
	id, name             string
	instance             uint16
	inW, outW, inV, outV *sensorEntry
	health               *stateEntry
}

var _ bmc.BoardController = (*Controller)(nil)

// NewController returns a controller that talks through c. Call Discover
// before anything else.
func NewController(c *Client, cfg ControllerConfig) *Controller {
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = DefaultMaxAge
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = DefaultReadTimeout
	}
	if cfg.ReprobeInterval <= 0 {
		cfg.ReprobeInterval = DefaultReprobeInterval
	}
	if cfg.EventBuffer <= 0 {
		cfg.EventBuffer = DefaultEventBuffer
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Controller{c: c, cfg: cfg, log: cfg.Logger, events: make(chan bmc.Event, cfg.EventBuffer)}
}

// Discover identifies the terminus, checks it speaks platform monitoring,
// reads the whole PDR repository, registers the event receiver and takes
// a first reading of everything. It may be called again (after the board
// controller restarted) to rebuild the model.
func (c *Controller) Discover(ctx context.Context) error {
	tid, err := c.c.GetTID(ctx)
	if err != nil {
		return unavailable("discover: GetTID", err)
	}
	types, err := c.c.GetTypes(ctx)
	if err != nil {
		return unavailable("discover: GetPLDMTypes", err)
	}
	if !types.Has(TypePlatform) {
		return fmt.Errorf("pldm: discover: terminus %d does not support platform monitoring: %w", tid, bmc.ErrUnsupported)
	}
	vers, err := c.c.GetVersions(ctx, TypePlatform)
	if err != nil || len(vers) == 0 {
		return unavailable("discover: GetPLDMVersion", err)
	}
	cmds, err := c.c.GetCommands(ctx, TypePlatform, vers[len(vers)-1])
	if err != nil {
		return unavailable("discover: GetPLDMCommands", err)
	}
	for _, need := range []Command{CmdGetPDR, CmdGetPDRRepositoryInfo, CmdGetSensorReading} {
		if !cmds.Has(need) {
			return fmt.Errorf("pldm: discover: terminus lacks platform command %#02x: %w", uint8(need), bmc.ErrUnsupported)
		}
	}
	pdrs, err := c.c.ReadRepository(ctx)
	if err != nil {
		return unavailable("discover: PDR repository", err)
	}
	c.mu.Lock()
	c.tid = tid
	c.build(pdrs)
	c.ready = true
	c.lastRefresh = time.Time{}
	c.mu.Unlock()
	if c.cfg.ReceiverEID != mctp.EIDNull && cmds.Has(CmdSetEventReceiver) {
		err := c.c.SetEventReceiver(ctx, SetEventReceiverReq{Enable: EventReceiverAsync, Transport: TransportMCTP, Address: uint8(c.cfg.ReceiverEID)})
		if err != nil {
			return unavailable("discover: SetEventReceiver", err)
		}
	}
	c.log.Info("pldm: board controller discovered", "tid", tid, "version", vers[len(vers)-1], "pdrs", len(pdrs))
	if err := c.Refresh(ctx); err != nil {
		return err
	}
	c.emit(bmc.Event{Kind: bmc.EventControllerUp, Health: bmc.OK, Message: fmt.Sprintf("board controller TID %d discovered with %d PDRs", tid, len(pdrs))})
	return nil
}

// unavailable wraps a transport or protocol failure as bmc.ErrUnavailable.
func unavailable(what string, err error) error {
	if err == nil {
		err = errors.New("empty answer")
	}
	return fmt.Errorf("pldm: %s: %w: %w", what, bmc.ErrUnavailable, err)
}

// build maps the PDRs onto the domain. Called with mu held.
func (c *Controller) build(pdrs []PDR) {
	names := map[[2]uint16]*AuxNamesPDR{} // {0 sensor / 1 effecter, id}
	for _, p := range pdrs {
		if a, ok := p.(*AuxNamesPDR); ok {
			k := [2]uint16{0, a.ID}
			if a.Effecter {
				k[0] = 1
			}
			names[k] = a
		}
	}
	name := func(eff bool, id uint16, composite int, fallback string) string {
		k := [2]uint16{0, id}
		if eff {
			k[0] = 1
		}
		if a := names[k]; a != nil {
			if n := a.Name(composite, "en"); n != "" {
				return n
			}
		}
		return fallback
	}
	c.sensors, c.byName, c.states = map[uint16]*sensorEntry{}, map[string]*sensorEntry{}, map[uint16]*stateEntry{}
	c.fans, c.psus = nil, nil
	c.headSensor, c.headEff, c.identSensor, c.identEff = nil, nil, nil, nil
	fans := map[uint16]*fanEntry{}
	psus := map[uint16]*psuEntry{}
	fan := func(inst uint16) *fanEntry {
		if f := fans[inst]; f != nil {
			return f
		}
		f := &fanEntry{id: fmt.Sprintf("Fan%d", inst), name: fmt.Sprintf("Fan %d", inst), instance: inst}
		fans[inst] = f
		return f
	}
	psu := func(inst uint16) *psuEntry {
		if p := psus[inst]; p != nil {
			return p
		}
		p := &psuEntry{id: fmt.Sprintf("PSU%d", inst), name: fmt.Sprintf("PSU %d", inst), instance: inst}
		psus[inst] = p
		return p
	}
	for _, p := range pdrs {
		switch p := p.(type) {
		case *NumericSensorPDR:
			rt := readingType(p.Units.Base)
			n := name(false, p.SensorID, 0, fmt.Sprintf("%s %d %s", entityName(p.Entity.Type), p.Entity.Instance, rt))
			e := &sensorEntry{pdr: p, s: bmc.Sensor{
				ID: c.uniqueID(n, p.SensorID), Name: n, ReadingType: rt,
				PhysicalContext: physicalContext(n, p.Entity.Type), Thresholds: thresholds(p),
				ReadingRangeMin: p.Value(p.MinReadable), ReadingRangeMax: p.Value(p.MaxReadable),
				Health: bmc.OK, State: bmc.UnavailableOffline,
			}}
			c.sensors[p.SensorID] = e
			c.byName[e.s.ID] = e
			switch p.Entity.Type {
			case EntityFan:
				if p.Units.Base == UnitRPM {
					f := fan(p.Entity.Instance)
					f.speed, e.fan = e, f
				}
			case EntityPowerSupply:
				ps := psu(p.Entity.Instance)
				in := strings.Contains(strings.ToLower(n), "input")
				switch p.Units.Base {
				case UnitWatts:
					if in {
						ps.inW = e
					} else {
						ps.outW = e
					}
				case UnitVolts:
					if in {
						ps.inV = e
					} else {
						ps.outV = e
					}
				}
			}
		case *StateSensorPDR:
			e := &stateEntry{pdr: p, name: name(false, p.SensorID, 0, fmt.Sprintf("%s %d state", entityName(p.Entity.Type), p.Entity.Instance))}
			c.states[p.SensorID] = e
			switch set := p.Composite[0].SetID; {
			case set == StateSetDevicePower:
				c.headSensor = e
			case set == StateSetIdentify:
				c.identSensor = e
			case set == StateSetHealth && p.Entity.Type == EntityPowerSupply:
				psu(p.Entity.Instance).health = e
			}
		case *NumericEffecterPDR:
			if p.Entity.Type == EntityFan && p.Units.Base == UnitPercent {
				fan(p.Entity.Instance).duty = p
			}
		case *StateEffecterPDR:
			switch p.Composite[0].SetID {
			case StateSetDevicePower:
				c.headEff = p
				c.headState = make([]bmc.PowerState, len(p.Composite))
			case StateSetIdentify:
				c.identEff = p
			}
		}
	}
	for _, f := range fans {
		c.fans = append(c.fans, f)
	}
	slices.SortFunc(c.fans, func(a, b *fanEntry) int { return int(a.instance) - int(b.instance) })
	for _, p := range psus {
		c.psus = append(c.psus, p)
	}
	slices.SortFunc(c.psus, func(a, b *psuEntry) int { return int(a.instance) - int(b.instance) })
}

// uniqueID derives a URI-safe ID from a name, adding the PLDM sensor ID
// when two names collapse to the same ID.
func (c *Controller) uniqueID(name string, id uint16) string {
	var b strings.Builder
	for _, r := range name {
		if r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
			b.WriteRune(r)
		}
	}
	s := b.String()
	if s == "" {
		s = "Sensor"
	}
	if _, dup := c.byName[s]; dup {
		s = fmt.Sprintf("%s_%d", s, id)
	}
	return s
}

func readingType(u Unit) bmc.ReadingType {
	switch u {
	case UnitDegreesC:
		return bmc.Temperature
	case UnitRPM:
		return bmc.Rotational
	case UnitVolts:
		return bmc.Voltage
	case UnitAmps:
		return bmc.Current
	case UnitWatts:
		return bmc.Power
	case UnitPercent:
		return bmc.Percent
	}
	return bmc.ReadingType(u.String())
}

func entityName(t uint16) string {
	switch t {
	case EntitySystemChassis:
		return "Chassis"
	case EntitySystemBoard:
		return "Board"
	case EntityMemoryModule:
		return "Memory Module"
	case EntityFan:
		return "Fan"
	case EntityPowerSupply:
		return "PSU"
	case EntityMgmtController:
		return "Management Controller"
	case EntityMemoryControler:
		return "Memory Controller"
	}
	return fmt.Sprintf("Entity %d", t)
}

// physicalContext maps a sensor to a Redfish PhysicalContext: inlet and
// outlet by name (no DSP0249 entity says "air inlet"), the rest by entity.
func physicalContext(name string, entity uint16) string {
	n := strings.ToLower(name)
	switch {
	case strings.Contains(n, "inlet") || strings.Contains(n, "intake"):
		return "Intake"
	case strings.Contains(n, "outlet") || strings.Contains(n, "exhaust"):
		return "Exhaust"
	}
	switch entity {
	case EntityMemoryModule:
		return "Memory"
	case EntityMemoryControler:
		return "MemorySubsystem"
	case EntityFan:
		return "Fan"
	case EntityPowerSupply:
		return "PowerSupply"
	case EntitySystemChassis:
		return "Chassis"
	case EntityMgmtController:
		return "Manager"
	}
	return "SystemBoard"
}

// thresholds converts the PDR's supported thresholds to reading units.
func thresholds(p *NumericSensorPDR) bmc.Thresholds {
	t := bmc.Thresholds{Hysteresis: p.Delta(p.Hysteresis)}
	set := func(bit uint8, v float64) *float64 {
		if p.SupportedThresholds&bit == 0 {
			return nil
		}
		x := p.Threshold(v)
		return &x
	}
	t.UpperCaution = set(ThresholdUpperWarning, p.WarningHigh)
	t.UpperCritical = set(ThresholdUpperCritical, p.CriticalHigh)
	t.UpperFatal = set(ThresholdUpperFatal, p.FatalHigh)
	t.LowerCaution = set(ThresholdLowerWarning, p.WarningLow)
	t.LowerCritical = set(ThresholdLowerCritical, p.CriticalLow)
	t.LowerFatal = set(ThresholdLowerFatal, p.FatalLow)
	return t
}

// level maps a numeric sensor state to a bmc.Level; the direction-less
// warning/critical/fatal and unknown states are classified from the value.
func level(s NumericState, v float64, t bmc.Thresholds) bmc.Level {
	switch s {
	case StateNormal:
		return bmc.LevelNormal
	case StateUpperWarning:
		return bmc.LevelUpperCaution
	case StateUpperCritical:
		return bmc.LevelUpperCritical
	case StateUpperFatal:
		return bmc.LevelUpperFatal
	case StateLowerWarning:
		return bmc.LevelLowerCaution
	case StateLowerCritical:
		return bmc.LevelLowerCritical
	case StateLowerFatal:
		return bmc.LevelLowerFatal
	}
	return t.Classify(v)
}

// Refresh reads every sensor, state sensor and fan duty now. Sensors that
// do not answer are marked invalid and skipped for ReprobeInterval. It
// returns an error wrapping bmc.ErrUnavailable when nothing answered.
func (c *Controller) Refresh(ctx context.Context) error {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	c.mu.Lock()
	if !c.ready {
		c.mu.Unlock()
		return fmt.Errorf("pldm: board controller not discovered: %w", bmc.ErrUnavailable)
	}
	sensors := make([]*sensorEntry, 0, len(c.sensors))
	for _, e := range c.sensors {
		sensors = append(sensors, e)
	}
	states := make([]*stateEntry, 0, len(c.states))
	for _, e := range c.states {
		states = append(states, e)
	}
	fans := slices.Clone(c.fans)
	c.mu.Unlock()

	now := c.cfg.Clock()
	answered, asked := 0, 0
	var lastErr error
	for _, e := range sensors {
		c.mu.Lock()
		skip := now.Before(e.deadUntil)
		c.mu.Unlock()
		if skip {
			continue
		}
		asked++
		rctx, cancel := context.WithTimeout(ctx, c.cfg.ReadTimeout)
		r, err := c.c.SensorReading(rctx, e.pdr.SensorID, false)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c.mu.Lock()
		if err != nil || r.OpState != SensorEnabled {
			lastErr = err
			c.markDeadLocked(e, now, err)
		} else {
			answered++
			c.updateLocked(e, r.PresentState, r.Reading, now)
		}
		c.mu.Unlock()
	}
	for _, e := range states {
		c.mu.Lock()
		skip := now.Before(e.deadUntil)
		c.mu.Unlock()
		if skip {
			continue
		}
		asked++
		rctx, cancel := context.WithTimeout(ctx, c.cfg.ReadTimeout)
		fields, err := c.c.StateSensorReadings(rctx, e.pdr.SensorID, 0)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c.mu.Lock()
		if err != nil {
			lastErr = err
			e.valid, e.deadUntil = false, now.Add(c.cfg.ReprobeInterval)
		} else {
			answered++
			e.valid, e.deadUntil = true, time.Time{}
			present := make([]uint8, len(fields))
			for i, f := range fields {
				present[i] = f.PresentState
			}
			c.stateChangedLocked(e, present, now)
		}
		c.mu.Unlock()
	}
	for _, f := range fans {
		if f.duty == nil {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, c.cfg.ReadTimeout)
		v, err := c.c.NumericEffecter(rctx, f.duty.EffecterID)
		cancel()
		if err == nil {
			c.mu.Lock()
			f.dutyPct = f.duty.Value(v.Present)
			c.mu.Unlock()
		}
	}
	c.mu.Lock()
	c.lastRefresh = now
	wasDown := c.down
	c.down = asked > 0 && answered == 0
	if c.down && !wasDown {
		c.emitLocked(bmc.Event{Time: now, Kind: bmc.EventControllerDown, Health: bmc.Critical,
			Message: fmt.Sprintf("board controller not answering: %v", lastErr)})
	}
	c.mu.Unlock()
	if c.down {
		return unavailable("refresh: no sensor answered", lastErr)
	}
	if wasDown {
		// A controller that restarted has forgotten its event receiver.
		if c.cfg.ReceiverEID != mctp.EIDNull {
			err := c.c.SetEventReceiver(ctx, SetEventReceiverReq{Enable: EventReceiverAsync, Transport: TransportMCTP, Address: uint8(c.cfg.ReceiverEID)})
			if err != nil {
				c.log.Warn("pldm: event receiver not re-registered", "err", err)
			}
		}
		c.emit(bmc.Event{Time: now, Kind: bmc.EventControllerUp, Health: bmc.OK, Message: "board controller answers again"})
	}
	return nil
}

// markDeadLocked records that e did not answer; a sensor that was
// answering raises a SensorState event.
func (c *Controller) markDeadLocked(e *sensorEntry, now time.Time, err error) {
	e.deadUntil = now.Add(c.cfg.ReprobeInterval)
	was := e.s.Valid
	e.s.Valid, e.s.State, e.s.Health = false, bmc.UnavailableOffline, bmc.Warning
	if was {
		c.emitLocked(bmc.Event{Time: now, Kind: bmc.EventSensorState, SensorID: e.s.ID, Health: bmc.Warning,
			Message: fmt.Sprintf("sensor %s stopped answering: %v", e.s.Name, err)})
	}
}

// updateLocked stores a reading. A level change that no event announced
// is announced here, so polling alone still yields threshold events.
func (c *Controller) updateLocked(e *sensorEntry, st NumericState, raw int64, now time.Time) {
	v := e.pdr.Value(raw)
	lv := level(st, v, e.s.Thresholds)
	recovered := e.seen && !e.s.Valid
	prev := e.s.Level
	e.s.Reading, e.s.Valid, e.s.State, e.s.Updated, e.deadUntil = v, true, bmc.Enabled, now, time.Time{}
	e.s.Level, e.s.Health = lv, lv.Health()
	e.seen = true
	if recovered {
		c.emitLocked(bmc.Event{Time: now, Kind: bmc.EventSensorState, SensorID: e.s.ID, Health: e.s.Health, Reading: v,
			Message: fmt.Sprintf("sensor %s answers again", e.s.Name)})
	}
	if lv != prev {
		c.thresholdEventLocked(e, prev, now)
	}
}

// thresholdEventLocked emits a Threshold event for e's present level (and
// FanFailed when a fan's speed drops through its critical threshold).
func (c *Controller) thresholdEventLocked(e *sensorEntry, prev bmc.Level, now time.Time) {
	s := e.s
	msg := fmt.Sprintf("%s %s: %.4g %s", s.Name, describe(s.Level), s.Reading, s.ReadingType.Units())
	c.emitLocked(bmc.Event{Time: now, Kind: bmc.EventThreshold, SensorID: s.ID, Level: s.Level, PreviousLevel: prev,
		Reading: s.Reading, Health: s.Health, Message: msg})
	if e.fan != nil && (s.Level == bmc.LevelLowerCritical || s.Level == bmc.LevelLowerFatal) {
		c.emitLocked(bmc.Event{Time: now, Kind: bmc.EventFanFailed, SensorID: e.fan.id, Level: s.Level, Reading: s.Reading,
			Health: bmc.Critical, Message: fmt.Sprintf("%s failed: %.0f RPM", e.fan.name, s.Reading)})
	}
}

func describe(l bmc.Level) string {
	if l == bmc.LevelNormal {
		return "back to normal"
	}
	return "at " + string(l)
}

// stateChangedLocked stores a state sensor's present states and emits
// events for changes after the first reading.
func (c *Controller) stateChangedLocked(e *stateEntry, present []uint8, now time.Time) {
	old := e.present
	e.present = present
	if e == c.headSensor {
		for i, v := range present {
			if i < len(c.headState) {
				c.headState[i] = powerState(v)
			}
		}
	}
	if e == c.identSensor && len(present) > 0 {
		c.identOn = present[0] == IdentifyAsserted
	}
	if old == nil {
		return
	}
	for i := range min(len(old), len(present)) {
		if old[i] != present[i] {
			c.stateEventLocked(e, i, present[i], now)
		}
	}
}

func powerState(v uint8) bmc.PowerState {
	if v == DevicePowerOn {
		return bmc.PowerOn
	}
	return bmc.PowerOff
}

// stateEventLocked emits the event for composite i of e entering v.
func (c *Controller) stateEventLocked(e *stateEntry, i int, v uint8, now time.Time) {
	switch {
	case e == c.headSensor:
		ps := powerState(v)
		c.emitLocked(bmc.Event{Time: now, Kind: bmc.EventHeadPower, SensorID: fmt.Sprintf("Head%d", i), Health: bmc.OK, PowerState: ps,
			Message: fmt.Sprintf("head %d powered %s", i, strings.ToLower(string(ps)))})
	case e == c.identSensor:
	default:
		for _, p := range c.psus {
			if p.health != e {
				continue
			}
			if v == HealthNormal {
				c.emitLocked(bmc.Event{Time: now, Kind: bmc.EventPSURestored, SensorID: p.id, Health: bmc.OK,
					Message: fmt.Sprintf("%s restored", p.name)})
			} else {
				c.emitLocked(bmc.Event{Time: now, Kind: bmc.EventPSULost, SensorID: p.id, Health: bmc.Critical,
					Message: fmt.Sprintf("%s lost (health state %d)", p.name, v)})
			}
			return
		}
		c.emitLocked(bmc.Event{Time: now, Kind: bmc.EventSensorState, SensorID: e.name, Health: bmc.OK,
			Message: fmt.Sprintf("%s composite %d entered state %d", e.name, i, v)})
	}
}

// emit sends ev on the Events channel unless it is full or closed, and
// reports whether it did.
func (c *Controller) emit(ev bmc.Event) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.emitLocked(ev)
}

func (c *Controller) emitLocked(ev bmc.Event) bool {
	if c.closed {
		return false
	}
	if ev.Time.IsZero() {
		ev.Time = c.cfg.Clock()
	}
	select {
	case c.events <- ev:
		return true
	default:
		c.dropped++
		c.log.Warn("pldm: board event dropped, queue full", "kind", ev.Kind, "sensor", ev.SensorID)
		return false
	}
}

// Handle is the event receiver: an mctp.Handler body for the endpoint at
// ReceiverEID. It answers PlatformEventMessage requests from the board
// controller (sensor events become bmc.Events and update the cache) and
// rejects other PLDM requests; other message types are not answered.
func (c *Controller) Handle(_ context.Context, src mctp.EID, typ mctp.MsgType, msg []byte) ([]byte, bool) {
	if typ != mctp.MsgTypePLDM {
		return nil, false
	}
	h, err := ParseHeader(msg)
	if err != nil || !h.Request {
		return nil, false
	}
	reply := func(cc CompletionCode, p []byte) ([]byte, bool) {
		if h.Datagram {
			return nil, false
		}
		return EncodeResponse(h, cc, p), true
	}
	if h.Type != TypePlatform {
		return reply(CCInvalidType, nil)
	}
	if h.Command != CmdPlatformEventMessage {
		return reply(CCUnsupportedCommand, nil)
	}
	var req PlatformEventMessageReq
	if err := req.UnmarshalBinary(msg[HeaderLen:]); err != nil {
		return reply(CCInvalidLength, nil)
	}
	if req.FormatVersion != PlatformEventFormatVersion {
		return reply(CCUnsupportedEventFormat, nil)
	}
	status := uint8(EventNoLogging)
	if req.Class == EventClassSensor {
		var ev SensorEvent
		if err := ev.UnmarshalBinary(req.Data); err != nil {
			return reply(CCInvalidData, nil)
		}
		if c.sensorEvent(ev) {
			status = EventAcceptedForLogging
		} else {
			status = EventLoggingRejected
		}
	} else {
		c.log.Debug("pldm: platform event ignored", "src", src, "class", req.Class)
	}
	return reply(CCSuccess, []byte{status})
}

// sensorEvent applies one sensor event; false if it had to be dropped.
func (c *Controller) sensorEvent(ev SensorEvent) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.Clock()
	before := c.dropped
	switch ev.Class {
	case NumericSensorEvent:
		e := c.sensors[ev.SensorID]
		if e == nil {
			return true
		}
		c.updateLocked(e, NumericState(ev.State), ev.Reading, now)
	case StateSensorEvent:
		e := c.states[ev.SensorID]
		if e == nil || e.present == nil || int(ev.Offset) >= len(e.present) {
			return true
		}
		present := slices.Clone(e.present)
		present[ev.Offset] = ev.State
		e.valid = true
		c.stateChangedLocked(e, present, now)
	case SensorOpStateEvent:
		if e := c.sensors[ev.SensorID]; e != nil && ev.OpState != SensorEnabled {
			c.markDeadLocked(e, now, fmt.Errorf("operational state %d", ev.OpState))
		}
	}
	return c.dropped == before
}

// fresh refreshes the cache when it is older than MaxAge. A failed
// refresh leaves the cache as it was (sensors then read invalid); only an
// undiscovered controller is an error.
func (c *Controller) fresh(ctx context.Context) error {
	c.mu.Lock()
	ready, age := c.ready, c.cfg.Clock().Sub(c.lastRefresh)
	c.mu.Unlock()
	if !ready {
		return fmt.Errorf("pldm: board controller not discovered: %w", bmc.ErrUnavailable)
	}
	if age < c.cfg.MaxAge {
		return nil
	}
	if err := c.Refresh(ctx); err != nil && ctx.Err() != nil {
		return err
	}
	return nil
}

// Sensors implements bmc.BoardController.
func (c *Controller) Sensors(ctx context.Context) ([]bmc.Sensor, error) {
	if err := c.fresh(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]bmc.Sensor, 0, len(c.byName))
	for _, e := range c.byName {
		out = append(out, e.s)
	}
	slices.SortFunc(out, func(a, b bmc.Sensor) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Sensor implements bmc.BoardController.
func (c *Controller) Sensor(ctx context.Context, id string) (bmc.Sensor, error) {
	if err := c.fresh(ctx); err != nil {
		return bmc.Sensor{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byName[id]
	if e == nil {
		return bmc.Sensor{}, fmt.Errorf("pldm: sensor %q: %w", id, bmc.ErrNotFound)
	}
	return e.s, nil
}

// Fans implements bmc.BoardController.
func (c *Controller) Fans(ctx context.Context) ([]bmc.Fan, error) {
	if err := c.fresh(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]bmc.Fan, 0, len(c.fans))
	for _, f := range c.fans {
		out = append(out, c.fanLocked(f))
	}
	return out, nil
}

func (c *Controller) fanLocked(f *fanEntry) bmc.Fan {
	out := bmc.Fan{ID: f.id, Name: f.name, DutyPercent: f.dutyPct, Health: bmc.OK, State: bmc.Enabled}
	if s := f.speed; s != nil {
		out.SensorID, out.SpeedRPM, out.SpeedValid = s.s.ID, s.s.Reading, s.s.Valid
		out.Health = s.s.Health
		if !s.s.Valid {
			out.State = bmc.UnavailableOffline
		}
	}
	return out
}

// SetFanDuty implements bmc.BoardController. Duties below the fan's
// minimum settable value are raised to it (fans never stop on request).
func (c *Controller) SetFanDuty(ctx context.Context, fanID string, percent float64) error {
	if percent < 0 || percent > 100 || math.IsNaN(percent) {
		return fmt.Errorf("pldm: fan %s duty %g %%: %w", fanID, percent, bmc.ErrInvalid)
	}
	c.mu.Lock()
	var f *fanEntry
	for _, x := range c.fans {
		if x.id == fanID {
			f = x
		}
	}
	c.mu.Unlock()
	if f == nil {
		return fmt.Errorf("pldm: fan %q: %w", fanID, bmc.ErrNotFound)
	}
	if f.duty == nil {
		return fmt.Errorf("pldm: fan %q has no duty control: %w", fanID, bmc.ErrUnsupported)
	}
	raw, err := f.duty.Raw(percent)
	if err != nil {
		return fmt.Errorf("pldm: fan %q: %w: %w", fanID, bmc.ErrUnsupported, err)
	}
	if err := c.c.SetNumericEffecter(ctx, f.duty.EffecterID, f.duty.DataSize, raw); err != nil {
		return commandError(fmt.Sprintf("set fan %s duty", fanID), err)
	}
	c.mu.Lock()
	f.dutyPct = f.duty.Value(raw)
	c.mu.Unlock()
	return nil
}

// commandError maps a failed effecter command: completion codes saying
// the request was wrong become bmc.ErrInvalid, everything else
// bmc.ErrUnavailable.
func commandError(what string, err error) error {
	var cc CompletionCode
	if errors.As(err, &cc) && (cc == CCInvalidData || cc == CCInvalidStateValue || cc == CCUnsupportedEffecterState) {
		return fmt.Errorf("pldm: %s: %w: %w", what, bmc.ErrInvalid, err)
	}
	return unavailable(what, err)
}

// PowerSupplies implements bmc.BoardController.
func (c *Controller) PowerSupplies(ctx context.Context) ([]bmc.PowerSupply, error) {
	if err := c.fresh(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]bmc.PowerSupply, 0, len(c.psus))
	for _, p := range c.psus {
		ps := bmc.PowerSupply{ID: p.id, Name: p.name, Health: bmc.OK, State: bmc.Enabled, ReadingValid: true}
		for _, r := range []struct {
			e   *sensorEntry
			dst *float64
		}{{p.inW, &ps.InputWatts}, {p.outW, &ps.OutputWatts}, {p.inV, &ps.InputVolts}, {p.outV, &ps.OutputVolts}} {
			if r.e == nil {
				continue
			}
			*r.dst = r.e.s.Reading
			ps.SensorIDs = append(ps.SensorIDs, r.e.s.ID)
			ps.ReadingValid = ps.ReadingValid && r.e.s.Valid
		}
		if h := p.health; h != nil && h.valid && len(h.present) > 0 && h.present[0] != HealthNormal {
			ps.Health, ps.State = bmc.Critical, bmc.UnavailableOffline
		}
		out = append(out, ps)
	}
	return out, nil
}

// HeadPower implements bmc.BoardController.
func (c *Controller) HeadPower(ctx context.Context) ([]bmc.HeadPower, error) {
	if err := c.fresh(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.headEff == nil {
		return nil, fmt.Errorf("pldm: no head power control: %w", bmc.ErrUnsupported)
	}
	out := make([]bmc.HeadPower, len(c.headState))
	for i, s := range c.headState {
		if s == "" {
			s = bmc.PowerOn
		}
		out[i] = bmc.HeadPower{Host: i, State: s}
	}
	return out, nil
}

// SetHeadPower implements bmc.BoardController.
func (c *Controller) SetHeadPower(ctx context.Context, host int, s bmc.PowerState) error {
	var v uint8
	switch s {
	case bmc.PowerOn:
		v = DevicePowerOn
	case bmc.PowerOff:
		v = DevicePowerOff
	default:
		return fmt.Errorf("pldm: head power state %q: %w", s, bmc.ErrInvalid)
	}
	c.mu.Lock()
	eff := c.headEff
	c.mu.Unlock()
	if eff == nil {
		return fmt.Errorf("pldm: no head power control: %w", bmc.ErrUnsupported)
	}
	if host < 0 || host >= len(eff.Composite) {
		return fmt.Errorf("pldm: head %d of %d: %w", host, len(eff.Composite), bmc.ErrNotFound)
	}
	fields := make([]StateRequest, host+1)
	fields[host] = StateRequest{Set: true, State: v}
	if err := c.c.SetStateEffecter(ctx, eff.EffecterID, fields); err != nil {
		return commandError(fmt.Sprintf("head %d power %s", host, s), err)
	}
	c.mu.Lock()
	c.headState[host] = s
	c.mu.Unlock()
	return nil
}

// Identify implements bmc.BoardController.
func (c *Controller) Identify(ctx context.Context) (bool, error) {
	if err := c.fresh(ctx); err != nil {
		return false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.identEff == nil {
		return false, fmt.Errorf("pldm: no identify LED: %w", bmc.ErrUnsupported)
	}
	return c.identOn, nil
}

// SetIdentify implements bmc.BoardController.
func (c *Controller) SetIdentify(ctx context.Context, on bool) error {
	c.mu.Lock()
	eff := c.identEff
	c.mu.Unlock()
	if eff == nil {
		return fmt.Errorf("pldm: no identify LED: %w", bmc.ErrUnsupported)
	}
	v := uint8(IdentifyUnasserted)
	if on {
		v = IdentifyAsserted
	}
	if err := c.c.SetStateEffecter(ctx, eff.EffecterID, []StateRequest{{Set: true, State: v}}); err != nil {
		return commandError("set identify LED", err)
	}
	c.mu.Lock()
	c.identOn = on
	c.mu.Unlock()
	return nil
}

// Events implements bmc.BoardController.
func (c *Controller) Events() <-chan bmc.Event { return c.events }

// Close closes the Events channel; later events are dropped.
func (c *Controller) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		close(c.events)
	}
}
