package sim

import (
	"context"
	"encoding"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"cxlpool/fabric/cci"
)

// PolicyMode is how a simulated host answers capacity events.
type PolicyMode int

// Host policies.
const (
	// AcceptAll accepts every offered extent and honours every release.
	AcceptAll PolicyMode = iota
	// AcceptPart accepts the first AcceptN extents of each add chain
	// (all of a sharable one, which must be all or none).
	AcceptPart
	// Reject answers every add with an empty list and ignores releases.
	Reject
	// NeverAnswer consumes events and sends nothing.
	NeverAnswer
)

func (m PolicyMode) String() string {
	switch m {
	case AcceptAll:
		return "accept"
	case AcceptPart:
		return "part"
	case Reject:
		return "reject"
	case NeverAnswer:
		return "never"
	}
	return fmt.Sprintf("PolicyMode(%d)", int(m))
}

// Policy controls one simulated host.
type Policy struct {
	Mode    PolicyMode
	AcceptN int           // AcceptPart: extents accepted per chain (at least 1)
	Delay   time.Duration // think time before answering an add or release
}

// Host errors.
var (
	// ErrNotHeld: a memory access or release outside what the host holds.
	ErrNotHeld = errors.New("sim: range not held by the host")
)

// hostMailboxPayload is the payload limit of the hosts' mailboxes. It is
// small on purpose so that long event chains and long 4802h/4803h lists
// exercise paging and More chaining.
const hostMailboxPayload = 1 << 10

// maxRangesPerPayload is how many 4802h/4803h entries fit one mailbox
// payload.
const maxRangesPerPayload = (hostMailboxPayload - cci.AddDCResponseMinLen) / cci.ExtentRangeLen

// Host is a simulated host attached to one head. It talks to the device
// only through encoded CCI messages on its own mailbox.
type Host struct {
	box  *Box
	ld   int
	kick chan struct{}

	pmu    sync.Mutex
	policy Policy

	mbox  sync.Mutex // one mailbox user at a time; More chains stay together
	tag   uint8
	buf   []cci.DCEvent // events read but not yet answered
	epoch uint64

	ext atomic.Pointer[extHost] // set once the head is handed to an external host (external.go)
}

func newHost(b *Box, ld int) *Host {
	return &Host{box: b, ld: ld, kick: make(chan struct{}, 1)}
}

// LD returns the host's LD-ID (= Host ID).
func (h *Host) LD() int { return h.ld }

// SetPolicy changes how the host answers later events.
func (h *Host) SetPolicy(p Policy) {
	h.pmu.Lock()
	h.policy = p
	h.pmu.Unlock()
}

// Policy returns the current policy.
func (h *Host) Policy() Policy {
	h.pmu.Lock()
	defer h.pmu.Unlock()
	return h.policy
}

func (h *Host) wake() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// Extents returns the extents the host holds (accepted, including those
// the device asked it to release but it has not yet given back).
func (h *Host) Extents() []cci.Extent {
	h.box.mu.Lock()
	defer h.box.mu.Unlock()
	return h.box.lds[h.ld].heldRanges()
}

// access runs fn on the device memory if [dpa, dpa+n) is held by the host.
// The box lock is held so a concurrent release cannot sanitize or reassign
// the range mid-access.
func (h *Host) access(dpa uint64, n int, fn func() (int, error)) (int, error) {
	h.box.mu.Lock()
	defer h.box.mu.Unlock()
	if n == 0 {
		return 0, nil
	}
	if !covered(h.box.lds[h.ld].heldRanges(), dpa, uint64(n)) {
		return 0, fmt.Errorf("sim: host %d: %d bytes at %#x: %w", h.ld, n, dpa, ErrNotHeld)
	}
	return fn()
}

// WriteAt writes p at device address dpa, which must lie in extents the
// host holds.
func (h *Host) WriteAt(p []byte, dpa uint64) (int, error) {
	n, err := h.access(dpa, len(p), func() (int, error) { return h.box.mem.WriteAt(p, int64(dpa)) })
	h.box.countAccess(dpa, n, true) // the CHMU sees what reached the media
	return n, err
}

// ReadAt reads len(p) bytes at device address dpa, which must lie in
// extents the host holds.
func (h *Host) ReadAt(p []byte, dpa uint64) (int, error) {
	n, err := h.access(dpa, len(p), func() (int, error) { return h.box.mem.ReadAt(p, int64(dpa)) })
	h.box.countAccess(dpa, n, false)
	return n, err
}

// Release gives back every extent with tag that the host holds, unsolicited,
// with 4803h. A device refusal is returned as a cci.ReturnCode.
func (h *Host) Release(ctx context.Context, tag cci.Tag) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	h.mbox.Lock()
	defer h.mbox.Unlock()
	var rs []cci.ExtentRange
	for _, e := range h.Extents() {
		if e.Tag == tag {
			rs = append(rs, cci.ExtentRange{DPA: e.DPA, Length: e.Length})
		}
	}
	if len(rs) == 0 {
		return fmt.Errorf("sim: host %d: tag %s: %w", h.ld, tag, ErrNotHeld)
	}
	return h.sendRanges(cci.OpReleaseDC, rs)
}

// call sends one request through the host mailbox. Caller holds h.mbox.
func (h *Host) call(op cci.Opcode, req encoding.BinaryMarshaler, resp encoding.BinaryUnmarshaler) error {
	var payload []byte
	if req != nil {
		var err error
		if payload, err = req.MarshalBinary(); err != nil {
			return fmt.Errorf("sim: host %d: encode %v: %w", h.ld, op, err)
		}
	}
	h.tag++
	raw, err := cci.Message{Category: cci.Request, Tag: h.tag, Opcode: op, Payload: payload}.MarshalBinary()
	if err != nil {
		return fmt.Errorf("sim: host %d: encode %v: %w", h.ld, op, err)
	}
	m, err := cci.ParseMessage(h.box.hostExec(h.ld, raw))
	if err != nil {
		return fmt.Errorf("sim: host %d: %v response: %w", h.ld, op, err)
	}
	if m.Category != cci.Response || m.Tag != h.tag || m.Opcode != op {
		return fmt.Errorf("sim: host %d: %v: mismatched response (tag %d, opcode %v)", h.ld, op, m.Tag, m.Opcode)
	}
	if m.ReturnCode != cci.Success {
		return m.ReturnCode
	}
	if resp != nil {
		if err := resp.UnmarshalBinary(m.Payload); err != nil {
			return fmt.Errorf("sim: host %d: decode %v: %w", h.ld, op, err)
		}
	}
	return nil
}

// sendRanges sends a 4802h or 4803h list, split into More-linked payloads.
// An empty list is sent as one payload with count 0.
func (h *Host) sendRanges(op cci.Opcode, rs []cci.ExtentRange) error {
	for {
		n := min(len(rs), maxRangesPerPayload)
		more := n < len(rs)
		var req encoding.BinaryMarshaler
		if op == cci.OpAddDCResponse {
			req = &cci.AddDCResponseReq{More: more, Extents: rs[:n]}
		} else {
			req = &cci.ReleaseDCReq{More: more, Extents: rs[:n]}
		}
		if err := h.call(op, req, nil); err != nil {
			return err
		}
		rs = rs[n:]
		if !more {
			return nil
		}
	}
}

func (h *Host) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.kick:
		}
		if x := h.ext.Load(); x != nil {
			h.notifyExternal(ctx, x)
			continue
		}
		h.process(ctx)
	}
}

// process drains the host's DC event log and answers complete chains.
func (h *Host) process(ctx context.Context) {
	if !h.box.linkUp(h.ld) {
		return
	}
	h.mbox.Lock()
	defer h.mbox.Unlock()
	if e := h.box.currentEpoch(); e != h.epoch {
		h.buf, h.epoch = nil, e
	}
	log := h.box.log.With("host", h.ld)
	overflowed := false
	for {
		var resp cci.GetEventRecordsResp
		if err := h.call(cci.OpGetEventRecords, &cci.GetEventRecordsReq{Log: cci.EventLogDC}, &resp); err != nil {
			log.Warn("get event records", "err", err)
			return
		}
		overflowed = overflowed || resp.Overflow
		if len(resp.Records) == 0 {
			break
		}
		handles := make([]uint16, len(resp.Records))
		for i, r := range resp.Records {
			handles[i] = r.Handle
			ev, err := cci.ParseDCEvent(r)
			if err != nil {
				log.Warn("unexpected record", "err", err)
				continue
			}
			h.buf = append(h.buf, ev)
		}
		if err := h.call(cci.OpClearEventRecords, &cci.ClearEventRecordsReq{Log: cci.EventLogDC, Handles: handles}, nil); err != nil {
			log.Warn("clear event records", "err", err)
			return
		}
		if !resp.More {
			break
		}
	}
	i := 0
	for i < len(h.buf) {
		ev := h.buf[i]
		switch ev.Type {
		case cci.DCEventAdd, cci.DCEventRelease, cci.DCEventForcedRelease:
			j := i
			for j < len(h.buf) && h.buf[j].Type == ev.Type && h.buf[j].More {
				j++
			}
			if j == len(h.buf) {
				if overflowed {
					// The chain's tail was lost to an overflow and will
					// never come; drop it rather than merge it with the
					// next chain.
					log.Warn("event log overflowed; incomplete chain dropped", "records", j-i)
					h.buf = nil
					return
				}
				h.buf = h.buf[i:] // chain not complete yet: wait for More=0
				return
			}
			chain := make([]cci.Extent, 0, j-i+1)
			for _, e := range h.buf[i : j+1] {
				chain = append(chain, e.Extent)
			}
			i = j + 1
			if !h.answer(ctx, ev.Type, chain) {
				h.buf = h.buf[i:]
				return
			}
		case cci.DCEventRegionUpdated:
			var cfg cci.GetDCConfigResp
			if err := h.call(cci.OpGetDCConfig, &cci.GetDCConfigReq{RegionCount: cci.MaxDCRegions}, &cfg); err != nil {
				log.Warn("get dc config", "err", err)
			}
			i++
		default:
			i++
		}
	}
	h.buf = nil
}

// answer responds to one complete chain. It returns false if ctx ended.
func (h *Host) answer(ctx context.Context, typ uint8, chain []cci.Extent) bool {
	p := h.Policy()
	log := h.box.log.With("host", h.ld)
	if p.Mode == NeverAnswer || typ == cci.DCEventForcedRelease {
		return true
	}
	if typ == cci.DCEventRelease && p.Mode == Reject {
		return true
	}
	if p.Delay > 0 {
		t := time.NewTimer(p.Delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
	var rs []cci.ExtentRange
	for _, e := range chain {
		rs = append(rs, cci.ExtentRange{DPA: e.DPA, Length: e.Length})
	}
	if typ == cci.DCEventRelease {
		if err := h.sendRanges(cci.OpReleaseDC, rs); err != nil {
			log.Warn("release dc", "err", err)
		}
		return true
	}
	switch p.Mode {
	case Reject:
		rs = nil
	case AcceptPart:
		if !h.box.sharableAt(chain[0].DPA) {
			rs = rs[:min(len(rs), max(p.AcceptN, 1))]
		}
	}
	if err := h.sendRanges(cci.OpAddDCResponse, rs); err != nil {
		log.Warn("add dc response", "err", err)
	}
	return true
}
