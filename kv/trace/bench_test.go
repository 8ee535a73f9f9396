package trace

import (
	"testing"
)

// BenchmarkHitRate runs the default serving trace (8 hosts, 8000
// requests, Llama-3-70B KV in 256-token blocks) against a namespace of
// half its live working set with LRU and with the hotness-aware policy,
// both in the same run, and reports both hit rates and the bytes of KV
// each reused. Variants show where heat helps and where it cannot:
//
//   - dax-rereads: hosts re-read blocks whose location they know through
//     their DAX mapping; only the CHMU sees those reads (the real case).
//   - chmu-k=8192: the same with hmu/agg's default pool top-K, which
//     tracks 16 GiB of 2 MiB units, a fraction of the namespace.
//   - chmu-estimates: dax-rereads with HeatOf summing Space-Saving
//     estimates (upper bounds, as hmu/agg's HeatOf) instead of lower bounds.
//   - index-sees-every-read: every read asks the index (no remembered
//     locations), so LRU already has all the recency there is.
func BenchmarkHitRate(b *testing.B) {
	tr, err := Generate(Config{Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	half := uint64(tr.Live()) * BlockBytes / 2
	for _, v := range []struct {
		name string
		cfg  SimConfig
	}{
		{"dax-rereads", SimConfig{Capacity: half, CHMU: CHMUConfig{K: 65536}}},
		{"chmu-k=8192", SimConfig{Capacity: half, CHMU: CHMUConfig{K: 8192}}},
		{"chmu-estimates", SimConfig{Capacity: half, CHMU: CHMUConfig{K: 65536, Estimate: true}}},
		{"index-sees-every-read", SimConfig{Capacity: half, Locations: -1, CHMU: CHMUConfig{K: 65536}}},
	} {
		b.Run(v.name, func(b *testing.B) {
			var lru, hot Result
			for range b.N {
				if lru, err = Simulate(tr, v.cfg, "lru", LRU); err != nil {
					b.Fatal(err)
				}
				if hot, err = Simulate(tr, v.cfg, "hot", Hot); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(hot.HitRate, "hit-rate-hot")
			b.ReportMetric(lru.HitRate, "hit-rate-lru")
			b.ReportMetric(hot.HitRate/lru.HitRate, "hot-per-lru")
			b.ReportMetric(float64(hot.BytesReused)/(1<<40), "TiB-reused-hot")
			b.ReportMetric(float64(lru.BytesReused)/(1<<40), "TiB-reused-lru")
			b.Logf("%d requests, %d blocks, live working set %d blocks (%.0f GiB), capacity %.0f GiB\n%v\n%v",
				len(tr.Requests), hot.Blocks, tr.Live(), float64(tr.Live())*BlockBytes/(1<<30), float64(hot.Capacity)/(1<<30), lru, hot)
		})
	}
}
