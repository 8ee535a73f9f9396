package topk

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU is the calling thread's CPU time. A benchmark that locks its
// goroutine to its thread measures with it what it cost on the core it
// ran on, whatever else the machine was running: on a shared machine the
// wall clock also counts the time the thread waited for a core.
func threadCPU(b *testing.B) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ts.Nano())
}

// trace is a reusable Zipf(1.1) trace over 64 Mi units.
func trace(n int) []uint64 {
	const units = 64 << 20
	r := rand.New(rand.NewPCG(2026, 1))
	z := rand.NewZipf(r, 1.1, 1, units-1)
	t := make([]uint64, n)
	for i := range t {
		t[i] = scatter(z.Uint64(), units)
	}
	return t
}

// BenchmarkAdd is Space-Saving ingest (8192 counters) beside an exact
// counter (a map) on the same 4 M-record Zipf(1.1) trace: one record per op.
func BenchmarkAdd(b *testing.B) {
	tr := trace(4 << 20)
	b.Run("spacesaving", func(b *testing.B) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		s := New(8192)
		b.ReportAllocs()
		i := 0
		cpu0 := threadCPU(b)
		for b.Loop() {
			s.Add(tr[i], 1)
			if i++; i == len(tr) {
				i = 0
			}
		}
		b.ReportMetric(float64(b.N)/(threadCPU(b)-cpu0).Seconds()/1e6, "Mrecords/cpu-s")
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mrecords/s")
	})
	b.Run("exact-map", func(b *testing.B) {
		m := map[uint64]uint64{}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			m[tr[i]]++
			if i++; i == len(tr) {
				i = 0
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mrecords/s")
	})
}

// heapInUse measures live heap after a GC.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkBytesPerSlot measures what New(k) allocates, per counter.
func BenchmarkBytesPerSlot(b *testing.B) {
	const k = 8192
	var keep *Summary
	var per float64
	for b.Loop() {
		before := heapInUse()
		keep = New(k)
		per = float64(heapInUse()-before) / k
	}
	b.ReportMetric(per, "B/slot")
	b.ReportMetric(float64(keep.Bytes())/k, "B/slot-computed")
}

// BenchmarkZipf100M is the acceptance run: 100 M records of Zipf(1.1) over
// 64 Mi units into 8192 counters, beside an exact map on the same trace.
// It reports precision@1000 against the exact top 1000, ingest rates of
// both, and memory of both (the summary's is fixed; the map's grows with
// the distinct units). The trace is generated on the fly, in chunks, by a
// second goroutine (deterministic: one seeded generator), and generation
// time is excluded from the rates. One op = the whole run.
func BenchmarkZipf100M(b *testing.B) {
	const records, units, k, top, chunk = 100_000_000, 64 << 20, 8192, 1000, 1 << 20
	for b.Loop() {
		chunks := make(chan []uint64, 2)
		free := make(chan []uint64, 3)
		for range 3 {
			free <- make([]uint64, chunk)
		}
		go func() {
			r := rand.New(rand.NewPCG(2026, 1))
			z := rand.NewZipf(r, 1.1, 1, units-1)
			for left := records; left > 0; left -= chunk {
				c := (<-free)[:min(chunk, left)]
				for i := range c {
					c[i] = scatter(z.Uint64(), units)
				}
				chunks <- c
			}
			close(chunks)
		}()
		base := heapInUse()
		s := New(k)
		ssBytes := heapInUse() - base
		exact := make(map[uint64]uint64)
		var ssTime, exTime time.Duration
		for c := range chunks {
			t0 := time.Now()
			for _, u := range c {
				s.Add(u, 1)
			}
			t1 := time.Now()
			for _, u := range c {
				exact[u]++
			}
			exTime += time.Since(t1)
			ssTime += t1.Sub(t0)
			free <- c
		}
		exBytes := heapInUse() - base - ssBytes
		b.ReportMetric(precisionAt(s, exact, top), "precision@1000")
		b.ReportMetric(records/ssTime.Seconds()/1e6, "ss-Mrecords/s")
		b.ReportMetric(records/exTime.Seconds()/1e6, "exact-Mrecords/s")
		b.ReportMetric(float64(ssBytes)/k, "ss-B/slot")
		b.ReportMetric(float64(ssBytes)/(1<<20), "ss-MiB")
		b.ReportMetric(float64(exBytes)/(1<<20), "exact-MiB")
		b.ReportMetric(float64(len(exact)), "distinct-units")
		b.ReportMetric(float64(s.Min())/float64(records/k), "min/(N/k)")
	}
}
