package pldm

import (
	"encoding/binary"
	"fmt"
	"math"
)

// DataSize is the encoding of a raw reading or effecter value
// (sensorDataSize, effecterDataSize) or, with Real32, of a range field
// (rangeFieldFormat).
type DataSize uint8

// Data sizes (platform.h L164, L173).
const (
	Uint8  DataSize = 0
	Sint8  DataSize = 1
	Uint16 DataSize = 2
	Sint16 DataSize = 3
	Uint32 DataSize = 4
	Sint32 DataSize = 5
	Real32 DataSize = 6 // range fields only
)

// Width is the encoded size in bytes, 0 for an unknown size.
func (d DataSize) Width() int {
	switch d {
	case Uint8, Sint8:
		return 1
	case Uint16, Sint16:
		return 2
	case Uint32, Sint32, Real32:
		return 4
	}
	return 0
}

// Range returns the smallest and largest integer d can carry.
func (d DataSize) Range() (lo, hi int64) {
	switch d {
	case Uint8:
		return 0, math.MaxUint8
	case Sint8:
		return math.MinInt8, math.MaxInt8
	case Uint16:
		return 0, math.MaxUint16
	case Sint16:
		return math.MinInt16, math.MaxInt16
	case Uint32:
		return 0, math.MaxUint32
	case Sint32:
		return math.MinInt32, math.MaxInt32
	}
	return 0, -1
}

// validInt reports whether d is one of the six integer sizes.
func (d DataSize) validInt() bool { return d <= Sint32 }

// reader walks a payload. The first failure sticks; later reads return
// zeros, so decoders read everything and check err once.
type reader struct {
	what string
	b    []byte
	off  int
	err  error
}

func newReader(what string, b []byte) *reader { return &reader{what: what, b: b} }

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || len(r.b)-r.off < n {
		r.err = fmt.Errorf("pldm: %s: %d bytes, need %d at offset %d: %w", r.what, len(r.b), r.off+n, r.off, ErrLength)
		return nil
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s
}

func (r *reader) u8() uint8 {
	if s := r.take(1); s != nil {
		return s[0]
	}
	return 0
}

func (r *reader) bool8() bool { return r.u8() != 0 }

func (r *reader) u16() uint16 {
	if s := r.take(2); s != nil {
		return binary.LittleEndian.Uint16(s)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if s := r.take(4); s != nil {
		return binary.LittleEndian.Uint32(s)
	}
	return 0
}

func (r *reader) f32() float32 { return math.Float32frombits(r.u32()) }

// dataSize reads a size byte and checks it is an integer size.
func (r *reader) dataSize(field string) DataSize {
	d := DataSize(r.u8())
	if r.err == nil && !d.validInt() {
		r.fail(field, uint64(d))
	}
	return d
}

// rangeFormat reads a rangeFieldFormat byte (integer sizes or Real32).
func (r *reader) rangeFormat(field string) DataSize {
	d := DataSize(r.u8())
	if r.err == nil && d > Real32 {
		r.fail(field, uint64(d))
	}
	return d
}

func (r *reader) fail(field string, v uint64) {
	if r.err == nil {
		r.err = fmt.Errorf("pldm: %s: %s %d: %w", r.what, field, v, ErrInvalid)
	}
}

// value reads a raw integer of size d (already validated).
func (r *reader) value(d DataSize) int64 {
	s := r.take(d.Width())
	if s == nil {
		return 0
	}
	switch d {
	case Uint8:
		return int64(s[0])
	case Sint8:
		return int64(int8(s[0]))
	case Uint16:
		return int64(binary.LittleEndian.Uint16(s))
	case Sint16:
		return int64(int16(binary.LittleEndian.Uint16(s)))
	case Uint32:
		return int64(binary.LittleEndian.Uint32(s))
	case Sint32:
		return int64(int32(binary.LittleEndian.Uint32(s)))
	}
	return 0
}

// rangeValue reads a range field of format d as a float64 (exact for every
// integer format and for real32).
func (r *reader) rangeValue(d DataSize) float64 {
	if d == Real32 {
		return float64(r.f32())
	}
	return float64(r.value(d))
}

// rest returns the unread bytes (a copy, so decoded values never alias
// the caller's buffer).
func (r *reader) rest() []byte {
	if r.err != nil {
		return nil
	}
	s := append([]byte(nil), r.b[r.off:]...)
	r.off = len(r.b)
	return s
}

// done returns the first error, or an ErrLength error if bytes are left.
func (r *reader) done() error {
	if r.err == nil && r.off != len(r.b) {
		r.err = fmt.Errorf("pldm: %s: %d bytes, want %d: %w", r.what, len(r.b), r.off, ErrLength)
	}
	return r.err
}

// writer builds a payload; the first failure sticks.
type writer struct {
	what string
	b    []byte
	err  error
}

func newWriter(what string, capacity int) *writer {
	return &writer{what: what, b: make([]byte, 0, capacity)}
}

func (w *writer) u8(v uint8) { w.b = append(w.b, v) }

func (w *writer) bool8(v bool) {
	if v {
		w.u8(1)
	} else {
		w.u8(0)
	}
}

func (w *writer) u16(v uint16) { w.b = binary.LittleEndian.AppendUint16(w.b, v) }
func (w *writer) u32(v uint32) { w.b = binary.LittleEndian.AppendUint32(w.b, v) }

func (w *writer) f32(v float32) { w.u32(math.Float32bits(v)) }

func (w *writer) bytes(v []byte) { w.b = append(w.b, v...) }

func (w *writer) fail(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf("pldm: %s: %s: %w", w.what, fmt.Sprintf(format, args...), ErrInvalid)
	}
}

// dataSize writes d after checking it is an integer size.
func (w *writer) dataSize(field string, d DataSize) {
	if !d.validInt() {
		w.fail("%s %d", field, d)
	}
	w.u8(uint8(d))
}

// rangeFormat writes d after checking it is a range field format.
func (w *writer) rangeFormat(field string, d DataSize) {
	if d > Real32 {
		w.fail("%s %d", field, d)
	}
	w.u8(uint8(d))
}

// value writes v with size d; v must fit.
func (w *writer) value(field string, d DataSize, v int64) {
	lo, hi := d.Range()
	if v < lo || v > hi {
		w.fail("%s %d does not fit data size %d", field, v, d)
		v = 0
	}
	switch d.Width() {
	case 1:
		w.u8(uint8(v))
	case 2:
		w.u16(uint16(v))
	case 4:
		w.u32(uint32(v))
	}
}

// rangeValue writes a range field of format d; integer formats need an
// integral value that fits.
func (w *writer) rangeValue(field string, d DataSize, v float64) {
	if d == Real32 {
		w.f32(float32(v))
		return
	}
	if v != math.Trunc(v) || math.IsNaN(v) {
		w.fail("%s %g is not an integer", field, v)
		v = 0
	}
	lo, hi := d.Range()
	if v < float64(lo) || v > float64(hi) {
		w.fail("%s %g does not fit format %d", field, v, d)
		v = 0
	}
	w.value(field, d, int64(v))
}

func (w *writer) result() ([]byte, error) {
	if w.err != nil {
		return nil, w.err
	}
	return w.b, nil
}

// bitSet reports whether bit i of the little-endian bitfield b is set.
func bitSet(b []byte, i int) bool {
	return i >= 0 && i/8 < len(b) && b[i/8]&(1<<(i%8)) != 0
}

// setBit sets bit i of b; out-of-range bits are ignored.
func setBit(b []byte, i int) {
	if i >= 0 && i/8 < len(b) {
		b[i/8] |= 1 << (i % 8)
	}
}
