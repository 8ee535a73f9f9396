package fleet

import (
	"context"
	"encoding/json"
	"fmt"
)

// KVEventPublisher is the hook the KV store calls when blocks of a
// namespace are stored, removed or all cleared. Each call publishes one
// RouterEvent (Dynamo's KV-event shape, below) on
// KVEventSubject(namespace, box) and returns once the stream acknowledged
// it; event ids increase per namespace, from 1 at the box's start (a
// router that sees the id go back knows the box restarted and its blocks
// are gone, which the Cleared event sent at start says too).
type KVEventPublisher interface {
	BlockStored(ctx context.Context, namespace string, parent *uint64, blocks []StoredBlock) error
	BlockRemoved(ctx context.Context, namespace string, hashes []uint64) error
	AllBlocksCleared(ctx context.Context, namespace string) error
}

// RouterEvent is Dynamo's KV-router event, field by field as its router
// decodes it from JSON:
//
//	{"worker_id": 7, "storage_tier": "external",
//	 "event": {"event_id": 12, "dp_rank": 0,
//	           "data": {"stored": {"parent_hash": 99, "blocks": [{"block_hash": 1, "tokens_hash": 2}]}}}}
//
// data is one of {"stored": {...}}, {"removed": {"block_hashes": [...]}}
// or the string "cleared".
type RouterEvent struct {
	// WorkerID is the box as Dynamo's router knows a worker: the low 63
	// bits of the device serial (the router takes a signed 64-bit id).
	WorkerID int64 `json:"worker_id"`
	// StorageTier is where the blocks live: "external" (pool memory
	// outside the GPU and its host).
	StorageTier string       `json:"storage_tier"`
	Event       KVCacheEvent `json:"event"`
}

// KVCacheEvent is one numbered event of a worker.
type KVCacheEvent struct {
	EventID uint64      `json:"event_id"`
	Data    KVEventData `json:"data"`
	DPRank  uint32      `json:"dp_rank"`
}

// KVEventData is exactly one of Stored, Removed or Cleared.
type KVEventData struct {
	Stored  *KVStored
	Removed *KVRemoved
	Cleared bool
}

// KVStored lists blocks stored after parent (the hash of the block they
// continue; nil for the first blocks of a sequence).
type KVStored struct {
	ParentHash *uint64       `json:"parent_hash"`
	Blocks     []StoredBlock `json:"blocks"`
}

// StoredBlock is one block: BlockHash is the hash of the sequence up to
// and including the block (Dynamo's ExternalSequenceBlockHash),
// TokensHash the hash of the block's own tokens (LocalBlockHash).
type StoredBlock struct {
	BlockHash  uint64 `json:"block_hash"`
	TokensHash uint64 `json:"tokens_hash"`
}

// KVRemoved lists the blocks removed.
type KVRemoved struct {
	BlockHashes []uint64 `json:"block_hashes"`
}

// MarshalJSON writes the externally tagged enum serde writes.
func (d KVEventData) MarshalJSON() ([]byte, error) {
	switch {
	case d.Stored != nil && d.Removed == nil && !d.Cleared:
		return json.Marshal(map[string]*KVStored{"stored": d.Stored})
	case d.Removed != nil && d.Stored == nil && !d.Cleared:
		return json.Marshal(map[string]*KVRemoved{"removed": d.Removed})
	case d.Cleared && d.Stored == nil && d.Removed == nil:
		return []byte(`"cleared"`), nil
	}
	return nil, fmt.Errorf("fleet: a KV event is exactly one of stored, removed, cleared")
}

// UnmarshalJSON reads what MarshalJSON writes.
func (d *KVEventData) UnmarshalJSON(b []byte) error {
	*d = KVEventData{}
	var s string
	if json.Unmarshal(b, &s) == nil {
		if s != "cleared" {
			return fmt.Errorf("fleet: KV event data %q: want \"cleared\"", s)
		}
		d.Cleared = true
		return nil
	}
	var m struct {
		Stored  *KVStored  `json:"stored"`
		Removed *KVRemoved `json:"removed"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("fleet: KV event data: %w", err)
	}
	if (m.Stored == nil) == (m.Removed == nil) {
		return fmt.Errorf("fleet: KV event data: exactly one of stored, removed")
	}
	d.Stored, d.Removed = m.Stored, m.Removed
	return nil
}

// WorkerID is the Dynamo worker id of the box whose device has serial.
func WorkerID(serial uint64) int64 { return int64(serial &^ (1 << 63)) }
