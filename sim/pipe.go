package sim

import (
	"io"
	"sync"
)

// Pipe returns the two ends of an in-memory, buffered, full-duplex byte
// stream, for a daemon that runs the virtual box in its own process: the
// box serves one end (ServeConn) and the Fabric Manager speaks DSP0253
// over the other, the same bytes as over a socket or a serial line.
//
// It is a socketpair without the kernel: a write appends to the peer's
// buffer and wakes its reader directly, where a socket costs a write and
// a read system call and a pass through the network poller for every
// message (each command and its answer several of them), which on a
// two-core box was a tenth of a grant's CPU and delayed every hand-off
// while both cores were busy. Like a socket, writes never wait for the
// reader unless its buffer holds pipeBuffer bytes (a reader that stopped
// reading holds the writer there, not memory without bound); each Write
// is appended whole, so concurrent writers never interleave within one;
// closing either end ends both directions: the peer reads what was
// written before the close and then io.EOF, and writes io.ErrClosedPipe.
func Pipe() (io.ReadWriteCloser, io.ReadWriteCloser) {
	ab, ba := newHalfPipe(), newHalfPipe()
	return &pipeEnd{in: ba, out: ab}, &pipeEnd{in: ab, out: ba}
}

// pipeBuffer bounds what one direction holds unread before writers wait.
const pipeBuffer = 1 << 20

// pipeEnd is one end: it reads in and writes out.
type pipeEnd struct {
	in, out *halfPipe
}

func (e *pipeEnd) Read(p []byte) (int, error)  { return e.in.read(p) }
func (e *pipeEnd) Write(p []byte) (int, error) { return e.out.write(p) }

func (e *pipeEnd) Close() error {
	e.in.close()
	e.out.close()
	return nil
}

// halfPipe is one direction of a Pipe: any number of writers, one reader
// at a time (a second one waits its turn).
type halfPipe struct {
	rmu    sync.Mutex // one reader at a time
	mu     sync.Mutex
	buf    []byte
	closed bool
	// readable and writable hold a token when the reader (writers) may
	// have something new to look at; each waiter checks again under mu.
	readable, writable chan struct{}
}

func newHalfPipe() *halfPipe {
	return &halfPipe{readable: make(chan struct{}, 1), writable: make(chan struct{}, 1)}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (h *halfPipe) read(p []byte) (int, error) {
	h.rmu.Lock()
	defer h.rmu.Unlock()
	for {
		h.mu.Lock()
		if len(h.buf) > 0 {
			n := copy(p, h.buf)
			if n == len(h.buf) {
				h.buf = h.buf[:0] // keep the array for the next writes
			} else {
				h.buf = h.buf[n:]
			}
			h.mu.Unlock()
			signal(h.writable)
			return n, nil
		}
		if h.closed {
			h.mu.Unlock()
			return 0, io.EOF
		}
		h.mu.Unlock()
		if len(p) == 0 {
			return 0, nil
		}
		<-h.readable
	}
}

func (h *halfPipe) write(p []byte) (int, error) {
	for {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			signal(h.writable) // the next waiting writer finds it closed too
			return 0, io.ErrClosedPipe
		}
		if len(h.buf) < pipeBuffer {
			h.buf = append(h.buf, p...)
			h.mu.Unlock()
			signal(h.readable)
			// Another writer may be waiting for room that is still left.
			signal(h.writable)
			return len(p), nil
		}
		h.mu.Unlock()
		<-h.writable
	}
}

func (h *halfPipe) close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	// Waiters check closed when woken; a writer that finds it passes the
	// token on to the next.
	signal(h.readable)
	signal(h.writable)
}
