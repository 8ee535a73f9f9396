package board

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"cxlpool/fabric/mctp"
)

// Serve runs an MCTP endpoint at Config.EID on link that answers PLDM
// requests with Handle and sends the board's events through itself, and
// polls the model every PollInterval. It blocks until ctx ends or the link
// closes; both are a normal end (nil).
func (b *Board) Serve(ctx context.Context, link mctp.PacketLink) error {
	ep := mctp.NewEndpoint(link, mctp.Config{
		EID:          b.cfg.EID,
		MTU:          b.cfg.MTU,
		Logger:       b.log,
		MessageTypes: []mctp.MsgType{mctp.MsgTypePLDM},
	}, b.Handle)
	b.SetRequester(ep)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { b.Run(ctx) })
	err := ep.Run(ctx)
	cancel()
	wg.Wait()
	b.mu.Lock()
	if b.req == ep {
		b.req = nil
	}
	b.mu.Unlock()
	if err == nil || ctx.Err() != nil || errors.Is(err, io.EOF) || errors.Is(err, mctp.ErrClosed) {
		return nil
	}
	return fmt.Errorf("board: serve: %w", err)
}

// Attach shares link between the board and another endpoint: packets
// addressed to the board's EID go to the board, which Serve runs on them
// in a goroutine until ctx ends or link fails; every other packet (the
// DCD's EID, EID 0, broadcast) comes out of the returned link, which the
// caller serves as before, and whose reader routes the board's packets
// as it reads (no goroutine of its own between the link and the box: each
// hand-off cost a goroutine wake, on a two-core box tens of microseconds
// of every command). Writes from both sides go straight to link,
// which must accept concurrent WritePackets (serial.Link and mctp.Pipe
// do); MCTP receivers reassemble per source EID, so messages of the two
// endpoints may interleave. Closing the returned link closes link.
//
// With it the virtual box serves the board on every device link by
// wrapping the link at the top of its Serve:
//
//	link = b.board.Attach(ctx, link)
func (b *Board) Attach(ctx context.Context, link mctp.PacketLink) mctp.PacketLink {
	d := &demux{under: link, eid: b.cfg.EID, done: make(chan struct{})}
	d.board = d.newPort(false)
	d.rest = d.newPort(true)
	go func() { _ = b.Serve(ctx, d.board) }()
	return d.rest
}

// demux splits one PacketLink by destination EID into two.
type demux struct {
	under       mctp.PacketLink
	eid         mctp.EID
	board, rest *port

	once sync.Once
	done chan struct{} // closed when the underlying link is finished
	err  error         // why, set before done closes
}

// port is one side of a demux.
type port struct {
	d      *demux
	owner  bool // closing it closes the underlying link
	in     chan []byte
	closed chan struct{}
	once   sync.Once
}

// portDepth is how many packets a port buffers before the reader waits.
const portDepth = 32

func (d *demux) newPort(owner bool) *port {
	return &port{d: d, owner: owner, in: make(chan []byte, portDepth), closed: make(chan struct{})}
}

// readRest reads the underlying link for the rest side, passing the
// board's packets to its port on the way, until a packet for the rest
// comes or the link fails. Only the rest's reader reads the link, so the
// board hears its packets while the rest side is being read, which the
// box's endpoint does all the time it serves.
func (d *demux) readRest() ([]byte, error) {
	for {
		select {
		case <-d.rest.closed:
			return nil, io.EOF
		default:
		}
		pkt, err := d.under.ReadPacket()
		if err != nil {
			d.finish(err)
			return nil, err
		}
		if h, herr := mctp.ParseHeader(pkt); herr != nil || h.Dst != d.eid {
			return pkt, nil
		}
		select {
		case d.board.in <- pkt:
		case <-d.board.closed: // nobody reads the board's side any more
		}
	}
}

func (d *demux) finish(err error) {
	d.once.Do(func() {
		d.err = err
		close(d.done)
	})
}

func (p *port) ReadPacket() ([]byte, error) {
	if p == p.d.rest {
		return p.d.readRest()
	}
	select {
	case pkt := <-p.in:
		return pkt, nil
	case <-p.closed:
		return nil, io.EOF
	case <-p.d.done:
		select {
		case pkt := <-p.in:
			return pkt, nil
		default:
			return nil, p.d.err
		}
	}
}

func (p *port) WritePacket(pkt []byte) error {
	select {
	case <-p.closed:
		return fmt.Errorf("board: link: %w", mctp.ErrClosed)
	default:
	}
	return p.d.under.WritePacket(pkt)
}

// WritePackets sends a message's packets in one write when the shared link
// can (mctp.PacketsWriter).
func (p *port) WritePackets(pkts [][]byte) error {
	select {
	case <-p.closed:
		return fmt.Errorf("board: link: %w", mctp.ErrClosed)
	default:
	}
	if pw, ok := p.d.under.(mctp.PacketsWriter); ok {
		return pw.WritePackets(pkts)
	}
	for _, pkt := range pkts {
		if err := p.d.under.WritePacket(pkt); err != nil {
			return err
		}
	}
	return nil
}

func (p *port) Close() error {
	p.once.Do(func() { close(p.closed) })
	if p.owner {
		err := p.d.under.Close()
		p.d.finish(io.EOF)
		return err
	}
	return nil
}
