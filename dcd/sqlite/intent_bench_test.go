package sqlite

import (
	"testing"
	"time"

	"cxlpool/dcd"
	"cxlpool/dcd/ledgertest"
)

// BenchmarkIntentVsCommit is the grant intent's transaction (BeginGrant:
// admission, insert, commit) at synchronous=NORMAL beside a bare commit
// (Ping) in the same loop: the part of a grant's latency before its fsync
// that a bare commit does not pay.
func BenchmarkIntentVsCommit(b *testing.B) {
	l := openBench(b, "NORMAL")
	ctx := b.Context()
	inv := ledgertest.Inventory()
	inv.Regions = append(inv.Regions, dcd.Region{Index: 2, Base: 1 << 40, Length: 1 << 40, BlockSize: ledgertest.Block})
	if err := l.SyncInventory(ctx, inv); err != nil {
		b.Fatal(err)
	}
	chunks := make([]dcd.Chunk, b.N)
	for i := range chunks {
		c, err := l.CreateChunk(ctx, dcd.Chunk{Region: 2, Size: ledgertest.Block})
		if err != nil {
			b.Fatal(err)
		}
		chunks[i] = c
	}
	var intent, commit time.Duration
	b.ResetTimer()
	for i, c := range chunks {
		t0 := time.Now()
		if err := l.Ping(ctx); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := l.BeginGrant(ctx, c.ID, dcd.HostID(i%ledgertest.NumHosts), nil); err != nil {
			b.Fatal(err)
		}
		commit += t1.Sub(t0)
		intent += time.Since(t1)
	}
	b.ReportMetric(float64(intent.Nanoseconds())/float64(b.N), "intent-ns")
	b.ReportMetric(float64(commit.Nanoseconds())/float64(b.N), "commit-ns")
	b.ReportMetric(float64(intent)/float64(commit), "intent/commit")
}
