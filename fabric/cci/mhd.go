package cci

import "fmt"

// Multi-Headed Device commands 5500h/5501h (cxl-wire.md §3.7).

// GetMultiHeadedInfoReqMinLen is the size of the Get Multi-Headed Info
// (5500h) input.
const GetMultiHeadedInfoReqMinLen = 2

// GetMultiHeadedInfoReq is the input of Get Multi-Headed Info (5500h).
type GetMultiHeadedInfoReq struct {
	StartLD uint8
	Limit   uint8 // LD map list limit, ≥ 1
}

// Opcode returns OpGetMultiHeadedInfo.
func (GetMultiHeadedInfoReq) Opcode() Opcode { return OpGetMultiHeadedInfo }

// MarshalBinary encodes the payload.
func (p *GetMultiHeadedInfoReq) MarshalBinary() ([]byte, error) {
	return []byte{p.StartLD, p.Limit}, nil
}

// UnmarshalBinary decodes the payload.
func (p *GetMultiHeadedInfoReq) UnmarshalBinary(b []byte) error {
	if err := checkMin("get multi-headed info request", b, GetMultiHeadedInfoReqMinLen); err != nil {
		return err
	}
	*p = GetMultiHeadedInfoReq{StartLD: b[0], Limit: b[1]}
	return nil
}

// LDUnassigned marks an LD map entry with no owning head.
const LDUnassigned uint8 = 0xff

// getMultiHeadedInfoHdrLen is the fixed part of the 5500h output.
const getMultiHeadedInfoHdrLen = 8

// GetMultiHeadedInfoResp is the output of Get Multi-Headed Info (5500h).
// LDMap[i] is the port number of the head owning LD StartLD+i, or
// LDUnassigned.
type GetMultiHeadedInfoResp struct {
	NumLDs   uint8
	NumHeads uint8
	StartLD  uint8
	LDMap    []uint8
}

// MarshalBinary encodes the payload.
func (p *GetMultiHeadedInfoResp) MarshalBinary() ([]byte, error) {
	if len(p.LDMap) > 0xff {
		return nil, fmt.Errorf("cci: get multi-headed info: LD map of %d entries exceeds the 8-bit length", len(p.LDMap))
	}
	b := make([]byte, getMultiHeadedInfoHdrLen, getMultiHeadedInfoHdrLen+len(p.LDMap))
	b[0], b[1] = p.NumLDs, p.NumHeads
	b[4], b[5] = p.StartLD, byte(len(p.LDMap))
	return append(b, p.LDMap...), nil
}

// UnmarshalBinary decodes the payload.
func (p *GetMultiHeadedInfoResp) UnmarshalBinary(b []byte) error {
	const what = "get multi-headed info response"
	if err := checkMin(what, b, getMultiHeadedInfoHdrLen); err != nil {
		return err
	}
	n := int(b[5])
	if err := checkList(what, b, getMultiHeadedInfoHdrLen, uint64(n), 1); err != nil {
		return err
	}
	*p = GetMultiHeadedInfoResp{NumLDs: b[0], NumHeads: b[1], StartLD: b[4]}
	if n > 0 {
		p.LDMap = append([]uint8(nil), b[getMultiHeadedInfoHdrLen:]...)
	}
	return nil
}

// GetHeadInfoReqMinLen is the size of the Get Head Info (5501h) input.
const GetHeadInfoReqMinLen = 2

// GetHeadInfoReq is the input of Get Head Info (5501h).
type GetHeadInfoReq struct {
	StartHead uint8
	Count     uint8
}

// Opcode returns OpGetHeadInfo.
func (GetHeadInfoReq) Opcode() Opcode { return OpGetHeadInfo }

// MarshalBinary encodes the payload.
func (p *GetHeadInfoReq) MarshalBinary() ([]byte, error) {
	return []byte{p.StartHead, p.Count}, nil
}

// UnmarshalBinary decodes the payload.
func (p *GetHeadInfoReq) UnmarshalBinary(b []byte) error {
	if err := checkMin("get head info request", b, GetHeadInfoReqMinLen); err != nil {
		return err
	}
	*p = GetHeadInfoReq{StartHead: b[0], Count: b[1]}
	return nil
}

// HeadInfoLen is the size of one Get Head Info block.
const HeadInfoLen = 9

// LTSSM state values shared with Get Physical Port State.
const (
	LTSSMDetect   uint8 = 0x00
	LTSSML0       uint8 = 0x04
	LTSSMDisabled uint8 = 0x08
)

// HeadInfo describes one head's link. Width and speed fields use bits 5:0;
// the decoder and encoder clear the reserved bits 7:6.
type HeadInfo struct {
	Port            uint8
	MaxWidth        uint8
	NegotiatedWidth uint8
	SpeedsVector    uint8
	MaxSpeed        uint8
	CurrentSpeed    uint8
	LTSSM           uint8
	FirstLane       uint8
	LaneReversal    bool
	PERST           bool // PERST# asserted
}

// getHeadInfoHdrLen is the fixed part of the 5501h output.
const getHeadInfoHdrLen = 4

// GetHeadInfoResp is the output of Get Head Info (5501h).
type GetHeadInfoResp struct {
	Heads []HeadInfo
}

// MarshalBinary encodes the payload.
func (p *GetHeadInfoResp) MarshalBinary() ([]byte, error) {
	if len(p.Heads) > 0xff {
		return nil, fmt.Errorf("cci: get head info: %d heads exceed the 8-bit count", len(p.Heads))
	}
	b := make([]byte, getHeadInfoHdrLen, getHeadInfoHdrLen+HeadInfoLen*len(p.Heads))
	b[0] = byte(len(p.Heads))
	for _, h := range p.Heads {
		b = append(b, h.Port, h.MaxWidth&0x3f, h.NegotiatedWidth&0x3f, h.SpeedsVector&0x3f,
			h.MaxSpeed&0x3f, h.CurrentSpeed&0x3f, h.LTSSM, h.FirstLane,
			b2u(h.LaneReversal)|b2u(h.PERST)<<1)
	}
	return b, nil
}

// UnmarshalBinary decodes the payload.
func (p *GetHeadInfoResp) UnmarshalBinary(b []byte) error {
	const what = "get head info response"
	if err := checkMin(what, b, getHeadInfoHdrLen); err != nil {
		return err
	}
	n := int(b[0])
	if err := checkList(what, b, getHeadInfoHdrLen, uint64(n), HeadInfoLen); err != nil {
		return err
	}
	*p = GetHeadInfoResp{}
	if n > 0 {
		p.Heads = make([]HeadInfo, n)
		for i := range p.Heads {
			e := b[getHeadInfoHdrLen+HeadInfoLen*i:]
			p.Heads[i] = HeadInfo{
				Port: e[0], MaxWidth: e[1] & 0x3f, NegotiatedWidth: e[2] & 0x3f, SpeedsVector: e[3] & 0x3f,
				MaxSpeed: e[4] & 0x3f, CurrentSpeed: e[5] & 0x3f, LTSSM: e[6], FirstLane: e[7],
				LaneReversal: e[8]&1 != 0, PERST: e[8]&2 != 0,
			}
		}
	}
	return nil
}
