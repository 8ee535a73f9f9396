// Package serial implements the DMTF MCTP serial binding (DSP0253): it
// frames one MCTP packet per frame on a byte stream (TCP or Unix socket,
// tty, USB bulk pipe) and recovers packets from a stream that may split,
// merge or corrupt frames (shared/specs/cxl-wire.md §1.4).
//
// Frame layout: 7Eh | revision 01h | byte count N | packet (7Eh/7Dh stuffed)
// | FCS high | FCS low | 7Eh. The FCS is the RFC 1662 FCS-16 register seeded
// with FFFFh, without the final complement, sent MSB first. Only the packet
// bytes are stuffed; revision, count and FCS go on the wire raw, as Linux,
// libmctp and mctp-rs do.
package serial

import (
	"errors"
	"fmt"
	"slices"
)

// Wire constants of the DSP0253 framing.
const (
	// Flag opens and closes every frame.
	Flag = 0x7E
	// Escape starts a two-byte escape; the next byte is the original XOR 20h.
	Escape = 0x7D
	// Revision is the only defined serial protocol revision.
	Revision = 0x01
	// FCSInit seeds the frame check sequence. Linux before 6.2 wrongly used 0.
	FCSInit = 0xFFFF
	// MinCount is the smallest byte count: an MCTP transport header alone.
	MinCount = 4
	// DefaultMaxCount is the project's largest packet (4-byte header plus
	// the 64-byte baseline MTU), also the Linux mctp-serial fixed MTU.
	DefaultMaxCount = 68
	// MaxCount is the largest packet the one-byte count field can describe.
	MaxCount = 255
)

// escapeXOR turns 7Eh/7Dh into 5Eh/5Dh and back.
const escapeXOR = 0x20

// ErrPacketSize reports a packet whose length is outside MinCount..MaxCount
// or above a link's configured maximum.
var ErrPacketSize = errors.New("serial: packet size out of range")

// FCS16 feeds p into the FCS-16 register crc and returns the new register.
// Start with FCSInit and feed the revision, the byte count and the unescaped
// packet bytes; the result goes on the wire as byte(f>>8), byte(f). There is
// no final complement, so this is CRC-16/MCRF4XX, not PPP's CRC-16/X-25.
func FCS16(crc uint16, p []byte) uint16 {
	for _, b := range p {
		crc = fcsByte(crc, b)
	}
	return crc
}

// fcsByte is one step of the reflected 8408h CRC, computed without a table
// (the classic byte-wise form of x^16+x^12+x^5+1) so the package keeps no
// package-level state.
func fcsByte(crc uint16, b byte) uint16 {
	x := b ^ byte(crc)
	x ^= x << 4
	return crc>>8 ^ uint16(x)<<8 ^ uint16(x)<<3 ^ uint16(x>>4)
}

// AppendFrame appends the DSP0253 frame carrying pkt to dst and returns the
// extended slice. pkt must be MinCount..MaxCount bytes; callers that talk to
// Linux or libmctp peers must also keep it at or below DefaultMaxCount.
func AppendFrame(dst, pkt []byte) ([]byte, error) {
	if len(pkt) < MinCount || len(pkt) > MaxCount {
		return dst, fmt.Errorf("serial: frame: packet of %d bytes, want %d..%d: %w",
			len(pkt), MinCount, MaxCount, ErrPacketSize)
	}
	n := byte(len(pkt))
	// Worst case every packet byte is stuffed.
	dst = slices.Grow(dst, 2*len(pkt)+6)
	dst = append(dst, Flag, Revision, n)
	fcs := fcsByte(fcsByte(FCSInit, Revision), n)
	for _, c := range pkt {
		fcs = fcsByte(fcs, c)
		if c == Flag || c == Escape {
			dst = append(dst, Escape, c^escapeXOR)
		} else {
			dst = append(dst, c)
		}
	}
	return append(dst, byte(fcs>>8), byte(fcs), Flag), nil
}
