package serial

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
)

// LinkConfig configures a Link.
type LinkConfig struct {
	// MaxCount is the largest packet accepted and sent (MinCount..MaxCount;
	// 0 means DefaultMaxCount). Raise it only between our own endpoints:
	// Linux and libmctp peers drop anything above 68 bytes.
	MaxCount int
	// Logger receives debug records about dropped frames. nil discards.
	Logger *slog.Logger
}

// readChunk is the size of one stream read. A frame is at most 2*255+6
// bytes, so one read usually holds several whole frames.
const readChunk = 4096

// Link carries whole MCTP packets over a byte stream with DSP0253 framing.
// ReadPacket and WritePacket may be called from different goroutines at the
// same time; each of them is also safe for concurrent use with itself.
type Link struct {
	rw  io.ReadWriteCloser
	log *slog.Logger
	max int

	rmu   sync.Mutex // guards the receive side below
	dec   *Decoder
	rbuf  []byte
	queue [][]byte // decoded packets not yet returned
	head  int
	rerr  error // sticky stream error, returned once queue is drained
	seen  Stats // last stats logged

	wmu  sync.Mutex // one frame per Write call, frames never interleave
	wbuf []byte

	smu   sync.Mutex // guards stats, so Stats never waits for a blocked Read
	stats Stats

	closeOnce sync.Once
	closeErr  error
}

// NewLink wraps rw. The Link owns rw: Close closes it.
func NewLink(rw io.ReadWriteCloser, cfg LinkConfig) *Link {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := clampMax(cfg.MaxCount)
	return &Link{
		rw:   rw,
		log:  log,
		max:  m,
		dec:  NewDecoder(m),
		rbuf: make([]byte, readChunk),
	}
}

// ReadPacket blocks until a good frame arrives and returns its packet in a
// fresh slice the caller owns. Bad frames are skipped and counted. When the
// stream ends it returns io.EOF; other stream errors are wrapped. Packets
// decoded before the error are returned first.
func (l *Link) ReadPacket() ([]byte, error) {
	l.rmu.Lock()
	defer l.rmu.Unlock()
	for l.head == len(l.queue) {
		l.queue, l.head = l.queue[:0], 0
		if l.rerr != nil {
			return nil, l.rerr
		}
		n, err := l.rw.Read(l.rbuf)
		if n > 0 {
			l.dec.Feed(l.rbuf[:n], func(p []byte) {
				l.queue = append(l.queue, slices.Clone(p))
			})
			l.publish()
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				l.rerr = io.EOF
			} else {
				l.rerr = fmt.Errorf("serial: read: %w", err)
			}
		}
	}
	p := l.queue[l.head]
	l.queue[l.head] = nil
	l.head++
	return p, nil
}

// publish copies the decoder counters for Stats and logs new drops.
// Called with rmu held.
func (l *Link) publish() {
	s := l.dec.Stats()
	l.smu.Lock()
	l.stats.Frames, l.stats.FCSErrors, l.stats.Dropped = s.Frames, s.FCSErrors, s.Dropped
	l.smu.Unlock()
	if s.FCSErrors != l.seen.FCSErrors || s.Dropped != l.seen.Dropped {
		l.log.Debug("serial: frames dropped",
			"fcs_errors", s.FCSErrors-l.seen.FCSErrors,
			"malformed", s.Dropped-l.seen.Dropped)
	}
	l.seen = s
}

// WritePacket frames p and writes the frame with a single Write call, so
// concurrent writers never interleave frames on the stream.
func (l *Link) WritePacket(p []byte) error {
	return l.WritePackets([][]byte{p})
}

// WritePackets frames every packet of ps into one buffer and writes it
// with a single Write (mctp.PacketsWriter): the receiver sees the same
// bytes as from one WritePacket per packet.
func (l *Link) WritePackets(ps [][]byte) error {
	for _, p := range ps {
		if len(p) > l.max {
			return fmt.Errorf("serial: write: packet of %d bytes above link maximum %d: %w",
				len(p), l.max, ErrPacketSize)
		}
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	buf := l.wbuf[:0]
	for _, p := range ps {
		var err error
		if buf, err = AppendFrame(buf, p); err != nil {
			return err
		}
	}
	l.wbuf = buf
	if _, err := l.rw.Write(buf); err != nil {
		return fmt.Errorf("serial: write: %w", err)
	}
	l.smu.Lock()
	l.stats.Sent += uint64(len(ps))
	l.smu.Unlock()
	return nil
}

// Close closes the underlying stream, which unblocks a pending ReadPacket.
// Later calls return the first call's result.
func (l *Link) Close() error {
	l.closeOnce.Do(func() {
		if err := l.rw.Close(); err != nil {
			l.closeErr = fmt.Errorf("serial: close: %w", err)
		}
	})
	return l.closeErr
}

// Stats returns the receive counters and the number of frames sent.
func (l *Link) Stats() Stats {
	l.smu.Lock()
	defer l.smu.Unlock()
	return l.stats
}
