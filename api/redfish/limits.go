package redfish

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
)

// Transport bounds what a client can hold of the HTTP(S) listener: how
// long it may take to send a request and to read a response, and how many
// connections it may keep open before it has authenticated. Zero values
// mean the defaults in the comments.
//
// Connections are counted from accept to close, and each one counts as
// unauthenticated until a request on it presents valid credentials (a
// session token, Basic, a stream ticket or a successful login). Only
// unauthenticated connections are capped per source and in total, so
// anyone who can reach the port can hold at most MaxUnauthConns
// connections, and memory with them; connections that authenticated are
// never closed for them. When the total is reached a newcomer is still let
// in: the oldest unauthenticated connection of the source that holds the
// most is closed for it, so a source with fewer connections than the
// heaviest always gets in and one source (or a few) cannot lock the
// others out.
type Transport struct {
	// ReadHeaderTimeout bounds the TLS handshake and the request line
	// and headers (10 s).
	ReadHeaderTimeout time.Duration
	// BodyTimeout bounds the reading of a request body, from the end of
	// its headers (30 s: 1 MiB at 35 KiB/s). The firmware push instead
	// must bring UploadMinRate bytes per second in every BodyTimeout.
	BodyTimeout time.Duration
	// UploadMinRate is the slowest firmware push accepted, in bytes per
	// second averaged over each BodyTimeout (16 KiB/s: a 512 MiB image
	// in nine hours).
	UploadMinRate int64
	// WriteTimeout is how long one write of a response may block on a
	// client that does not read (30 s). It restarts with every write,
	// so event streams and large downloads live as long as they move.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection with no request (2 min).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers (32 KiB).
	MaxHeaderBytes int
	// MaxConns bounds all connections (4096); past it new ones are
	// closed at once.
	MaxConns int
	// MaxUnauthConns bounds the connections that have not authenticated
	// (256).
	MaxUnauthConns int
	// MaxUnauthConnsPerSource bounds them per source address (32); an
	// IPv6 source is its /64.
	MaxUnauthConnsPerSource int
	// CertCheckInterval is how often the self-signed certificate is
	// checked for renewal (24 h; also at every start).
	CertCheckInterval time.Duration
}

func (t *Transport) Defaults() {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&t.ReadHeaderTimeout, 10*time.Second)
	def(&t.BodyTimeout, 30*time.Second)
	def(&t.WriteTimeout, 30*time.Second)
	def(&t.IdleTimeout, 2*time.Minute)
	def(&t.CertCheckInterval, 24*time.Hour)
	if t.UploadMinRate <= 0 {
		t.UploadMinRate = 16 << 10
	}
	if t.MaxHeaderBytes <= 0 {
		t.MaxHeaderBytes = 32 << 10
	}
	if t.MaxConns <= 0 {
		t.MaxConns = 4096
	}
	if t.MaxUnauthConns <= 0 {
		t.MaxUnauthConns = 256
	}
	if t.MaxUnauthConnsPerSource <= 0 {
		t.MaxUnauthConnsPerSource = 32
	}
	t.MaxUnauthConns = min(t.MaxUnauthConns, t.MaxConns)
	t.MaxUnauthConnsPerSource = min(t.MaxUnauthConnsPerSource, t.MaxUnauthConns)
}

// hstsValue is the Strict-Transport-Security of every HTTPS response: a
// year, the box's subdomains too (RFC 6797).
const hstsValue = "max-age=31536000; includeSubDomains"

// loginBodyLimit bounds the one body read before authentication, a
// login's; nothing else reads a body before its credentials are checked.
const loginBodyLimit = 16 << 10

// GuardListener holds the connections ln accepts to the transport's caps
// (Transport.MaxConns and the unauthenticated bounds).
func (s *Service) GuardListener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, t: s.conns}
}

// transport is the HTTP handler in front of echo: HSTS, the body's read
// deadline and the response's write deadline. It works with any
// http.Server; the connection caps come with the listener (ServeListener).
func (s *Service) transport(next http.Handler) http.Handler {
	cfg := s.cfg.Transport
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil {
			w.Header().Set("Strict-Transport-Security", hstsValue)
		}
		// The controller is taken here, on net/http's own writer:
		// middleware wraps the writer later (the audit log holds
		// responses back) and those wrappers cannot set deadlines.
		rc := http.NewResponseController(w)
		pw := &progressWriter{ResponseWriter: w, rc: rc, timeout: cfg.WriteTimeout}
		pw.extend()
		if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
			g := &bodyGuard{body: r.Body, rc: rc, window: cfg.BodyTimeout}
			p := strings.TrimRight(r.URL.Path, "/")
			if _, upload := s.uploads[p]; upload && r.Method == http.MethodPost {
				g.quota = int64(cfg.BodyTimeout.Seconds() * float64(cfg.UploadMinRate))
			}
			g.extend()
			r = r.WithContext(context.WithValue(r.Context(), guardKey{}, g))
			r.Body = g
			if r.Method == http.MethodPost && p == SessionsURI {
				r.Body = http.MaxBytesReader(w, r.Body, loginBodyLimit)
			}
		}
		next.ServeHTTP(pw, r)
	})
}

// progressWriter gives each write of a response WriteTimeout to complete:
// a client that stops reading cannot hold the connection (and the
// goroutine behind it) forever, and a response that keeps moving — an
// event stream, a support bundle on a slow link — is never cut.
type progressWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (w *progressWriter) extend() { _ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout)) }

func (w *progressWriter) WriteHeader(code int) {
	w.extend()
	w.ResponseWriter.WriteHeader(code)
}

func (w *progressWriter) Write(b []byte) (int, error) {
	w.extend()
	return w.ResponseWriter.Write(b)
}

// FlushError is what http.ResponseController.Flush calls.
func (w *progressWriter) FlushError() error {
	w.extend()
	return w.rc.Flush()
}

// Unwrap lets http.ResponseController reach net/http's writer (Hijack:
// the telemetry WebSocket sets its own deadlines).
func (w *progressWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// errBodyTimeout is a request body that did not arrive in time.
var errBodyTimeout = errors.New("api: the request body did not arrive in time")

// bodyGuard is a request body under a read deadline: BodyTimeout from the
// end of the headers or, with a quota (the firmware push), BodyTimeout for
// every quota bytes. When the whole body is read the deadline is lifted: net/http
// then reads the connection in the background only to notice a client
// that hangs up, and a deadline there would cancel a long handler.
type bodyGuard struct {
	body   io.ReadCloser
	rc     *http.ResponseController
	window time.Duration
	quota  int64 // bytes due in each window; 0: the whole body in one
	got    int64
	ended  bool // read to its end
	failed bool // stopped before its end
}

// guardKey is the request context key of its *bodyGuard.
type guardKey struct{}

// bodyIncomplete reports whether r's body stopped before its end (a
// timeout, a connection closed or evicted): the request never arrived
// whole.
func bodyIncomplete(r *http.Request) bool {
	g, _ := r.Context().Value(guardKey{}).(*bodyGuard)
	return g != nil && g.failed
}

func (g *bodyGuard) extend() { _ = g.rc.SetReadDeadline(time.Now().Add(g.window)) }

func (g *bodyGuard) Read(p []byte) (int, error) {
	n, err := g.body.Read(p)
	if g.quota > 0 && n > 0 {
		if g.got += int64(n); g.got >= g.quota {
			g.got = 0
			g.extend()
		}
	}
	if err != nil && err != io.EOF {
		g.failed = true
	}
	switch {
	case err == io.EOF && !g.ended:
		g.ended = true
		_ = g.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		// The deadline stays: net/http reads what is left of the
		// body before it answers, and must fail at once too.
		err = fmt.Errorf("%w: %w", errBodyTimeout, err)
	}
	return n, err
}

func (g *bodyGuard) Close() error { return g.body.Close() }

// errRequestTimeout is 408 for a body that came too slowly.
func (s *Service) errRequestTimeout() *Error {
	m := M("Base.OperationTimeout")
	m.Resolution = fmt.Sprintf("The request body must arrive within %s of the headers (a firmware push: %d KiB/s at least); "+
		"nothing was changed. Resubmit the request.", s.cfg.Transport.BodyTimeout, s.cfg.Transport.UploadMinRate>>10)
	return NewError(http.StatusRequestTimeout, m)
}

// setPrincipal records the request's authenticated principal, and that
// its connection is no longer an anonymous one (connTracker).
func SetPrincipal(c echo.Context, p *Principal) {
	c.Set(principalKey, p)
	if tc, ok := c.Request().Context().Value(connKey{}).(*trackedConn); ok {
		tc.t.authenticated(tc)
	}
}

// connKey is the request context key of the request's *trackedConn.
type connKey struct{}

// connContext is http.Server.ConnContext: requests find their tracked
// connection under connKey.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if tc, ok := c.(*trackedConn); ok {
		return context.WithValue(ctx, connKey{}, tc)
	}
	return ctx
}

// connTracker counts the listener's connections and applies Transport's
// caps (see Transport). One tracker serves every listener of a Server.
type connTracker struct {
	cfg Transport
	log *slog.Logger
	now func() time.Time

	mu      sync.Mutex
	total   int
	nUnauth int
	unauth  map[string][]*trackedConn // by source, oldest first
	seq     uint64
	noted   map[string]int // refusals and evictions since the last log line
	lastLog time.Time

	refused *prometheus.CounterVec
	evicted prometheus.Counter
}

func newConnTracker(cfg Transport, log *slog.Logger) *connTracker {
	return &connTracker{
		cfg: cfg, log: log, now: time.Now, unauth: map[string][]*trackedConn{}, noted: map[string]int{},
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cxlpool_http_connections_refused_total",
			Help: "Connections of the Redfish listener closed at accept: per_source (its unauthenticated connections at the cap) or total (all connections at the cap).",
		}, []string{"reason"}),
		evicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cxlpool_http_connections_evicted_total",
			Help: "Unauthenticated connections closed to let a newcomer in: the oldest of the source holding the most.",
		}),
	}
}

// collectors are the tracker's metrics.
func (t *connTracker) collectors() []prometheus.Collector {
	gauge := func(state string, f func() int) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cxlpool_http_connections", Help: "Open connections of the Redfish listener, by whether a request on them authenticated.",
			ConstLabels: prometheus.Labels{"state": state},
		}, func() float64 { return float64(f()) })
	}
	return []prometheus.Collector{
		gauge("authenticated", func() int { a, u := t.counts(); return a - u }),
		gauge("unauthenticated", func() int { _, u := t.counts(); return u }),
		t.refused, t.evicted,
	}
}

// counts returns all connections and the unauthenticated ones.
func (t *connTracker) counts() (total, unauth int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total, t.nUnauth
}

// sourceOf is the address a connection is counted under: its IP, or for
// IPv6 its /64, since one host usually holds a whole /64.
func sourceOf(a net.Addr) string {
	var ip net.IP
	switch x := a.(type) {
	case *net.TCPAddr:
		ip = x.IP
	default:
		h, _, err := net.SplitHostPort(a.String())
		if err != nil {
			return a.String()
		}
		ip = net.ParseIP(h)
		if ip == nil {
			return h
		}
	}
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// admit decides on a new connection: nil when it is refused (the caller
// closes it), else its tracked form. A connection it evicted to make room
// is closed here, outside the lock.
func (t *connTracker) admit(c net.Conn) *trackedConn {
	src := sourceOf(c.RemoteAddr())
	t.mu.Lock()
	var victim *trackedConn
	switch {
	case t.total >= t.cfg.MaxConns:
		t.noteLocked("total")
		t.mu.Unlock()
		return nil
	case len(t.unauth[src]) >= t.cfg.MaxUnauthConnsPerSource:
		// The newcomer gets in and the source's own oldest one goes: a
		// source behind one NAT address (an admin network, QEMU's user
		// network) keeps working while its idle keep-alive connections
		// are dropped, and a flood only ever displaces itself.
		victim = t.unauth[src][0]
		t.unlistLocked(victim)
		t.noteLocked("evicted")
	case t.nUnauth >= t.cfg.MaxUnauthConns:
		victim = t.victimLocked()
		t.unlistLocked(victim)
		t.noteLocked("evicted")
	}
	t.seq++
	tc := &trackedConn{Conn: c, t: t, source: src, seq: t.seq, listed: true}
	t.unauth[src] = append(t.unauth[src], tc)
	t.nUnauth++
	t.total++
	t.mu.Unlock()
	if victim != nil {
		victim.Close()
	}
	return tc
}

// victimLocked is the connection to close for a newcomer at the total
// cap: among the sources holding the most unauthenticated connections,
// the oldest connection.
func (t *connTracker) victimLocked() *trackedConn {
	var v *trackedConn
	most := 0
	for _, cs := range t.unauth {
		switch {
		case len(cs) > most:
			most, v = len(cs), cs[0]
		case len(cs) == most && cs[0].seq < v.seq:
			v = cs[0]
		}
	}
	return v
}

// unlistLocked takes tc out of the unauthenticated connections.
func (t *connTracker) unlistLocked(tc *trackedConn) {
	if !tc.listed {
		return
	}
	tc.listed = false
	t.nUnauth--
	cs := t.unauth[tc.source]
	for i, x := range cs {
		if x == tc {
			cs = append(cs[:i], cs[i+1:]...)
			break
		}
	}
	if len(cs) == 0 {
		delete(t.unauth, tc.source)
	} else {
		t.unauth[tc.source] = cs
	}
}

// authenticated moves tc out of the capped, evictable connections: a
// request on it presented valid credentials.
func (t *connTracker) authenticated(tc *trackedConn) {
	t.mu.Lock()
	if !tc.closed {
		t.unlistLocked(tc)
	}
	t.mu.Unlock()
}

func (t *connTracker) release(tc *trackedConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tc.closed {
		return
	}
	tc.closed = true
	t.unlistLocked(tc)
	t.total--
}

// noteLocked counts a refusal or an eviction; a flood writes one log line
// per 10 s with the counts, not one per connection.
func (t *connTracker) noteLocked(reason string) {
	if reason == "evicted" {
		t.evicted.Inc()
	} else {
		t.refused.WithLabelValues(reason).Inc()
	}
	t.noted[reason]++
	if now := t.now(); now.Sub(t.lastLog) >= 10*time.Second {
		t.lastLog = now
		t.log.Warn("connection caps reached: closing unauthenticated connections",
			"refused_per_source", t.noted["per_source"], "refused_total", t.noted["total"], "evicted", t.noted["evicted"],
			"unauthenticated", t.nUnauth, "connections", t.total,
			"max_unauthenticated", t.cfg.MaxUnauthConns, "max_per_source", t.cfg.MaxUnauthConnsPerSource)
		clear(t.noted)
	}
}

// trackedConn is a connection the tracker counts until it is closed.
type trackedConn struct {
	net.Conn
	t      *connTracker
	source string
	seq    uint64
	listed bool // among the unauthenticated (t.mu)
	closed bool // (t.mu)
}

func (c *trackedConn) Close() error {
	c.t.release(c)
	return c.Conn.Close()
}

// limitListener applies a connTracker at accept.
type limitListener struct {
	net.Listener
	t *connTracker
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if tc := l.t.admit(c); tc != nil {
			return tc, nil
		}
		c.Close()
	}
}
