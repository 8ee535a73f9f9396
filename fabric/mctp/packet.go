package mctp

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Packetize splits body (message type byte + message) into packets of at
// most HeaderLen+mtu bytes (mtu <= 0 means BaselineMTU). Each packet gets
// h with SOM on the first, EOM on the last and a sequence number counting
// up mod 4 from h.Seq; Version 0 is sent as HeaderVersion. An empty body
// gives one header-only packet. The packets share one backing array but
// never overlap.
func Packetize(h Header, body []byte, mtu int) [][]byte {
	if mtu <= 0 {
		mtu = BaselineMTU
	}
	if h.Version == 0 {
		h.Version = HeaderVersion
	}
	n := (len(body) + mtu - 1) / mtu
	if n == 0 {
		n = 1
	}
	backing := make([]byte, 0, n*HeaderLen+len(body))
	pkts := make([][]byte, n)
	for i := range n {
		chunk := body[min(i*mtu, len(body)):min((i+1)*mtu, len(body))]
		ph := h
		ph.SOM, ph.EOM = i == 0, i == n-1
		ph.Seq = (h.Seq + uint8(i)) & 3
		hb := ph.Marshal()
		start := len(backing)
		backing = append(backing, hb[:]...)
		backing = append(backing, chunk...)
		pkts[i] = backing[start:len(backing):len(backing)]
	}
	return pkts
}

// assemblyKey identifies one message being reassembled (DSP0236: source
// EID, tag and tag owner).
type assemblyKey struct {
	src EID
	tag uint8
	to  bool
}

type partial struct {
	buf  []byte
	next uint8     // expected sequence number of the next packet
	last time.Time // arrival of the latest packet
}

// reassembler implements the receive rules of cxl-wire.md §1.3: SOM
// restarts, an out-of-sequence packet drops the message, EOM delivers.
// Partials idle for longer than timeout are discarded, so a message whose
// tail was lost cannot absorb an unrelated later packet with the same key.
// It is used by one goroutine; only the error counter is read concurrently.
type reassembler struct {
	max       int
	timeout   time.Duration
	partials  map[assemblyKey]*partial
	lastSweep time.Time
	errors    atomic.Uint64
}

func newReassembler(maxMessage int, timeout time.Duration) *reassembler {
	return &reassembler{max: maxMessage, timeout: timeout, partials: make(map[assemblyKey]*partial)}
}

// add takes one packet's header and payload (which it may keep) and returns
// the complete message body when h carries EOM. A non-nil error describes
// why a packet or partial message was dropped.
func (r *reassembler) add(h Header, payload []byte, now time.Time) ([]byte, error) {
	r.sweep(now)
	k := assemblyKey{h.Src, h.Tag, h.TO}
	p := r.partials[k]
	if p != nil && now.Sub(p.last) > r.timeout {
		delete(r.partials, k)
		r.errors.Add(1)
		p = nil
	}
	if h.SOM {
		if p != nil {
			// An unfinished message is superseded.
			delete(r.partials, k)
			r.errors.Add(1)
		}
		if len(payload) > r.max {
			r.errors.Add(1)
			return nil, fmt.Errorf("mctp: reassembly: %d-byte packet from EID %d: %w", len(payload), h.Src, ErrTooLarge)
		}
		if h.EOM {
			return payload, nil
		}
		buf := make([]byte, len(payload), max(len(payload)*4, 256))
		copy(buf, payload)
		r.partials[k] = &partial{buf: buf, next: (h.Seq + 1) & 3, last: now}
		return nil, nil
	}
	if p == nil {
		r.errors.Add(1)
		return nil, fmt.Errorf("mctp: reassembly: packet without SOM from EID %d tag %d: %w", h.Src, h.Tag, ErrMalformed)
	}
	if h.Seq != p.next {
		delete(r.partials, k)
		r.errors.Add(1)
		return nil, fmt.Errorf("mctp: reassembly: sequence %d, want %d from EID %d tag %d: %w",
			h.Seq, p.next, h.Src, h.Tag, ErrMalformed)
	}
	if len(p.buf)+len(payload) > r.max {
		delete(r.partials, k)
		r.errors.Add(1)
		return nil, fmt.Errorf("mctp: reassembly: message from EID %d above %d bytes: %w", h.Src, r.max, ErrTooLarge)
	}
	p.buf = append(p.buf, payload...)
	p.next, p.last = (h.Seq+1)&3, now
	if h.EOM {
		delete(r.partials, k)
		return p.buf, nil
	}
	return nil, nil
}

// sweep discards stale partials, at most a few times per timeout period,
// so a peer that abandons messages cannot grow the map without bound.
func (r *reassembler) sweep(now time.Time) {
	if len(r.partials) == 0 || now.Sub(r.lastSweep) < r.timeout/4 {
		return
	}
	r.lastSweep = now
	for k, p := range r.partials {
		if now.Sub(p.last) > r.timeout {
			delete(r.partials, k)
			r.errors.Add(1)
		}
	}
}
