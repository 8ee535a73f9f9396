// Package pldm speaks DMTF PLDM over MCTP (message type 01h) to the box's
// board controller: the 3-byte message header and completion codes, the
// base discovery commands (DSP0240: GetTID, GetPLDMVersion, GetPLDMTypes,
// GetPLDMCommands), the platform monitoring and control commands (DSP0248:
// the PDR repository with multipart GetPDR, sensor readings, effecters,
// event receiver set-up and PlatformEventMessage) and the PDR layouts
// (numeric and state sensors and effecters, auxiliary names). Layouts
// follow shared/specs/pldm.md, which restates them as libpldm encodes them.
//
// On top of the codec sit a Client that sends requests through any
// Requester (the daemon passes the mctp.Endpoint it already owns for the
// device link) and a Controller that discovers the terminus, reads its
// repository and implements bmc.BoardController.
//
// Decoders never panic on hostile input: short or overlong payloads are
// errors wrapping ErrLength, out-of-range fields errors wrapping
// ErrInvalid, which a responder maps to completion codes 03h and 02h.
package pldm

import (
	"errors"
	"fmt"
)

// HeaderLen is the size of the PLDM message header.
const HeaderLen = 3

// InstanceMax is the largest instance ID (5 bits).
const InstanceMax = 31

// Sentinel errors. Decoding errors wrap one of the first two.
var (
	// ErrLength: a message or payload is shorter or longer than its layout.
	ErrLength = errors.New("pldm: invalid length")
	// ErrInvalid: a field holds a value the layout does not allow.
	ErrInvalid = errors.New("pldm: invalid data")
	// ErrMismatch: a response does not answer the request it was matched
	// to (instance ID, type, command or direction differ).
	ErrMismatch = errors.New("pldm: response does not match request")
)

// Type is the PLDM type in header byte 1, bits 5:0.
type Type uint8

// PLDM types (DSP0245).
const (
	TypeBase           Type = 0x00 // control and discovery
	TypePlatform       Type = 0x02 // platform monitoring and control
	TypeFRU            Type = 0x04
	TypeFirmwareUpdate Type = 0x05
	TypeOEM            Type = 0x3F
)

// Command is a command code; its meaning depends on the Type.
type Command uint8

// Base (type 0) commands.
const (
	CmdGetTID          Command = 0x02
	CmdGetPLDMVersion  Command = 0x03
	CmdGetPLDMTypes    Command = 0x04
	CmdGetPLDMCommands Command = 0x05
)

// Platform (type 2) commands.
const (
	CmdSetEventReceiver        Command = 0x04
	CmdPlatformEventMessage    Command = 0x0A
	CmdGetSensorReading        Command = 0x11
	CmdGetStateSensorReadings  Command = 0x21
	CmdSetNumericEffecterValue Command = 0x31
	CmdGetNumericEffecterValue Command = 0x32
	CmdSetStateEffecterStates  Command = 0x39
	CmdGetPDRRepositoryInfo    Command = 0x50
	CmdGetPDR                  Command = 0x51
)

// CompletionCode is the first byte of every response payload. Non-zero
// codes are errors; 80h–FFh mean something per command.
type CompletionCode uint8

// Generic completion codes (DSP0240).
const (
	CCSuccess                       CompletionCode = 0x00
	CCError                         CompletionCode = 0x01
	CCInvalidData                   CompletionCode = 0x02
	CCInvalidLength                 CompletionCode = 0x03
	CCNotReady                      CompletionCode = 0x04
	CCUnsupportedCommand            CompletionCode = 0x05
	CCInvalidType                   CompletionCode = 0x20
	CCInvalidTransferContext        CompletionCode = 0x21
	CCInvalidDataTransferHandle     CompletionCode = 0x22
	CCUnexpectedTransferFlag        CompletionCode = 0x23
	CCInvalidRequestedSectionOffset CompletionCode = 0x24
)

// Command-specific completion codes used by this package.
const (
	// GetSensorReading, GetStateSensorReadings.
	CCInvalidSensorID CompletionCode = 0x80
	// Set/GetNumericEffecterValue, SetStateEffecterStates.
	CCInvalidEffecterID        CompletionCode = 0x80
	CCInvalidStateValue        CompletionCode = 0x81
	CCUnsupportedEffecterState CompletionCode = 0x82
	// GetPDR, GetPLDMVersion.
	CCInvalidTransferHandle CompletionCode = 0x80
	CCInvalidTransferOpFlag CompletionCode = 0x81
	// GetPDR.
	CCInvalidRecordHandle CompletionCode = 0x82
	CCInvalidRecordChange CompletionCode = 0x83
	// GetPLDMVersion, GetPLDMCommands.
	CCInvalidTypeInRequest    CompletionCode = 0x83
	CCInvalidVersionInRequest CompletionCode = 0x84
	// SetEventReceiver.
	CCInvalidProtocolType      CompletionCode = 0x80
	CCEnableMethodNotSupported CompletionCode = 0x81
	// PlatformEventMessage.
	CCUnsupportedEventFormat CompletionCode = 0x81
)

func (c CompletionCode) Error() string {
	switch c {
	case CCSuccess:
		return "pldm: success"
	case CCError:
		return "pldm: error"
	case CCInvalidData:
		return "pldm: invalid data"
	case CCInvalidLength:
		return "pldm: invalid length"
	case CCNotReady:
		return "pldm: not ready"
	case CCUnsupportedCommand:
		return "pldm: unsupported command"
	case CCInvalidType:
		return "pldm: invalid PLDM type"
	}
	return fmt.Sprintf("pldm: completion code %#02x", uint8(c))
}

// Header is the PLDM message header:
//
//	byte 0  bit 7 Rq, bit 6 D (datagram), bit 5 reserved, bits 4:0 instance ID
//	byte 1  bits 7:6 header version (0), bits 5:0 PLDM type
//	byte 2  command code
type Header struct {
	Request    bool
	Datagram   bool
	InstanceID uint8 // 0..31
	Type       Type  // 0..63
	Command    Command
}

// Append appends the encoded header to b. Out-of-range InstanceID and Type
// are truncated to their bit fields.
func (h Header) Append(b []byte) []byte {
	b0 := h.InstanceID & InstanceMax
	if h.Request {
		b0 |= 0x80
	}
	if h.Datagram {
		b0 |= 0x40
	}
	return append(b, b0, byte(h.Type)&0x3F, byte(h.Command))
}

// ParseHeader decodes the header at the start of msg. A header version
// other than 0 is an error: its layout is unknown.
func ParseHeader(msg []byte) (Header, error) {
	if len(msg) < HeaderLen {
		return Header{}, fmt.Errorf("pldm: header: %d bytes, need %d: %w", len(msg), HeaderLen, ErrLength)
	}
	if v := msg[1] >> 6; v != 0 {
		return Header{}, fmt.Errorf("pldm: header: version %d: %w", v, ErrInvalid)
	}
	return Header{
		Request:    msg[0]&0x80 != 0,
		Datagram:   msg[0]&0x40 != 0,
		InstanceID: msg[0] & InstanceMax,
		Type:       Type(msg[1] & 0x3F),
		Command:    Command(msg[2]),
	}, nil
}

// EncodeRequest returns a request message: the header (Rq=1) and payload.
func EncodeRequest(iid uint8, t Type, cmd Command, payload []byte) []byte {
	b := Header{Request: true, InstanceID: iid, Type: t, Command: cmd}.Append(make([]byte, 0, HeaderLen+len(payload)))
	return append(b, payload...)
}

// EncodeResponse returns the response to req: req's header with Rq=0, the
// completion code and, for CCSuccess only, the payload.
func EncodeResponse(req Header, cc CompletionCode, payload []byte) []byte {
	h := Header{InstanceID: req.InstanceID, Type: req.Type, Command: req.Command}
	b := h.Append(make([]byte, 0, HeaderLen+1+len(payload)))
	b = append(b, byte(cc))
	if cc == CCSuccess {
		b = append(b, payload...)
	}
	return b
}

// ParseResponse checks that msg answers the request with header req
// (instance ID, type and command equal, Rq clear) and returns the payload
// after the completion code. A non-zero completion code is returned as a
// CompletionCode error (wrapped), whatever follows it.
func ParseResponse(msg []byte, req Header) ([]byte, error) {
	h, err := ParseHeader(msg)
	if err != nil {
		return nil, err
	}
	if h.Request || h.InstanceID != req.InstanceID || h.Type != req.Type || h.Command != req.Command {
		return nil, fmt.Errorf("pldm: response %+v to request type %d command %#02x instance %d: %w",
			h, req.Type, uint8(req.Command), req.InstanceID, ErrMismatch)
	}
	if len(msg) < HeaderLen+1 {
		return nil, fmt.Errorf("pldm: response without completion code: %w", ErrLength)
	}
	if cc := CompletionCode(msg[HeaderLen]); cc != CCSuccess {
		return nil, fmt.Errorf("pldm: type %d command %#02x: %w", req.Type, uint8(req.Command), cc)
	}
	return msg[HeaderLen+1:], nil
}
