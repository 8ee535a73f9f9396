package sim

import "testing"

// TestExportAccessesReachCHMU: what the export server moves for remote
// racks (Box.CountAccess) is counted like a host's accesses, one per
// cache line.
func TestExportAccessesReachCHMU(t *testing.T) {
	b, _, _ := manualBox(t)
	startCHMU(t, b)
	b.CountAccess(0, 4096, false) // a 4 KiB READ: 64 lines
	b.CountAccess(8192, 8, true)  // an atomic: one line
	if got, want := b.CHMU().Stats().Accesses, uint64(65); got != want {
		t.Errorf("accesses: got %d, want %d", got, want)
	}
}

// TestCountAccessMatchesPerGrain: a transfer counted in one go (one lock
// for the whole range) counts what the per-grain accesses a host's
// workload makes count, aligned or not, within a grain or across many.
func TestCountAccessMatchesPerGrain(t *testing.T) {
	tests := []struct {
		name   string
		dpa, n uint64
		write  bool
	}{
		{"one line", 64, 8, false},
		{"unaligned within a grain", 70, 100, true},
		{"across grains, unaligned", 200, 5000, false},
		{"1 MiB READ", 1 << 20, 1 << 20, false},
		{"empty", 4096, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			whole, _, _ := manualBox(t)
			startCHMU(t, whole)
			grains, _, _ := manualBox(t)
			startCHMU(t, grains)
			whole.CountAccess(tt.dpa, tt.n, tt.write)
			grains.countAccess(tt.dpa, int(tt.n), tt.write)
			got, want := whole.CHMU().Stats(), grains.CHMU().Stats()
			if got != want {
				t.Errorf("stats: got %+v, want %+v", got, want)
			}
			if lines := (tt.dpa+tt.n+63)/64 - tt.dpa/64; tt.n > 0 && want.Accesses != lines {
				t.Errorf("per-grain accesses: got %d, want %d (one a line)", want.Accesses, lines)
			}
		})
	}
}
