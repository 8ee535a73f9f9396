package stream

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	"cxlpool/hmu/agg"
)

// Hub fans frames out to subscribers. Publish never blocks: each
// subscriber has a bounded queue and a frame that does not fit is dropped
// for that subscriber and counted. The hub also keeps the latest frame of
// each kind and scope, so a new subscriber starts with a full picture.
type Hub struct {
	queue int

	mu       sync.RWMutex
	subs     map[*Sub]struct{}
	retained map[retainKey][]byte
	seq      uint32
	closed   bool

	published atomic.Uint64
	dropped   atomic.Uint64
}

type retainKey struct {
	kind  Kind
	scope int16
}

// NewHub returns a hub whose subscribers queue up to queue frames
// (default 16: 1.6 s at 10 frames/s).
func NewHub(queue int) *Hub {
	if queue <= 0 {
		queue = 16
	}
	return &Hub{queue: queue, subs: map[*Sub]struct{}{}, retained: map[retainKey][]byte{}}
}

// Sub is one subscriber.
type Sub struct {
	hub     *Hub
	c       chan []byte
	dropped atomic.Uint64
	once    sync.Once
}

// C delivers frames. It is closed by Close.
func (s *Sub) C() <-chan []byte { return s.c }

// Dropped is how many frames this subscriber lost to a full queue.
func (s *Sub) Dropped() uint64 { return s.dropped.Load() }

// Close unsubscribes.
func (s *Sub) Close() {
	s.once.Do(func() {
		s.hub.mu.Lock()
		delete(s.hub.subs, s)
		s.hub.mu.Unlock()
		close(s.c)
	})
}

// Subscribe adds a subscriber, queueing the retained frames first. On a
// closed hub the subscription comes already closed.
func (h *Hub) Subscribe() *Sub {
	s := &Sub{hub: h, c: make(chan []byte, h.queue)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		s.once.Do(func() { close(s.c) })
		return s
	}
	for _, f := range h.retained {
		select {
		case s.c <- f:
		default:
		}
	}
	h.subs[s] = struct{}{}
	return s
}

// Close ends every subscription, so their handlers hang up, and makes
// later subscriptions start closed: the owner of the frames is going away.
// Publishing after Close reaches nobody.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	subs := make([]*Sub, 0, len(h.subs))
	for s := range h.subs {
		subs = append(subs, s)
	}
	h.mu.Unlock()
	for _, s := range subs {
		s.Close()
	}
}

// NextSeq returns the next frame sequence number.
func (h *Hub) NextSeq() uint32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	return h.seq
}

// Publish offers frame to every subscriber without waiting. The frame is
// shared, not copied: do not modify it afterwards.
func (h *Hub) Publish(frame []byte) {
	if hd, err := DecodeHeader(frame); err == nil {
		k := retainKey{kind: hd.Kind}
		if hd.Kind == KindTopK && len(frame) >= topKLen {
			k.scope = int16(binary.LittleEndian.Uint16(frame[16:]))
		}
		h.mu.Lock()
		h.retained[k] = frame
		h.mu.Unlock()
	}
	h.published.Add(1)
	h.mu.RLock()
	defer h.mu.RUnlock()
	for s := range h.subs {
		select {
		case s.c <- frame:
		default:
			s.dropped.Add(1)
			h.dropped.Add(1)
		}
	}
}

// Stats are the hub's counters.
type Stats struct {
	Clients   int
	Published uint64 // frames offered
	Dropped   uint64 // frame deliveries lost to full queues, all clients
}

// Stats returns the counters.
func (h *Hub) Stats() Stats {
	h.mu.RLock()
	n := len(h.subs)
	h.mu.RUnlock()
	return Stats{Clients: n, Published: h.published.Load(), Dropped: h.dropped.Load()}
}

// Source is what the pump renders frames from; *agg.Collector is one.
type Source interface {
	Heatmap() agg.Heatmap
	Top(scope, n int) []agg.Hot
	Report() agg.Report
}

// Render builds one round of frames: the heatmap, then a top-K update per
// scope (hosts, agg.Shared, agg.Pool) with up to n entries.
func (h *Hub) Render(src Source, now time.Time, scopes []int, n int) [][]byte {
	out := [][]byte{AppendHeatmap(nil, HeatmapFrame(h.NextSeq(), now, src.Heatmap()))}
	rep := src.Report()
	bound := map[int]uint64{}
	for _, s := range rep.Scopes {
		bound[s.Scope] = s.ErrorBound
	}
	for _, sc := range scopes {
		f := TopKFrame(h.NextSeq(), now, sc, rep.UnitSize, bound[sc], src.Top(sc, n))
		out = append(out, AppendTopK(nil, f))
	}
	return out
}

// Pump renders and publishes a round of frames at every tick until ctx
// ends. Rendering reads snapshots under the collector's lock for a few
// microseconds per scope; ingest never waits on a client.
func (h *Hub) Pump(ctx context.Context, tick <-chan time.Time, src Source, scopes []int, n int) {
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick:
			for _, f := range h.Render(src, now, scopes, n) {
				h.Publish(f)
			}
		}
	}
}
