package usblink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
)

// Default USB IDs of an FT232-class bridge.
const (
	DefaultVID = 0x0403
	DefaultPID = 0x6001
)

// FTDI vendor requests (ftdi-usb.md §2). All are device-recipient vendor
// requests: bmRequestType 0x40 out, 0xC0 in.
const (
	reqTypeOut = 0x40
	reqTypeIn  = 0xC0

	sioReset           = 0x00
	sioModemCtrl       = 0x01
	sioSetFlowCtrl     = 0x02
	sioSetBaudRate     = 0x03
	sioSetData         = 0x04
	sioGetModemStatus  = 0x05
	sioSetLatencyTimer = 0x09

	resetSIO      = 0      // reset the port: purge both FIFOs, flow control off
	dataBits8N1   = 0x0008 // 8 data bits, no parity, 1 stop bit
	dtrRTSOn      = 0x0303 // DTR=1, RTS=1, both applied
	flowNone      = 0x0000
	flowRTSCTS    = 0x0100 // wIndex high byte 0x01
	statusBytes   = 2      // modem and line status at the head of each IN chunk
	lineErrorBits = 0x1E   // OE, PE, FE, BI in the line status byte
)

// Config configures a bridge. Zero fields take the defaults.
type Config struct {
	VID, PID uint16 // default 0403:6001
	// Serial picks the bridge with this USB serial number when several
	// match VID:PID; empty takes the first.
	Serial string
	// Baud is the line rate (default 115200; at most 3 Mbaud).
	Baud int
	// LatencyMs is the latency timer, 1–255 ms (default 2): how long the
	// chip holds a partial IN packet. The chip default of 16 ms would add
	// that much to every MCTP round trip.
	LatencyMs uint8
	// RTSCTS enables hardware flow control.
	RTSCTS bool
	Logger *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.VID == 0 {
		c.VID = DefaultVID
	}
	if c.PID == 0 {
		c.PID = DefaultPID
	}
	if c.Baud == 0 {
		c.Baud = 115200
	}
	if c.LatencyMs == 0 {
		c.LatencyMs = 2
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	_, _, err := Divisor(c.Baud)
	return err
}

// ErrBaud reports a baud rate the divisor cannot produce within 3 %.
var ErrBaud = errors.New("usblink: unsupported baud rate")

// Divisor returns the SET_BAUD_RATE wValue and wIndex of an FT232BM/R/X
// (and QEMU) for baud: 3 MHz divided in eighths, the fraction coded in
// divisor bits 16:14, bit 16 travelling in wIndex (ftdi-usb.md §3).
func Divisor(baud int) (value, index uint16, err error) {
	if baud <= 0 || baud > 3_000_000 {
		return 0, 0, fmt.Errorf("%w: %d", ErrBaud, baud)
	}
	frac := [8]uint32{0, 3, 2, 4, 1, 5, 6, 7}
	d8 := (48_000_000 + baud) / (2 * baud) // round(24 MHz / baud): eighths of the divisor
	if d8>>3 > 0x3FFF {
		return 0, 0, fmt.Errorf("%w: %d (divisor too large)", ErrBaud, baud)
	}
	actual := 24_000_000 / d8
	if diff := actual - baud; diff*100 > 3*baud || -diff*100 > 3*baud {
		return 0, 0, fmt.Errorf("%w: %d (nearest %d)", ErrBaud, baud, actual)
	}
	div := uint32(d8>>3) | frac[d8&7]<<14
	switch div {
	case 1:
		div = 0 // 3 Mbaud
	case 0x4001:
		div = 1 // 2 Mbaud
	}
	return uint16(div), uint16(div >> 16), nil
}

// ErrShortChunk reports an IN chunk too short to hold its status bytes.
var ErrShortChunk = errors.New("usblink: truncated FTDI status header")

// Strip appends to dst the data of one bulk IN transfer, dropping the two
// status bytes that head every maxPacket-sized chunk, and returns the
// modem and line status bytes of the last chunk. A transfer of only
// status bytes (a real chip's idle packet) yields no data.
func Strip(dst, transfer []byte, maxPacket int) (data []byte, modem, line byte, err error) {
	if maxPacket <= statusBytes {
		return dst, 0, 0, fmt.Errorf("usblink: max packet size %d: %w", maxPacket, ErrShortChunk)
	}
	for off := 0; off < len(transfer); off += maxPacket {
		chunk := transfer[off:min(off+maxPacket, len(transfer))]
		if len(chunk) < statusBytes {
			return dst, modem, line, ErrShortChunk
		}
		modem, line = chunk[0], chunk[1]
		dst = append(dst, chunk[statusBytes:]...)
	}
	return dst, modem, line, nil
}

// usbDevice is the slice of a USB device Port needs; the gousb adapter
// implements it, tests fake it.
type usbDevice interface {
	// Control sends a control request on endpoint 0.
	Control(rType, request uint8, val, idx uint16, data []byte) (int, error)
	// BulkIn reads one transfer from the IN endpoint into buf, blocking
	// until data arrives or ctx ends.
	BulkIn(ctx context.Context, buf []byte) (int, error)
	// BulkOut writes p to the OUT endpoint.
	BulkOut(ctx context.Context, p []byte) (int, error)
	// MaxPacket is the IN endpoint's wMaxPacketSize.
	MaxPacket() int
	// Close releases the device.
	Close() error
}

// inPackets is the size of an IN transfer buffer in packets: a multiple
// of wMaxPacketSize, as a chip may overflow anything shorter.
const inPackets = 8

// Stats counts line events.
type Stats struct {
	BytesIn, BytesOut uint64
	// LineErrors counts IN chunks whose line status flagged overrun,
	// parity, framing or break; their data is passed on regardless and
	// the DSP0253 FCS rejects what they corrupted.
	LineErrors uint64
}

// Port is the byte stream of one FTDI bridge. Read and Write may run
// concurrently; Close unblocks both.
type Port struct {
	dev usbDevice
	log *slog.Logger
	ctx context.Context
	end context.CancelFunc

	rmu     sync.Mutex
	rbuf    []byte // one IN transfer
	pending []byte // stripped data not yet returned

	wmu sync.Mutex

	closeOnce sync.Once
	closeErr  error

	in, out, lineErrs atomic.Uint64
}

var _ io.ReadWriteCloser = (*Port)(nil)

// newPort sets the bridge up (ftdi-usb.md §2, the Linux open sequence
// plus the latency timer) and returns its stream. On failure the device
// is closed.
func newPort(dev usbDevice, cfg Config) (*Port, error) {
	if err := cfg.setDefaults(); err != nil {
		_ = dev.Close()
		return nil, err
	}
	mp := dev.MaxPacket()
	if mp <= statusBytes {
		mp = 64 // some FT232R EEPROMs report 0; Linux forces 64 too
	}
	v, i, _ := Divisor(cfg.Baud)
	flow := uint16(flowNone)
	if cfg.RTSCTS {
		flow = flowRTSCTS
	}
	steps := []struct {
		what     string
		req      uint8
		val, idx uint16
	}{
		{"reset", sioReset, resetSIO, 0},
		{"set baud rate", sioSetBaudRate, v, i},
		{"set data 8N1", sioSetData, dataBits8N1, 0},
		{"set flow control", sioSetFlowCtrl, 0, flow},
		{"set DTR/RTS", sioModemCtrl, dtrRTSOn, 0},
	}
	for _, s := range steps {
		if _, err := dev.Control(reqTypeOut, s.req, s.val, s.idx, nil); err != nil {
			_ = dev.Close()
			return nil, fmt.Errorf("usblink: %s: %w", s.what, err)
		}
	}
	// The original SIO and FT8U232AM have no latency timer; a stall here
	// costs latency, not correctness.
	if _, err := dev.Control(reqTypeOut, sioSetLatencyTimer, uint16(cfg.LatencyMs), 0, nil); err != nil {
		cfg.Logger.Warn("usblink: latency timer not set", "err", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Port{dev: dev, log: cfg.Logger, ctx: ctx, end: cancel, rbuf: make([]byte, inPackets*mp)}, nil
}

// Read returns stripped data, waiting for the next IN transfer that
// carries some. After Close it returns io.EOF.
func (p *Port) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	p.rmu.Lock()
	defer p.rmu.Unlock()
	mp := len(p.rbuf) / inPackets
	for len(p.pending) == 0 {
		n, err := p.dev.BulkIn(p.ctx, p.rbuf)
		if n > 0 {
			var line byte
			var serr error
			p.pending, _, line, serr = Strip(p.pending[:0], p.rbuf[:n], mp)
			if serr != nil {
				p.log.Debug("usblink: IN transfer dropped", "err", serr)
				p.pending = p.pending[:0]
			}
			if line&lineErrorBits != 0 {
				p.lineErrs.Add(1)
			}
		}
		if err != nil && len(p.pending) == 0 {
			if p.ctx.Err() != nil {
				return 0, io.EOF
			}
			return 0, fmt.Errorf("usblink: bulk in: %w", err)
		}
	}
	n := copy(b, p.pending)
	p.pending = p.pending[n:]
	p.in.Add(uint64(n))
	return n, nil
}

// Write sends b as raw bulk OUT data (no header on FT232BM and later).
func (p *Port) Write(b []byte) (int, error) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.ctx.Err() != nil {
		return 0, fmt.Errorf("usblink: write: %w", io.ErrClosedPipe)
	}
	done := 0
	for done < len(b) {
		n, err := p.dev.BulkOut(p.ctx, b[done:])
		done += n
		p.out.Add(uint64(n))
		if err != nil {
			if p.ctx.Err() != nil {
				return done, fmt.Errorf("usblink: write: %w", io.ErrClosedPipe)
			}
			return done, fmt.Errorf("usblink: bulk out: %w", err)
		}
		if n == 0 {
			return done, fmt.Errorf("usblink: bulk out: %w", io.ErrShortWrite)
		}
	}
	return done, nil
}

// ModemStatus returns SIO_GET_MODEM_STATUS: the modem and line status
// bytes (1 byte on chips that send only the modem byte).
func (p *Port) ModemStatus() ([]byte, error) {
	b := make([]byte, 2)
	n, err := p.dev.Control(reqTypeIn, sioGetModemStatus, 0, 0, b)
	if err != nil {
		return nil, fmt.Errorf("usblink: get modem status: %w", err)
	}
	return b[:n], nil
}

// Stats returns the byte and line-error counters.
func (p *Port) Stats() Stats {
	return Stats{BytesIn: p.in.Load(), BytesOut: p.out.Load(), LineErrors: p.lineErrs.Load()}
}

// Close cancels pending transfers and releases the device. Later calls
// return the first result.
func (p *Port) Close() error {
	p.closeOnce.Do(func() {
		p.end()
		// Take both locks so no transfer is in flight when the device
		// goes away.
		p.rmu.Lock()
		p.wmu.Lock()
		p.closeErr = p.dev.Close()
		p.wmu.Unlock()
		p.rmu.Unlock()
	})
	return p.closeErr
}
