// Package rawio moves the small reads and writes of the rdma TCP transport
// (requests, responses, and the buffered reads behind them) with raw
// system calls, bypassing the Go runtime's system call entry and exit.
//
// Why: a socket's fd is non-blocking, so a read or write of a few bytes
// returns at once (data, or EAGAIN and a wait in the poller, as
// net.Conn does). The runtime's entry path meanwhile wakes the sysmon
// thread whenever every P was idle, which is the normal state of a
// request/response exchange between two processes: a futex wake, so a
// thread switch, on the critical path of every small request, plus a
// P hand-off when the call happens to take longer than sysmon's tick.
// Measured from outside (bench/outside.sh), that is a few microseconds of
// a 64-byte READ's ~30.
//
// A read may also poll (SetPoll): when nothing has arrived it asks the
// socket again for a while, yielding the CPU between tries, before it
// sleeps in the poller. Sleeping costs the wake-up of an idle CPU when the
// answer comes, which on a virtual machine is the largest part of a small
// request's round trip (measured on this 2-core VM: ~64 µs for a 64-byte
// READ whose client and server run on different CPUs, ~25 µs when the
// client polls); an RDMA client polls its completion queue for the same
// reason. Polling does not always pay: with the peer in the same process,
// or on the same CPU, its thread may need the very CPU that polls (in
// one process: 55 µs against 10 µs asleep), so each Conn measures its
// waits both ways and polls only while that is faster (choose.go). Only a
// client waiting for an answer it expects soon should poll: a server
// polling for its next request would spend the box's CPU on idle clients.
//
// Only small transfers take the raw path (at most Small bytes): a large
// one may copy for long, or fault in pages of mapped device memory, and
// there the runtime's accounting (a P handed off while the call lasts)
// is worth its cost. Deadlines and Close work as on the net.Conn, because
// every raw call runs inside the connection's syscall.RawConn.
package rawio

import (
	"net"
	"syscall"
	"time"
)

// Small is the largest transfer that takes the raw path.
const Small = 64 << 10

// Conn reads and writes nc, with raw system calls where it can (a TCP or
// Unix socket on Linux) and through nc otherwise. One goroutine may read
// while another writes; reads must not overlap each other, nor writes.
type Conn struct {
	nc net.Conn
	rc syscall.RawConn // nil: no raw path

	// The calls' arguments and results live here, and the functions
	// RawConn runs are bound once, so that a call makes no allocation
	// (a closure over locals escapes through the RawConn interface).
	rd, wr   op
	readFn   func(fd uintptr) bool
	tryFn    func(fd uintptr) bool
	writeFn  func(fd uintptr) bool
	writevFn func(fd uintptr) bool
	// iov is writev's vector.
	iov []syscall.Iovec
	// poll is how long a read keeps asking before it sleeps (SetPoll);
	// choose says whether a read polls.
	poll   time.Duration
	noPoll bool // PollNext(false)
	choose chooser
}

// op is one raw call's buffer and outcome.
type op struct {
	p     []byte
	n     int
	errno syscall.Errno
	// A read that had to wait: since when, and which way (chooser).
	waited bool
	way    int
	start  time.Time
}

// New returns a Conn over nc.
func New(nc net.Conn) *Conn {
	c := &Conn{nc: nc}
	if supported {
		if sc, ok := nc.(syscall.Conn); ok {
			if rc, err := sc.SyscallConn(); err == nil {
				c.rc = rc
				c.readFn, c.tryFn, c.writeFn, c.writevFn = c.rawRead, c.rawTry, c.rawWrite, c.rawWritev
			}
		}
	}
	return c
}

// SetPoll makes a raw read that finds nothing to read ask again for up
// to d, yielding the CPU between tries, before it sleeps in the poller,
// while polling has made its waits shorter than sleeping did; d <= 0
// (the default) sleeps at once; d is at most MaxPoll, which bounds the
// CPU one wait may spend. Deadlines and Close end a poll as they end a
// wait. Set it before the first Read; it applies only where the raw path
// does (see Small).
func (c *Conn) SetPoll(d time.Duration) { c.poll = min(d, MaxPoll) }

// PollNext says whether the next read that has to wait may poll (set by
// SetPoll), or sleeps: a reader that knows it waits for a large answer
// sleeps, because moving it takes longer than a wake-up. It holds until
// changed.
func (c *Conn) PollNext(ok bool) { c.noPoll = !ok }

// MaxPoll bounds SetPoll.
const MaxPoll = time.Millisecond

// Read reads into p like nc.Read.
func (c *Conn) Read(p []byte) (int, error) {
	if c.rc == nil || len(p) == 0 || len(p) > Small {
		return c.nc.Read(p)
	}
	return c.read(p)
}

// Write writes all of p like nc.Write.
func (c *Conn) Write(p []byte) (int, error) {
	if c.rc == nil || len(p) > Small {
		return c.nc.Write(p)
	}
	return c.write(p)
}

// WriteBuffers writes all of bufs, like net.Buffers' WriteTo (one writev
// while the socket takes everything). bufs' slices are left as they were.
func (c *Conn) WriteBuffers(bufs [][]byte) (int64, error) {
	total := 0
	for _, b := range bufs {
		total += len(b)
	}
	switch {
	case len(bufs) == 1 && total <= Small:
		n, err := c.Write(bufs[0])
		return int64(n), err
	case c.rc == nil || total > Small || len(bufs) > maxIovecs:
		nb := net.Buffers(bufs)
		return nb.WriteTo(c.nc)
	}
	return c.writev(bufs)
}

// maxIovecs is the most vectors one writev takes (Linux's UIO_MAXIOV).
const maxIovecs = 1024
