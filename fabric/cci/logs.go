package cci

import (
	"encoding/binary"
	"fmt"
)

// Log commands 0400h/0401h and the Command Effects Log (cxl-wire.md §2.6).

// CELUUID identifies the Command Effects Log:
// 0da9c0b5-bf41-4b78-8f79-96b1623b3f17 in string byte order. It is a
// variable only because Go has no array constants; treat it as read-only.
var CELUUID = [16]byte{0x0d, 0xa9, 0xc0, 0xb5, 0xbf, 0x41, 0x4b, 0x78, 0x8f, 0x79, 0x96, 0xb1, 0x62, 0x3b, 0x3f, 0x17}

// Command effects bits of a CEL entry (CXL 3.2 Table 8-87, as restated by
// Linux include/uapi/cxl/features.h).
const (
	EffectConfigChangeColdReset uint16 = 1 << 0
	EffectConfigChangeImmediate uint16 = 1 << 1
	EffectDataChangeImmediate   uint16 = 1 << 2
	EffectPolicyChangeImmediate uint16 = 1 << 3
	EffectLogChangeImmediate    uint16 = 1 << 4
	EffectSecurityStateChange   uint16 = 1 << 5
	EffectBackground            uint16 = 1 << 6
	EffectBGAbortSupported      uint16 = 1 << 7
	EffectExtendedValid         uint16 = 1 << 9 // bits 10 and 11 are valid
	EffectConfigChangeConvReset uint16 = 1 << 10
	EffectConfigChangeCXLReset  uint16 = 1 << 11
)

// LogEntryLen is the size of one Get Supported Logs entry.
const LogEntryLen = 0x14

// getSupportedLogsHdrLen is the fixed part of the 0400h output.
const getSupportedLogsHdrLen = 8

// LogEntry is one entry of Get Supported Logs.
type LogEntry struct {
	UUID [16]byte
	Size uint32 // bytes
}

// GetSupportedLogsResp is the output of Get Supported Logs (0400h).
type GetSupportedLogsResp struct {
	Entries []LogEntry
}

// MarshalBinary encodes the payload.
func (p *GetSupportedLogsResp) MarshalBinary() ([]byte, error) {
	if len(p.Entries) > 0xffff {
		return nil, fmt.Errorf("cci: get supported logs: %d entries exceed the 16-bit count", len(p.Entries))
	}
	b := make([]byte, getSupportedLogsHdrLen, getSupportedLogsHdrLen+LogEntryLen*len(p.Entries))
	binary.LittleEndian.PutUint16(b, uint16(len(p.Entries)))
	for _, e := range p.Entries {
		b = append(b, e.UUID[:]...)
		b = binary.LittleEndian.AppendUint32(b, e.Size)
	}
	return b, nil
}

// UnmarshalBinary decodes the payload.
func (p *GetSupportedLogsResp) UnmarshalBinary(b []byte) error {
	const what = "get supported logs response"
	if err := checkMin(what, b, getSupportedLogsHdrLen); err != nil {
		return err
	}
	n := int(binary.LittleEndian.Uint16(b))
	if err := checkList(what, b, getSupportedLogsHdrLen, uint64(n), LogEntryLen); err != nil {
		return err
	}
	*p = GetSupportedLogsResp{}
	if n > 0 {
		p.Entries = make([]LogEntry, n)
		for i := range p.Entries {
			e := b[getSupportedLogsHdrLen+i*LogEntryLen:]
			copy(p.Entries[i].UUID[:], e[:16])
			p.Entries[i].Size = binary.LittleEndian.Uint32(e[16:])
		}
	}
	return nil
}

// GetLogReqMinLen is the size of the Get Log (0401h) input.
const GetLogReqMinLen = 0x18

// GetLogReq is the input of Get Log (0401h). The output is the raw log
// bytes [Offset, Offset+Length).
type GetLogReq struct {
	UUID   [16]byte
	Offset uint32
	Length uint32
}

// Opcode returns OpGetLog.
func (GetLogReq) Opcode() Opcode { return OpGetLog }

// MarshalBinary encodes the payload.
func (p *GetLogReq) MarshalBinary() ([]byte, error) {
	b := make([]byte, GetLogReqMinLen)
	copy(b, p.UUID[:])
	binary.LittleEndian.PutUint32(b[0x10:], p.Offset)
	binary.LittleEndian.PutUint32(b[0x14:], p.Length)
	return b, nil
}

// UnmarshalBinary decodes the payload.
func (p *GetLogReq) UnmarshalBinary(b []byte) error {
	if err := checkMin("get log request", b, GetLogReqMinLen); err != nil {
		return err
	}
	*p = GetLogReq{
		Offset: binary.LittleEndian.Uint32(b[0x10:]),
		Length: binary.LittleEndian.Uint32(b[0x14:]),
	}
	copy(p.UUID[:], b[:16])
	return nil
}

// CELEntryLen is the size of one Command Effects Log entry.
const CELEntryLen = 4

// CELEntry is one Command Effects Log entry.
type CELEntry struct {
	Opcode  Opcode
	Effects uint16 // Effect* bits
}

// MarshalCEL returns the Command Effects Log holding entries, in order.
func MarshalCEL(entries []CELEntry) []byte {
	b := make([]byte, 0, CELEntryLen*len(entries))
	for _, e := range entries {
		b = binary.LittleEndian.AppendUint16(b, uint16(e.Opcode))
		b = binary.LittleEndian.AppendUint16(b, e.Effects)
	}
	return b
}

// ParseCEL decodes a whole Command Effects Log. Its length must be a
// multiple of CELEntryLen; a log read in pieces must be reassembled first.
func ParseCEL(b []byte) ([]CELEntry, error) {
	if len(b)%CELEntryLen != 0 {
		return nil, fmt.Errorf("cci: command effects log of %d bytes is not a multiple of %d: %w", len(b), CELEntryLen, ErrPayloadLength)
	}
	if len(b) == 0 {
		return nil, nil
	}
	out := make([]CELEntry, len(b)/CELEntryLen)
	for i := range out {
		out[i] = CELEntry{
			Opcode:  Opcode(binary.LittleEndian.Uint16(b[CELEntryLen*i:])),
			Effects: binary.LittleEndian.Uint16(b[CELEntryLen*i+2:]),
		}
	}
	return out, nil
}
