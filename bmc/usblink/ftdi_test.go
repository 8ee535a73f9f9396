package usblink

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/fabric/serial"
)

func TestDivisor(t *testing.T) {
	// ftdi-usb.md §3: Linux, libftdi and QEMU agree on every row.
	tests := []struct {
		baud         int
		value, index uint16
	}{
		{9600, 0x4138, 0}, {14400, 0x00D0, 1}, {19200, 0x809C, 0}, {38400, 0xC04E, 0},
		{57600, 0xC034, 0}, {115200, 0x001A, 0}, {230400, 0x000D, 0}, {460800, 0x4006, 0},
		{921600, 0x8003, 0}, {1_000_000, 0x0003, 0}, {2_000_000, 0x0001, 0}, {3_000_000, 0x0000, 0},
	}
	for _, tt := range tests {
		v, i, err := Divisor(tt.baud)
		if err != nil || v != tt.value || i != tt.index {
			t.Errorf("Divisor(%d): got %#04x/%d, %v, want %#04x/%d", tt.baud, v, i, err, tt.value, tt.index)
		}
	}
	for _, bad := range []int{0, -1, 3_000_001, 100, 2_500_000} {
		if _, _, err := Divisor(bad); !errors.Is(err, ErrBaud) {
			t.Errorf("Divisor(%d): got %v, want ErrBaud", bad, err)
		}
	}
}

// chunked builds an IN transfer the way the chip sends data: a status
// header before every 62 data bytes.
func chunked(data []byte, mp int) []byte {
	var out []byte
	for len(data) > 0 || out == nil {
		n := min(len(data), mp-statusBytes)
		out = append(out, 0x01, 0x60)
		out = append(out, data[:n]...)
		data = data[n:]
		if n == 0 {
			break
		}
	}
	return out
}

func TestStrip(t *testing.T) {
	payload := make([]byte, 130)
	for i := range payload {
		payload[i] = byte(i)
	}
	xfer := chunked(payload, 64)
	if len(xfer) != 136 || !bytes.Equal(xfer[64:66], []byte{1, 0x60}) || !bytes.Equal(xfer[128:130], []byte{1, 0x60}) {
		t.Fatalf("fixture: 130 bytes should arrive as one 136-byte transfer with headers at 0, 64, 128")
	}
	tests := []struct {
		name      string
		in        []byte
		want      []byte
		modem     byte
		line      byte
		wantError error
	}{
		{"130 bytes in three chunks", xfer, payload, 0x01, 0x60, nil},
		{"idle status packet", []byte{0x31, 0x60}, nil, 0x31, 0x60, nil},
		{"QEMU data packet", []byte{0xB1, 0x00, 'h', 'i'}, []byte("hi"), 0xB1, 0x00, nil},
		{"break", []byte{0xB1, 0x10}, nil, 0xB1, 0x10, nil},
		{"empty transfer", nil, nil, 0, 0, nil},
		{"chunk without status", append(chunked(make([]byte, 62), 64), 0x01), make([]byte, 62), 0x01, 0x60, ErrShortChunk},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, modem, line, err := Strip(nil, tt.in, 64)
			if !errors.Is(err, tt.wantError) || (err == nil) != (tt.wantError == nil) {
				t.Fatalf("error: got %v, want %v", err, tt.wantError)
			}
			if !bytes.Equal(got, tt.want) || modem != tt.modem || line != tt.line {
				t.Errorf("got %x modem %#02x line %#02x, want %x %#02x %#02x", got, modem, line, tt.want, tt.modem, tt.line)
			}
		})
	}
}

func FuzzStrip(f *testing.F) {
	f.Add(chunked(make([]byte, 130), 64), 64)
	f.Add([]byte{0x31, 0x60}, 64)
	f.Add([]byte{0x01}, 8)
	f.Fuzz(func(t *testing.T, in []byte, mp int) {
		data, _, _, err := Strip(nil, in, mp)
		if err != nil {
			return
		}
		chunks := len(in) / mp
		if len(in)%mp != 0 {
			chunks++
		}
		if len(data) != len(in)-statusBytes*chunks {
			t.Fatalf("stripped %d of %d bytes in %d chunks", len(in)-len(data), len(in), chunks)
		}
	})
}

type control struct {
	RType, Request uint8
	Val, Idx       uint16
}

// fakeDevice records control requests and moves bulk data through
// channels; with loop set, bulk OUT data comes back as IN transfers.
type fakeDevice struct {
	mu       sync.Mutex
	controls []control
	stall    map[uint8]bool
	mp       int
	in       chan []byte
	peer     *fakeDevice // bulk OUT goes to peer's IN
	closed   bool
}

func newFake(mp int) *fakeDevice {
	return &fakeDevice{mp: mp, in: make(chan []byte, 64), stall: map[uint8]bool{}}
}

func (d *fakeDevice) Control(rType, request uint8, val, idx uint16, data []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.controls = append(d.controls, control{rType, request, val, idx})
	if d.stall[request] {
		return 0, errors.New("pipe error")
	}
	if request == sioGetModemStatus {
		return copy(data, []byte{0xB1, 0x60}), nil
	}
	return 0, nil
}

func (d *fakeDevice) BulkIn(ctx context.Context, buf []byte) (int, error) {
	select {
	case t := <-d.in:
		if len(t) > len(buf) {
			return 0, errors.New("overflow")
		}
		return copy(buf, t), nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// BulkOut delivers p to the peer as IN transfers of at most 8 packets.
func (d *fakeDevice) BulkOut(ctx context.Context, p []byte) (int, error) {
	dst := d.peer
	if dst == nil {
		dst = d
	}
	per := inPackets * (dst.mp - statusBytes)
	for off := 0; off < len(p); off += per {
		select {
		case dst.in <- chunked(p[off:min(off+per, len(p))], dst.mp):
		case <-ctx.Done():
			return off, ctx.Err()
		}
	}
	return len(p), nil
}

func (d *fakeDevice) MaxPacket() int { return d.mp }

func (d *fakeDevice) Close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	return nil
}

func TestSetupSequence(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want []control
	}{
		{"defaults", Config{}, []control{
			{0x40, 0x00, 0, 0}, {0x40, 0x03, 0x001A, 0}, {0x40, 0x04, 0x0008, 0},
			{0x40, 0x02, 0, 0}, {0x40, 0x01, 0x0303, 0}, {0x40, 0x09, 2, 0}}},
		{"14400 baud, RTS/CTS, 16 ms", Config{Baud: 14400, RTSCTS: true, LatencyMs: 16}, []control{
			{0x40, 0x00, 0, 0}, {0x40, 0x03, 0x00D0, 1}, {0x40, 0x04, 0x0008, 0},
			{0x40, 0x02, 0, 0x0100}, {0x40, 0x01, 0x0303, 0}, {0x40, 0x09, 16, 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newFake(64)
			p, err := newPort(d, tt.cfg)
			if err != nil {
				t.Fatalf("newPort: %v", err)
			}
			defer p.Close()
			if diff := cmp.Diff(tt.want, d.controls); diff != "" {
				t.Errorf("control requests (-want +got):\n%s", diff)
			}
		})
	}

	// A stalled latency timer (SIO, FT8U232AM) is tolerated; a stalled
	// baud rate is not, and the device is released.
	d := newFake(64)
	d.stall[sioSetLatencyTimer] = true
	p, err := newPort(d, Config{})
	if err != nil {
		t.Errorf("latency timer stall: got %v, want the port opened", err)
	} else {
		p.Close()
	}
	d = newFake(64)
	d.stall[sioSetBaudRate] = true
	if _, err := newPort(d, Config{}); err == nil || !d.closed {
		t.Errorf("baud rate stall: got %v, closed %v, want an error and the device closed", err, d.closed)
	}
	if _, err := newPort(newFake(64), Config{Baud: 100}); !errors.Is(err, ErrBaud) {
		t.Errorf("100 baud: got %v, want ErrBaud", err)
	}
}

func TestReadWrite(t *testing.T) {
	d := newFake(64)
	p, err := newPort(d, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	d.in <- []byte{0x31, 0x60}                         // idle: no data
	d.in <- append([]byte{0x01, 0x60}, "hello"...)     // data
	d.in <- append([]byte{0x01, 0x0E}, " world"...)    // data with framing/parity/overrun flagged
	d.in <- chunked(bytes.Repeat([]byte{'x'}, 70), 64) // 70 bytes over two chunks
	var got []byte
	buf := make([]byte, 7)
	for len(got) < len("hello world")+70 {
		n, err := p.Read(buf)
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		got = append(got, buf[:n]...)
	}
	if want := "hello world" + string(bytes.Repeat([]byte{'x'}, 70)); string(got) != want {
		t.Errorf("Read: got %q, want %q", got, want)
	}
	if s := p.Stats(); s.LineErrors != 1 || s.BytesIn != 81 {
		t.Errorf("Stats: got %+v, want 1 line error, 81 bytes in", s)
	}
	st, err := p.ModemStatus()
	if err != nil || !bytes.Equal(st, []byte{0xB1, 0x60}) {
		t.Errorf("ModemStatus: got %x, %v, want b160", st, err)
	}
}

func TestCloseUnblocksRead(t *testing.T) {
	d := newFake(64)
	p, err := newPort(d, Config{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		_, err := p.Read(make([]byte, 16))
		done <- err
	}()
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-done; !errors.Is(err, io.EOF) {
		t.Errorf("Read after Close: got %v, want io.EOF", err)
	}
	if !d.closed {
		t.Errorf("device not closed")
	}
	if _, err := p.Write([]byte("x")); err == nil {
		t.Errorf("Write after Close: got nil error")
	}
}

// TestDSP0253OverUSB runs serial framing over two bridges wired back to
// back: MCTP packets written on one side arrive whole on the other, with
// the status headers stripped from every 64-byte chunk.
func TestDSP0253OverUSB(t *testing.T) {
	a, b := newFake(64), newFake(64)
	a.peer, b.peer = b, a
	pa, err := newPort(a, Config{})
	if err != nil {
		t.Fatal(err)
	}
	pb, err := newPort(b, Config{})
	if err != nil {
		t.Fatal(err)
	}
	la, lb := serial.NewLink(pa, serial.LinkConfig{}), serial.NewLink(pb, serial.LinkConfig{})
	defer la.Close()
	defer lb.Close()
	packets := [][]byte{
		{0x01, 0x09, 0x10, 0xC8, 0x01, 0x81, 0x00, 0x02},
		append([]byte{0x01, 0x10, 0x09, 0xC0, 0x01}, bytes.Repeat([]byte{0x7E, 0x7D, 0x55}, 21)...), // escapes galore
	}
	for _, pkt := range packets {
		if err := la.WritePacket(pkt); err != nil {
			t.Fatalf("WritePacket: %v", err)
		}
		got, err := lb.ReadPacket()
		if err != nil {
			t.Fatalf("ReadPacket: %v", err)
		}
		if diff := cmp.Diff(pkt, got); diff != "" {
			t.Errorf("packet mismatch (-sent +received):\n%s", diff)
		}
		if err := lb.WritePacket(pkt); err != nil {
			t.Fatalf("WritePacket back: %v", err)
		}
		if back, err := la.ReadPacket(); err != nil || !bytes.Equal(back, pkt) {
			t.Errorf("reply: got %x, %v", back, err)
		}
	}
}
