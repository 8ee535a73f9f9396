package kv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"cxlpool/dcd"
	"cxlpool/kv/wire"
)

// ServerConfig holds a Server's dependencies and limits (PROTOCOL.md,
// Limits).
type ServerConfig struct {
	Index  *Index
	Logger *slog.Logger
	// MaxConns bounds all connections (1024); PerSource those of one
	// source: an IP address, or a uid on a unix socket (64).
	MaxConns, PerSource int
	// HelloTimeout bounds the time to HELLO (5 s); FrameTimeout the time
	// to finish a frame once its header is read, and to write an answer
	// (10 s).
	HelloTimeout, FrameTimeout time.Duration
	MaxBody                    int // 1 MiB
	MaxBatch                   int // 4096
}

// Server serves the KV index protocol on any number of listeners.
type Server struct {
	cfg ServerConfig
	log *slog.Logger

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	sources map[string]int
	lns     map[net.Listener]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// NewServer returns a Server over cfg.Index.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Index == nil {
		return nil, errors.New("kv: server needs an index")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 1024
	}
	if cfg.PerSource <= 0 {
		cfg.PerSource = 64
	}
	if cfg.HelloTimeout <= 0 {
		cfg.HelloTimeout = 5 * time.Second
	}
	if cfg.FrameTimeout <= 0 {
		cfg.FrameTimeout = 10 * time.Second
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = wire.DefaultMaxBody
	}
	if cfg.MaxBatch <= 0 || cfg.MaxBatch > 0xffff {
		cfg.MaxBatch = wire.DefaultMaxBatch
	}
	return &Server{cfg: cfg, log: cfg.Logger, conns: map[net.Conn]struct{}{}, sources: map[string]int{}, lns: map[net.Listener]struct{}{}}, nil
}

// Serve accepts connections on l until it is closed or the Server is.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return net.ErrClosed
	}
	s.lns[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.lns, l)
		s.mu.Unlock()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return net.ErrClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		src := source(c)
		s.mu.Lock()
		refuse := ""
		switch {
		case s.closed:
			refuse = "kv: server closing"
		case len(s.conns) >= s.cfg.MaxConns:
			refuse = fmt.Sprintf("kv: %d connections, the server's limit", s.cfg.MaxConns)
		case s.sources[src] >= s.cfg.PerSource:
			refuse = fmt.Sprintf("kv: %d connections from %s, the per-source limit", s.cfg.PerSource, src)
		default:
			s.conns[c] = struct{}{}
			s.sources[src]++
			s.wg.Add(1)
		}
		s.mu.Unlock()
		if refuse != "" {
			s.log.Warn("kv: connection refused", "source", src, "why", refuse)
			go s.refuse(c, refuse)
			continue
		}
		go s.serveConn(c, src)
	}
}

// refuse answers BUSY to whatever the client sends first, and closes.
func (s *Server) refuse(c net.Conn, why string) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	// Echo the first request's id, so the client matches the answer.
	var hb [wire.HeaderSize]byte
	var id uint32
	if _, err := io.ReadFull(c, hb[:]); err == nil {
		if h, err := wire.ParseHeader(hb[:], s.cfg.MaxBody); err == nil {
			id = h.ID
		}
	}
	b, _ := wire.AppendResponse(nil, &wire.Response{Op: wire.OpHello, ID: id, Status: wire.Busy, Message: why})
	_, _ = c.Write(b)
}

// source is who a connection counts against: its IP address, or its
// peer's uid on a unix socket.
func source(c net.Conn) string {
	if uc, ok := c.(*net.UnixConn); ok {
		if raw, err := uc.SyscallConn(); err == nil {
			var cred *unix.Ucred
			_ = raw.Control(func(fd uintptr) { cred, _ = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
			if cred != nil {
				return "uid:" + strconv.Itoa(int(cred.Uid))
			}
		}
		return "unix"
	}
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return c.RemoteAddr().String()
}

// Close stops the listeners and closes every connection (their sessions
// end).
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for l := range s.lns {
		l.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

func (s *Server) drop(c net.Conn, src string) {
	c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	if s.sources[src]--; s.sources[src] <= 0 {
		delete(s.sources, src)
	}
	s.mu.Unlock()
	s.wg.Done()
}

// status maps an error to its wire status.
func status(err error) wire.Status {
	switch {
	case err == nil:
		return wire.OK
	case errors.Is(err, ErrNotFound):
		return wire.NotFound
	case errors.Is(err, ErrDenied):
		return wire.Denied
	case errors.Is(err, ErrInvalid):
		return wire.Invalid
	case errors.Is(err, ErrNoSpace):
		return wire.NoSpace
	case errors.Is(err, ErrExists):
		return wire.Exists
	case errors.Is(err, ErrStale):
		return wire.Stale
	case errors.Is(err, ErrExpired):
		return wire.Expired
	case errors.Is(err, ErrBusy), errors.Is(err, ErrPinned):
		return wire.Busy
	case errors.Is(err, ErrUnavailable), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return wire.Unavailable
	}
	return wire.Internal
}

func toLoc(b Block) wire.Loc {
	return wire.Loc{Block: b.ID, Gen: b.Gen, Tag: b.Tag, Offset: b.Offset, Length: b.Length}
}

func toChunks(cs []ChunkInfo) []wire.Chunk {
	out := make([]wire.Chunk, len(cs))
	for i, c := range cs {
		out[i] = wire.Chunk{ID: uint64(c.ID), Tag: c.Tag, Size: c.Size}
	}
	return out
}

// conn is one connection's state.
type conn struct {
	s    *Server
	nc   net.Conn
	r    *bufio.Reader
	w    *bufio.Writer
	out  []byte
	buf  []byte
	sess *Session
	ctx  context.Context
}

func (c *conn) send(resp *wire.Response) error {
	var err error
	c.out, err = wire.AppendResponse(c.out[:0], resp)
	if err != nil {
		resp = &wire.Response{Op: resp.Op, ID: resp.ID, Status: wire.Internal, Message: err.Error()}
		c.out, _ = wire.AppendResponse(c.out[:0], resp)
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.FrameTimeout))
	if _, err := c.w.Write(c.out); err != nil {
		return err
	}
	if c.r.Buffered() == 0 {
		return c.w.Flush()
	}
	return nil
}

func (c *conn) refuse(h wire.Header, st wire.Status, msg string) error {
	return c.send(&wire.Response{Op: h.Op &^ 0x80, ID: h.ID, Status: st, Message: msg})
}

// read reads one frame: the header under deadline, the body under the
// frame timeout.
func (c *conn) read(deadline time.Duration) (wire.Header, []byte, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(deadline))
	hb, err := c.r.Peek(wire.HeaderSize)
	if err != nil {
		return wire.Header{}, nil, err
	}
	h, err := wire.ParseHeader(hb, c.s.cfg.MaxBody)
	if err != nil {
		return h, nil, err
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(c.s.cfg.FrameTimeout))
	var body []byte
	h, body, c.buf, err = wire.ReadFrame(c.r, c.buf, c.s.cfg.MaxBody)
	return h, body, err
}

func (s *Server) serveConn(nc net.Conn, src string) {
	defer s.drop(nc, src)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &conn{s: s, nc: nc, r: bufio.NewReaderSize(nc, 64<<10), w: bufio.NewWriterSize(nc, 64<<10), ctx: ctx}
	defer func() {
		if c.sess != nil {
			c.sess.Close()
		}
	}()
	deadline := s.cfg.HelloTimeout
	for {
		h, body, err := c.read(deadline)
		if err != nil {
			switch {
			case errors.Is(err, wire.ErrTooLarge):
				_ = c.refuse(h, wire.TooLarge, err.Error())
				_ = c.w.Flush()
			case errors.Is(err, wire.ErrFrame):
				_ = c.refuse(h, wire.BadFrame, err.Error())
				_ = c.w.Flush()
			case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), errors.Is(err, os.ErrDeadlineExceeded):
			default:
				s.log.Debug("kv: connection ended", "source", src, "err", err)
			}
			return
		}
		req, err := wire.DecodeRequest(h, body)
		if err != nil {
			st := wire.Invalid
			if errors.Is(err, wire.ErrFrame) {
				st = wire.BadFrame
			}
			if c.refuse(h, st, err.Error()) != nil || st == wire.BadFrame || c.sess == nil {
				_ = c.w.Flush()
				return
			}
			continue
		}
		if c.sess == nil {
			if req.Op != wire.OpHello {
				_ = c.refuse(h, wire.Denied, "kv: HELLO must come first")
				_ = c.w.Flush()
				return
			}
			if !c.hello(&req) {
				_ = c.w.Flush()
				return
			}
			deadline = 2 * c.sess.Lease
			continue
		}
		if n := req.Count(); n > s.cfg.MaxBatch {
			if c.refuse(h, wire.TooLarge, fmt.Sprintf("kv: batch of %d items over the limit %d", n, s.cfg.MaxBatch)) != nil {
				return
			}
			continue
		}
		resp := c.handle(&req)
		if err := c.send(resp); err != nil {
			return
		}
		if resp.Status == wire.Expired {
			_ = c.w.Flush()
			return
		}
	}
}

func (c *conn) hello(req *wire.Request) bool {
	ix := c.s.cfg.Index
	sess, err := ix.Open(req.Namespace, dcd.HostID(req.Host), req.Token, time.Duration(req.LeaseMS)*time.Millisecond)
	if err != nil {
		c.s.log.Info("kv: HELLO refused", "namespace", req.Namespace, "host", req.Host, "err", err)
		_ = c.send(&wire.Response{Op: wire.OpHello, ID: req.ID, Status: status(err), Message: "kv: namespace, host or token refused"})
		return false
	}
	c.sess = sess
	resp := &wire.Response{Op: wire.OpHello, ID: req.ID, Session: sess.ID, LeaseMS: uint32(sess.Lease / time.Millisecond),
		MaxBody: uint32(c.s.cfg.MaxBody), MaxBatch: uint16(c.s.cfg.MaxBatch), MaxKey: MaxKey, Chunks: toChunks(sess.Chunks())}
	return c.send(resp) == nil
}

func statuses(errs []error) []wire.Item {
	items := make([]wire.Item, len(errs))
	for i, e := range errs {
		items[i].Status = status(e)
	}
	return items
}

func (c *conn) handle(req *wire.Request) *wire.Response {
	resp := &wire.Response{Op: req.Op, ID: req.ID}
	s := c.sess
	var errs []error
	var err error
	switch req.Op {
	case wire.OpHello:
		err = fmt.Errorf("kv: second HELLO on session %d: %w", s.ID, ErrInvalid)
	case wire.OpPut:
		items := make([]PutItem, len(req.Puts))
		for i, p := range req.Puts {
			items[i] = PutItem{Key: p.Key, Length: p.Length, Seq: Seq{HasParent: p.HasParent, Parent: p.Parent, Tokens: p.Tokens}}
		}
		var res []PutResult
		if res, err = s.Put(c.ctx, items); err == nil {
			resp.Items = make([]wire.Item, len(res))
			for i, r := range res {
				resp.Items[i] = wire.Item{Status: status(r.Err), Loc: toLoc(r.Block)}
			}
		}
	case wire.OpGet:
		var res []GetResult
		if res, err = s.Get(req.Keys, req.Flags&wire.FlagPin != 0); err == nil {
			resp.Items = make([]wire.Item, len(res))
			for i, r := range res {
				resp.Items[i] = wire.Item{Status: status(r.Err), Loc: toLoc(r.Block)}
			}
		}
	case wire.OpCommit:
		errs, err = s.Commit(req.Blocks)
	case wire.OpAbort:
		errs, err = s.Abort(req.Blocks)
	case wire.OpExists:
		errs, err = s.Exists(req.Keys)
	case wire.OpDelete:
		errs, err = s.Delete(req.Keys)
	case wire.OpUnpin:
		errs, err = s.Unpin(req.Blocks)
	case wire.OpCheck:
		items := make([]BlockGen, len(req.Checks))
		for i, ch := range req.Checks {
			items[i] = BlockGen{ID: ch.Block, Gen: ch.Gen}
		}
		errs, err = s.Check(items)
	case wire.OpRenew:
		if err = s.Renew(); err == nil {
			resp.LeaseMS = uint32(s.Lease / time.Millisecond)
		}
	case wire.OpChunks:
		if err = s.Renew(); err == nil {
			resp.Chunks = toChunks(s.Chunks())
		}
	case wire.OpStat:
		if err = s.Renew(); err == nil {
			st, quota := s.Stats()
			resp.Stat = wire.Stat{Blocks: st.Blocks, Used: st.Used, Reserved: st.Reserved, Capacity: st.Capacity, Quota: quota, Evictions: st.Evictions}
		}
	}
	if err != nil {
		resp.Status, resp.Message = status(err), err.Error()
		resp.Items = nil
		return resp
	}
	if errs != nil {
		resp.Items = statuses(errs)
	}
	return resp
}
