package pldm

import "math"

// scale returns v·10^mod. Negative powers divide, so that 423·10^-1 is the
// float64 nearest 42.3 rather than 42.300000000000004.
func scale(v float64, mod int8) float64 {
	switch {
	case mod > 0:
		return v * math.Pow10(int(mod))
	case mod < 0:
		return v / math.Pow10(-int(mod))
	}
	return v
}

// roundHalfAway rounds to the nearest integer, halves away from zero, and
// saturates at the int64 range.
func roundHalfAway(v float64) int64 {
	switch {
	case math.IsNaN(v):
		return 0
	case v >= math.MaxInt64:
		return math.MaxInt64
	case v <= math.MinInt64:
		return math.MinInt64
	}
	return int64(math.Round(v))
}
