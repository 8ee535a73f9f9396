package sqlite

import (
	"path/filepath"
	"testing"

	"cxlpool/dcd"
	"cxlpool/dcd/ledgertest"
	"cxlpool/fabric/cci"
)

// syncLevels are the durability settings benchmarks compare.
var syncLevels = []string{"FULL", "NORMAL"}

// BenchmarkCommit is the cost of one minimal durable write transaction
// (Ping): the floor under any ledger write at the same durability.
func BenchmarkCommit(b *testing.B) {
	for _, sync := range syncLevels {
		b.Run(sync, func(b *testing.B) {
			l := openBench(b, sync)
			for b.Loop() {
				if err := l.Ping(b.Context()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBeginCompleteGrant is the ledger's share of one grant: the
// intent (BeginGrant) and the outcome (CompleteGrant), two transactions.
func BenchmarkBeginCompleteGrant(b *testing.B) {
	for _, sync := range syncLevels {
		b.Run(sync, func(b *testing.B) {
			l := openBench(b, sync)
			ctx := b.Context()
			inv := ledgertest.Inventory()
			// One region large enough for a chunk per iteration.
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
			b.ResetTimer()
			for i, c := range chunks {
				g, err := l.BeginGrant(ctx, c.ID, dcd.HostID(i%ledgertest.NumHosts), nil)
				if err != nil {
					b.Fatal(err)
				}
				ext := []cci.Extent{{DPA: 1<<40 + uint64(i)*c.Size, Length: c.Size, Tag: c.Tag}}
				if _, err := l.CompleteGrant(ctx, g.ID, ext); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func openBench(b *testing.B, sync string) *Ledger {
	b.Helper()
	l, err := Open(b.Context(), filepath.Join(b.TempDir(), "ledger.db"), Options{Synchronous: sync})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := l.Close(); err != nil {
			b.Error(err)
		}
	})
	return l
}
