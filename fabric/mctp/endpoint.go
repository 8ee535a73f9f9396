package mctp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultReassemblyTimeout is how long a partial message may wait for its
// next packet. A 68-byte packet takes about 80 ms on a 9600-baud line, so
// only a sender that stalled or lost the tail of a message hits it.
const DefaultReassemblyTimeout = 2 * time.Second

// tagCount is the number of MCTP message tags (3 bits).
const tagCount = 8

// Config configures an Endpoint. Zero values select the defaults.
type Config struct {
	// EID is this endpoint's ID, the source of everything it sends.
	EID EID
	// MTU is the largest packet payload sent (default BaselineMTU). Raise it
	// only if the link and the peer accept larger packets.
	MTU int
	// MaxMessage bounds messages sent and reassembled, type byte included
	// (default DefaultMaxMessage).
	MaxMessage int
	// ReassemblyTimeout discards partial messages idle for this long
	// (default DefaultReassemblyTimeout).
	ReassemblyTimeout time.Duration
	// MessageTypes are advertised by Get Message Type Support. Control (00h)
	// is always included.
	MessageTypes []MsgType
	// AcceptAnyDst disables destination filtering. By default an endpoint
	// accepts packets addressed to its own EID, to EIDNull (a peer that does
	// not know our EID yet, as the QEMU device accepts) and to EIDBroadcast,
	// and drops the rest as foreign. Set it on a point-to-point link whose
	// peer may address us by an EID we were not told, e.g. a simulator.
	AcceptAnyDst bool
	// Logger receives debug records about dropped packets. nil discards.
	Logger *slog.Logger
	// Now is the clock for reassembly timeouts (default time.Now).
	Now func() time.Time
}

// Handler serves one incoming request message of a non-control type. src is
// the requester, typ the message type and msg the message without the type
// byte (the slice is the handler's to keep). If ok, resp (without type
// byte) is sent back to src with typ, the request's tag and TO=0.
//
// Each request runs in its own goroutine, so handlers may run concurrently
// with each other and may themselves call Request; responses are written
// one whole message at a time and therefore never interleave on the link.
// ctx is cancelled when the endpoint stops.
type Handler func(ctx context.Context, src EID, typ MsgType, msg []byte) (resp []byte, ok bool)

// Stats counts endpoint traffic. Counters only grow.
type Stats struct {
	PacketsIn  uint64
	PacketsOut uint64
	// Dropped counts packets discarded before reassembly (bad header,
	// foreign destination) and messages with no type byte.
	Dropped uint64
	// ReassemblyErrors counts packets or partial messages dropped by the
	// reassembly rules: missing SOM, bad sequence, superseded by a new SOM,
	// too large, or timed out.
	ReassemblyErrors uint64
	MessagesIn       uint64
	MessagesOut      uint64
	// Unmatched counts responses for which no request was waiting, e.g.
	// late responses after a timeout.
	Unmatched uint64
}

// Endpoint is one MCTP endpoint on a PacketLink: it answers control
// requests itself, hands other requests to its Handler and matches
// responses to outstanding Requests by (peer EID, tag).
type Endpoint struct {
	link    PacketLink
	eid     EID
	mtu     int
	maxMsg  int
	anyDst  bool
	log     *slog.Logger
	now     func() time.Time
	handler Handler
	ctrl    controlResponder
	reasm   *reassembler

	wmu sync.Mutex // whole messages go out atomically

	mu       sync.Mutex
	tagsUsed map[EID]uint8 // bitmask of tags in use per destination
	tagNext  map[EID]uint8 // where the round-robin tag search starts
	tagFreed chan struct{} // closed and replaced whenever a tag is released
	pending  map[pendingKey]*call

	iid atomic.Uint32 // control instance IDs

	running   atomic.Bool
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
	handlers  sync.WaitGroup

	packetsIn, packetsOut, dropped atomic.Uint64
	messagesIn, messagesOut        atomic.Uint64
	unmatched                      atomic.Uint64
}

type pendingKey struct {
	peer EID
	tag  uint8
}

type call struct {
	ch chan reply // buffered 1; receives at most one reply
}

type reply struct {
	typ MsgType
	msg []byte
}

// NewEndpoint returns an endpoint on link; call Run to start receiving.
// h may be nil, in which case non-control requests are ignored.
func NewEndpoint(link PacketLink, cfg Config, h Handler) *Endpoint {
	e := &Endpoint{
		link:     link,
		eid:      cfg.EID,
		mtu:      cfg.MTU,
		maxMsg:   cfg.MaxMessage,
		anyDst:   cfg.AcceptAnyDst,
		log:      cfg.Logger,
		now:      cfg.Now,
		handler:  h,
		ctrl:     controlResponder{eid: cfg.EID, types: controlTypes(cfg.MessageTypes)},
		tagsUsed: make(map[EID]uint8),
		tagNext:  make(map[EID]uint8),
		tagFreed: make(chan struct{}),
		pending:  make(map[pendingKey]*call),
		done:     make(chan struct{}),
	}
	if e.mtu <= 0 {
		e.mtu = BaselineMTU
	}
	if e.maxMsg <= 0 {
		e.maxMsg = DefaultMaxMessage
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.now == nil {
		e.now = time.Now
	}
	timeout := cfg.ReassemblyTimeout
	if timeout <= 0 {
		timeout = DefaultReassemblyTimeout
	}
	e.reasm = newReassembler(e.maxMsg, timeout)
	return e
}

// Run reads and dispatches packets until ctx is done, Close is called or
// the link fails. Whatever ends it, the endpoint is closed on return: the
// link is closed and pending Requests fail with ErrClosed. Run waits for
// running handlers, whose ctx it cancels. It returns ctx.Err() if ctx
// ended, nil after Close, and the link error otherwise. Run may be called
// only once.
func (e *Endpoint) Run(ctx context.Context) error {
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("mctp: endpoint already running")
	}
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// ReadPacket cannot watch ctx, so closing the link is what stops it.
	stop := context.AfterFunc(ctx, func() { _ = e.Close() })
	defer stop()

	err := e.readLoop(hctx)
	closedByUser := e.isClosed()
	_ = e.Close()
	cancel()
	e.handlers.Wait()
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case closedByUser:
		return nil
	}
	return err
}

func (e *Endpoint) isClosed() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

func (e *Endpoint) readLoop(ctx context.Context) error {
	for {
		pkt, err := e.link.ReadPacket()
		if err != nil {
			return fmt.Errorf("mctp: read packet: %w", err)
		}
		e.packetsIn.Add(1)
		h, err := ParseHeader(pkt)
		if err != nil {
			e.dropped.Add(1)
			e.log.Debug("mctp: packet dropped", "err", err)
			continue
		}
		if !e.anyDst && h.Dst != e.eid && h.Dst != EIDNull && h.Dst != EIDBroadcast {
			e.dropped.Add(1)
			e.log.Debug("mctp: packet for foreign EID dropped", "dst", h.Dst, "src", h.Src)
			continue
		}
		body, err := e.reasm.add(h, pkt[HeaderLen:], e.now())
		if err != nil {
			e.log.Debug("mctp: packet dropped", "err", err)
			continue
		}
		if body == nil {
			continue
		}
		if len(body) == 0 {
			e.dropped.Add(1)
			e.log.Debug("mctp: empty message dropped", "src", h.Src)
			continue
		}
		e.messagesIn.Add(1)
		e.dispatch(ctx, h, MsgType(body[0]&^icBit), body[1:])
	}
}

// dispatch routes one reassembled message. h is the header of its last
// packet (source, tag and TO are the same on all packets).
func (e *Endpoint) dispatch(ctx context.Context, h Header, typ MsgType, msg []byte) {
	if !h.TO {
		e.deliver(h.Src, h.Tag, typ, msg)
		return
	}
	rh := Header{Dst: h.Src, Src: e.eid, Tag: h.Tag}
	if typ == MsgTypeControl {
		resp, ok := e.ctrl.respond(msg)
		if !ok {
			return
		}
		// Send off the read loop so a slow link never stalls receiving.
		e.handlers.Go(func() { e.reply(rh, typ, resp) })
		return
	}
	if e.handler == nil {
		e.log.Debug("mctp: request without handler dropped", "src", h.Src, "type", typ)
		return
	}
	e.handlers.Go(func() {
		resp, ok := e.handler(ctx, h.Src, typ, msg)
		if ok {
			e.reply(rh, typ, resp)
		}
	})
}

func (e *Endpoint) reply(h Header, typ MsgType, resp []byte) {
	if err := e.send(h, typ, resp); err != nil {
		e.log.Debug("mctp: response not sent", "dst", h.Dst, "type", typ, "err", err)
	}
}

// deliver hands a response to the Request waiting for (src, tag); a
// request sent to EIDNull or EIDBroadcast accepts a response from any
// source (acquireTag guarantees at most one candidate).
func (e *Endpoint) deliver(src EID, tag uint8, typ MsgType, msg []byte) {
	e.mu.Lock()
	var c *call
	for _, peer := range [...]EID{src, EIDNull, EIDBroadcast} {
		k := pendingKey{peer, tag}
		if c = e.pending[k]; c != nil {
			delete(e.pending, k)
			break
		}
	}
	e.mu.Unlock()
	if c == nil {
		e.unmatched.Add(1)
		e.log.Debug("mctp: unmatched response dropped", "src", src, "tag", tag, "type", typ)
		return
	}
	c.ch <- reply{typ, msg}
}

// send packetizes typ+msg and writes all packets while holding wmu, so
// messages never interleave on the link (some peers, e.g. the QEMU I2C
// device, reassemble only one message at a time).
func (e *Endpoint) send(h Header, typ MsgType, msg []byte) error {
	return e.sendOn(h, typ, msg, false)
}

// sendOn is send; with try it sends nothing and fails with ErrNoTag when
// another message is being written (Start must not wait for the link).
func (e *Endpoint) sendOn(h Header, typ MsgType, msg []byte, try bool) error {
	if 1+len(msg) > e.maxMsg {
		return fmt.Errorf("mctp: send %d-byte message, limit %d: %w", 1+len(msg), e.maxMsg, ErrTooLarge)
	}
	body := make([]byte, 1+len(msg))
	body[0] = byte(typ)
	copy(body[1:], msg)
	pkts := Packetize(h, body, e.mtu)
	if !try {
		e.wmu.Lock()
	} else if !e.wmu.TryLock() {
		return fmt.Errorf("another message is being written: %w", ErrNoTag)
	}
	defer e.wmu.Unlock()
	if e.isClosed() {
		return ErrClosed
	}
	if pw, ok := e.link.(PacketsWriter); ok && len(pkts) > 1 {
		if err := pw.WritePackets(pkts); err != nil {
			return fmt.Errorf("mctp: write packets: %w", err)
		}
		e.packetsOut.Add(uint64(len(pkts)))
		e.messagesOut.Add(1)
		return nil
	}
	for _, p := range pkts {
		if err := e.link.WritePacket(p); err != nil {
			return fmt.Errorf("mctp: write packet: %w", err)
		}
		e.packetsOut.Add(1)
	}
	e.messagesOut.Add(1)
	return nil
}

// Request sends msg with message type typ to dst and waits for the
// response, which it returns without the type byte. It allocates one of the
// 8 tags for dst, waiting while all are in use; for a dst of EIDNull or
// EIDBroadcast the first response from any source is taken. A response of
// another message type is an error wrapping ErrMalformed. ctx bounds the
// whole call: when its deadline passes, the error wraps ErrTimeout and
// ctx.Err(); plain cancellation wraps only ctx.Err(). Without a deadline
// Request waits until the response arrives or the endpoint closes; callers
// should set one (libcxlmi uses 2 s).
//
// Tags are handed out round-robin, so a tag is reused only after the other
// seven, which makes a late response to a timed-out request unlikely to be
// taken for the answer to a new one.
func (e *Endpoint) Request(ctx context.Context, dst EID, typ MsgType, msg []byte) ([]byte, error) {
	if err := e.checkRequest(dst, msg); err != nil {
		return nil, err
	}
	tag, err := e.acquireTag(ctx, dst)
	if err != nil {
		return nil, err
	}
	p, err := e.begin(dst, typ, tag, msg, false)
	if err != nil {
		return nil, err
	}
	return p.Wait(ctx)
}

// Start sends msg as Request does but returns as soon as it is written;
// the Pending's Wait takes the response. It never waits for a tag or for
// the link: with all eight tags in use for dst, or another message being
// written, it fails with ErrNoTag, having sent nothing.
// A caller that must not block (one holding a lock others queue for)
// sends with Start and waits elsewhere.
func (e *Endpoint) Start(dst EID, typ MsgType, msg []byte) (*Pending, error) {
	if err := e.checkRequest(dst, msg); err != nil {
		return nil, err
	}
	tag, ok, _ := e.takeTag(dst)
	if !ok {
		return nil, fmt.Errorf("mctp: request to EID %d: %w", dst, ErrNoTag)
	}
	return e.begin(dst, typ, tag, msg, true)
}

// Pending is a request on the link whose response has not been taken.
// Wait must be called once: until then the request holds its tag.
type Pending struct {
	e    *Endpoint
	dst  EID
	tag  uint8
	typ  MsgType
	c    *call
	done bool
}

// checkRequest refuses what no request may be: too large, or on a closed
// endpoint.
func (e *Endpoint) checkRequest(dst EID, msg []byte) error {
	if 1+len(msg) > e.maxMsg {
		return fmt.Errorf("mctp: request of %d bytes to EID %d, limit %d: %w", 1+len(msg), dst, e.maxMsg, ErrTooLarge)
	}
	if e.isClosed() {
		return fmt.Errorf("mctp: request to EID %d: %w", dst, ErrClosed)
	}
	return nil
}

// begin registers the response's slot under tag and sends the request
// (with try, only if the link is free now). On failure the tag is free
// again.
func (e *Endpoint) begin(dst EID, typ MsgType, tag uint8, msg []byte, try bool) (*Pending, error) {
	p := &Pending{e: e, dst: dst, tag: tag, typ: typ, c: &call{ch: make(chan reply, 1)}}
	e.mu.Lock()
	e.pending[pendingKey{dst, tag}] = p.c
	e.mu.Unlock()
	if err := e.sendOn(Header{Dst: dst, Src: e.eid, TO: true, Tag: tag}, typ, msg, try); err != nil {
		p.end()
		return nil, fmt.Errorf("mctp: request to EID %d: %w", dst, err)
	}
	return p, nil
}

// end frees the request's response slot and tag.
func (p *Pending) end() {
	e, k := p.e, pendingKey{p.dst, p.tag}
	e.mu.Lock()
	if e.pending[k] == p.c {
		delete(e.pending, k)
	}
	e.mu.Unlock()
	e.releaseTag(p.dst, p.tag)
}

// Wait returns the response (without its type byte), bounded by ctx as
// Request is, and frees the tag.
func (p *Pending) Wait(ctx context.Context) ([]byte, error) {
	if p.done {
		return nil, fmt.Errorf("mctp: request to EID %d: response already taken", p.dst)
	}
	p.done = true
	defer p.end()
	e, dst := p.e, p.dst
	select {
	case r := <-p.c.ch:
		if r.typ != p.typ {
			return nil, fmt.Errorf("mctp: request to EID %d: response type %#02x, want %#02x: %w",
				dst, uint8(r.typ), uint8(p.typ), ErrMalformed)
		}
		return r.msg, nil
	case <-ctx.Done():
		return nil, e.ctxErr(ctx, dst, "waiting for the response")
	case <-e.done:
		return nil, fmt.Errorf("mctp: request to EID %d: %w", dst, ErrClosed)
	}
}

// ctxErr wraps ctx's error, adding ErrTimeout when the deadline passed.
func (e *Endpoint) ctxErr(ctx context.Context, dst EID, what string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("mctp: request to EID %d: %s: %w: %w", dst, what, ErrTimeout, ctx.Err())
	}
	return fmt.Errorf("mctp: request to EID %d: %s: %w", dst, what, ctx.Err())
}

// acquireTag allocates a tag for a request to dst, waiting while none is
// free. A response carries only its source EID and tag, and a request sent
// to EIDNull or EIDBroadcast accepts any source, so a tag in use for one of
// those is busy for every destination and vice versa; that keeps response
// matching unambiguous. The search is round-robin per destination.
func (e *Endpoint) acquireTag(ctx context.Context, dst EID) (uint8, error) {
	for {
		t, ok, freed := e.takeTag(dst)
		if ok {
			return t, nil
		}
		select {
		case <-freed:
		case <-ctx.Done():
			return 0, e.ctxErr(ctx, dst, "waiting for a free tag")
		case <-e.done:
			return 0, fmt.Errorf("mctp: request to EID %d: %w", dst, ErrClosed)
		}
	}
}

// takeTag allocates a free tag for dst if there is one; otherwise freed
// is closed when one is released.
func (e *Endpoint) takeTag(dst EID) (tag uint8, ok bool, freed <-chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	busy := e.tagsUsed[dst] | e.tagsUsed[EIDNull] | e.tagsUsed[EIDBroadcast]
	if dst == EIDNull || dst == EIDBroadcast {
		for _, m := range e.tagsUsed {
			busy |= m
		}
	}
	for i := range uint8(tagCount) {
		t := (e.tagNext[dst] + i) % tagCount
		if busy&(1<<t) == 0 {
			e.tagsUsed[dst] |= 1 << t
			e.tagNext[dst] = (t + 1) % tagCount
			return t, true, nil
		}
	}
	return 0, false, e.tagFreed
}

// releaseTag frees tag and wakes every Request waiting for one.
func (e *Endpoint) releaseTag(dst EID, tag uint8) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.tagsUsed[dst] &^= 1 << tag; e.tagsUsed[dst] == 0 {
		delete(e.tagsUsed, dst)
	}
	close(e.tagFreed)
	e.tagFreed = make(chan struct{})
}

// GetEndpointID asks dst for its EID (control command 02h).
func (e *Endpoint) GetEndpointID(ctx context.Context, dst EID) (EID, error) {
	data, err := e.control(ctx, dst, CmdGetEndpointID, nil)
	if err != nil {
		return 0, err
	}
	if len(data) < 1 {
		return 0, fmt.Errorf("mctp: get endpoint id: empty response: %w", ErrMalformed)
	}
	return EID(data[0]), nil
}

// GetMessageTypeSupport asks dst which message types it supports (control
// command 05h). Control itself is implied and usually not listed.
func (e *Endpoint) GetMessageTypeSupport(ctx context.Context, dst EID) ([]MsgType, error) {
	data, err := e.control(ctx, dst, CmdGetMessageTypeSupport, nil)
	if err != nil {
		return nil, err
	}
	if len(data) < 1 || len(data) < 1+int(data[0]) {
		return nil, fmt.Errorf("mctp: get message type support: %d-byte response: %w", len(data), ErrMalformed)
	}
	types := make([]MsgType, data[0])
	for i := range types {
		types[i] = MsgType(data[1+i])
	}
	return types, nil
}

// control sends one control request and returns the response data after
// the completion code.
func (e *Endpoint) control(ctx context.Context, dst EID, cmd ControlCommand, data []byte) ([]byte, error) {
	iid := uint8(e.iid.Add(1)) & 0x1F
	req := ControlHeader{Request: true, InstanceID: iid, Command: cmd}.Append(nil)
	resp, err := e.Request(ctx, dst, MsgTypeControl, append(req, data...))
	if err != nil {
		return nil, err
	}
	return parseControlResponse(resp, iid, cmd)
}

// Close closes the link and fails pending and future Requests with
// ErrClosed. It returns the link's Close error; later calls return the
// same.
func (e *Endpoint) Close() error {
	e.closeOnce.Do(func() {
		close(e.done)
		e.closeErr = e.link.Close()
	})
	return e.closeErr
}

// Stats returns the endpoint counters.
func (e *Endpoint) Stats() Stats {
	return Stats{
		PacketsIn:        e.packetsIn.Load(),
		PacketsOut:       e.packetsOut.Load(),
		Dropped:          e.dropped.Load(),
		ReassemblyErrors: e.reasm.errors.Load(),
		MessagesIn:       e.messagesIn.Load(),
		MessagesOut:      e.messagesOut.Load(),
		Unmatched:        e.unmatched.Load(),
	}
}
