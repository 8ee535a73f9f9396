package client

import (
	"context"
	"fmt"
	"slices"
	"time"

	"cxlpool/rdma"
)

// BenchConfig describes a measurement: Count operations of Kind (OpRead
// or OpWrite) of Size bytes each, one at a time, at offsets stepping
// through the first Span bytes of the export (Size if 0).
type BenchConfig struct {
	Kind  OpKind
	Size  int
	Count int
	Span  uint64
}

// BenchResult is what Bench measured.
type BenchResult struct {
	Ops      int
	Bytes    int64
	Elapsed  time.Duration
	P50, P99 time.Duration // per-operation latency
}

// MBps is the throughput in 10⁶ bytes per second.
func (r BenchResult) MBps() float64 { return float64(r.Bytes) / r.Elapsed.Seconds() / 1e6 }

// Bench measures the export from this client (poolctl export bench). A
// WRITE bench overwrites the export's bytes.
func (c *Client) Bench(ctx context.Context, cfg BenchConfig) (BenchResult, error) {
	if cfg.Size <= 0 || cfg.Count <= 0 || (cfg.Kind != OpRead && cfg.Kind != OpWrite) {
		return BenchResult{}, fmt.Errorf("client: bench: %d operations of kind %d, %d bytes: %w", cfg.Count, cfg.Kind, cfg.Size, rdma.ErrInvalid)
	}
	span := max(cfg.Span, uint64(cfg.Size))
	if span > c.size {
		return BenchResult{}, fmt.Errorf("client: bench: %d bytes of a %d-byte export: %w", span, c.size, rdma.ErrRange)
	}
	slots := span / uint64(cfg.Size)
	buf := make([]byte, cfg.Size)
	lat := make([]time.Duration, cfg.Count)
	start := time.Now()
	for i := range lat {
		off := uint64(i) % slots * uint64(cfg.Size)
		t0 := time.Now()
		var err error
		if cfg.Kind == OpRead {
			err = c.Read(ctx, buf, off)
		} else {
			err = c.Write(ctx, buf, off)
		}
		if err != nil {
			return BenchResult{}, err
		}
		lat[i] = time.Since(t0)
	}
	r := BenchResult{Ops: cfg.Count, Bytes: int64(cfg.Count) * int64(cfg.Size), Elapsed: time.Since(start)}
	slices.Sort(lat)
	r.P50, r.P99 = lat[len(lat)/2], lat[len(lat)*99/100]
	return r, nil
}
