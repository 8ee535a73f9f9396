// Package kv is the KV-cache store of the box: namespaces of blocks kept in
// pool memory that the hosts cabled to the box share, and the index that
// says where each block lives.
//
// The box keeps only the index. A namespace is backed by chunks of shared
// Dynamic Capacity (one tag each, granted to every member host through the
// dcd Manager); a client on a member host asks the index where to write a
// block (Put), writes the bytes itself through its own mapping of the
// chunk, and makes the key visible (Commit); a reader asks where a key's
// block is (Get) and reads the bytes itself. The box's CPU never copies a
// block.
//
// The index (index.go) is in memory, made durable by a write-ahead log with
// group commit (wal.go): a commit or delete is answered only once it is on
// disk, space is reused only once the record that freed it is, and
// uncommitted reservations are never logged, so after a crash at any point
// every committed block is back, nothing uncommitted is visible and no
// space is leaked. Service (service.go) runs namespaces on the capacity
// Manager; Server (server.go) speaks the binary protocol of kv/wire to
// clients (kv/client).
package kv

import (
	"errors"
	"time"

	"cxlpool/dcd"
	"cxlpool/fabric/cci"
)

// Errors. Each names the rule that refused; the server maps each to one
// wire status.
var (
	ErrNotFound    = errors.New("kv: not found")
	ErrDenied      = errors.New("kv: namespace, host or token refused")
	ErrInvalid     = errors.New("kv: invalid request")
	ErrNoSpace     = errors.New("kv: namespace full: nothing evictable and it may not grow")
	ErrExists      = errors.New("kv: key already stored or being stored")
	ErrStale       = errors.New("kv: block evicted or replaced since it was located")
	ErrExpired     = errors.New("kv: reservation's lease expired")
	ErrBusy        = errors.New("kv: limit reached")
	ErrUnavailable = errors.New("kv: index unavailable")
	ErrPinned      = errors.New("kv: blocks are pinned")
	ErrConflict    = errors.New("kv: conflicts with the namespace's state")
)

// RackHost is the host ID a remote rack says HELLO with. A rack is not a
// member host: it reaches the namespace's chunks through their exports
// (rdma), never through a grant, so it is kept apart from Members and
// nothing is granted to it. LD-IDs of real heads are small (0–7), so this
// one never collides.
const RackHost dcd.HostID = 0xFFFF

// Limits of keys and names.
const (
	MaxKey       = 1024
	MaxNameLen   = 63
	TokenSize    = 32
	DefaultAlign = 4096
)

// Block is a block's location and identity: Length bytes at Offset of
// the chunk's capacity (its extents laid end to end, as a host maps
// them), live while (ID, Gen) is.
type Block struct {
	ID     uint64
	Gen    uint64
	Chunk  dcd.ChunkID
	Tag    cci.Tag
	Offset uint64
	Length uint64
}

// ChunkInfo is one chunk of a namespace.
type ChunkInfo struct {
	ID      dcd.ChunkID
	Tag     cci.Tag
	Size    uint64
	Extents []cci.Extent // where the chunk is on the device (DPA), in mapping order
}

// Namespace is a namespace's settings and state.
type Namespace struct {
	Name      string
	ChunkSize uint64 // bytes of each chunk it adds
	Quota     uint64 // bytes of chunks it may hold
	Members   []dcd.HostID
	Rack      string // the remote rack the namespace is exported to ("": none)
	Chunks    []ChunkInfo
	Created   time.Time
	Stats     Stats
}

// Stats are a namespace's numbers.
type Stats struct {
	Blocks    uint64 // committed
	Used      uint64 // bytes of committed blocks
	Reserved  uint64 // bytes of uncommitted reservations
	Capacity  uint64 // bytes of its chunks
	Free      uint64 // bytes its allocator has free: Capacity less every live block (pinned deleted ones too)
	Evictions uint64 // since the daemon started
	Sessions  int
}

// Range is a piece of a block in device physical address space.
type Range struct{ DPA, Len uint64 }

// Evictor orders committed blocks for eviction (the shape of
// kv/evict.Policy). The index calls it under its own lock.
type Evictor interface {
	Add(id uint64, size uint64, where []Range)
	Touch(id uint64)
	Remove(id uint64)
	// Victims returns coldest-first block ids whose sizes sum to at least
	// need (or all it has), never one for which skip(id) is true.
	Victims(need uint64, skip func(id uint64) bool) []uint64
	Len() int
}

// validName: namespace names are what URLs and logs carry safely.
func validName(s string) bool {
	if len(s) == 0 || len(s) > MaxNameLen {
		return false
	}
	for i, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '-' || c == '_' || c == '.') && i > 0:
		default:
			return false
		}
	}
	return true
}
