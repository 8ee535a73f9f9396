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
