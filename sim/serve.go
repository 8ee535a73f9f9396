package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"cxlpool/fabric/cci"
	"cxlpool/fabric/mctp"
	"cxlpool/fabric/serial"
)

// maxMessage is the largest MCTP message the box reassembles. It is larger
// than the advertised CCI limit on purpose: an oversized request must be
// answered Invalid Payload Length rather than silently dropped.
const maxMessage = 1 + cci.HeaderLen + 4096

// conn is one MCTP link the box serves.
type conn struct {
	ep *mctp.Endpoint
}

// notifyTarget is where Event Notifications go: the link and EID that sent
// the last Set MCTP Event Interrupt Policy.
type notifyTarget struct {
	c   *conn
	eid mctp.EID
}

// Serve answers CCI requests on one MCTP link as endpoint Config.EID (and
// EID 0), advertising message types 07h and 08h. It blocks until ctx ends,
// the box is closed or the link fails; a closed link is a normal end.
func (b *Box) Serve(ctx context.Context, link mctp.PacketLink) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(b.ctx, cancel)
	defer stop()
	// The board controller answers at its own EID on the same link.
	link = b.board.Attach(ctx, link)
	c := &conn{}
	c.ep = mctp.NewEndpoint(link, mctp.Config{
		EID:          b.cfg.EID,
		MTU:          b.cfg.MTU,
		MaxMessage:   maxMessage,
		Logger:       b.log,
		MessageTypes: []mctp.MsgType{mctp.MsgTypeFMAPI, mctp.MsgTypeCXLCCI},
	}, func(ctx context.Context, src mctp.EID, typ mctp.MsgType, msg []byte) ([]byte, bool) {
		return b.handle(ctx, c, src, typ, msg)
	})
	err := c.ep.Run(ctx)
	_ = c.ep.Close()
	b.mu.Lock()
	if b.notifyTo != nil && b.notifyTo.c == c {
		b.notifyTo = nil
	}
	b.mu.Unlock()
	if ctx.Err() != nil || err == nil || errors.Is(err, mctp.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return fmt.Errorf("sim: serve: %w", err)
}

// ServeConn serves one byte-stream connection framed with DSP0253. It
// closes rw when it returns.
func (b *Box) ServeConn(ctx context.Context, rw io.ReadWriteCloser) error {
	link := serial.NewLink(&corruptor{ReadWriteCloser: rw, f: b.faults}, serial.LinkConfig{Logger: b.log})
	stop := context.AfterFunc(ctx, func() { _ = link.Close() })
	defer stop()
	defer link.Close()
	return b.Serve(ctx, link)
}

// ServeListener accepts connections until ctx ends and serves each one
// concurrently as its own link.
func (b *Box) ServeListener(ctx context.Context, l net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(ctx, func() { _ = l.Close() })
	var wg sync.WaitGroup
	defer func() {
		stop()
		cancel()
		wg.Wait()
	}()
	for {
		nc, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("sim: accept: %w", err)
		}
		b.log.Debug("connection", "remote", nc.RemoteAddr())
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.ServeConn(ctx, nc); err != nil {
				b.log.Debug("connection ended", "remote", nc.RemoteAddr(), "err", err)
			}
		}()
	}
}

// handle is the MCTP message handler of every link.
func (b *Box) handle(ctx context.Context, c *conn, src mctp.EID, typ mctp.MsgType, msg []byte) ([]byte, bool) {
	if len(msg) < cci.HeaderLen {
		return nil, false
	}
	m, perr := cci.ParseMessage(msg)
	// Responses are not requests; a received Event Notification is dropped
	// silently (CXL 3.1 §8.2.9.2.8).
	if m.Category != cci.Request || m.Opcode == cci.OpEventNotification {
		return nil, false
	}
	var out []byte
	rc := cci.InvalidPayloadLength
	if perr == nil {
		out, rc = b.execMCTP(c, src, typ, m)
	}
	b.log.Debug("cci", "src", src, "op", m.Opcode, "tag", m.Tag, "rc", rc)
	resp := response(m, rc, out)
	if b.faults.dropResponse(m.Opcode) {
		return nil, false
	}
	if d := b.faults.responseDelay(); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return nil, false
		case <-t.C:
		}
	}
	return resp, true
}

// notifier sends Event Notifications one at a time (the device sends
// nothing else until the FM acknowledges), coalescing log bits that become
// pending meanwhile.
func (b *Box) notifier(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.notifyKick:
		}
		b.mu.Lock()
		bits, t := b.notifyPending, b.notifyTo
		b.notifyPending = 0
		b.notifyTag++
		tag := b.notifyTag
		b.mu.Unlock()
		if bits != 0 && t != nil {
			b.notify(ctx, t, tag, bits)
		}
	}
}

// notify sends one 0106h and resends it with the same CCI tag every
// NotifyInterval, up to NotifyRetries times, until the FM replies.
func (b *Box) notify(ctx context.Context, t *notifyTarget, tag uint8, bits uint16) {
	payload, _ := (&cci.EventInterruptPolicy{Mask: bits}).MarshalBinary()
	raw, _ := cci.Message{Category: cci.Request, Tag: tag, Opcode: cci.OpEventNotification, Payload: payload}.MarshalBinary()
	for try := 0; try <= b.cfg.NotifyRetries; try++ {
		tctx, cancel := context.WithTimeout(ctx, b.cfg.NotifyInterval)
		resp, err := t.c.ep.Request(tctx, t.eid, mctp.MsgTypeCXLCCI, raw)
		if err == nil {
			cancel()
			if m, perr := cci.ParseMessage(resp); perr != nil || m.Tag != tag || m.Opcode != cci.OpEventNotification {
				b.log.Warn("malformed event notification reply", "err", perr)
			}
			return
		}
		if ctx.Err() != nil || errors.Is(err, mctp.ErrClosed) {
			cancel()
			return
		}
		<-tctx.Done() // keep the 1 ms cadence even when Request fails fast
		cancel()
	}
	b.log.Warn("event notification not acknowledged", "mask", bits, "tries", b.cfg.NotifyRetries+1)
}
