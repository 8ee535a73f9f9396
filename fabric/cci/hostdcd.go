package cci

import (
	"encoding/binary"
	"fmt"
)

// Host-side Dynamic Capacity commands 4800h–4803h (cxl-wire.md §4.1–§4.5).
// The FM never sends them; the simulated hosts do.

// RegionConfigLen is the size of a DC region configuration entry in both
// 4800h and 5601h outputs.
const RegionConfigLen = 0x28

// dcTrailerLen is the size of the extents/tags trailer that follows the
// region entries of 4800h and 5601h.
const dcTrailerLen = 0x10

// regionCommon is the part shared by the 4800h and 5601h region entries
// (offsets 00h–1Fh).
type regionCommon struct {
	base, decodeLength, length, blockSize uint64
}

// put writes the shared 20h bytes into e, converting the decode length from
// bytes to 256 MB units.
func (r regionCommon) put(e []byte) error {
	units, err := toCapacityUnits("region decode length", r.decodeLength)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint64(e[0x00:], r.base)
	binary.LittleEndian.PutUint64(e[0x08:], units)
	binary.LittleEndian.PutUint64(e[0x10:], r.length)
	binary.LittleEndian.PutUint64(e[0x18:], r.blockSize)
	return nil
}

// parseRegionCommon reads the shared 20h bytes of a region entry.
func parseRegionCommon(e []byte) (regionCommon, error) {
	dl, err := fromCapacityUnits("region decode length", binary.LittleEndian.Uint64(e[0x08:]))
	if err != nil {
		return regionCommon{}, err
	}
	return regionCommon{
		base:         binary.LittleEndian.Uint64(e[0x00:]),
		decodeLength: dl,
		length:       binary.LittleEndian.Uint64(e[0x10:]),
		blockSize:    binary.LittleEndian.Uint64(e[0x18:]),
	}, nil
}

// dcTrailer is the extents/tags trailer of 4800h and 5601h.
type dcTrailer struct {
	supportedExtents, availableExtents, supportedTags, availableTags uint32
}

func (t dcTrailer) append(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, t.supportedExtents)
	b = binary.LittleEndian.AppendUint32(b, t.availableExtents)
	b = binary.LittleEndian.AppendUint32(b, t.supportedTags)
	return binary.LittleEndian.AppendUint32(b, t.availableTags)
}

func parseDCTrailer(b []byte) dcTrailer {
	return dcTrailer{
		supportedExtents: binary.LittleEndian.Uint32(b[0x0:]),
		availableExtents: binary.LittleEndian.Uint32(b[0x4:]),
		supportedTags:    binary.LittleEndian.Uint32(b[0x8:]),
		availableTags:    binary.LittleEndian.Uint32(b[0xc:]),
	}
}

// GetDCConfigReqMinLen is the size of the Get Dynamic Capacity
// Configuration (4800h) input.
const GetDCConfigReqMinLen = 2

// GetDCConfigReq is the input of Get Dynamic Capacity Configuration (4800h).
type GetDCConfigReq struct {
	RegionCount uint8 // maximum number of regions to return
	StartRegion uint8
}

// Opcode returns OpGetDCConfig.
func (GetDCConfigReq) Opcode() Opcode { return OpGetDCConfig }

// MarshalBinary encodes the payload.
func (p *GetDCConfigReq) MarshalBinary() ([]byte, error) {
	return []byte{p.RegionCount, p.StartRegion}, nil
}

// UnmarshalBinary decodes the payload.
func (p *GetDCConfigReq) UnmarshalBinary(b []byte) error {
	if err := checkMin("get dc config request", b, GetDCConfigReqMinLen); err != nil {
		return err
	}
	*p = GetDCConfigReq{RegionCount: b[0], StartRegion: b[1]}
	return nil
}

// HostRegionConfig is one region entry of 4800h (the host view, which
// differs from the 5601h entry at offsets 20h–27h).
type HostRegionConfig struct {
	Base              uint64 // DPA, 256 MB aligned
	DecodeLength      uint64 // bytes; a multiple of 256 MB (×256 MB on the wire)
	Length            uint64 // bytes
	BlockSize         uint64 // bytes
	DSMADHandle       uint32
	SanitizeOnRelease bool
}

// getDCConfigHdrLen is the fixed part of the 4800h output.
const getDCConfigHdrLen = 8

// GetDCConfigResp is the output of Get Dynamic Capacity Configuration
// (4800h). The number of regions returned is len(Regions).
type GetDCConfigResp struct {
	AvailableRegions uint8
	Regions          []HostRegionConfig
	SupportedExtents uint32
	AvailableExtents uint32
	SupportedTags    uint32
	AvailableTags    uint32
}

// MarshalBinary encodes the payload.
func (p *GetDCConfigResp) MarshalBinary() ([]byte, error) {
	if len(p.Regions) > 0xff {
		return nil, fmt.Errorf("cci: get dc config: %d regions exceed the 8-bit count", len(p.Regions))
	}
	n := getDCConfigHdrLen + RegionConfigLen*len(p.Regions)
	b := make([]byte, n, n+dcTrailerLen)
	b[0] = p.AvailableRegions
	b[1] = byte(len(p.Regions))
	for i, r := range p.Regions {
		e := b[getDCConfigHdrLen+RegionConfigLen*i:]
		if err := (regionCommon{r.Base, r.DecodeLength, r.Length, r.BlockSize}).put(e); err != nil {
			return nil, fmt.Errorf("cci: get dc config: region %d: %w", i, err)
		}
		binary.LittleEndian.PutUint32(e[0x20:], r.DSMADHandle)
		e[0x24] = b2u(r.SanitizeOnRelease)
	}
	return dcTrailer{p.SupportedExtents, p.AvailableExtents, p.SupportedTags, p.AvailableTags}.append(b), nil
}

// UnmarshalBinary decodes the payload, which must hold exactly the
// returned regions and the trailer.
func (p *GetDCConfigResp) UnmarshalBinary(b []byte) error {
	const what = "get dc config response"
	if err := checkMin(what, b, getDCConfigHdrLen+dcTrailerLen); err != nil {
		return err
	}
	n := int(b[1])
	if err := checkList(what, b, getDCConfigHdrLen+dcTrailerLen, uint64(n), RegionConfigLen); err != nil {
		return err
	}
	var regions []HostRegionConfig
	if n > 0 {
		regions = make([]HostRegionConfig, n)
	}
	for i := range regions {
		e := b[getDCConfigHdrLen+RegionConfigLen*i:]
		c, err := parseRegionCommon(e)
		if err != nil {
			return fmt.Errorf("cci: %s: region %d: %w", what, i, err)
		}
		regions[i] = HostRegionConfig{
			Base: c.base, DecodeLength: c.decodeLength, Length: c.length, BlockSize: c.blockSize,
			DSMADHandle:       binary.LittleEndian.Uint32(e[0x20:]),
			SanitizeOnRelease: e[0x24]&1 != 0,
		}
	}
	t := parseDCTrailer(b[getDCConfigHdrLen+RegionConfigLen*n:])
	*p = GetDCConfigResp{
		AvailableRegions: b[0],
		Regions:          regions,
		SupportedExtents: t.supportedExtents,
		AvailableExtents: t.availableExtents,
		SupportedTags:    t.supportedTags,
		AvailableTags:    t.availableTags,
	}
	return nil
}

// GetDCExtentListReqMinLen is the size of the Get Dynamic Capacity Extent
// List (4801h) input.
const GetDCExtentListReqMinLen = 8

// GetDCExtentListReq is the input of Get Dynamic Capacity Extent List
// (4801h). Count 0 returns only the totals and the generation number.
type GetDCExtentListReq struct {
	Count uint32
	Start uint32
}

// Opcode returns OpGetDCExtentList.
func (GetDCExtentListReq) Opcode() Opcode { return OpGetDCExtentList }

// MarshalBinary encodes the payload.
func (p *GetDCExtentListReq) MarshalBinary() ([]byte, error) {
	b := make([]byte, GetDCExtentListReqMinLen)
	binary.LittleEndian.PutUint32(b[0:], p.Count)
	binary.LittleEndian.PutUint32(b[4:], p.Start)
	return b, nil
}

// UnmarshalBinary decodes the payload.
func (p *GetDCExtentListReq) UnmarshalBinary(b []byte) error {
	if err := checkMin("get dc extent list request", b, GetDCExtentListReqMinLen); err != nil {
		return err
	}
	*p = GetDCExtentListReq{
		Count: binary.LittleEndian.Uint32(b[0:]),
		Start: binary.LittleEndian.Uint32(b[4:]),
	}
	return nil
}

// getDCExtentListHdrLen is the fixed part of the 4801h output.
const getDCExtentListHdrLen = 0x10

// GetDCExtentListResp is the output of Get Dynamic Capacity Extent List
// (4801h). The returned count is len(Extents).
type GetDCExtentListResp struct {
	Total      uint32
	Generation uint32
	Extents    []Extent
}

// MarshalBinary encodes the payload.
func (p *GetDCExtentListResp) MarshalBinary() ([]byte, error) {
	b := make([]byte, getDCExtentListHdrLen, getDCExtentListHdrLen+ExtentLen*len(p.Extents))
	binary.LittleEndian.PutUint32(b[0x0:], uint32(len(p.Extents)))
	binary.LittleEndian.PutUint32(b[0x4:], p.Total)
	binary.LittleEndian.PutUint32(b[0x8:], p.Generation)
	return appendExtents(b, p.Extents), nil
}

// UnmarshalBinary decodes the payload.
func (p *GetDCExtentListResp) UnmarshalBinary(b []byte) error {
	const what = "get dc extent list response"
	if err := checkMin(what, b, getDCExtentListHdrLen); err != nil {
		return err
	}
	n := uint64(binary.LittleEndian.Uint32(b))
	if err := checkList(what, b, getDCExtentListHdrLen, n, ExtentLen); err != nil {
		return err
	}
	*p = GetDCExtentListResp{
		Total:      binary.LittleEndian.Uint32(b[0x4:]),
		Generation: binary.LittleEndian.Uint32(b[0x8:]),
		Extents:    parseExtents(b[getDCExtentListHdrLen:], int(n)),
	}
	return nil
}

// ExtentRangeLen is the size of one Updated Extent entry of 4802h/4803h.
const ExtentRangeLen = 0x18

// ExtentRange is one Updated Extent of 4802h/4803h: a DPA range without a
// tag.
type ExtentRange struct {
	DPA    uint64
	Length uint64
}

// Fixed parts of the 4802h and 4803h inputs; n entries of ExtentRangeLen
// follow.
const (
	AddDCResponseMinLen = 8
	ReleaseDCMinLen     = 8
)

// encodeRanges is the shared 4802h/4803h encoder.
func encodeRanges(more bool, rs []ExtentRange) []byte {
	b := make([]byte, AddDCResponseMinLen, AddDCResponseMinLen+ExtentRangeLen*len(rs))
	binary.LittleEndian.PutUint32(b, uint32(len(rs)))
	b[4] = b2u(more)
	for _, r := range rs {
		b = binary.LittleEndian.AppendUint64(b, r.DPA)
		b = binary.LittleEndian.AppendUint64(b, r.Length)
		b = append(b, 0, 0, 0, 0, 0, 0, 0, 0)
	}
	return b
}

// decodeRanges is the shared 4802h/4803h decoder.
func decodeRanges(what string, b []byte) (bool, []ExtentRange, error) {
	if err := checkMin(what, b, AddDCResponseMinLen); err != nil {
		return false, nil, err
	}
	n := uint64(binary.LittleEndian.Uint32(b))
	if err := checkList(what, b, AddDCResponseMinLen, n, ExtentRangeLen); err != nil {
		return false, nil, err
	}
	var rs []ExtentRange
	if n > 0 {
		rs = make([]ExtentRange, n)
	}
	for i := range rs {
		e := b[AddDCResponseMinLen+ExtentRangeLen*i:]
		rs[i] = ExtentRange{DPA: binary.LittleEndian.Uint64(e), Length: binary.LittleEndian.Uint64(e[8:])}
	}
	return b[4]&1 != 0, rs, nil
}

// AddDCResponseReq is the input of Add Dynamic Capacity Response (4802h).
// An empty Extents list rejects everything that was offered.
type AddDCResponseReq struct {
	More    bool // the next 4802h belongs to the same acknowledgment
	Extents []ExtentRange
}

// Opcode returns OpAddDCResponse.
func (AddDCResponseReq) Opcode() Opcode { return OpAddDCResponse }

// MarshalBinary encodes the payload.
func (p *AddDCResponseReq) MarshalBinary() ([]byte, error) {
	return encodeRanges(p.More, p.Extents), nil
}

// UnmarshalBinary decodes the payload, which must hold exactly the
// announced number of entries.
func (p *AddDCResponseReq) UnmarshalBinary(b []byte) error {
	more, rs, err := decodeRanges("add dc response request", b)
	if err != nil {
		return err
	}
	*p = AddDCResponseReq{More: more, Extents: rs}
	return nil
}

// ReleaseDCReq is the input of Release Dynamic Capacity (4803h); same
// layout as 4802h.
type ReleaseDCReq struct {
	More    bool
	Extents []ExtentRange
}

// Opcode returns OpReleaseDC.
func (ReleaseDCReq) Opcode() Opcode { return OpReleaseDC }

// MarshalBinary encodes the payload.
func (p *ReleaseDCReq) MarshalBinary() ([]byte, error) {
	return encodeRanges(p.More, p.Extents), nil
}

// UnmarshalBinary decodes the payload, which must hold exactly the
// announced number of entries. An empty list decodes; Validate rejects it.
func (p *ReleaseDCReq) UnmarshalBinary(b []byte) error {
	more, rs, err := decodeRanges("release dc request", b)
	if err != nil {
		return err
	}
	*p = ReleaseDCReq{More: more, Extents: rs}
	return nil
}

// Validate checks the rule that is semantic rather than structural: a
// release names at least one extent. The error wraps InvalidInput so a
// responder can return it as is.
func (p *ReleaseDCReq) Validate() error {
	if len(p.Extents) == 0 {
		return fmt.Errorf("cci: release dc: extent count must be > 0: %w", InvalidInput)
	}
	return nil
}
