// Package tcp serves rdma exports over TCP with the rdma/wire framing: the
// transport that works everywhere. Each connection is served by one
// goroutine that reads requests, executes them against the export's mapped
// memory and answers in request order; responses are gathered and written
// with one writev when the connection has no more input buffered, so
// pipelined requests cost one system call per burst, not per request.
//
// The data path avoids staging copies: a large READ is answered with a
// writev straight from the mapped device memory, and a large WRITE is read
// from the socket straight into it. Small payloads (up to CopyLimit) are
// copied, which is cheaper than keeping the memory pinned until the
// response is sent.
//
// Small reads and writes (the buffered input, a burst of responses up to
// 64 KiB) are raw system calls on the non-blocking socket (package
// internal/rawio): the runtime's syscall entry would wake its sysmon
// thread on most requests of a request/response exchange, a thread
// switch on every small READ's critical path.
//
// Safety: every access goes through rdma.Handle's Pin/Unpin, so revoking an
// export waits for the accesses in flight; a connection blocked in I/O on
// a revoked export's memory is aborted (its deadline is moved to the past)
// so a slow client never holds up a revoke. Deadlines, a per-connection
// bound on queued responses and sessions, and a server bound on
// connections keep one slow or dead client from stalling anyone else.
//
// Admission: the port is reachable by anyone, so a connection is "pending"
// until its first OPEN with a valid token succeeds, and pending connections
// are kept apart from authenticated ones (see gate.go). A pending
// connection must finish its handshake (preface and a successful OPEN)
// within HandshakeTimeout, may send only small requests, and costs a few
// hundred bytes of buffers (the full buffers come with the first session).
// Pending connections have their own budget, in total and per source
// address; when it is full the newest connection is kept and the oldest
// pending one of the source holding the most is closed, so a flood of idle
// connections never keeps a client that presents a valid token out: it
// only has to finish its handshake before its source's turn comes.
// Authenticated connections count against MaxConns only, which pending
// ones never touch.
package tcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"cxlpool/internal/rawio"
	"cxlpool/rdma"
	"cxlpool/rdma/wire"
)

// CopyLimit is the largest READ or WRITE payload the server copies rather
// than moving it between socket and device memory directly.
const CopyLimit = 16 << 10

// Extension serves an opcode the core protocol leaves to another
// transport (wire.OpConnect: the verbs transport's setup).
type Extension interface {
	// Request answers one request on an open session. ctx ends when the
	// connection closes, so per-connection state (queue pairs, memory
	// registrations) can be torn down with it.
	Request(ctx context.Context, h *rdma.Handle, body []byte) ([]byte, error)
}

// Config holds the server's dependencies and limits; zero values take the
// defaults in brackets.
type Config struct {
	Auth   rdma.Authenticator
	Logger *slog.Logger
	// IdleTimeout closes a connection that sends nothing while nothing is
	// in flight [5 min].
	IdleTimeout time.Duration
	// IOTimeout bounds a read blocked inside a request and every write
	// [30 s].
	IOTimeout time.Duration
	// MaxConns bounds concurrent authenticated connections (those whose
	// OPEN with a valid token succeeded) [1024]. An OPEN past it is
	// answered StatusBusy and the connection closed.
	MaxConns int
	// HandshakeTimeout is how long a new connection has to send its
	// preface and open its first session [2 s].
	HandshakeTimeout time.Duration
	// MaxPending bounds connections that have not opened a session yet
	// [256]; MaxPendingPerSource bounds them per source address (an IPv4
	// address, an IPv6 /64) [16]. Past either bound the oldest pending
	// connection of the source holding the most is closed to make room.
	MaxPending          int
	MaxPendingPerSource int
	// MaxSessions bounds open sessions per connection [64].
	MaxSessions int
	// MaxQueued is how many responses a connection gathers before it
	// writes them even if more input is buffered [64].
	MaxQueued int
	// MaxFailedOpens closes a connection after this many refused OPENs
	// [16], so guessing tokens costs a reconnect every few tries.
	MaxFailedOpens int
	// Extensions serve extra opcodes.
	Extensions map[wire.Opcode]Extension
}

// Server serves exports over TCP.
type Server struct {
	cfg  Config
	log  *slog.Logger
	gate gate

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	active    map[*conn]struct{}
	closed    bool
	wg        sync.WaitGroup
}

// NewServer returns a server; call Serve with a listener.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Auth == nil {
		return nil, errors.New("tcp: server needs an authenticator")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defInt := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&cfg.IdleTimeout, 5*time.Minute)
	def(&cfg.IOTimeout, 30*time.Second)
	def(&cfg.HandshakeTimeout, 2*time.Second)
	defInt(&cfg.MaxConns, 1024)
	defInt(&cfg.MaxPending, 256)
	defInt(&cfg.MaxPendingPerSource, 16)
	cfg.MaxPendingPerSource = min(cfg.MaxPendingPerSource, cfg.MaxPending)
	defInt(&cfg.MaxSessions, 64)
	defInt(&cfg.MaxQueued, 64)
	defInt(&cfg.MaxFailedOpens, 16)
	s := &Server{cfg: cfg, log: cfg.Logger, listeners: map[net.Listener]struct{}{}, active: map[*conn]struct{}{}}
	s.gate.init(cfg.MaxPending, cfg.MaxPendingPerSource, cfg.MaxConns)
	return s, nil
}

// Serve accepts connections on ln until Close (it then returns nil) or
// ln fails.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
	}()
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay) // accept backoff, as net/http does
				continue
			}
			return fmt.Errorf("tcp: accept: %w", err)
		}
		delay = 0
		c := s.newConn(nc)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return nil
		}
		s.active[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		if evicted := s.gate.admit(c); evicted != nil {
			s.log.Debug("pending connection closed to make room", "remote", evicted.nc.RemoteAddr(), "for", nc.RemoteAddr())
			evicted.nc.Close()
		}
		go func() {
			defer s.wg.Done()
			err := c.serve()
			c.close()
			s.gate.leave(c)
			s.mu.Lock()
			delete(s.active, c)
			s.mu.Unlock()
			// serve only ever returns with the reason the connection
			// ended; the end of input and a Close are not news.
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.log.Debug("connection ended", "remote", nc.RemoteAddr(), "err", err)
			}
		}()
	}
}

// Close stops accepting, closes every connection and waits for their
// goroutines, which unpin everything they held.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for ln := range s.listeners {
		ln.Close()
	}
	for c := range s.active {
		c.nc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// piece is one part of the gathered output: slab[lo:hi], or mem (device
// memory pinned through h, or an owned buffer when h is nil).
type piece struct {
	lo, hi int
	mem    []byte
	h      *rdma.Handle // set on the first piece of each Pin
	device bool         // mem is pinned device memory
}

// armed is a deadline as last set.
type armed struct {
	d  time.Duration
	at time.Time
}

type conn struct {
	s      *Server
	nc     net.Conn
	raw    *rawio.Conn // nc's small reads and writes, without the runtime's syscall entry
	br     *bufio.Reader
	ctx    context.Context
	cancel context.CancelFunc
	src    string // source address key (gate.go)
	// authed is set by the first successful OPEN; until then the
	// handshake deadline holds and requests must be small.
	authed bool
	gated  gateState // guarded by the gate's mutex

	sessions []*rdma.Handle // session n is sessions[n-1]; nil: free
	failed   int
	rdl, wdl armed
	aborted  atomic.Bool

	hdr    [wire.RequestLen]byte
	args   [16]byte // an atomic request's operands
	slab   []byte
	pieces []piece
	queued int
	zc     int // pieces that pin device memory
	bufs   net.Buffers
	segs   [][]byte
	stops  []func() bool
	// unobserved are the READs gathered whose access Config.CountAccess
	// hears once their responses are written (release).
	unobserved []access
}

// access is a READ of n bytes at off through h.
type access struct {
	h      *rdma.Handle
	off, n uint64
}

const (
	slabSize = 256 << 10
	brSize   = 64 << 10
	// pendingBuf sizes a pending connection's input buffer and slab: its
	// preface, a few OPENs and their answers.
	pendingBuf = 512
)

// newConn returns a pending connection with small buffers and its
// handshake deadline armed.
func (s *Server) newConn(nc net.Conn) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	_ = nc.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	raw := rawio.New(nc)
	return &conn{s: s, nc: nc, raw: raw, br: bufio.NewReaderSize(raw, pendingBuf), ctx: ctx, cancel: cancel,
		slab: make([]byte, 0, pendingBuf), src: sourceKey(nc.RemoteAddr())}
}

// authenticate moves the connection out of the pending budget at its
// first successful OPEN and gives it full-size buffers; bytes already
// buffered (pipelined requests) are kept. It fails when the connection
// was closed to make room, or authenticated connections are at MaxConns.
func (c *conn) authenticate() error {
	if c.authed {
		return nil
	}
	if err := c.s.gate.promote(c); err != nil {
		return err
	}
	c.authed = true
	rest, _ := c.br.Peek(c.br.Buffered())
	var in io.Reader = c.raw
	if len(rest) > 0 {
		in = io.MultiReader(bytes.NewReader(bytes.Clone(rest)), c.raw)
	}
	c.br = bufio.NewReaderSize(in, brSize)
	slab := make([]byte, len(c.slab), slabSize)
	copy(slab, c.slab) // pieces refer to offsets, which stay valid
	c.slab = slab
	// The handshake deadline no longer applies: the usual ones do.
	c.rdl, c.wdl = armed{}, armed{}
	_ = c.nc.SetDeadline(time.Time{})
	return nil
}

func (c *conn) close() {
	c.cancel()
	c.release()
	c.nc.Close()
}

// release unpins everything gathered and forgets it, then reports the
// READs among it to Config.CountAccess.
func (c *conn) release() {
	for i, a := range c.unobserved {
		a.h.Observe(a.off, a.n, false)
		c.unobserved[i] = access{}
	}
	c.unobserved = c.unobserved[:0]
	for i := range c.pieces {
		if p := &c.pieces[i]; p.h != nil {
			p.h.Unpin()
		}
		c.pieces[i] = piece{}
	}
	c.pieces, c.slab, c.queued, c.zc = c.pieces[:0], c.slab[:0], 0, 0
}

// deadline arms the read or write deadline d from now. Re-arming costs a
// runtime timer update per request, so an armed deadline of the same kind
// that expires within d/16 of the wanted one is kept.
func (c *conn) deadline(read bool, d time.Duration) {
	if c.aborted.Load() || !c.authed {
		return // the past deadline abort set, or the handshake's, must stay
	}
	t := time.Now().Add(d)
	dl := &c.wdl
	if read {
		dl = &c.rdl
	}
	if dl.d == d && t.Sub(dl.at) < d/16 {
		return
	}
	dl.d, dl.at = d, t
	if read {
		_ = c.nc.SetReadDeadline(t)
	} else {
		_ = c.nc.SetWriteDeadline(t)
	}
}

// abort makes the connection's blocked and later I/O fail at once. It
// runs when an export whose memory the connection holds pinned while it
// waits on the peer is revoked: the connection is lost (a response may be
// half sent), but the revoke does not wait for a slow peer.
func (c *conn) abort() {
	c.aborted.Store(true)
	_ = c.nc.SetDeadline(time.Unix(1, 0))
}

// need makes sure n bytes can be read without an unbounded wait: when they
// are not buffered it flushes the gathered output (the peer may be waiting
// for it before sending more) and arms the read deadline.
func (c *conn) need(n int, idle bool) error {
	if c.br.Buffered() >= n {
		return nil
	}
	if err := c.flush(); err != nil {
		return err
	}
	d := c.s.cfg.IOTimeout
	if idle {
		d = c.s.cfg.IdleTimeout
	}
	c.deadline(true, d)
	return nil
}

func (c *conn) serve() error {
	c.deadline(true, c.s.cfg.IOTimeout)
	var pre [wire.PrefaceLen]byte
	if _, err := io.ReadFull(c.br, pre[:]); err != nil {
		return fmt.Errorf("tcp: preface: %w", err)
	}
	if _, err := wire.ParsePreface(pre[:]); err != nil {
		return err
	}
	c.slab = wire.AppendPreface(c.slab)
	c.pieces = append(c.pieces, piece{lo: 0, hi: len(c.slab)})
	for {
		if err := c.need(wire.RequestLen, true); err != nil {
			return err
		}
		if _, err := io.ReadFull(c.br, c.hdr[:]); err != nil {
			return err
		}
		req, err := wire.ParseRequest(c.hdr[:])
		if err != nil {
			// The body length cannot be trusted: there is no way back
			// into the stream.
			return err
		}
		if !c.authed && req.Body > maxOpenBody {
			return fmt.Errorf("tcp: %s with a %d-byte body before any session: %w", req.Op, req.Body, rdma.ErrProtocol)
		}
		if err := c.do(req); err != nil {
			return err
		}
		if c.queued >= c.s.cfg.MaxQueued {
			if err := c.flush(); err != nil {
				return err
			}
		}
	}
}

// do executes one request. A returned error ends the connection; request
// failures are answered with a status instead.
func (c *conn) do(req wire.Request) error {
	switch req.Op {
	case wire.OpOpen:
		return c.open(req)
	case wire.OpClose:
		st := wire.StatusDenied
		if c.session(req.Session) != nil {
			c.sessions[req.Session-1] = nil
			st = wire.StatusOK
		}
		c.respond(wire.Response{Op: req.Op, Status: st, ID: req.ID})
		return nil
	case wire.OpRead:
		return c.read(req)
	case wire.OpWrite:
		return c.write(req)
	case wire.OpCAS, wire.OpFAA:
		return c.atomic(req)
	case wire.OpBatch:
		return c.batch(req)
	case wire.OpPing:
		if err := c.skip(int(req.Body)); err != nil {
			return err
		}
		c.respond(wire.Response{Op: req.Op, ID: req.ID})
		return nil
	}
	if ext := c.s.cfg.Extensions[req.Op]; ext != nil {
		return c.extension(req, ext)
	}
	if err := c.skip(int(req.Body)); err != nil {
		return err
	}
	c.respond(wire.Response{Op: req.Op, Status: wire.StatusUnsupported, ID: req.ID})
	return nil
}

func (c *conn) session(id uint32) *rdma.Handle {
	if id == 0 || int(id) > len(c.sessions) {
		return nil
	}
	return c.sessions[id-1]
}

// body reads a small request body into a fresh buffer.
func (c *conn) body(n int) ([]byte, error) {
	if err := c.need(n, false); err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c.br, b); err != nil {
		return nil, err
	}
	return b, nil
}

func (c *conn) skip(n int) error {
	if n == 0 {
		return nil
	}
	if err := c.need(n, false); err != nil {
		return err
	}
	_, err := c.br.Discard(n)
	return err
}

const maxOpenBody = 1 + 64 + rdma.TokenLen

func (c *conn) open(req wire.Request) error {
	if req.Body > maxOpenBody {
		return fmt.Errorf("tcp: OPEN body of %d bytes: %w", req.Body, rdma.ErrProtocol)
	}
	b, err := c.body(int(req.Body))
	if err != nil {
		return err
	}
	o, err := wire.ParseOpen(b)
	if err != nil {
		c.respond(wire.Response{Op: req.Op, Status: wire.StatusInvalid, ID: req.ID})
		return nil
	}
	h, err := c.s.cfg.Auth.Authenticate(o.Export, o.Token)
	if err != nil {
		c.failed++
		c.respond(wire.Response{Op: req.Op, Status: wire.StatusOf(err), ID: req.ID})
		if c.failed >= c.s.cfg.MaxFailedOpens {
			_ = c.flush()
			return fmt.Errorf("tcp: %d refused OPENs: %w", c.failed, rdma.ErrDenied)
		}
		return nil
	}
	if err := c.authenticate(); err != nil {
		c.respond(wire.Response{Op: req.Op, Status: wire.StatusOf(err), ID: req.ID})
		_ = c.flush()
		return err
	}
	slot := -1
	for i, s := range c.sessions {
		if s == nil {
			slot = i
			break
		}
	}
	if slot < 0 {
		if len(c.sessions) >= c.s.cfg.MaxSessions {
			c.respond(wire.Response{Op: req.Op, Status: wire.StatusBusy, ID: req.ID})
			return nil
		}
		c.sessions = append(c.sessions, nil)
		slot = len(c.sessions) - 1
	}
	c.sessions[slot] = h
	reply := wire.OpenReply{Session: uint32(slot + 1), Perms: h.Perms(), Size: h.Size()}
	dst := c.reserve(wire.ResponseLen + wire.OpenReplyLen)
	dst = wire.Response{Op: req.Op, Body: wire.OpenReplyLen, ID: req.ID}.AppendBinary(dst[:0])
	reply.AppendBinary(dst)
	return nil
}

// reserve returns n bytes at the end of the slab as a new piece, flushing
// first if the slab is full.
func (c *conn) reserve(n int) []byte {
	if len(c.slab)+n > cap(c.slab) {
		// A failed flush closes the connection, so the error
		// resurfaces at the next read.
		_ = c.flush()
	}
	if n > cap(c.slab) {
		b := make([]byte, n)
		c.pieces = append(c.pieces, piece{mem: b})
		c.queued++
		return b
	}
	lo := len(c.slab)
	c.slab = c.slab[:lo+n]
	if k := len(c.pieces); k > 0 && c.pieces[k-1].mem == nil && c.pieces[k-1].hi == lo {
		c.pieces[k-1].hi = lo + n // contiguous: one iovec
	} else {
		c.pieces = append(c.pieces, piece{lo: lo, hi: lo + n})
	}
	c.queued++
	return c.slab[lo : lo+n]
}

func (c *conn) respond(r wire.Response) {
	r.AppendBinary(c.reserve(wire.ResponseLen)[:0])
}

// pinRead pins n bytes at off for reading and queues head followed by the
// data: copied when small, as pinned device memory when large.
// Config.CountAccess hears of the READ once its response is written.
func (c *conn) pinRead(h *rdma.Handle, off uint64, n int, head []byte) error {
	segs, err := h.PinUnobserved(c.segs[:0], off, uint64(n), rdma.PermRead)
	if err != nil {
		return err
	}
	c.unobserved = append(c.unobserved, access{h, off, uint64(n)})
	c.segs = segs[:0]
	if n <= CopyLimit {
		dst := c.reserve(len(head) + n)
		k := copy(dst, head)
		for _, s := range segs {
			k += copy(dst[k:], s)
		}
		h.Unpin()
		return nil
	}
	copy(c.reserve(len(head)), head)
	for i, s := range segs {
		p := piece{mem: s, device: true}
		if i == 0 {
			p.h = h
		}
		c.pieces = append(c.pieces, p)
		c.zc++
	}
	return nil
}

func (c *conn) read(req wire.Request) error {
	h := c.session(req.Session)
	if h == nil {
		c.respond(wire.Response{Op: req.Op, Status: wire.StatusDenied, ID: req.ID})
		return nil
	}
	var head [wire.ResponseLen]byte
	wire.Response{Op: req.Op, Body: req.Length, ID: req.ID}.AppendBinary(head[:0])
	if err := c.pinRead(h, req.Offset, int(req.Length), head[:]); err != nil {
		c.respond(wire.Response{Op: req.Op, Status: wire.StatusOf(err), ID: req.ID})
	}
	return nil
}

// pinWrite pins n bytes at off for writing and moves the next n bytes of
// input there: through a buffered peek when small, so the export is never
// pinned while waiting on the network, and straight from the socket into
// device memory when large, with the read aborted if the export is
// revoked meanwhile. A pin failure still consumes the data; the returned
// error is then the request's, and fatal only if it is an I/O error.
func (c *conn) pinWrite(h *rdma.Handle, off uint64, n int) (reqErr, ioErr error) {
	if n <= CopyLimit {
		if err := c.need(n, false); err != nil {
			return nil, err
		}
		src, err := c.br.Peek(n)
		if err != nil {
			return nil, err
		}
		segs, perr := h.Pin(c.segs[:0], off, uint64(n), rdma.PermWrite)
		if perr == nil {
			c.segs = segs[:0]
			for _, s := range segs {
				src = src[copy(s, src):]
			}
			h.Unpin()
		}
		_, err = c.br.Discard(n)
		return perr, err
	}
	if c.br.Buffered() < n {
		// The data is coming over the network: answer what is
		// gathered first rather than sit on it.
		if err := c.flush(); err != nil {
			return nil, err
		}
	}
	segs, perr := h.Pin(c.segs[:0], off, uint64(n), rdma.PermWrite)
	if perr != nil {
		return perr, c.skip(n)
	}
	c.segs = segs[:0]
	defer h.Unpin()
	c.deadline(true, c.s.cfg.IOTimeout)
	stop := context.AfterFunc(h.Context(), c.abort)
	defer stop()
	for _, s := range segs {
		if _, err := io.ReadFull(c.br, s); err != nil {
			return nil, fmt.Errorf("tcp: WRITE data: %w", err)
		}
	}
	return nil, nil
}

func (c *conn) write(req wire.Request) error {
	h := c.session(req.Session)
	if h == nil {
		c.respond(wire.Response{Op: req.Op, Status: wire.StatusDenied, ID: req.ID})
		return c.skip(int(req.Body))
	}
	if err := c.ordered(h, req.Offset, uint64(req.Length), nil); err != nil {
		return err
	}
	reqErr, err := c.pinWrite(h, req.Offset, int(req.Length))
	if err != nil {
		return err
	}
	c.respond(wire.Response{Op: req.Op, Status: wire.StatusOf(reqErr), ID: req.ID})
	return nil
}

// ordered keeps a connection's operations in order before n bytes at off
// are changed: queued zero-copy READ responses that would send those bytes
// are written out first (and, inside a batch, its own such READs are
// copied), so every READ answers with the bytes as they were when it ran.
// It pins only to find the addresses, so it never holds the export while
// it writes.
func (c *conn) ordered(h *rdma.Handle, off, n uint64, b *batchOut) error {
	if c.zc == 0 && (b == nil || b.zc == 0) {
		return nil
	}
	var arr [4][]byte
	segs, err := h.Hold(arr[:0], off, n, rdma.PermWrite)
	if err != nil {
		return nil // the operation itself reports it
	}
	if b != nil {
		b.detach(segs)
	}
	hit := false
	for _, p := range c.pieces {
		if p.device {
			for _, d := range segs {
				hit = hit || overlaps(p.mem, d)
			}
		}
	}
	h.Unpin()
	if hit {
		return c.flush()
	}
	return nil
}

func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// atomicOp runs CAS or FAA; args holds compare, swap (CAS) or the addend.
func atomicOp(h *rdma.Handle, op wire.Opcode, off uint64, args []byte) (uint64, error) {
	if op == wire.OpCAS {
		return h.CompareAndSwap(off, binary.LittleEndian.Uint64(args), binary.LittleEndian.Uint64(args[8:]))
	}
	return h.FetchAdd(off, binary.LittleEndian.Uint64(args))
}

func (c *conn) atomic(req wire.Request) error {
	args := c.args[:] // a local array would escape through io.ReadFull
	if err := c.need(int(req.Body), false); err != nil {
		return err
	}
	if _, err := io.ReadFull(c.br, args[:req.Body]); err != nil {
		return err
	}
	h := c.session(req.Session)
	if h == nil {
		c.respond(wire.Response{Op: req.Op, Status: wire.StatusDenied, ID: req.ID})
		return nil
	}
	if err := c.ordered(h, req.Offset, 8, nil); err != nil {
		return err
	}
	v, err := atomicOp(h, req.Op, req.Offset, args[:req.Body])
	c.respond(wire.Response{Op: req.Op, Status: wire.StatusOf(err), ID: req.ID, Value: v})
	return nil
}

// batch runs the entries of a BATCH as they stream in. Its results are
// gathered apart from the connection's output, because output is flushed
// whenever the input runs dry and the batch's response header can only be
// written once every entry has run. A malformed batch is answered
// StatusInvalid as a whole (the entries before the fault have run).
func (c *conn) batch(req wire.Request) error {
	left := int(req.Body)
	h := c.session(req.Session)
	if h == nil {
		c.respond(wire.Response{Op: req.Op, Status: wire.StatusDenied, ID: req.ID})
		return c.skip(left)
	}
	b := &batchOut{}
	defer b.drop()
	// Large READs of the batch stay pinned while the rest of its body
	// arrives: a revoke meanwhile aborts the connection.
	defer context.AfterFunc(h.Context(), c.abort)()
	var moved, entries int
	var bad error
	for left > 0 && bad == nil {
		if left < wire.EntryLen {
			bad = fmt.Errorf("tcp: batch: %d trailing bytes: %w", left, rdma.ErrProtocol)
			break
		}
		if err := c.need(wire.EntryLen, false); err != nil {
			return err
		}
		var eb [wire.EntryLen]byte
		if _, err := io.ReadFull(c.br, eb[:]); err != nil {
			return err
		}
		left -= wire.EntryLen
		e, err := wire.ParseEntry(eb[:])
		entries++
		if e.Op == wire.OpRead || e.Op == wire.OpWrite {
			moved += int(e.Length)
		}
		switch {
		case err != nil:
			bad = err
		case e.DataLen() > left:
			bad = fmt.Errorf("tcp: batch entry wants %d bytes, %d left: %w", e.DataLen(), left, rdma.ErrProtocol)
		case entries > wire.MaxEntries:
			bad = fmt.Errorf("tcp: batch of more than %d entries: %w", wire.MaxEntries, rdma.ErrProtocol)
		case moved > wire.MaxIO:
			bad = fmt.Errorf("tcp: batch moves more than %d bytes: %w", wire.MaxIO, rdma.ErrProtocol)
		}
		if bad != nil {
			break
		}
		left -= e.DataLen()
		var res wire.Result
		switch e.Op {
		case wire.OpRead:
			if err := b.read(h, e.Offset, int(e.Length)); err != nil {
				res.Status = wire.StatusOf(err)
				break
			}
			continue
		case wire.OpWrite:
			if err := c.ordered(h, e.Offset, uint64(e.Length), b); err != nil {
				return err
			}
			reqErr, err := c.pinWrite(h, e.Offset, int(e.Length))
			if err != nil {
				return err
			}
			res.Status = wire.StatusOf(reqErr)
		case wire.OpCAS, wire.OpFAA:
			var args [16]byte
			n := e.DataLen()
			if err := c.need(n, false); err != nil {
				return err
			}
			if _, err := io.ReadFull(c.br, args[:n]); err != nil {
				return err
			}
			if err := c.ordered(h, e.Offset, 8, b); err != nil {
				return err
			}
			v, err := atomicOp(h, e.Op, e.Offset, args[:n])
			res.Status, res.Value = wire.StatusOf(err), v
		}
		res.AppendBinary(b.alloc(wire.ResultLen)[:0])
	}
	if bad == nil && entries == 0 {
		bad = fmt.Errorf("tcp: empty batch: %w", rdma.ErrProtocol)
	}
	if bad != nil {
		c.respond(wire.Response{Op: req.Op, Status: wire.StatusInvalid, ID: req.ID})
		return c.skip(left)
	}
	var body int
	for _, p := range b.pieces {
		body += len(p.mem)
	}
	c.respond(wire.Response{Op: req.Op, Body: uint32(body), ID: req.ID})
	c.pieces = append(c.pieces, b.pieces...)
	c.zc += b.zc
	b.pieces, b.zc = nil, 0 // handed over: the connection unpins them
	return nil
}

// batchOut gathers one batch's results: owned buffers carved from arena
// chunks, and pinned device memory for large READs.
type batchOut struct {
	pieces []piece
	zc     int
	arena  []byte
}

func (b *batchOut) alloc(n int) []byte {
	if len(b.arena)+n > cap(b.arena) {
		b.arena = make([]byte, 0, max(n, 64<<10))
	}
	lo := len(b.arena)
	b.arena = b.arena[:lo+n]
	buf := b.arena[lo : lo+n : lo+n]
	b.pieces = append(b.pieces, piece{mem: buf})
	return buf
}

func (b *batchOut) read(h *rdma.Handle, off uint64, n int) error {
	var arr [4][]byte
	segs, err := h.Pin(arr[:0], off, uint64(n), rdma.PermRead)
	if err != nil {
		return err
	}
	if n <= CopyLimit {
		dst := b.alloc(wire.ResultLen + n)
		k := len(wire.Result{Length: uint32(n)}.AppendBinary(dst[:0]))
		for _, s := range segs {
			k += copy(dst[k:], s)
		}
		h.Unpin()
		return nil
	}
	wire.Result{Length: uint32(n)}.AppendBinary(b.alloc(wire.ResultLen)[:0])
	for i, s := range segs {
		p := piece{mem: s, device: true}
		if i == 0 {
			p.h = h
		}
		b.pieces = append(b.pieces, p)
		b.zc++
	}
	return nil
}

// detach copies the pinned READ data that overlaps dst into owned buffers
// and unpins it, whole Pins at a time, so a later entry of the same batch
// cannot change what an earlier READ answers.
func (b *batchOut) detach(dst [][]byte) {
	if b.zc == 0 {
		return
	}
	for i := 0; i < len(b.pieces); i++ {
		if b.pieces[i].h == nil {
			continue
		}
		j := i + 1 // the Pin's pieces are pieces[i:j]
		for j < len(b.pieces) && b.pieces[j].device && b.pieces[j].h == nil {
			j++
		}
		hit := false
		for _, p := range b.pieces[i:j] {
			for _, d := range dst {
				hit = hit || overlaps(p.mem, d)
			}
		}
		if !hit {
			continue
		}
		h := b.pieces[i].h
		for k := i; k < j; k++ {
			cp := make([]byte, len(b.pieces[k].mem))
			copy(cp, b.pieces[k].mem)
			b.pieces[k] = piece{mem: cp}
			b.zc--
		}
		h.Unpin()
	}
}

// drop unpins whatever was not handed over.
func (b *batchOut) drop() {
	for _, p := range b.pieces {
		if p.h != nil {
			p.h.Unpin()
		}
	}
	b.pieces = nil
}

func (c *conn) extension(req wire.Request, ext Extension) error {
	if req.Body > 64<<10 {
		return fmt.Errorf("tcp: %s body of %d bytes: %w", req.Op, req.Body, rdma.ErrProtocol)
	}
	b, err := c.body(int(req.Body))
	if err != nil {
		return err
	}
	h := c.session(req.Session)
	if h == nil {
		c.respond(wire.Response{Op: req.Op, Status: wire.StatusDenied, ID: req.ID})
		return nil
	}
	out, err := ext.Request(c.ctx, h, b)
	if err != nil {
		c.s.log.Debug("extension request failed", "op", req.Op, "err", err)
		c.respond(wire.Response{Op: req.Op, Status: wire.StatusOf(err), ID: req.ID})
		return nil
	}
	dst := c.reserve(wire.ResponseLen + len(out))
	wire.Response{Op: req.Op, Body: uint32(len(out)), ID: req.ID}.AppendBinary(dst[:0])
	copy(dst[wire.ResponseLen:], out)
	return nil
}

// flush writes everything gathered with one writev and unpins it. While
// pinned device memory is being written, a revoke of its export aborts the
// write (and so the connection) instead of waiting for a slow peer.
func (c *conn) flush() error {
	if len(c.pieces) == 0 {
		return nil
	}
	bufs := c.bufs[:0]
	for _, p := range c.pieces {
		if p.mem != nil {
			bufs = append(bufs, p.mem)
		} else {
			bufs = append(bufs, c.slab[p.lo:p.hi])
		}
	}
	c.deadline(false, c.s.cfg.IOTimeout)
	stops := c.stops[:0]
	if c.zc > 0 {
		for _, p := range c.pieces {
			if p.h != nil {
				stops = append(stops, context.AfterFunc(p.h.Context(), c.abort))
			}
		}
	}
	c.bufs = bufs
	_, err := c.raw.WriteBuffers(bufs)
	for i, stop := range stops {
		stop()
		stops[i] = nil
	}
	c.stops = stops[:0]
	c.bufs = bufs[:0]
	clear(bufs[:cap(bufs)])
	c.release()
	if err != nil {
		// Part of a response may have gone out: the stream cannot
		// continue.
		c.nc.Close()
		return fmt.Errorf("tcp: write: %w", err)
	}
	return nil
}
