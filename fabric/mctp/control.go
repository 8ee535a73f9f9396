package mctp

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// MCTP control messages (message type 00h). Layouts restate DSP0236 §12 as
// implemented by openbmc/libmctp (libmctp-cmds.h, control.c); offsets are
// inside the message after the type byte:
//
//	0  bit 7 Rq (request), bit 6 D (datagram), bit 5 reserved, bits 4:0 Instance ID
//	1  command code
//	2  completion code (responses only), then command data
//
// Get Endpoint ID (02h)           request: —            response: cc, EID, endpoint type, medium-specific
// Get MCTP Version Support (04h)  request: message type  response: cc, entry count, entries (4 B each)
// Get Message Type Support (05h)  request: —            response: cc, type count, types (1 B each)
//
// A version entry is four BCD-ish bytes major, minor, update, alpha where
// F0h+n encodes the digit n: 1.3.1 is F1 F3 F1 00. Message type FFh asks
// for the base specification version, 00h for the control protocol.

// ControlCommand is an MCTP control command code.
type ControlCommand uint8

// Control commands (DSP0236 Table 12).
const (
	CmdSetEndpointID           ControlCommand = 0x01
	CmdGetEndpointID           ControlCommand = 0x02
	CmdGetEndpointUUID         ControlCommand = 0x03
	CmdGetVersionSupport       ControlCommand = 0x04
	CmdGetMessageTypeSupport   ControlCommand = 0x05
	CmdGetVendorMessageSupport ControlCommand = 0x06
)

// CompletionCode is the status of a control response. Non-zero codes are
// errors.
type CompletionCode uint8

// Completion codes (DSP0236 Table 13; 80h–FFh are command specific).
const (
	CCSuccess        CompletionCode = 0x00
	CCError          CompletionCode = 0x01
	CCInvalidData    CompletionCode = 0x02
	CCInvalidLength  CompletionCode = 0x03
	CCNotReady       CompletionCode = 0x04
	CCUnsupportedCmd CompletionCode = 0x05
	// CCTypeNotSupported answers Get MCTP Version Support for a message
	// type the endpoint has no version for.
	CCTypeNotSupported CompletionCode = 0x80
)

func (c CompletionCode) Error() string {
	switch c {
	case CCSuccess:
		return "mctp control: success"
	case CCError:
		return "mctp control: error"
	case CCInvalidData:
		return "mctp control: invalid data"
	case CCInvalidLength:
		return "mctp control: invalid length"
	case CCNotReady:
		return "mctp control: not ready"
	case CCUnsupportedCmd:
		return "mctp control: unsupported command"
	case CCTypeNotSupported:
		return "mctp control: message type not supported"
	}
	return fmt.Sprintf("mctp control: completion code %#02x", uint8(c))
}

// Get Endpoint ID endpoint-type byte: bits 5:4 endpoint type (00b simple
// endpoint), bits 1:0 EID type (01b static EID supported, as libmctp).
const endpointTypeSimpleStatic = 0x01

// versionMCTP131 is the version entry 1.3.1 (F1 F3 F1 00 on the wire)
// reported for the base specification (FFh) and the control protocol (00h).
const versionMCTP131 = 0xF1F3F100

// ControlHeader is the two bytes after the type byte of a control message.
type ControlHeader struct {
	Request    bool
	Datagram   bool
	InstanceID uint8 // 0..31
	Command    ControlCommand
}

// ctrlHeaderLen is the size of ControlHeader on the wire.
const ctrlHeaderLen = 2

// Append appends the encoded header to dst.
func (h ControlHeader) Append(dst []byte) []byte {
	b := h.InstanceID & 0x1F
	if h.Request {
		b |= 0x80
	}
	if h.Datagram {
		b |= 0x40
	}
	return append(dst, b, byte(h.Command))
}

// ParseControlHeader decodes the header at the start of a control message
// (type byte already removed).
func ParseControlHeader(msg []byte) (ControlHeader, error) {
	if len(msg) < ctrlHeaderLen {
		return ControlHeader{}, fmt.Errorf("mctp: control header: %d bytes: %w", len(msg), ErrMalformed)
	}
	return ControlHeader{
		Request:    msg[0]&0x80 != 0,
		Datagram:   msg[0]&0x40 != 0,
		InstanceID: msg[0] & 0x1F,
		Command:    ControlCommand(msg[1]),
	}, nil
}

// controlResponder answers the control requests an endpoint must handle.
type controlResponder struct {
	eid   EID
	types []MsgType // control first, no duplicates
}

// respond builds the response to the control request msg (type byte
// removed) and reports whether one must be sent: responses are suppressed
// for datagrams, for messages that are not requests and for messages too
// short to carry a header.
func (c *controlResponder) respond(msg []byte) ([]byte, bool) {
	h, err := ParseControlHeader(msg)
	if err != nil || !h.Request || h.Datagram {
		return nil, false
	}
	data := msg[ctrlHeaderLen:]
	resp := ControlHeader{InstanceID: h.InstanceID, Command: h.Command}.Append(make([]byte, 0, 16))
	switch h.Command {
	case CmdGetEndpointID:
		return append(resp, byte(CCSuccess), byte(c.eid), endpointTypeSimpleStatic, 0), true
	case CmdGetVersionSupport:
		if len(data) < 1 {
			return append(resp, byte(CCInvalidLength)), true
		}
		switch data[0] {
		case 0xFF, byte(MsgTypeControl):
			resp = append(resp, byte(CCSuccess), 1)
			return binary.BigEndian.AppendUint32(resp, versionMCTP131), true
		}
		return append(resp, byte(CCTypeNotSupported)), true
	case CmdGetMessageTypeSupport:
		resp = append(resp, byte(CCSuccess), byte(len(c.types)))
		for _, t := range c.types {
			resp = append(resp, byte(t))
		}
		return resp, true
	}
	return append(resp, byte(CCUnsupportedCmd)), true
}

// controlTypes returns the advertised types: control first, then the
// configured ones in order, without duplicates.
func controlTypes(cfg []MsgType) []MsgType {
	out := []MsgType{MsgTypeControl}
	for _, t := range cfg {
		t &^= icBit
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// parseControlResponse checks a control response against the request's
// instance ID and command and returns the data after the completion code.
// A non-zero completion code is returned as a CompletionCode error.
func parseControlResponse(msg []byte, iid uint8, cmd ControlCommand) ([]byte, error) {
	h, err := ParseControlHeader(msg)
	if err != nil {
		return nil, err
	}
	if h.Request || h.InstanceID != iid || h.Command != cmd {
		return nil, fmt.Errorf("mctp: control response %+v does not answer command %#02x instance %d: %w",
			h, uint8(cmd), iid, ErrMalformed)
	}
	if len(msg) < ctrlHeaderLen+1 {
		return nil, fmt.Errorf("mctp: control response without completion code: %w", ErrMalformed)
	}
	if cc := CompletionCode(msg[ctrlHeaderLen]); cc != CCSuccess {
		return nil, fmt.Errorf("mctp: control command %#02x: %w", uint8(cmd), cc)
	}
	return msg[ctrlHeaderLen+1:], nil
}
