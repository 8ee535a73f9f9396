package pldm

import "fmt"

// NumericState is the state of a numeric sensor against its thresholds
// (presentState, previousState, eventState; platform.h L188).
type NumericState uint8

// Numeric sensor states.
const (
	StateUnknown       NumericState = 0
	StateNormal        NumericState = 1
	StateWarning       NumericState = 2
	StateCritical      NumericState = 3
	StateFatal         NumericState = 4
	StateLowerWarning  NumericState = 5
	StateLowerCritical NumericState = 6
	StateLowerFatal    NumericState = 7
	StateUpperWarning  NumericState = 8
	StateUpperCritical NumericState = 9
	StateUpperFatal    NumericState = 10
)

var numericStateNames = [...]string{"unknown", "normal", "warning", "critical", "fatal",
	"lowerWarning", "lowerCritical", "lowerFatal", "upperWarning", "upperCritical", "upperFatal"}

func (s NumericState) String() string {
	if int(s) < len(numericStateNames) {
		return numericStateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// SensorOpState is sensorOperationalState (platform.h L353).
type SensorOpState uint8

// Sensor operational states.
const (
	SensorEnabled       SensorOpState = 0
	SensorDisabled      SensorOpState = 1
	SensorUnavailable   SensorOpState = 2
	SensorStatusUnknown SensorOpState = 3
	SensorFailed        SensorOpState = 4
	SensorInitializing  SensorOpState = 5
	SensorShuttingDown  SensorOpState = 6
	SensorInTest        SensorOpState = 7
)

// EventEnable is sensorEventMessageEnable (platform.h L202).
type EventEnable uint8

// Sensor event message enables.
const (
	NoEventGeneration     EventEnable = 0
	EventsDisabled        EventEnable = 1
	EventsEnabled         EventEnable = 2
	OpEventsOnlyEnabled   EventEnable = 3
	StateEventsOnlyEnable EventEnable = 4
)

// EffecterOpState is effecterOperationalState (platform.h L210).
type EffecterOpState uint8

// Effecter operational states.
const (
	EffecterEnabledUpdatePending   EffecterOpState = 0
	EffecterEnabledNoUpdatePending EffecterOpState = 1
	EffecterDisabled               EffecterOpState = 2
	EffecterUnavailable            EffecterOpState = 3
	EffecterStatusUnknown          EffecterOpState = 4
	EffecterFailed                 EffecterOpState = 5
)

// EventReceiverEnable is eventMessageGlobalEnable of SetEventReceiver.
type EventReceiverEnable uint8

// Event message global enables.
const (
	EventReceiverDisable        EventReceiverEnable = 0
	EventReceiverAsync          EventReceiverEnable = 1
	EventReceiverPolling        EventReceiverEnable = 2
	EventReceiverAsyncKeepAlive EventReceiverEnable = 3
)

// TransportMCTP is transportProtocolType 0: the receiver address is an EID.
const TransportMCTP = 0

// SetEventReceiverReq is the SetEventReceiver (04h) request payload.
// Heartbeat (seconds) is on the wire only with EventReceiverAsyncKeepAlive.
type SetEventReceiverReq struct {
	Enable    EventReceiverEnable
	Transport uint8
	Address   uint8 // the receiver's EID for MCTP
	Heartbeat uint16
}

// MarshalBinary encodes p.
func (p *SetEventReceiverReq) MarshalBinary() ([]byte, error) {
	w := newWriter("SetEventReceiver request", 5)
	w.u8(uint8(p.Enable))
	w.u8(p.Transport)
	w.u8(p.Address)
	if p.Enable == EventReceiverAsyncKeepAlive {
		w.u16(p.Heartbeat)
	} else if p.Heartbeat != 0 {
		w.fail("heartbeat %d without keep-alive", p.Heartbeat)
	}
	return w.result()
}

// UnmarshalBinary decodes p.
func (p *SetEventReceiverReq) UnmarshalBinary(b []byte) error {
	r := newReader("SetEventReceiver request", b)
	p.Enable = EventReceiverEnable(r.u8())
	p.Transport = r.u8()
	p.Address = r.u8()
	p.Heartbeat = 0
	if p.Enable == EventReceiverAsyncKeepAlive {
		p.Heartbeat = r.u16()
	}
	return r.done()
}

// EventClass is the eventClass of PlatformEventMessage.
type EventClass uint8

// Event classes (platform.h L332–341).
const (
	EventClassSensor           EventClass = 0x00
	EventClassEffecter         EventClass = 0x01
	EventClassPDRRepositoryChg EventClass = 0x04
	EventClassMessagePoll      EventClass = 0x05
	EventClassHeartbeat        EventClass = 0x06
)

// PlatformEventFormatVersion is the only formatVersion defined.
const PlatformEventFormatVersion = 0x01

// PlatformEventMessageReq is the PlatformEventMessage (0Ah) request
// payload. Data is the class-specific event data; see SensorEvent.
type PlatformEventMessageReq struct {
	FormatVersion uint8
	TID           uint8
	Class         EventClass
	Data          []byte
}

// MarshalBinary encodes p.
func (p *PlatformEventMessageReq) MarshalBinary() ([]byte, error) {
	w := newWriter("PlatformEventMessage request", 3+len(p.Data))
	w.u8(p.FormatVersion)
	w.u8(p.TID)
	w.u8(uint8(p.Class))
	w.bytes(p.Data)
	return w.result()
}

// UnmarshalBinary decodes p. Data is a copy.
func (p *PlatformEventMessageReq) UnmarshalBinary(b []byte) error {
	r := newReader("PlatformEventMessage request", b)
	p.FormatVersion = r.u8()
	p.TID = r.u8()
	p.Class = EventClass(r.u8())
	p.Data = r.rest()
	return r.done()
}

// Platform event status values of the PlatformEventMessage response.
const (
	EventNoLogging          = 0
	EventLoggingDisabled    = 1
	EventLogFull            = 2
	EventAcceptedForLogging = 3
	EventLogged             = 4
	EventLoggingRejected    = 5
)

// PlatformEventMessageResp is the PlatformEventMessage response payload.
type PlatformEventMessageResp struct {
	Status uint8
}

// MarshalBinary encodes p.
func (p *PlatformEventMessageResp) MarshalBinary() ([]byte, error) { return []byte{p.Status}, nil }

// UnmarshalBinary decodes p.
func (p *PlatformEventMessageResp) UnmarshalBinary(b []byte) error {
	r := newReader("PlatformEventMessage response", b)
	p.Status = r.u8()
	return r.done()
}

// SensorEventClass is the sensorEventClass of a sensor event.
type SensorEventClass uint8

// Sensor event classes.
const (
	SensorOpStateEvent SensorEventClass = 0
	StateSensorEvent   SensorEventClass = 1
	NumericSensorEvent SensorEventClass = 2
)

// SensorEvent is the eventData of a sensorEvent (class 00h). Which fields
// are meaningful depends on Class:
//
//	SensorOpStateEvent  OpState, PreviousOpState
//	StateSensorEvent    Offset, State, PreviousState (state-set values)
//	NumericSensorEvent  State, PreviousState (NumericState values), DataSize, Reading
type SensorEvent struct {
	SensorID        uint16
	Class           SensorEventClass
	OpState         SensorOpState
	PreviousOpState SensorOpState
	Offset          uint8
	State           uint8
	PreviousState   uint8
	DataSize        DataSize
	Reading         int64 // raw counts
}

// MarshalBinary encodes e.
func (e *SensorEvent) MarshalBinary() ([]byte, error) {
	w := newWriter("sensor event", 10)
	w.u16(e.SensorID)
	w.u8(uint8(e.Class))
	switch e.Class {
	case SensorOpStateEvent:
		w.u8(uint8(e.OpState))
		w.u8(uint8(e.PreviousOpState))
	case StateSensorEvent:
		w.u8(e.Offset)
		w.u8(e.State)
		w.u8(e.PreviousState)
	case NumericSensorEvent:
		w.u8(e.State)
		w.u8(e.PreviousState)
		w.dataSize("sensorDataSize", e.DataSize)
		w.value("presentReading", e.DataSize, e.Reading)
	default:
		w.fail("sensor event class %d", e.Class)
	}
	return w.result()
}

// UnmarshalBinary decodes e.
func (e *SensorEvent) UnmarshalBinary(b []byte) error {
	r := newReader("sensor event", b)
	*e = SensorEvent{SensorID: r.u16(), Class: SensorEventClass(r.u8())}
	if r.err != nil {
		return r.err
	}
	switch e.Class {
	case SensorOpStateEvent:
		e.OpState = SensorOpState(r.u8())
		e.PreviousOpState = SensorOpState(r.u8())
	case StateSensorEvent:
		e.Offset = r.u8()
		e.State = r.u8()
		e.PreviousState = r.u8()
	case NumericSensorEvent:
		e.State = r.u8()
		e.PreviousState = r.u8()
		e.DataSize = r.dataSize("sensorDataSize")
		e.Reading = r.value(e.DataSize)
	default:
		r.fail("sensorEventClass", uint64(e.Class))
	}
	return r.done()
}

// GetSensorReadingReq is the GetSensorReading (11h) request payload.
type GetSensorReadingReq struct {
	SensorID uint16
	Rearm    bool
}

// MarshalBinary encodes p.
func (p *GetSensorReadingReq) MarshalBinary() ([]byte, error) {
	w := newWriter("GetSensorReading request", 3)
	w.u16(p.SensorID)
	w.bool8(p.Rearm)
	return w.result()
}

// UnmarshalBinary decodes p.
func (p *GetSensorReadingReq) UnmarshalBinary(b []byte) error {
	r := newReader("GetSensorReading request", b)
	p.SensorID = r.u16()
	p.Rearm = r.bool8()
	return r.done()
}

// GetSensorReadingResp is the GetSensorReading response payload.
type GetSensorReadingResp struct {
	DataSize      DataSize
	OpState       SensorOpState
	EventEnable   EventEnable
	PresentState  NumericState
	PreviousState NumericState
	EventState    NumericState
	Reading       int64 // raw counts
}

// MarshalBinary encodes p.
func (p *GetSensorReadingResp) MarshalBinary() ([]byte, error) {
	w := newWriter("GetSensorReading response", 10)
	w.dataSize("sensorDataSize", p.DataSize)
	w.u8(uint8(p.OpState))
	w.u8(uint8(p.EventEnable))
	w.u8(uint8(p.PresentState))
	w.u8(uint8(p.PreviousState))
	w.u8(uint8(p.EventState))
	w.value("presentReading", p.DataSize, p.Reading)
	return w.result()
}

// UnmarshalBinary decodes p.
func (p *GetSensorReadingResp) UnmarshalBinary(b []byte) error {
	r := newReader("GetSensorReading response", b)
	p.DataSize = r.dataSize("sensorDataSize")
	p.OpState = SensorOpState(r.u8())
	p.EventEnable = EventEnable(r.u8())
	p.PresentState = NumericState(r.u8())
	p.PreviousState = NumericState(r.u8())
	p.EventState = NumericState(r.u8())
	p.Reading = r.value(p.DataSize)
	return r.done()
}

// MaxComposite is the largest composite sensor or effecter count.
const MaxComposite = 8

// GetStateSensorReadingsReq is the GetStateSensorReadings (21h) request
// payload. Rearm bit n re-arms composite sensor n.
type GetStateSensorReadingsReq struct {
	SensorID uint16
	Rearm    uint8
}

// MarshalBinary encodes p.
func (p *GetStateSensorReadingsReq) MarshalBinary() ([]byte, error) {
	w := newWriter("GetStateSensorReadings request", 4)
	w.u16(p.SensorID)
	w.u8(p.Rearm)
	w.u8(0)
	return w.result()
}

// UnmarshalBinary decodes p; the reserved byte is ignored.
func (p *GetStateSensorReadingsReq) UnmarshalBinary(b []byte) error {
	r := newReader("GetStateSensorReadings request", b)
	p.SensorID = r.u16()
	p.Rearm = r.u8()
	r.u8()
	return r.done()
}

// StateReading is one composite sensor of a state sensor reading.
type StateReading struct {
	OpState       SensorOpState
	PresentState  uint8
	PreviousState uint8
	EventState    uint8
}

// GetStateSensorReadingsResp is the GetStateSensorReadings response payload.
type GetStateSensorReadingsResp struct {
	Fields []StateReading // 1–8
}

// MarshalBinary encodes p.
func (p *GetStateSensorReadingsResp) MarshalBinary() ([]byte, error) {
	w := newWriter("GetStateSensorReadings response", 1+4*len(p.Fields))
	if len(p.Fields) < 1 || len(p.Fields) > MaxComposite {
		w.fail("composite count %d", len(p.Fields))
	}
	w.u8(uint8(len(p.Fields)))
	for _, f := range p.Fields {
		w.u8(uint8(f.OpState))
		w.u8(f.PresentState)
		w.u8(f.PreviousState)
		w.u8(f.EventState)
	}
	return w.result()
}

// UnmarshalBinary decodes p.
func (p *GetStateSensorReadingsResp) UnmarshalBinary(b []byte) error {
	r := newReader("GetStateSensorReadings response", b)
	n := int(r.u8())
	if r.err == nil && (n < 1 || n > MaxComposite) {
		r.fail("compositeSensorCount", uint64(n))
	}
	if r.err != nil {
		return r.err
	}
	p.Fields = make([]StateReading, n)
	for i := range p.Fields {
		p.Fields[i] = StateReading{SensorOpState(r.u8()), r.u8(), r.u8(), r.u8()}
	}
	return r.done()
}

// SetNumericEffecterValueReq is the SetNumericEffecterValue (31h) request
// payload.
type SetNumericEffecterValueReq struct {
	EffecterID uint16
	DataSize   DataSize
	Value      int64 // raw
}

// MarshalBinary encodes p.
func (p *SetNumericEffecterValueReq) MarshalBinary() ([]byte, error) {
	w := newWriter("SetNumericEffecterValue request", 7)
	w.u16(p.EffecterID)
	w.dataSize("effecterDataSize", p.DataSize)
	w.value("effecterValue", p.DataSize, p.Value)
	return w.result()
}

// UnmarshalBinary decodes p.
func (p *SetNumericEffecterValueReq) UnmarshalBinary(b []byte) error {
	r := newReader("SetNumericEffecterValue request", b)
	p.EffecterID = r.u16()
	p.DataSize = r.dataSize("effecterDataSize")
	p.Value = r.value(p.DataSize)
	return r.done()
}

// GetNumericEffecterValueReq is the GetNumericEffecterValue (32h) request
// payload.
type GetNumericEffecterValueReq struct {
	EffecterID uint16
}

// MarshalBinary encodes p.
func (p *GetNumericEffecterValueReq) MarshalBinary() ([]byte, error) {
	w := newWriter("GetNumericEffecterValue request", 2)
	w.u16(p.EffecterID)
	return w.result()
}

// UnmarshalBinary decodes p.
func (p *GetNumericEffecterValueReq) UnmarshalBinary(b []byte) error {
	r := newReader("GetNumericEffecterValue request", b)
	p.EffecterID = r.u16()
	return r.done()
}

// GetNumericEffecterValueResp is the GetNumericEffecterValue response
// payload.
type GetNumericEffecterValueResp struct {
	DataSize DataSize
	OpState  EffecterOpState
	Pending  int64
	Present  int64
}

// MarshalBinary encodes p.
func (p *GetNumericEffecterValueResp) MarshalBinary() ([]byte, error) {
	w := newWriter("GetNumericEffecterValue response", 10)
	w.dataSize("effecterDataSize", p.DataSize)
	w.u8(uint8(p.OpState))
	w.value("pendingValue", p.DataSize, p.Pending)
	w.value("presentValue", p.DataSize, p.Present)
	return w.result()
}

// UnmarshalBinary decodes p.
func (p *GetNumericEffecterValueResp) UnmarshalBinary(b []byte) error {
	r := newReader("GetNumericEffecterValue response", b)
	p.DataSize = r.dataSize("effecterDataSize")
	p.OpState = EffecterOpState(r.u8())
	p.Pending = r.value(p.DataSize)
	p.Present = r.value(p.DataSize)
	return r.done()
}

// StateRequest is one composite effecter of SetStateEffecterStates: Set
// false means noChange.
type StateRequest struct {
	Set   bool
	State uint8
}

// SetStateEffecterStatesReq is the SetStateEffecterStates (39h) request
// payload.
type SetStateEffecterStatesReq struct {
	EffecterID uint16
	Fields     []StateRequest // 1–8
}

// MarshalBinary encodes p.
func (p *SetStateEffecterStatesReq) MarshalBinary() ([]byte, error) {
	w := newWriter("SetStateEffecterStates request", 3+2*len(p.Fields))
	w.u16(p.EffecterID)
	if len(p.Fields) < 1 || len(p.Fields) > MaxComposite {
		w.fail("composite count %d", len(p.Fields))
	}
	w.u8(uint8(len(p.Fields)))
	for _, f := range p.Fields {
		w.bool8(f.Set)
		w.u8(f.State)
	}
	return w.result()
}

// UnmarshalBinary decodes p. A setRequest other than 0 or 1 is invalid.
func (p *SetStateEffecterStatesReq) UnmarshalBinary(b []byte) error {
	r := newReader("SetStateEffecterStates request", b)
	p.EffecterID = r.u16()
	n := int(r.u8())
	if r.err == nil && (n < 1 || n > MaxComposite) {
		r.fail("compositeEffecterCount", uint64(n))
	}
	if r.err != nil {
		return r.err
	}
	p.Fields = make([]StateRequest, n)
	for i := range p.Fields {
		set := r.u8()
		if set > 1 {
			r.fail("setRequest", uint64(set))
		}
		p.Fields[i] = StateRequest{Set: set == 1, State: r.u8()}
	}
	return r.done()
}

// Repository states of GetPDRRepositoryInfo.
const (
	RepositoryAvailable        = 0
	RepositoryUpdateInProgress = 1
	RepositoryFailed           = 2
)

// Timestamp104 is a DSP0248 timestamp104, kept as its 13 wire bytes.
type Timestamp104 [13]byte

// GetPDRRepositoryInfoResp is the GetPDRRepositoryInfo (50h) response
// payload.
type GetPDRRepositoryInfoResp struct {
	State                 uint8
	UpdateTime            Timestamp104
	OEMUpdateTime         Timestamp104
	RecordCount           uint32
	RepositorySize        uint32
	LargestRecordSize     uint32
	TransferHandleTimeout uint8 // seconds; 0 = none
}

// MarshalBinary encodes p.
func (p *GetPDRRepositoryInfoResp) MarshalBinary() ([]byte, error) {
	w := newWriter("GetPDRRepositoryInfo response", 40)
	w.u8(p.State)
	w.bytes(p.UpdateTime[:])
	w.bytes(p.OEMUpdateTime[:])
	w.u32(p.RecordCount)
	w.u32(p.RepositorySize)
	w.u32(p.LargestRecordSize)
	w.u8(p.TransferHandleTimeout)
	return w.result()
}

// UnmarshalBinary decodes p.
func (p *GetPDRRepositoryInfoResp) UnmarshalBinary(b []byte) error {
	r := newReader("GetPDRRepositoryInfo response", b)
	p.State = r.u8()
	copy(p.UpdateTime[:], r.take(13))
	copy(p.OEMUpdateTime[:], r.take(13))
	p.RecordCount = r.u32()
	p.RepositorySize = r.u32()
	p.LargestRecordSize = r.u32()
	p.TransferHandleTimeout = r.u8()
	return r.done()
}

// GetPDRReq is the GetPDR (51h) request payload.
type GetPDRReq struct {
	RecordHandle   uint32 // 0 = first record
	TransferHandle uint32 // 0 on the first part
	Op             TransferOp
	RequestCount   uint16 // most record bytes wanted in this part
	ChangeNumber   uint16 // 0 on the first part, then the record's own
}

// MarshalBinary encodes p.
func (p *GetPDRReq) MarshalBinary() ([]byte, error) {
	w := newWriter("GetPDR request", 13)
	w.u32(p.RecordHandle)
	w.u32(p.TransferHandle)
	w.u8(uint8(p.Op))
	w.u16(p.RequestCount)
	w.u16(p.ChangeNumber)
	return w.result()
}

// UnmarshalBinary decodes p.
func (p *GetPDRReq) UnmarshalBinary(b []byte) error {
	r := newReader("GetPDR request", b)
	p.RecordHandle = r.u32()
	p.TransferHandle = r.u32()
	p.Op = TransferOp(r.u8())
	p.RequestCount = r.u16()
	p.ChangeNumber = r.u16()
	return r.done()
}

// GetPDRResp is the GetPDR response payload. CRC (CRC-8 over the whole
// record) is on the wire only when Flag is TransferEnd.
type GetPDRResp struct {
	NextRecordHandle   uint32 // 0 after the last record
	NextTransferHandle uint32 // 0 once the record is complete
	Flag               TransferFlag
	Data               []byte
	CRC                uint8
}

// MarshalBinary encodes p.
func (p *GetPDRResp) MarshalBinary() ([]byte, error) {
	w := newWriter("GetPDR response", 12+len(p.Data))
	w.u32(p.NextRecordHandle)
	w.u32(p.NextTransferHandle)
	w.u8(uint8(p.Flag))
	if len(p.Data) > 0xFFFF {
		w.fail("%d bytes of record data", len(p.Data))
	}
	w.u16(uint16(len(p.Data)))
	w.bytes(p.Data)
	if p.Flag == TransferEnd {
		w.u8(p.CRC)
	} else if p.CRC != 0 {
		w.fail("CRC %#02x without End flag", p.CRC)
	}
	return w.result()
}

// UnmarshalBinary decodes p. Data is a copy.
func (p *GetPDRResp) UnmarshalBinary(b []byte) error {
	r := newReader("GetPDR response", b)
	p.NextRecordHandle = r.u32()
	p.NextTransferHandle = r.u32()
	p.Flag = TransferFlag(r.u8())
	n := int(r.u16())
	p.Data = append([]byte(nil), r.take(n)...)
	p.CRC = 0
	if p.Flag == TransferEnd {
		p.CRC = r.u8()
	}
	return r.done()
}
