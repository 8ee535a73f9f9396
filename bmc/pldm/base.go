package pldm

import (
	"fmt"
	"hash/crc32"
)

// Ver32 is a PLDM version (DSP0240 ver32): on the wire the bytes alpha,
// update, minor, major (a little-endian uint32). major, minor and update
// are BCD with an F high nibble for single digits; update FFh means "not
// present", alpha 00h none.
type Ver32 uint32

// Version120 is PLDM platform monitoring and control 1.2.0, the DSP0248
// version this package implements. VersionBase110 is DSP0240 1.1.0.
const (
	Version120     Ver32 = 0xF1F2F000
	VersionBase110 Ver32 = 0xF1F1F000
)

// NewVer32 encodes major.minor.update (each 0–99) with no alpha.
func NewVer32(major, minor, update uint8) Ver32 {
	return Ver32(uint32(bcd(major))<<24 | uint32(bcd(minor))<<16 | uint32(bcd(update))<<8)
}

func bcd(v uint8) uint8 {
	v %= 100
	if v < 10 {
		return 0xF0 | v
	}
	return v/10<<4 | v%10
}

func unbcd(b uint8) (uint8, bool) {
	hi, lo := b>>4, b&0x0F
	if lo > 9 {
		return 0, false
	}
	if hi == 0xF {
		return lo, true
	}
	if hi > 9 {
		return 0, false
	}
	return hi*10 + lo, true
}

// String formats v as major.minor[.update][alpha], or hex when it is not
// valid BCD.
func (v Ver32) String() string {
	major, ok1 := unbcd(uint8(v >> 24))
	minor, ok2 := unbcd(uint8(v >> 16))
	if !ok1 || !ok2 {
		return fmt.Sprintf("%#08x", uint32(v))
	}
	s := fmt.Sprintf("%d.%d", major, minor)
	if u := uint8(v >> 8); u != 0xFF {
		up, ok := unbcd(u)
		if !ok {
			return fmt.Sprintf("%#08x", uint32(v))
		}
		s += fmt.Sprintf(".%d", up)
	}
	if a := uint8(v); a != 0 {
		s += string(rune(a))
	}
	return s
}

// CRC32 is the IEEE 802.3 CRC-32 DSP0240 appends to version data.
func CRC32(b []byte) uint32 { return crc32.ChecksumIEEE(b) }

// CRC8 is the CRC-8 (polynomial x⁸+x²+x+1, init 0, not reflected) GetPDR
// appends to the last part of a multipart record.
func CRC8(b []byte) uint8 {
	var c uint8
	for _, x := range b {
		c ^= x
		for range 8 {
			if c&0x80 != 0 {
				c = c<<1 ^ 0x07
			} else {
				c <<= 1
			}
		}
	}
	return c
}

// TransferOp is the transferOperationFlag of multipart requests.
type TransferOp uint8

// Transfer operations.
const (
	GetNextPart  TransferOp = 0
	GetFirstPart TransferOp = 1
)

// TransferFlag says which part of a multipart transfer a response holds.
// The base type (GetPLDMVersion) and GetPDR number Start and Middle
// differently (pldm.md §9.1); End and StartAndEnd agree.
type TransferFlag uint8

// Transfer flags.
const (
	BaseStart     TransferFlag = 0x01 // GetPLDMVersion
	BaseMiddle    TransferFlag = 0x02 // GetPLDMVersion
	PDRStart      TransferFlag = 0x00 // GetPDR
	PDRMiddle     TransferFlag = 0x01 // GetPDR
	TransferEnd   TransferFlag = 0x04
	TransferWhole TransferFlag = 0x05 // StartAndEnd
)

// GetTIDResp is the GetTID (02h) response payload.
type GetTIDResp struct {
	TID uint8 // 0 unassigned, FFh reserved
}

// MarshalBinary encodes p.
func (p *GetTIDResp) MarshalBinary() ([]byte, error) { return []byte{p.TID}, nil }

// UnmarshalBinary decodes p.
func (p *GetTIDResp) UnmarshalBinary(b []byte) error {
	r := newReader("GetTID response", b)
	p.TID = r.u8()
	return r.done()
}

// GetPLDMVersionReq is the GetPLDMVersion (03h) request payload.
type GetPLDMVersionReq struct {
	TransferHandle uint32
	Op             TransferOp
	Type           Type
}

// MarshalBinary encodes p.
func (p *GetPLDMVersionReq) MarshalBinary() ([]byte, error) {
	w := newWriter("GetPLDMVersion request", 6)
	w.u32(p.TransferHandle)
	w.u8(uint8(p.Op))
	w.u8(uint8(p.Type))
	return w.result()
}

// UnmarshalBinary decodes p.
func (p *GetPLDMVersionReq) UnmarshalBinary(b []byte) error {
	r := newReader("GetPLDMVersion request", b)
	p.TransferHandle = r.u32()
	p.Op = TransferOp(r.u8())
	p.Type = Type(r.u8())
	return r.done()
}

// GetPLDMVersionResp is the GetPLDMVersion response payload. CRC says
// whether the version data ends with the CRC-32 of the versions: DSP0240
// and mctp-rs send it, openbmc's responder does not (pldm.md §9.2), so the
// decoder accepts both and sets CRC when the last four bytes check.
type GetPLDMVersionResp struct {
	NextTransferHandle uint32
	Flag               TransferFlag
	Versions           []Ver32
	CRC                bool
}

// MarshalBinary encodes p.
func (p *GetPLDMVersionResp) MarshalBinary() ([]byte, error) {
	w := newWriter("GetPLDMVersion response", 5+4*len(p.Versions)+4)
	w.u32(p.NextTransferHandle)
	w.u8(uint8(p.Flag))
	start := len(w.b)
	for _, v := range p.Versions {
		w.u32(uint32(v))
	}
	if p.CRC {
		w.u32(CRC32(w.b[start:]))
	}
	return w.result()
}

// UnmarshalBinary decodes p.
func (p *GetPLDMVersionResp) UnmarshalBinary(b []byte) error {
	r := newReader("GetPLDMVersion response", b)
	p.NextTransferHandle = r.u32()
	p.Flag = TransferFlag(r.u8())
	data := r.rest()
	if r.err != nil {
		return r.err
	}
	if len(data)%4 != 0 {
		return fmt.Errorf("pldm: GetPLDMVersion response: %d bytes of version data: %w", len(data), ErrLength)
	}
	p.CRC = false
	if n := len(data); n >= 8 && CRC32(data[:n-4]) == uint32(data[n-4])|uint32(data[n-3])<<8|uint32(data[n-2])<<16|uint32(data[n-1])<<24 {
		p.CRC = true
		data = data[:n-4]
	}
	p.Versions = make([]Ver32, len(data)/4)
	for i := range p.Versions {
		p.Versions[i] = Ver32(uint32(data[4*i]) | uint32(data[4*i+1])<<8 | uint32(data[4*i+2])<<16 | uint32(data[4*i+3])<<24)
	}
	return nil
}

// TypeSet is the 8-byte bitfield of GetPLDMTypes: type t is supported if
// bit t%8 of byte t/8 is set.
type TypeSet [8]byte

// TypesOf returns the set holding ts.
func TypesOf(ts ...Type) TypeSet {
	var s TypeSet
	for _, t := range ts {
		setBit(s[:], int(t))
	}
	return s
}

// Has reports whether t is in s.
func (s TypeSet) Has(t Type) bool { return bitSet(s[:], int(t)) }

// GetPLDMTypesResp is the GetPLDMTypes (04h) response payload.
type GetPLDMTypesResp struct {
	Types TypeSet
}

// MarshalBinary encodes p.
func (p *GetPLDMTypesResp) MarshalBinary() ([]byte, error) {
	return append([]byte(nil), p.Types[:]...), nil
}

// UnmarshalBinary decodes p.
func (p *GetPLDMTypesResp) UnmarshalBinary(b []byte) error {
	r := newReader("GetPLDMTypes response", b)
	copy(p.Types[:], r.take(8))
	return r.done()
}

// GetPLDMCommandsReq is the GetPLDMCommands (05h) request payload.
type GetPLDMCommandsReq struct {
	Type    Type
	Version Ver32 // as GetPLDMVersion returned it
}

// MarshalBinary encodes p.
func (p *GetPLDMCommandsReq) MarshalBinary() ([]byte, error) {
	w := newWriter("GetPLDMCommands request", 5)
	w.u8(uint8(p.Type))
	w.u32(uint32(p.Version))
	return w.result()
}

// UnmarshalBinary decodes p.
func (p *GetPLDMCommandsReq) UnmarshalBinary(b []byte) error {
	r := newReader("GetPLDMCommands request", b)
	p.Type = Type(r.u8())
	p.Version = Ver32(r.u32())
	return r.done()
}

// CommandSet is the 32-byte bitfield of GetPLDMCommands.
type CommandSet [32]byte

// CommandsOf returns the set holding cs.
func CommandsOf(cs ...Command) CommandSet {
	var s CommandSet
	for _, c := range cs {
		setBit(s[:], int(c))
	}
	return s
}

// Has reports whether c is in s.
func (s CommandSet) Has(c Command) bool { return bitSet(s[:], int(c)) }

// GetPLDMCommandsResp is the GetPLDMCommands response payload.
type GetPLDMCommandsResp struct {
	Commands CommandSet
}

// MarshalBinary encodes p.
func (p *GetPLDMCommandsResp) MarshalBinary() ([]byte, error) {
	return append([]byte(nil), p.Commands[:]...), nil
}

// UnmarshalBinary decodes p.
func (p *GetPLDMCommandsResp) UnmarshalBinary(b []byte) error {
	r := newReader("GetPLDMCommands response", b)
	copy(p.Commands[:], r.take(32))
	return r.done()
}
