package kv

import (
	"cmp"
	"slices"
)

// Hotness is a namespace's summary for a KV-aware router (the fleet
// plane publishes it periodically beside the block events): how much it
// holds, how its lookups went, and which blocks the device's hotness
// monitor (CHMU) sees read most.
type Hotness struct {
	Namespace string
	Blocks    uint64 // committed
	Bytes     uint64 // of committed blocks (rounded to the allocation unit)
	// Hits and Misses count Get lookups since the daemon started: a key
	// committed, or not.
	Hits, Misses uint64
	// Top are the hottest blocks, hottest first; only blocks with heat.
	Top []HotBlock
}

// HotBlock is one block of a Hotness summary.
type HotBlock struct {
	Hash   uint64 // KeyHash of its key: the router's block hash
	Length uint64
	// Heat is the CHMU's heat density over the block's device ranges
	// (the length-weighted mean of heat(dpa, len) per range).
	Heat float64
}

// Hotness summarises every namespace, with up to top hot blocks each
// by heat (kv/evict's Heat source: appliance's CHMU telemetry). The
// index's lock is held only to copy where the blocks are; heat and
// hashes are computed after, so a summary does not stall the store.
func (ix *Index) Hotness(heat func(dpa, length uint64) float64, top int) []Hotness {
	type where struct {
		key    string
		length uint64
		ranges []Range
	}
	type nsCopy struct {
		h      Hotness
		blocks []where
	}
	ix.mu.Lock()
	all := make([]nsCopy, 0, len(ix.ns))
	for _, ns := range ix.ns {
		c := nsCopy{h: Hotness{Namespace: ns.name, Blocks: uint64(len(ns.keys)), Bytes: ns.used, Hits: ns.hits, Misses: ns.misses}}
		if heat != nil && top > 0 {
			c.blocks = make([]where, 0, len(ns.keys))
			for k, b := range ns.keys {
				if b.state == stCommitted {
					c.blocks = append(c.blocks, where{key: k, length: b.length, ranges: ns.ranges(b)})
				}
			}
		}
		all = append(all, c)
	}
	ix.mu.Unlock()
	out := make([]Hotness, 0, len(all))
	for _, c := range all {
		var hot []HotBlock
		for _, w := range c.blocks {
			var sum float64
			var n uint64
			for _, r := range w.ranges {
				sum += heat(r.DPA, r.Len) * float64(r.Len)
				n += r.Len
			}
			if n == 0 || sum <= 0 {
				continue
			}
			hot = append(hot, HotBlock{Hash: KeyHash([]byte(w.key)), Length: w.length, Heat: sum / float64(n)})
		}
		slices.SortFunc(hot, func(a, b HotBlock) int { return cmp.Or(cmp.Compare(b.Heat, a.Heat), cmp.Compare(a.Hash, b.Hash)) })
		if len(hot) > top {
			hot = hot[:top]
		}
		c.h.Top = hot
		out = append(out, c.h)
	}
	slices.SortFunc(out, func(a, b Hotness) int { return cmp.Compare(a.Namespace, b.Namespace) })
	return out
}
