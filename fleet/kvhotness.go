package fleet

import (
	"fmt"
	"time"
)

// KVHotness is a KV namespace's periodic summary on the fleet plane,
// beside its block events: small (counts and a few hot blocks), so a
// KV-aware router can weigh boxes by what they hold and what is read.
// Published every interval per namespace on KVHotnessSubject.
type KVHotness struct {
	WorkerID  int64     `json:"worker_id"` // as in RouterEvent
	Box       BoxID     `json:"box"`
	Namespace string    `json:"namespace"`
	Time      time.Time `json:"time"`
	// IntervalSeconds is how often the box publishes the summary.
	IntervalSeconds float64 `json:"interval_s"`
	Blocks          uint64  `json:"blocks"` // committed
	Bytes           uint64  `json:"bytes"`
	// Hits and Misses count lookups since the box started (a router
	// takes the difference of two summaries).
	Hits   uint64 `json:"hits"`
	Misses uint64 `json:"misses"`
	// Top are the hottest blocks by the device's hotness monitor (CHMU),
	// hottest first; empty without telemetry or without reads.
	Top []KVHotBlock `json:"top"`
}

// KVHotBlock is one hot block: its hash as in the block events, its
// length in bytes and its CHMU heat density.
type KVHotBlock struct {
	BlockHash uint64  `json:"block_hash"`
	Length    uint64  `json:"length"`
	Heat      float64 `json:"heat"`
}

// KVHotnessSubject is where box publishes namespace's summaries:
// cxlpool.kv.<namespace>.<box>.hotness (the block events' subject with
// .hotness for .events, so cxlpool.kv.<namespace>.> has both).
func KVHotnessSubject(namespace string, box BoxID) (string, error) {
	if !validToken(namespace) {
		return "", fmt.Errorf("fleet: KV namespace %q: %w", namespace, ErrBadName)
	}
	return fmt.Sprintf("%s.%s.%s.hotness", KVSubjectRoot, namespace, box), nil
}
