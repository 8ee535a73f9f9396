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
// through the first Span bytes of the export (Size if 0). With Duration
// set the measurement also stops once that much time has passed, and
// Count 0 means no limit but the time.
type BenchConfig struct {
	Kind     OpKind
	Size     int
	Count    int
	Span     uint64
	Duration time.Duration
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

// Bench measures the export from this client (poolctl export bench),
// after one untimed pass over the span. A WRITE bench overwrites the
// export's bytes.
func (c *Client) Bench(ctx context.Context, cfg BenchConfig) (BenchResult, error) {
	if cfg.Size <= 0 || cfg.Count < 0 || cfg.Duration < 0 || (cfg.Count == 0 && cfg.Duration == 0) ||
		(cfg.Kind != OpRead && cfg.Kind != OpWrite) {
		return BenchResult{}, fmt.Errorf("client: bench: %d operations of kind %d, %d bytes: %w", cfg.Count, cfg.Kind, cfg.Size, rdma.ErrInvalid)
	}
	span := max(cfg.Span, uint64(cfg.Size))
	if span > c.size {
		return BenchResult{}, fmt.Errorf("client: bench: %d bytes of a %d-byte export: %w", span, c.size, rdma.ErrRange)
	}
	slots := span / uint64(cfg.Size)
	buf := make([]byte, cfg.Size)
	do := func(i int) error {
		off := uint64(i) % slots * uint64(cfg.Size)
		if cfg.Kind == OpRead {
			return c.Read(ctx, buf, off)
		}
		return c.Write(ctx, buf, off)
	}
	// One untimed pass over the span first: the first touch of the box's
	// memory (a page fault per page of the simulated box's memory file,
	// which is sparse) is not what a transfer costs, and a short run
	// would otherwise measure little else for large sizes.
	for i := range int(slots) {
		if err := do(i); err != nil {
			return BenchResult{}, err
		}
	}
	// Room for the run up front (a time-bound run: a second's worth of
	// small READs), so the loop does not grow and copy it as it goes.
	want := cfg.Count
	if want == 0 {
		want = 1 << 16
	}
	lat := make([]time.Duration, 0, min(want, 1<<20))
	start := time.Now()
	for i := 0; cfg.Count == 0 || i < cfg.Count; i++ {
		t0 := time.Now()
		if err := do(i); err != nil {
			return BenchResult{}, err
		}
		t1 := time.Now()
		lat = append(lat, t1.Sub(t0))
		if cfg.Duration > 0 && t1.Sub(start) >= cfg.Duration {
			break
		}
	}
	r := BenchResult{Ops: len(lat), Bytes: int64(len(lat)) * int64(cfg.Size), Elapsed: time.Since(start)}
	slices.Sort(lat)
	r.P50, r.P99 = lat[len(lat)/2], lat[len(lat)*99/100]
	return r, nil
}
