// Package rdma exports pool memory to remote racks: a remote client named
// in an Export reaches the bytes of one chunk (or part of it) with
// one-sided READ, WRITE, 8-byte compare-and-swap and fetch-and-add, and
// batches of them, without any host taking part.
//
// The package holds the transport-neutral part: the domain (Export, Token,
// Perm, the errors), the Memory a box's capacity is reached through (an
// mmap of the virtual box's memfd, or of a DAX device on hardware, see
// rdma/dax), the Handle through which a transport touches one export's
// bytes, and the Service that creates, lists and revokes exports against
// the dcd ledger and keeps them consistent with grants (with a Store, such
// as rdma/sqlite, exports outlive a restart: see Service.Restore; only
// tokens' SHA-256 is ever kept). Transports live in
// rdma/tcp (with its client rdma/client) and rdma/verbs; the wire format is
// rdma/wire.
//
// Safety rests on three rules the Handle enforces for every transport:
// every access is bounds-checked against the export and permission-checked;
// every access happens between Pin and Unpin, and Revoke waits for pinned
// accesses to drain, so nothing touches an export's memory once Revoke has
// returned; and authentication answers ErrDenied, after the same constant
// time comparison, for an unknown export, a wrong token and a revoked
// export alike.
package rdma

import (
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"cxlpool/dcd"
)

// Errors. Those a remote client can see are mirrored one to one by wire
// status codes; the administrative ones wrap the dcd sentinels so the
// Redfish API maps them like every other domain error.
var (
	// ErrDenied: unknown export, wrong token, or an export that no longer
	// exists. One error on purpose: a client without the token learns
	// nothing about which exports exist.
	ErrDenied = errors.New("rdma: access denied")
	// ErrRevoked: the export was revoked (or expired, or its chunk was
	// released) while the client had it open.
	ErrRevoked = errors.New("rdma: export revoked")
	// ErrRange: an access outside the export.
	ErrRange = errors.New("rdma: access outside the export")
	// ErrPerm: the export does not allow the operation.
	ErrPerm = errors.New("rdma: operation not permitted by the export")
	// ErrAlign: an atomic operand that is not 8-byte aligned.
	ErrAlign = errors.New("rdma: atomic operand not 8-byte aligned")
	// ErrBusy: a per-connection or per-server limit was reached.
	ErrBusy = errors.New("rdma: limit reached")
	// ErrProtocol: the peer broke the wire protocol.
	ErrProtocol = errors.New("rdma: protocol error")

	// ErrNotFound: no export with that ID (administrative calls only).
	ErrNotFound = fmt.Errorf("rdma: export %w", dcd.ErrNotFound)
	// ErrInvalid: an invalid export request.
	ErrInvalid = fmt.Errorf("rdma: %w", dcd.ErrInvalid)
	// ErrNoExtents: the chunk holds no capacity on the device (it is not
	// granted to any host), so there are no bytes to export.
	ErrNoExtents = fmt.Errorf("rdma: chunk has no capacity on the device; grant it to a host first: %w", dcd.ErrConflict)
	// ErrTooMany: the service already holds its maximum of exports.
	ErrTooMany = fmt.Errorf("rdma: too many exports: %w", dcd.ErrConflict)
)

// ExportID names an export. IDs are random, so they can be shown in URIs
// without helping anyone guess another export; the token is the secret.
type ExportID string

// maxIDLen bounds an ExportID so that it fits the wire's one-byte length.
const maxIDLen = 64

// Valid reports whether id can name an export: 1–64 bytes of [A-Za-z0-9_-].
func (id ExportID) Valid() bool {
	if len(id) == 0 || len(id) > maxIDLen {
		return false
	}
	for _, c := range []byte(id) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// TokenLen is the size of a token in bytes.
const TokenLen = 32

// Token is an export's secret. Compare tokens only with Equal.
type Token [TokenLen]byte

// Equal compares in constant time, so the time a refusal takes says
// nothing about how much of a guessed token was right.
func (t Token) Equal(u Token) bool { return subtle.ConstantTimeCompare(t[:], u[:]) == 1 }

// IsZero reports whether t is unset (List and Get show tokens zeroed).
func (t Token) IsZero() bool { return t == Token{} }

// String is the unpadded base64url form given to clients.
func (t Token) String() string { return base64.RawURLEncoding.EncodeToString(t[:]) }

// MarshalText encodes t as String does.
func (t Token) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText parses the String form.
func (t *Token) UnmarshalText(b []byte) error {
	v, err := ParseToken(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// ParseToken parses the String form of a token.
func ParseToken(s string) (Token, error) {
	var t Token
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != TokenLen {
		return t, fmt.Errorf("rdma: token is not %d bytes of unpadded base64url: %w", TokenLen, ErrInvalid)
	}
	copy(t[:], b)
	return t, nil
}

// Perm is what an export allows.
type Perm uint8

// Permissions. Atomics need both: they read and write.
const (
	PermRead Perm = 1 << iota
	PermWrite

	PermReadWrite = PermRead | PermWrite
)

// Valid reports whether p is a non-empty set of known permissions.
func (p Perm) Valid() bool { return p != 0 && p&^PermReadWrite == 0 }

// Has reports whether p includes every permission in q.
func (p Perm) Has(q Perm) bool { return p&q == q }

// String is "r", "w" or "rw".
func (p Perm) String() string {
	var b strings.Builder
	if p.Has(PermRead) {
		b.WriteByte('r')
	}
	if p.Has(PermWrite) {
		b.WriteByte('w')
	}
	if p&^PermReadWrite != 0 || p == 0 {
		return fmt.Sprintf("Perm(%#x)", uint8(p))
	}
	return b.String()
}

// ParsePerm parses "r", "w" or "rw" (also "read", "write", "readwrite").
func ParsePerm(s string) (Perm, error) {
	switch strings.ToLower(s) {
	case "r", "read":
		return PermRead, nil
	case "w", "write":
		return PermWrite, nil
	case "rw", "wr", "readwrite", "read-write":
		return PermReadWrite, nil
	}
	return 0, fmt.Errorf("rdma: permission %q is not r, w or rw: %w", s, ErrInvalid)
}

// Export makes part of a chunk reachable by one named remote client.
type Export struct {
	ID     ExportID
	Chunk  dcd.ChunkID
	Client string // the remote endpoint's name, for people and audit logs
	// Token is the secret the client presents. Only Service.Create
	// returns it; Get and List return it zeroed.
	Token Token
	Perms Perm
	// Offset and Length select the exported bytes within the chunk's
	// capacity on the device (its extents ordered by shared sequence,
	// then DPA).
	Offset, Length uint64
	Expiry         time.Time // zero: never expires
	Created        time.Time
}

// CreateRequest asks for an export.
type CreateRequest struct {
	Chunk  dcd.ChunkID
	Client string
	Perms  Perm
	// Offset and Length select part of the chunk; Length 0 means up to
	// the end of the chunk's capacity.
	Offset, Length uint64
	Expiry         time.Time // zero: never
	// TTL, if positive, sets Expiry to TTL after creation by the
	// Service's clock, the one that enforces it (Expiry must then be
	// zero).
	TTL time.Duration
	// Hash, if non-zero, is the SHA-256 of a token the caller already
	// holds: the export is reached with that token, and Create returns
	// the export with Token zeroed. One secret then opens several exports
	// (a KV namespace's chunks, exported to one rack), and the caller
	// needs only the hash to export a chunk added later.
	Hash TokenHash
}
