// Package vbox is the host.Backend of a host cabled to the virtual box
// (sim): it connects to the head's external host socket (sim/external.go),
// receives the box's memory file with SCM_RIGHTS and then does what the
// host kernel's CXL driver does with Dynamic Capacity, through the host
// CCI commands on that link: it reads and clears the DC event log when
// the box notifies it, answers each Add Capacity chain with Add DC
// Response (4802h, accepting what Config.Accept keeps: everything by
// default), learns the accepted extents from Get DC Extent List (4801h)
// and answers Release Capacity with Release DC (4803h) once the tag is no
// longer mapped, so a release waits for the last user (the kernel's EBUSY)
// unless Release is forced. Mapped means through Map or by another
// process through the memory file (found in /proc/PID/maps, procmaps.go).
//
// Memory is the memory file itself: Map maps exactly the tag's accepted
// extents from it, contiguously; Capacity.Path names the file
// (/proc/PID/fd/N of this process, so the agent must stay running) for a
// program in another process, which maps each extent at its Offset. This
// is simulator-specific: a real host gets one /dev/daxX.Y per tag.
//
// Not done: the box does not enforce that a host maps only what it
// accepted (the file is the whole device); Get DC Configuration is read
// only at Dial; an event log overflow drops the incomplete chain (as the
// built-in hosts do) and the extent list is re-read.
package vbox

import (
	"cmp"
	"context"
	"encoding"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"cxlpool/fabric/cci"
	"cxlpool/fabric/mctp"
	"cxlpool/fabric/serial"
	"cxlpool/host"
	"cxlpool/sim"
)

// Config configures a Backend.
type Config struct {
	Logger *slog.Logger
	// Accept chooses which extents of an Add Capacity chain to accept
	// (nil accepts all). Sharable capacity must be accepted all or none.
	Accept func(offered []cci.Extent) []cci.Extent
	// PollInterval is the safety-net poll of the event log besides the
	// box's notifications (default 1 s).
	PollInterval time.Duration
	// CallTimeout bounds one mailbox command (default 5 s).
	CallTimeout time.Duration
}

// mailboxPayload is the host mailbox's payload limit (the box advertises
// 2^10 to its hosts); 4802h/4803h lists longer than it are More-chained.
const mailboxPayload = 1 << 10

const maxRanges = (mailboxPayload - cci.AddDCResponseMinLen) / cci.ExtentRangeLen

// Backend is a host.Backend on the virtual box's external host link.
type Backend struct {
	cfg    Config
	log    *slog.Logger
	hello  sim.HostHello
	mem    *os.File
	memID  fileID // the memory file's device and inode, to find other processes' mappings
	boxPID int    // the box's process (socket peer), whose own mapping of the file is the device, not a user
	path   string
	ep     *mctp.Endpoint
	kick   chan struct{}

	cancel context.CancelFunc
	done   chan struct{}

	callMu sync.Mutex // one mailbox command (or More chain) at a time
	tag    uint8
	buf    []cci.DCEvent // events read, their chain not complete yet

	mu      sync.Mutex
	changed chan struct{} // closed and replaced when tags change
	tags    map[string]*tagState
	err     error // the link failed
}

type tagState struct {
	extents   []cci.Extent
	maps      map[*mapping]struct{}
	releasing bool
	pending   []cci.ExtentRange // release asked by the device, waiting for the last unmap
}

var (
	_ host.Backend  = (*Backend)(nil)
	_ host.Notifier = (*Backend)(nil)
)

// Dial connects to the head's external host socket ("unix:PATH" or PATH)
// and starts answering the device. The Backend lives until Close or until
// the box hangs up.
func Dial(ctx context.Context, addr string, cfg Config) (*Backend, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.PollInterval = cmp.Or(cfg.PollInterval, time.Second)
	cfg.CallTimeout = cmp.Or(cfg.CallTimeout, 5*time.Second)
	path := strings.TrimPrefix(addr, "unix:")
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("vbox: dial %s: %w", addr, err)
	}
	c := nc.(*net.UnixConn)
	hello, mem, err := readHello(ctx, c)
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("vbox: %s: %w", addr, err)
	}
	memID, err := fileIDOf(mem)
	if err != nil {
		_ = mem.Close()
		_ = c.Close()
		return nil, err
	}
	boxPID, err := peerPID(c)
	if err != nil {
		_ = mem.Close()
		_ = c.Close()
		return nil, err
	}
	b := &Backend{
		cfg: cfg, log: cfg.Logger.With("ld", hello.LD), hello: hello, mem: mem, memID: memID, boxPID: boxPID,
		path: fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), mem.Fd()),
		kick: make(chan struct{}, 1), done: make(chan struct{}),
		changed: make(chan struct{}), tags: map[string]*tagState{},
	}
	link := serial.NewLink(c, serial.LinkConfig{Logger: cfg.Logger})
	b.ep = mctp.NewEndpoint(link, mctp.Config{
		EID: hello.HostEID, MaxMessage: 1 + cci.HeaderLen + 4096, Logger: cfg.Logger,
		MessageTypes: []mctp.MsgType{mctp.MsgTypeCXLCCI},
	}, b.handle)
	rctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	go func() {
		err := b.ep.Run(rctx)
		b.fail(fmt.Errorf("vbox: link to the box ended: %w", cmp.Or(err, mctp.ErrClosed)))
	}()
	go func() {
		defer close(b.done)
		b.loop(rctx)
	}()
	return b, nil
}

// readHello reads the box's hello and the memory file descriptor with it.
func readHello(ctx context.Context, c *net.UnixConn) (sim.HostHello, *os.File, error) {
	var h sim.HostHello
	// ctx may end the read; once it has read, ctx ending (as callers'
	// contexts do) must not touch the connection the backend keeps.
	cut := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = c.SetReadDeadline(time.Now())
		close(cut)
	})
	defer func() {
		if !stop() {
			<-cut
			_ = c.SetReadDeadline(time.Time{})
		}
	}()
	buf := make([]byte, sim.HostHelloLen)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return h, nil, fmt.Errorf("read hello: %w", err)
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			if r, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, r...)
			}
		}
	}
	closeAll := func() {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	}
	if err := h.UnmarshalBinary(buf[:n]); err != nil {
		closeAll()
		return h, nil, err
	}
	if len(fds) != 1 {
		closeAll()
		return h, nil, fmt.Errorf("hello carried %d file descriptors, want the memory file", len(fds))
	}
	return h, os.NewFile(uintptr(fds[0]), "cxlsim-memory"), nil
}

// handle answers the box's Event Notifications.
func (b *Backend) handle(_ context.Context, _ mctp.EID, _ mctp.MsgType, msg []byte) ([]byte, bool) {
	m, err := cci.ParseMessage(msg)
	if err != nil || m.Category != cci.Request || m.Opcode != cci.OpEventNotification {
		return nil, false
	}
	b.wake()
	out, _ := cci.Message{Category: cci.Response, Tag: m.Tag, Opcode: m.Opcode}.MarshalBinary()
	return out, true
}

func (b *Backend) wake() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

func (b *Backend) fail(err error) {
	b.mu.Lock()
	if b.err == nil {
		b.err = err
		close(b.changed)
		b.changed = make(chan struct{})
	}
	b.mu.Unlock()
	b.cancel()
}

// loop reads the event log on every notification and poll tick.
func (b *Backend) loop(ctx context.Context) {
	t := time.NewTicker(b.cfg.PollInterval)
	defer t.Stop()
	b.sync(ctx) // capacity accepted before we connected (an agent restart)
	b.wake()
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.kick:
		case <-t.C:
		}
		if err := b.process(ctx); err != nil && ctx.Err() == nil {
			b.log.Warn("vbox: event processing", "err", err)
		}
	}
}

// call sends one host CCI command to the box. Caller holds callMu.
func (b *Backend) call(ctx context.Context, op cci.Opcode, req encoding.BinaryMarshaler, resp encoding.BinaryUnmarshaler) error {
	var payload []byte
	if req != nil {
		var err error
		if payload, err = req.MarshalBinary(); err != nil {
			return fmt.Errorf("vbox: encode %v: %w", op, err)
		}
	}
	b.tag++
	raw, err := cci.Message{Category: cci.Request, Tag: b.tag, Opcode: op, Payload: payload}.MarshalBinary()
	if err != nil {
		return fmt.Errorf("vbox: encode %v: %w", op, err)
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.CallTimeout)
	defer cancel()
	out, err := b.ep.Request(ctx, b.hello.BoxEID, mctp.MsgTypeCXLCCI, raw)
	if err != nil {
		return fmt.Errorf("vbox: %v: %w", op, err)
	}
	m, err := cci.ParseMessage(out)
	if err != nil {
		return fmt.Errorf("vbox: %v response: %w", op, err)
	}
	if m.Category != cci.Response || m.Tag != b.tag || m.Opcode != op {
		return fmt.Errorf("vbox: %v: mismatched response (tag %d, opcode %v)", op, m.Tag, m.Opcode)
	}
	if m.ReturnCode != cci.Success {
		return fmt.Errorf("vbox: %v: %w", op, m.ReturnCode)
	}
	if resp != nil {
		if err := resp.UnmarshalBinary(m.Payload); err != nil {
			return fmt.Errorf("vbox: decode %v: %w", op, err)
		}
	}
	return nil
}

// sendRanges sends a 4802h or 4803h list, More-chained. Caller holds callMu.
func (b *Backend) sendRanges(ctx context.Context, op cci.Opcode, rs []cci.ExtentRange) error {
	for {
		n := min(len(rs), maxRanges)
		more := n < len(rs)
		var req encoding.BinaryMarshaler = &cci.ReleaseDCReq{More: more, Extents: rs[:n]}
		if op == cci.OpAddDCResponse {
			req = &cci.AddDCResponseReq{More: more, Extents: rs[:n]}
		}
		if err := b.call(ctx, op, req, nil); err != nil {
			return err
		}
		if rs = rs[n:]; !more {
			return nil
		}
	}
}

func toRanges(es []cci.Extent) []cci.ExtentRange {
	rs := make([]cci.ExtentRange, len(es))
	for i, e := range es {
		rs[i] = cci.ExtentRange{DPA: e.DPA, Length: e.Length}
	}
	return rs
}

// process drains the DC event log and answers complete chains, then
// re-reads the accepted extents.
func (b *Backend) process(ctx context.Context) error {
	b.callMu.Lock()
	defer b.callMu.Unlock()
	overflowed := false
	for {
		var resp cci.GetEventRecordsResp
		if err := b.call(ctx, cci.OpGetEventRecords, &cci.GetEventRecordsReq{Log: cci.EventLogDC}, &resp); err != nil {
			return err
		}
		overflowed = overflowed || resp.Overflow
		if len(resp.Records) == 0 {
			break
		}
		handles := make([]uint16, len(resp.Records))
		for i, r := range resp.Records {
			handles[i] = r.Handle
			if ev, err := cci.ParseDCEvent(r); err == nil {
				b.buf = append(b.buf, ev)
			}
		}
		if err := b.call(ctx, cci.OpClearEventRecords, &cci.ClearEventRecordsReq{Log: cci.EventLogDC, Handles: handles}, nil); err != nil {
			return err
		}
		if !resp.More {
			break
		}
	}
	var adds [][]cci.Extent
	var releases []cci.Extent
	i, rest := 0, []cci.DCEvent(nil)
chains:
	for i < len(b.buf) {
		ev := b.buf[i]
		if ev.Type != cci.DCEventAdd && ev.Type != cci.DCEventRelease && ev.Type != cci.DCEventForcedRelease {
			i++
			continue
		}
		j := i
		for j < len(b.buf) && b.buf[j].Type == ev.Type && b.buf[j].More {
			j++
		}
		if j == len(b.buf) {
			if overflowed {
				// The chain's tail was lost and will never come.
				b.log.Warn("vbox: event log overflowed; incomplete chain dropped", "records", j-i)
			} else {
				rest = b.buf[i:] // wait for the record with More=0
			}
			break chains
		}
		var chain []cci.Extent
		for _, e := range b.buf[i : j+1] {
			chain = append(chain, e.Extent)
		}
		i = j + 1
		switch ev.Type {
		case cci.DCEventAdd:
			adds = append(adds, chain)
		case cci.DCEventRelease:
			releases = append(releases, chain...)
		case cci.DCEventForcedRelease:
			b.forced(chain)
		}
	}
	b.buf = rest
	for _, chain := range adds {
		keep := chain
		if b.cfg.Accept != nil {
			keep = b.cfg.Accept(slices.Clone(chain))
		}
		if err := b.sendRanges(ctx, cci.OpAddDCResponse, toRanges(keep)); err != nil {
			return err
		}
	}
	if err := b.refresh(ctx); err != nil {
		return err
	}
	b.askRelease(releases)
	ready, others := b.releasable()
	for _, tag := range ready {
		if err := b.answerRelease(ctx, tag, others); err != nil {
			return err
		}
	}
	return nil
}

// sync re-reads the extent list under callMu.
func (b *Backend) sync(ctx context.Context) {
	b.callMu.Lock()
	defer b.callMu.Unlock()
	if err := b.refresh(ctx); err != nil && ctx.Err() == nil {
		b.log.Warn("vbox: extent list", "err", err)
	}
}

// refresh reads the accepted extents (4801h, paged) and updates the tags.
// Caller holds callMu.
func (b *Backend) refresh(ctx context.Context) error {
	var all []cci.Extent
	for {
		var resp cci.GetDCExtentListResp
		if err := b.call(ctx, cci.OpGetDCExtentList, &cci.GetDCExtentListReq{Count: 1 << 16, Start: uint32(len(all))}, &resp); err != nil {
			return err
		}
		all = append(all, resp.Extents...)
		if len(resp.Extents) == 0 || len(all) >= int(resp.Total) {
			break
		}
	}
	byTag := map[string][]cci.Extent{}
	for _, e := range all {
		byTag[e.Tag.String()] = append(byTag[e.Tag.String()], e)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for tag, t := range b.tags {
		if _, ok := byTag[tag]; !ok {
			for m := range t.maps {
				m.unmapLocked()
			}
			delete(b.tags, tag)
		}
	}
	for tag, es := range byTag {
		slices.SortFunc(es, func(x, y cci.Extent) int {
			return cmp.Or(cmp.Compare(x.SharedSeq, y.SharedSeq), cmp.Compare(x.DPA, y.DPA))
		})
		t := b.tags[tag]
		if t == nil {
			t = &tagState{maps: map[*mapping]struct{}{}}
			b.tags[tag] = t
		}
		t.extents = es
	}
	close(b.changed)
	b.changed = make(chan struct{})
	return nil
}

// askRelease records the device's release requests per tag.
func (b *Backend) askRelease(es []cci.Extent) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range es {
		if t := b.tags[e.Tag.String()]; t != nil {
			t.pending = append(t.pending, cci.ExtentRange{DPA: e.DPA, Length: e.Length})
		}
	}
}

// releasable is the tags whose asked release can be answered now: no
// longer mapped, and the other processes' mappings it looked at.
func (b *Backend) releasable() ([]string, []fileRange) {
	b.mu.Lock()
	asked := false
	for _, t := range b.tags {
		asked = asked || len(t.pending) > 0
	}
	b.mu.Unlock()
	if !asked {
		return nil, nil
	}
	others := b.others() // outside the lock: it reads /proc
	b.mu.Lock()
	defer b.mu.Unlock()
	var ready []string
	for tag, t := range b.tags {
		if len(t.pending) > 0 && (t.releasing || !inUse(t, others)) {
			ready = append(ready, tag)
		}
	}
	return ready, others
}

// answerRelease sends the pending 4803h of tag unless it is in use (its
// Map mappings, or others: other processes' mappings). Caller holds
// callMu.
func (b *Backend) answerRelease(ctx context.Context, tag string, others []fileRange) error {
	b.mu.Lock()
	t := b.tags[tag]
	var rs []cci.ExtentRange
	if t != nil && len(t.maps) == 0 && (t.releasing || !inUse(t, others)) {
		rs, t.pending = t.pending, nil
		t.releasing = true
	}
	b.mu.Unlock()
	if len(rs) == 0 {
		return nil
	}
	if err := b.sendRanges(ctx, cci.OpReleaseDC, rs); err != nil {
		return err
	}
	return b.refresh(ctx)
}

// forced drops force-released extents at once: the device has already
// taken them, so every mapping of their tags is unmapped.
func (b *Backend) forced(es []cci.Extent) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range es {
		if t := b.tags[e.Tag.String()]; t != nil {
			t.releasing = true
			for m := range t.maps {
				m.unmapLocked()
			}
		}
	}
}

// Identity reads the device serial with Identify (0001h); the LD-ID is the
// head the socket belongs to.
func (b *Backend) Identity(ctx context.Context) (host.Identity, error) {
	b.callMu.Lock()
	defer b.callMu.Unlock()
	var id cci.IdentifyResp
	if err := b.call(ctx, cci.OpIdentify, nil, &id); err != nil {
		return host.Identity{}, err
	}
	return host.Identity{Serial: id.Serial, LD: b.hello.LD}, nil
}

// capacity is tag's Capacity; others are the other processes' mappings
// of the memory file (nil: only Map's count).
func (b *Backend) capacity(tag string, t *tagState, others []fileRange) host.Capacity {
	c := host.Capacity{Tag: tag, Path: b.path, Kind: "simfile", InUse: inUse(t, others), Releasing: t.releasing,
		ReleasePending: len(t.pending) > 0}
	for _, e := range t.extents {
		c.Extents = append(c.Extents, host.Extent{DPA: e.DPA, Offset: e.DPA, Length: e.Length})
		c.Size += e.Length
	}
	return c
}

// Wait blocks until tag has accepted extents.
func (b *Backend) Wait(ctx context.Context, tag string) (host.Capacity, error) {
	tag = strings.ToLower(tag)
	for first := true; ; {
		b.mu.Lock()
		t, ch, err := b.tags[tag], b.changed, b.err
		var c host.Capacity
		if t != nil {
			c = b.capacity(tag, t, nil) // just surfaced: nobody else can have mapped it yet
		}
		b.mu.Unlock()
		switch {
		case t != nil:
			return c, nil
		case err != nil:
			return c, err
		}
		if first {
			b.wake() // the grant may have completed before a notification
			first = false
		}
		select {
		case <-ctx.Done():
			return c, fmt.Errorf("vbox: waiting for tag %s: %w", tag, ctx.Err())
		case <-ch:
		}
	}
}

// WaitGone blocks until the host holds no extent of tag.
func (b *Backend) WaitGone(ctx context.Context, tag string) error {
	tag = strings.ToLower(tag)
	for first := true; ; {
		b.mu.Lock()
		_, held := b.tags[tag]
		ch, err := b.changed, b.err
		b.mu.Unlock()
		switch {
		case !held:
			return nil
		case err != nil:
			return err
		}
		if first {
			b.wake()
			first = false
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("vbox: waiting for tag %s to go: %w", tag, ctx.Err())
		case <-ch:
		}
	}
}

// inUse: mapped through Map, or by another process through the memory
// file (others, from b.others). Caller holds b.mu.
func inUse(t *tagState, others []fileRange) bool {
	return len(t.maps) > 0 || overlaps(others, t.extents)
}

// others is the other processes' mappings of the memory file
// (procmaps.go). It reads /proc: call it without b.mu.
func (b *Backend) others() []fileRange {
	return otherMappings(b.memID, os.Getpid(), b.boxPID)
}

// Changed is closed at the next change of the tags (host.Notifier).
func (b *Backend) Changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}

// List returns the held tags.
func (b *Backend) List(context.Context) ([]host.Capacity, error) {
	others := b.others()
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]host.Capacity, 0, len(b.tags))
	for tag, t := range b.tags {
		out = append(out, b.capacity(tag, t, others))
	}
	slices.SortFunc(out, func(x, y host.Capacity) int { return strings.Compare(x.Tag, y.Tag) })
	return out, b.err
}

// Release refuses while tag is mapped unless force, then lets the device's
// release of it be answered (now, if the device already asked).
func (b *Backend) Release(ctx context.Context, tag string, force bool) error {
	tag = strings.ToLower(tag)
	var others []fileRange
	if !force {
		others = b.others()
	}
	b.mu.Lock()
	t := b.tags[tag]
	switch {
	case t == nil:
		b.mu.Unlock()
		return fmt.Errorf("vbox: tag %s: %w", tag, host.ErrUnknownTag)
	case len(t.maps) > 0 && !force:
		n := len(t.maps)
		b.mu.Unlock()
		return fmt.Errorf("vbox: tag %s: %d mapping(s) open: %w", tag, n, host.ErrBusy)
	case !force && inUse(t, others):
		b.mu.Unlock()
		return fmt.Errorf("vbox: tag %s: another process maps it: %w", tag, host.ErrBusy)
	}
	for m := range t.maps {
		m.unmapLocked()
	}
	t.releasing = true
	b.mu.Unlock()
	b.callMu.Lock()
	defer b.callMu.Unlock()
	return b.answerRelease(ctx, tag, nil) // releasing: answered whoever maps it
}

// Keep lets tag be mapped again after a Release the box did not follow.
func (b *Backend) Keep(_ context.Context, tag string) error {
	tag = strings.ToLower(tag)
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.tags[tag]
	switch {
	case t == nil:
		return fmt.Errorf("vbox: tag %s: %w", tag, host.ErrUnknownTag)
	case len(t.pending) > 0:
		return fmt.Errorf("vbox: tag %s: the device asked for it back: %w", tag, host.ErrReleasing)
	}
	t.releasing = false
	return nil
}

// Map maps the tag's extents contiguously: a PROT_NONE reservation of the
// whole size, each extent mapped over it with MAP_FIXED from the memory
// file, so nothing else of the device is reachable through the mapping.
func (b *Backend) Map(ctx context.Context, tag string) (host.Mapping, error) {
	tag = strings.ToLower(tag)
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.tags[tag]
	switch {
	case t == nil:
		return nil, fmt.Errorf("vbox: tag %s: %w", tag, host.ErrUnknownTag)
	case t.releasing || len(t.pending) > 0:
		return nil, fmt.Errorf("vbox: tag %s: %w", tag, host.ErrReleasing)
	}
	var size uintptr
	for _, e := range t.extents {
		size += uintptr(e.Length)
	}
	base, err := unix.MmapPtr(-1, 0, nil, size, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("vbox: reserve %d bytes: %w", size, err)
	}
	off := uintptr(0)
	for _, e := range t.extents {
		if _, err := unix.MmapPtr(int(b.mem.Fd()), int64(e.DPA), unsafe.Add(base, off), uintptr(e.Length),
			unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED); err != nil {
			_ = unix.MunmapPtr(base, size)
			return nil, fmt.Errorf("vbox: map extent %#x+%#x: %w", e.DPA, e.Length, err)
		}
		off += uintptr(e.Length)
	}
	m := &mapping{b: b, tag: tag, base: base, size: size}
	t.maps[m] = struct{}{}
	close(b.changed)
	b.changed = make(chan struct{})
	return m, nil
}

// Close stops the backend and drops the link; the box keeps the accepted
// capacity (an agent restart finds it again).
func (b *Backend) Close() error {
	b.cancel()
	<-b.done
	_ = b.ep.Close()
	b.mu.Lock()
	for _, t := range b.tags {
		for m := range t.maps {
			m.unmapLocked()
		}
	}
	b.mu.Unlock()
	return b.mem.Close()
}

// mapping is one Map of a tag.
type mapping struct {
	b    *Backend
	tag  string
	base unsafe.Pointer
	size uintptr
	gone bool
}

func (m *mapping) Bytes() []byte {
	if m.gone {
		return nil
	}
	return unsafe.Slice((*byte)(m.base), m.size)
}

// unmapLocked unmaps and forgets m. Caller holds b.mu.
func (m *mapping) unmapLocked() {
	if m.gone {
		return
	}
	m.gone = true
	_ = unix.MunmapPtr(m.base, m.size)
	if t := m.b.tags[m.tag]; t != nil {
		delete(t.maps, m)
	}
}

// Close unmaps; a device release that waited for the last mapping is
// answered now.
func (m *mapping) Close() error {
	b := m.b
	b.mu.Lock()
	m.unmapLocked()
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
	b.wake() // the event loop answers a release that waited for this
	return nil
}
