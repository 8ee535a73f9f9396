// Package stream carries the telemetry to consoles over WebSocket: compact,
// versioned binary frames (heatmaps and top-K updates), a Hub that fans
// frames out through bounded per-client queues — a slow client loses
// frames (counted), it never slows the publisher or the ingest behind it —
// and an http.Handler that upgrades with gorilla/websocket after checking
// the Origin. Authentication is the mounting API's job.
//
// # Frame format, version 1
//
// Every frame is one binary WebSocket message, little-endian:
//
//	off size field
//	  0   1  version (1)
//	  1   1  kind: 1 heatmap, 2 top-K
//	  2   2  flags (0; reserved)
//	  4   4  sequence number (per hub, +1 per published frame: gaps are drops)
//	  8   8  publish time, Unix ns (lag = receive time − this)
//
// Heatmap (kind 1), 32 + n bytes:
//
//	16   8  DPA of cell 0
//	24   1  log2(cell size in bytes)
//	25   1  encoding: 1 = log-quantized (below)
//	26   2  reserved
//	28   4  n, number of cells
//	32   n  one byte per cell: 0 = no heat, q > 0 ⇒ heat ≈ 2^((q−1)/8) − 1
//	        (8 steps per doubling, ±4.5 %, up to ≈ 3.6·10^9)
//
// Top-K (kind 2), 28 + 16·n bytes:
//
//	16   2  scope: host ID ≥ 0, −1 shared capacity, −2 whole pool (int16)
//	18   1  log2(unit size in bytes)
//	19   1  reserved
//	20   4  error bound: no count is over by more (saturating)
//	24   2  n, entries, hottest first
//	26   2  reserved
//	28 16·n entries: unit number (u64, DPA = unit << log2 unit size),
//	        count (u32, saturating), err (u32, saturating)
//
// A decoder must reject a version it does not know and ignore nothing
// else: lengths are exact.
package stream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"

	"cxlpool/hmu/agg"
)

// Version is the frame format version this package writes.
const Version = 1

// Kind is a frame kind.
type Kind uint8

// Frame kinds.
const (
	KindHeatmap Kind = 1
	KindTopK    Kind = 2
)

// EncodingLog8 is the heatmap cell encoding of version 1.
const EncodingLog8 = 1

const (
	headerLen  = 16
	heatmapLen = 32
	topKLen    = 28
	entryLen   = 16
)

// ErrFrame: the bytes are not a frame this package can decode.
var ErrFrame = errors.New("malformed frame")

// Header is the common frame header.
type Header struct {
	Version uint8
	Kind    Kind
	Seq     uint32
	Time    time.Time
}

// Heatmap is a decoded heatmap frame.
type Heatmap struct {
	Header
	Base      uint64
	CellShift uint8
	Cells     []uint8 // quantized, see Quantize
}

// TopK is a decoded top-K frame.
type TopK struct {
	Header
	Scope      int16
	UnitShift  uint8
	ErrorBound uint32
	Entries    []Entry
}

// Entry is one top-K unit.
type Entry struct {
	Unit  uint64
	Count uint32
	Err   uint32
}

// Quantize maps a heat value to one byte, 8 steps per doubling.
func Quantize(heat float64) uint8 {
	if !(heat > 0) { // also NaN
		return 0
	}
	return uint8(min(255, 1+math.Floor(8*math.Log2(1+heat))))
}

// Dequantize returns the lower edge of q's bucket: the smallest heat that
// quantizes to q (exclusive for q = 1, whose bucket is (0, 2^(1/8) − 1)).
func Dequantize(q uint8) float64 {
	if q == 0 {
		return 0
	}
	return math.Exp2(float64(q-1)/8) - 1
}

func sat32(v uint64) uint32 { return uint32(min(v, math.MaxUint32)) }

func appendHeader(b []byte, k Kind, seq uint32, t time.Time) []byte {
	b = append(b, Version, byte(k), 0, 0)
	b = binary.LittleEndian.AppendUint32(b, seq)
	return binary.LittleEndian.AppendUint64(b, uint64(t.UnixNano()))
}

// AppendHeatmap appends the encoding of f (its Version and Kind are
// ignored: this package writes Version).
func AppendHeatmap(b []byte, f Heatmap) []byte {
	b = appendHeader(b, KindHeatmap, f.Seq, f.Time)
	b = binary.LittleEndian.AppendUint64(b, f.Base)
	b = append(b, f.CellShift, EncodingLog8, 0, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(f.Cells)))
	return append(b, f.Cells...)
}

// AppendTopK appends the encoding of f; at most 65535 entries are written.
func AppendTopK(b []byte, f TopK) []byte {
	es := f.Entries[:min(len(f.Entries), math.MaxUint16)]
	b = appendHeader(b, KindTopK, f.Seq, f.Time)
	b = binary.LittleEndian.AppendUint16(b, uint16(f.Scope))
	b = append(b, f.UnitShift, 0)
	b = binary.LittleEndian.AppendUint32(b, f.ErrorBound)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(es)))
	b = append(b, 0, 0)
	for _, e := range es {
		b = binary.LittleEndian.AppendUint64(b, e.Unit)
		b = binary.LittleEndian.AppendUint32(b, e.Count)
		b = binary.LittleEndian.AppendUint32(b, e.Err)
	}
	return b
}

// DecodeHeader decodes the common header and checks the version.
func DecodeHeader(b []byte) (Header, error) {
	if len(b) < headerLen {
		return Header{}, fmt.Errorf("stream: %d-byte frame: %w", len(b), ErrFrame)
	}
	h := Header{
		Version: b[0],
		Kind:    Kind(b[1]),
		Seq:     binary.LittleEndian.Uint32(b[4:]),
		Time:    time.Unix(0, int64(binary.LittleEndian.Uint64(b[8:]))),
	}
	if h.Version != Version {
		return h, fmt.Errorf("stream: version %d: %w", h.Version, ErrFrame)
	}
	return h, nil
}

// DecodeHeatmap decodes a heatmap frame.
func DecodeHeatmap(b []byte) (Heatmap, error) {
	h, err := DecodeHeader(b)
	if err != nil {
		return Heatmap{}, err
	}
	if h.Kind != KindHeatmap || len(b) < heatmapLen {
		return Heatmap{}, fmt.Errorf("stream: kind %d, %d bytes: not a heatmap: %w", h.Kind, len(b), ErrFrame)
	}
	if b[25] != EncodingLog8 {
		return Heatmap{}, fmt.Errorf("stream: heatmap encoding %d: %w", b[25], ErrFrame)
	}
	n := binary.LittleEndian.Uint32(b[28:])
	if uint64(len(b)) != heatmapLen+uint64(n) {
		return Heatmap{}, fmt.Errorf("stream: heatmap of %d cells in %d bytes: %w", n, len(b), ErrFrame)
	}
	return Heatmap{Header: h, Base: binary.LittleEndian.Uint64(b[16:]), CellShift: b[24], Cells: b[heatmapLen:]}, nil
}

// DecodeTopK decodes a top-K frame.
func DecodeTopK(b []byte) (TopK, error) {
	h, err := DecodeHeader(b)
	if err != nil {
		return TopK{}, err
	}
	if h.Kind != KindTopK || len(b) < topKLen {
		return TopK{}, fmt.Errorf("stream: kind %d, %d bytes: not a top-K: %w", h.Kind, len(b), ErrFrame)
	}
	n := int(binary.LittleEndian.Uint16(b[24:]))
	if len(b) != topKLen+entryLen*n {
		return TopK{}, fmt.Errorf("stream: top-K of %d entries in %d bytes: %w", n, len(b), ErrFrame)
	}
	f := TopK{
		Header:     h,
		Scope:      int16(binary.LittleEndian.Uint16(b[16:])),
		UnitShift:  b[18],
		ErrorBound: binary.LittleEndian.Uint32(b[20:]),
		Entries:    make([]Entry, n),
	}
	for i := range f.Entries {
		e := b[topKLen+entryLen*i:]
		f.Entries[i] = Entry{Unit: binary.LittleEndian.Uint64(e), Count: binary.LittleEndian.Uint32(e[8:]), Err: binary.LittleEndian.Uint32(e[12:])}
	}
	return f, nil
}

// HeatmapFrame builds a heatmap frame from a collector snapshot.
func HeatmapFrame(seq uint32, t time.Time, hm agg.Heatmap) Heatmap {
	f := Heatmap{Header: Header{Version: Version, Kind: KindHeatmap, Seq: seq, Time: t}, CellShift: uint8(bits.TrailingZeros64(hm.CellSize))}
	f.Cells = make([]uint8, len(hm.Cells))
	for i, v := range hm.Cells {
		f.Cells[i] = Quantize(v)
	}
	return f
}

// TopKFrame builds a top-K frame for scope (a host, agg.Shared or
// agg.Pool) from the collector's hot units.
func TopKFrame(seq uint32, t time.Time, scope int, unitSize, bound uint64, hot []agg.Hot) TopK {
	shift := uint8(bits.TrailingZeros64(unitSize))
	f := TopK{Header: Header{Version: Version, Kind: KindTopK, Seq: seq, Time: t}, Scope: int16(scope), UnitShift: shift, ErrorBound: sat32(bound)}
	for _, h := range hot {
		f.Entries = append(f.Entries, Entry{Unit: h.DPA >> shift, Count: sat32(h.Count), Err: sat32(h.Err)})
	}
	return f
}
