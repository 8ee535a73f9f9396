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
// The structure is sized once: a 4-ary min-heap of counts (the minimum is
// at the root; a 4-ary heap halves the depth of a binary one and keeps the
// four children in one cache line), per-slot key, error and heap position,
// and an open-addressing index with linear probing and backward-shift
// deletion (no tombstones, so it never degrades). Nothing grows with the
// number of distinct keys: 40 bytes per counter plus a constant.
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
	size int    // monitored keys
	n    uint64 // total weight

	// Heap order, position 0 = minimum, children of p at 4p+1 … 4p+4.
	hcnt  []uint64
	hslot []uint32
	// Per slot.
	key []uint64
	err []uint64
	pos []uint32
	// Index: slot+1 per bucket, 0 = empty; len is a power of two ≥ 2k.
	idx   []uint32
	shift uint // 64 − log2(len(idx))
}

// New returns a summary with k counters (k ≥ 1).
func New(k int) *Summary {
	k = max(k, 1)
	nb := 1 << bits.Len(uint(2*k-1)) // power of two ≥ 2k: load ≤ 1/2
	return &Summary{
		k:     k,
		hcnt:  make([]uint64, k),
		hslot: make([]uint32, k),
		key:   make([]uint64, k),
		err:   make([]uint64, k),
		pos:   make([]uint32, k),
		idx:   make([]uint32, nb),
		shift: uint(64 - bits.TrailingZeros(uint(nb))),
	}
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
	return s.hcnt[0]
}

// Bytes is the memory the summary holds (slice capacities), constant for a
// given k.
func (s *Summary) Bytes() int {
	return 8*cap(s.hcnt) + 4*cap(s.hslot) + 8*cap(s.key) + 8*cap(s.err) + 4*cap(s.pos) + 4*cap(s.idx)
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

// removeIndex deletes key (known present) with backward-shift deletion.
func (s *Summary) removeIndex(key uint64) {
	mask := uint64(len(s.idx) - 1)
	b := s.bucket(key)
	for s.key[s.idx[b]-1] != key {
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

// Add adds weight w (≥ 1; 0 counts as 1) to key.
func (s *Summary) Add(key uint64, w uint64) {
	if w == 0 {
		w = 1
	}
	s.n += w
	if slot := s.find(key); slot >= 0 {
		p := int(s.pos[slot])
		s.hcnt[p] = sat(s.hcnt[p], w)
		s.down(p)
		return
	}
	if s.size < s.k {
		slot := uint32(s.size)
		p := s.size
		s.size++
		s.key[slot], s.err[slot] = key, 0
		s.hcnt[p], s.hslot[p], s.pos[slot] = w, slot, uint32(p)
		s.insertIndex(slot)
		s.up(p)
		return
	}
	// Take over the minimum counter.
	slot := s.hslot[0]
	m := s.hcnt[0]
	s.removeIndex(s.key[slot])
	s.key[slot], s.err[slot] = key, m
	s.insertIndex(slot)
	s.hcnt[0] = sat(m, w)
	s.down(0)
}

func sat(a, b uint64) uint64 {
	if c := a + b; c >= a {
		return c
	}
	return math.MaxUint64
}

// down restores the heap below p after its count grew.
func (s *Summary) down(p int) {
	c, sl := s.hcnt[p], s.hslot[p]
	n := s.size
	for {
		first := 4*p + 1
		if first >= n {
			break
		}
		mi, mv := first, s.hcnt[first]
		if first+3 < n {
			// Unrolled four-way minimum: the common, full case.
			ch := s.hcnt[first : first+4 : first+4]
			if ch[1] < mv {
				mi, mv = first+1, ch[1]
			}
			if ch[2] < mv {
				mi, mv = first+2, ch[2]
			}
			if ch[3] < mv {
				mi, mv = first+3, ch[3]
			}
		} else {
			for j := first + 1; j < n; j++ {
				if s.hcnt[j] < mv {
					mi, mv = j, s.hcnt[j]
				}
			}
		}
		if mv >= c {
			break
		}
		s.hcnt[p], s.hslot[p] = mv, s.hslot[mi]
		s.pos[s.hslot[mi]] = uint32(p)
		p = mi
	}
	s.hcnt[p], s.hslot[p] = c, sl
	s.pos[sl] = uint32(p)
}

// up restores the heap above p after an insertion at p.
func (s *Summary) up(p int) {
	c, sl := s.hcnt[p], s.hslot[p]
	for p > 0 {
		parent := (p - 1) / 4
		if s.hcnt[parent] <= c {
			break
		}
		s.hcnt[p], s.hslot[p] = s.hcnt[parent], s.hslot[parent]
		s.pos[s.hslot[p]] = uint32(p)
		p = parent
	}
	s.hcnt[p], s.hslot[p] = c, sl
	s.pos[sl] = uint32(p)
}

// Get returns the monitored key's item.
func (s *Summary) Get(key uint64) (Item, bool) {
	slot := s.find(key)
	if slot < 0 {
		return Item{}, false
	}
	return Item{Key: key, Count: s.hcnt[s.pos[slot]], Err: s.err[slot]}, true
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
				sum = sat(sum, s.hcnt[s.pos[slot]])
			}
			if k == hi {
				return sum
			}
		}
	}
	for p := range s.size {
		if k := s.key[s.hslot[p]]; k >= lo && k <= hi {
			sum = sat(sum, s.hcnt[p])
		}
	}
	return sum
}

// Top appends the n heaviest monitored keys to dst, by Count then by
// guaranteed weight, both descending; ties by key.
func (s *Summary) Top(dst []Item, n int) []Item {
	all := make([]Item, 0, s.size)
	for p := range s.size {
		sl := s.hslot[p]
		all = append(all, Item{Key: s.key[sl], Count: s.hcnt[p], Err: s.err[sl]})
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
// down. Scaling by a common factor keeps the heap order, so it is one
// pass with no reordering; counters that reach zero stay monitored until
// a new key takes them over.
func (s *Summary) Decay(f float64) {
	if f >= 1 {
		return
	}
	f = max(f, 0)
	sc := func(v uint64) uint64 { return uint64(float64(v) * f) }
	for p := range s.size {
		s.hcnt[p] = sc(s.hcnt[p])
		sl := s.hslot[p]
		s.err[sl] = min(sc(s.err[sl]), s.hcnt[p])
	}
	s.n = sc(s.n)
}

// Reset forgets everything.
func (s *Summary) Reset() {
	s.size, s.n = 0, 0
	clear(s.idx)
}
