package telemetry

import (
	"testing"

	"cxlpool/hmu"
)

// TestEpochOf: every epoch a CHMU can express survives the trip through
// EpochMilliseconds (same length, finest scale), and lengths it cannot
// express are refused.
func TestEpochOf(t *testing.T) {
	for scale := uint8(1); scale <= 5; scale++ {
		for _, m := range []uint16{1, 7, 100, 4095} {
			e := hmu.Epoch{Scale: scale, Multiplier: m}
			got, ok := epochOf(epochMS(e))
			if !ok || got.Duration() != e.Duration() {
				t.Errorf("epochOf(%v ms) = %+v, %v; want %v long", epochMS(e), got, ok, e.Duration())
			}
		}
	}
	for _, tc := range []struct {
		ms   float64
		want hmu.Epoch
		ok   bool
	}{
		{0.1, hmu.Epoch{Scale: 1, Multiplier: 1}, true},
		{100, hmu.Epoch{Scale: 1, Multiplier: 1000}, true},
		{1000, hmu.Epoch{Scale: 2, Multiplier: 1000}, true},
		{60_000, hmu.Epoch{Scale: 4, Multiplier: 600}, true},
		{0, hmu.Epoch{}, false},
		{-5, hmu.Epoch{}, false},
		{0.05, hmu.Epoch{}, false},
		{4096 * 1000, hmu.Epoch{}, false},
		{409.55, hmu.Epoch{}, false}, // not a whole number of 100 µs
	} {
		if got, ok := epochOf(tc.ms); ok != tc.ok || got != tc.want {
			t.Errorf("epochOf(%v): got %+v, %v; want %+v, %v", tc.ms, got, ok, tc.want, tc.ok)
		}
	}
}
