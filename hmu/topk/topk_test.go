package topk

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// stream is a sequence of weighted keys.
type stream []struct{ key, w uint64 }

func (s *stream) add(key, w uint64) { *s = append(*s, struct{ key, w uint64 }{key, w}) }

// zipfStream draws n keys from Zipf(skew) over units (ranks scattered by an
// odd multiplier so hot keys are not neighbours), weight from weight().
func zipfStream(seed uint64, skew float64, units uint64, n int, weight func(*rand.Rand) uint64) stream {
	r := rand.New(rand.NewPCG(seed, 1))
	z := rand.NewZipf(r, skew, 1, units-1)
	var s stream
	for range n {
		s.add(scatter(z.Uint64(), units), weight(r))
	}
	return s
}

// scatter maps a rank to a unit bijectively for a power-of-two unit count.
func scatter(rank, units uint64) uint64 { return rank * 0x9e3779b97f4a7c15 & (units - 1) }

func one(*rand.Rand) uint64 { return 1 }

// checkInvariants verifies the radix heap, the index and the slot
// bookkeeping.
func checkInvariants(t *testing.T, s *Summary) {
	t.Helper()
	seen := 0
	for b, h := range s.head {
		if b > 0 && (h != none) != (s.nonEmpty>>(b-1)&1 == 1) {
			t.Fatalf("bucket %d: head %d, non-empty bit %v", b, h, s.nonEmpty>>(b-1)&1 == 1)
		}
		prev := none
		for sl := h; sl != none; sl = s.slots[sl].next {
			if seen++; seen > s.size {
				t.Fatalf("bucket lists hold more than the %d slots", s.size)
			}
			if int(sl) >= s.size || s.slots[sl].prev != prev {
				t.Fatalf("slot %d in bucket %d: prev %d (want %d), size %d", sl, b, s.slots[sl].prev, prev, s.size)
			}
			if c := s.slots[sl].cnt; s.radix(c) != uint8(b) || c < s.last {
				t.Fatalf("slot %d: count %d with last %d belongs in bucket %d, is in %d", sl, c, s.last, s.radix(c), b)
			}
			prev = sl
		}
	}
	if seen != s.size {
		t.Fatalf("bucket lists hold %d slots, want %d", seen, s.size)
	}
	if s.size == s.k && s.size > 0 {
		if s.head[0] == none {
			t.Fatal("a full summary with bucket 0 empty")
		}
		if m := s.minCount(); m != s.Min() {
			t.Fatalf("Min %d, smallest count %d", s.Min(), m)
		}
	}
	used := 0
	for _, v := range s.idx {
		if v != 0 {
			used++
		}
	}
	if used != s.size {
		t.Fatalf("index holds %d keys, want %d", used, s.size)
	}
	for sl := range s.size {
		if got := s.find(s.slots[sl].key); got != sl {
			t.Fatalf("find(%d) = %d, want %d", s.slots[sl].key, got, sl)
		}
	}
}

// TestErrorBound checks the Space-Saving guarantees against an exact count
// on adversarial and skewed, weighted and unit-weight streams.
func TestErrorBound(t *testing.T) {
	const k = 64
	rr := func(keys uint64, rounds int) stream { // every add after warm-up is a take-over
		var s stream
		for range rounds {
			for x := range keys {
				s.add(x, 1)
			}
		}
		return s
	}
	tests := []struct {
		name string
		s    stream
	}{
		{"round robin k+1 keys", rr(k+1, 200)},
		{"round robin 4k keys", rr(4*k, 50)},
		{"all distinct", func() (s stream) {
			for x := range uint64(20000) {
				s.add(x, 1)
			}
			return
		}()},
		{"heavy first, then churn", func() (s stream) {
			for x := range uint64(10) {
				s.add(x, 5000)
			}
			for x := range uint64(20000) {
				s.add(1000+x, 1)
			}
			return
		}()},
		{"churn first, then heavy late", func() (s stream) {
			for x := range uint64(20000) {
				s.add(1000+x, 1)
			}
			for range 50 {
				for x := range uint64(5) {
					s.add(x, 100)
				}
			}
			return
		}()},
		{"increasing weights over distinct keys", func() (s stream) {
			for x := range uint64(5000) {
				s.add(x, x+1)
			}
			return
		}()},
		{"random weights", zipfStream(7, 1.01, 1<<14, 30000, func(r *rand.Rand) uint64 { return 1 + r.Uint64N(1000) })},
		{"zipf 1.1", zipfStream(1, 1.1, 1<<16, 50000, one)},
		{"zipf 2.0 weighted", zipfStream(2, 2.0, 1<<16, 50000, func(r *rand.Rand) uint64 { return 1 + r.Uint64N(16) })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(k)
			exact := map[uint64]uint64{}
			var n uint64
			for i, e := range tt.s {
				s.Add(e.key, e.w)
				exact[e.key] += e.w
				n += e.w
				if i%997 == 0 {
					checkInvariants(t, s)
				}
			}
			checkInvariants(t, s)
			if s.N() != n {
				t.Fatalf("N: got %d, want %d", s.N(), n)
			}
			m := s.Min()
			if m > n/k {
				t.Errorf("Min: got %d, want ≤ N/k = %d", m, n/k)
			}
			var sum uint64
			for _, it := range s.Top(nil, k) {
				sum += it.Count
			}
			if sum != n {
				t.Errorf("sum of counts: got %d, want N = %d", sum, n)
			}
			for key, f := range exact {
				it, ok := s.Get(key)
				switch {
				case !ok && f > m:
					t.Fatalf("key %d: weight %d > Min %d but not monitored", key, f, m)
				case ok && it.Count < f:
					t.Fatalf("key %d: count %d below true weight %d", key, it.Count, f)
				case ok && it.Guaranteed() > f:
					t.Fatalf("key %d: guaranteed %d above true weight %d", key, it.Guaranteed(), f)
				case ok && it.Err > m:
					t.Fatalf("key %d: error %d above Min %d", key, it.Err, m)
				}
			}
		})
	}
}

func TestDecay(t *testing.T) {
	s := New(16)
	for x := range uint64(40) {
		s.Add(x%20, x+1)
	}
	before := s.Top(nil, 16)
	s.Decay(0.5)
	checkInvariants(t, s)
	after := s.Top(nil, 16)
	for i := range after {
		if got, want := after[i].Count, before[i].Count/2; got != want {
			t.Errorf("item %d: count %d after decay, want %d", i, got, want)
		}
		if after[i].Err > after[i].Count {
			t.Errorf("item %d: error %d above count %d", i, after[i].Err, after[i].Count)
		}
	}
	if s.N() != 820/2 { // Σ 1..40 = 820
		t.Errorf("N after decay: got %d, want %d", s.N(), 410)
	}
	s.Decay(0)
	s.Add(99, 1) // a decayed-to-zero summary takes new keys as usual
	if it, ok := s.Get(99); !ok || it.Count != 1 {
		t.Errorf("after decay to zero: got %+v %v, want count 1", it, ok)
	}
	s.Reset()
	if s.Len() != 0 || s.N() != 0 {
		t.Errorf("after Reset: len %d, N %d; want 0, 0", s.Len(), s.N())
	}
	checkInvariants(t, s)
}

// TestMemoryFixed: ≤ 64 B per counter, no allocation per Add, and the same
// footprint whatever the number of distinct keys.
func TestMemoryFixed(t *testing.T) {
	for _, k := range []int{1, 100, 1024, 8192} {
		s := New(k)
		if per := float64(s.Bytes()) / float64(k); per > 64 && k >= 64 {
			t.Errorf("k=%d: %.1f B per counter, want ≤ 64", k, per)
		}
		b := s.Bytes()
		x := uint64(0)
		allocs := testing.AllocsPerRun(100000, func() { s.Add(x, 1); x++ })
		if allocs != 0 {
			t.Errorf("k=%d: %v allocations per Add, want 0", k, allocs)
		}
		if s.Bytes() != b {
			t.Errorf("k=%d: %d bytes after 100000 distinct keys, want %d", k, s.Bytes(), b)
		}
	}
}

// precisionAt is the fraction of the summary's top n whose true weight is
// at least the n-th largest true weight (ties at the boundary count).
func precisionAt(s *Summary, exact map[uint64]uint64, n int) float64 {
	ws := make([]uint64, 0, len(exact))
	for _, w := range exact {
		ws = append(ws, w)
	}
	slices.SortFunc(ws, func(a, b uint64) int { return cmp.Compare(b, a) })
	if len(ws) < n {
		n = len(ws)
	}
	cut := ws[n-1]
	hit := 0
	for _, it := range s.Top(nil, n) {
		if exact[it.Key] >= cut {
			hit++
		}
	}
	return float64(hit) / float64(n)
}

// TestPrecisionSmall is the fast version of BenchmarkZipf100M: the same
// shape scaled down by 64 (1.5 M records over 1 Mi units, 8192 counters).
func TestPrecisionSmall(t *testing.T) {
	const n, units, k, top = 1_500_000, 1 << 20, 8192, 1000
	s := New(k)
	exact := map[uint64]uint64{}
	r := rand.New(rand.NewPCG(42, 1))
	z := rand.NewZipf(r, 1.1, 1, units-1)
	for range n {
		u := scatter(z.Uint64(), units)
		s.Add(u, 1)
		exact[u]++
	}
	p := precisionAt(s, exact, top)
	if p < 0.99 {
		t.Errorf("precision@%d: got %.4f, want ≥ 0.99", top, p)
	}
	t.Logf("precision@%d = %.4f, Min = %d = %.2f·N/k", top, p, s.Min(), float64(s.Min())*k/n)
}

// TestSumRange: the sum over a key range equals a brute-force sum over
// the monitored items, whether the range is probed key by key (short) or
// the counters are scanned (long), at the edges of the key space too.
func TestSumRange(t *testing.T) {
	s := New(64)
	for _, kw := range zipfStream(3, 1.2, 1<<10, 5000, one) {
		s.Add(kw.key, kw.w)
	}
	s.Add(^uint64(0), 7)
	s.Add(0, 3)
	brute := func(lo, hi uint64) uint64 {
		var sum uint64
		for _, it := range s.Top(nil, s.Len()) {
			if it.Key >= lo && it.Key <= hi {
				sum += it.Count
			}
		}
		return sum
	}
	tests := []struct{ lo, hi uint64 }{
		{0, 0}, {0, 3}, {5, 9}, {100, 200}, {0, 1 << 10}, {0, ^uint64(0)},
		{^uint64(0) - 2, ^uint64(0)}, {^uint64(0), ^uint64(0)}, {9, 5},
	}
	for _, tt := range tests {
		if got, want := s.SumRange(tt.lo, tt.hi), brute(tt.lo, tt.hi); got != want {
			t.Errorf("SumRange(%d, %d): got %d, want %d", tt.lo, tt.hi, got, want)
		}
	}
	if got := New(8).SumRange(0, 10); got != 0 {
		t.Errorf("empty summary: got %d, want 0", got)
	}
}

// TestIndexSizes: the index works at every size, including those whose
// entries hold the whole home bucket in their tag (k ≤ 2^14, exactly at
// 2^14) and those where a deletion must read the key to find the home
// (k > 2^14), through churn that takes counters over again and again:
// the invariants hold, every monitored key is found with its exact count
// when nothing was ever evicted, and the heavy keys survive the churn.
func TestIndexSizes(t *testing.T) {
	for _, k := range []int{2, 3, 1000, 1 << 14, 1<<14 + 1, 1 << 15, 1 << 16} {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			s := New(k)
			for x := range uint64(k) { // fill exactly: no take-over yet
				s.Add(x*7919, x+1)
			}
			checkInvariants(t, s)
			for x := range uint64(k) {
				got, ok := s.Get(x * 7919)
				if want := (Item{Key: x * 7919, Count: x + 1}); !ok || got != want {
					t.Fatalf("Get(%d) = %+v, %v; want %+v", x*7919, got, ok, want)
				}
			}
			const heavy = 1 << 40 // far above anything the churn reaches
			s.Add(1<<50, heavy)
			for x := range uint64(4 * k) { // churn: each a take-over
				s.Add(1<<60+x, 1)
			}
			checkInvariants(t, s)
			if got, ok := s.Get(1 << 50); !ok || got.Count < heavy {
				t.Fatalf("heavy key: %+v, %v; want count ≥ %d", got, ok, uint64(heavy))
			}
		})
	}
}

// TestSplits: bucket splits keep the radix heap whole at every step, both
// those settle does in one walk (buckets up to splitBucket, small weights
// above the minimum) and the general ones (large weights land high).
func TestSplits(t *testing.T) {
	for _, tt := range []struct {
		name string
		maxW uint64
	}{
		{"low buckets", 1 << (splitBucket - 2)},
		{"high buckets", 1 << 12},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(5, uint64(tt.maxW)))
			s := New(64)
			exact := map[uint64]uint64{}
			var n uint64
			for i := range 20000 {
				key := r.Uint64N(400)
				w := 1 + r.Uint64N(tt.maxW)
				s.Add(key, w)
				exact[key] += w
				n += w
				checkInvariants(t, s)
				if i%1000 == 0 {
					for _, it := range s.Top(nil, 64) {
						if f := exact[it.Key]; it.Count < f || it.Count-it.Err > f {
							t.Fatalf("key %d: count %d err %d, true weight %d", it.Key, it.Count, it.Err, f)
						}
					}
				}
			}
			if s.N() != n {
				t.Fatalf("N: got %d, want %d", s.N(), n)
			}
		})
	}
}
