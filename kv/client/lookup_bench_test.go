package client_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"cxlpool/internal/redistest"
	"cxlpool/kv/client"
)

// BenchmarkLookupVsRedis: the p50 of a lookup (Locate: one GET of a
// block's location, no bytes, no pin) over loopback TCP to the index,
// beside a Redis GET of a 64-byte value over loopback in the same run,
// one connection each, taking turns request by request so that the
// machine's load weighs on both alike. Reported: both p50s and p99s and
// lookup-p50/redis-p50 (goal ≤ 1). Skips the Redis side, saying so, if
// redis-server is not installed.
func BenchmarkLookupVsRedis(b *testing.B) {
	r := newRig(b, "tcp")
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Config{Addr: r.addr, Namespace: "ns", Host: 0, Token: r.tok, Mapper: r.mapper})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	key := []byte("bench-key-0123456789abcdef")
	if err := c.Put(ctx, key, make([]byte, 256<<10)); err != nil {
		b.Fatal(err)
	}
	keys := [][]byte{key}
	var rc *redistest.Conn
	addr, err := redistest.Start(b)
	if err != nil {
		b.Logf("skipping the Redis comparison: %v", err)
	} else {
		if rc, err = redistest.Dial(addr); err != nil {
			b.Fatal(err)
		}
		defer rc.Close()
	}
	small := make([]byte, 64)
	if rc != nil {
		if err := rc.Set([]byte("small"), small); err != nil {
			b.Fatal(err)
		}
	}
	kvLat := make([]time.Duration, 0, b.N)
	rdLat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		lookup := func() {
			t0 := time.Now()
			_, errs, err := c.Locate(ctx, keys)
			if err != nil || errs[0] != nil {
				b.Fatalf("locate: %v %v", err, errs[0])
			}
			kvLat = append(kvLat, time.Since(t0))
		}
		redis := func() {
			if rc == nil {
				return
			}
			t0 := time.Now()
			if err := rc.Get([]byte("small"), small); err != nil {
				b.Fatal(err)
			}
			rdLat = append(rdLat, time.Since(t0))
		}
		if i%2 == 0 { // who goes first alternates
			lookup()
			redis()
		} else {
			redis()
			lookup()
		}
	}
	b.StopTimer()
	p := func(lat []time.Duration, q float64) float64 {
		slices.Sort(lat)
		return float64(lat[int(float64(len(lat)-1)*q)].Nanoseconds())
	}
	b.ReportMetric(p(kvLat, 0.5), "lookup-p50-ns")
	b.ReportMetric(p(kvLat, 0.99), "lookup-p99-ns")
	if rc != nil {
		b.ReportMetric(p(rdLat, 0.5), "redis-get64-p50-ns")
		b.ReportMetric(p(rdLat, 0.99), "redis-get64-p99-ns")
		b.ReportMetric(p(kvLat, 0.5)/p(rdLat, 0.5), "lookup/redis-p50")
	}
}
