package pldm

import (
	"fmt"
	"strings"
	"unicode/utf16"
)

// PDRType is the PDRType byte of the common PDR header.
type PDRType uint8

// PDR types (platform.h L265–295).
const (
	PDRTerminusLocator  PDRType = 1
	PDRNumericSensor    PDRType = 2
	PDRStateSensor      PDRType = 4
	PDRSensorAuxNames   PDRType = 6
	PDRNumericEffecter  PDRType = 9
	PDRStateEffecter    PDRType = 11
	PDREffecterAuxNames PDRType = 13
)

// PDR header constants.
const (
	PDRHeaderLen     = 10
	PDRHeaderVersion = 0x01
)

// PDRHeader is the common header of every PDR.
type PDRHeader struct {
	RecordHandle uint32
	Version      uint8
	Type         PDRType
	ChangeNumber uint16
	DataLength   uint16 // bytes after the header
}

// ParsePDRHeader decodes the common header at the start of b.
func ParsePDRHeader(b []byte) (PDRHeader, error) {
	r := newReader("PDR header", b)
	h := PDRHeader{RecordHandle: r.u32(), Version: r.u8(), Type: PDRType(r.u8()), ChangeNumber: r.u16(), DataLength: r.u16()}
	return h, r.err
}

// PDR is a decoded Platform Descriptor Record.
type PDR interface {
	// Header returns the common header as it would be encoded.
	Header() PDRHeader
	MarshalBinary() ([]byte, error)
}

// ParsePDR decodes one whole record. Known types decode into
// *NumericSensorPDR, *StateSensorPDR, *NumericEffecterPDR,
// *StateEffecterPDR or *AuxNamesPDR; other types into *RawPDR. The record
// must be exactly PDRHeaderLen+dataLength bytes.
func ParsePDR(b []byte) (PDR, error) {
	h, err := ParsePDRHeader(b)
	if err != nil {
		return nil, err
	}
	if h.Version != PDRHeaderVersion {
		return nil, fmt.Errorf("pldm: PDR %d: header version %d: %w", h.RecordHandle, h.Version, ErrInvalid)
	}
	if int(h.DataLength)+PDRHeaderLen != len(b) {
		return nil, fmt.Errorf("pldm: PDR %d: dataLength %d in a %d-byte record: %w", h.RecordHandle, h.DataLength, len(b), ErrLength)
	}
	var p interface {
		PDR
		decode(h PDRHeader, r *reader)
	}
	switch h.Type {
	case PDRNumericSensor:
		p = &NumericSensorPDR{}
	case PDRStateSensor:
		p = &StateSensorPDR{}
	case PDRNumericEffecter:
		p = &NumericEffecterPDR{}
	case PDRStateEffecter:
		p = &StateEffecterPDR{}
	case PDRSensorAuxNames, PDREffecterAuxNames:
		p = &AuxNamesPDR{}
	default:
		return &RawPDR{Handle: h.RecordHandle, Type: h.Type, ChangeNumber: h.ChangeNumber, Data: append([]byte(nil), b[PDRHeaderLen:]...)}, nil
	}
	r := newReader(fmt.Sprintf("PDR %d type %d", h.RecordHandle, h.Type), b[PDRHeaderLen:])
	p.decode(h, r)
	if err := r.done(); err != nil {
		return nil, err
	}
	return p, nil
}

// marshalPDR prefixes body with a common header.
func marshalPDR(handle uint32, t PDRType, change uint16, w *writer) ([]byte, error) {
	body, err := w.result()
	if err != nil {
		return nil, err
	}
	if len(body) > 0xFFFF {
		return nil, fmt.Errorf("pldm: %s: %d bytes: %w", w.what, len(body), ErrLength)
	}
	h := newWriter(w.what, PDRHeaderLen+len(body))
	h.u32(handle)
	h.u8(PDRHeaderVersion)
	h.u8(uint8(t))
	h.u16(change)
	h.u16(uint16(len(body)))
	h.bytes(body)
	return h.result()
}

// Entity identifies what a sensor or effecter measures or drives (DSP0249).
type Entity struct {
	Type      uint16 // bit 15 = logical entity
	Instance  uint16
	Container uint16 // 0 = system
}

// Entity types used by the board (entity.h).
const (
	EntitySystemChassis   uint16 = 45
	EntitySystemBoard     uint16 = 64
	EntityMemoryModule    uint16 = 66
	EntityFan             uint16 = 93
	EntityPowerSupply     uint16 = 120
	EntityMgmtController  uint16 = 137
	EntityMemoryControler uint16 = 143
)

func (r *reader) entity() Entity { return Entity{r.u16(), r.u16(), r.u16()} }

func (w *writer) entity(e Entity) {
	w.u16(e.Type)
	w.u16(e.Instance)
	w.u16(e.Container)
}

// Unit is a DSP0248 baseUnit.
type Unit uint8

// Units used by the board (DSP0248 Table 74).
const (
	UnitNone        Unit = 0
	UnitUnspecified Unit = 1
	UnitDegreesC    Unit = 2
	UnitVolts       Unit = 5
	UnitAmps        Unit = 6
	UnitWatts       Unit = 7
	UnitRPM         Unit = 19
	UnitPercent     Unit = 65
)

func (u Unit) String() string {
	switch u {
	case UnitNone:
		return ""
	case UnitDegreesC:
		return "°C"
	case UnitVolts:
		return "V"
	case UnitAmps:
		return "A"
	case UnitWatts:
		return "W"
	case UnitRPM:
		return "RPM"
	case UnitPercent:
		return "%"
	}
	return fmt.Sprintf("unit(%d)", uint8(u))
}

// Units is the unit block shared by numeric sensor and effecter PDRs.
type Units struct {
	Base              Unit
	Modifier          int8 // power of ten
	Rate              uint8
	BaseOEMUnitHandle uint8
	Aux               uint8
	AuxModifier       int8
	AuxRate           uint8
	AuxOEMUnitHandle  uint8
}

// supportedThresholds bits (§6.5).
const (
	ThresholdUpperWarning  = 1 << 0
	ThresholdUpperCritical = 1 << 1
	ThresholdUpperFatal    = 1 << 2
	ThresholdLowerWarning  = 1 << 3
	ThresholdLowerCritical = 1 << 4
	ThresholdLowerFatal    = 1 << 5
)

// rangeFieldSupport bits of the numeric sensor PDR (§6.5). warningHigh and
// warningLow have none: supportedThresholds says whether they are used.
const (
	RangeNominal      = 1 << 0
	RangeNormalMax    = 1 << 1
	RangeNormalMin    = 1 << 2
	RangeCriticalHigh = 1 << 3
	RangeCriticalLow  = 1 << 4
	RangeFatalHigh    = 1 << 5
	RangeFatalLow     = 1 << 6
)

// rangeFieldSupport bits of the numeric effecter PDR.
const (
	EffecterRangeNominal   = 1 << 0
	EffecterRangeNormalMax = 1 << 1
	EffecterRangeNormalMin = 1 << 2
	EffecterRangeRatedMax  = 1 << 3
	EffecterRangeRatedMin  = 1 << 4
)

// NumericSensorPDR is PDR type 2 (pldm.md §6.2). Raw fields (Hysteresis,
// MaxReadable, MinReadable) are counts of DataSize; range fields are in
// engineering units scaled only by 10^Units.Modifier (§6.6).
type NumericSensorPDR struct {
	Handle         uint32
	ChangeNumber   uint16
	TerminusHandle uint16
	SensorID       uint16
	Entity         Entity
	SensorInit     uint8
	AuxNames       bool
	Units          Units
	Rel            uint8
	IsLinear       bool
	DataSize       DataSize
	Resolution     float32
	Offset         float32
	Accuracy       uint16
	PlusTolerance  uint8
	MinusTolerance uint8
	Hysteresis     int64
	// SupportedThresholds and ThresholdVolatility are Threshold* bitfields.
	SupportedThresholds     uint8
	ThresholdVolatility     uint8
	StateTransitionInterval float32
	UpdateInterval          float32
	MaxReadable             int64
	MinReadable             int64
	RangeFormat             DataSize
	RangeSupport            uint8 // Range* bits
	Nominal                 float64
	NormalMax               float64
	NormalMin               float64
	WarningHigh             float64
	WarningLow              float64
	CriticalHigh            float64
	CriticalLow             float64
	FatalHigh               float64
	FatalLow                float64
}

// Header implements PDR.
func (p *NumericSensorPDR) Header() PDRHeader {
	s, r := p.DataSize.Width(), p.RangeFormat.Width()
	return PDRHeader{p.Handle, PDRHeaderVersion, PDRNumericSensor, p.ChangeNumber, uint16(47 + 3*s + 9*r)}
}

func (p *NumericSensorPDR) decode(h PDRHeader, r *reader) {
	*p = NumericSensorPDR{Handle: h.RecordHandle, ChangeNumber: h.ChangeNumber}
	p.TerminusHandle = r.u16()
	p.SensorID = r.u16()
	p.Entity = r.entity()
	p.SensorInit = r.u8()
	p.AuxNames = r.bool8()
	p.Units.Base = Unit(r.u8())
	p.Units.Modifier = int8(r.u8())
	p.Units.Rate = r.u8()
	p.Units.BaseOEMUnitHandle = r.u8()
	p.Units.Aux = r.u8()
	p.Units.AuxModifier = int8(r.u8())
	p.Units.AuxRate = r.u8()
	p.Rel = r.u8()
	p.Units.AuxOEMUnitHandle = r.u8()
	p.IsLinear = r.bool8()
	p.DataSize = r.dataSize("sensorDataSize")
	p.Resolution = r.f32()
	p.Offset = r.f32()
	p.Accuracy = r.u16()
	p.PlusTolerance = r.u8()
	p.MinusTolerance = r.u8()
	p.Hysteresis = r.value(p.DataSize)
	p.SupportedThresholds = r.u8()
	p.ThresholdVolatility = r.u8()
	p.StateTransitionInterval = r.f32()
	p.UpdateInterval = r.f32()
	p.MaxReadable = r.value(p.DataSize)
	p.MinReadable = r.value(p.DataSize)
	p.RangeFormat = r.rangeFormat("rangeFieldFormat")
	p.RangeSupport = r.u8()
	for _, f := range p.ranges() {
		*f = r.rangeValue(p.RangeFormat)
	}
}

func (p *NumericSensorPDR) ranges() []*float64 {
	return []*float64{&p.Nominal, &p.NormalMax, &p.NormalMin, &p.WarningHigh, &p.WarningLow,
		&p.CriticalHigh, &p.CriticalLow, &p.FatalHigh, &p.FatalLow}
}

// MarshalBinary encodes the whole record.
func (p *NumericSensorPDR) MarshalBinary() ([]byte, error) {
	w := newWriter(fmt.Sprintf("numeric sensor PDR %d", p.Handle), 120)
	w.u16(p.TerminusHandle)
	w.u16(p.SensorID)
	w.entity(p.Entity)
	w.u8(p.SensorInit)
	w.bool8(p.AuxNames)
	w.u8(uint8(p.Units.Base))
	w.u8(uint8(p.Units.Modifier))
	w.u8(p.Units.Rate)
	w.u8(p.Units.BaseOEMUnitHandle)
	w.u8(p.Units.Aux)
	w.u8(uint8(p.Units.AuxModifier))
	w.u8(p.Units.AuxRate)
	w.u8(p.Rel)
	w.u8(p.Units.AuxOEMUnitHandle)
	w.bool8(p.IsLinear)
	w.dataSize("sensorDataSize", p.DataSize)
	w.f32(p.Resolution)
	w.f32(p.Offset)
	w.u16(p.Accuracy)
	w.u8(p.PlusTolerance)
	w.u8(p.MinusTolerance)
	w.value("hysteresis", p.DataSize, p.Hysteresis)
	w.u8(p.SupportedThresholds)
	w.u8(p.ThresholdVolatility)
	w.f32(p.StateTransitionInterval)
	w.f32(p.UpdateInterval)
	w.value("maxReadable", p.DataSize, p.MaxReadable)
	w.value("minReadable", p.DataSize, p.MinReadable)
	w.rangeFormat("rangeFieldFormat", p.RangeFormat)
	w.u8(p.RangeSupport)
	for _, f := range p.ranges() {
		w.rangeValue("range field", p.RangeFormat, *f)
	}
	return marshalPDR(p.Handle, PDRNumericSensor, p.ChangeNumber, w)
}

// Value converts a raw reading to engineering units:
// (resolution·raw + offset)·10^modifier.
func (p *NumericSensorPDR) Value(raw int64) float64 {
	return scale(float64(p.Resolution)*float64(raw)+float64(p.Offset), p.Units.Modifier)
}

// Delta converts a raw difference (hysteresis, tolerance) to engineering
// units; unlike Value it leaves out the offset (pldm.md §9.7).
func (p *NumericSensorPDR) Delta(raw int64) float64 {
	return scale(float64(p.Resolution)*float64(raw), p.Units.Modifier)
}

// Threshold converts a range field to engineering units (10^modifier only).
func (p *NumericSensorPDR) Threshold(v float64) float64 { return scale(v, p.Units.Modifier) }

// NumericEffecterPDR is PDR type 9 (pldm.md §6.3). MaxSettable and
// MinSettable are raw; range fields are engineering units.
type NumericEffecterPDR struct {
	Handle                  uint32
	ChangeNumber            uint16
	TerminusHandle          uint16
	EffecterID              uint16
	Entity                  Entity
	SemanticID              uint16
	EffecterInit            uint8
	AuxNames                bool
	Units                   Units
	IsLinear                bool
	DataSize                DataSize
	Resolution              float32
	Offset                  float32
	Accuracy                uint16
	PlusTolerance           uint8
	MinusTolerance          uint8
	StateTransitionInterval float32
	TransitionInterval      float32
	MaxSettable             int64
	MinSettable             int64
	RangeFormat             DataSize
	RangeSupport            uint8 // EffecterRange* bits
	Nominal                 float64
	NormalMax               float64
	NormalMin               float64
	RatedMax                float64
	RatedMin                float64
}

// Header implements PDR.
func (p *NumericEffecterPDR) Header() PDRHeader {
	e, r := p.DataSize.Width(), p.RangeFormat.Width()
	return PDRHeader{p.Handle, PDRHeaderVersion, PDRNumericEffecter, p.ChangeNumber, uint16(46 + 2*e + 5*r)}
}

func (p *NumericEffecterPDR) ranges() []*float64 {
	return []*float64{&p.Nominal, &p.NormalMax, &p.NormalMin, &p.RatedMax, &p.RatedMin}
}

func (p *NumericEffecterPDR) decode(h PDRHeader, r *reader) {
	*p = NumericEffecterPDR{Handle: h.RecordHandle, ChangeNumber: h.ChangeNumber}
	p.TerminusHandle = r.u16()
	p.EffecterID = r.u16()
	p.Entity = r.entity()
	p.SemanticID = r.u16()
	p.EffecterInit = r.u8()
	p.AuxNames = r.bool8()
	p.Units.Base = Unit(r.u8())
	p.Units.Modifier = int8(r.u8())
	p.Units.Rate = r.u8()
	p.Units.BaseOEMUnitHandle = r.u8()
	p.Units.Aux = r.u8()
	p.Units.AuxModifier = int8(r.u8())
	p.Units.AuxRate = r.u8()
	p.Units.AuxOEMUnitHandle = r.u8()
	p.IsLinear = r.bool8()
	p.DataSize = r.dataSize("effecterDataSize")
	p.Resolution = r.f32()
	p.Offset = r.f32()
	p.Accuracy = r.u16()
	p.PlusTolerance = r.u8()
	p.MinusTolerance = r.u8()
	p.StateTransitionInterval = r.f32()
	p.TransitionInterval = r.f32()
	p.MaxSettable = r.value(p.DataSize)
	p.MinSettable = r.value(p.DataSize)
	p.RangeFormat = r.rangeFormat("rangeFieldFormat")
	p.RangeSupport = r.u8()
	for _, f := range p.ranges() {
		*f = r.rangeValue(p.RangeFormat)
	}
}

// MarshalBinary encodes the whole record.
func (p *NumericEffecterPDR) MarshalBinary() ([]byte, error) {
	w := newWriter(fmt.Sprintf("numeric effecter PDR %d", p.Handle), 100)
	w.u16(p.TerminusHandle)
	w.u16(p.EffecterID)
	w.entity(p.Entity)
	w.u16(p.SemanticID)
	w.u8(p.EffecterInit)
	w.bool8(p.AuxNames)
	w.u8(uint8(p.Units.Base))
	w.u8(uint8(p.Units.Modifier))
	w.u8(p.Units.Rate)
	w.u8(p.Units.BaseOEMUnitHandle)
	w.u8(p.Units.Aux)
	w.u8(uint8(p.Units.AuxModifier))
	w.u8(p.Units.AuxRate)
	w.u8(p.Units.AuxOEMUnitHandle)
	w.bool8(p.IsLinear)
	w.dataSize("effecterDataSize", p.DataSize)
	w.f32(p.Resolution)
	w.f32(p.Offset)
	w.u16(p.Accuracy)
	w.u8(p.PlusTolerance)
	w.u8(p.MinusTolerance)
	w.f32(p.StateTransitionInterval)
	w.f32(p.TransitionInterval)
	w.value("maxSettable", p.DataSize, p.MaxSettable)
	w.value("minSettable", p.DataSize, p.MinSettable)
	w.rangeFormat("rangeFieldFormat", p.RangeFormat)
	w.u8(p.RangeSupport)
	for _, f := range p.ranges() {
		w.rangeValue("range field", p.RangeFormat, *f)
	}
	return marshalPDR(p.Handle, PDRNumericEffecter, p.ChangeNumber, w)
}

// Value converts a raw effecter value to engineering units.
func (p *NumericEffecterPDR) Value(raw int64) float64 {
	return scale(float64(p.Resolution)*float64(raw)+float64(p.Offset), p.Units.Modifier)
}

// Raw converts an engineering value to the nearest raw value, clamped to
// MinSettable…MaxSettable (pldm.md §6.6). A zero resolution is an error.
func (p *NumericEffecterPDR) Raw(v float64) (int64, error) {
	if p.Resolution == 0 {
		return 0, fmt.Errorf("pldm: effecter %d: zero resolution: %w", p.EffecterID, ErrInvalid)
	}
	x := roundHalfAway((scale(v, -p.Units.Modifier) - float64(p.Offset)) / float64(p.Resolution))
	return min(max(x, p.MinSettable), p.MaxSettable), nil
}

// PossibleStates is one composite entry of a state sensor or effecter PDR:
// a state set and the bitfield of the values it may take.
type PossibleStates struct {
	SetID  uint16
	States []byte // 1–32 bytes; value v supported ⇔ bit v%8 of byte v/8
}

// StatesOf returns the entry for set with exactly the values vs, in the
// fewest bytes.
func StatesOf(set uint16, vs ...uint8) PossibleStates {
	n := 1
	for _, v := range vs {
		n = max(n, int(v)/8+1)
	}
	p := PossibleStates{SetID: set, States: make([]byte, n)}
	for _, v := range vs {
		setBit(p.States, int(v))
	}
	return p
}

// Has reports whether v is a possible state.
func (p PossibleStates) Has(v uint8) bool { return bitSet(p.States, int(v)) }

func (r *reader) possibleStates(field string) []PossibleStates {
	n := int(r.u8())
	if r.err == nil && (n < 1 || n > MaxComposite) {
		r.fail(field, uint64(n))
	}
	if r.err != nil {
		return nil
	}
	ps := make([]PossibleStates, n)
	for i := range ps {
		ps[i].SetID = r.u16()
		size := int(r.u8())
		if r.err == nil && (size < 1 || size > 32) {
			r.fail("possibleStatesSize", uint64(size))
		}
		ps[i].States = append([]byte(nil), r.take(size)...)
	}
	return ps
}

func (w *writer) possibleStates(field string, ps []PossibleStates) {
	if len(ps) < 1 || len(ps) > MaxComposite {
		w.fail("%s %d", field, len(ps))
	}
	w.u8(uint8(len(ps)))
	for _, p := range ps {
		w.u16(p.SetID)
		if len(p.States) < 1 || len(p.States) > 32 {
			w.fail("possibleStatesSize %d", len(p.States))
		}
		w.u8(uint8(len(p.States)))
		w.bytes(p.States)
	}
}

func possibleStatesLen(ps []PossibleStates) int {
	n := 1
	for _, p := range ps {
		n += 3 + len(p.States)
	}
	return n
}

// StateSensorPDR is PDR type 4 (pldm.md §6.4).
type StateSensorPDR struct {
	Handle         uint32
	ChangeNumber   uint16
	TerminusHandle uint16
	SensorID       uint16
	Entity         Entity
	SensorInit     uint8
	AuxNames       bool
	Composite      []PossibleStates // 1–8
}

// Header implements PDR.
func (p *StateSensorPDR) Header() PDRHeader {
	return PDRHeader{p.Handle, PDRHeaderVersion, PDRStateSensor, p.ChangeNumber, uint16(12 + possibleStatesLen(p.Composite))}
}

func (p *StateSensorPDR) decode(h PDRHeader, r *reader) {
	*p = StateSensorPDR{Handle: h.RecordHandle, ChangeNumber: h.ChangeNumber}
	p.TerminusHandle = r.u16()
	p.SensorID = r.u16()
	p.Entity = r.entity()
	p.SensorInit = r.u8()
	p.AuxNames = r.bool8()
	p.Composite = r.possibleStates("compositeSensorCount")
}

// MarshalBinary encodes the whole record.
func (p *StateSensorPDR) MarshalBinary() ([]byte, error) {
	w := newWriter(fmt.Sprintf("state sensor PDR %d", p.Handle), 64)
	w.u16(p.TerminusHandle)
	w.u16(p.SensorID)
	w.entity(p.Entity)
	w.u8(p.SensorInit)
	w.bool8(p.AuxNames)
	w.possibleStates("compositeSensorCount", p.Composite)
	return marshalPDR(p.Handle, PDRStateSensor, p.ChangeNumber, w)
}

// StateEffecterPDR is PDR type 11 (pldm.md §6.4).
type StateEffecterPDR struct {
	Handle         uint32
	ChangeNumber   uint16
	TerminusHandle uint16
	EffecterID     uint16
	Entity         Entity
	SemanticID     uint16
	EffecterInit   uint8
	DescriptionPDR bool
	Composite      []PossibleStates // 1–8
}

// Header implements PDR.
func (p *StateEffecterPDR) Header() PDRHeader {
	return PDRHeader{p.Handle, PDRHeaderVersion, PDRStateEffecter, p.ChangeNumber, uint16(14 + possibleStatesLen(p.Composite))}
}

func (p *StateEffecterPDR) decode(h PDRHeader, r *reader) {
	*p = StateEffecterPDR{Handle: h.RecordHandle, ChangeNumber: h.ChangeNumber}
	p.TerminusHandle = r.u16()
	p.EffecterID = r.u16()
	p.Entity = r.entity()
	p.SemanticID = r.u16()
	p.EffecterInit = r.u8()
	p.DescriptionPDR = r.bool8()
	p.Composite = r.possibleStates("compositeEffecterCount")
}

// MarshalBinary encodes the whole record.
func (p *StateEffecterPDR) MarshalBinary() ([]byte, error) {
	w := newWriter(fmt.Sprintf("state effecter PDR %d", p.Handle), 64)
	w.u16(p.TerminusHandle)
	w.u16(p.EffecterID)
	w.entity(p.Entity)
	w.u16(p.SemanticID)
	w.u8(p.EffecterInit)
	w.bool8(p.DescriptionPDR)
	w.possibleStates("compositeEffecterCount", p.Composite)
	return marshalPDR(p.Handle, PDRStateEffecter, p.ChangeNumber, w)
}

// AuxName is one name string of an auxiliary names PDR: an ASCII RFC 5646
// language tag and the name (UTF-16BE on the wire).
type AuxName struct {
	Lang string
	Name string
}

// AuxNamesPDR is a Sensor (type 6) or Effecter (type 13) Auxiliary Names
// PDR, which pldm.md does not lay out; this follows DSP0248 as libpldm and
// openbmc/pldm decode it: terminus handle u16, sensor/effecter ID u16,
// count u8, then per composite sensor a nameStringCount u8 and that many
// (NUL-terminated ASCII language tag, 0000h-terminated UTF-16BE name).
type AuxNamesPDR struct {
	Handle         uint32
	ChangeNumber   uint16
	Effecter       bool // type 13 (effecter) rather than 6 (sensor)
	TerminusHandle uint16
	ID             uint16
	Names          [][]AuxName // one list per composite sensor/effecter
}

func (p *AuxNamesPDR) pdrType() PDRType {
	if p.Effecter {
		return PDREffecterAuxNames
	}
	return PDRSensorAuxNames
}

// Header implements PDR.
func (p *AuxNamesPDR) Header() PDRHeader {
	n := 5
	for _, ns := range p.Names {
		n++
		for _, a := range ns {
			n += len(a.Lang) + 1 + 2*len(utf16.Encode([]rune(a.Name))) + 2
		}
	}
	return PDRHeader{p.Handle, PDRHeaderVersion, p.pdrType(), p.ChangeNumber, uint16(n)}
}

func (p *AuxNamesPDR) decode(h PDRHeader, r *reader) {
	*p = AuxNamesPDR{Handle: h.RecordHandle, ChangeNumber: h.ChangeNumber, Effecter: h.Type == PDREffecterAuxNames}
	p.TerminusHandle = r.u16()
	p.ID = r.u16()
	n := int(r.u8())
	if r.err != nil {
		return
	}
	p.Names = make([][]AuxName, n)
	for i := range p.Names {
		k := int(r.u8())
		if r.err != nil {
			return
		}
		p.Names[i] = make([]AuxName, 0, min(k, 8))
		for range k {
			a := AuxName{Lang: r.cstring(), Name: r.utf16z()}
			if r.err != nil {
				return
			}
			p.Names[i] = append(p.Names[i], a)
		}
	}
}

// cstring reads a NUL-terminated byte string.
func (r *reader) cstring() string {
	if r.err != nil {
		return ""
	}
	for i := r.off; i < len(r.b); i++ {
		if r.b[i] == 0 {
			s := string(r.b[r.off:i])
			r.off = i + 1
			return s
		}
	}
	r.err = fmt.Errorf("pldm: %s: unterminated string at offset %d: %w", r.what, r.off, ErrLength)
	return ""
}

// utf16z reads a 0000h-terminated UTF-16BE string; unpaired surrogates are
// invalid.
func (r *reader) utf16z() string {
	var units []uint16
	for r.err == nil {
		s := r.take(2)
		if s == nil {
			break
		}
		u := uint16(s[0])<<8 | uint16(s[1])
		if u == 0 {
			rs := utf16.Decode(units)
			if !slicesEqual(utf16.Encode(rs), units) {
				r.fail("UTF-16 name with unpaired surrogate", uint64(len(units)))
				return ""
			}
			return string(rs)
		}
		units = append(units, u)
	}
	return ""
}

func slicesEqual(a, b []uint16) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// MarshalBinary encodes the whole record.
func (p *AuxNamesPDR) MarshalBinary() ([]byte, error) {
	w := newWriter(fmt.Sprintf("auxiliary names PDR %d", p.Handle), 64)
	w.u16(p.TerminusHandle)
	w.u16(p.ID)
	if len(p.Names) > 0xFF {
		w.fail("%d composite entries", len(p.Names))
	}
	w.u8(uint8(len(p.Names)))
	for _, ns := range p.Names {
		if len(ns) > 0xFF {
			w.fail("%d names", len(ns))
		}
		w.u8(uint8(len(ns)))
		for _, a := range ns {
			if strings.ContainsRune(a.Lang, 0) || strings.ContainsRune(a.Name, 0) {
				w.fail("name %q with NUL", a.Name)
			}
			if string([]rune(a.Name)) != a.Name {
				w.fail("name %q is not valid UTF-8", a.Name)
			}
			w.bytes([]byte(a.Lang))
			w.u8(0)
			for _, u := range utf16.Encode([]rune(a.Name)) {
				w.u8(uint8(u >> 8))
				w.u8(uint8(u))
			}
			w.u16(0)
		}
	}
	return marshalPDR(p.Handle, p.pdrType(), p.ChangeNumber, w)
}

// Name returns the first name of composite i in language lang (or in any
// language when lang has none), and "" when there is none.
func (p *AuxNamesPDR) Name(i int, lang string) string {
	if i < 0 || i >= len(p.Names) {
		return ""
	}
	for _, a := range p.Names[i] {
		if strings.EqualFold(a.Lang, lang) {
			return a.Name
		}
	}
	if len(p.Names[i]) > 0 {
		return p.Names[i][0].Name
	}
	return ""
}

// RawPDR is a record of a type this package does not decode.
type RawPDR struct {
	Handle       uint32
	Type         PDRType
	ChangeNumber uint16
	Data         []byte // after the common header
}

// Header implements PDR.
func (p *RawPDR) Header() PDRHeader {
	return PDRHeader{p.Handle, PDRHeaderVersion, p.Type, p.ChangeNumber, uint16(len(p.Data))}
}

// MarshalBinary encodes the whole record.
func (p *RawPDR) MarshalBinary() ([]byte, error) {
	w := newWriter(fmt.Sprintf("PDR %d", p.Handle), len(p.Data))
	w.bytes(p.Data)
	return marshalPDR(p.Handle, p.Type, p.ChangeNumber, w)
}

// Raw converts an engineering value to the nearest raw reading, clamped to
// MinReadable…MaxReadable. A zero resolution yields MinReadable.
func (p *NumericSensorPDR) Raw(v float64) int64 {
	if p.Resolution == 0 {
		return p.MinReadable
	}
	x := roundHalfAway((scale(v, -p.Units.Modifier) - float64(p.Offset)) / float64(p.Resolution))
	return min(max(x, p.MinReadable), p.MaxReadable)
}
