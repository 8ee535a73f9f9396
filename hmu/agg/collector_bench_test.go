package agg

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"cxlpool/hmu"
	"cxlpool/hmu/mmio"
)

// benchRing is a CHMU register block in memory (a memfd mapped through
// hmu/mmio, as a PCI BAR would be) with one instance whose hotlist ring
// the benchmark fills as the device would: entries from head on, then
// TAIL. Epoch mode, 4 KiB units, 16-bit counters.
type benchRing struct {
	regs *mmio.Regs
	in   *hmu.Instance
	size int    // ring entries
	ring uint64 // the ring's block offset
	tail uint16
}

const (
	benchRingSize = 4096
	benchCounterN = 16
	benchHotlist  = hmu.RegsEnd + 8 // after an 8-byte range bitmap
)

func newBenchRing(b testing.TB) *benchRing {
	b.Helper()
	instLen := uint64(benchHotlist + benchRingSize*8)
	blockLen := hmu.InstanceBase + instLen
	fd, err := unix.MemfdCreate("chmu-bench", unix.MFD_CLOEXEC)
	if err != nil {
		b.Skipf("memfd: %v", err)
	}
	f := os.NewFile(uintptr(fd), "chmu-bench")
	defer f.Close()
	if err := f.Truncate(int64(blockLen)); err != nil {
		b.Fatal(err)
	}
	regs, err := mmio.Open(fmt.Sprintf("/proc/self/fd/%d", fd), 0, int64(blockLen))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { regs.Close() })
	w := func(off, v uint64) {
		if err := regs.Write64(off, v); err != nil {
			b.Fatal(err)
		}
	}
	c0, c1 := hmu.CommonCaps{Version: 1, Instances: 1, InstanceLen: instLen}.Encode()
	w(hmu.RegCommonCap0, c0)
	w(hmu.RegCommonCap1, c1)
	base := uint64(hmu.InstanceBase)
	i0, i1 := hmu.Caps{Tracks: 0x3f, UnitSizes: 1 << 4, EpochMode: true, HotlistSize: benchRingSize}.Encode()
	w(base+hmu.RegCap0, i0)
	w(base+hmu.RegCap1, i1)
	w(base+hmu.RegBitmapOffset, hmu.RegsEnd)
	w(base+hmu.RegHotlistOffset, benchHotlist)
	cfg := hmu.Config{Access: hmu.AccessReadWrite, Threshold: 4, UnitSize: 4096, Mode: hmu.ModeEpoch, Epoch: hmu.Epoch{Scale: 4, Multiplier: 1}}
	w(base+hmu.RegCfg0, cfg.CFG0(true, false))
	w(base+hmu.RegCfg1, cfg.CFG1())
	w(base+hmu.RegStatus, hmu.Status{Enabled: true, CounterWidth: benchCounterN}.Encode())
	drv, err := hmu.Open(regs, hmu.Options{})
	if err != nil {
		b.Fatal(err)
	}
	in, err := drv.Instance(0)
	if err != nil {
		b.Fatal(err)
	}
	return &benchRing{regs: regs, in: in, size: benchRingSize, ring: base + benchHotlist}
}

// fill writes recs (at most size−1) into the ring after the device's
// tail and publishes the new tail, as the device does.
func (r *benchRing) fill(b testing.TB, recs []hmu.Record) {
	for _, rec := range recs {
		e := hmu.Entry{Unit: rec.DPA >> 12, Count: rec.Count}.Encode(benchCounterN)
		if err := r.regs.Write64(r.ring+uint64(r.tail)*8, e); err != nil {
			b.Fatal(err)
		}
		r.tail = uint16((int(r.tail) + 1) % r.size)
	}
	if err := r.regs.Write16(hmu.InstanceBase+hmu.RegTail, r.tail); err != nil {
		b.Fatal(err)
	}
}

// TestBenchRingDrains: the benchmark's ring hands back what was put in,
// through the driver's bulk path (hmu/mmio is a BulkReader) in runs that
// cross its 256-register copies and the ring's end.
func TestBenchRingDrains(t *testing.T) {
	r := newBenchRing(t)
	recs, _ := benchTrace(3 * benchRingSize)
	for i := range recs {
		recs[i].Count = recs[i].Count&0xffff | 1
	}
	var buf []hmu.Record
	at := 0
	for _, n := range []int{700, benchRingSize - 1, 1, 257, 3000, 2, benchRingSize - 1} {
		r.fill(t, recs[at:at+n])
		got, ds, err := r.in.Drain(buf[:0])
		if err != nil || ds.Entries != n {
			t.Fatalf("drain at %d: %d entries, %v; want %d", at, ds.Entries, err, n)
		}
		if diff := cmp.Diff(recs[at:at+n], got); diff != "" {
			t.Fatalf("drain at %d (-want +got):\n%s", at, diff)
		}
		buf = got
		at += n
	}
}

// BenchmarkCollector is the whole collector on the benchTrace — drain the
// ring through the mapped registers, decode, map DPA to host or shared,
// per-host and pool Space-Saving, heatmap — beside, in the same run, the
// drain alone (register reads and decoding into a buffer) and a bare loop
// decoding the same ring from memory: the floors any collector sits on.
// One record per op; the ring is refilled between drains off the clock.
// Mrecords/cpu-s is per core: records over the CPU time the benchmark's
// thread spent draining (its goroutine is locked to it), which on a shared
// machine does not count the time it waited for a core; Mrecords/s is by
// the wall clock.
func BenchmarkCollector(b *testing.B) {
	recs, l := benchTrace(1 << 22)
	per := benchRingSize - 1
	run := func(b *testing.B, consume func(r *benchRing, buf []hmu.Record) []hmu.Record) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		r := newBenchRing(b)
		buf := make([]hmu.Record, 0, benchRingSize)
		at := 0
		var cpu time.Duration
		b.ReportAllocs()
		b.ResetTimer()
		for done := 0; done < b.N; {
			n := min(per, b.N-done)
			if at+n > len(recs) {
				at = 0
			}
			b.StopTimer()
			r.fill(b, recs[at:at+n])
			b.StartTimer()
			cpu0 := threadCPU(b)
			buf = consume(r, buf[:0])
			cpu += threadCPU(b) - cpu0
			if len(buf) != n {
				b.Fatalf("drained %d records, want %d", len(buf), n)
			}
			at += n
			done += n
		}
		b.ReportMetric(float64(b.N)/cpu.Seconds()/1e6, "Mrecords/cpu-s")
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mrecords/s")
	}
	b.Run("collector", func(b *testing.B) {
		c, err := New(Config{HostOf: l.HostOf, Extents: l.Extents, HostK: 1024, PoolK: 8192})
		if err != nil {
			b.Fatal(err)
		}
		run(b, func(r *benchRing, buf []hmu.Record) []hmu.Record {
			c.cfg.Source = r.in
			out, err := c.DrainOnce(buf)
			if err != nil {
				b.Fatal(err)
			}
			return out
		})
	})
	b.Run("drain-only", func(b *testing.B) {
		run(b, func(r *benchRing, buf []hmu.Record) []hmu.Record {
			out, _, err := r.in.Drain(buf)
			if err != nil {
				b.Fatal(err)
			}
			return out
		})
	})
	b.Run("decode-loop", func(b *testing.B) {
		var head uint16
		run(b, func(r *benchRing, buf []hmu.Record) []hmu.Record {
			for head != r.tail {
				v, _ := r.regs.Read64(r.ring + uint64(head)*8)
				e := hmu.DecodeEntry(v, benchCounterN)
				buf = append(buf, hmu.Record{DPA: e.Unit << 12, Count: e.Count})
				head = uint16((int(head) + 1) % r.size)
			}
			return buf
		})
	})
}

// threadCPU is the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID:
// the scheduler's nanosecond account, not the tick-sampled rusage).
func threadCPU(b *testing.B) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ts.Nano())
}
