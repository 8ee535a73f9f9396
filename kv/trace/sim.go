package trace

import (
	"fmt"
	"time"

	"cxlpool/kv/evict"
)

// SimConfig configures Simulate. Zero fields take the defaults noted.
type SimConfig struct {
	// Capacity of the namespace in bytes (default half the trace's live
	// working set, Trace.Live), rounded down to whole blocks. Half of
	// every distinct block (WorkingSet) would be generous: most distinct
	// blocks are dead, used once or never again.
	Capacity uint64
	// Locations is how many block locations each host remembers (a FIFO
	// of what it looked up or wrote). A host re-reads a remembered block
	// straight from its DAX mapping without asking the index where it is
	// (a CHECK after the copy, not a use); only a stale location sends it
	// back to the index. 0 means unbounded; negative means none (every read asks the
	// index, which then sees every use).
	Locations int
	// CHMU is the hotness model fed with every access.
	CHMU CHMUConfig
	// CountWrites also counts the writes of new blocks as CHMU accesses
	// (default: reads only, the CHMU's access-type filter set to reads,
	// since a write says nothing about reuse).
	CountWrites bool
}

// Factory builds the policy under test; Simulate gives it its CHMU model
// and its simulated clock.
type Factory func(h evict.Heat, now func() time.Time) evict.Policy

// Result is what one policy achieved on one trace.
type Result struct {
	Policy   string
	Capacity uint64 // bytes
	Requests int
	Blocks   int // full blocks the prompts asked for
	Hits     int // blocks reused from the pool
	// HitRate is Hits / Blocks.
	HitRate         float64
	BytesReused     uint64 // KV read from the pool instead of recomputed
	BytesRecomputed uint64
	Evictions       int
	IndexLookups    int // reads that asked the index (hits and misses)
	DAXRereads      int // hits through a remembered location, unseen by the index
	StaleLocations  int // remembered locations the generation check found evicted
	Unstored        int // new blocks not stored: everything evictable was pinned
	MaxUsed         uint64
	CHMUAccesses    uint64 // 4 KiB-unit accesses counted
	// Reused is each request's blocks reused from the pool, in trace
	// order: what a request fetches (kv/client's BenchmarkTraceFetch).
	Reused []int
}

func (r Result) String() string {
	return fmt.Sprintf("%s: hit rate %.4f (%d/%d blocks), %.1f GiB reused, %.1f GiB recomputed, %d evictions, %d index look-ups, %d DAX re-reads, %d stale",
		r.Policy, r.HitRate, r.Hits, r.Blocks, float64(r.BytesReused)/(1<<30), float64(r.BytesRecomputed)/(1<<30),
		r.Evictions, r.IndexLookups, r.DAXRereads, r.StaleLocations)
}

type stored struct {
	id   uint64
	slot uint64
}

// locs is one host's remembered locations, bounded FIFO.
type locs struct {
	m     map[Key]stored
	ring  []Key
	head  int
	bound int
}

func (l *locs) get(k Key) (stored, bool) { s, ok := l.m[k]; return s, ok }

func (l *locs) put(k Key, s stored) {
	if l.bound < 0 {
		return
	}
	if _, ok := l.m[k]; !ok && l.bound > 0 {
		if len(l.ring) < l.bound {
			l.ring = append(l.ring, k)
		} else {
			delete(l.m, l.ring[l.head])
			l.ring[l.head] = k
			l.head = (l.head + 1) % l.bound
		}
	}
	l.m[k] = s
}

func (l *locs) drop(k Key) { delete(l.m, k) } // a FIFO slot may outlive it: harmless

// epoch0 is the simulated wall clock at the trace's start.
var epoch0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// Simulate runs t against a namespace of cfg.Capacity managed by the
// policy mk builds, and reports what it reused.
//
// The model: the namespace has whole-block slots at consecutive DPAs; a
// put takes a free slot (evicting the policy's victims first, never a
// block the current request is using, which it pins); a get that hits
// touches the block in the policy, and the host remembers the location.
// Every read is a CHMU access of the block's DPA range; a re-read through
// a remembered location is only that, plus the protocol's CHECK of
// (block, gen) after the copy, which the index does not count as a use;
// when the block was evicted meanwhile the CHECK says STALE, the bytes
// read from the old slot are dropped and the reader asks the index.
// Prefix reuse stops at the first miss; the blocks after it are
// recomputed, and stored unless they already are (the server's exists
// check, which touches them).
func Simulate(t *Trace, cfg SimConfig, name string, mk Factory) (Result, error) {
	if cfg.Capacity == 0 {
		cfg.Capacity = uint64(t.Live()) * BlockBytes / 2
	}
	slots := cfg.Capacity / BlockBytes
	if slots == 0 {
		return Result{}, fmt.Errorf("trace: capacity %d holds no %d-byte block", cfg.Capacity, uint64(BlockBytes))
	}
	chmu := newCHMU(cfg.CHMU)
	var clock time.Time = epoch0
	var heat evict.Heat
	if chmu != nil {
		heat = chmu
	}
	pol := mk(heat, func() time.Time { return clock })

	res := Result{Policy: name, Capacity: slots * BlockBytes, Requests: len(t.Requests)}
	byKey := make(map[Key]stored)
	keyOf := make(map[uint64]Key)
	var free []uint64
	var nextSlot, nextID, used uint64
	hosts := make([]locs, t.Config.Hosts)
	for i := range hosts {
		hosts[i] = locs{m: make(map[Key]stored), bound: cfg.Locations}
	}
	pinned := make(map[uint64]bool)
	skip := func(id uint64) bool { return pinned[id] }
	dpa := func(slot uint64) uint64 { return slot * BlockBytes }

	res.Reused = make([]int, 0, len(t.Requests))
	for _, r := range t.Requests {
		hits0 := res.Hits
		clock = epoch0.Add(r.At)
		chmu.advance(r.At)
		clear(pinned)
		loc := &hosts[r.Host]
		broken := false
		for _, k := range r.Blocks {
			res.Blocks++
			b, present := byKey[k]
			if !broken {
				if s, ok := loc.get(k); ok {
					if present && s.id == b.id {
						chmu.access(dpa(b.slot), BlockBytes)
						res.Hits++
						res.DAXRereads++
						pinned[b.id] = true
						continue
					}
					// The reader copied the block out of the old slot, then
					// the CHECK said STALE: the CHMU saw a full read there.
					chmu.access(dpa(s.slot), BlockBytes)
					res.StaleLocations++
					loc.drop(k)
				}
				res.IndexLookups++
				if present {
					pol.Touch(b.id)
					chmu.access(dpa(b.slot), BlockBytes)
					res.Hits++
					loc.put(k, b)
					pinned[b.id] = true
					continue
				}
				broken = true
			}
			if present {
				pol.Touch(b.id)
				continue
			}
			if used+BlockBytes > res.Capacity {
				for _, id := range pol.Victims(used+BlockBytes-res.Capacity, skip) {
					vk := keyOf[id]
					v := byKey[vk]
					pol.Remove(id)
					delete(byKey, vk)
					delete(keyOf, id)
					free = append(free, v.slot)
					used -= BlockBytes
					res.Evictions++
				}
				if used+BlockBytes > res.Capacity {
					res.Unstored++
					continue
				}
			}
			var slot uint64
			if n := len(free); n > 0 {
				slot, free = free[n-1], free[:n-1]
			} else {
				slot = nextSlot
				nextSlot++
			}
			nextID++
			b = stored{id: nextID, slot: slot}
			byKey[k], keyOf[b.id] = b, k
			used += BlockBytes
			res.MaxUsed = max(res.MaxUsed, used)
			pol.Add(b.id, BlockBytes, []evict.Range{{DPA: dpa(slot), Len: BlockBytes}})
			if cfg.CountWrites {
				chmu.access(dpa(slot), BlockBytes)
			}
			loc.put(k, b)
			pinned[b.id] = true
		}
		res.Reused = append(res.Reused, res.Hits-hits0)
	}
	res.HitRate = float64(res.Hits) / float64(max(res.Blocks, 1))
	res.BytesReused = uint64(res.Hits) * BlockBytes
	res.BytesRecomputed = uint64(res.Blocks-res.Hits) * BlockBytes
	if chmu != nil {
		res.CHMUAccesses = chmu.Accesses
	}
	return res, nil
}

// LRU is evict.NewLRU as a Factory.
func LRU(evict.Heat, func() time.Time) evict.Policy { return evict.NewLRU() }

// Hot is evict.NewHot as a Factory.
func Hot(h evict.Heat, now func() time.Time) evict.Policy { return evict.NewHot(h, now) }
