// Package cci encodes and decodes CXL Component Command Interface (CCI)
// messages: the 12-byte message header and a typed payload for every command
// the Fabric Manager and the virtual box exchange (layouts in
// shared/specs/cxl-wire.md §1.1–§4).
//
// Decoders never panic on hostile input and report short or malformed
// payloads as errors that wrap ErrPayloadLength, which a responder maps to
// return code Invalid Payload Length (0016h). Requests shorter than the full
// structure but at least the command's minimum are accepted and the missing
// tail reads as zeros (CXL 3.1 §8.2.9).
package cci

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
)

// HeaderLen is the size of the CCI message header.
const HeaderLen = 12

// MaxPayloadLen is the largest value the 21-bit payload length field holds.
const MaxPayloadLen = 1<<21 - 1

// ErrPayloadLength reports a message or payload whose length does not fit
// the command's layout.
var ErrPayloadLength = errors.New("cci: invalid payload length")

// Category is the message category in header byte 0, bits 3:0.
type Category uint8

// Message categories.
const (
	Request  Category = 0
	Response Category = 1
)

// Opcode is a CCI command opcode: command set in bits 15:8, command in 7:0.
type Opcode uint16

// Opcodes used by the project (CXL 3.1 Table 8-37, CXL 4.0 Table 8-397).
const (
	OpIdentify                    Opcode = 0x0001
	OpBackgroundOperationStatus   Opcode = 0x0002
	OpGetResponseMessageLimit     Opcode = 0x0003
	OpSetResponseMessageLimit     Opcode = 0x0004
	OpGetEventRecords             Opcode = 0x0100
	OpClearEventRecords           Opcode = 0x0101
	OpGetMCTPEventInterruptPolicy Opcode = 0x0104
	OpSetMCTPEventInterruptPolicy Opcode = 0x0105
	OpEventNotification           Opcode = 0x0106
	OpGetSupportedLogs            Opcode = 0x0400
	OpGetLog                      Opcode = 0x0401
	OpIdentifyMemoryDevice        Opcode = 0x4000
	OpGetDCConfig                 Opcode = 0x4800
	OpGetDCExtentList             Opcode = 0x4801
	OpAddDCResponse               Opcode = 0x4802
	OpReleaseDC                   Opcode = 0x4803
	OpBindVPPB                    Opcode = 0x5201
	OpGetLDInfo                   Opcode = 0x5400
	OpGetLDAllocations            Opcode = 0x5401
	OpGetMultiHeadedInfo          Opcode = 0x5500
	OpGetHeadInfo                 Opcode = 0x5501
	OpGetDCDInfo                  Opcode = 0x5600
	OpGetHostDCRegionConfig       Opcode = 0x5601
	OpSetDCRegionConfig           Opcode = 0x5602
	OpGetDCRegionExtentLists      Opcode = 0x5603
	OpInitiateDCAdd               Opcode = 0x5604
	OpInitiateDCRelease           Opcode = 0x5605
	OpDCAddReference              Opcode = 0x5606
	OpDCRemoveReference           Opcode = 0x5607
	OpDCListTags                  Opcode = 0x5608
)

// Set returns the command set (bits 15:8).
func (o Opcode) Set() uint8 { return uint8(o >> 8) }

// MCTP message types that carry CCI messages (cxl-wire.md §1.2).
const (
	MCTPTypeFMAPI uint8 = 0x07
	MCTPTypeType3 uint8 = 0x08
)

// MCTPType is the MCTP message type that must carry this opcode: 07h for
// FM-API command sets 51h–56h, 08h for everything else.
func (o Opcode) MCTPType() uint8 {
	if s := o.Set(); s >= 0x51 && s <= 0x56 {
		return MCTPTypeFMAPI
	}
	return MCTPTypeType3
}

func (o Opcode) String() string {
	if n, ok := opcodeNames[o]; ok {
		return fmt.Sprintf("%s (%04Xh)", n, uint16(o))
	}
	return fmt.Sprintf("opcode %04Xh", uint16(o))
}

var opcodeNames = map[Opcode]string{
	OpIdentify: "Identify", OpBackgroundOperationStatus: "Background Operation Status",
	OpGetResponseMessageLimit: "Get Response Message Limit", OpSetResponseMessageLimit: "Set Response Message Limit",
	OpGetEventRecords: "Get Event Records", OpClearEventRecords: "Clear Event Records",
	OpGetMCTPEventInterruptPolicy: "Get MCTP Event Interrupt Policy", OpSetMCTPEventInterruptPolicy: "Set MCTP Event Interrupt Policy",
	OpEventNotification: "Event Notification", OpGetSupportedLogs: "Get Supported Logs", OpGetLog: "Get Log",
	OpIdentifyMemoryDevice: "Identify Memory Device", OpGetDCConfig: "Get Dynamic Capacity Configuration",
	OpGetDCExtentList: "Get Dynamic Capacity Extent List", OpAddDCResponse: "Add Dynamic Capacity Response",
	OpReleaseDC: "Release Dynamic Capacity", OpBindVPPB: "Bind vPPB", OpGetLDInfo: "Get LD Info",
	OpGetLDAllocations: "Get LD Allocations", OpGetMultiHeadedInfo: "Get Multi-Headed Info", OpGetHeadInfo: "Get Head Info",
	OpGetDCDInfo: "Get DCD Info", OpGetHostDCRegionConfig: "Get Host DC Region Configuration",
	OpSetDCRegionConfig: "Set DC Region Configuration", OpGetDCRegionExtentLists: "Get DC Region Extent Lists",
	OpInitiateDCAdd: "Initiate Dynamic Capacity Add", OpInitiateDCRelease: "Initiate Dynamic Capacity Release",
	OpDCAddReference: "Dynamic Capacity Add Reference", OpDCRemoveReference: "Dynamic Capacity Remove Reference",
	OpDCListTags: "Dynamic Capacity List Tags",
}

// ReturnCode is a CCI return code (CXL 3.1 Table 8-34). A non-success
// ReturnCode is an error, so device-side handlers can return it directly and
// the FM can test for it with errors.Is.
type ReturnCode uint16

// Return codes.
const (
	Success                  ReturnCode = 0x0000
	BackgroundCommandStarted ReturnCode = 0x0001
	InvalidInput             ReturnCode = 0x0002
	Unsupported              ReturnCode = 0x0003
	InternalError            ReturnCode = 0x0004
	RetryRequired            ReturnCode = 0x0005
	Busy                     ReturnCode = 0x0006
	MediaDisabled            ReturnCode = 0x0007
	InvalidHandle            ReturnCode = 0x000E
	InvalidPhysicalAddress   ReturnCode = 0x000F
	Aborted                  ReturnCode = 0x0012
	InvalidSecurityState     ReturnCode = 0x0013
	UnsupportedMailboxOrCCI  ReturnCode = 0x0015
	InvalidPayloadLength     ReturnCode = 0x0016
	InvalidLog               ReturnCode = 0x0017
	Interrupted              ReturnCode = 0x0018
	ResourcesExhausted       ReturnCode = 0x001D
	InvalidExtentList        ReturnCode = 0x001E
	TransferOutOfOrder       ReturnCode = 0x001F
	RequestAbortNotSupported ReturnCode = 0x0020
)

var rcNames = map[ReturnCode]string{
	Success: "Success", BackgroundCommandStarted: "Background Command Started", InvalidInput: "Invalid Input",
	Unsupported: "Unsupported", InternalError: "Internal Error", RetryRequired: "Retry Required", Busy: "Busy",
	MediaDisabled: "Media Disabled", 0x0008: "FW Transfer in Progress", 0x0009: "FW Transfer Out of Order",
	0x000A: "FW Verification Failed", 0x000B: "Invalid Slot", 0x000C: "Activation Failed, FW Rolled Back",
	0x000D: "Activation Failed, Cold Reset Required", InvalidHandle: "Invalid Handle",
	InvalidPhysicalAddress: "Invalid Physical Address", 0x0010: "Inject Poison Limit Reached",
	0x0011: "Permanent Media Failure", Aborted: "Aborted", InvalidSecurityState: "Invalid Security State",
	0x0014: "Incorrect Passphrase", UnsupportedMailboxOrCCI: "Unsupported Mailbox or CCI",
	InvalidPayloadLength: "Invalid Payload Length", InvalidLog: "Invalid Log", Interrupted: "Interrupted",
	0x0019: "Unsupported Feature Version", 0x001A: "Unsupported Feature Selection Value",
	0x001B: "Feature Transfer in Progress", 0x001C: "Feature Transfer Out of Order",
	ResourcesExhausted: "Resources Exhausted", InvalidExtentList: "Invalid Extent List",
	TransferOutOfOrder: "Transfer Out of Order", RequestAbortNotSupported: "Request Abort Not Supported",
}

func (rc ReturnCode) String() string {
	if n, ok := rcNames[rc]; ok {
		return fmt.Sprintf("%s (%04Xh)", n, uint16(rc))
	}
	return fmt.Sprintf("return code %04Xh", uint16(rc))
}

func (rc ReturnCode) Error() string { return "cci: " + rc.String() }

// Message is one CCI message: header fields and the raw payload.
type Message struct {
	Category     Category
	Tag          uint8
	Opcode       Opcode
	BO           bool // background operation (bit 23 of the length field)
	ReturnCode   ReturnCode
	VendorStatus uint16
	Payload      []byte
}

// AppendBinary appends the wire form of m to b.
func (m Message) AppendBinary(b []byte) ([]byte, error) {
	if len(m.Payload) > MaxPayloadLen {
		return b, fmt.Errorf("cci: payload of %d bytes exceeds the 21-bit length field: %w", len(m.Payload), ErrPayloadLength)
	}
	l := uint32(len(m.Payload))
	if m.BO {
		l |= 1 << 23
	}
	b = append(b, byte(m.Category)&0x0f, m.Tag, 0)
	b = binary.LittleEndian.AppendUint16(b, uint16(m.Opcode))
	b = append(b, byte(l), byte(l>>8), byte(l>>16))
	b = binary.LittleEndian.AppendUint16(b, uint16(m.ReturnCode))
	b = binary.LittleEndian.AppendUint16(b, m.VendorStatus)
	return append(b, m.Payload...), nil
}

// MarshalBinary returns the wire form of m.
func (m Message) MarshalBinary() ([]byte, error) {
	return m.AppendBinary(make([]byte, 0, HeaderLen+len(m.Payload)))
}

// ParseMessage decodes a CCI message. The payload aliases b. It fails with
// ErrPayloadLength when b is shorter than a header or the length field does
// not match the bytes that follow the header.
func ParseMessage(b []byte) (Message, error) {
	if len(b) < HeaderLen {
		return Message{}, fmt.Errorf("cci: message of %d bytes is shorter than the header: %w", len(b), ErrPayloadLength)
	}
	l := uint32(b[5]) | uint32(b[6])<<8 | uint32(b[7])<<16
	m := Message{
		Category:     Category(b[0] & 0x0f),
		Tag:          b[1],
		Opcode:       Opcode(binary.LittleEndian.Uint16(b[3:])),
		BO:           l&(1<<23) != 0,
		ReturnCode:   ReturnCode(binary.LittleEndian.Uint16(b[8:])),
		VendorStatus: binary.LittleEndian.Uint16(b[10:]),
	}
	n := int(l & MaxPayloadLen)
	if n != len(b)-HeaderLen {
		return m, fmt.Errorf("cci: length field says %d payload bytes, message has %d: %w", n, len(b)-HeaderLen, ErrPayloadLength)
	}
	m.Payload = b[HeaderLen:]
	return m, nil
}

// Tag is a 16-byte Dynamic Capacity tag. The project uses random (version
// 4) UUIDs so that a tag names exactly one allocation for the device's life.
type Tag [16]byte

// NewTag returns a fresh random tag.
func NewTag() Tag {
	var t Tag
	if _, err := rand.Read(t[:]); err != nil {
		panic(fmt.Sprintf("cci: crypto/rand failed: %v", err)) // documented never to fail on Linux
	}
	t[6] = t[6]&0x0f | 0x40
	t[8] = t[8]&0x3f | 0x80
	return t
}

// IsZero reports whether t is the all-zero (absent) tag.
func (t Tag) IsZero() bool { return t == Tag{} }

// String formats t as a UUID string in byte order.
func (t Tag) String() string {
	var s [36]byte
	hex.Encode(s[0:8], t[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], t[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], t[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], t[8:10])
	s[23] = '-'
	hex.Encode(s[24:], t[10:])
	return string(s[:])
}

// ParseTag parses the UUID string form produced by Tag.String.
func ParseTag(s string) (Tag, error) {
	var t Tag
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return t, fmt.Errorf("cci: tag %q is not a UUID", s)
	}
	h := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:]
	if _, err := hex.Decode(t[:], []byte(h)); err != nil {
		return t, fmt.Errorf("cci: tag %q: %w", s, err)
	}
	return t, nil
}

// ExtentLen is the size of a Dynamic Capacity Extent on the wire.
const ExtentLen = 0x28

// Extent is a Dynamic Capacity Extent (CXL 3.1 Table 8-51), shared by
// 4801h, 5603h, the prescriptive lists of 5604h/5605h and DC event records.
type Extent struct {
	DPA       uint64 // starting device physical address; bits 5:0 reserved
	Length    uint64 // bytes
	Tag       Tag
	SharedSeq uint16 // shared extent sequence; 0 for non-sharable
}

// End returns the first DPA after the extent.
func (e Extent) End() uint64 { return e.DPA + e.Length }

// AppendBinary appends the 28h-byte wire form of e.
func (e Extent) AppendBinary(b []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, e.DPA&^0x3f)
	b = binary.LittleEndian.AppendUint64(b, e.Length)
	b = append(b, e.Tag[:]...)
	b = binary.LittleEndian.AppendUint16(b, e.SharedSeq)
	return append(b, 0, 0, 0, 0, 0, 0)
}

// ParseExtent decodes one extent from the first 28h bytes of b.
func ParseExtent(b []byte) (Extent, error) {
	if len(b) < ExtentLen {
		return Extent{}, fmt.Errorf("cci: extent needs %d bytes, have %d: %w", ExtentLen, len(b), ErrPayloadLength)
	}
	var e Extent
	e.DPA = binary.LittleEndian.Uint64(b) &^ 0x3f
	e.Length = binary.LittleEndian.Uint64(b[8:])
	copy(e.Tag[:], b[16:32])
	e.SharedSeq = binary.LittleEndian.Uint16(b[32:])
	return e, nil
}

// Capacity units used by several commands.
const (
	// CapacityUnit is the 256 MB unit of capacity fields (Identify Memory
	// Device, Get DCD Info, region decode lengths).
	CapacityUnit = 256 << 20
)
