package rdma

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"cxlpool/dcd"
	"cxlpool/fabric/cci"
)

// gate counts the accesses in flight on one export and, once revoked,
// refuses new ones and tells when the last one has left. It is an epoch
// counter rather than a sync.RWMutex because one transport goroutine may
// hold several accesses to the same export at once (pipelined zero-copy
// responses waiting for one writev); a read lock taken twice deadlocks as
// soon as a writer queues between the two.
type gate struct {
	state   atomic.Int64 // in-flight count | gateRevoked
	once    sync.Once
	drained chan struct{}
}

const gateRevoked = 1 << 62

func (g *gate) enter() bool {
	if g.state.Add(1)&gateRevoked != 0 {
		g.exit()
		return false
	}
	return true
}

func (g *gate) exit() {
	if g.state.Add(-1) == gateRevoked {
		g.once.Do(func() { close(g.drained) })
	}
}

// close refuses new accesses; drained is closed once none is in flight.
func (g *gate) close() {
	for {
		old := g.state.Load()
		if old&gateRevoked != 0 {
			return
		}
		if g.state.CompareAndSwap(old, old|gateRevoked) {
			if old == 0 {
				g.once.Do(func() { close(g.drained) })
			}
			return
		}
	}
}

// segment is one device extent's part of an export, mapped.
type segment struct {
	off uint64 // export offset of b[0]
	dpa uint64 // device physical address of b[0]
	b   []byte
}

// Handle is a live export as transports see it: its bytes, mapped, behind
// the checks every access must pass. Methods are safe for concurrent use.
type Handle struct {
	exp       Export // Token zeroed
	tokenHash TokenHash
	grants    []dcd.GrantID // the grants that held the capacity at creation (Record.Grants)
	extents   []cci.Extent  // the device extents behind the export, in export order
	segs      []segment
	size      uint64
	expiry    int64 // unix ns; 0: never
	clock     func() time.Time
	observe   func(dpa, n uint64, write bool) // Config.CountAccess

	g      gate
	ctx    context.Context
	cancel context.CancelFunc

	// Traffic counters (see Traffic).
	reads, writes, atomics  atomic.Uint64
	bytesRead, bytesWritten atomic.Uint64
}

// Traffic counts what clients did through an export: the operations that
// passed its checks and the bytes they moved, as the transport executed
// them (a transfer a client striped over several connections counts once
// per piece). Bytes that hardware moves (rdma/verbs registers the memory
// with the HCA) are not seen, so not counted.
type Traffic struct {
	Reads, Writes, Atomics  uint64
	BytesRead, BytesWritten uint64
}

// Traffic returns the export's counters so far.
func (h *Handle) Traffic() Traffic {
	return Traffic{Reads: h.reads.Load(), Writes: h.writes.Load(), Atomics: h.atomics.Load(),
		BytesRead: h.bytesRead.Load(), BytesWritten: h.bytesWritten.Load()}
}

// newHandle maps exp's part of extents (already in export order); hash is
// its token's hash.
func newHandle(exp Export, hash TokenHash, extents []cci.Extent, mem Memory, clock func() time.Time) (*Handle, error) {
	h := &Handle{exp: exp, tokenHash: hash, extents: extents, size: exp.Length, clock: clock}
	h.exp.Token = Token{}
	if !exp.Expiry.IsZero() {
		h.expiry = exp.Expiry.UnixNano()
	}
	ranges, left := layout(extents, exp.Offset, exp.Length)
	var off uint64
	for _, r := range ranges {
		b, err := mem.Bytes(r.DPA, r.Length)
		if err != nil {
			return nil, fmt.Errorf("rdma: map %#x bytes at DPA %#x: %w", r.Length, r.DPA, err)
		}
		h.segs = append(h.segs, segment{off: off, dpa: r.DPA, b: b})
		off += r.Length
	}
	if left != 0 {
		return nil, fmt.Errorf("rdma: export %#x+%#x beyond the chunk's %#x bytes: %w",
			exp.Offset, exp.Length, exp.Offset+exp.Length-left, ErrInvalid)
	}
	h.g.drained = make(chan struct{})
	h.ctx, h.cancel = context.WithCancel(context.Background())
	return h, nil
}

// layout lays length bytes at offset off of a chunk's capacity (extents
// in export order) over device addresses: one range per extent it
// touches. left is what did not fit (0 when the extents cover it).
func layout(extents []cci.Extent, off, length uint64) (ranges []dcd.DPARange, left uint64) {
	skip, left := off, length
	for _, e := range extents {
		if left == 0 {
			break
		}
		if skip >= e.Length {
			skip -= e.Length
			continue
		}
		n := min(e.Length-skip, left)
		ranges = append(ranges, dcd.DPARange{DPA: e.DPA + skip, Length: n})
		left -= n
		skip = 0
	}
	return ranges, left
}

// Export describes the export (with its token zeroed).
func (h *Handle) Export() Export { return h.exp }

// Size is the export's length in bytes.
func (h *Handle) Size() uint64 { return h.size }

// Perms is what the export allows.
func (h *Handle) Perms() Perm { return h.exp.Perms }

// Context is cancelled when revocation starts. A transport blocked in I/O
// while it holds a pinned access (a writev from, or a read into, mapped
// memory) uses it to abort that I/O, so that Revoke never waits on a slow
// peer.
func (h *Handle) Context() context.Context { return h.ctx }

// Regions returns the mapped bytes of the whole export, in order, for a
// transport that registers them with hardware (rdma/verbs). A transport
// that hands them to hardware must stop that access itself when Context
// is cancelled, before Unpin.
func (h *Handle) Regions() [][]byte {
	out := make([][]byte, len(h.segs))
	for i, s := range h.segs {
		out[i] = s.b
	}
	return out
}

// Pin checks an access of n bytes at export offset off that needs perm,
// and appends the mapped slices it covers to dst (more than one when the
// range spans device extents). Until Unpin the bytes stay the export's:
// Revoke waits for them. Every successful Pin needs exactly one Unpin.
// A successful Pin for PermRead or PermWrite counts as a READ or WRITE of
// n bytes in Traffic.
func (h *Handle) Pin(dst [][]byte, off, n uint64, perm Perm) ([][]byte, error) {
	dst, err := h.PinUnobserved(dst, off, n, perm)
	if err == nil {
		h.Observe(off, n, perm != PermRead)
	}
	return dst, err
}

// PinUnobserved is Pin without telling Config.CountAccess, for a transport
// that answers first and calls Observe after, so that the counting (a lock
// and a map update per 256 bytes in the virtual box's CHMU) is not on the
// response's path.
func (h *Handle) PinUnobserved(dst [][]byte, off, n uint64, perm Perm) ([][]byte, error) {
	dst, err := h.Hold(dst, off, n, perm)
	if err != nil {
		return dst, err
	}
	switch perm {
	case PermRead:
		h.reads.Add(1)
		h.bytesRead.Add(n)
	case PermWrite:
		h.writes.Add(1)
		h.bytesWritten.Add(n)
	}
	return dst, nil
}

// Observe tells Config.CountAccess of an access of n bytes at export
// offset off that PinUnobserved let through. It needs no pin: it reads
// only the export's layout, which never changes.
func (h *Handle) Observe(off, n uint64, write bool) {
	if h.observe != nil {
		h.count(off, n, write)
	}
}

// count tells observe the device ranges of export bytes [off, off+n).
func (h *Handle) count(off, n uint64, write bool) {
	for _, s := range h.segs {
		end := s.off + uint64(len(s.b))
		if n == 0 || off >= end {
			continue
		}
		k := min(end-off, n)
		h.observe(s.dpa+off-s.off, k, write)
		off, n = off+k, n-k
	}
}

// Hold is Pin without counting traffic, for a transport that pins to look
// at addresses (to order its own operations) or to hand the memory to
// hardware, rather than to move bytes itself.
func (h *Handle) Hold(dst [][]byte, off, n uint64, perm Perm) ([][]byte, error) {
	if !h.exp.Perms.Has(perm) {
		return dst, ErrPerm
	}
	if off > h.size || n > h.size-off {
		return dst, ErrRange
	}
	if !h.g.enter() {
		return dst, ErrRevoked
	}
	if h.expiry != 0 && h.clock().UnixNano() >= h.expiry {
		h.g.exit()
		return dst, ErrRevoked
	}
	if n == 0 {
		return dst, nil
	}
	i := 0
	if len(h.segs) > 1 {
		i = sort.Search(len(h.segs), func(i int) bool { return h.segs[i].off+uint64(len(h.segs[i].b)) > off })
	}
	for ; n > 0; i++ {
		s := h.segs[i]
		o := off - s.off
		k := min(uint64(len(s.b))-o, n)
		dst = append(dst, s.b[o:o+k:o+k])
		off += k
		n -= k
	}
	return dst, nil
}

// Unpin ends an access begun by a successful Pin.
func (h *Handle) Unpin() { h.g.exit() }

// ReadAt copies len(p) bytes at export offset off into p.
func (h *Handle) ReadAt(p []byte, off uint64) error {
	var arr [4][]byte
	segs, err := h.Pin(arr[:0], off, uint64(len(p)), PermRead)
	if err != nil {
		return err
	}
	for _, s := range segs {
		p = p[copy(p, s):]
	}
	h.Unpin()
	return nil
}

// WriteAt copies p to export offset off. The bytes are in device memory
// when it returns.
func (h *Handle) WriteAt(p []byte, off uint64) error {
	var arr [4][]byte
	segs, err := h.Pin(arr[:0], off, uint64(len(p)), PermWrite)
	if err != nil {
		return err
	}
	for _, s := range segs {
		p = p[copy(s, p):]
	}
	h.Unpin()
	return nil
}

// word pins the 8-byte word at off for an atomic.
func (h *Handle) word(off uint64) (*uint64, error) {
	var arr [1][]byte
	segs, err := h.Hold(arr[:0], off, 8, PermReadWrite)
	if err != nil {
		return nil, err
	}
	// Extents are block aligned, so a word never spans two; the check is
	// on the address because that is what the CPU's atomics need.
	if len(segs) != 1 || uintptr(unsafe.Pointer(&segs[0][0]))%8 != 0 {
		h.Unpin()
		return nil, ErrAlign
	}
	if h.observe != nil {
		h.count(off, 8, true)
	}
	return (*uint64)(unsafe.Pointer(&segs[0][0])), nil
}

// CompareAndSwap stores swap in the 8-byte word at off if it holds
// compare, and returns the word's previous value either way (the swap
// happened iff the result equals compare). Words are in host byte order,
// little-endian on every platform the box runs on.
func (h *Handle) CompareAndSwap(off, compare, swap uint64) (uint64, error) {
	p, err := h.word(off)
	if err != nil {
		return 0, err
	}
	defer h.Unpin()
	h.atomics.Add(1)
	for {
		cur := atomic.LoadUint64(p)
		if cur != compare {
			return cur, nil
		}
		if atomic.CompareAndSwapUint64(p, compare, swap) {
			return compare, nil
		}
	}
}

// FetchAdd adds delta to the 8-byte word at off (wrapping) and returns its
// previous value.
func (h *Handle) FetchAdd(off, delta uint64) (uint64, error) {
	p, err := h.word(off)
	if err != nil {
		return 0, err
	}
	defer h.Unpin()
	h.atomics.Add(1)
	return atomic.AddUint64(p, delta) - delta, nil
}

// revoke refuses new accesses and waits (until ctx ends) for pinned ones
// to drain. It is idempotent.
func (h *Handle) revoke(ctx context.Context) error {
	// The gate first: whoever sees the context end (a transport, a
	// waiter) must find new accesses already refused.
	h.g.close()
	h.cancel()
	select {
	case <-h.g.drained:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("rdma: revoke %s: accesses still in flight: %w", h.exp.ID, ctx.Err())
	}
}

// scrub zeroes what the export could write, once it is revoked and
// drained: the device had already given the capacity back when the export
// was cut, so writes that reached it after the device's sanitize must not
// be found by the next holder of these blocks.
func (h *Handle) scrub(mem Memory) error {
	if !h.exp.Perms.Has(PermWrite) {
		return nil
	}
	var errs []error
	for _, sg := range h.segs {
		if z, ok := mem.(Zeroer); ok {
			errs = append(errs, z.Zero(sg.dpa, uint64(len(sg.b))))
			continue
		}
		clear(sg.b)
	}
	return errors.Join(errs...)
}

// Revoked reports whether revocation has started.
func (h *Handle) Revoked() bool { return h.ctx.Err() != nil }
