package cci

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Event commands 0100h–0106h and the event records they carry
// (cxl-wire.md §2.4, §3.4, §4.3).

// Event logs selected by Get/Clear Event Records.
const (
	EventLogInfo    uint8 = 0x00
	EventLogWarning uint8 = 0x01
	EventLogFailure uint8 = 0x02
	EventLogFatal   uint8 = 0x03
	EventLogDC      uint8 = 0x04 // Dynamic Capacity
)

// EventRecordLen is the size of every event record; it is also the value
// of the record's Length field.
const EventRecordLen = 0x80

// EventDataLen is the size of the event-specific data at record offset 30h.
const EventDataLen = 0x50

// Event record Flags (24-bit field at record offset 11h).
const (
	EventSeverityMask      uint32 = 0x3 // bits 1:0
	EventSeverityInfo      uint32 = 0x0
	EventSeverityWarning   uint32 = 0x1
	EventSeverityFailure   uint32 = 0x2
	EventSeverityFatal     uint32 = 0x3
	EventFlagPermanent     uint32 = 1 << 2
	EventFlagMaintNeeded   uint32 = 1 << 3
	EventFlagPerfDegraded  uint32 = 1 << 4
	EventFlagHWReplace     uint32 = 1 << 5
	EventFlagMaintSubValid uint32 = 1 << 6
	EventFlagLDIDValid     uint32 = 1 << 7 // r3.2
	EventFlagHeadIDValid   uint32 = 1 << 8 // r3.2
)

// Event record identifiers, in UUID string byte order (cxl-wire.md §4.3).
// They are variables only because Go has no array constants; treat them as
// read-only.
var (
	// DCEventUUID is ca95afa7-f183-4018-8c2f-95268e101a2a.
	DCEventUUID = [16]byte{0xca, 0x95, 0xaf, 0xa7, 0xf1, 0x83, 0x40, 0x18, 0x8c, 0x2f, 0x95, 0x26, 0x8e, 0x10, 0x1a, 0x2a}
	// PhysicalSwitchEventUUID is 77cf9271-9c02-470b-9fe4-bc7b75f2da97.
	PhysicalSwitchEventUUID = [16]byte{0x77, 0xcf, 0x92, 0x71, 0x9c, 0x02, 0x47, 0x0b, 0x9f, 0xe4, 0xbc, 0x7b, 0x75, 0xf2, 0xda, 0x97}
	// VirtualSwitchEventUUID is 40d26425-3396-4c4d-a5da-3d47263af425.
	VirtualSwitchEventUUID = [16]byte{0x40, 0xd2, 0x64, 0x25, 0x33, 0x96, 0x4c, 0x4d, 0xa5, 0xda, 0x3d, 0x47, 0x26, 0x3a, 0xf4, 0x25}
	// MLDPortEventUUID is 8dc44363-0c96-4710-b7bf-04bb99534c3f.
	MLDPortEventUUID = [16]byte{0x8d, 0xc4, 0x43, 0x63, 0x0c, 0x96, 0x47, 0x10, 0xb7, 0xbf, 0x04, 0xbb, 0x99, 0x53, 0x4c, 0x3f}
)

// ErrEventUUID reports an event record of a different kind than the typed
// view asked for.
var ErrEventUUID = errors.New("cci: unexpected event record identifier")

// EventRecord is the 128-byte common event record.
type EventRecord struct {
	UUID            [16]byte
	Length          uint8  // EventRecordLen
	Flags           uint32 // 24 bits: severity and EventFlag* bits
	Handle          uint16 // non-zero
	RelatedHandle   uint16
	Timestamp       uint64 // ns since the Unix epoch, device clock
	MaintOpClass    uint8
	MaintOpSubclass uint8
	LDID            uint16 // valid with EventFlagLDIDValid
	HeadID          uint8  // valid with EventFlagHeadIDValid
	Data            [EventDataLen]byte
}

// AppendBinary appends the 128-byte wire form of r to b.
func (r *EventRecord) AppendBinary(b []byte) ([]byte, error) {
	if r.Flags > 0xffffff {
		return b, fmt.Errorf("cci: event record flags %#x exceed 24 bits", r.Flags)
	}
	b = append(b, r.UUID[:]...)
	b = append(b, r.Length, byte(r.Flags), byte(r.Flags>>8), byte(r.Flags>>16))
	b = binary.LittleEndian.AppendUint16(b, r.Handle)
	b = binary.LittleEndian.AppendUint16(b, r.RelatedHandle)
	b = binary.LittleEndian.AppendUint64(b, r.Timestamp)
	b = append(b, r.MaintOpClass, r.MaintOpSubclass)
	b = binary.LittleEndian.AppendUint16(b, r.LDID)
	b = append(b, r.HeadID)
	b = append(b, make([]byte, 0x0b)...)
	return append(b, r.Data[:]...), nil
}

// MarshalBinary encodes the record.
func (r *EventRecord) MarshalBinary() ([]byte, error) {
	return r.AppendBinary(make([]byte, 0, EventRecordLen))
}

// UnmarshalBinary decodes a record from the first 128 bytes of b. The
// Length field is reported as found; it is not checked.
func (r *EventRecord) UnmarshalBinary(b []byte) error {
	if err := checkMin("event record", b, EventRecordLen); err != nil {
		return err
	}
	*r = EventRecord{
		Length:          b[0x10],
		Flags:           uint32(b[0x11]) | uint32(b[0x12])<<8 | uint32(b[0x13])<<16,
		Handle:          binary.LittleEndian.Uint16(b[0x14:]),
		RelatedHandle:   binary.LittleEndian.Uint16(b[0x16:]),
		Timestamp:       binary.LittleEndian.Uint64(b[0x18:]),
		MaintOpClass:    b[0x20],
		MaintOpSubclass: b[0x21],
		LDID:            binary.LittleEndian.Uint16(b[0x22:]),
		HeadID:          b[0x24],
	}
	copy(r.UUID[:], b[0x00:0x10])
	copy(r.Data[:], b[0x30:EventRecordLen])
	return nil
}

// Dynamic Capacity event types (record offset 30h).
const (
	DCEventAdd              uint8 = 0x00
	DCEventRelease          uint8 = 0x01
	DCEventForcedRelease    uint8 = 0x02
	DCEventRegionUpdated    uint8 = 0x03
	DCEventAddResponse      uint8 = 0x04 // to the FM
	DCEventCapacityReleased uint8 = 0x05 // to the FM
)

// DCEventValidAvailable is the Validity bit saying AvailableExtents and
// AvailableTags are valid.
const DCEventValidAvailable uint8 = 1 << 0

// DCEvent is the typed view of a Dynamic Capacity Event Record
// (cxl-wire.md §4.3). Offsets below are within the event data (record
// offset minus 30h).
type DCEvent struct {
	Type             uint8 // DCEvent* constants
	Validity         uint8 // DCEventValidAvailable
	HostID           uint16
	RegionIndex      uint8 // valid for DCEventRegionUpdated
	More             bool
	Extent           Extent
	AvailableExtents uint32
	AvailableTags    uint32
}

// Record builds the common event record carrying e, with severity
// Informational as the specification requires for DC events.
func (e DCEvent) Record(handle uint16, ts uint64) EventRecord {
	r := EventRecord{
		UUID:      DCEventUUID,
		Length:    EventRecordLen,
		Flags:     EventSeverityInfo,
		Handle:    handle,
		Timestamp: ts,
	}
	d := r.Data[:]
	d[0x00] = e.Type
	d[0x01] = e.Validity
	binary.LittleEndian.PutUint16(d[0x02:], e.HostID)
	d[0x04] = e.RegionIndex
	d[0x05] = b2u(e.More)
	// The capped zero-length slice makes AppendBinary write in place.
	e.Extent.AppendBinary(d[0x08 : 0x08 : 0x08+ExtentLen])
	binary.LittleEndian.PutUint32(d[0x48:], e.AvailableExtents)
	binary.LittleEndian.PutUint32(d[0x4c:], e.AvailableTags)
	return r
}

// ParseDCEvent extracts the Dynamic Capacity event from r. It fails with
// ErrEventUUID when r is another kind of record.
func ParseDCEvent(r EventRecord) (DCEvent, error) {
	if r.UUID != DCEventUUID {
		return DCEvent{}, fmt.Errorf("cci: record %s is not a dynamic capacity event: %w", Tag(r.UUID), ErrEventUUID)
	}
	d := r.Data[:]
	ext, err := ParseExtent(d[0x08:])
	if err != nil {
		return DCEvent{}, err
	}
	return DCEvent{
		Type:             d[0x00],
		Validity:         d[0x01],
		HostID:           binary.LittleEndian.Uint16(d[0x02:]),
		RegionIndex:      d[0x04],
		More:             d[0x05]&1 != 0,
		Extent:           ext,
		AvailableExtents: binary.LittleEndian.Uint32(d[0x48:]),
		AvailableTags:    binary.LittleEndian.Uint32(d[0x4c:]),
	}, nil
}

// Physical Switch event types (record offset 31h).
const (
	LinkEventLinkStateChange uint8 = 0x00
	LinkEventSlotStatus      uint8 = 0x01
)

// LinkEventLinkUpOffset is the event-data offset (record offset 7Fh) of the
// project's link-up flag. The standard record reports a link state change
// but the fields that describe the new state are not restated in
// cxl-wire.md, so, as a project convention, bit 0 of the last reserved byte
// of the record carries "link is up after the change". Third-party FMs
// ignore it as reserved.
const LinkEventLinkUpOffset = 0x4f

// LinkEvent is the typed view of a Physical Switch Event Record
// (cxl-wire.md §3.4) as the virtual box uses it to report a head's link
// going up or down.
type LinkEvent struct {
	Port   uint8 // physical port ID (record offset 30h)
	Type   uint8 // LinkEvent* constants (record offset 31h)
	LinkUp bool  // project convention, see LinkEventLinkUpOffset
}

// Record builds the common event record carrying e, severity Informational.
func (e LinkEvent) Record(handle uint16, ts uint64) EventRecord {
	r := EventRecord{
		UUID:      PhysicalSwitchEventUUID,
		Length:    EventRecordLen,
		Flags:     EventSeverityInfo,
		Handle:    handle,
		Timestamp: ts,
	}
	r.Data[0x00] = e.Port
	r.Data[0x01] = e.Type
	r.Data[LinkEventLinkUpOffset] = b2u(e.LinkUp)
	return r
}

// ParseLinkEvent extracts the physical switch event from r. It fails with
// ErrEventUUID when r is another kind of record.
func ParseLinkEvent(r EventRecord) (LinkEvent, error) {
	if r.UUID != PhysicalSwitchEventUUID {
		return LinkEvent{}, fmt.Errorf("cci: record %s is not a physical switch event: %w", Tag(r.UUID), ErrEventUUID)
	}
	return LinkEvent{
		Port:   r.Data[0x00],
		Type:   r.Data[0x01],
		LinkUp: r.Data[LinkEventLinkUpOffset]&1 != 0,
	}, nil
}

// GetEventRecordsReqMinLen is the size of the Get Event Records (0100h)
// input.
const GetEventRecordsReqMinLen = 1

// GetEventRecordsReq is the input of Get Event Records (0100h).
type GetEventRecordsReq struct {
	Log uint8 // EventLog* constants
}

// Opcode returns OpGetEventRecords.
func (GetEventRecordsReq) Opcode() Opcode { return OpGetEventRecords }

// MarshalBinary encodes the payload.
func (p *GetEventRecordsReq) MarshalBinary() ([]byte, error) { return []byte{p.Log}, nil }

// UnmarshalBinary decodes the payload.
func (p *GetEventRecordsReq) UnmarshalBinary(b []byte) error {
	if err := checkMin("get event records request", b, GetEventRecordsReqMinLen); err != nil {
		return err
	}
	*p = GetEventRecordsReq{Log: b[0]}
	return nil
}

// getEventRecordsHdrLen is the fixed part of the 0100h output.
const getEventRecordsHdrLen = 0x20

// GetEventRecordsResp is the output of Get Event Records (0100h).
type GetEventRecordsResp struct {
	Overflow      bool
	More          bool
	OverflowCount uint16
	FirstOverflow uint64 // timestamp
	LastOverflow  uint64 // timestamp
	Records       []EventRecord
}

// MarshalBinary encodes the payload.
func (p *GetEventRecordsResp) MarshalBinary() ([]byte, error) {
	if len(p.Records) > 0xffff {
		return nil, fmt.Errorf("cci: get event records: %d records exceed the 16-bit count", len(p.Records))
	}
	b := make([]byte, getEventRecordsHdrLen, getEventRecordsHdrLen+EventRecordLen*len(p.Records))
	b[0x00] = b2u(p.Overflow) | b2u(p.More)<<1
	binary.LittleEndian.PutUint16(b[0x02:], p.OverflowCount)
	binary.LittleEndian.PutUint64(b[0x04:], p.FirstOverflow)
	binary.LittleEndian.PutUint64(b[0x0c:], p.LastOverflow)
	binary.LittleEndian.PutUint16(b[0x14:], uint16(len(p.Records)))
	for i := range p.Records {
		var err error
		if b, err = p.Records[i].AppendBinary(b); err != nil {
			return nil, fmt.Errorf("cci: get event records: record %d: %w", i, err)
		}
	}
	return b, nil
}

// UnmarshalBinary decodes the payload.
func (p *GetEventRecordsResp) UnmarshalBinary(b []byte) error {
	const what = "get event records response"
	if err := checkMin(what, b, getEventRecordsHdrLen); err != nil {
		return err
	}
	n := int(binary.LittleEndian.Uint16(b[0x14:]))
	if err := checkList(what, b, getEventRecordsHdrLen, uint64(n), EventRecordLen); err != nil {
		return err
	}
	*p = GetEventRecordsResp{
		Overflow:      b[0]&1 != 0,
		More:          b[0]&2 != 0,
		OverflowCount: binary.LittleEndian.Uint16(b[0x02:]),
		FirstOverflow: binary.LittleEndian.Uint64(b[0x04:]),
		LastOverflow:  binary.LittleEndian.Uint64(b[0x0c:]),
	}
	if n > 0 {
		p.Records = make([]EventRecord, n)
		for i := range p.Records {
			off := getEventRecordsHdrLen + i*EventRecordLen
			_ = p.Records[i].UnmarshalBinary(b[off : off+EventRecordLen]) // sized by checkList
		}
	}
	return nil
}

// ClearEventRecordsMinLen is the fixed part of the Clear Event Records
// (0101h) input; n handles of 2 bytes follow.
const ClearEventRecordsMinLen = 6

// ClearEventRecordsReq is the input of Clear Event Records (0101h).
type ClearEventRecordsReq struct {
	Log      uint8
	ClearAll bool     // allowed only after an overflow, with no handles
	Handles  []uint16 // oldest first
}

// Opcode returns OpClearEventRecords.
func (ClearEventRecordsReq) Opcode() Opcode { return OpClearEventRecords }

// MarshalBinary encodes the payload.
func (p *ClearEventRecordsReq) MarshalBinary() ([]byte, error) {
	if len(p.Handles) > 0xff {
		return nil, fmt.Errorf("cci: clear event records: %d handles exceed the 8-bit count", len(p.Handles))
	}
	b := make([]byte, ClearEventRecordsMinLen, ClearEventRecordsMinLen+2*len(p.Handles))
	b[0] = p.Log
	b[1] = b2u(p.ClearAll)
	b[2] = byte(len(p.Handles))
	for _, h := range p.Handles {
		b = binary.LittleEndian.AppendUint16(b, h)
	}
	return b, nil
}

// UnmarshalBinary decodes the payload. The payload must hold exactly the
// number of handles its count announces.
func (p *ClearEventRecordsReq) UnmarshalBinary(b []byte) error {
	const what = "clear event records request"
	if err := checkMin(what, b, ClearEventRecordsMinLen); err != nil {
		return err
	}
	n := int(b[2])
	if err := checkList(what, b, ClearEventRecordsMinLen, uint64(n), 2); err != nil {
		return err
	}
	*p = ClearEventRecordsReq{Log: b[0], ClearAll: b[1]&1 != 0}
	if n > 0 {
		p.Handles = make([]uint16, n)
		for i := range p.Handles {
			p.Handles[i] = binary.LittleEndian.Uint16(b[ClearEventRecordsMinLen+2*i:])
		}
	}
	return nil
}

// MCTP event interrupt policy mask bits (0104h/0105h/0106h).
const (
	PolicyInfo    uint16 = 1 << 0
	PolicyWarning uint16 = 1 << 1
	PolicyFailure uint16 = 1 << 2
	PolicyFatal   uint16 = 1 << 3
	PolicyDC      uint16 = 1 << 4 // DC event log has new uncleared records
	PolicyBGDone  uint16 = 1 << 15
)

// EventInterruptPolicyLen is the payload size of 0104h output, 0105h input
// and output, and 0106h input.
const EventInterruptPolicyLen = 2

// EventInterruptPolicy is the 2-byte mask exchanged by Get/Set MCTP Event
// Interrupt Policy (0104h/0105h) and Event Notification (0106h). It serves
// two request opcodes, so it has no Opcode method: callers name the opcode.
type EventInterruptPolicy struct {
	Mask uint16 // Policy* bits
}

// MarshalBinary encodes the payload.
func (p *EventInterruptPolicy) MarshalBinary() ([]byte, error) {
	return binary.LittleEndian.AppendUint16(nil, p.Mask), nil
}

// UnmarshalBinary decodes the payload.
func (p *EventInterruptPolicy) UnmarshalBinary(b []byte) error {
	if err := checkMin("event interrupt policy", b, EventInterruptPolicyLen); err != nil {
		return err
	}
	*p = EventInterruptPolicy{Mask: binary.LittleEndian.Uint16(b)}
	return nil
}
