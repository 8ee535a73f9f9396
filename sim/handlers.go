package sim

import (
	"bytes"
	"encoding"
	"encoding/binary"
	"errors"
	"slices"

	"cxlpool/fabric/cci"
	"cxlpool/fabric/mctp"
)

// handler executes one command with b.mu held. src is the requester's EID
// and c its link (nil for a host mailbox). It returns the response payload
// or an error that rcOf maps to a return code.
type handler func(b *Box, c *conn, src mctp.EID, p []byte) ([]byte, error)

// fmHandler returns the handler of an opcode served on the MCTP CCI, or nil.
func fmHandler(op cci.Opcode) handler {
	switch op {
	case cci.OpIdentify:
		return (*Box).identify
	case cci.OpBackgroundOperationStatus:
		return (*Box).bgStatus
	case cci.OpGetResponseMessageLimit:
		return (*Box).getResponseLimit
	case cci.OpSetResponseMessageLimit:
		return (*Box).setResponseLimit
	case cci.OpGetEventRecords:
		return (*Box).getFMEventRecords
	case cci.OpClearEventRecords:
		return (*Box).clearFMEventRecords
	case cci.OpGetMCTPEventInterruptPolicy:
		return (*Box).getEventPolicy
	case cci.OpSetMCTPEventInterruptPolicy:
		return (*Box).setEventPolicy
	case cci.OpGetSupportedLogs:
		return (*Box).getSupportedLogs
	case cci.OpGetLog:
		return (*Box).getLog
	case cci.OpIdentifyMemoryDevice:
		return (*Box).identifyMemoryDevice
	case cci.OpGetLDInfo:
		return (*Box).getLDInfo
	case cci.OpGetLDAllocations:
		return (*Box).getLDAllocations
	case cci.OpGetMultiHeadedInfo:
		return (*Box).getMultiHeadedInfo
	case cci.OpGetHeadInfo:
		return (*Box).getHeadInfo
	case cci.OpGetDCDInfo:
		return (*Box).getDCDInfo
	case cci.OpGetHostDCRegionConfig:
		return (*Box).getHostDCRegionConfig
	case cci.OpSetDCRegionConfig:
		return (*Box).setDCRegionConfig
	case cci.OpGetDCRegionExtentLists:
		return (*Box).getDCRegionExtentLists
	case cci.OpInitiateDCAdd:
		return (*Box).initiateDCAdd
	case cci.OpInitiateDCRelease:
		return (*Box).initiateDCRelease
	case cci.OpDCAddReference:
		return (*Box).dcAddReference
	case cci.OpDCRemoveReference:
		return (*Box).dcRemoveReference
	case cci.OpDCListTags:
		return (*Box).dcListTags
	}
	return nil
}

// celEntries is the Command Effects Log: every opcode fmHandler serves.
func celEntries() []cci.CELEntry {
	const dcChange = cci.EffectConfigChangeColdReset | cci.EffectConfigChangeImmediate |
		cci.EffectDataChangeImmediate | cci.EffectExtendedValid |
		cci.EffectConfigChangeConvReset | cci.EffectConfigChangeCXLReset
	return []cci.CELEntry{
		{Opcode: cci.OpIdentify},
		{Opcode: cci.OpBackgroundOperationStatus},
		{Opcode: cci.OpGetResponseMessageLimit},
		{Opcode: cci.OpSetResponseMessageLimit, Effects: cci.EffectConfigChangeImmediate},
		{Opcode: cci.OpGetEventRecords},
		{Opcode: cci.OpClearEventRecords, Effects: cci.EffectLogChangeImmediate},
		{Opcode: cci.OpGetMCTPEventInterruptPolicy},
		{Opcode: cci.OpSetMCTPEventInterruptPolicy, Effects: cci.EffectConfigChangeImmediate},
		{Opcode: cci.OpGetSupportedLogs},
		{Opcode: cci.OpGetLog},
		{Opcode: cci.OpIdentifyMemoryDevice},
		{Opcode: cci.OpGetLDInfo},
		{Opcode: cci.OpGetLDAllocations},
		{Opcode: cci.OpGetMultiHeadedInfo},
		{Opcode: cci.OpGetHeadInfo},
		{Opcode: cci.OpGetDCDInfo},
		{Opcode: cci.OpGetHostDCRegionConfig},
		{Opcode: cci.OpSetDCRegionConfig, Effects: dcChange},
		{Opcode: cci.OpGetDCRegionExtentLists},
		{Opcode: cci.OpInitiateDCAdd, Effects: dcChange},
		{Opcode: cci.OpInitiateDCRelease, Effects: dcChange},
		{Opcode: cci.OpDCAddReference, Effects: cci.EffectConfigChangeImmediate},
		{Opcode: cci.OpDCRemoveReference, Effects: cci.EffectConfigChangeImmediate | cci.EffectDataChangeImmediate},
		{Opcode: cci.OpDCListTags},
	}
}

// rcOf maps a handler error to a return code.
func rcOf(err error) cci.ReturnCode {
	var rc cci.ReturnCode
	switch {
	case err == nil:
		return cci.Success
	case errors.As(err, &rc):
		return rc
	case errors.Is(err, cci.ErrPayloadLength):
		return cci.InvalidPayloadLength
	}
	return cci.InternalError
}

func marshal(m encoding.BinaryMarshaler) ([]byte, error) { return m.MarshalBinary() }

// respLimit is the current response payload limit in bytes.
func (b *Box) respLimit() int { return 1 << b.respExp }

// fit returns how many entries of size entry fit after hdr bytes.
func fit(limit, hdr, entry int) int { return max(0, (limit-hdr)/entry) }

func (b *Box) identify(_ *conn, _ mctp.EID, _ []byte) ([]byte, error) {
	return marshal(&cci.IdentifyResp{
		VendorID:          b.cfg.VendorID,
		DeviceID:          b.cfg.DeviceID,
		SubsystemVendorID: b.cfg.SubsystemVendorID,
		SubsystemID:       b.cfg.SubsystemID,
		Serial:            b.cfg.Serial,
		MaxMessageSizeExp: b.cfg.MaxPayloadExp,
		ComponentType:     cci.ComponentType3,
	})
}

// bgStatus reports no background operation: the box runs none.
func (b *Box) bgStatus(_ *conn, _ mctp.EID, _ []byte) ([]byte, error) {
	return marshal(&cci.BGStatusResp{})
}

func (b *Box) getResponseLimit(_ *conn, _ mctp.EID, _ []byte) ([]byte, error) {
	return marshal(&cci.ResponseMessageLimit{Exp: b.respExp})
}

func (b *Box) setResponseLimit(_ *conn, _ mctp.EID, p []byte) ([]byte, error) {
	var q cci.ResponseMessageLimit
	if err := q.UnmarshalBinary(p); err != nil {
		return nil, err
	}
	if q.Exp < 8 || q.Exp > 10 {
		return nil, cci.InvalidInput
	}
	b.respExp = q.Exp
	return marshal(&q)
}

func getEvents(l *eventLog, limit int) ([]byte, error) {
	resp, _ := l.get(fit(limit, 0x20, cci.EventRecordLen))
	return marshal(&resp)
}

func (b *Box) getFMEventRecords(_ *conn, _ mctp.EID, p []byte) ([]byte, error) {
	var q cci.GetEventRecordsReq
	if err := q.UnmarshalBinary(p); err != nil {
		return nil, err
	}
	if int(q.Log) >= len(b.fmLogs) {
		return nil, cci.InvalidInput
	}
	l := b.fmLogs[q.Log]
	l.armed = true // reading re-arms the empty→non-empty notification
	return getEvents(l, b.respLimit())
}

func clearEvents(logs [5]*eventLog, p []byte) ([]byte, error) {
	var q cci.ClearEventRecordsReq
	if err := q.UnmarshalBinary(p); err != nil {
		return nil, err
	}
	if int(q.Log) >= len(logs) {
		return nil, cci.InvalidInput
	}
	return nil, logs[q.Log].clear(q.ClearAll, q.Handles)
}

func (b *Box) clearFMEventRecords(_ *conn, _ mctp.EID, p []byte) ([]byte, error) {
	return clearEvents(b.fmLogs, p)
}

// policyMask holds the defined event interrupt policy bits.
const policyMask = cci.PolicyInfo | cci.PolicyWarning | cci.PolicyFailure | cci.PolicyFatal | cci.PolicyDC | cci.PolicyBGDone

func (b *Box) getEventPolicy(_ *conn, _ mctp.EID, _ []byte) ([]byte, error) {
	return marshal(&cci.EventInterruptPolicy{Mask: b.policy})
}

// setEventPolicy records the requester as the notification target.
func (b *Box) setEventPolicy(c *conn, src mctp.EID, p []byte) ([]byte, error) {
	var q cci.EventInterruptPolicy
	if err := q.UnmarshalBinary(p); err != nil {
		return nil, err
	}
	b.policy = q.Mask & policyMask
	if c != nil && b.policy != 0 {
		b.notifyTo = &notifyTarget{c: c, eid: src}
	} else {
		b.notifyTo = nil
	}
	for _, l := range b.fmLogs {
		l.armed = true
	}
	return marshal(&cci.EventInterruptPolicy{Mask: b.policy})
}

func (b *Box) getSupportedLogs(_ *conn, _ mctp.EID, _ []byte) ([]byte, error) {
	cel := cci.MarshalCEL(celEntries())
	return marshal(&cci.GetSupportedLogsResp{Entries: []cci.LogEntry{{UUID: cci.CELUUID, Size: uint32(len(cel))}}})
}

func (b *Box) getLog(_ *conn, _ mctp.EID, p []byte) ([]byte, error) {
	var q cci.GetLogReq
	if err := q.UnmarshalBinary(p); err != nil {
		return nil, err
	}
	if q.UUID != cci.CELUUID {
		return nil, cci.InvalidLog
	}
	cel := cci.MarshalCEL(celEntries())
	if uint64(q.Offset)+uint64(q.Length) > uint64(len(cel)) || int(q.Length) > b.respLimit() {
		return nil, cci.InvalidInput
	}
	return slices.Clone(cel[q.Offset : q.Offset+q.Length]), nil
}

func (b *Box) identifyMemoryDevice(_ *conn, _ mctp.EID, _ []byte) ([]byte, error) {
	n := uint16(b.cfg.EventLogSize)
	return marshal(&cci.IdentifyMemoryDeviceResp{
		FWRevision:     b.cfg.FirmwareRevision,
		TotalCapacity:  b.cfg.Capacity / cci.CapacityUnit,
		InfoLogSize:    n,
		WarnLogSize:    n,
		FailLogSize:    n,
		FatalLogSize:   n,
		DCEventLogSize: n,
	})
}

func (b *Box) getLDInfo(_ *conn, _ mctp.EID, _ []byte) ([]byte, error) {
	return marshal(&cci.GetLDInfoResp{MemorySize: b.cfg.Capacity, LDCount: uint16(len(b.lds))})
}

// granted is the capacity LD l holds, in bytes.
func (l *ld) granted() uint64 {
	var n uint64
	for _, h := range l.held {
		n += h.Length
	}
	return n
}

func (b *Box) getLDAllocations(_ *conn, _ mctp.EID, p []byte) ([]byte, error) {
	var q cci.GetLDAllocationsReq
	if err := q.UnmarshalBinary(p); err != nil {
		return nil, err
	}
	if int(q.StartLD) >= len(b.lds) || q.Limit == 0 {
		return nil, cci.InvalidInput
	}
	n := min(int(q.Limit), len(b.lds)-int(q.StartLD), fit(b.respLimit(), 4, cci.LDAllocationLen))
	resp := cci.GetLDAllocationsResp{NumLDs: uint8(len(b.lds)), Granularity: cci.Granularity256MB, StartLD: q.StartLD}
	for _, l := range b.lds[q.StartLD : int(q.StartLD)+n] {
		resp.Entries = append(resp.Entries, cci.LDAllocation{Range1: (l.granted() + cci.CapacityUnit - 1) / cci.CapacityUnit})
	}
	return marshal(&resp)
}

func (b *Box) getMultiHeadedInfo(_ *conn, _ mctp.EID, p []byte) ([]byte, error) {
	var q cci.GetMultiHeadedInfoReq
	if err := q.UnmarshalBinary(p); err != nil {
		return nil, err
	}
	if int(q.StartLD) >= len(b.lds) || q.Limit == 0 {
		return nil, cci.InvalidInput
	}
	n := min(int(q.Limit), len(b.lds)-int(q.StartLD), b.respLimit()-8)
	resp := cci.GetMultiHeadedInfoResp{NumLDs: uint8(len(b.lds)), NumHeads: uint8(len(b.lds)), StartLD: q.StartLD}
	for i := range n {
		resp.LDMap = append(resp.LDMap, q.StartLD+uint8(i)) // LD i is owned by the head on port i
	}
	return marshal(&resp)
}

// Head link parameters: x16, PCIe speeds 1–5 (Gen5), as a healthy head.
const (
	headWidth  = 16
	headSpeeds = 0x1f
	headSpeed  = 5
)

func (b *Box) getHeadInfo(_ *conn, _ mctp.EID, p []byte) ([]byte, error) {
	var q cci.GetHeadInfoReq
	if err := q.UnmarshalBinary(p); err != nil {
		return nil, err
	}
	if q.Count == 0 || int(q.StartHead)+int(q.Count) > len(b.lds) {
		return nil, cci.InvalidInput
	}
	n := min(int(q.Count), fit(b.respLimit(), 4, cci.HeadInfoLen))
	var resp cci.GetHeadInfoResp
	for _, l := range b.lds[q.StartHead : int(q.StartHead)+n] {
		h := cci.HeadInfo{Port: uint8(l.id), MaxWidth: headWidth, SpeedsVector: headSpeeds, MaxSpeed: headSpeed, LTSSM: cci.LTSSMDetect}
		if l.linkUp {
			h.NegotiatedWidth, h.CurrentSpeed, h.LTSSM = headWidth, headSpeed, cci.LTSSML0
		}
		resp.Heads = append(resp.Heads, h)
	}
	return marshal(&resp)
}

func (b *Box) getDCDInfo(_ *conn, _ mctp.EID, _ []byte) ([]byte, error) {
	resp := cci.GetDCDInfoResp{
		NumHosts:        uint8(len(b.lds)),
		NumRegions:      uint8(len(b.regions)),
		AddPolicies:     1<<cci.AddPolicyFree | 1<<cci.AddPolicyContiguous | 1<<cci.AddPolicyPrescriptive,
		ReleasePolicies: 1<<cci.ReleasePolicyTagBased | 1<<cci.ReleasePolicyPrescriptive,
		TotalCapacity:   b.cfg.Capacity / cci.CapacityUnit,
	}
	for _, r := range b.regions {
		if r.sorConfigurable {
			resp.SoRConfigurable |= 1 << r.index
		}
		resp.BlockSizeMasks = append(resp.BlockSizeMasks, r.blockMask())
	}
	return marshal(&resp)
}

// decodeLength is a region's decode length: its length rounded up to 256 MB.
func (r *region) decodeLength() uint64 {
	return (r.length + cci.CapacityUnit - 1) / cci.CapacityUnit * cci.CapacityUnit
}

func (b *Box) getHostDCRegionConfig(_ *conn, _ mctp.EID, p []byte) ([]byte, error) {
	var q cci.GetHostDCRegionConfigReq
	if err := q.UnmarshalBinary(p); err != nil {
		return nil, err
	}
	if int(q.HostID) >= len(b.lds) || int(q.StartRegion) >= len(b.regions) {
		return nil, cci.InvalidInput
	}
	l := b.lds[q.HostID]
	n := min(int(q.RegionCount), len(b.regions)-int(q.StartRegion), fit(b.respLimit(), 4+0x10, cci.RegionConfigLen))
	resp := cci.GetHostDCRegionConfigResp{
		HostID:           q.HostID,
		AvailableRegions: uint8(len(b.regions)),
		SupportedExtents: uint32(b.cfg.MaxExtentsPerLD),
		AvailableExtents: b.availExtents(l),
		SupportedTags:    uint32(b.cfg.MaxTagsPerLD),
		AvailableTags:    b.availTags(l),
	}
	for _, r := range b.regions[q.StartRegion : int(q.StartRegion)+n] {
		c := cci.DCRegionConfig{Base: r.base, DecodeLength: r.decodeLength(), Length: r.length, BlockSize: r.blockSize, SanitizeOnRelease: r.sor}
		if r.sharable {
			c.Attributes1 |= cci.AttrSharable
		}
		resp.Regions = append(resp.Regions, c)
	}
	return marshal(&resp)
}

func (b *Box) setDCRegionConfig(_ *conn, _ mctp.EID, p []byte) ([]byte, error) {
	var q cci.SetDCRegionConfigReq
	if err := q.UnmarshalBinary(p); err != nil {
		return nil, err
	}
	if int(q.Region) >= len(b.regions) {
		return nil, cci.InvalidInput
	}
	r := b.regions[q.Region]
	if !r.supportsBlockSize(q.BlockSize) {
		return nil, cci.InvalidInput
	}
	if q.SanitizeOnRelease != r.sor && !r.sorConfigurable {
		return nil, cci.Unsupported
	}
	if r.nused > 0 {
		return nil, cci.Unsupported // capacity still allocated on some LD
	}
	if q.BlockSize != r.blockSize {
		r.setBlockSize(q.BlockSize)
	}
	r.sor = q.SanitizeOnRelease
	for _, l := range b.lds {
		ev := cci.DCEvent{Type: cci.DCEventRegionUpdated, RegionIndex: q.Region}
		l.logs[cci.EventLogDC].add(ev.Record(0, 0), b.now())
		b.hosts[l.id].wake()
	}
	return []byte{}, nil
}

func (b *Box) getDCRegionExtentLists(_ *conn, _ mctp.EID, p []byte) ([]byte, error) {
	var q cci.GetDCRegionExtentListsReq
	if err := q.UnmarshalBinary(p); err != nil {
		return nil, err
	}
	if int(q.HostID) >= len(b.lds) {
		return nil, cci.InvalidInput
	}
	l := b.lds[q.HostID]
	total := len(l.held)
	if uint64(q.Start) > uint64(total) {
		return nil, cci.InvalidInput
	}
	n := min(int(min(q.Count, uint32(total))), total-int(q.Start), fit(b.respLimit(), 0x18, cci.ExtentLen))
	resp := cci.GetDCRegionExtentListsResp{HostID: q.HostID, Start: q.Start, Total: uint32(total), Generation: l.gen}
	for _, h := range l.held[q.Start : int(q.Start)+n] {
		resp.Extents = append(resp.Extents, h.Extent)
	}
	return marshal(&resp)
}

// prescriptiveCountOK reports whether a 5604h/5605h prescriptive payload
// holds exactly the extents its count announces. A bad count is an Invalid
// Extent List (cxl-wire.md §3.8), not a payload length error.
func prescriptiveCountOK(p []byte) bool {
	if len(p) < cci.InitiateDCPrescriptiveMinLen {
		return true // too short for a count: the decoder reports the length
	}
	n := uint64(binary.LittleEndian.Uint32(p[0x1c:]))
	return uint64(len(p)) == cci.InitiateDCPrescriptiveMinLen+n*cci.ExtentLen
}

func (b *Box) initiateDCAdd(_ *conn, _ mctp.EID, p []byte) ([]byte, error) {
	if p[2]&0x0f == cci.AddPolicyPrescriptive && !prescriptiveCountOK(p) {
		return nil, cci.InvalidExtentList
	}
	var q cci.InitiateDCAddReq
	if err := q.UnmarshalBinary(p); err != nil {
		return nil, err
	}
	return nil, b.initiateAdd(addReq{host: q.HostID, policy: q.Policy, region: q.Region, length: q.Length, tag: q.Tag, extents: q.Extents})
}

func (b *Box) initiateDCRelease(_ *conn, _ mctp.EID, p []byte) ([]byte, error) {
	if p[2]&0x0f == cci.ReleasePolicyPrescriptive && !prescriptiveCountOK(p) {
		return nil, cci.InvalidExtentList
	}
	var q cci.InitiateDCReleaseReq
	if err := q.UnmarshalBinary(p); err != nil {
		return nil, err
	}
	return nil, b.initiateRelease(releaseReq{host: q.HostID, policy: q.Policy, forced: q.Forced, sanitize: q.Sanitize,
		length: q.Length, tag: q.Tag, extents: q.Extents})
}

// sharableTag returns the live sharable allocation of tag.
func (b *Box) sharableTag(tag cci.Tag) (*allocation, error) {
	a := b.tags[tag]
	if tag.IsZero() || a == nil || !a.sharable {
		return nil, cci.InvalidInput
	}
	return a, nil
}

func (b *Box) dcAddReference(_ *conn, _ mctp.EID, p []byte) ([]byte, error) {
	var q cci.DCAddReferenceReq
	if err := q.UnmarshalBinary(p); err != nil {
		return nil, err
	}
	a, err := b.sharableTag(q.Tag)
	if err != nil {
		return nil, err
	}
	if !a.fmRef {
		a.fmRef = true
		b.tagGen++
	}
	return nil, nil
}

func (b *Box) dcRemoveReference(_ *conn, _ mctp.EID, p []byte) ([]byte, error) {
	var q cci.DCRemoveReferenceReq
	if err := q.UnmarshalBinary(p); err != nil {
		return nil, err
	}
	a, err := b.sharableTag(q.Tag)
	if err != nil {
		return nil, err
	}
	if a.fmRef {
		a.fmRef = false
		b.tagGen++
		b.retire(a)
	}
	return nil, nil
}

// tagEntries lists every live tag in byte order with its LD bitmaps.
func (b *Box) tagEntries() []cci.TagEntry {
	var out []cci.TagEntry
	for t, a := range b.tags {
		e := cci.TagEntry{Tag: t, FMReference: a.fmRef}
		for _, l := range b.lds {
			acc, pend := l.holds(a)
			if acc {
				e.Accepted[l.id/8] |= 1 << (l.id % 8)
			}
			if pend {
				e.Pending[l.id/8] |= 1 << (l.id % 8)
			}
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(x, y cci.TagEntry) int { return bytes.Compare(x.Tag[:], y.Tag[:]) })
	return out
}

func (b *Box) dcListTags(_ *conn, _ mctp.EID, p []byte) ([]byte, error) {
	var q cci.ListTagsReq
	if err := q.UnmarshalBinary(p); err != nil {
		return nil, err
	}
	all := b.tagEntries()
	if uint64(q.Start) > uint64(len(all)) {
		return nil, cci.InvalidInput
	}
	n := min(int(min(q.Max, uint32(len(all)))), len(all)-int(q.Start), fit(b.respLimit(), 0x10, cci.TagEntryLen))
	resp := cci.ListTagsResp{
		Generation: b.tagGen,
		Total:      uint32(len(all)),
		Validity:   cci.TagsReferenceValid | cci.TagsPendingValid,
		Tags:       all[q.Start : int(q.Start)+n],
	}
	return marshal(&resp)
}
