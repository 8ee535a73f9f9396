package kvstore

import (
	"slices"
	"strconv"
	"strings"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"cxlpool/kv"
)

// The KV store's block events on the event service, for a serving
// framework's KV-aware router that follows the box over Redfish (SSE,
// EventLog, push) rather than the fleet plane. Each is a
// ResourceEvent.ResourceStateChanged whose OriginOfCondition is the
// namespace and whose arguments are the namespace's URI and the change:
//
//	"BlockStored 42,18234..."    blocks committed (their 64-bit block hashes, kv.KeyHash)
//	"BlockStored 43,44 parent=42 tokens=256,256"
//	                             the same, for blocks whose clients told their sequence (kv.Seq):
//	                             the hash the first continues, each block's token count
//	"BlockRemoved 42"            blocks deleted, evicted or shrunk away
//	"AllBlocksCleared"           every block of the namespace is gone
//
// The hashes are the decimal numbers the fleet plane's RouterEvent
// carries for the same blocks; one BlockStored is one chain (kv.Event);
// a large change is split into messages of at most kvEventHashes
// hashes, in order (a chain's next message has the last hash before it
// as its parent). parent= is left out when there is none, tokens= when
// no block of the message has a count (a 0 in the list: not told).
const (
	MsgKVStateChanged = "ResourceEvent.ResourceStateChanged"
	kvEventHashes     = 64
	kvEventBuffer     = 1024
)

// feedKVEvents publishes the KV store's block events until the service
// closes.
func (s *Server) feedKVEvents() {
	if s.cfg.KVEvents == nil {
		return
	}
	ch, cancel := s.cfg.KVEvents(kvEventBuffer)
	pool.Feed(s.ctx, s.bg, ch, cancel, func(e kv.Event) {
		for _, ev := range kvEvents(e) {
			s.Publish(ev)
		}
	})
}

// kvEvents is one block event as event-service events.
func kvEvents(e kv.Event) []redfish.Event {
	origin := KVNamespaceURI(e.Namespace)
	one := func(change string) redfish.Event {
		return redfish.Event{MessageKey: MsgKVStateChanged, Args: []string{origin, change}, Origin: origin}
	}
	var word string
	switch e.Kind {
	case kv.EventStored:
		word = "BlockStored"
	case kv.EventRemoved:
		word = "BlockRemoved"
	case kv.EventCleared:
		return []redfish.Event{one("AllBlocksCleared")}
	default:
		return nil
	}
	var out []redfish.Event
	parent := e.Parent
	for bs := range slices.Chunk(e.Blocks, kvEventHashes) {
		var b strings.Builder
		b.WriteString(word)
		tokens := false
		for i, blk := range bs {
			if i == 0 {
				b.WriteByte(' ')
			} else {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatUint(blk.Hash, 10))
			tokens = tokens || blk.Tokens != 0
		}
		if e.Kind == kv.EventStored {
			if parent != nil {
				b.WriteString(" parent=" + strconv.FormatUint(*parent, 10))
			}
			if tokens {
				for i, blk := range bs {
					if i == 0 {
						b.WriteString(" tokens=")
					} else {
						b.WriteByte(',')
					}
					b.WriteString(strconv.FormatUint(uint64(blk.Tokens), 10))
				}
			}
			if last := bs[len(bs)-1].Hash; parent != nil || tokens {
				parent = &last // the chain goes on in the next message
			}
		}
		out = append(out, one(b.String()))
	}
	return out
}
