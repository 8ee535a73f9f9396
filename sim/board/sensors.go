package board

import (
	"fmt"
	"math"

	"cxlpool/bmc/pldm"
)

// State sets (DSP0249) the board uses.
const (
	setHealth      = 1   // 1 Normal, 3 Critical
	setIdentify    = 17  // 1 Unasserted, 2 Asserted
	setDevicePower = 257 // 1 Fully On, 4 Off
)

// State values.
const (
	healthNormal   = 1
	healthCritical = 3
	identifyOff    = 1
	identifyOn     = 2
	powerOn        = 1
	powerOff       = 4
)

// minDuty is the lowest fan duty the effecter accepts, in %.
const minDuty = 20

// limits are a numeric sensor's thresholds in engineering units; a bit in
// supported (pldm.Threshold*) says which are used.
type limits struct {
	supported               uint8
	warnHi, critHi, fatalHi float64
	warnLo, critLo, fatalLo float64
	hysteresis              float64
}

// numSensor is one numeric sensor: its PDR, how it reads the model, and
// its threshold state.
type numSensor struct {
	pdr     pldm.NumericSensorPDR
	name    string
	read    func(m *model) float64
	raw     int64
	present pldm.NumericState
	// previous and event are the GetSensorReading previousState and
	// eventState: the state before the last change, and the last state an
	// event was generated for.
	previous pldm.NumericState
	event    pldm.NumericState
	silent   bool
}

func rank(s pldm.NumericState) int {
	switch s {
	case pldm.StateUpperWarning:
		return 1
	case pldm.StateUpperCritical:
		return 2
	case pldm.StateUpperFatal:
		return 3
	case pldm.StateLowerWarning:
		return -1
	case pldm.StateLowerCritical:
		return -2
	case pldm.StateLowerFatal:
		return -3
	}
	return 0
}

// level is the state of value v against the thresholds, without
// hysteresis.
func (s *numSensor) level(v float64) pldm.NumericState {
	p := &s.pdr
	th := p.SupportedThresholds
	switch {
	case th&pldm.ThresholdUpperFatal != 0 && v >= p.Threshold(p.FatalHigh):
		return pldm.StateUpperFatal
	case th&pldm.ThresholdUpperCritical != 0 && v >= p.Threshold(p.CriticalHigh):
		return pldm.StateUpperCritical
	case th&pldm.ThresholdUpperWarning != 0 && v >= p.Threshold(p.WarningHigh):
		return pldm.StateUpperWarning
	case th&pldm.ThresholdLowerFatal != 0 && v <= p.Threshold(p.FatalLow):
		return pldm.StateLowerFatal
	case th&pldm.ThresholdLowerCritical != 0 && v <= p.Threshold(p.CriticalLow):
		return pldm.StateLowerCritical
	case th&pldm.ThresholdLowerWarning != 0 && v <= p.Threshold(p.WarningLow):
		return pldm.StateLowerWarning
	}
	return pldm.StateNormal
}

// classify returns the state for v given the present state: a state
// becomes less severe only once v is back inside its threshold by the
// hysteresis.
func (s *numSensor) classify(v float64) pldm.NumericState {
	h := s.pdr.Delta(s.pdr.Hysteresis)
	next, cur := s.level(v), s.present
	switch {
	case rank(cur) > 0 && rank(next) < rank(cur):
		held := s.level(v + h)
		if rank(held) > rank(cur) {
			held = cur
		}
		if rank(held) > rank(next) {
			next = held
		}
	case rank(cur) < 0 && rank(next) > rank(cur):
		held := s.level(v - h)
		if rank(held) < rank(cur) {
			held = cur
		}
		if rank(held) < rank(next) {
			next = held
		}
	}
	return next
}

// evaluate takes a new reading and reports the numeric sensor event if
// the state changed.
func (s *numSensor) evaluate(m *model) (pldm.SensorEvent, bool) {
	s.raw = s.pdr.Raw(s.read(m))
	next := s.classify(s.pdr.Value(s.raw))
	if next == s.present {
		return pldm.SensorEvent{}, false
	}
	ev := pldm.SensorEvent{SensorID: s.pdr.SensorID, Class: pldm.NumericSensorEvent,
		State: uint8(next), PreviousState: uint8(s.present), DataSize: s.pdr.DataSize, Reading: s.raw}
	s.previous, s.present, s.event = s.present, next, next
	return ev, true
}

// stateSensor is one state sensor with up to 8 composite sensors.
type stateSensor struct {
	pdr      pldm.StateSensorPDR
	name     string
	names    []string // per composite
	read     func(m *model) []uint8
	present  []uint8
	previous []uint8
	silent   bool
}

// numEffecter is one numeric effecter.
type numEffecter struct {
	pdr  pldm.NumericEffecterPDR
	name string
	get  func(m *model) float64
	set  func(m *model, v float64)
}

// stateEffecter is one state effecter with up to 8 composite effecters.
type stateEffecter struct {
	pdr   pldm.StateEffecterPDR
	name  string
	names []string
	get   func(m *model) []uint8
	set   func(m *model, i int, v uint8)
}

// build creates every sensor and effecter and encodes the PDR repository.
func (b *Board) build() error {
	cfg := b.cfg
	temp := func(name string, e pldm.Entity, l limits, read func(m *model) float64) {
		b.addNumeric(name, e, pldm.UnitDegreesC, -1, pldm.Sint16, -400, 1250, l, read)
	}
	board := func(i uint16) pldm.Entity { return pldm.Entity{Type: pldm.EntitySystemBoard, Instance: i} }
	temp("Inlet Temp", board(1), limits{supported: upper, warnHi: 35, critHi: 40, fatalHi: 45, hysteresis: 1},
		func(m *model) float64 { return m.ambient })
	temp("Outlet Temp", board(2), limits{supported: upper, warnHi: 50, critHi: 60, fatalHi: 70, hysteresis: 2},
		func(m *model) float64 { return m.outlet })
	temp("Memory Controller Temp", pldm.Entity{Type: pldm.EntityMemoryControler, Instance: 1},
		limits{supported: upper, warnHi: 80, critHi: 90, fatalHi: 100, hysteresis: 2},
		func(m *model) float64 { return m.mcTemp })
	for i := range cfg.DIMMBanks {
		temp(fmt.Sprintf("DIMM Bank %d Temp", i+1), pldm.Entity{Type: pldm.EntityMemoryModule, Instance: uint16(i + 1)},
			limits{supported: upper, warnHi: 75, critHi: 85, fatalHi: 95, hysteresis: 2},
			func(m *model) float64 { return m.bankTemp[i] })
	}
	for i := range cfg.Fans {
		e := pldm.Entity{Type: pldm.EntityFan, Instance: uint16(i + 1)}
		b.addNumeric(fmt.Sprintf("Fan %d Speed", i+1), e, pldm.UnitRPM, 0, pldm.Uint16, 0, 20000,
			limits{supported: pldm.ThresholdLowerWarning | pldm.ThresholdLowerCritical, warnLo: 1500, critLo: 800, hysteresis: 200},
			func(m *model) float64 { return m.fanRPM[i] })
		b.addFanDuty(fmt.Sprintf("Fan %d Duty", i+1), e, i)
	}
	for i := range cfg.PSUs {
		e := pldm.Entity{Type: pldm.EntityPowerSupply, Instance: uint16(i + 1)}
		psu := func(f func(outW, inW, outV, inV float64) float64) func(m *model) float64 {
			return func(m *model) float64 { return f(m.psu(i)) }
		}
		n := fmt.Sprintf("PSU %d ", i+1)
		b.addNumeric(n+"Input Power", e, pldm.UnitWatts, 0, pldm.Uint16, 0, 2000,
			limits{supported: pldm.ThresholdUpperWarning | pldm.ThresholdUpperCritical, warnHi: 700, critHi: 780, hysteresis: 10},
			psu(func(_, inW, _, _ float64) float64 { return inW }))
		b.addNumeric(n+"Output Power", e, pldm.UnitWatts, 0, pldm.Uint16, 0, 2000,
			limits{supported: pldm.ThresholdUpperWarning | pldm.ThresholdUpperCritical, warnHi: 650, critHi: 720, hysteresis: 10},
			psu(func(outW, _, _, _ float64) float64 { return outW }))
		b.addNumeric(n+"Input Voltage", e, pldm.UnitVolts, -1, pldm.Uint16, 0, 3000,
			limits{supported: pldm.ThresholdLowerCritical | pldm.ThresholdUpperCritical, critLo: 180, critHi: 264, hysteresis: 2},
			psu(func(_, _, _, inV float64) float64 { return inV }))
		b.addNumeric(n+"Output Voltage", e, pldm.UnitVolts, -3, pldm.Uint16, 0, 15000,
			limits{supported: pldm.ThresholdLowerWarning | pldm.ThresholdLowerCritical | pldm.ThresholdUpperWarning | pldm.ThresholdUpperCritical,
				warnLo: 11.6, critLo: 11.4, warnHi: 12.4, critHi: 12.6, hysteresis: 0.05},
			psu(func(_, _, outV, _ float64) float64 { return outV }))
		b.addState(n+"Health", e, nil, pldm.StatesOf(setHealth, healthNormal, healthCritical), 1, func(m *model) []uint8 {
			if m.psuLost[i] {
				return []uint8{healthCritical}
			}
			return []uint8{healthNormal}
		})
	}
	chassis := pldm.Entity{Type: pldm.EntitySystemChassis, Instance: 1}
	heads := make([]string, cfg.Heads)
	for i := range heads {
		heads[i] = fmt.Sprintf("Head %d Power", i)
	}
	b.addState("Head Power", chassis, heads, pldm.StatesOf(setDevicePower, powerOn, powerOff), cfg.Heads, func(m *model) []uint8 {
		out := make([]uint8, len(m.headOn))
		for i, on := range m.headOn {
			out[i] = powerOff
			if on {
				out[i] = powerOn
			}
		}
		return out
	})
	b.addState("Identify LED", chassis, nil, pldm.StatesOf(setIdentify, identifyOff, identifyOn), 1, func(m *model) []uint8 {
		return []uint8{identifyState(m.identify)}
	})
	b.addStateEffecter("Identify LED", chassis, nil, pldm.StatesOf(setIdentify, identifyOff, identifyOn), 1,
		func(m *model) []uint8 { return []uint8{identifyState(m.identify)} },
		func(m *model, _ int, v uint8) { m.identify = v == identifyOn })
	b.addStateEffecter("Head Power", chassis, heads, pldm.StatesOf(setDevicePower, powerOn, powerOff), cfg.Heads,
		func(m *model) []uint8 {
			out := make([]uint8, len(m.headOn))
			for i, on := range m.headOn {
				out[i] = powerOff
				if on {
					out[i] = powerOn
				}
			}
			return out
		},
		func(m *model, i int, v uint8) {
			on := v == powerOn
			if m.headOn[i] != on && cfg.OnHeadPower != nil {
				cfg.OnHeadPower(i, on)
			}
			m.headOn[i] = on
		})
	return b.buildErr
}

const upper = pldm.ThresholdUpperWarning | pldm.ThresholdUpperCritical | pldm.ThresholdUpperFatal

func identifyState(on bool) uint8 {
	if on {
		return identifyOn
	}
	return identifyOff
}

// nextHandle is the record handle the next PDR gets.
func (b *Board) nextHandle() uint32 { return uint32(len(b.records) + 1) }

// addRecord encodes p into the repository; New reports the first
// failure.
func (b *Board) addRecord(p pldm.PDR) {
	rec, err := p.MarshalBinary()
	if err != nil && b.buildErr == nil {
		b.buildErr = fmt.Errorf("board: building PDR %d: %w", p.Header().RecordHandle, err)
	}
	b.records = append(b.records, rec)
}

func (b *Board) addNames(effecter bool, id uint16, names []string) {
	aux := &pldm.AuxNamesPDR{Handle: b.nextHandle(), ChangeNumber: 1, Effecter: effecter, TerminusHandle: 1, ID: id}
	for _, n := range names {
		aux.Names = append(aux.Names, []pldm.AuxName{{Lang: "en", Name: n}})
	}
	b.addRecord(aux)
}

// engineering converts an engineering value to a range field for a
// sensor with modifier mod (range fields are scaled by 10^mod only).
func engineering(v float64, mod int8) float64 { return math.Round(v * math.Pow10(-int(mod))) }

func (b *Board) addNumeric(name string, e pldm.Entity, unit pldm.Unit, mod int8, ds pldm.DataSize, minR, maxR int64, l limits, read func(m *model) float64) {
	s := &numSensor{name: name, read: read, present: pldm.StateUnknown}
	s.pdr = pldm.NumericSensorPDR{
		Handle: b.nextHandle(), ChangeNumber: 1, TerminusHandle: 1, SensorID: uint16(len(b.num) + len(b.states) + 1),
		Entity: e, SensorInit: 2, AuxNames: true, Units: pldm.Units{Base: unit, Modifier: mod}, IsLinear: true,
		DataSize: ds, Resolution: 1, PlusTolerance: 1, MinusTolerance: 1,
		Hysteresis:          int64(engineering(l.hysteresis, mod)),
		SupportedThresholds: l.supported, UpdateInterval: 1, MaxReadable: maxR, MinReadable: minR,
		RangeFormat: ds, RangeSupport: 0,
		WarningHigh: engineering(l.warnHi, mod), CriticalHigh: engineering(l.critHi, mod), FatalHigh: engineering(l.fatalHi, mod),
		WarningLow: engineering(l.warnLo, mod), CriticalLow: engineering(l.critLo, mod), FatalLow: engineering(l.fatalLo, mod),
	}
	if l.supported&pldm.ThresholdUpperCritical != 0 {
		s.pdr.RangeSupport |= pldm.RangeCriticalHigh
	}
	if l.supported&pldm.ThresholdUpperFatal != 0 {
		s.pdr.RangeSupport |= pldm.RangeFatalHigh
	}
	if l.supported&pldm.ThresholdLowerCritical != 0 {
		s.pdr.RangeSupport |= pldm.RangeCriticalLow
	}
	if l.supported&pldm.ThresholdLowerFatal != 0 {
		s.pdr.RangeSupport |= pldm.RangeFatalLow
	}
	b.num = append(b.num, s)
	b.addRecord(&s.pdr)
	b.addNames(false, s.pdr.SensorID, []string{name})
}

func (b *Board) addState(name string, e pldm.Entity, names []string, ps pldm.PossibleStates, n int, read func(m *model) []uint8) {
	s := &stateSensor{name: name, names: names, read: read}
	s.pdr = pldm.StateSensorPDR{Handle: b.nextHandle(), ChangeNumber: 1, TerminusHandle: 1,
		SensorID: uint16(len(b.num) + len(b.states) + 1), Entity: e, SensorInit: 2, AuxNames: true}
	for range n {
		s.pdr.Composite = append(s.pdr.Composite, ps)
	}
	b.states = append(b.states, s)
	b.addRecord(&s.pdr)
	if names == nil {
		names = []string{name}
	}
	b.addNames(false, s.pdr.SensorID, names)
}

func (b *Board) addFanDuty(name string, e pldm.Entity, i int) {
	f := &numEffecter{name: name,
		get: func(m *model) float64 { return m.fanDuty[i] },
		set: func(m *model, v float64) { m.fanDuty[i] = v }}
	f.pdr = pldm.NumericEffecterPDR{
		Handle: b.nextHandle(), ChangeNumber: 1, TerminusHandle: 1, EffecterID: b.nextEffecterID(),
		Entity: e, EffecterInit: 2, AuxNames: true, Units: pldm.Units{Base: pldm.UnitPercent}, IsLinear: true,
		DataSize: pldm.Uint8, Resolution: 1, MaxSettable: 100, MinSettable: minDuty,
		RangeFormat: pldm.Uint8, RangeSupport: pldm.EffecterRangeNominal | pldm.EffecterRangeRatedMax | pldm.EffecterRangeRatedMin,
		Nominal: 40, RatedMax: 100, RatedMin: minDuty,
	}
	b.numEff = append(b.numEff, f)
	b.addRecord(&f.pdr)
	b.addNames(true, f.pdr.EffecterID, []string{name})
}

func (b *Board) nextEffecterID() uint16 { return uint16(len(b.numEff) + len(b.stateEff) + 1) }

func (b *Board) addStateEffecter(name string, e pldm.Entity, names []string, ps pldm.PossibleStates, n int,
	get func(m *model) []uint8, set func(m *model, i int, v uint8)) {
	s := &stateEffecter{name: name, names: names, get: get, set: set}
	s.pdr = pldm.StateEffecterPDR{Handle: b.nextHandle(), ChangeNumber: 1, TerminusHandle: 1,
		EffecterID: b.nextEffecterID(), Entity: e, EffecterInit: 2}
	for range n {
		s.pdr.Composite = append(s.pdr.Composite, ps)
	}
	b.stateEff = append(b.stateEff, s)
	b.addRecord(&s.pdr)
	if names == nil {
		names = []string{name}
	}
	b.addNames(true, s.pdr.EffecterID, names)
}
