package serial

// Stats counts what a Decoder (or a Link) saw. Counters only grow.
type Stats struct {
	// Frames is the number of good frames handed to the caller.
	Frames uint64
	// FCSErrors counts complete frames whose FCS did not match; they are
	// dropped silently because MCTP has no link-level retry (a lost request
	// shows up as a requester timeout).
	FCSErrors uint64
	// Dropped counts frames abandoned before their FCS could be checked: bad
	// revision after an opening flag, byte count below MinCount or above the
	// maximum, a raw 7Eh or a bad escape pair inside the packet, or a
	// missing closing flag. Idle noise between frames is not counted.
	Dropped uint64
	// Sent is the number of frames a Link wrote. A Decoder leaves it 0.
	Sent uint64
}

type decState uint8

const (
	stHunt  decState = iota // skipping bytes until a flag
	stRev                   // after a flag: 7Eh is fill, 01h starts a frame
	stCount                 // expecting the byte count
	stData                  // reading packet bytes
	stEsc                   // after 7Dh inside the packet
	stFCSHi                 // raw FCS high byte
	stFCSLo                 // raw FCS low byte
	stClose                 // expecting the closing flag
)

// Decoder is the receiver state machine of cxl-wire.md §1.4 (receiver rules
// 1–6). It is fed bytes as they arrive, in chunks of any size, and never
// needs to look ahead, so stream reads may split or merge frames freely.
//
// Resynchronisation: any error drops the frame and hunts for the next 7Eh;
// when the byte that caused the error is itself 7Eh it is taken as the next
// opening flag. A closing flag also counts as a possible opening flag, so a
// peer that shares flags between frames still works. Because the FCS bytes
// are raw, a 7Eh that lands in an FCS position of a corrupt frame is
// replayed as an opening flag once the closing flag turns out to be
// missing. Together these guarantee that a well-formed frame is decoded
// after arbitrary garbage, as long as the maximum count stays below 7Dh
// (with a larger maximum a count byte can itself look like a flag).
//
// A Decoder is not safe for concurrent use.
type Decoder struct {
	max    int
	st     decState
	opened bool // in stRev: a real opening flag was seen, not only a closing one
	n, i   int
	fcs    uint16
	hi, lo byte
	stats  Stats
	buf    [MaxCount]byte
}

// NewDecoder returns a decoder that accepts packets of MinCount..maxCount
// bytes. maxCount 0 (or below MinCount) means DefaultMaxCount; values above
// MaxCount are clamped to MaxCount.
func NewDecoder(maxCount int) *Decoder {
	return &Decoder{max: clampMax(maxCount)}
}

func clampMax(n int) int {
	switch {
	case n < MinCount:
		return DefaultMaxCount
	case n > MaxCount:
		return MaxCount
	}
	return n
}

// Feed runs the bytes of p through the state machine and calls emit once
// for every good frame, in stream order. The slice passed to emit aliases
// the decoder's buffer: it is valid only until emit returns, so copy it to
// keep it. emit must not call Feed.
func (d *Decoder) Feed(p []byte, emit func(pkt []byte)) {
	for _, b := range p {
		d.step(b, emit)
	}
}

// Stats returns the decoder's counters.
func (d *Decoder) Stats() Stats { return d.stats }

func (d *Decoder) step(b byte, emit func([]byte)) {
	switch d.st {
	case stHunt:
		if b == Flag {
			d.st, d.opened = stRev, true
		}
	case stRev:
		switch b {
		case Flag:
			d.opened = true // fill, or the opening flag after a closing one
		case Revision:
			d.st = stCount
		default:
			// Right after a closing flag this is idle noise, not a frame.
			if d.opened {
				d.stats.Dropped++
			}
			d.st = stHunt
		}
	case stCount:
		n := int(b)
		if n < MinCount || n > d.max {
			d.drop(b)
			return
		}
		d.n, d.i = n, 0
		d.fcs = fcsByte(fcsByte(FCSInit, Revision), b)
		d.st = stData
	case stData:
		switch b {
		case Flag:
			d.drop(b) // rule 3: a raw 7Eh aborts and opens the next frame
		case Escape:
			d.st = stEsc
		default:
			d.put(b)
		}
	case stEsc:
		if b == Flag^escapeXOR || b == Escape^escapeXOR {
			d.put(b ^ escapeXOR)
		} else {
			d.drop(b)
		}
	case stFCSHi:
		d.hi, d.st = b, stFCSLo
	case stFCSLo:
		d.lo, d.st = b, stClose
	case stClose:
		if b != Flag {
			d.stats.Dropped++
			d.st = stHunt
			// A flag swallowed as an FCS byte may have been the opening
			// flag of the next frame; replay from it. Only stHunt..stCount
			// are reachable in three bytes, so this cannot recurse further.
			switch {
			case d.hi == Flag:
				d.step(d.hi, emit)
				d.step(d.lo, emit)
				d.step(b, emit)
			case d.lo == Flag:
				d.step(d.lo, emit)
				d.step(b, emit)
			}
			return
		}
		d.st, d.opened = stRev, false
		if uint16(d.hi)<<8|uint16(d.lo) != d.fcs {
			d.stats.FCSErrors++
			return
		}
		d.stats.Frames++
		emit(d.buf[:d.n])
	}
}

// put stores one unescaped packet byte.
func (d *Decoder) put(c byte) {
	d.buf[d.i] = c
	d.i++
	d.fcs = fcsByte(d.fcs, c)
	if d.i == d.n {
		d.st = stFCSHi
	} else {
		d.st = stData
	}
}

// drop abandons the current frame because of byte b.
func (d *Decoder) drop(b byte) {
	d.stats.Dropped++
	if b == Flag {
		d.st, d.opened = stRev, true
		return
	}
	d.st = stHunt
}
