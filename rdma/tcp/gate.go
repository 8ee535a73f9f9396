package tcp

import (
	"fmt"
	"net"
	"sync"

	"cxlpool/rdma"
)

// gate admits connections. Anyone who can reach the port can open
// connections without a token, so those (pending: no session opened yet)
// and the authenticated ones are counted apart:
//
//   - Pending connections have a budget of their own, in total and per
//     source. A new connection is always taken; when a budget is full the
//     oldest pending connection of its source (per-source bound) or of the
//     source holding the most pending connections (total bound) is closed.
//     Refusing the newest instead would let whoever holds the budget keep
//     everyone out; closing the oldest means an idle flood only ever
//     delays a real client by its own handshake, and evicting from the
//     biggest source means a flood from a few addresses cannot close
//     another address's handshake at all. Each pending connection is also
//     closed after HandshakeTimeout, so the budget turns over by itself.
//   - Authenticated connections count against MaxConns only. Pending ones
//     never take from it, so a client with a valid token is refused only
//     when MaxConns other clients with valid tokens are connected.
type gate struct {
	mu        sync.Mutex
	max       int // pending connections in total
	perSource int // pending connections per source
	maxAuthed int

	pending int
	sources map[string][]*conn // pending connections per source, oldest first
	authed  int
	evicted uint64
}

// gateState is where a connection stands with the gate.
type gateState uint8

const (
	gateNone    gateState = iota // not admitted, or gone
	gatePending                  // admitted, no session yet
	gateAuthed                   // counted against MaxConns
	gateEvicted                  // closed to make room; not counted
)

// errEvicted ends a pending connection the gate closed to make room.
var errEvicted = fmt.Errorf("tcp: closed to make room for newer connections: %w", rdma.ErrBusy)

func (g *gate) init(max, perSource, maxAuthed int) {
	g.max, g.perSource, g.maxAuthed = max, perSource, maxAuthed
	g.sources = map[string][]*conn{}
}

// admit counts c as pending and returns the connection the caller must
// close to make room for it, if any.
func (g *gate) admit(c *conn) (evict *conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case len(g.sources[c.src]) >= g.perSource:
		evict = g.sources[c.src][0]
	case g.pending >= g.max:
		var most []*conn
		for _, cs := range g.sources {
			if len(cs) > len(most) {
				most = cs
			}
		}
		evict = most[0]
	}
	if evict != nil {
		g.dropLocked(evict)
		evict.gated = gateEvicted
		g.evicted++
	}
	c.gated = gatePending
	g.sources[c.src] = append(g.sources[c.src], c)
	g.pending++
	return evict
}

// promote moves a pending connection to the authenticated ones.
func (g *gate) promote(c *conn) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case c.gated != gatePending:
		return errEvicted
	case g.authed >= g.maxAuthed:
		return fmt.Errorf("tcp: %d connections with sessions already: %w", g.authed, rdma.ErrBusy)
	}
	g.dropLocked(c)
	c.gated = gateAuthed
	g.authed++
	return nil
}

// leave forgets a connection that ended.
func (g *gate) leave(c *conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch c.gated {
	case gatePending:
		g.dropLocked(c)
	case gateAuthed:
		g.authed--
	}
	c.gated = gateNone
}

// dropLocked removes a pending connection from the pending budget.
func (g *gate) dropLocked(c *conn) {
	cs := g.sources[c.src]
	for i, x := range cs {
		if x == c {
			cs = append(cs[:i], cs[i+1:]...)
			g.pending--
			break
		}
	}
	if len(cs) == 0 {
		delete(g.sources, c.src)
	} else {
		g.sources[c.src] = cs
	}
}

// Stats is a snapshot of the server's admission counters.
type Stats struct {
	Pending       int    // connections without a session yet
	Authenticated int    // connections that opened a session
	Evicted       uint64 // pending connections closed to make room, ever
}

// Stats returns the admission counters.
func (s *Server) Stats() Stats {
	g := &s.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	return Stats{Pending: g.pending, Authenticated: g.authed, Evicted: g.evicted}
}

// sourceKey names the source a connection counts against: its IPv4
// address, or the /64 of an IPv6 one (one host's usual allocation, so a
// host cannot multiply its budget by cycling addresses). Other addresses
// (pipes in tests, Unix sockets) are one source each by their text.
func sourceKey(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		if a == nil {
			return ""
		}
		return a.Network() + ":" + a.String()
	}
	if ip4 := ta.IP.To4(); ip4 != nil {
		return ip4.String()
	}
	return ta.IP.Mask(net.CIDRMask(64, 128)).String() + "/64"
}
