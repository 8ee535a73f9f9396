package cci

import (
	"encoding/binary"
	"fmt"
)

// Generic component commands 0001h–0004h (cxl-wire.md §2.1–§2.3).

// Component types reported by Identify.
const (
	ComponentSwitch uint8 = 0x00
	ComponentType3  uint8 = 0x03
	ComponentGFD    uint8 = 0x04
)

// IdentifyRespLen is the size of the Identify (0001h) output payload.
const IdentifyRespLen = 0x12

// IdentifyResp is the output of Identify (0001h).
type IdentifyResp struct {
	VendorID          uint16
	DeviceID          uint16
	SubsystemVendorID uint16
	SubsystemID       uint16
	Serial            uint64 // PCIe Device Serial Number
	MaxMessageSizeExp uint8  // maximum payload is 2^n bytes, n = 8…10
	ComponentType     uint8  // ComponentSwitch, ComponentType3, ComponentGFD
}

// MarshalBinary encodes the payload.
func (p *IdentifyResp) MarshalBinary() ([]byte, error) {
	b := make([]byte, IdentifyRespLen)
	binary.LittleEndian.PutUint16(b[0x00:], p.VendorID)
	binary.LittleEndian.PutUint16(b[0x02:], p.DeviceID)
	binary.LittleEndian.PutUint16(b[0x04:], p.SubsystemVendorID)
	binary.LittleEndian.PutUint16(b[0x06:], p.SubsystemID)
	binary.LittleEndian.PutUint64(b[0x08:], p.Serial)
	b[0x10] = p.MaxMessageSizeExp
	b[0x11] = p.ComponentType
	return b, nil
}

// UnmarshalBinary decodes the payload.
func (p *IdentifyResp) UnmarshalBinary(b []byte) error {
	if err := checkMin("identify response", b, IdentifyRespLen); err != nil {
		return err
	}
	*p = IdentifyResp{
		VendorID:          binary.LittleEndian.Uint16(b[0x00:]),
		DeviceID:          binary.LittleEndian.Uint16(b[0x02:]),
		SubsystemVendorID: binary.LittleEndian.Uint16(b[0x04:]),
		SubsystemID:       binary.LittleEndian.Uint16(b[0x06:]),
		Serial:            binary.LittleEndian.Uint64(b[0x08:]),
		MaxMessageSizeExp: b[0x10],
		ComponentType:     b[0x11],
	}
	return nil
}

// BGStatusRespLen is the size of the Background Operation Status output.
const BGStatusRespLen = 8

// BGStatusResp is the output of Background Operation Status (0002h).
// ReturnCode and VendorStatus are valid once Percent reaches 100.
type BGStatusResp struct {
	InProgress   bool
	Percent      uint8 // 0–100; the field has 7 bits
	Opcode       Opcode
	ReturnCode   ReturnCode
	VendorStatus uint16
}

// MarshalBinary encodes the payload.
func (p *BGStatusResp) MarshalBinary() ([]byte, error) {
	if p.Percent > 0x7f {
		return nil, fmt.Errorf("cci: background status: percent %d does not fit 7 bits", p.Percent)
	}
	b := make([]byte, BGStatusRespLen)
	b[0] = p.Percent<<1 | b2u(p.InProgress)
	binary.LittleEndian.PutUint16(b[2:], uint16(p.Opcode))
	binary.LittleEndian.PutUint16(b[4:], uint16(p.ReturnCode))
	binary.LittleEndian.PutUint16(b[6:], p.VendorStatus)
	return b, nil
}

// UnmarshalBinary decodes the payload.
func (p *BGStatusResp) UnmarshalBinary(b []byte) error {
	if err := checkMin("background status response", b, BGStatusRespLen); err != nil {
		return err
	}
	*p = BGStatusResp{
		InProgress:   b[0]&1 != 0,
		Percent:      b[0] >> 1,
		Opcode:       Opcode(binary.LittleEndian.Uint16(b[2:])),
		ReturnCode:   ReturnCode(binary.LittleEndian.Uint16(b[4:])),
		VendorStatus: binary.LittleEndian.Uint16(b[6:]),
	}
	return nil
}

// ResponseMessageLimitLen is the payload size of 0003h output and 0004h
// input and output.
const ResponseMessageLimitLen = 1

// ResponseMessageLimit is the output of Get Response Message Limit (0003h)
// and the input and output of Set Response Message Limit (0004h).
type ResponseMessageLimit struct {
	Exp uint8 // limit is 2^Exp bytes, Exp = 8…10
}

// Opcode returns the opcode for which ResponseMessageLimit is a request.
func (ResponseMessageLimit) Opcode() Opcode { return OpSetResponseMessageLimit }

// MarshalBinary encodes the payload.
func (p *ResponseMessageLimit) MarshalBinary() ([]byte, error) {
	return []byte{p.Exp}, nil
}

// UnmarshalBinary decodes the payload.
func (p *ResponseMessageLimit) UnmarshalBinary(b []byte) error {
	if err := checkMin("response message limit", b, ResponseMessageLimitLen); err != nil {
		return err
	}
	*p = ResponseMessageLimit{Exp: b[0]}
	return nil
}

// RequestLength reports the accepted request payload sizes of op: at least
// min bytes (the command minimum, CXL 3.1 §8.2.9 short-input rule) and at
// most max bytes, with max = -1 when the request carries a counted list
// whose exact size the payload decoder checks. ok is false for opcodes the
// package does not know. A responder answers Invalid Payload Length when
// the payload falls outside [min, max].
func RequestLength(op Opcode) (minLen, maxLen int, ok bool) {
	switch op {
	case OpIdentify, OpBackgroundOperationStatus, OpGetResponseMessageLimit,
		OpGetMCTPEventInterruptPolicy, OpGetSupportedLogs, OpIdentifyMemoryDevice,
		OpGetLDInfo, OpGetDCDInfo:
		return 0, 0, true
	case OpSetResponseMessageLimit:
		return ResponseMessageLimitLen, ResponseMessageLimitLen, true
	case OpGetEventRecords:
		return GetEventRecordsReqMinLen, GetEventRecordsReqMinLen, true
	case OpClearEventRecords:
		return ClearEventRecordsMinLen, -1, true
	case OpSetMCTPEventInterruptPolicy, OpEventNotification:
		return EventInterruptPolicyLen, EventInterruptPolicyLen, true
	case OpGetLog:
		return GetLogReqMinLen, GetLogReqMinLen, true
	case OpGetDCConfig:
		return GetDCConfigReqMinLen, GetDCConfigReqMinLen, true
	case OpGetDCExtentList:
		return GetDCExtentListReqMinLen, GetDCExtentListReqMinLen, true
	case OpAddDCResponse:
		return AddDCResponseMinLen, -1, true
	case OpReleaseDC:
		return ReleaseDCMinLen, -1, true
	case OpBindVPPB:
		return BindVPPBReqMinLen, BindVPPBReqMinLen, true
	case OpGetLDAllocations:
		return GetLDAllocationsReqMinLen, GetLDAllocationsReqMinLen, true
	case OpGetMultiHeadedInfo:
		return GetMultiHeadedInfoReqMinLen, GetMultiHeadedInfoReqMinLen, true
	case OpGetHeadInfo:
		return GetHeadInfoReqMinLen, GetHeadInfoReqMinLen, true
	case OpGetHostDCRegionConfig:
		return GetHostDCRegionConfigReqMinLen, GetHostDCRegionConfigReqMinLen, true
	case OpSetDCRegionConfig:
		return SetDCRegionConfigLen, SetDCRegionConfigLen, true
	case OpGetDCRegionExtentLists:
		return GetDCRegionExtentListsReqMinLen, GetDCRegionExtentListsReqMinLen, true
	case OpInitiateDCAdd:
		return InitiateDCAddMinLen, -1, true
	case OpInitiateDCRelease:
		return InitiateDCReleaseMinLen, -1, true
	case OpDCAddReference, OpDCRemoveReference:
		return DCReferenceReqMinLen, DCReferenceReqMinLen, true
	case OpDCListTags:
		return ListTagsReqMinLen, ListTagsReqMinLen, true
	}
	return 0, 0, false
}
