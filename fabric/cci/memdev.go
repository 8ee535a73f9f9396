package cci

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
)

// Memory device command 4000h (cxl-wire.md §2.5).

// Identify Memory Device output sizes: the r3.1 layout is 45h bytes; r3.0
// devices end before the Dynamic Capacity Event Log Size at 43h, which the
// decoder accepts and reads as zero.
const (
	IdentifyMemoryDeviceRespLen    = 0x45
	IdentifyMemoryDeviceRespMinLen = 0x43
)

// fwRevisionLen is the size of the ASCII FW Revision field.
const fwRevisionLen = 0x10

// IdentifyMemoryDeviceResp is the output of Identify Memory Device (4000h).
// Capacities stay in the wire's 256 MB units.
type IdentifyMemoryDeviceResp struct {
	FWRevision        string // ASCII, at most 16 bytes, NUL padded on the wire
	TotalCapacity     uint64 // ×256 MB
	VolatileOnly      uint64 // ×256 MB
	PersistentOnly    uint64 // ×256 MB
	PartitionAlign    uint64 // ×256 MB
	InfoLogSize       uint16
	WarnLogSize       uint16
	FailLogSize       uint16
	FatalLogSize      uint16
	LSASize           uint32 // bytes
	PoisonListMax     uint32 // 24 bits
	InjectPoisonLimit uint16
	PoisonCaps        uint8
	QoSCaps           uint8
	DCEventLogSize    uint16
}

// MarshalBinary encodes the payload.
func (p *IdentifyMemoryDeviceResp) MarshalBinary() ([]byte, error) {
	// A NUL inside the string would end it early on the wire.
	if len(p.FWRevision) > fwRevisionLen || strings.IndexByte(p.FWRevision, 0) >= 0 {
		return nil, fmt.Errorf("cci: identify memory device: firmware revision %q must be at most %d bytes without NUL", p.FWRevision, fwRevisionLen)
	}
	if p.PoisonListMax > 0xffffff {
		return nil, fmt.Errorf("cci: identify memory device: poison list maximum %d exceeds 24 bits", p.PoisonListMax)
	}
	b := make([]byte, IdentifyMemoryDeviceRespLen)
	copy(b, p.FWRevision)
	binary.LittleEndian.PutUint64(b[0x10:], p.TotalCapacity)
	binary.LittleEndian.PutUint64(b[0x18:], p.VolatileOnly)
	binary.LittleEndian.PutUint64(b[0x20:], p.PersistentOnly)
	binary.LittleEndian.PutUint64(b[0x28:], p.PartitionAlign)
	binary.LittleEndian.PutUint16(b[0x30:], p.InfoLogSize)
	binary.LittleEndian.PutUint16(b[0x32:], p.WarnLogSize)
	binary.LittleEndian.PutUint16(b[0x34:], p.FailLogSize)
	binary.LittleEndian.PutUint16(b[0x36:], p.FatalLogSize)
	binary.LittleEndian.PutUint32(b[0x38:], p.LSASize)
	b[0x3c], b[0x3d], b[0x3e] = byte(p.PoisonListMax), byte(p.PoisonListMax>>8), byte(p.PoisonListMax>>16)
	binary.LittleEndian.PutUint16(b[0x3f:], p.InjectPoisonLimit)
	b[0x41] = p.PoisonCaps
	b[0x42] = p.QoSCaps
	binary.LittleEndian.PutUint16(b[0x43:], p.DCEventLogSize)
	return b, nil
}

// UnmarshalBinary decodes the payload. The FW revision ends at the first
// NUL byte.
func (p *IdentifyMemoryDeviceResp) UnmarshalBinary(b []byte) error {
	const what = "identify memory device response"
	if err := checkMin(what, b, IdentifyMemoryDeviceRespMinLen); err != nil {
		return err
	}
	fw := b[:fwRevisionLen]
	if i := bytes.IndexByte(fw, 0); i >= 0 {
		fw = fw[:i]
	}
	*p = IdentifyMemoryDeviceResp{
		FWRevision:        string(fw),
		TotalCapacity:     binary.LittleEndian.Uint64(b[0x10:]),
		VolatileOnly:      binary.LittleEndian.Uint64(b[0x18:]),
		PersistentOnly:    binary.LittleEndian.Uint64(b[0x20:]),
		PartitionAlign:    binary.LittleEndian.Uint64(b[0x28:]),
		InfoLogSize:       binary.LittleEndian.Uint16(b[0x30:]),
		WarnLogSize:       binary.LittleEndian.Uint16(b[0x32:]),
		FailLogSize:       binary.LittleEndian.Uint16(b[0x34:]),
		FatalLogSize:      binary.LittleEndian.Uint16(b[0x36:]),
		LSASize:           binary.LittleEndian.Uint32(b[0x38:]),
		PoisonListMax:     uint32(b[0x3c]) | uint32(b[0x3d])<<8 | uint32(b[0x3e])<<16,
		InjectPoisonLimit: binary.LittleEndian.Uint16(b[0x3f:]),
		PoisonCaps:        b[0x41],
		QoSCaps:           b[0x42],
	}
	if len(b) >= IdentifyMemoryDeviceRespLen {
		p.DCEventLogSize = binary.LittleEndian.Uint16(b[0x43:])
	}
	return nil
}
