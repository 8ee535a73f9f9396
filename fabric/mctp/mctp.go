// Package mctp implements the DMTF Management Component Transport Protocol
// as the Fabric Manager and the virtual box use it
// (shared/specs/cxl-wire.md §1.2–§1.3): the 4-byte transport header,
// packetization and reassembly, tag-matched request/response endpoints and
// the few MCTP control commands (DSP0236, message type 00h) an endpoint must
// answer.
//
// The package is transport-agnostic: an Endpoint moves whole packets through
// a PacketLink, which serial.Link (DSP0253 framing on a byte stream) and the
// in-memory Pipe implement. It deliberately does not import fabric/serial.
package mctp

import (
	"errors"
	"fmt"
)

// EID is an MCTP endpoint ID.
type EID uint8

// Special endpoint IDs. 8…254 are assignable.
const (
	// EIDNull addresses "the endpoint at the other end of this link"; it is
	// used before EIDs are assigned.
	EIDNull EID = 0x00
	// EIDBroadcast addresses every endpoint.
	EIDBroadcast EID = 0xFF
)

// MsgType is the 7-bit MCTP message type (byte 0 of a message, bits 6:0).
type MsgType uint8

// Message types used by the project (DSP0239; cxl-wire.md §1.2).
const (
	MsgTypeControl MsgType = 0x00 // MCTP control (DSP0236)
	MsgTypePLDM    MsgType = 0x01 // Platform Level Data Model
	MsgTypeFMAPI   MsgType = 0x07 // CXL FM-API command sets 51h–56h (DSP0234)
	MsgTypeCXLCCI  MsgType = 0x08 // CXL Type-3 CCI, everything else (DSP0281)
)

// Transport constants.
const (
	// HeaderLen is the size of the transport header on every packet.
	HeaderLen = 4
	// HeaderVersion is the only header version this package speaks.
	HeaderVersion = 0x01
	// BaselineMTU is the payload size every MCTP link must carry (DSP0236
	// §8.3.1); packets are then at most 68 bytes.
	BaselineMTU = 64
	// DefaultMaxMessage bounds a reassembled message (type byte included).
	// The largest CXL message is 1 + 12 + 1024 = 1037 bytes.
	DefaultMaxMessage = 1100
	// icBit is the integrity-check flag in the message type byte. The CXL
	// bindings define no integrity check.
	icBit = 0x80
)

// Sentinel errors. Errors returned by this package wrap them.
var (
	// ErrTimeout: no response arrived before the request's deadline.
	ErrTimeout = errors.New("mctp: request timed out")
	// ErrClosed: the endpoint or its link is closed.
	ErrClosed = errors.New("mctp: endpoint closed")
	// ErrTooLarge: a message exceeds the configured maximum size.
	ErrTooLarge = errors.New("mctp: message too large")
	// ErrMalformed: a packet or message does not follow the layout.
	ErrMalformed = errors.New("mctp: malformed")
	// ErrNoTag: Start found all eight tags for the destination in use, or
	// the link busy writing another message (Request waits instead).
	// Nothing was sent.
	ErrNoTag = errors.New("mctp: no free tag")
)

// Header is the MCTP transport header (cxl-wire.md §1.3):
//
//	byte 0  bits 3:0 header version (1), bits 7:4 reserved
//	byte 1  destination EID
//	byte 2  source EID
//	byte 3  bit 7 SOM, bit 6 EOM, bits 5:4 packet sequence, bit 3 TO, bits 2:0 tag
type Header struct {
	Version  uint8
	Dst, Src EID
	SOM, EOM bool
	Seq      uint8 // 0..3
	TO       bool  // tag owner: set by the requester, clear in the response
	Tag      uint8 // 0..7
}

// Marshal encodes h. Out-of-range Version, Seq and Tag are truncated to
// their bit fields.
func (h Header) Marshal() [HeaderLen]byte {
	f := (h.Seq&3)<<4 | h.Tag&7
	if h.SOM {
		f |= 0x80
	}
	if h.EOM {
		f |= 0x40
	}
	if h.TO {
		f |= 0x08
	}
	return [HeaderLen]byte{h.Version & 0x0F, byte(h.Dst), byte(h.Src), f}
}

// ParseHeader decodes the first HeaderLen bytes of p. Reserved bits are
// ignored; a header version other than 1 is an error because its layout
// is unknown.
func ParseHeader(p []byte) (Header, error) {
	if len(p) < HeaderLen {
		return Header{}, fmt.Errorf("mctp: header: %d bytes, need %d: %w", len(p), HeaderLen, ErrMalformed)
	}
	if v := p[0] & 0x0F; v != HeaderVersion {
		return Header{}, fmt.Errorf("mctp: header: version %d: %w", v, ErrMalformed)
	}
	f := p[3]
	return Header{
		Version: p[0] & 0x0F,
		Dst:     EID(p[1]),
		Src:     EID(p[2]),
		SOM:     f&0x80 != 0,
		EOM:     f&0x40 != 0,
		Seq:     f >> 4 & 3,
		TO:      f&0x08 != 0,
		Tag:     f & 7,
	}, nil
}

// PacketLink moves whole MCTP packets (transport header included).
// serial.Link and the ends of Pipe implement it.
type PacketLink interface {
	// ReadPacket blocks for the next packet and returns a slice the caller
	// owns. It returns an error once the link is closed or broken.
	ReadPacket() ([]byte, error)
	// WritePacket sends one packet. It must be safe for concurrent use.
	WritePacket(p []byte) error
	// Close closes the link and unblocks ReadPacket.
	Close() error
}

// PacketsWriter is a PacketLink that sends several packets in one go:
// serial.Link frames them all and writes them with one Write, so a
// message of many packets (an event record page is seventeen of the
// baseline 64 bytes) costs one system call or USB transfer instead of one
// per packet. The Endpoint uses it for each message when the link has it.
type PacketsWriter interface {
	// WritePackets sends ps in order, as WritePacket would one by one.
	WritePackets(ps [][]byte) error
}
