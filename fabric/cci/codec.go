package cci

import "fmt"

// This file holds the small structural helpers every payload codec shares.
// They only check sizes; semantic limits (extent counts, block multiples,
// policy values) belong to the Fabric Manager and the device model.

// errShort reports a payload shorter than the layout needs.
func errShort(what string, need, have int) error {
	return fmt.Errorf("cci: %s needs %d bytes, have %d: %w", what, need, have, ErrPayloadLength)
}

// errSize reports a counted payload whose size disagrees with its count.
func errSize(what string, want uint64, have int) error {
	return fmt.Errorf("cci: %s: count implies %d bytes, have %d: %w", what, want, have, ErrPayloadLength)
}

// checkMin fails when b is shorter than n bytes. Fixed-size payloads use it
// directly: trailing bytes are ignored because commands evolve by appending
// fields (CXL 3.1 §8.2.9), and a responder bounds request sizes with
// RequestLength before decoding.
func checkMin(what string, b []byte, n int) error {
	if len(b) < n {
		return errShort(what, n, len(b))
	}
	return nil
}

// checkList checks that b holds exactly hdr bytes followed by n entries of
// size entry. The arithmetic is done in uint64 so that a hostile 32-bit
// count cannot overflow. Exactness (rather than "at least") is what lets a
// responder reject a count that disagrees with the payload length.
func checkList(what string, b []byte, hdr int, n uint64, entry int) error {
	want := uint64(hdr) + n*uint64(entry)
	if n > uint64(len(b)) || want != uint64(len(b)) {
		return errSize(what, want, len(b))
	}
	return nil
}

// parseExtents decodes n consecutive extents from b, which checkList has
// already sized.
func parseExtents(b []byte, n int) []Extent {
	if n == 0 {
		return nil
	}
	out := make([]Extent, n)
	for i := range out {
		out[i], _ = ParseExtent(b[i*ExtentLen:]) // length checked by the caller
	}
	return out
}

// appendExtents appends the wire form of every extent in es.
func appendExtents(b []byte, es []Extent) []byte {
	for _, e := range es {
		b = e.AppendBinary(b)
	}
	return b
}

// toCapacityUnits converts a byte count that must be a multiple of 256 MB
// into the wire's 256 MB units.
func toCapacityUnits(what string, bytes uint64) (uint64, error) {
	if bytes%CapacityUnit != 0 {
		return 0, fmt.Errorf("cci: %s %#x is not a multiple of 256 MB", what, bytes)
	}
	return bytes / CapacityUnit, nil
}

// fromCapacityUnits converts a wire value in 256 MB units into bytes,
// rejecting values that do not fit in 64 bits.
func fromCapacityUnits(what string, units uint64) (uint64, error) {
	if units > (1<<64-1)/CapacityUnit {
		return 0, fmt.Errorf("cci: %s of %#x × 256 MB overflows 64 bits: %w", what, units, ErrPayloadLength)
	}
	return units * CapacityUnit, nil
}

// b2u converts a bool to a flag bit.
func b2u(v bool) byte {
	if v {
		return 1
	}
	return 0
}
