// Package verbs is the RDMA transport of exports: one-sided RDMA READ,
// WRITE and atomics posted by the client's HCA straight into the box's
// memory, with no server CPU on the data path. It follows the TCP
// transport's semantics: a client opens a session over the TCP control
// channel (rdma/tcp, rdma/client), then sends one wire.OpConnect request
// carrying its queue pair's address; the server registers the export's
// memory (one memory region per device extent, in a protection domain of
// the export's own so that no other export's queue pair can reach it, with
// remote access rights from the export's permissions), connects a
// reliable-connected queue pair to the client's and answers with its own
// address and the regions' remote keys. The HCA enforces the bounds and
// rights of every access. It has run for real on soft-RoCE in a QEMU guest
// (rdma/vmtest, make vmtest-rdma); the client's Open picks this transport
// when both ends can and TCP otherwise.
//
// Revoking the export (or releasing its chunk) moves its queue pairs to
// the error state and deregisters its memory before Revoke returns, so no
// access happens after it; closing the control connection tears down that
// client's queue pair.
//
// The libibverbs code is behind the "verbs" build tag (cgo, libibverbs-dev)
// and is written for RoCE v2 as soft-RoCE (rdma_rxe) provides it: global
// routing with a GID, path MTU from the port, no LID routing assumed.
// Without the tag the package keeps its API and answers ErrNotBuilt, so
// the daemon builds everywhere. The handshake encoding below is plain Go.
//
// Atomics posted by an HCA are atomic with respect to other HCA atomics
// on the same device; they are not atomic with respect to the TCP
// transport's CPU atomics on the same word unless the device reports
// IBV_ATOMIC_GLOB. Mixing both transports' atomics on one word is not
// supported. The previous value comes back in host byte order, as
// rdma-core delivers it (soft-RoCE does); devices that reply big-endian
// are not supported.
package verbs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"cxlpool/rdma"
)

// Errors.
var (
	// ErrNotBuilt: the binary was built without the verbs tag.
	ErrNotBuilt = errors.New("verbs: built without RDMA verbs support (build tag verbs)")
	// ErrNoDevice: no RDMA device (or not the one named).
	ErrNoDevice = errors.New("verbs: no RDMA device")
)

// Config chooses the RDMA device and port.
type Config struct {
	// Device names the device ("rxe0", "mlx5_0"); empty is the first.
	Device string
	// Port is the device port [1].
	Port int
	// GIDIndex is the GID table entry to route with; negative picks the
	// first IPv4 entry (::ffff:a.b.c.d, routed as the netdev's IPv4
	// address), else the first entry that is not zero. On soft-RoCE every
	// entry is RoCE v2, and entry 0 (the link-local GID) reaches peers on
	// the same link only.
	GIDIndex int
	// Depth bounds the work requests queued per queue pair [64].
	Depth int
	// OpTimeout bounds a client's wait for one completion [5 s]. The
	// device retries a request that goes unanswered and then fails it,
	// but a revoked export's queue pair is gone, and soft-RoCE (Linux
	// 6.1's rdma_rxe, seen in the VM test) left such a READ pending for
	// minutes instead. Past the bound the client stops its queue pair
	// and answers rdma.ErrRevoked: one-sided verbs cannot tell a revoked
	// export from an unreachable box, and the session is over either way.
	OpTimeout time.Duration
	Logger    *slog.Logger
}

// handshakeVersion is the version of the OpConnect bodies.
const handshakeVersion = 1

// Endpoint is a queue pair's address, as RoCE needs it.
type Endpoint struct {
	QPN uint32 // 24 bits
	PSN uint32 // 24 bits
	LID uint16 // 0 on RoCE
	MTU uint8  // enum ibv_mtu (1: 256 … 5: 4096)
	GID [16]byte
}

// Region is one registered piece of an export: export bytes
// [Offset, Offset+Length) are at remote address Addr under RKey.
type Region struct {
	Offset, Addr, Length uint64
	RKey                 uint32
}

// Reply is the server's answer to OpConnect.
type Reply struct {
	Endpoint
	Regions []Region
}

// Sizes of the handshake encodings.
const (
	endpointLen = 32
	regionLen   = 32
	maxRegions  = 4096
)

// AppendBinary appends the 32-byte OpConnect request body:
//
//	 0  2  version (1)
//	 2  2  region count (0 in a request)
//	 4  4  QPN
//	 8  4  PSN
//	12  2  LID
//	14  1  MTU (enum ibv_mtu)
//	15  1  reserved, 0
//	16 16  GID
func (e Endpoint) AppendBinary(b []byte) []byte { return e.append(b, 0) }

func (e Endpoint) append(b []byte, regions int) []byte {
	b = binary.LittleEndian.AppendUint16(b, handshakeVersion)
	b = binary.LittleEndian.AppendUint16(b, uint16(regions))
	b = binary.LittleEndian.AppendUint32(b, e.QPN)
	b = binary.LittleEndian.AppendUint32(b, e.PSN)
	b = binary.LittleEndian.AppendUint16(b, e.LID)
	b = append(b, e.MTU, 0)
	return append(b, e.GID[:]...)
}

func errf(format string, args ...any) error {
	return fmt.Errorf("verbs: handshake: "+format+": %w", append(args, rdma.ErrProtocol)...)
}

func parseEndpoint(b []byte) (Endpoint, int, error) {
	if len(b) < endpointLen {
		return Endpoint{}, 0, errf("%d bytes, want at least %d", len(b), endpointLen)
	}
	if v := binary.LittleEndian.Uint16(b); v != handshakeVersion {
		return Endpoint{}, 0, errf("version %d, want %d", v, handshakeVersion)
	}
	e := Endpoint{QPN: binary.LittleEndian.Uint32(b[4:]), PSN: binary.LittleEndian.Uint32(b[8:]),
		LID: binary.LittleEndian.Uint16(b[12:]), MTU: b[14]}
	if e.QPN >= 1<<24 || e.PSN >= 1<<24 || e.MTU < 1 || e.MTU > 5 || b[15] != 0 {
		return Endpoint{}, 0, errf("QPN %#x PSN %#x MTU %d out of range", e.QPN, e.PSN, e.MTU)
	}
	copy(e.GID[:], b[16:32])
	return e, int(binary.LittleEndian.Uint16(b[2:])), nil
}

// ParseEndpoint decodes an OpConnect request body.
func ParseEndpoint(b []byte) (Endpoint, error) {
	e, n, err := parseEndpoint(b)
	if err != nil {
		return e, err
	}
	if n != 0 || len(b) != endpointLen {
		return Endpoint{}, errf("request of %d bytes with %d regions", len(b), n)
	}
	return e, nil
}

// AppendBinary appends the OpConnect response body: the server's endpoint
// with the region count at bytes 2–3, then per region
//
//	 0  8  export offset
//	 8  8  remote address
//	16  8  length
//	24  4  rkey
//	28  4  reserved, 0
func (r Reply) AppendBinary(b []byte) []byte {
	b = r.Endpoint.append(b, len(r.Regions))
	for _, g := range r.Regions {
		b = binary.LittleEndian.AppendUint64(b, g.Offset)
		b = binary.LittleEndian.AppendUint64(b, g.Addr)
		b = binary.LittleEndian.AppendUint64(b, g.Length)
		b = binary.LittleEndian.AppendUint32(b, g.RKey)
		b = append(b, 0, 0, 0, 0)
	}
	return b
}

// ParseReply decodes an OpConnect response body. The regions must tile
// the export from offset 0 without gaps or overlaps.
func ParseReply(b []byte) (Reply, error) {
	e, n, err := parseEndpoint(b)
	if err != nil {
		return Reply{}, err
	}
	if n == 0 || n > maxRegions || len(b) != endpointLen+n*regionLen {
		return Reply{}, errf("reply of %d bytes with %d regions", len(b), n)
	}
	r := Reply{Endpoint: e, Regions: make([]Region, n)}
	var next uint64
	for i := range r.Regions {
		p := b[endpointLen+i*regionLen:]
		g := Region{Offset: binary.LittleEndian.Uint64(p), Addr: binary.LittleEndian.Uint64(p[8:]),
			Length: binary.LittleEndian.Uint64(p[16:]), RKey: binary.LittleEndian.Uint32(p[24:])}
		if g.Offset != next || g.Length == 0 || g.Offset+g.Length < g.Offset || g.Addr+g.Length < g.Addr ||
			binary.LittleEndian.Uint32(p[28:]) != 0 {
			return Reply{}, errf("region %d (%#x+%#x) does not follow %#x", i, g.Offset, g.Length, next)
		}
		next = g.Offset + g.Length
		r.Regions[i] = g
	}
	return r, nil
}

// Size is the export's length: the end of the last region.
func (r Reply) Size() uint64 {
	g := r.Regions[len(r.Regions)-1]
	return g.Offset + g.Length
}

// locate splits n bytes at export offset off into per-region pieces.
func locate(regions []Region, off, n uint64, fn func(g Region, goff, k uint64) error) error {
	if len(regions) == 0 {
		return rdma.ErrRange
	}
	last := regions[len(regions)-1]
	if off > last.Offset+last.Length || n > last.Offset+last.Length-off {
		return rdma.ErrRange
	}
	for _, g := range regions {
		if n == 0 {
			return nil
		}
		if off >= g.Offset+g.Length {
			continue
		}
		o := off - g.Offset
		k := min(g.Length-o, n)
		if err := fn(g, o, k); err != nil {
			return err
		}
		off += k
		n -= k
	}
	return nil
}

// pickGID chooses the GID table entry as Config.GIDIndex says, reading
// entries with gid; a zero GID is unused.
func pickGID(index, entries int, gid func(int) ([16]byte, bool)) (int, [16]byte) {
	if index >= 0 {
		if g, ok := gid(index); ok && g != ([16]byte{}) && index < entries {
			return index, g
		}
		return 0, [16]byte{}
	}
	first, firstG := -1, [16]byte{}
	for i := range entries {
		g, ok := gid(i)
		if !ok || g == ([16]byte{}) {
			continue
		}
		if isIPv4GID(g) {
			return i, g
		}
		if first < 0 {
			first, firstG = i, g
		}
	}
	return max(first, 0), firstG
}

// isIPv4GID says whether g is an IPv4-mapped IPv6 address.
func isIPv4GID(g [16]byte) bool {
	return g[10] == 0xff && g[11] == 0xff && [10]byte(g[:10]) == [10]byte{}
}
