// Package client is the Go client of rdma exports over TCP (rdma/tcp).
// A Client opens one session on each of several connections to the
// server; every operation is pipelined (many may be in flight on one
// connection), and a transfer of at least twice Config.Stripe is cut into
// equal pieces sent over several connections at once. Data moves without
// staging copies: WRITE data is sent with writev straight from the
// caller's buffer and READ data is read from the socket straight into it.
// There is no reader goroutine: a caller waiting for its answer reads the
// connection's responses, completing other callers' on the way, so a
// small request costs no more goroutine hand-offs than a plain
// request/response over a socket.
// Requests and the buffered reads of responses are raw system calls on
// the non-blocking socket (internal/rawio), which spares a thread
// wake-up per round trip, and a caller waiting for a response polls the
// socket for a while before it sleeps (Config.Poll), which spares the
// wake-up of an idle CPU.
//
// Operations on one connection run in order on the server; operations on
// different connections (the pieces of one striped transfer, or calls from
// different goroutines) are not ordered with one another.
package client

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"cxlpool/internal/rawio"
	"cxlpool/rdma"
	"cxlpool/rdma/wire"
)

// Errors of the client itself; an export's refusals are the rdma errors
// (rdma.ErrDenied, rdma.ErrRevoked, rdma.ErrRange, ...).
var (
	ErrClosed = errors.New("client: closed")
	// ErrConnection: the connection failed; operations in flight on it
	// may or may not have run.
	ErrConnection = errors.New("client: connection lost")
)

// Config says where the export is and how to reach it.
type Config struct {
	Addr   string
	Export rdma.ExportID
	Token  rdma.Token
	// Conns is the number of connections (and sessions) [GOMAXPROCS,
	// at most 4: on loopback more streams than cores only contend].
	Conns int
	// Stripe is the smallest piece a transfer is cut into: a transfer of
	// n bytes goes as min(Conns, n/Stripe) equal pieces over as many
	// connections at once [256 KiB].
	Stripe int
	// Window bounds the requests in flight per connection [64].
	Window int
	// IOTimeout bounds a blocked write, and a read inside a response [30 s].
	IOTimeout time.Duration
	// Dial opens a connection (a net.Dialer's DialContext by default).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Poll is how long a caller waiting for a response keeps asking
	// the socket, yielding the CPU between tries, before it sleeps in
	// the runtime's poller [DefaultPoll; negative: never, at most
	// MaxPoll]. A sleeping caller is woken through the idle CPU
	// it slept on, which on a virtual machine costs more than the
	// whole request (see internal/rawio); polling spends the client's
	// CPU for the time an answer takes, as an RDMA client polling its
	// completion queue does. Each connection polls only while its
	// waits have been shorter polling than sleeping (with the server
	// in the same process they are not).
	Poll time.Duration
}

// MaxPoll is the longest Config.Poll.
const MaxPoll = rawio.MaxPoll

// pollMaxRead is the largest READ whose wait for an answer polls.
const pollMaxRead = rawio.Small

// DefaultPoll is Config.Poll's default: about a round trip of a small
// READ across a data centre network, and twice one across CPUs of this
// machine's loopback with the caller polling.
const DefaultPoll = 50 * time.Microsecond

// Client is a connection to one export. Methods are safe for concurrent
// use.
type Client struct {
	cfg   Config
	conns []*conn
	size  uint64
	perms rdma.Perm
	next  atomic.Uint64
	// free holds finished calls for reuse, so that a request costs no
	// allocation (a call and its channel per request were most of a
	// small READ's garbage).
	free sync.Pool
}

// Dial connects to the export and opens a session on every connection.
// A wrong token or unknown export fails with rdma.ErrDenied.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.Conns <= 0 {
		cfg.Conns = min(4, runtime.GOMAXPROCS(0))
	}
	if cfg.Stripe <= 0 {
		cfg.Stripe = 256 << 10
	}
	cfg.Stripe = min(cfg.Stripe, wire.MaxIO)
	if cfg.Window <= 0 {
		cfg.Window = 64
	}
	if cfg.IOTimeout <= 0 {
		cfg.IOTimeout = 30 * time.Second
	}
	if cfg.Poll == 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.Dial == nil {
		d := &net.Dialer{}
		cfg.Dial = d.DialContext
	}
	c := &Client{cfg: cfg, conns: make([]*conn, cfg.Conns)}
	errs := make([]error, cfg.Conns)
	var wg sync.WaitGroup
	for i := range c.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.conns[i], errs[i] = dial(ctx, cfg)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Close()
		// Every connection fails alike; report one.
		for _, e := range errs {
			if e != nil {
				return nil, e
			}
		}
	}
	c.size, c.perms = c.conns[0].size, c.conns[0].perms
	return c, nil
}

// Size is the export's length in bytes.
func (c *Client) Size() uint64 { return c.size }

// Perms is what the export allows.
func (c *Client) Perms() rdma.Perm { return c.perms }

// Close closes every connection; operations in flight fail with ErrClosed.
func (c *Client) Close() error {
	for _, cn := range c.conns {
		if cn != nil {
			cn.fail(ErrClosed)
		}
	}
	return nil
}

// newCall returns a reset call for op, reused when one is free.
func (c *Client) newCall(op wire.Opcode) *call {
	cl, _ := c.free.Get().(*call)
	if cl == nil {
		return &call{op: op, done: make(chan struct{}, 1)}
	}
	cl.id, cl.op, cl.resp, cl.claimed = 0, op, wire.Response{}, false
	cl.fin.Store(false)
	return cl
}

// recycle makes cl reusable. Only a call whose completion its waiter has
// received (or that was abandoned unclaimed, so that nothing will ever
// complete it) may be recycled: its channel is then empty and nobody
// else holds it.
func (c *Client) recycle(cl *call) {
	cl.dst, cl.batch, cl.body, cl.err = nil, nil, nil, nil
	c.free.Put(cl)
}

func (c *Client) pick() *conn {
	return c.conns[c.next.Add(1)%uint64(len(c.conns))]
}

// Read fills p with the bytes at export offset off.
func (c *Client) Read(ctx context.Context, p []byte, off uint64) error {
	return c.stripe(ctx, wire.OpRead, p, off)
}

// Write stores p at export offset off. It returns once the server has
// put every byte in device memory.
func (c *Client) Write(ctx context.Context, p []byte, off uint64) error {
	return c.stripe(ctx, wire.OpWrite, p, off)
}

func (c *Client) stripe(ctx context.Context, op wire.Opcode, p []byte, off uint64) error {
	if len(p) <= c.cfg.Stripe {
		cl := c.newCall(op)
		cn := c.pick()
		var err error
		if op == wire.OpRead {
			cl.dst = p
			err = cn.start(ctx, cl, wire.Request{Op: op, Offset: off, Length: uint32(len(p))})
		} else {
			err = cn.start(ctx, cl, wire.Request{Op: op, Offset: off, Length: uint32(len(p))}, p)
		}
		if err != nil {
			return err // cl may have been completed: not reused
		}
		err = cn.wait(ctx, cl)
		c.recycle(cl)
		return err
	}
	type started struct {
		cn *conn
		cl *call
	}
	// Equal pieces, one per connection, at least Stripe and at most
	// wire.MaxIO bytes each, in 4 KiB multiples.
	n := min(len(c.conns), len(p)/c.cfg.Stripe)
	n = max(n, (len(p)+wire.MaxIO-1)/wire.MaxIO, 1)
	size := min((len(p)/n+4095)&^4095, wire.MaxIO)
	var pieces []started
	var firstErr error
	base := c.next.Add(1)
	for i, lo := 0, 0; lo < len(p); i, lo = i+1, lo+size {
		part := p[lo:min(lo+size, len(p))]
		cl, payload := c.transfer(op, part)
		cn := c.conns[(base+uint64(i))%uint64(len(c.conns))]
		if err := cn.start(ctx, cl, wire.Request{Op: op, Offset: off + uint64(lo), Length: uint32(len(part))}, payload...); err != nil {
			firstErr = err
			break
		}
		pieces = append(pieces, started{cn, cl})
	}
	for _, s := range pieces {
		if err := s.cn.wait(ctx, s.cl); err != nil && firstErr == nil {
			firstErr = err
		}
		c.recycle(s.cl)
	}
	return firstErr
}

// transfer prepares a READ into p or a WRITE of p.
func (c *Client) transfer(op wire.Opcode, p []byte) (*call, [][]byte) {
	cl := c.newCall(op)
	if op == wire.OpRead {
		cl.dst = p
		return cl, nil
	}
	return cl, [][]byte{p}
}

// CompareAndSwap stores swap in the 8-byte word at off (8-byte aligned)
// if it holds compare, and returns the word's previous value: the swap
// happened iff it equals compare. Words are little-endian.
func (c *Client) CompareAndSwap(ctx context.Context, off, compare, swap uint64) (uint64, error) {
	cl := c.newCall(wire.OpCAS)
	binary.LittleEndian.PutUint64(cl.args[:], compare)
	binary.LittleEndian.PutUint64(cl.args[8:], swap)
	return c.atomic(ctx, cl, off, cl.args[:16])
}

// FetchAdd adds delta to the 8-byte word at off (wrapping) and returns
// its previous value.
func (c *Client) FetchAdd(ctx context.Context, off, delta uint64) (uint64, error) {
	cl := c.newCall(wire.OpFAA)
	binary.LittleEndian.PutUint64(cl.args[:], delta)
	return c.atomic(ctx, cl, off, cl.args[:8])
}

// atomic runs cl, a CAS or FAA whose operands args are in cl.args (a
// local array would escape to the heap through start's payload).
func (c *Client) atomic(ctx context.Context, cl *call, off uint64, args []byte) (uint64, error) {
	cn := c.pick()
	if err := cn.start(ctx, cl, wire.Request{Op: cl.op, Offset: off, Length: 8}, args); err != nil {
		return 0, err
	}
	err := cn.wait(ctx, cl)
	v := cl.resp.Value
	c.recycle(cl)
	if err != nil {
		return 0, err
	}
	return v, nil
}

// Ping round-trips an empty request on one connection.
func (c *Client) Ping(ctx context.Context) error {
	cl := c.newCall(wire.OpPing)
	cn := c.pick()
	if err := cn.start(ctx, cl, wire.Request{Op: wire.OpPing}); err != nil {
		return err
	}
	err := cn.wait(ctx, cl)
	c.recycle(cl)
	return err
}

// Control sends a request of an extension opcode (wire.OpConnect) with
// body on the first connection's session and returns the response body.
// The verbs transport sets itself up through it.
func (c *Client) Control(ctx context.Context, op wire.Opcode, body []byte) ([]byte, error) {
	cl := &call{op: op, done: make(chan struct{}, 1)}
	cn := c.conns[0]
	if err := cn.start(ctx, cl, wire.Request{Op: op, Body: uint32(len(body))}, body); err != nil {
		return nil, err
	}
	if err := cn.wait(ctx, cl); err != nil {
		return nil, err
	}
	return cl.body, nil
}

// OpKind is a batch operation.
type OpKind uint8

// Batch operations.
const (
	OpRead OpKind = iota + 1
	OpWrite
	OpCompareAndSwap
	OpFetchAdd
)

// Op is one operation of a batch: a READ into Buf, a WRITE of Buf, a
// compare-and-swap of the word at Offset from Compare to Value, or a
// fetch-and-add of Value. Result and Err are set by Batch.
type Op struct {
	Kind    OpKind
	Offset  uint64
	Buf     []byte
	Compare uint64
	Value   uint64

	Result uint64 // CAS and FAA: the word's previous value
	Err    error
}

// Batch runs ops as scatter/gather lists: as few BATCH requests as the
// limits allow (wire.MaxEntries entries and wire.MaxIO bytes each), spread
// over the connections. Operations within one request run in order. It
// returns an error if any operation failed; each op's Err tells which.
func (c *Client) Batch(ctx context.Context, ops []Op) error {
	type started struct {
		cn  *conn
		cl  *call
		ops []Op
	}
	var reqs []started
	var firstErr error
	for lo := 0; lo < len(ops) && firstErr == nil; {
		hi, moved := lo, 0
		for hi < len(ops) && hi-lo < wire.MaxEntries {
			n := 0
			if ops[hi].Kind == OpRead || ops[hi].Kind == OpWrite {
				n = len(ops[hi].Buf)
			}
			if hi > lo && moved+n > wire.MaxIO {
				break
			}
			moved += n
			hi++
		}
		group := ops[lo:hi]
		lo = hi
		bufs, body, err := encodeBatch(group)
		if err != nil {
			firstErr = err
			break
		}
		cl := &call{op: wire.OpBatch, batch: group, done: make(chan struct{}, 1)}
		cn := c.pick()
		if err := cn.start(ctx, cl, wire.Request{Op: wire.OpBatch, Body: uint32(body)}, bufs...); err != nil {
			firstErr = err
			break
		}
		reqs = append(reqs, started{cn, cl, group})
	}
	for _, r := range reqs {
		if err := r.cn.wait(ctx, r.cl); err != nil {
			for i := range r.ops {
				if r.ops[i].Err == nil {
					r.ops[i].Err = err
				}
			}
		}
	}
	failed := 0
	for i := range ops {
		if ops[i].Err != nil {
			if failed == 0 && firstErr == nil {
				firstErr = ops[i].Err
			}
			failed++
		}
	}
	if firstErr != nil {
		return fmt.Errorf("client: batch: %d of %d operations failed: %w", failed, len(ops), firstErr)
	}
	return nil
}

// encodeBatch builds a BATCH body as buffers: entry headers from one
// scratch slice, WRITE data straight from the callers' buffers.
func encodeBatch(ops []Op) ([][]byte, int, error) {
	hdrs := make([]byte, 0, len(ops)*(wire.EntryLen+16))
	var bufs [][]byte
	body := 0
	for i := range ops {
		op := &ops[i]
		op.Err, op.Result = nil, 0
		lo := len(hdrs)
		var data []byte
		switch op.Kind {
		case OpRead:
			hdrs = wire.Entry{Op: wire.OpRead, Length: uint32(len(op.Buf)), Offset: op.Offset}.AppendBinary(hdrs)
		case OpWrite:
			hdrs = wire.Entry{Op: wire.OpWrite, Length: uint32(len(op.Buf)), Offset: op.Offset}.AppendBinary(hdrs)
			data = op.Buf
		case OpCompareAndSwap:
			hdrs = wire.Entry{Op: wire.OpCAS, Length: 8, Offset: op.Offset}.AppendBinary(hdrs)
			hdrs = binary.LittleEndian.AppendUint64(hdrs, op.Compare)
			hdrs = binary.LittleEndian.AppendUint64(hdrs, op.Value)
		case OpFetchAdd:
			hdrs = wire.Entry{Op: wire.OpFAA, Length: 8, Offset: op.Offset}.AppendBinary(hdrs)
			hdrs = binary.LittleEndian.AppendUint64(hdrs, op.Value)
		default:
			return nil, 0, fmt.Errorf("client: batch op %d: unknown kind %d: %w", i, op.Kind, rdma.ErrInvalid)
		}
		if len(op.Buf) > wire.MaxIO {
			return nil, 0, fmt.Errorf("client: batch op %d: %d bytes, limit %d: %w", i, len(op.Buf), wire.MaxIO, rdma.ErrInvalid)
		}
		bufs = append(bufs, hdrs[lo:len(hdrs):len(hdrs)])
		body += len(hdrs) - lo
		if len(data) > 0 {
			bufs = append(bufs, data)
			body += len(data)
		}
	}
	return bufs, body, nil
}

// call is one request in flight.
type call struct {
	id    uint64
	op    wire.Opcode
	dst   []byte // READ: where the data goes
	batch []Op   // BATCH: the operations whose results come back
	resp  wire.Response
	body  []byte   // other opcodes: the response body
	args  [16]byte // CAS, FAA: the operands sent
	err   error
	// done receives one value when the call completes (after its
	// fields are set); the waiter takes it, which leaves the channel
	// empty for the call's reuse. fin says the same to the goroutine
	// reading responses without taking the value.
	done chan struct{}
	fin  atomic.Bool
	// claimed is set (under conn.mu) once the goroutine reading
	// responses has taken the call to fill it; from then on only that
	// goroutine completes it.
	claimed bool
}

type conn struct {
	cfg     Config
	nc      net.Conn
	raw     *rawio.Conn // nc's small reads and writes, without the runtime's syscall entry
	br      *bufio.Reader
	session uint32
	size    uint64
	perms   rdma.Perm
	window  chan struct{}

	wmu  sync.Mutex
	wbuf []byte
	wdl  time.Time // the default write deadline armed, zero if none

	mu     sync.Mutex
	calls  map[uint64]*call
	nextID uint64
	err    error

	// readTok is held by the goroutine reading responses: one of the
	// callers waiting, which reads until its own response has come and
	// fills the others' calls on the way. Having the caller read (rather
	// than a reader goroutine that wakes it) saves a goroutine hand-off
	// per round trip, which is most of a small READ's client cost.
	readTok chan struct{}
	// abortMu guards the read deadline a leader's context may move
	// into the past while it waits for a response to begin (abortOn),
	// and the context watch. One context.AfterFunc stays registered
	// per connection for the Done channel of the last leader's context
	// (watchDone), so that a caller that keeps using one cancellable
	// context (poolctl's, a server's request context) costs no
	// registration, allocation or deadline update per request.
	abortMu   sync.Mutex
	abortOn   bool
	abortHit  bool // the read deadline was moved into the past
	watchDone <-chan struct{}
	watchStop func() bool
}

// dial opens a connection and its session synchronously; everything after
// is pipelined.
func dial(ctx context.Context, cfg Config) (*conn, error) {
	nc, err := cfg.Dial(ctx, "tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w", cfg.Addr, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	raw := rawio.New(nc)
	raw.SetPoll(cfg.Poll)
	cn := &conn{cfg: cfg, nc: nc, raw: raw, br: bufio.NewReaderSize(raw, 64<<10), window: make(chan struct{}, cfg.Window),
		calls: map[uint64]*call{}, nextID: 1, readTok: make(chan struct{}, 1)}
	if err := cn.open(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	cn.readTok <- struct{}{}
	return cn, nil
}

func (cn *conn) open(ctx context.Context) error {
	if d, ok := ctx.Deadline(); ok {
		_ = cn.nc.SetDeadline(d)
	} else {
		_ = cn.nc.SetDeadline(time.Now().Add(cn.cfg.IOTimeout))
	}
	defer cn.nc.SetDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { _ = cn.nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	body := wire.Open{Export: cn.cfg.Export, Token: cn.cfg.Token}.AppendBinary(nil)
	b := wire.AppendPreface(nil)
	b = wire.Request{Op: wire.OpOpen, Body: uint32(len(body))}.AppendBinary(b)
	if _, err := cn.nc.Write(append(b, body...)); err != nil {
		return fmt.Errorf("client: open %s: %w", cn.cfg.Addr, err)
	}
	var pre [wire.PrefaceLen]byte
	var hdr [wire.ResponseLen]byte
	var reply [wire.OpenReplyLen]byte
	if _, err := io.ReadFull(cn.br, pre[:]); err != nil {
		return fmt.Errorf("client: open %s: %w", cn.cfg.Addr, errors.Join(err, ctx.Err()))
	}
	if _, err := wire.ParsePreface(pre[:]); err != nil {
		return err
	}
	if _, err := io.ReadFull(cn.br, hdr[:]); err != nil {
		return fmt.Errorf("client: open %s: %w", cn.cfg.Addr, err)
	}
	r, err := wire.ParseResponse(hdr[:])
	if err != nil {
		return err
	}
	if r.Op != wire.OpOpen {
		return fmt.Errorf("client: open answered by %s: %w", r.Op, rdma.ErrProtocol)
	}
	if err := r.Status.Err(); err != nil {
		return fmt.Errorf("client: open %s: %w", cn.cfg.Export, err)
	}
	if r.Body != wire.OpenReplyLen {
		return fmt.Errorf("client: OPEN reply of %d bytes: %w", r.Body, rdma.ErrProtocol)
	}
	if _, err := io.ReadFull(cn.br, reply[:]); err != nil {
		return fmt.Errorf("client: open %s: %w", cn.cfg.Addr, err)
	}
	o, err := wire.ParseOpenReply(reply[:])
	if err != nil {
		return err
	}
	cn.session, cn.size, cn.perms = o.Session, o.Size, o.Perms
	return nil
}

// start registers cl and sends its request with payload (data sent from
// the caller's buffers, not copied).
func (cn *conn) start(ctx context.Context, cl *call, req wire.Request, payload ...[]byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case cn.window <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	cn.mu.Lock()
	if cn.err != nil {
		err := cn.err
		cn.mu.Unlock()
		<-cn.window
		return err
	}
	req.ID = cn.nextID
	cn.nextID++
	req.Session = cn.session
	if req.Op == wire.OpWrite {
		req.Body = req.Length
	} else if req.Op == wire.OpCAS || req.Op == wire.OpFAA {
		req.Body = uint32(len(payload[0]))
	}
	cl.id = req.ID
	cn.calls[req.ID] = cl
	cn.mu.Unlock()

	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	// A deadline update costs a runtime timer operation: keep an armed
	// default deadline while it is within 1/16 of the wanted one.
	if d, ok := ctx.Deadline(); ok {
		cn.wdl = time.Time{}
		_ = cn.nc.SetWriteDeadline(d)
	} else if now := time.Now(); cn.wdl.Sub(now) < cn.cfg.IOTimeout-cn.cfg.IOTimeout/16 {
		cn.wdl = now.Add(cn.cfg.IOTimeout)
		_ = cn.nc.SetWriteDeadline(cn.wdl)
	}
	cn.wbuf = req.AppendBinary(cn.wbuf[:0])
	var err error
	if len(payload) == 0 || len(payload) == 1 && len(payload[0]) <= 64 {
		// Small: one write of one buffer.
		for _, p := range payload {
			cn.wbuf = append(cn.wbuf, p...)
		}
		_, err = cn.raw.Write(cn.wbuf)
	} else {
		bufs := make(net.Buffers, 0, 1+len(payload))
		bufs = append(append(bufs, cn.wbuf), payload...)
		_, err = bufs.WriteTo(cn.nc)
	}
	if err != nil {
		// A partial request leaves the stream unusable.
		err = fmt.Errorf("%w: %s: %w", ErrConnection, cn.cfg.Addr, err)
		cn.fail(err)
		return err
	}
	return nil
}

// wait waits for cl, reading responses itself when no other caller is.
// If ctx ends first, an unclaimed call is abandoned (its response will
// be discarded); a claimed one is being filled from the socket and is
// waited for, because its buffer is the caller's. When wait returns, cl's
// completion has been received (or it was abandoned unclaimed): nothing
// else refers to it.
func (cn *conn) wait(ctx context.Context, cl *call) error {
	for {
		select {
		case <-cl.done:
			return cl.err
		case <-cn.readTok:
			err := cn.lead(ctx, cl)
			cn.readTok <- struct{}{}
			if err == nil {
				<-cl.done // lead returns nil only once cl is complete
				return cl.err
			}
		case <-ctx.Done():
		}
		if ctx.Err() == nil {
			continue
		}
		cn.mu.Lock()
		if !cl.claimed && cn.calls[cl.id] == cl {
			delete(cn.calls, cl.id)
			cn.mu.Unlock()
			<-cn.window
			return ctx.Err()
		}
		cn.mu.Unlock()
		<-cl.done
		return cl.err
	}
}

// arm makes ctx's end move the read deadline into the past while the
// leader waits for a response to begin. The AfterFunc registered for the
// previous leader's context is kept when ctx has the same Done channel.
func (cn *conn) arm(ctx context.Context) {
	d := ctx.Done()
	cn.abortMu.Lock()
	if cn.watchDone != d {
		if cn.watchStop != nil {
			cn.watchStop()
		}
		cn.watchDone = d
		cn.watchStop = context.AfterFunc(ctx, func() {
			cn.abortMu.Lock()
			if cn.abortOn && cn.watchDone == d {
				cn.abortHit = true
				_ = cn.nc.SetReadDeadline(time.Unix(1, 0))
			}
			cn.abortMu.Unlock()
		})
	}
	cn.abortOn = true
	cn.abortMu.Unlock()
}

// disarm undoes arm; the read deadline is cleared only if ctx's end moved
// it (a deadline update costs a runtime timer operation).
func (cn *conn) disarm() {
	cn.abortMu.Lock()
	cn.abortOn = false
	hit := cn.abortHit
	cn.abortHit = false
	cn.abortMu.Unlock()
	if hit {
		_ = cn.nc.SetReadDeadline(time.Time{})
	}
}

// lead reads responses until cl is done. It returns ctx's error, with the
// stream intact, if ctx ends while no response has begun to arrive; a
// broken stream fails the connection (and so cl) and returns nil.
func (cn *conn) lead(ctx context.Context, cl *call) error {
	watched := ctx.Done() != nil
	for {
		if cl.fin.Load() {
			return nil
		}
		if watched {
			cn.arm(ctx)
			// A context that ended before arm (its AfterFunc may
			// have run already) would not interrupt the read.
			if ctx.Err() != nil {
				cn.disarm()
				if cl.fin.Load() {
					return nil
				}
				return ctx.Err()
			}
		}
		// Only a wait for a small answer polls: a large one takes
		// longer to move than the wake-up polling saves, and the
		// polling CPU may be the one the sender needs.
		cn.raw.PollNext(cl.op != wire.OpRead || len(cl.dst) <= pollMaxRead)
		// Peek consumes nothing: a deadline hit here leaves the
		// stream as it was.
		hdr, err := cn.br.Peek(wire.ResponseLen)
		if watched {
			// A response has begun (or the read failed): read all
			// of it whatever ctx does.
			cn.disarm()
		}
		if err != nil {
			var ne net.Error
			if ctx.Err() != nil && errors.As(err, &ne) && ne.Timeout() {
				return ctx.Err()
			}
			cn.fail(fmt.Errorf("%w: %s: %w", ErrConnection, cn.cfg.Addr, err))
			return nil
		}
		r, err := wire.ParseResponse(hdr)
		if err == nil {
			_, _ = cn.br.Discard(wire.ResponseLen)
			err = cn.dispatch(r)
		}
		if err != nil {
			cn.fail(fmt.Errorf("%w: %s: %w", ErrConnection, cn.cfg.Addr, err))
			return nil
		}
	}
}

// complete hands cl to its waiter.
func complete(cl *call) {
	cl.fin.Store(true)
	cl.done <- struct{}{}
}

// fail ends the connection: every call in flight fails with err.
func (cn *conn) fail(err error) {
	cn.mu.Lock()
	if cn.err == nil {
		cn.err = err
	}
	calls := cn.calls
	cn.calls = map[uint64]*call{}
	cn.mu.Unlock()
	cn.nc.Close()
	cn.abortMu.Lock()
	if cn.watchStop != nil {
		cn.watchStop()
		cn.watchStop, cn.watchDone = nil, nil
	}
	cn.abortMu.Unlock()
	for _, cl := range calls {
		cl.err = err
		complete(cl)
		<-cn.window
	}
}

// dispatch reads the body of response r into its call and completes it.
// A returned error is a broken stream.
func (cn *conn) dispatch(r wire.Response) error {
	cn.mu.Lock()
	cl := cn.calls[r.ID]
	if cl != nil {
		delete(cn.calls, r.ID)
		cl.claimed = true
	}
	cn.mu.Unlock()
	// Bound the wait for a body that is still on its way (the caller
	// waits for a claimed call even once its context ends).
	slow := int(r.Body) > cn.br.Buffered()
	if slow {
		_ = cn.nc.SetReadDeadline(time.Now().Add(cn.cfg.IOTimeout))
	}
	var err error
	if cl == nil {
		_, err = cn.br.Discard(int(r.Body)) // abandoned by its caller
	} else {
		cl.resp = r
		err = cn.fill(cl, r)
	}
	if slow {
		_ = cn.nc.SetReadDeadline(time.Time{})
	}
	if cl != nil {
		if err != nil {
			cl.err = fmt.Errorf("%w: %s: %w", ErrConnection, cn.cfg.Addr, err)
		}
		complete(cl)
		<-cn.window
	}
	return err
}

// fill reads r's body into cl. A returned error is a broken stream; the
// operation's own outcome goes to cl.err.
func (cn *conn) fill(cl *call, r wire.Response) error {
	if r.Op != cl.op {
		return fmt.Errorf("response %s to a %s request: %w", r.Op, cl.op, rdma.ErrProtocol)
	}
	if r.Status != wire.StatusOK {
		cl.err = r.Status.Err()
		return nil
	}
	switch cl.op {
	case wire.OpRead:
		if int(r.Body) != len(cl.dst) {
			return fmt.Errorf("READ answered %d bytes for %d: %w", r.Body, len(cl.dst), rdma.ErrProtocol)
		}
		_, err := io.ReadFull(cn.br, cl.dst)
		return err
	case wire.OpBatch:
		return cn.fillBatch(cl.batch, int(r.Body))
	}
	if r.Body > 0 {
		cl.body = make([]byte, r.Body)
		_, err := io.ReadFull(cn.br, cl.body)
		return err
	}
	return nil
}

func (cn *conn) fillBatch(ops []Op, left int) error {
	var rb [wire.ResultLen]byte
	for i := range ops {
		op := &ops[i]
		if left < wire.ResultLen {
			return fmt.Errorf("BATCH answer ends after %d of %d results: %w", i, len(ops), rdma.ErrProtocol)
		}
		if _, err := io.ReadFull(cn.br, rb[:]); err != nil {
			return err
		}
		left -= wire.ResultLen
		res, err := wire.ParseResult(rb[:])
		if err != nil {
			return err
		}
		op.Err, op.Result = res.Status.Err(), res.Value
		if res.Length == 0 {
			continue
		}
		if op.Kind != OpRead || int(res.Length) != len(op.Buf) || int(res.Length) > left {
			return fmt.Errorf("BATCH result %d carries %d bytes: %w", i, res.Length, rdma.ErrProtocol)
		}
		if _, err := io.ReadFull(cn.br, op.Buf); err != nil {
			return err
		}
		left -= int(res.Length)
	}
	if left != 0 {
		return fmt.Errorf("BATCH answer has %d bytes too many: %w", left, rdma.ErrProtocol)
	}
	return nil
}
