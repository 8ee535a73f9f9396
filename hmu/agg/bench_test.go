package agg

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"cxlpool/dcd"
	"cxlpool/fabric/cci"
	"cxlpool/hmu"
)

// benchTrace is Zipf(1.1) over 64 Mi 4 KiB units (256 GiB) that eight hosts
// hold in 256 MiB blocks, dealt round-robin.
func benchTrace(n int) ([]hmu.Record, *Layout) {
	const units = 64 << 20
	per := map[int][]cci.Extent{}
	for b := range uint64(units * 4096 / block) {
		per[int(b%8)] = append(per[int(b%8)], cci.Extent{DPA: b * block, Length: block})
	}
	r := rand.New(rand.NewPCG(7, 7))
	z := rand.NewZipf(r, 1.1, 1, units-1)
	recs := make([]hmu.Record, n)
	for i := range recs {
		u := z.Uint64() * 0x9e3779b97f4a7c15 & (units - 1)
		recs[i] = hmu.Record{DPA: u * 4096, Count: 1 + uint64(i&3)}
	}
	return recs, NewLayout(per)
}

// BenchmarkIngest is the whole per-record path — host lookup, per-host and
// pool Space-Saving, heatmap cell — beside an exact counter (maps per host
// and for the pool) on the same trace; one record per op.
func BenchmarkIngest(b *testing.B) {
	recs, l := benchTrace(1 << 22)
	const batch = 1024
	b.Run("collector", func(b *testing.B) {
		c, err := New(Config{HostOf: l.HostOf, Extents: l.Extents, HostK: 1024, PoolK: 8192})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if i%batch == 0 {
				c.Ingest(recs[i : i+batch])
			}
			if i++; i == len(recs) {
				i = 0
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mrecords/s")
	})
	b.Run("exact-maps", func(b *testing.B) {
		pool := map[uint64]uint64{}
		hosts := make([]map[uint64]uint64, 8)
		for i := range hosts {
			hosts[i] = map[uint64]uint64{}
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			r := recs[i]
			pool[r.DPA>>12] += r.Count
			if h, ok := l.HostOf(r.DPA); ok {
				hosts[h][r.DPA>>12] += r.Count
			}
			if i++; i == len(recs) {
				i = 0
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mrecords/s")
	})
}

// BenchmarkCollectorMemory: the collector's footprint with 8 hosts × 1024
// plus 8192 counters and a 4096-cell heatmap, measured after ingesting 1 M
// and 4 M records (more distinct units): the same, since nothing grows.
func BenchmarkCollectorMemory(b *testing.B) {
	recs, l := benchTrace(1 << 22)
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	for b.Loop() {
		before := heap()
		c, _ := New(Config{HostOf: l.HostOf, Extents: l.Extents})
		c.Ingest(recs[:1<<20])
		after1 := heap()
		c.Ingest(recs[1<<20:])
		after4 := heap()
		slots := float64(9*1024 + 8192)
		b.ReportMetric(float64(after1-before)/(1<<20), "MiB@1M")
		b.ReportMetric(float64(after4-before)/(1<<20), "MiB@4M")
		b.ReportMetric(float64(after4-before)/slots, "B/slot-incl-heatmap")
		runtime.KeepAlive(c)
	}
}

// BenchmarkLayoutFromGrants builds the layout of 480 grants of 256 MiB
// over eight hosts (BenchmarkGrantsParallel8Held's box): the telemetry
// follower builds one when a grant it shows ends, and at most every
// LayoutInterval while grants are made.
func BenchmarkLayoutFromGrants(b *testing.B) {
	var gs []dcd.Grant
	for i := range 480 {
		gs = append(gs, dcd.Grant{ID: dcd.GrantID(i + 1), Host: dcd.HostID(i % 8), State: dcd.GrantGranted,
			Extents: []cci.Extent{{DPA: uint64(i) * block, Length: block}}})
	}
	b.ReportAllocs()
	for b.Loop() {
		LayoutFromGrants(gs)
	}
}

// BenchmarkLayoutWithout takes one grant out of that layout, as the
// telemetry follower does when a grant it shows ends.
func BenchmarkLayoutWithout(b *testing.B) {
	var gs []dcd.Grant
	for i := range 480 {
		gs = append(gs, dcd.Grant{ID: dcd.GrantID(i + 1), Host: dcd.HostID(i % 8), State: dcd.GrantGranted,
			Extents: []cci.Extent{{DPA: uint64(i) * block, Length: block}}})
	}
	l := LayoutFromGrants(gs)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := l.Without(5, gs[245].Extents); !ok {
			b.Fatal("Without refused")
		}
	}
}
