package evict

import (
	"math/rand/v2"
	"testing"
	"time"
)

// benchHeat is a cheap stand-in for the CHMU: one block in eight hot.
type benchHeat struct{}

func (benchHeat) HeatOf(dpa, length uint64) float64 {
	if (dpa/blk)%8 == 0 {
		return 2 * float64(length/unit)
	}
	return 0
}

const benchBlocks = 1 << 16

// steady runs the index's steady state on a full namespace: each op is
// one commit that needs one victim (Victims + Remove + Add) and three hits
// (Touch).
func steady(b *testing.B, p Policy) {
	r := rand.New(rand.NewPCG(5, 6))
	var next uint64
	for next = 1; next <= benchBlocks; next++ {
		p.Add(next, blk, []Range{{DPA: next * blk, Len: blk}})
	}
	// Eight long-lived pins at the cold end, which every walk passes.
	pinned := func(id uint64) bool { return id <= 8 }
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for range 3 {
			p.Touch(next - 1 - r.Uint64N(benchBlocks/2))
		}
		for _, id := range p.Victims(blk, pinned) {
			p.Remove(id)
		}
		p.Add(next, blk, []Range{{DPA: next * blk, Len: blk}})
		next++
	}
}

// BenchmarkSteady: per op, one eviction and commit plus three touches on
// 64 Ki blocks; LRU is the baseline of the same run.
func BenchmarkSteady(b *testing.B) {
	b.Run("lru", func(b *testing.B) { steady(b, NewLRU()) })
	b.Run("hot", func(b *testing.B) {
		t := time.Unix(0, 0)
		steady(b, NewHot(benchHeat{}, func() time.Time { t = t.Add(time.Microsecond); return t }))
	})
}

// BenchmarkHotVsLRU reports the cost of an eviction round of Hot relative
// to LRU measured in the same run (hot-per-lru), and of Hot when every
// block is hot (allhot-per-lru: bounded by MaxScan, not by the blocks).
func BenchmarkHotVsLRU(b *testing.B) {
	var lruNS, hotNS, allNS float64
	for _, c := range []struct {
		p   Policy
		dst *float64
	}{
		{NewLRU(), &lruNS},
		{NewHot(benchHeat{}, time.Now), &hotNS},
		// Every block hot: the walk's look-ups stop at MaxScan.
		{NewHot(HeatFunc(func(_, n uint64) float64 { return float64(n / unit) }), time.Now), &allNS},
	} {
		var next uint64
		for next = 1; next <= benchBlocks; next++ {
			c.p.Add(next, blk, []Range{{DPA: next * blk, Len: blk}})
		}
		start := time.Now()
		for range b.N {
			for _, id := range c.p.Victims(blk, nil) {
				c.p.Remove(id)
			}
			c.p.Add(next, blk, []Range{{DPA: next * blk, Len: blk}})
			next++
		}
		*c.dst = float64(time.Since(start).Nanoseconds()) / float64(b.N)
	}
	b.ReportMetric(lruNS, "lru-ns/evict")
	b.ReportMetric(hotNS, "hot-ns/evict")
	b.ReportMetric(hotNS/lruNS, "hot-per-lru")
	b.ReportMetric(allNS/lruNS, "allhot-per-lru")
}
