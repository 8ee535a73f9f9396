package cci

import (
	"errors"
	"testing"
)

func genericSamples() []roundTripCase {
	return []roundTripCase{
		{name: "identify", v: &IdentifyResp{
			VendorID: 0x1e98, DeviceID: 0x0d93, SubsystemVendorID: 0x1234, SubsystemID: 0x5678,
			Serial: 0x0123456789abcdef, MaxMessageSizeExp: 10, ComponentType: ComponentType3,
		}},
		{name: "bg running", v: &BGStatusResp{InProgress: true, Percent: 42, Opcode: OpBindVPPB}},
		{name: "bg done", v: &BGStatusResp{Percent: 100, Opcode: OpBindVPPB, ReturnCode: Busy, VendorStatus: 0xbeef}},
		{name: "limit", v: &ResponseMessageLimit{Exp: 9}},
	}
}

func TestGenericRoundTrip(t *testing.T) { runRoundTrip(t, genericSamples()) }

func TestGenericGolden(t *testing.T) {
	runGolden(t, []goldenCase{
		{name: "V2 payload", want: &IdentifyResp{
			VendorID: 0x1e98, DeviceID: 0x0d93, Serial: 0x0123456789abcdef, MaxMessageSizeExp: 9, ComponentType: ComponentType3,
		}, hex: "98 1e 93 0d 00 00 00 00 ef cd ab 89 67 45 23 01 09 03"},
		{name: "bg status", want: &BGStatusResp{InProgress: true, Percent: 50, Opcode: OpBindVPPB, ReturnCode: Success},
			hex: "65 00 01 52 00 00 00 00"},
	})
}

func TestBGStatusPercentTooLarge(t *testing.T) {
	_, err := (&BGStatusResp{Percent: 200}).MarshalBinary()
	if err == nil {
		t.Fatalf("MarshalBinary(percent 200): got nil error, want an error")
	}
}

// allOpcodes lists every opcode constant of the package.
var allOpcodes = []Opcode{
	OpIdentify, OpBackgroundOperationStatus, OpGetResponseMessageLimit, OpSetResponseMessageLimit,
	OpGetEventRecords, OpClearEventRecords, OpGetMCTPEventInterruptPolicy, OpSetMCTPEventInterruptPolicy,
	OpEventNotification, OpGetSupportedLogs, OpGetLog, OpIdentifyMemoryDevice, OpGetDCConfig,
	OpGetDCExtentList, OpAddDCResponse, OpReleaseDC, OpBindVPPB, OpGetLDInfo, OpGetLDAllocations,
	OpGetMultiHeadedInfo, OpGetHeadInfo, OpGetDCDInfo, OpGetHostDCRegionConfig, OpSetDCRegionConfig,
	OpGetDCRegionExtentLists, OpInitiateDCAdd, OpInitiateDCRelease, OpDCAddReference,
	OpDCRemoveReference, OpDCListTags,
}

// requestCodec returns a fresh decoder for op's request payload, or nil
// when the request has no payload.
func requestCodec(op Opcode) codec {
	switch op {
	case OpSetResponseMessageLimit:
		return &ResponseMessageLimit{}
	case OpGetEventRecords:
		return &GetEventRecordsReq{}
	case OpClearEventRecords:
		return &ClearEventRecordsReq{}
	case OpSetMCTPEventInterruptPolicy, OpEventNotification:
		return &EventInterruptPolicy{}
	case OpGetLog:
		return &GetLogReq{}
	case OpGetDCConfig:
		return &GetDCConfigReq{}
	case OpGetDCExtentList:
		return &GetDCExtentListReq{}
	case OpAddDCResponse:
		return &AddDCResponseReq{}
	case OpReleaseDC:
		return &ReleaseDCReq{}
	case OpBindVPPB:
		return &BindVPPBReq{}
	case OpGetLDAllocations:
		return &GetLDAllocationsReq{}
	case OpGetMultiHeadedInfo:
		return &GetMultiHeadedInfoReq{}
	case OpGetHeadInfo:
		return &GetHeadInfoReq{}
	case OpGetHostDCRegionConfig:
		return &GetHostDCRegionConfigReq{}
	case OpSetDCRegionConfig:
		return &SetDCRegionConfigReq{}
	case OpGetDCRegionExtentLists:
		return &GetDCRegionExtentListsReq{}
	case OpInitiateDCAdd:
		return &InitiateDCAddReq{}
	case OpInitiateDCRelease:
		return &InitiateDCReleaseReq{}
	case OpDCAddReference:
		return &DCAddReferenceReq{}
	case OpDCRemoveReference:
		return &DCRemoveReferenceReq{}
	case OpDCListTags:
		return &ListTagsReq{}
	}
	return nil
}

// responseCodec returns a fresh decoder for op's response payload, or nil
// when the response has no payload (or, for Get Log, raw bytes).
func responseCodec(op Opcode) codec {
	switch op {
	case OpIdentify:
		return &IdentifyResp{}
	case OpBackgroundOperationStatus:
		return &BGStatusResp{}
	case OpGetResponseMessageLimit, OpSetResponseMessageLimit:
		return &ResponseMessageLimit{}
	case OpGetEventRecords:
		return &GetEventRecordsResp{}
	case OpGetMCTPEventInterruptPolicy, OpSetMCTPEventInterruptPolicy:
		return &EventInterruptPolicy{}
	case OpGetSupportedLogs:
		return &GetSupportedLogsResp{}
	case OpIdentifyMemoryDevice:
		return &IdentifyMemoryDeviceResp{}
	case OpGetDCConfig:
		return &GetDCConfigResp{}
	case OpGetDCExtentList:
		return &GetDCExtentListResp{}
	case OpGetLDInfo:
		return &GetLDInfoResp{}
	case OpGetLDAllocations:
		return &GetLDAllocationsResp{}
	case OpGetMultiHeadedInfo:
		return &GetMultiHeadedInfoResp{}
	case OpGetHeadInfo:
		return &GetHeadInfoResp{}
	case OpGetDCDInfo:
		return &GetDCDInfoResp{}
	case OpGetHostDCRegionConfig:
		return &GetHostDCRegionConfigResp{}
	case OpSetDCRegionConfig:
		return &SetDCRegionConfigResp{}
	case OpGetDCRegionExtentLists:
		return &GetDCRegionExtentListsResp{}
	case OpDCListTags:
		return &ListTagsResp{}
	}
	return nil
}

// TestRequestLength checks the length table against the decoders: a zero
// payload of the minimum length decodes, one byte less does not, and
// commands without a request payload report 0..0.
func TestRequestLength(t *testing.T) {
	for _, op := range allOpcodes {
		t.Run(op.String(), func(t *testing.T) {
			minLen, maxLen, ok := RequestLength(op)
			if !ok {
				t.Fatalf("RequestLength: got ok false, want true")
			}
			if maxLen != -1 && maxLen < minLen {
				t.Fatalf("RequestLength: got min %d > max %d", minLen, maxLen)
			}
			dec := requestCodec(op)
			if dec == nil {
				if minLen != 0 || maxLen != 0 {
					t.Errorf("RequestLength of a payload-less request: got %d..%d, want 0..0", minLen, maxLen)
				}
				return
			}
			if err := dec.UnmarshalBinary(make([]byte, minLen)); err != nil {
				t.Errorf("UnmarshalBinary(%d zero bytes): got error %v, want nil", minLen, err)
			}
			if minLen == 0 {
				t.Fatalf("RequestLength: got min 0 for a request with a payload")
			}
			if err := requestCodec(op).UnmarshalBinary(make([]byte, minLen-1)); !errors.Is(err, ErrPayloadLength) {
				t.Errorf("UnmarshalBinary(%d zero bytes): got error %v, want ErrPayloadLength", minLen-1, err)
			}
		})
	}
	if _, _, ok := RequestLength(0x1234); ok {
		t.Errorf("RequestLength(1234h): got ok true, want false")
	}
}

// TestRequestOpcodes checks that every request type names its opcode.
func TestRequestOpcodes(t *testing.T) {
	tests := []struct {
		req  interface{ Opcode() Opcode }
		want Opcode
	}{
		{ResponseMessageLimit{}, OpSetResponseMessageLimit},
		{GetEventRecordsReq{}, OpGetEventRecords},
		{ClearEventRecordsReq{}, OpClearEventRecords},
		{GetLogReq{}, OpGetLog},
		{GetDCConfigReq{}, OpGetDCConfig},
		{GetDCExtentListReq{}, OpGetDCExtentList},
		{AddDCResponseReq{}, OpAddDCResponse},
		{ReleaseDCReq{}, OpReleaseDC},
		{BindVPPBReq{}, OpBindVPPB},
		{GetLDAllocationsReq{}, OpGetLDAllocations},
		{GetMultiHeadedInfoReq{}, OpGetMultiHeadedInfo},
		{GetHeadInfoReq{}, OpGetHeadInfo},
		{GetHostDCRegionConfigReq{}, OpGetHostDCRegionConfig},
		{SetDCRegionConfigReq{}, OpSetDCRegionConfig},
		{GetDCRegionExtentListsReq{}, OpGetDCRegionExtentLists},
		{InitiateDCAddReq{}, OpInitiateDCAdd},
		{InitiateDCReleaseReq{}, OpInitiateDCRelease},
		{DCAddReferenceReq{}, OpDCAddReference},
		{DCRemoveReferenceReq{}, OpDCRemoveReference},
		{ListTagsReq{}, OpDCListTags},
	}
	for _, tc := range tests {
		if got := tc.req.Opcode(); got != tc.want {
			t.Errorf("%T.Opcode(): got %v, want %v", tc.req, got, tc.want)
		}
	}
}

func FuzzGeneric(f *testing.F) {
	samples := genericSamples()
	seedCodecs(f, samples)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzDecoders(t, data, protos(samples))
	})
}
