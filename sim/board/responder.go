package board

import (
	"context"
	"encoding"
	"errors"

	"cxlpool/bmc/pldm"
	"cxlpool/fabric/mctp"
)

// maxPDRPart caps the record bytes of one GetPDR response so that the
// whole MCTP message (type, PLDM header, completion code, 12 bytes of
// fields, CRC) fits the FM endpoint's 1037-byte reassembly limit.
const maxPDRPart = 1000

// Handle answers one PLDM request. It has the shape of an mctp.Handler:
// an endpoint at Config.EID calls it for every non-control request.
// Messages of other types, responses and datagrams get no answer, and
// neither do requests for a silenced sensor.
func (b *Board) Handle(_ context.Context, _ mctp.EID, typ mctp.MsgType, msg []byte) ([]byte, bool) {
	if typ != mctp.MsgTypePLDM {
		return nil, false
	}
	h, err := pldm.ParseHeader(msg)
	if err != nil || !h.Request {
		return nil, false
	}
	payload := msg[pldm.HeaderLen:]
	b.mu.Lock()
	b.advanceLocked()
	resp, cc, ok := b.dispatchLocked(h, payload)
	b.mu.Unlock()
	if !ok || h.Datagram {
		return nil, false
	}
	var out []byte
	if cc == pldm.CCSuccess && resp != nil {
		if out, err = resp.MarshalBinary(); err != nil {
			cc = pldm.CCError
		}
	}
	return pldm.EncodeResponse(h, cc, out), true
}

// decodeCC maps a decoding error to its completion code.
func decodeCC(err error) pldm.CompletionCode {
	if errors.Is(err, pldm.ErrLength) {
		return pldm.CCInvalidLength
	}
	return pldm.CCInvalidData
}

// dispatchLocked executes one request with mu held. ok false means "send
// nothing".
func (b *Board) dispatchLocked(h pldm.Header, p []byte) (encoding.BinaryMarshaler, pldm.CompletionCode, bool) {
	switch h.Type {
	case pldm.TypeBase:
		switch h.Command {
		case pldm.CmdGetTID:
			if len(p) != 0 {
				return nil, pldm.CCInvalidLength, true
			}
			return &pldm.GetTIDResp{TID: b.cfg.TID}, pldm.CCSuccess, true
		case pldm.CmdGetPLDMTypes:
			if len(p) != 0 {
				return nil, pldm.CCInvalidLength, true
			}
			return &pldm.GetPLDMTypesResp{Types: pldm.TypesOf(pldm.TypeBase, pldm.TypePlatform)}, pldm.CCSuccess, true
		case pldm.CmdGetPLDMVersion:
			var req pldm.GetPLDMVersionReq
			if err := req.UnmarshalBinary(p); err != nil {
				return nil, decodeCC(err), true
			}
			v, known := versions[req.Type]
			switch {
			case req.Op != pldm.GetFirstPart:
				return nil, pldm.CCInvalidTransferOpFlag, true
			case req.TransferHandle != 0:
				return nil, pldm.CCInvalidTransferHandle, true
			case !known:
				return nil, pldm.CCInvalidTypeInRequest, true
			}
			return &pldm.GetPLDMVersionResp{Flag: pldm.TransferWhole, Versions: []pldm.Ver32{v}, CRC: true}, pldm.CCSuccess, true
		case pldm.CmdGetPLDMCommands:
			var req pldm.GetPLDMCommandsReq
			if err := req.UnmarshalBinary(p); err != nil {
				return nil, decodeCC(err), true
			}
			v, known := versions[req.Type]
			switch {
			case !known:
				return nil, pldm.CCInvalidTypeInRequest, true
			case req.Version != v && req.Version != 0xFFFFFFFF:
				return nil, pldm.CCInvalidVersionInRequest, true
			}
			return &pldm.GetPLDMCommandsResp{Commands: commands[req.Type]}, pldm.CCSuccess, true
		}
		return nil, pldm.CCUnsupportedCommand, true
	case pldm.TypePlatform:
		return b.platformLocked(h, p)
	}
	return nil, pldm.CCInvalidType, true
}

// versions are the versions the board reports per PLDM type.
var versions = map[pldm.Type]pldm.Ver32{pldm.TypeBase: pldm.VersionBase110, pldm.TypePlatform: pldm.Version120}

// commands are the commands the board implements per PLDM type.
var commands = map[pldm.Type]pldm.CommandSet{
	pldm.TypeBase: pldm.CommandsOf(pldm.CmdGetTID, pldm.CmdGetPLDMVersion, pldm.CmdGetPLDMTypes, pldm.CmdGetPLDMCommands),
	pldm.TypePlatform: pldm.CommandsOf(pldm.CmdSetEventReceiver, pldm.CmdGetSensorReading, pldm.CmdGetStateSensorReadings,
		pldm.CmdSetNumericEffecterValue, pldm.CmdGetNumericEffecterValue, pldm.CmdSetStateEffecterStates,
		pldm.CmdGetPDRRepositoryInfo, pldm.CmdGetPDR),
}

func (b *Board) platformLocked(h pldm.Header, p []byte) (encoding.BinaryMarshaler, pldm.CompletionCode, bool) {
	switch h.Command {
	case pldm.CmdSetEventReceiver:
		var req pldm.SetEventReceiverReq
		if err := req.UnmarshalBinary(p); err != nil {
			return nil, decodeCC(err), true
		}
		switch {
		case req.Transport != pldm.TransportMCTP:
			return nil, pldm.CCInvalidProtocolType, true
		case req.Enable == pldm.EventReceiverDisable:
			b.receiver, b.pending = mctp.EIDNull, nil
		case req.Enable == pldm.EventReceiverAsync:
			if eid := mctp.EID(req.Address); eid == mctp.EIDNull || eid == mctp.EIDBroadcast {
				return nil, pldm.CCInvalidData, true
			}
			b.receiver = mctp.EID(req.Address)
		default:
			// The board offers asynchronous events only; polled and
			// keep-alive receivers are refused as DSP0248 prescribes
			// (ENABLE_METHOD_NOT_SUPPORTED), and the FM asks for async.
			return nil, pldm.CCEnableMethodNotSupported, true
		}
		return nil, pldm.CCSuccess, true
	case pldm.CmdGetPDRRepositoryInfo:
		if len(p) != 0 {
			return nil, pldm.CCInvalidLength, true
		}
		info := &pldm.GetPDRRepositoryInfoResp{State: pldm.RepositoryAvailable, RecordCount: uint32(len(b.records))}
		for _, r := range b.records {
			info.RepositorySize += uint32(len(r))
			info.LargestRecordSize = max(info.LargestRecordSize, uint32(len(r)))
		}
		return info, pldm.CCSuccess, true
	case pldm.CmdGetPDR:
		var req pldm.GetPDRReq
		if err := req.UnmarshalBinary(p); err != nil {
			return nil, decodeCC(err), true
		}
		return b.getPDRLocked(req)
	case pldm.CmdGetSensorReading:
		var req pldm.GetSensorReadingReq
		if err := req.UnmarshalBinary(p); err != nil {
			return nil, decodeCC(err), true
		}
		s := b.numSensor(req.SensorID)
		if s == nil {
			return nil, pldm.CCInvalidSensorID, true
		}
		if s.silent {
			return nil, 0, false
		}
		if req.Rearm {
			s.event = s.present
		}
		return &pldm.GetSensorReadingResp{DataSize: s.pdr.DataSize, OpState: pldm.SensorEnabled, EventEnable: pldm.EventsEnabled,
			PresentState: s.present, PreviousState: s.previous, EventState: s.event, Reading: s.raw}, pldm.CCSuccess, true
	case pldm.CmdGetStateSensorReadings:
		var req pldm.GetStateSensorReadingsReq
		if err := req.UnmarshalBinary(p); err != nil {
			return nil, decodeCC(err), true
		}
		s := b.stateSensor(req.SensorID)
		if s == nil {
			return nil, pldm.CCInvalidSensorID, true
		}
		if s.silent {
			return nil, 0, false
		}
		resp := &pldm.GetStateSensorReadingsResp{}
		for i := range s.present {
			resp.Fields = append(resp.Fields, pldm.StateReading{OpState: pldm.SensorEnabled,
				PresentState: s.present[i], PreviousState: s.previous[i], EventState: s.present[i]})
		}
		return resp, pldm.CCSuccess, true
	case pldm.CmdSetNumericEffecterValue:
		var req pldm.SetNumericEffecterValueReq
		if err := req.UnmarshalBinary(p); err != nil {
			return nil, decodeCC(err), true
		}
		e := b.numEffecter(req.EffecterID)
		switch {
		case e == nil:
			return nil, pldm.CCInvalidEffecterID, true
		case req.DataSize != e.pdr.DataSize || req.Value < e.pdr.MinSettable || req.Value > e.pdr.MaxSettable:
			return nil, pldm.CCInvalidData, true
		}
		e.set(b.m, e.pdr.Value(req.Value))
		return nil, pldm.CCSuccess, true
	case pldm.CmdGetNumericEffecterValue:
		var req pldm.GetNumericEffecterValueReq
		if err := req.UnmarshalBinary(p); err != nil {
			return nil, decodeCC(err), true
		}
		e := b.numEffecter(req.EffecterID)
		if e == nil {
			return nil, pldm.CCInvalidEffecterID, true
		}
		raw, _ := e.pdr.Raw(e.get(b.m))
		return &pldm.GetNumericEffecterValueResp{DataSize: e.pdr.DataSize, OpState: pldm.EffecterEnabledNoUpdatePending,
			Pending: raw, Present: raw}, pldm.CCSuccess, true
	case pldm.CmdSetStateEffecterStates:
		var req pldm.SetStateEffecterStatesReq
		if err := req.UnmarshalBinary(p); err != nil {
			return nil, decodeCC(err), true
		}
		e := b.stateEffecter(req.EffecterID)
		if e == nil {
			return nil, pldm.CCInvalidEffecterID, true
		}
		if len(req.Fields) > len(e.pdr.Composite) {
			return nil, pldm.CCInvalidData, true
		}
		for i, f := range req.Fields {
			if f.Set && !e.pdr.Composite[i].Has(f.State) {
				return nil, pldm.CCInvalidStateValue, true
			}
		}
		for i, f := range req.Fields {
			if f.Set {
				e.set(b.m, i, f.State)
			}
		}
		b.advanceLocked() // state sensors follow at once
		return nil, pldm.CCSuccess, true
	}
	return nil, pldm.CCUnsupportedCommand, true
}

// getPDRLocked serves one part of a record. The data transfer handle of a
// multipart transfer is the byte offset of the next part, as in TV6.
func (b *Board) getPDRLocked(req pldm.GetPDRReq) (encoding.BinaryMarshaler, pldm.CompletionCode, bool) {
	h := req.RecordHandle
	if h == 0 {
		h = 1
	}
	if h > uint32(len(b.records)) {
		return nil, pldm.CCInvalidRecordHandle, true
	}
	rec := b.records[h-1]
	off := int(req.TransferHandle)
	switch req.Op {
	case pldm.GetFirstPart:
		if off != 0 {
			return nil, pldm.CCInvalidTransferHandle, true
		}
	case pldm.GetNextPart:
		hdr, _ := pldm.ParsePDRHeader(rec)
		if off <= 0 || off >= len(rec) {
			return nil, pldm.CCInvalidTransferHandle, true
		}
		if req.ChangeNumber != hdr.ChangeNumber {
			return nil, pldm.CCInvalidRecordChange, true
		}
	default:
		return nil, pldm.CCInvalidTransferOpFlag, true
	}
	if req.RequestCount == 0 {
		return nil, pldm.CCInvalidData, true
	}
	n := min(int(req.RequestCount), maxPDRPart, len(rec)-off)
	resp := &pldm.GetPDRResp{Data: rec[off : off+n]}
	if int(h) < len(b.records) {
		resp.NextRecordHandle = h + 1
	}
	more := off+n < len(rec)
	switch {
	case off == 0 && !more:
		resp.Flag = pldm.TransferWhole
	case off == 0:
		resp.Flag = pldm.PDRStart
	case more:
		resp.Flag = pldm.PDRMiddle
	default:
		resp.Flag = pldm.TransferEnd
		resp.CRC = pldm.CRC8(rec)
	}
	if more {
		resp.NextTransferHandle = uint32(off + n)
	}
	return resp, pldm.CCSuccess, true
}

func (b *Board) numSensor(id uint16) *numSensor {
	for _, s := range b.num {
		if s.pdr.SensorID == id {
			return s
		}
	}
	return nil
}

func (b *Board) stateSensor(id uint16) *stateSensor {
	for _, s := range b.states {
		if s.pdr.SensorID == id {
			return s
		}
	}
	return nil
}

func (b *Board) numEffecter(id uint16) *numEffecter {
	for _, e := range b.numEff {
		if e.pdr.EffecterID == id {
			return e
		}
	}
	return nil
}

func (b *Board) stateEffecter(id uint16) *stateEffecter {
	for _, e := range b.stateEff {
		if e.pdr.EffecterID == id {
			return e
		}
	}
	return nil
}
