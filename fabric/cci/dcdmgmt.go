package cci

import (
	"encoding/binary"
	"fmt"
)

// DCD Management commands 5600h–5608h (cxl-wire.md §3.8), sent by the FM on
// the LD Pool CCI with MCTP type 07h.

// Add Capacity Selection Policies (5604h byte 02h bits 3:0). Get DCD Info
// reports the supported ones as a bitmask: bit n set ⇒ policy n supported.
const (
	AddPolicyFree         uint8 = 0x0
	AddPolicyContiguous   uint8 = 0x1
	AddPolicyPrescriptive uint8 = 0x2
	AddPolicySharedAccess uint8 = 0x3 // Enable Shared Access; never advertised by 5600h
)

// Release Removal Policies (5605h byte 02h bits 3:0); 5600h reports them as
// a bitmask like the add policies.
const (
	ReleasePolicyTagBased     uint8 = 0x0
	ReleasePolicyPrescriptive uint8 = 0x1
)

// MaxDCRegions is the number of DC regions per LD the layouts allow.
const MaxDCRegions = 8

// GetDCDInfoRespLen is the size of the Get DCD Info (5600h) output.
const GetDCDInfoRespLen = 0x54

// GetDCDInfoResp is the output of Get DCD Info (5600h).
type GetDCDInfoResp struct {
	NumHosts        uint8
	NumRegions      uint8  // regions per LD, 1–8
	AddPolicies     uint16 // bit n ⇒ AddPolicy n supported
	ReleasePolicies uint16 // bit n ⇒ ReleasePolicy n supported
	SoRConfigurable uint8  // bit n ⇒ region n's Sanitize on Release is configurable
	TotalCapacity   uint64 // ×256 MB, as on the wire
	// BlockSizeMasks holds one mask per region (len = NumRegions): bit n set
	// ⇒ block size 2^n bytes supported.
	BlockSizeMasks []uint64
}

// MarshalBinary encodes the payload.
func (p *GetDCDInfoResp) MarshalBinary() ([]byte, error) {
	if p.NumRegions > MaxDCRegions || len(p.BlockSizeMasks) != int(p.NumRegions) {
		return nil, fmt.Errorf("cci: get dcd info: %d block size masks for %d regions (at most %d)", len(p.BlockSizeMasks), p.NumRegions, MaxDCRegions)
	}
	b := make([]byte, GetDCDInfoRespLen)
	b[0x00] = p.NumHosts
	b[0x01] = p.NumRegions
	binary.LittleEndian.PutUint16(b[0x04:], p.AddPolicies)
	binary.LittleEndian.PutUint16(b[0x08:], p.ReleasePolicies)
	b[0x0a] = p.SoRConfigurable
	binary.LittleEndian.PutUint64(b[0x0c:], p.TotalCapacity)
	for i, m := range p.BlockSizeMasks {
		binary.LittleEndian.PutUint64(b[0x14+8*i:], m)
	}
	return b, nil
}

// UnmarshalBinary decodes the payload. A region count above MaxDCRegions
// claims more masks than the payload holds.
func (p *GetDCDInfoResp) UnmarshalBinary(b []byte) error {
	const what = "get dcd info response"
	if err := checkMin(what, b, GetDCDInfoRespLen); err != nil {
		return err
	}
	n := int(b[0x01])
	if n > MaxDCRegions {
		return fmt.Errorf("cci: %s: %d regions exceed the %d mask slots: %w", what, n, MaxDCRegions, ErrPayloadLength)
	}
	*p = GetDCDInfoResp{
		NumHosts:        b[0x00],
		NumRegions:      b[0x01],
		AddPolicies:     binary.LittleEndian.Uint16(b[0x04:]),
		ReleasePolicies: binary.LittleEndian.Uint16(b[0x08:]),
		SoRConfigurable: b[0x0a],
		TotalCapacity:   binary.LittleEndian.Uint64(b[0x0c:]),
	}
	if n > 0 {
		p.BlockSizeMasks = make([]uint64, n)
		for i := range p.BlockSizeMasks {
			p.BlockSizeMasks[i] = binary.LittleEndian.Uint64(b[0x14+8*i:])
		}
	}
	return nil
}

// GetHostDCRegionConfigReqMinLen is the size of the Get Host DC Region
// Configuration (5601h) input.
const GetHostDCRegionConfigReqMinLen = 4

// GetHostDCRegionConfigReq is the input of Get Host DC Region Configuration
// (5601h).
type GetHostDCRegionConfigReq struct {
	HostID      uint16 // LD-ID of the host interface
	RegionCount uint8  // maximum number of regions to return
	StartRegion uint8
}

// Opcode returns OpGetHostDCRegionConfig.
func (GetHostDCRegionConfigReq) Opcode() Opcode { return OpGetHostDCRegionConfig }

// MarshalBinary encodes the payload.
func (p *GetHostDCRegionConfigReq) MarshalBinary() ([]byte, error) {
	b := make([]byte, GetHostDCRegionConfigReqMinLen)
	binary.LittleEndian.PutUint16(b, p.HostID)
	b[2], b[3] = p.RegionCount, p.StartRegion
	return b, nil
}

// UnmarshalBinary decodes the payload.
func (p *GetHostDCRegionConfigReq) UnmarshalBinary(b []byte) error {
	if err := checkMin("get host dc region config request", b, GetHostDCRegionConfigReqMinLen); err != nil {
		return err
	}
	*p = GetHostDCRegionConfigReq{HostID: binary.LittleEndian.Uint16(b), RegionCount: b[2], StartRegion: b[3]}
	return nil
}

// Region Attributes1 bits (CDAT DSMAS flag semantics).
const (
	AttrNonVolatile  uint8 = 1 << 2
	AttrSharable     uint8 = 1 << 3
	AttrHWCoherency  uint8 = 1 << 4
	AttrInterconnect uint8 = 1 << 5 // interconnect-specific DC management
	AttrReadOnly     uint8 = 1 << 6
)

// DCRegionConfig is one region entry of 5601h (the FM view).
type DCRegionConfig struct {
	Base              uint64 // DPA, 256 MB aligned
	DecodeLength      uint64 // bytes; a multiple of 256 MB (×256 MB on the wire)
	Length            uint64 // bytes
	BlockSize         uint64 // bytes
	Attributes1       uint8  // Attr* bits
	SanitizeOnRelease bool   // Attributes2 b0
}

// getHostDCRegionConfigHdrLen is the fixed part of the 5601h output
// before the region entries.
const getHostDCRegionConfigHdrLen = 4

// GetHostDCRegionConfigResp is the output of Get Host DC Region
// Configuration (5601h). The number returned is len(Regions); the
// extents/tags trailer sits right after the entries, at 4 + 28h·R.
type GetHostDCRegionConfigResp struct {
	HostID           uint16
	AvailableRegions uint8
	Regions          []DCRegionConfig
	SupportedExtents uint32
	AvailableExtents uint32
	SupportedTags    uint32
	AvailableTags    uint32
}

// MarshalBinary encodes the payload.
func (p *GetHostDCRegionConfigResp) MarshalBinary() ([]byte, error) {
	if len(p.Regions) > 0xff {
		return nil, fmt.Errorf("cci: get host dc region config: %d regions exceed the 8-bit count", len(p.Regions))
	}
	n := getHostDCRegionConfigHdrLen + RegionConfigLen*len(p.Regions)
	b := make([]byte, n, n+dcTrailerLen)
	binary.LittleEndian.PutUint16(b, p.HostID)
	b[2], b[3] = p.AvailableRegions, byte(len(p.Regions))
	for i, r := range p.Regions {
		e := b[getHostDCRegionConfigHdrLen+RegionConfigLen*i:]
		if err := (regionCommon{r.Base, r.DecodeLength, r.Length, r.BlockSize}).put(e); err != nil {
			return nil, fmt.Errorf("cci: get host dc region config: region %d: %w", i, err)
		}
		e[0x20] = r.Attributes1
		e[0x24] = b2u(r.SanitizeOnRelease)
	}
	return dcTrailer{p.SupportedExtents, p.AvailableExtents, p.SupportedTags, p.AvailableTags}.append(b), nil
}

// UnmarshalBinary decodes the payload, which must hold exactly the
// returned regions and the trailer.
func (p *GetHostDCRegionConfigResp) UnmarshalBinary(b []byte) error {
	const what = "get host dc region config response"
	if err := checkMin(what, b, getHostDCRegionConfigHdrLen+dcTrailerLen); err != nil {
		return err
	}
	n := int(b[3])
	if err := checkList(what, b, getHostDCRegionConfigHdrLen+dcTrailerLen, uint64(n), RegionConfigLen); err != nil {
		return err
	}
	var regions []DCRegionConfig
	if n > 0 {
		regions = make([]DCRegionConfig, n)
	}
	for i := range regions {
		e := b[getHostDCRegionConfigHdrLen+RegionConfigLen*i:]
		c, err := parseRegionCommon(e)
		if err != nil {
			return fmt.Errorf("cci: %s: region %d: %w", what, i, err)
		}
		regions[i] = DCRegionConfig{
			Base: c.base, DecodeLength: c.decodeLength, Length: c.length, BlockSize: c.blockSize,
			Attributes1:       e[0x20],
			SanitizeOnRelease: e[0x24]&1 != 0,
		}
	}
	t := parseDCTrailer(b[getHostDCRegionConfigHdrLen+RegionConfigLen*n:])
	*p = GetHostDCRegionConfigResp{
		HostID:           binary.LittleEndian.Uint16(b),
		AvailableRegions: b[2],
		Regions:          regions,
		SupportedExtents: t.supportedExtents,
		AvailableExtents: t.availableExtents,
		SupportedTags:    t.supportedTags,
		AvailableTags:    t.availableTags,
	}
	return nil
}

// SetDCRegionConfigLen is the size of the Set DC Region Configuration
// (5602h) input and of its echoed output.
const SetDCRegionConfigLen = 0x10

// SetDCRegionConfigReq is the input of Set DC Region Configuration (5602h).
type SetDCRegionConfigReq struct {
	Region            uint8 // 0–7
	BlockSize         uint64
	SanitizeOnRelease bool
}

// Opcode returns OpSetDCRegionConfig.
func (SetDCRegionConfigReq) Opcode() Opcode { return OpSetDCRegionConfig }

// MarshalBinary encodes the payload.
func (p *SetDCRegionConfigReq) MarshalBinary() ([]byte, error) {
	b := make([]byte, SetDCRegionConfigLen)
	b[0x0] = p.Region
	binary.LittleEndian.PutUint64(b[0x4:], p.BlockSize)
	b[0xc] = b2u(p.SanitizeOnRelease)
	return b, nil
}

// UnmarshalBinary decodes the payload.
func (p *SetDCRegionConfigReq) UnmarshalBinary(b []byte) error {
	if err := checkMin("set dc region config request", b, SetDCRegionConfigLen); err != nil {
		return err
	}
	*p = SetDCRegionConfigReq{Region: b[0], BlockSize: binary.LittleEndian.Uint64(b[0x4:]), SanitizeOnRelease: b[0xc]&1 != 0}
	return nil
}

// SetDCRegionConfigResp is the output of Set DC Region Configuration
// (5602h). The specification titles the layout "Request and Response
// Payload", implying an echo, while libcxlmi and the QEMU fork use an empty
// response (cxl-wire.md §3.8), so the decoder accepts both: an empty
// payload gives Echoed = false, a 10h-byte one the echoed configuration.
type SetDCRegionConfigResp struct {
	Echoed bool
	Config SetDCRegionConfigReq // valid when Echoed
}

// MarshalBinary encodes the payload: empty unless Echoed.
func (p *SetDCRegionConfigResp) MarshalBinary() ([]byte, error) {
	if !p.Echoed {
		return []byte{}, nil
	}
	return p.Config.MarshalBinary()
}

// UnmarshalBinary decodes an empty or echoed payload.
func (p *SetDCRegionConfigResp) UnmarshalBinary(b []byte) error {
	if len(b) == 0 {
		*p = SetDCRegionConfigResp{}
		return nil
	}
	var c SetDCRegionConfigReq
	if err := c.UnmarshalBinary(b); err != nil {
		return err
	}
	*p = SetDCRegionConfigResp{Echoed: true, Config: c}
	return nil
}

// GetDCRegionExtentListsReqMinLen is the size of the Get DC Region Extent
// Lists (5603h) input.
const GetDCRegionExtentListsReqMinLen = 0x0c

// GetDCRegionExtentListsReq is the input of Get DC Region Extent Lists
// (5603h). Count 0 returns only the totals and the generation number.
type GetDCRegionExtentListsReq struct {
	HostID uint16
	Count  uint32
	Start  uint32
}

// Opcode returns OpGetDCRegionExtentLists.
func (GetDCRegionExtentListsReq) Opcode() Opcode { return OpGetDCRegionExtentLists }

// MarshalBinary encodes the payload.
func (p *GetDCRegionExtentListsReq) MarshalBinary() ([]byte, error) {
	b := make([]byte, GetDCRegionExtentListsReqMinLen)
	binary.LittleEndian.PutUint16(b[0x0:], p.HostID)
	binary.LittleEndian.PutUint32(b[0x4:], p.Count)
	binary.LittleEndian.PutUint32(b[0x8:], p.Start)
	return b, nil
}

// UnmarshalBinary decodes the payload.
func (p *GetDCRegionExtentListsReq) UnmarshalBinary(b []byte) error {
	if err := checkMin("get dc region extent lists request", b, GetDCRegionExtentListsReqMinLen); err != nil {
		return err
	}
	*p = GetDCRegionExtentListsReq{
		HostID: binary.LittleEndian.Uint16(b[0x0:]),
		Count:  binary.LittleEndian.Uint32(b[0x4:]),
		Start:  binary.LittleEndian.Uint32(b[0x8:]),
	}
	return nil
}

// getDCRegionExtentListsHdrLen is the fixed part of the 5603h output.
const getDCRegionExtentListsHdrLen = 0x18

// GetDCRegionExtentListsResp is the output of Get DC Region Extent Lists
// (5603h). The returned count is len(Extents).
type GetDCRegionExtentListsResp struct {
	HostID     uint16
	Start      uint32
	Total      uint32
	Generation uint32 // changes whenever the list changes
	Extents    []Extent
}

// MarshalBinary encodes the payload.
func (p *GetDCRegionExtentListsResp) MarshalBinary() ([]byte, error) {
	b := make([]byte, getDCRegionExtentListsHdrLen, getDCRegionExtentListsHdrLen+ExtentLen*len(p.Extents))
	binary.LittleEndian.PutUint16(b[0x00:], p.HostID)
	binary.LittleEndian.PutUint32(b[0x04:], p.Start)
	binary.LittleEndian.PutUint32(b[0x08:], uint32(len(p.Extents)))
	binary.LittleEndian.PutUint32(b[0x0c:], p.Total)
	binary.LittleEndian.PutUint32(b[0x10:], p.Generation)
	return appendExtents(b, p.Extents), nil
}

// UnmarshalBinary decodes the payload.
func (p *GetDCRegionExtentListsResp) UnmarshalBinary(b []byte) error {
	const what = "get dc region extent lists response"
	if err := checkMin(what, b, getDCRegionExtentListsHdrLen); err != nil {
		return err
	}
	n := uint64(binary.LittleEndian.Uint32(b[0x08:]))
	if err := checkList(what, b, getDCRegionExtentListsHdrLen, n, ExtentLen); err != nil {
		return err
	}
	*p = GetDCRegionExtentListsResp{
		HostID:     binary.LittleEndian.Uint16(b[0x00:]),
		Start:      binary.LittleEndian.Uint32(b[0x04:]),
		Total:      binary.LittleEndian.Uint32(b[0x0c:]),
		Generation: binary.LittleEndian.Uint32(b[0x10:]),
		Extents:    parseExtents(b[getDCRegionExtentListsHdrLen:], int(n)),
	}
	return nil
}

// Minimum lengths of the 5604h/5605h inputs. Without the Prescriptive
// policy the Extent Count at 1Ch is absent, so 1Ch bytes suffice (the QEMU
// fork insists on 20h; the FM always sends 20h). Prescriptive requests need
// the count and exactly that many 28h-byte extents after it.
const (
	InitiateDCAddMinLen          = 0x1c
	InitiateDCReleaseMinLen      = 0x1c
	InitiateDCPrescriptiveMinLen = 0x20
)

// dcRequest is the layout shared by 5604h and 5605h. Byte 02h and 03h are
// passed raw; the typed requests interpret them.
type dcRequest struct {
	hostID  uint16
	b2, b3  uint8
	length  uint64
	tag     Tag
	extents []Extent
}

// encode writes the full 20h-byte form: the count is always present (as
// libcxlmi and the QEMU fork expect) and is 0 without extents.
func (r dcRequest) encode() []byte {
	b := make([]byte, InitiateDCPrescriptiveMinLen, InitiateDCPrescriptiveMinLen+ExtentLen*len(r.extents))
	binary.LittleEndian.PutUint16(b[0x00:], r.hostID)
	b[0x02], b[0x03] = r.b2, r.b3
	binary.LittleEndian.PutUint64(b[0x04:], r.length)
	copy(b[0x0c:], r.tag[:])
	binary.LittleEndian.PutUint32(b[0x1c:], uint32(len(r.extents)))
	return appendExtents(b, r.extents)
}

// decodeDCRequest decodes a 5604h/5605h payload. For non-prescriptive
// policies the count and list are reserved and ignored, as is anything
// after 1Ch; prescriptive payloads must hold exactly the counted extents.
func decodeDCRequest(what string, b []byte, prescriptive func(b2 uint8) bool) (dcRequest, error) {
	if err := checkMin(what, b, InitiateDCAddMinLen); err != nil {
		return dcRequest{}, err
	}
	r := dcRequest{
		hostID: binary.LittleEndian.Uint16(b[0x00:]),
		b2:     b[0x02],
		b3:     b[0x03],
		length: binary.LittleEndian.Uint64(b[0x04:]),
	}
	copy(r.tag[:], b[0x0c:0x1c])
	if !prescriptive(r.b2) {
		return r, nil
	}
	if len(b) < InitiateDCPrescriptiveMinLen {
		return dcRequest{}, errShort(what+" (prescriptive)", InitiateDCPrescriptiveMinLen, len(b))
	}
	n := uint64(binary.LittleEndian.Uint32(b[0x1c:]))
	if err := checkList(what, b, InitiateDCPrescriptiveMinLen, n, ExtentLen); err != nil {
		return dcRequest{}, err
	}
	r.extents = parseExtents(b[InitiateDCPrescriptiveMinLen:], int(n))
	return r, nil
}

// InitiateDCAddReq is the input of Initiate Dynamic Capacity Add (5604h).
// Region, Length and Tag are reserved for AddPolicyPrescriptive; Extents
// are carried only with AddPolicyPrescriptive.
type InitiateDCAddReq struct {
	HostID  uint16
	Policy  uint8 // AddPolicy* (bits 3:0)
	Region  uint8
	Length  uint64 // bytes
	Tag     Tag
	Extents []Extent
}

// Opcode returns OpInitiateDCAdd.
func (InitiateDCAddReq) Opcode() Opcode { return OpInitiateDCAdd }

// MarshalBinary encodes the payload, always 20h bytes or more.
func (p *InitiateDCAddReq) MarshalBinary() ([]byte, error) {
	if p.Policy > 0x0f {
		return nil, fmt.Errorf("cci: initiate dc add: policy %#x does not fit 4 bits", p.Policy)
	}
	if p.Policy != AddPolicyPrescriptive && len(p.Extents) > 0 {
		return nil, fmt.Errorf("cci: initiate dc add: %d extents with non-prescriptive policy %d", len(p.Extents), p.Policy)
	}
	return dcRequest{p.HostID, p.Policy, p.Region, p.Length, p.Tag, p.Extents}.encode(), nil
}

// UnmarshalBinary decodes the payload: at least InitiateDCAddMinLen bytes,
// and for the prescriptive policy the count and exactly that many extents.
func (p *InitiateDCAddReq) UnmarshalBinary(b []byte) error {
	r, err := decodeDCRequest("initiate dc add request", b, func(b2 uint8) bool { return b2&0x0f == AddPolicyPrescriptive })
	if err != nil {
		return err
	}
	*p = InitiateDCAddReq{HostID: r.hostID, Policy: r.b2 & 0x0f, Region: r.b3, Length: r.length, Tag: r.tag, Extents: r.extents}
	return nil
}

// Release flags in 5605h byte 02h.
const (
	releaseForced   = 1 << 4
	releaseSanitize = 1 << 5
)

// InitiateDCReleaseReq is the input of Initiate Dynamic Capacity Release
// (5605h). Length and Tag are reserved for ReleasePolicyPrescriptive;
// Extents are carried only with ReleasePolicyPrescriptive.
type InitiateDCReleaseReq struct {
	HostID   uint16
	Policy   uint8 // ReleasePolicy* (bits 3:0)
	Forced   bool  // do not wait for the host
	Sanitize bool  // sanitize the released capacity
	Length   uint64
	Tag      Tag
	Extents  []Extent
}

// Opcode returns OpInitiateDCRelease.
func (InitiateDCReleaseReq) Opcode() Opcode { return OpInitiateDCRelease }

// MarshalBinary encodes the payload, always 20h bytes or more.
func (p *InitiateDCReleaseReq) MarshalBinary() ([]byte, error) {
	if p.Policy > 0x0f {
		return nil, fmt.Errorf("cci: initiate dc release: policy %#x does not fit 4 bits", p.Policy)
	}
	if p.Policy != ReleasePolicyPrescriptive && len(p.Extents) > 0 {
		return nil, fmt.Errorf("cci: initiate dc release: %d extents with non-prescriptive policy %d", len(p.Extents), p.Policy)
	}
	b2 := p.Policy
	if p.Forced {
		b2 |= releaseForced
	}
	if p.Sanitize {
		b2 |= releaseSanitize
	}
	return dcRequest{p.HostID, b2, 0, p.Length, p.Tag, p.Extents}.encode(), nil
}

// UnmarshalBinary decodes the payload: at least InitiateDCReleaseMinLen
// bytes, and for the prescriptive policy the count and exactly that many
// extents.
func (p *InitiateDCReleaseReq) UnmarshalBinary(b []byte) error {
	r, err := decodeDCRequest("initiate dc release request", b, func(b2 uint8) bool { return b2&0x0f == ReleasePolicyPrescriptive })
	if err != nil {
		return err
	}
	*p = InitiateDCReleaseReq{
		HostID:   r.hostID,
		Policy:   r.b2 & 0x0f,
		Forced:   r.b2&releaseForced != 0,
		Sanitize: r.b2&releaseSanitize != 0,
		Length:   r.length,
		Tag:      r.tag,
		Extents:  r.extents,
	}
	return nil
}

// DCReferenceReqMinLen is the size of the 5606h and 5607h inputs.
const DCReferenceReqMinLen = 0x10

// decodeTag reads the 16-byte tag that is the whole 5606h/5607h input.
func decodeTag(what string, b []byte) (Tag, error) {
	var t Tag
	if err := checkMin(what, b, DCReferenceReqMinLen); err != nil {
		return t, err
	}
	copy(t[:], b)
	return t, nil
}

// DCAddReferenceReq is the input of Dynamic Capacity Add Reference (5606h).
type DCAddReferenceReq struct {
	Tag Tag
}

// Opcode returns OpDCAddReference.
func (DCAddReferenceReq) Opcode() Opcode { return OpDCAddReference }

// MarshalBinary encodes the payload.
func (p *DCAddReferenceReq) MarshalBinary() ([]byte, error) {
	return append([]byte(nil), p.Tag[:]...), nil
}

// UnmarshalBinary decodes the payload.
func (p *DCAddReferenceReq) UnmarshalBinary(b []byte) error {
	t, err := decodeTag("dc add reference request", b)
	if err != nil {
		return err
	}
	*p = DCAddReferenceReq{Tag: t}
	return nil
}

// DCRemoveReferenceReq is the input of Dynamic Capacity Remove Reference
// (5607h).
type DCRemoveReferenceReq struct {
	Tag Tag
}

// Opcode returns OpDCRemoveReference.
func (DCRemoveReferenceReq) Opcode() Opcode { return OpDCRemoveReference }

// MarshalBinary encodes the payload.
func (p *DCRemoveReferenceReq) MarshalBinary() ([]byte, error) {
	return append([]byte(nil), p.Tag[:]...), nil
}

// UnmarshalBinary decodes the payload.
func (p *DCRemoveReferenceReq) UnmarshalBinary(b []byte) error {
	t, err := decodeTag("dc remove reference request", b)
	if err != nil {
		return err
	}
	*p = DCRemoveReferenceReq{Tag: t}
	return nil
}

// ListTagsReqMinLen is the size of the Dynamic Capacity List Tags (5608h)
// input.
const ListTagsReqMinLen = 8

// ListTagsReq is the input of Dynamic Capacity List Tags (5608h). Max 0
// returns only the generation number.
type ListTagsReq struct {
	Start uint32
	Max   uint32
}

// Opcode returns OpDCListTags.
func (ListTagsReq) Opcode() Opcode { return OpDCListTags }

// MarshalBinary encodes the payload.
func (p *ListTagsReq) MarshalBinary() ([]byte, error) {
	b := make([]byte, ListTagsReqMinLen)
	binary.LittleEndian.PutUint32(b[0:], p.Start)
	binary.LittleEndian.PutUint32(b[4:], p.Max)
	return b, nil
}

// UnmarshalBinary decodes the payload.
func (p *ListTagsReq) UnmarshalBinary(b []byte) error {
	if err := checkMin("list tags request", b, ListTagsReqMinLen); err != nil {
		return err
	}
	*p = ListTagsReq{Start: binary.LittleEndian.Uint32(b[0:]), Max: binary.LittleEndian.Uint32(b[4:])}
	return nil
}

// ListTagsResp Validity bits.
const (
	TagsReferenceValid uint8 = 1 << 0 // Accepted bitmaps are valid
	TagsPendingValid   uint8 = 1 << 1 // Pending bitmaps are valid
)

// TagEntryLen is the size of one 5608h entry.
const TagEntryLen = 0x54

// TagEntry is one tag of the 5608h output. Bit n of the bitmaps (bit n%8
// of byte n/8) stands for LD n.
type TagEntry struct {
	Tag         Tag
	FMReference bool     // the FM holds a 5606h reference
	Accepted    [32]byte // LDs that accepted the tagged capacity
	Pending     [32]byte // LDs offered it that have not answered yet
}

// listTagsHdrLen is the fixed part of the 5608h output.
const listTagsHdrLen = 0x10

// ListTagsResp is the output of Dynamic Capacity List Tags (5608h). The
// number returned is len(Tags).
type ListTagsResp struct {
	Generation uint32
	Total      uint32
	Validity   uint8 // Tags*Valid bits
	Tags       []TagEntry
}

// MarshalBinary encodes the payload.
func (p *ListTagsResp) MarshalBinary() ([]byte, error) {
	b := make([]byte, listTagsHdrLen, listTagsHdrLen+TagEntryLen*len(p.Tags))
	binary.LittleEndian.PutUint32(b[0x0:], p.Generation)
	binary.LittleEndian.PutUint32(b[0x4:], p.Total)
	binary.LittleEndian.PutUint32(b[0x8:], uint32(len(p.Tags)))
	b[0xc] = p.Validity
	for _, t := range p.Tags {
		b = append(b, t.Tag[:]...)
		b = append(b, b2u(t.FMReference), 0, 0, 0)
		b = append(b, t.Accepted[:]...)
		b = append(b, t.Pending[:]...)
	}
	return b, nil
}

// UnmarshalBinary decodes the payload.
func (p *ListTagsResp) UnmarshalBinary(b []byte) error {
	const what = "list tags response"
	if err := checkMin(what, b, listTagsHdrLen); err != nil {
		return err
	}
	n := uint64(binary.LittleEndian.Uint32(b[0x8:]))
	if err := checkList(what, b, listTagsHdrLen, n, TagEntryLen); err != nil {
		return err
	}
	*p = ListTagsResp{
		Generation: binary.LittleEndian.Uint32(b[0x0:]),
		Total:      binary.LittleEndian.Uint32(b[0x4:]),
		Validity:   b[0xc],
	}
	if n > 0 {
		p.Tags = make([]TagEntry, n)
		for i := range p.Tags {
			e := b[listTagsHdrLen+TagEntryLen*i:]
			t := &p.Tags[i]
			copy(t.Tag[:], e[0x00:0x10])
			t.FMReference = e[0x10]&1 != 0
			copy(t.Accepted[:], e[0x14:0x34])
			copy(t.Pending[:], e[0x34:0x54])
		}
	}
	return nil
}
