package mctp

import (
	"fmt"
	"io"
	"slices"
	"sync"
)

// pipeDepth is how many packets each direction buffers before WritePacket
// blocks; enough for one maximum-size message at the baseline MTU.
const pipeDepth = 32

// Pipe returns two connected in-memory PacketLinks for unit tests and fast
// in-process wiring. Packets are copied on write, so callers may reuse their
// buffers. Closing either end closes both: blocked and later writes fail
// with ErrClosed, and reads return the packets already buffered, then
// io.EOF. There is no framing, so nothing is ever corrupted or dropped; use
// serial framing over a socket pair when wire exactness matters.
func Pipe() (PacketLink, PacketLink) {
	s := &pipeShared{done: make(chan struct{})}
	ab := make(chan []byte, pipeDepth)
	ba := make(chan []byte, pipeDepth)
	return &pipeEnd{shared: s, in: ba, out: ab}, &pipeEnd{shared: s, in: ab, out: ba}
}

type pipeShared struct {
	once sync.Once
	done chan struct{}
}

type pipeEnd struct {
	shared *pipeShared
	in     <-chan []byte
	out    chan<- []byte
}

func (p *pipeEnd) ReadPacket() ([]byte, error) {
	select {
	case b := <-p.in:
		return b, nil
	case <-p.shared.done:
		// Drain what was written before the close.
		select {
		case b := <-p.in:
			return b, nil
		default:
			return nil, io.EOF
		}
	}
}

func (p *pipeEnd) WritePacket(b []byte) error {
	select {
	case <-p.shared.done:
		return fmt.Errorf("mctp: pipe write: %w", ErrClosed)
	default:
	}
	select {
	case p.out <- slices.Clone(b):
		return nil
	case <-p.shared.done:
		return fmt.Errorf("mctp: pipe write: %w", ErrClosed)
	}
}

func (p *pipeEnd) Close() error {
	p.shared.once.Do(func() { close(p.shared.done) })
	return nil
}
