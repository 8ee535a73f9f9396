// Package topk finds the heaviest keys of a weighted stream in fixed memory
// with Space-Saving (Metwally, Agrawal, El Abbadi 2005), weighted form.
//
// A Summary of k counters monitors at most k keys. A monitored key's count
// grows by the weight; an unmonitored key takes over the counter with the
// smallest count m, starting at m + weight and remembering err = m. For a
// stream of total weight N this guarantees, for every key x with true
// weight f(x):
//
//   - monitored:   f(x) ≤ Count(x) ≤ f(x) + Err(x),  Err(x) ≤ Min() ≤ N/k
//   - unmonitored: f(x) ≤ Min() ≤ N/k
//
// so every key heavier than N/k is monitored, and Count − Err is a
// guaranteed lower bound. Decay multiplies every count, error and N by the
// same factor, which keeps the bounds for the decayed stream (up to one
// unit of rounding per decay).
//
// The structure is sized once: per slot a count, key, error and the links
// of a radix heap (Ahuja, Mehlhorn, Orlin, Tarjan 1990), which finds the
// minimum; and an open-addressing index with linear probing and
// backward-shift deletion (no tombstones, so it never degrades). A radix
// heap fits because the minimum never falls between decays (counts only
// grow, and a take-over starts at the minimum plus its weight): bucket b
// holds the counters whose count's highest bit differing from the last
// minimum is bit b−1, bucket 0 those equal to it. A hit that leaves its count's
// bucket unchanged — a hot key far above the minimum, the common case —
// moves nothing; a take-over pops bucket 0 in O(1) (in a long-tailed
// stream most counters churn just above the minimum, and hundreds share
// it); only when bucket 0 empties is the next bucket up split, each
// counter moving down at most 64 times between its own updates. A binary
// or 4-ary heap instead sifts the taken-over counter from the root to a
// leaf on every miss. Any counter at the minimum may be taken over, so
// the guarantees above hold unchanged. Nothing grows with the number of
// distinct keys: 41 bytes per counter plus a constant.
package topk

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
)

// Item is one monitored key.
type Item struct {
	Key   uint64
	Count uint64 // estimate: never below the true weight
	Err   uint64 // the estimate exceeds the true weight by at most Err
}

// Guaranteed is the weight the key is known to have had at least.
func (it Item) Guaranteed() uint64 { return it.Count - it.Err }

// Summary is a Space-Saving summary with k counters. Not safe for
// concurrent use.
type Summary struct {
	k    int
	size int    // monitored keys (slots 0 … size−1)
	n    uint64 // total weight

	// Per slot.
	cnt []uint64
	key []uint64
	err []uint64
	// The radix heap: slot lists per bucket (next, prev; none ends them),
	// each slot's bucket, and the buckets 1 … 64 that are not empty (bit
	// b−1). While the summary fills, last is 0 and bucket 0 is empty; once
	// it is full, bucket 0 is never empty and last is the minimum.
	next, prev []uint32
	bkt        []uint8
	head       [65]uint32
	nonEmpty   uint64
	last       uint64
	// Index: slot+1 per bucket, 0 = empty; len is a power of two ≥ 2k.
	idx   []uint32
	shift uint // 64 − log2(len(idx))
}

const none = ^uint32(0)

// New returns a summary with k counters (k ≥ 1).
func New(k int) *Summary {
	k = max(k, 1)
	nb := 1 << bits.Len(uint(2*k-1)) // power of two ≥ 2k: load ≤ 1/2
	s := &Summary{
		k:     k,
		cnt:   make([]uint64, k),
		key:   make([]uint64, k),
		err:   make([]uint64, k),
		next:  make([]uint32, k),
		prev:  make([]uint32, k),
		bkt:   make([]uint8, k),
		idx:   make([]uint32, nb),
		shift: uint(64 - bits.TrailingZeros(uint(nb))),
	}
	s.clearHeap()
	return s
}

func (s *Summary) clearHeap() {
	for b := range s.head {
		s.head[b] = none
	}
	s.nonEmpty = 0
}

// K is the number of counters.
func (s *Summary) K() int { return s.k }

// Len is the number of monitored keys (≤ K).
func (s *Summary) Len() int { return s.size }

// N is the total weight seen (after decay).
func (s *Summary) N() uint64 { return s.n }

// Min is the smallest monitored count once all counters are in use, else
// 0: the bound on the weight of any unmonitored key and on every Err.
func (s *Summary) Min() uint64 {
	if s.size < s.k {
		return 0
	}
	return s.last
}

// Bytes is the memory the summary holds (slice capacities), constant for a
// given k.
func (s *Summary) Bytes() int {
	return 8*(cap(s.cnt)+cap(s.key)+cap(s.err)) + 4*(cap(s.next)+cap(s.prev)) + cap(s.bkt) + 4*cap(s.idx) + 4*len(s.head)
}

// hash is a Fibonacci hash: the multiply spreads consecutive unit numbers
// (the common case) across the table; the top bits are the bucket.
func (s *Summary) bucket(key uint64) uint64 { return (key * 0x9e3779b97f4a7c15) >> s.shift }

// find returns the slot of key, or -1.
func (s *Summary) find(key uint64) int {
	mask := uint64(len(s.idx) - 1)
	for b := s.bucket(key); ; b = (b + 1) & mask {
		v := s.idx[b]
		if v == 0 {
			return -1
		}
		if s.key[v-1] == key {
			return int(v - 1)
		}
	}
}

func (s *Summary) insertIndex(slot uint32) {
	mask := uint64(len(s.idx) - 1)
	b := s.bucket(s.key[slot])
	for s.idx[b] != 0 {
		b = (b + 1) & mask
	}
	s.idx[b] = slot + 1
}

// removeIndex deletes slot (known present) with backward-shift deletion.
func (s *Summary) removeIndex(slot uint32) {
	mask := uint64(len(s.idx) - 1)
	b := s.bucket(s.key[slot])
	for s.idx[b] != slot+1 {
		b = (b + 1) & mask
	}
	// Shift later members of the cluster back into the hole when their home
	// bucket does not lie cyclically in (hole, j].
	hole := b
	for j := (b + 1) & mask; s.idx[j] != 0; j = (j + 1) & mask {
		home := s.bucket(s.key[s.idx[j]-1])
		if (j-home)&mask >= (j-hole)&mask {
			s.idx[hole] = s.idx[j]
			hole = j
		}
	}
	s.idx[hole] = 0
}

// radix is the bucket of count c: 0 if it is the last minimum, else one
// more than the highest bit in which they differ.
func (s *Summary) radix(c uint64) uint8 { return uint8(bits.Len64(c ^ s.last)) }

// link puts slot at the head of bucket b.
func (s *Summary) link(slot uint32, b uint8) {
	s.bkt[slot] = b
	h := s.head[b]
	s.next[slot], s.prev[slot] = h, none
	if h != none {
		s.prev[h] = slot
	}
	s.head[b] = slot
	if b > 0 {
		s.nonEmpty |= 1 << (b - 1)
	}
}

// unlink takes slot out of its bucket.
func (s *Summary) unlink(slot uint32) {
	b := s.bkt[slot]
	p, n := s.prev[slot], s.next[slot]
	if p != none {
		s.next[p] = n
	} else {
		s.head[b] = n
		if n == none && b > 0 {
			s.nonEmpty &^= 1 << (b - 1)
		}
	}
	if n != none {
		s.prev[n] = p
	}
}

// settle restores bucket 0 of a full summary after it emptied: the lowest
// non-empty bucket holds the new minimum; its counters move to the buckets
// below, relative to it.
func (s *Summary) settle() {
	if s.head[0] != none || s.size < s.k || s.nonEmpty == 0 {
		return
	}
	b := uint8(bits.TrailingZeros64(s.nonEmpty)) + 1
	m := uint64(math.MaxUint64)
	for sl := s.head[b]; sl != none; sl = s.next[sl] {
		m = min(m, s.cnt[sl])
	}
	s.last = m
	sl := s.head[b]
	s.head[b] = none
	s.nonEmpty &^= 1 << (b - 1)
	for sl != none {
		n := s.next[sl]
		s.link(sl, s.radix(s.cnt[sl]))
		sl = n
	}
}

// rebuild relinks every counter after the counts changed together (a
// decay): last becomes the minimum of a full summary, 0 otherwise.
func (s *Summary) rebuild() {
	s.clearHeap()
	s.last = 0
	if s.size == s.k {
		s.last = slices.Min(s.cnt[:s.size])
	}
	for sl := range s.size {
		s.link(uint32(sl), s.radix(s.cnt[sl]))
	}
}

// Add adds weight w (≥ 1; 0 counts as 1) to key.
func (s *Summary) Add(key uint64, w uint64) {
	if w == 0 {
		w = 1
	}
	s.n += w
	if slot := s.find(key); slot >= 0 {
		sl := uint32(slot)
		c := sat(s.cnt[sl], w)
		s.cnt[sl] = c
		if b := s.radix(c); b != s.bkt[sl] {
			s.unlink(sl)
			s.link(sl, b)
			s.settle()
		}
		return
	}
	if s.size < s.k {
		sl := uint32(s.size)
		s.size++
		s.key[sl], s.err[sl], s.cnt[sl] = key, 0, w
		s.insertIndex(sl)
		s.link(sl, s.radix(w))
		s.settle() // the summary just filled: find its minimum
		return
	}
	// Take over a counter at the minimum.
	sl := s.head[0]
	m := s.last
	s.removeIndex(sl)
	s.key[sl], s.err[sl] = key, m
	s.insertIndex(sl)
	c := sat(m, w)
	s.cnt[sl] = c
	s.unlink(sl)
	s.link(sl, s.radix(c))
	s.settle()
}

func sat(a, b uint64) uint64 {
	if c := a + b; c >= a {
		return c
	}
	return math.MaxUint64
}

// Get returns the monitored key's item.
func (s *Summary) Get(key uint64) (Item, bool) {
	slot := s.find(key)
	if slot < 0 {
		return Item{}, false
	}
	return Item{Key: key, Count: s.cnt[slot], Err: s.err[slot]}, true
}

// SumRange is the sum of the counts of the monitored keys in [lo, hi]
// (inclusive, so a range may end at the largest key). A short range
// probes the index key by key; a long one scans the counters once, so
// the cost is at most min(hi−lo+1, Len) steps.
func (s *Summary) SumRange(lo, hi uint64) uint64 {
	if hi < lo || s.size == 0 {
		return 0
	}
	var sum uint64
	if hi-lo < uint64(s.size)/4 {
		for k := lo; ; k++ {
			if slot := s.find(k); slot >= 0 {
				sum = sat(sum, s.cnt[slot])
			}
			if k == hi {
				return sum
			}
		}
	}
	for sl := range s.size {
		if k := s.key[sl]; k >= lo && k <= hi {
			sum = sat(sum, s.cnt[sl])
		}
	}
	return sum
}

// Top appends the n heaviest monitored keys to dst, by Count then by
// guaranteed weight, both descending; ties by key.
func (s *Summary) Top(dst []Item, n int) []Item {
	all := make([]Item, 0, s.size)
	for sl := range s.size {
		all = append(all, Item{Key: s.key[sl], Count: s.cnt[sl], Err: s.err[sl]})
	}
	slices.SortFunc(all, func(a, b Item) int {
		if r := cmp.Compare(b.Count, a.Count); r != 0 {
			return r
		}
		if r := cmp.Compare(b.Guaranteed(), a.Guaranteed()); r != 0 {
			return r
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return append(dst, all[:min(n, len(all))]...)
}

// Decay multiplies every count, error and N by f (0 ≤ f ≤ 1), rounding
// down, and relinks the radix heap around the new minimum: one pass each,
// once an epoch. Counters that reach zero stay monitored until a new key
// takes them over.
func (s *Summary) Decay(f float64) {
	if f >= 1 {
		return
	}
	f = max(f, 0)
	sc := func(v uint64) uint64 { return uint64(float64(v) * f) }
	for sl := range s.size {
		s.cnt[sl] = sc(s.cnt[sl])
		s.err[sl] = min(sc(s.err[sl]), s.cnt[sl])
	}
	s.n = sc(s.n)
	s.rebuild()
}

// Reset forgets everything.
func (s *Summary) Reset() {
	s.size, s.n, s.last = 0, 0, 0
	clear(s.idx)
	s.clearHeap()
}
