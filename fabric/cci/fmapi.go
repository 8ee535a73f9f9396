package cci

import (
	"encoding/binary"
	"fmt"
)

// FM-API virtual switch (52h) and MLD LD management (54h) commands
// (cxl-wire.md §3.4, §3.6).

// BindVPPBReqMinLen is the size of the Bind vPPB (5201h) input.
const BindVPPBReqMinLen = 6

// LDIDNone is the LD ID used when binding a port that is not an MLD.
const LDIDNone uint16 = 0xffff

// BindVPPBReq is the input of Bind vPPB (5201h). The command runs in the
// background (rc BackgroundCommandStarted with BO set).
type BindVPPBReq struct {
	VCSID  uint8
	VPPBID uint8
	PortID uint8  // physical port
	LDID   uint16 // LDIDNone for a non-MLD
}

// Opcode returns OpBindVPPB.
func (BindVPPBReq) Opcode() Opcode { return OpBindVPPB }

// MarshalBinary encodes the payload.
func (p *BindVPPBReq) MarshalBinary() ([]byte, error) {
	b := []byte{p.VCSID, p.VPPBID, p.PortID, 0, 0, 0}
	binary.LittleEndian.PutUint16(b[4:], p.LDID)
	return b, nil
}

// UnmarshalBinary decodes the payload.
func (p *BindVPPBReq) UnmarshalBinary(b []byte) error {
	if err := checkMin("bind vppb request", b, BindVPPBReqMinLen); err != nil {
		return err
	}
	*p = BindVPPBReq{VCSID: b[0], VPPBID: b[1], PortID: b[2], LDID: binary.LittleEndian.Uint16(b[4:])}
	return nil
}

// GetLDInfoRespLen is the size of the Get LD Info (5400h) output.
const GetLDInfoRespLen = 0x0b

// GetLDInfoResp is the output of Get LD Info (5400h).
type GetLDInfoResp struct {
	MemorySize uint64 // bytes
	LDCount    uint16
	QoSCaps    uint8 // b0 egress port congestion, b1 temporary throughput reduction
}

// MarshalBinary encodes the payload.
func (p *GetLDInfoResp) MarshalBinary() ([]byte, error) {
	b := make([]byte, GetLDInfoRespLen)
	binary.LittleEndian.PutUint64(b[0x0:], p.MemorySize)
	binary.LittleEndian.PutUint16(b[0x8:], p.LDCount)
	b[0xa] = p.QoSCaps
	return b, nil
}

// UnmarshalBinary decodes the payload.
func (p *GetLDInfoResp) UnmarshalBinary(b []byte) error {
	if err := checkMin("get ld info response", b, GetLDInfoRespLen); err != nil {
		return err
	}
	*p = GetLDInfoResp{
		MemorySize: binary.LittleEndian.Uint64(b[0x0:]),
		LDCount:    binary.LittleEndian.Uint16(b[0x8:]),
		QoSCaps:    b[0xa],
	}
	return nil
}

// GetLDAllocationsReqMinLen is the size of the Get LD Allocations (5401h)
// input.
const GetLDAllocationsReqMinLen = 2

// GetLDAllocationsReq is the input of Get LD Allocations (5401h).
type GetLDAllocationsReq struct {
	StartLD uint8
	Limit   uint8 // ≥ 1
}

// Opcode returns OpGetLDAllocations.
func (GetLDAllocationsReq) Opcode() Opcode { return OpGetLDAllocations }

// MarshalBinary encodes the payload.
func (p *GetLDAllocationsReq) MarshalBinary() ([]byte, error) {
	return []byte{p.StartLD, p.Limit}, nil
}

// UnmarshalBinary decodes the payload.
func (p *GetLDAllocationsReq) UnmarshalBinary(b []byte) error {
	if err := checkMin("get ld allocations request", b, GetLDAllocationsReqMinLen); err != nil {
		return err
	}
	*p = GetLDAllocationsReq{StartLD: b[0], Limit: b[1]}
	return nil
}

// Memory granularities of Get LD Allocations.
const (
	Granularity256MB uint8 = 0
	Granularity512MB uint8 = 1
	Granularity1GB   uint8 = 2
)

// LDAllocationLen is the size of one Get LD Allocations entry.
const LDAllocationLen = 0x10

// LDAllocation is one LD's allocation, in multiples of the granularity.
type LDAllocation struct {
	Range1 uint64
	Range2 uint64
}

// getLDAllocationsHdrLen is the fixed part of the 5401h output.
const getLDAllocationsHdrLen = 4

// GetLDAllocationsResp is the output of Get LD Allocations (5401h). The
// list length is len(Entries).
type GetLDAllocationsResp struct {
	NumLDs      uint8
	Granularity uint8 // Granularity* constants
	StartLD     uint8
	Entries     []LDAllocation
}

// MarshalBinary encodes the payload.
func (p *GetLDAllocationsResp) MarshalBinary() ([]byte, error) {
	if len(p.Entries) > 0xff {
		return nil, fmt.Errorf("cci: get ld allocations: %d entries exceed the 8-bit count", len(p.Entries))
	}
	b := make([]byte, getLDAllocationsHdrLen, getLDAllocationsHdrLen+LDAllocationLen*len(p.Entries))
	b[0], b[1], b[2], b[3] = p.NumLDs, p.Granularity, p.StartLD, byte(len(p.Entries))
	for _, e := range p.Entries {
		b = binary.LittleEndian.AppendUint64(b, e.Range1)
		b = binary.LittleEndian.AppendUint64(b, e.Range2)
	}
	return b, nil
}

// UnmarshalBinary decodes the payload.
func (p *GetLDAllocationsResp) UnmarshalBinary(b []byte) error {
	const what = "get ld allocations response"
	if err := checkMin(what, b, getLDAllocationsHdrLen); err != nil {
		return err
	}
	n := int(b[3])
	if err := checkList(what, b, getLDAllocationsHdrLen, uint64(n), LDAllocationLen); err != nil {
		return err
	}
	*p = GetLDAllocationsResp{NumLDs: b[0], Granularity: b[1], StartLD: b[2]}
	if n > 0 {
		p.Entries = make([]LDAllocation, n)
		for i := range p.Entries {
			e := b[getLDAllocationsHdrLen+LDAllocationLen*i:]
			p.Entries[i] = LDAllocation{Range1: binary.LittleEndian.Uint64(e), Range2: binary.LittleEndian.Uint64(e[8:])}
		}
	}
	return nil
}
