package fm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"cxlpool/fabric"
	"cxlpool/fabric/cci"
)

// policyMask is what the FM asks the device to notify: every severity of
// the general logs (link changes land in Informational) and the DC log.
const policyMask = cci.PolicyInfo | cci.PolicyWarning | cci.PolicyFailure | cci.PolicyFatal | cci.PolicyDC

// drainLogs are the logs the pump reads, in order: capacity outcomes
// first, then the Informational log (link changes). The other severities
// carry nothing the FM acts on, but their notifications are enabled, and
// only reading and clearing a log re-arms its notification and keeps it
// from overflowing, so their records are read, logged and cleared too.
var drainLogs = [...]uint8{cci.EventLogDC, cci.EventLogInfo, cci.EventLogWarning, cci.EventLogFailure, cci.EventLogFatal}

// maxDrainRounds bounds one drain of one log, so a device that keeps
// logging (or never clears) cannot hold the pump; the next poll continues.
const maxDrainRounds = 64

// pumpState is owned by the event pump goroutine.
type pumpState struct {
	// chain accumulates a More chain of 04h/05h DC records.
	chain *chain
	// stale holds, per log, the handles of records already translated
	// whose Clear did not (visibly) succeed, so a re-read does not emit
	// them twice.
	stale map[uint8]map[uint16]bool
	// overflowPending: an event was dropped because the Events channel
	// was full; an EventOverflow goes out as soon as there is room.
	overflowPending bool
	// rearm: a reset was reported but re-arming the policy failed.
	rearm bool
}

// chain is one open More chain.
type chain struct {
	typ     uint8
	host    uint16
	extents []cci.Extent
}

func (p *pumpState) init() {
	p.stale = make(map[uint8]map[uint16]bool)
	for _, l := range drainLogs {
		p.stale[l] = make(map[uint16]bool)
	}
}

// forget drops everything the pump remembers about the device's logs,
// because the device emptied them (reset) or they overflowed.
func (p *pumpState) forget(log uint8) {
	if log == cci.EventLogDC {
		p.chain = nil
	}
	clear(p.stale[log])
}

// Events delivers device events in order. The channel is closed after
// Close, or when the link to the device is lost.
func (c *Client) Events() <-chan fabric.Event { return c.events }

// runPump is the event pump: it drains the logs when the device notifies,
// polls health and logs every PollInterval, arms events for Discover and
// delivers a pending EventOverflow once the consumer makes room.
func (c *Client) runPump(ctx context.Context) {
	defer close(c.events)
	t := time.NewTicker(c.cfg.PollInterval)
	defer t.Stop()
	for {
		var out chan<- fabric.Event
		if c.pump.overflowPending {
			out = c.events
		}
		select {
		case <-ctx.Done():
			return
		case <-c.runDone:
			return
		case out <- c.event(fabric.EventOverflow):
			c.pump.overflowPending = false
		case done := <-c.ctl:
			done <- c.arm(ctx)
		case <-c.wake:
			c.drainMask(ctx, uint16(c.wakeMask.Swap(0)))
		case <-t.C:
			if c.checkHealth(ctx) {
				c.drain(ctx)
			}
		}
	}
}

// enableEvents asks the pump to arm the interrupt policy and drain the
// logs, and waits for it.
func (c *Client) enableEvents(ctx context.Context) error {
	done := make(chan error, 1)
	select {
	case c.ctl <- done:
	case <-ctx.Done():
		return fmt.Errorf("fm: discover: enable events: %w", ctx.Err())
	case <-c.pumpDone:
		return fmt.Errorf("fm: discover: enable events: %w", fabric.ErrClosed)
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("fm: discover: enable events: %w", ctx.Err())
	case <-c.pumpDone:
		return fmt.Errorf("fm: discover: enable events: %w", fabric.ErrClosed)
	}
}

// arm sets the MCTP event interrupt policy, which also makes the device
// send notifications to this endpoint, and drains the logs so that every
// log is read empty once: notifications only follow an empty → non-empty
// transition after a read. On a rediscovery the health check runs first,
// so a reset that happened since the last poll is still reported rather
// than hidden by the fresh policy.
func (c *Client) arm(ctx context.Context) error {
	if c.armed.Load() != 0 && c.checkHealth(ctx) {
		return c.drain(ctx)
	}
	if err := c.Do(ctx, cci.OpSetMCTPEventInterruptPolicy, &cci.EventInterruptPolicy{Mask: policyMask}, nil); err != nil {
		return fmt.Errorf("fm: discover: enable events: %w", err)
	}
	c.armed.Store(uint32(policyMask))
	c.pump.rearm = false
	return c.drain(ctx)
}

// checkHealth reads the interrupt policy back. A device that lost its
// volatile state reads 0 (or answered Retry Required while it restarted);
// the pump then reports EventDeviceReset, forgets its log state and arms
// the policy again. It reports whether the device answered at all.
func (c *Client) checkHealth(ctx context.Context) bool {
	if c.armed.Load() == 0 {
		return false
	}
	var p cci.EventInterruptPolicy
	if err := c.Do(ctx, cci.OpGetMCTPEventInterruptPolicy, nil, &p); err != nil {
		c.log.Debug("fm: health poll failed", "err", err)
		return false
	}
	if c.retrySeen.Swap(false) || p.Mask == 0 {
		c.log.Warn("fm: device reset detected", "policy", p.Mask)
		for _, l := range drainLogs {
			c.pump.forget(l)
		}
		c.emit(c.event(fabric.EventDeviceReset))
		c.pump.rearm = true
	} else if p.Mask != policyMask {
		c.log.Warn("fm: event interrupt policy changed behind the FM", "policy", p.Mask)
		c.pump.rearm = true
	}
	if c.pump.rearm {
		if err := c.Do(ctx, cci.OpSetMCTPEventInterruptPolicy, &cci.EventInterruptPolicy{Mask: policyMask}, nil); err != nil {
			c.log.Warn("fm: re-arming the event interrupt policy failed", "err", err)
			return false
		}
		c.pump.rearm = false
	}
	return true
}

// allLogs is the notification mask of every log the pump drains.
const allLogs = policyMask

// logBit maps an event log to its bit in the interrupt policy mask.
func logBit(log uint8) uint16 {
	switch log {
	case cci.EventLogInfo:
		return cci.PolicyInfo
	case cci.EventLogWarning:
		return cci.PolicyWarning
	case cci.EventLogFailure:
		return cci.PolicyFailure
	case cci.EventLogFatal:
		return cci.PolicyFatal
	case cci.EventLogDC:
		return cci.PolicyDC
	}
	return 0
}

// drain reads and clears every log the pump watches. It returns the first
// error; later logs are still tried unless the link is gone.
func (c *Client) drain(ctx context.Context) error { return c.drainMask(ctx, allLogs) }

// drainMask reads and clears the logs named by mask (interrupt policy
// bits). A notification names the logs with new records, so the pump does
// not spend round trips on the others while a grant waits; the periodic
// poll still drains everything.
func (c *Client) drainMask(ctx context.Context, mask uint16) error {
	if c.armed.Load() == 0 {
		return nil
	}
	var first error
	for _, l := range drainLogs {
		if mask&logBit(l) == 0 {
			continue
		}
		if err := c.drainLog(ctx, l); err != nil {
			c.log.Warn("fm: draining event log failed", "log", l, "err", err)
			if first == nil {
				first = err
			}
			if errors.Is(err, fabric.ErrClosed) || ctx.Err() != nil {
				break
			}
		}
	}
	return first
}

// drainLog reads log until it comes back empty, translating each record
// once and clearing what it read. An overflowed log is reported as
// EventOverflow and cleared wholesale.
func (c *Client) drainLog(ctx context.Context, log uint8) error {
	stale := c.pump.stale[log]
	for range maxDrainRounds {
		var resp cci.GetEventRecordsResp
		if err := c.Do(ctx, cci.OpGetEventRecords, &cci.GetEventRecordsReq{Log: log}, &resp); err != nil {
			return err
		}
		if len(resp.Records) > 0 && !stale[resp.Records[0].Handle] {
			// Records come oldest first: if the oldest is new, an
			// earlier Clear did take effect after all.
			clear(stale)
		}
		handles := make([]uint16, 0, len(resp.Records))
		for i := range resp.Records {
			r := &resp.Records[i]
			if !stale[r.Handle] {
				c.translate(*r)
				stale[r.Handle] = true
			}
			handles = append(handles, r.Handle)
		}
		if resp.Overflow {
			c.log.Warn("fm: event log overflowed", "log", log, "lost", resp.OverflowCount)
			c.pump.forget(log)
			c.emit(c.event(fabric.EventOverflow))
			err := c.Do(ctx, cci.OpClearEventRecords, &cci.ClearEventRecordsReq{Log: log, ClearAll: true}, nil)
			if err == nil {
				continue
			}
			if !errors.Is(err, cci.InvalidInput) {
				return err
			}
			// The overflow ended between the read and the clear (the
			// device allows Clear All only while overflowed); fall back
			// to clearing by handle.
			for _, h := range handles {
				stale[h] = true
			}
		}
		if len(handles) == 0 {
			return nil
		}
		if err := c.clearHandles(ctx, log, handles); err != nil {
			return err
		}
		for _, h := range handles {
			delete(stale, h)
		}
	}
	return nil
}

// clearHandles clears handles (oldest first) in requests that fit the
// device's payload limit.
func (c *Client) clearHandles(ctx context.Context, log uint8, handles []uint16) error {
	c.mu.Lock()
	maxReq := c.maxRequest
	c.mu.Unlock()
	per := 0xff
	if maxReq > 0 {
		per = min(per, max(1, (maxReq-cci.ClearEventRecordsMinLen)/2))
	}
	for len(handles) > 0 {
		n := min(per, len(handles))
		req := &cci.ClearEventRecordsReq{Log: log, Handles: handles[:n]}
		if err := c.Do(ctx, cci.OpClearEventRecords, req, nil); err != nil {
			return err
		}
		handles = handles[n:]
	}
	return nil
}

// translate turns one event record into fabric events. Records the FM has
// no use for (host-directed DC types, other record kinds, garbage) are
// logged and skipped; nothing in a record can make it fail.
func (c *Client) translate(r cci.EventRecord) {
	switch r.UUID {
	case cci.DCEventUUID:
		ev, err := cci.ParseDCEvent(r)
		if err != nil {
			c.log.Debug("fm: undecodable DC event", "handle", r.Handle, "err", err)
			return
		}
		c.translateDC(r.Handle, ev)
	case cci.PhysicalSwitchEventUUID:
		c.closeChain("interrupted by a link record")
		ev, err := cci.ParseLinkEvent(r)
		if err != nil || ev.Type != cci.LinkEventLinkStateChange {
			c.log.Debug("fm: ignored physical switch event", "handle", r.Handle, "type", ev.Type)
			return
		}
		out := c.event(fabric.EventLinkChange)
		out.Host, out.LinkUp = c.ldOfPort(ev.Port), ev.LinkUp
		c.emit(out)
	default:
		level := slog.LevelDebug
		if r.Flags&cci.EventSeverityMask != cci.EventSeverityInfo {
			level = slog.LevelWarn
		}
		c.log.Log(context.Background(), level, "fm: device event record", "handle", r.Handle,
			"uuid", cci.Tag(r.UUID), "severity", r.Flags&cci.EventSeverityMask)
	}
}

// translateDC handles one Dynamic Capacity record. 04h and 05h records
// come as More chains (contiguous, same type; CXL 3.1 §8.2.9.2.1.6): the
// extents are collected until the record with More = 0 and reported as one
// event. A zero-length extent carries no capacity; the virtual box uses one
// to report a host that accepted nothing.
func (c *Client) translateDC(handle uint16, ev cci.DCEvent) {
	var kind fabric.EventKind
	switch ev.Type {
	case cci.DCEventAddResponse:
		kind = fabric.EventAddResponse
	case cci.DCEventCapacityReleased:
		kind = fabric.EventCapacityReleased
	case cci.DCEventRegionUpdated:
		c.closeChain("interrupted by a region update")
		out := c.event(fabric.EventRegionUpdated)
		out.Host = ev.HostID
		c.emit(out)
		return
	default:
		c.log.Debug("fm: ignored host-directed DC event", "handle", handle, "type", ev.Type)
		return
	}
	p := &c.pump
	if p.chain != nil && (p.chain.typ != ev.Type || p.chain.host != ev.HostID) {
		c.closeChain("interrupted by an unrelated record")
	}
	if p.chain == nil {
		p.chain = &chain{typ: ev.Type, host: ev.HostID}
	}
	if ev.Extent.Length > 0 {
		p.chain.extents = append(p.chain.extents, ev.Extent)
	}
	if !ev.More {
		out := c.event(kind)
		out.Host, out.Extents = p.chain.host, p.chain.extents
		p.chain = nil
		c.emit(out)
	}
}

// closeChain reports an open chain whose closing record never came (the
// device broke the contiguity rule), so its extents are not lost.
func (c *Client) closeChain(why string) {
	ch := c.pump.chain
	if ch == nil {
		return
	}
	c.pump.chain = nil
	c.log.Warn("fm: DC record chain ended without More = 0", "why", why, "host", ch.host, "type", ch.typ)
	kind := fabric.EventAddResponse
	if ch.typ == cci.DCEventCapacityReleased {
		kind = fabric.EventCapacityReleased
	}
	out := c.event(kind)
	out.Host, out.Extents = ch.host, ch.extents
	c.emit(out)
}

// event returns an event of kind k stamped now.
func (c *Client) event(k fabric.EventKind) fabric.Event {
	return fabric.Event{Kind: k, Time: c.cfg.Clock()}
}

// emit queues ev without ever blocking the pump. When the channel is full
// the event is dropped and an EventOverflow is owed; it is sent before any
// later event, so the consumer learns it must resynchronise.
func (c *Client) emit(ev fabric.Event) {
	p := &c.pump
	if p.overflowPending {
		select {
		case c.events <- c.event(fabric.EventOverflow):
			p.overflowPending = false
		default:
			c.log.Warn("fm: event queue full; event dropped", "kind", ev.Kind, "host", ev.Host)
			return
		}
		if ev.Kind == fabric.EventOverflow {
			return
		}
	}
	select {
	case c.events <- ev:
	default:
		c.log.Warn("fm: event queue full; event dropped", "kind", ev.Kind, "host", ev.Host)
		p.overflowPending = true
	}
}
