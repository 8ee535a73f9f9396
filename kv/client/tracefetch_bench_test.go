package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"cxlpool/dcd"
	"cxlpool/kv"
	"cxlpool/kv/client"
	"cxlpool/kv/trace"
)

// BenchmarkTraceFetch: the serving trace (kv/trace's default: 8 hosts,
// shared system prompts, multi-turn sessions with Zipf popularity,
// Llama-3-70B KV in 80 MiB blocks of 256 tokens) against a namespace of
// half its live working set, hotness-aware and LRU eviction simulated in
// the same run (hit rates, bytes of KV reused instead of recomputed).
// Then the time to fetch a request's reused KV, measured for real on the
// virtual box for a sample of the trace's requests (every one of 8
// evenly spaced among those that reuse anything, with the number of
// blocks the hotness-aware run reused for it):
//
//   - pool: a host's GetBatchInto through its mapping of the namespace's
//     chunk (index round trips, memcpy into the serving process's buffers);
//   - export: a remote rack's GetBatchInto of the same keys (the same
//     index round trips, the bytes by READ through the chunk's export over
//     loopback TCP: the network stand-in).
//
// Both fetch in batches of 8 blocks into the same 8 buffers. The
// namespace holds 4 real blocks and a request's j-th reused block is
// block j mod 4: the time depends on the blocks' count and size, not on
// which they are, and 80 MiB blocks for every key would need the trace's
// terabytes. Reported: mean ms per request of each, export/pool (goal
// ≥ 2, the Niagara-vs-RDMA figure), mean GiB fetched per request, and the
// simulation's hit rates and TiB reused.
func BenchmarkTraceFetch(b *testing.B) {
	tr, err := trace.Generate(trace.Config{Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	cfg := trace.SimConfig{Capacity: uint64(tr.Live()) * trace.BlockBytes / 2, CHMU: trace.CHMUConfig{K: 65536}}
	lru, err := trace.Simulate(tr, cfg, "lru", trace.LRU)
	if err != nil {
		b.Fatal(err)
	}
	hot, err := trace.Simulate(tr, cfg, "hot", trace.Hot)
	if err != nil {
		b.Fatal(err)
	}
	var reusing []int
	for _, n := range hot.Reused {
		if n > 0 {
			reusing = append(reusing, n)
		}
	}
	const samples = 8
	if len(reusing) < samples {
		b.Fatalf("only %d requests reuse anything", len(reusing))
	}
	sample := make([]int, samples)
	for i := range sample {
		sample[i] = reusing[i*len(reusing)/samples]
	}

	// Every buffer first, before any session: touching 720 MiB takes
	// long on a loaded machine, longer than an idle session may wait.
	const resident, batch = 4, 8
	val := make([]byte, trace.BlockBytes)
	for i := range val {
		val[i] = byte(i * 13)
	}
	dsts := make([][]byte, batch)
	for i := range dsts {
		dsts[i] = make([]byte, trace.BlockBytes)
		clear(dsts[i]) // first touch, outside the timing
	}
	r := newBoxRig(b, withExports)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns, toks, err := r.app.KV.Create(ctx, kv.CreateRequest{Name: "trace", ChunkSize: 512 << 20, Hosts: []dcd.HostID{0}})
	if err != nil {
		b.Fatal(err)
	}
	ra, err := r.app.KV.Export(ctx, "trace", "rack-trace")
	if err != nil {
		b.Fatal(err)
	}
	// The longest lease: on a loaded machine a put of 80 MiB into fresh
	// pages of the box's memory can take longer than the default.
	if _, err := r.backends[0].Wait(ctx, ns.Chunks[0].Tag.String()); err != nil {
		b.Fatal(err)
	}
	h0, err := client.Dial(ctx, client.Config{Addr: r.addr, Namespace: "trace", Host: 0, Token: toks[0], Mapper: r.backends[0], Lease: 5 * time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer h0.Close()
	keys := make([][]byte, resident)
	vals := make([][]byte, resident)
	for i := range keys {
		keys[i], vals[i] = fmt.Appendf(nil, "block-%d", i), val
	}
	for i := range keys { // one at a time: each reservation's lease runs for one copy
		if err := h0.Put(ctx, keys[i], vals[i]); err != nil {
			b.Fatalf("put: %v", err)
		}
	}
	rack, err := client.Dial(ctx, client.Config{Addr: r.addr, Namespace: "trace", Token: ra.Token, Lease: 5 * time.Minute,
		Remote: &client.Remote{Addr: r.app.ExportAddr.String(), Resolve: resolver(r.app.KV, "trace"), Conns: rackConns}})
	if err != nil {
		b.Fatal(err)
	}
	defer rack.Close()
	// fetch gets n blocks through c, batch by batch.
	fetch := func(c *client.Client, n int) time.Duration {
		t0 := time.Now()
		for lo := 0; lo < n; lo += batch {
			ks := make([][]byte, 0, batch)
			for j := lo; j < min(lo+batch, n); j++ {
				ks = append(ks, keys[j%resident])
			}
			lens, errs, err := c.GetBatchInto(ctx, ks, dsts[:len(ks)])
			if err != nil || errors.Join(errs...) != nil {
				b.Fatalf("get: %v %v", err, errs)
			}
			for _, l := range lens {
				if l != trace.BlockBytes {
					b.Fatalf("get: %d bytes, want %d", l, trace.BlockBytes)
				}
			}
		}
		return time.Since(t0)
	}
	// The setup is slow on a loaded machine (first touches of the box's
	// memory): renew the host's lease before anything else.
	if err := h0.Renew(ctx); err != nil {
		b.Fatal(err)
	}
	fetch(h0, resident) // every page touched once on both paths, untimed
	fetch(rack, resident)
	var pool, export time.Duration
	blocks := 0
	b.ResetTimer()
	for i := range b.N {
		for k, n := range sample {
			if (i+k)%2 == 0 { // who goes first alternates
				pool += fetch(h0, n)
				export += fetch(rack, n)
			} else {
				export += fetch(rack, n)
				pool += fetch(h0, n)
			}
			blocks += n
		}
	}
	b.StopTimer()
	reqs := float64(b.N * samples)
	b.ReportMetric(float64(pool.Milliseconds())/reqs, "pool-ms/req")
	b.ReportMetric(float64(export.Milliseconds())/reqs, "export-ms/req")
	b.ReportMetric(export.Seconds()/pool.Seconds(), "export/pool")
	b.ReportMetric(float64(blocks)*trace.BlockBytes/(1<<30)/reqs, "GiB/req")
	b.ReportMetric(hot.HitRate, "hit-rate-hot")
	b.ReportMetric(lru.HitRate, "hit-rate-lru")
	b.ReportMetric(float64(hot.BytesReused)/(1<<40), "TiB-reused-hot")
	b.ReportMetric(float64(lru.BytesReused)/(1<<40), "TiB-reused-lru")
	b.ReportMetric(float64(hot.BytesRecomputed)/(1<<40), "TiB-recomputed-hot")
	b.Logf("sampled requests reuse %v blocks; %d of %d requests reuse anything", sample, len(reusing), len(tr.Requests))
}
