package sim

import (
	"cxlpool/fabric/cci"
	"cxlpool/fabric/mctp"
)

// response encodes the reply to request m.
func response(m cci.Message, rc cci.ReturnCode, payload []byte) []byte {
	if rc != cci.Success {
		payload = nil
	}
	out, err := cci.Message{Category: cci.Response, Tag: m.Tag, Opcode: m.Opcode, ReturnCode: rc, Payload: payload}.MarshalBinary()
	if err != nil {
		// Only an impossible >2 MiB payload fails to encode.
		out, _ = cci.Message{Category: cci.Response, Tag: m.Tag, Opcode: m.Opcode, ReturnCode: cci.InternalError}.MarshalBinary()
	}
	return out
}

// checkLength applies the payload length rules shared by every CCI: the
// advertised maximum, then the command's own bounds.
func checkLength(op cci.Opcode, n, limit int) error {
	if n > limit {
		return cci.InvalidPayloadLength
	}
	lo, hi, ok := cci.RequestLength(op)
	if !ok || n < lo || (hi >= 0 && n > hi) {
		return cci.InvalidPayloadLength
	}
	return nil
}

// execMCTP runs a request that arrived on the MCTP CCI (the FM's LD Pool
// CCI) and returns the response payload and return code.
func (b *Box) execMCTP(c *conn, src mctp.EID, typ mctp.MsgType, m cci.Message) ([]byte, cci.ReturnCode) {
	b.mu.Lock()
	booting := b.bootLeft > 0
	if booting {
		b.bootLeft--
	}
	b.mu.Unlock()
	switch {
	case booting, b.faults.take(&b.faults.retry):
		return nil, cci.RetryRequired
	case b.faults.take(&b.faults.busy):
		return nil, cci.Busy
	}
	h := fmHandler(m.Opcode)
	if h == nil || uint8(typ) != m.Opcode.MCTPType() {
		return nil, cci.Unsupported
	}
	if err := checkLength(m.Opcode, len(m.Payload), 1<<b.cfg.MaxPayloadExp); err != nil {
		return nil, rcOf(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out, err := h(b, c, src, m.Payload)
	if err == nil && len(out) > b.respLimit() {
		return nil, cci.InternalError // a handler did not page its output
	}
	return out, rcOf(err)
}

// hostExec runs one request from host ld's mailbox and returns the encoded
// response. Hosts use it with encoded messages so the same codecs the FM
// side uses carry the 48xxh commands.
func (b *Box) hostExec(ldi int, raw []byte) []byte {
	m, err := cci.ParseMessage(raw)
	if err != nil {
		return response(m, cci.InvalidPayloadLength, nil)
	}
	if m.Category != cci.Request {
		return response(m, cci.InvalidInput, nil)
	}
	if err := checkLength(m.Opcode, len(m.Payload), hostMailboxPayload); err != nil {
		if _, _, known := cci.RequestLength(m.Opcode); !known {
			return response(m, cci.Unsupported, nil)
		}
		return response(m, rcOf(err), nil)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.lds[ldi]
	var out []byte
	switch m.Opcode {
	case cci.OpIdentify:
		out, err = b.identify(nil, 0, m.Payload)
	case cci.OpGetEventRecords:
		var q cci.GetEventRecordsReq
		if err = q.UnmarshalBinary(m.Payload); err == nil {
			if int(q.Log) >= len(l.logs) {
				err = cci.InvalidInput
			} else {
				out, err = getEvents(l.logs[q.Log], hostMailboxPayload)
			}
		}
	case cci.OpClearEventRecords:
		out, err = clearEvents(l.logs, m.Payload)
	case cci.OpGetDCConfig:
		out, err = b.getDCConfig(l, m.Payload)
	case cci.OpGetDCExtentList:
		out, err = b.getDCExtentList(l, m.Payload)
	case cci.OpAddDCResponse:
		var q cci.AddDCResponseReq
		if err = q.UnmarshalBinary(m.Payload); err == nil {
			err = b.addResponse(l, q.More, ranges(q.Extents))
		}
	case cci.OpReleaseDC:
		var q cci.ReleaseDCReq
		if err = q.UnmarshalBinary(m.Payload); err == nil {
			err = b.hostRelease(l, q.More, ranges(q.Extents))
		}
	default:
		err = cci.Unsupported
	}
	return response(m, rcOf(err), out)
}

func ranges(rs []cci.ExtentRange) []cci.Extent {
	out := make([]cci.Extent, len(rs))
	for i, r := range rs {
		out[i] = cci.Extent{DPA: r.DPA, Length: r.Length}
	}
	return out
}

func (b *Box) getDCConfig(l *ld, p []byte) ([]byte, error) {
	var q cci.GetDCConfigReq
	if err := q.UnmarshalBinary(p); err != nil {
		return nil, err
	}
	if int(q.StartRegion) >= len(b.regions) {
		return nil, cci.InvalidInput
	}
	n := min(int(q.RegionCount), len(b.regions)-int(q.StartRegion))
	resp := cci.GetDCConfigResp{
		AvailableRegions: uint8(len(b.regions)),
		SupportedExtents: uint32(b.cfg.MaxExtentsPerLD),
		AvailableExtents: b.availExtents(l),
		SupportedTags:    uint32(b.cfg.MaxTagsPerLD),
		AvailableTags:    b.availTags(l),
	}
	for _, r := range b.regions[q.StartRegion : int(q.StartRegion)+n] {
		resp.Regions = append(resp.Regions, cci.HostRegionConfig{
			Base: r.base, DecodeLength: r.decodeLength(), Length: r.length, BlockSize: r.blockSize,
			DSMADHandle: uint32(r.index), SanitizeOnRelease: r.sor,
		})
	}
	return marshal(&resp)
}

func (b *Box) getDCExtentList(l *ld, p []byte) ([]byte, error) {
	var q cci.GetDCExtentListReq
	if err := q.UnmarshalBinary(p); err != nil {
		return nil, err
	}
	total := len(l.held)
	if uint64(q.Start) > uint64(total) {
		return nil, cci.InvalidInput
	}
	n := min(int(min(q.Count, uint32(total))), total-int(q.Start), fit(hostMailboxPayload, 0x10, cci.ExtentLen))
	resp := cci.GetDCExtentListResp{Total: uint32(total), Generation: l.gen}
	for _, h := range l.held[q.Start : int(q.Start)+n] {
		resp.Extents = append(resp.Extents, h.Extent)
	}
	return marshal(&resp)
}

// Helpers the hosts use to peek at device facts a real host would know
// from its own configuration (CDAT) or link state.

func (b *Box) linkUp(ldi int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lds[ldi].linkUp
}

func (b *Box) currentEpoch() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.epoch
}

func (b *Box) sharableAt(dpa uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.regionOf(dpa)
	return r != nil && r.sharable
}
