package sim

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"testing"
	"time"

	"cxlpool/fabric/serial"
)

// rawClient speaks to the box with hand-built bytes: CCI header, MCTP
// packets and DSP0253 frames, using the package codecs for nothing but the
// frame checksum (serial.AppendFrame) and frame splitting (serial.Decoder).
type rawClient struct {
	t    *testing.T
	c    net.Conn
	dec  *serial.Decoder
	buf  []byte
	pkts [][]byte
	tag  uint8
}

func (r *rawClient) send(typ byte, op uint16, payload []byte) {
	r.t.Helper()
	r.tag++
	msg := []byte{typ, 0x00, r.tag, 0x00, byte(op), byte(op >> 8), byte(len(payload)), byte(len(payload) >> 8), 0, 0, 0, 0, 0}
	msg = append(msg, payload...)
	var out []byte
	for i, seq := 0, 0; i < len(msg); i, seq = i+64, seq+1 {
		chunk := msg[i:min(i+64, len(msg))]
		flags := byte(seq&3)<<4 | 0x08 | 0x02 // TO, tag 2
		if i == 0 {
			flags |= 0x80
		}
		if i+64 >= len(msg) {
			flags |= 0x40
		}
		pkt := append([]byte{0x01, 0x08, 0x09, flags}, chunk...)
		var err error
		if out, err = serial.AppendFrame(out, pkt); err != nil {
			r.t.Fatal(err)
		}
	}
	if _, err := r.c.Write(out); err != nil {
		r.t.Fatal(err)
	}
}

// recv returns the next whole MCTP message body (type byte first).
func (r *rawClient) recv() []byte {
	r.t.Helper()
	var body []byte
	for {
		for len(r.pkts) > 0 {
			p := r.pkts[0]
			r.pkts = r.pkts[1:]
			if p[1] != 0x09 || p[2] != 0x08 || p[3]&0x08 != 0 {
				r.t.Fatalf("packet header % x: want dst 9, src 8, TO=0", p[:4])
			}
			if p[3]&0x80 != 0 {
				body = nil
			}
			body = append(body, p[4:]...)
			if p[3]&0x40 != 0 {
				return body
			}
		}
		if err := r.c.SetReadDeadline(time.Now().Add(callTTL)); err != nil {
			r.t.Fatal(err)
		}
		n, err := r.c.Read(r.buf)
		if err != nil {
			r.t.Fatal(err)
		}
		r.dec.Feed(r.buf[:n], func(p []byte) { r.pkts = append(r.pkts, append([]byte(nil), p...)) })
	}
}

// do sends a request and returns the return code and payload.
func (r *rawClient) do(typ byte, op uint16, payload []byte) (uint16, []byte) {
	r.t.Helper()
	r.send(typ, op, payload)
	b := r.recv()
	if len(b) < 13 || b[0] != typ || b[1] != 0x01 || b[2] != r.tag || binary.LittleEndian.Uint16(b[4:]) != op {
		r.t.Fatalf("response % x: want type %02x, category 1, tag %d, opcode %04x", b[:min(len(b), 13)], typ, r.tag, op)
	}
	n := int(b[6]) | int(b[7])<<8 | int(b[8]&0x1f)<<16
	if n != len(b)-13 {
		r.t.Fatalf("response length field %d, body has %d", n, len(b)-13)
	}
	return binary.LittleEndian.Uint16(b[9:]), b[13:]
}

func TestBlackBoxTCP(t *testing.T) {
	b, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := serial.Listen("tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- b.ServeListener(ctx, l) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("ServeListener: %v", err)
		}
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := &rawClient{t: t, c: c, dec: serial.NewDecoder(0), buf: make([]byte, 4096)}

	rc, p := r.do(0x08, 0x0001, nil) // Identify
	if rc != 0 || len(p) != 0x12 || p[0x10] != 9 || p[0x11] != 3 {
		t.Fatalf("identify: rc %04x payload % x", rc, p)
	}
	rc, p = r.do(0x07, 0x5500, []byte{0, 0xff}) // Get Multi-Headed Info
	if rc != 0 || p[0] != 8 || p[1] != 8 || p[5] != 8 {
		t.Fatalf("multi-headed info: rc %04x payload % x; want 8 LDs, 8 heads", rc, p)
	}
	rc, p = r.do(0x07, 0x5600, nil) // Get DCD Info (two packets)
	if rc != 0 || len(p) != 0x54 || p[0] != 8 || binary.LittleEndian.Uint64(p[0x0c:]) != 4096 {
		t.Fatalf("dcd info: rc %04x payload % x; want 8 hosts, 4096 × 256 MB", rc, p)
	}

	tag := make([]byte, 16)
	copy(tag, "black-box-tag-01")
	add := make([]byte, 0x20)
	binary.LittleEndian.PutUint16(add[0:], 3)       // host 3
	add[2], add[3] = 0, 0                           // Free, region 0
	binary.LittleEndian.PutUint64(add[4:], 2*block) // 512 MiB
	copy(add[0x0c:], tag)
	if rc, _ = r.do(0x07, 0x5604, add); rc != 0 {
		t.Fatalf("initiate add: rc %04x", rc)
	}
	extents := func(host uint16) (uint16, int, []byte) {
		q := make([]byte, 12)
		binary.LittleEndian.PutUint16(q, host)
		binary.LittleEndian.PutUint32(q[4:], 8)
		rc, p := r.do(0x07, 0x5603, q)
		if rc != 0 {
			return rc, 0, nil
		}
		return rc, int(binary.LittleEndian.Uint32(p[0x0c:])), p[0x18:]
	}
	waitFor(t, "host 3 to accept", func() bool { _, n, _ := extents(3); return n == 1 })
	_, _, ext := extents(3)
	if got, want := fmt.Sprintf("%x/%x/%s", binary.LittleEndian.Uint64(ext), binary.LittleEndian.Uint64(ext[8:]), ext[16:32]), fmt.Sprintf("0/%x/%s", 2*block, tag); got != want {
		t.Errorf("extent = %s, want %s", got, want)
	}

	rel := make([]byte, 0x20)
	binary.LittleEndian.PutUint16(rel[0:], 3)
	binary.LittleEndian.PutUint64(rel[4:], 2*block)
	copy(rel[0x0c:], tag)
	if rc, _ = r.do(0x07, 0x5605, rel); rc != 0 {
		t.Fatalf("initiate release: rc %04x", rc)
	}
	waitFor(t, "host 3 to release", func() bool { _, n, _ := extents(3); return n == 0 })

	if rc, _, _ := extents(9); rc != 0x0002 {
		t.Errorf("extent list of host 9: rc %04x, want 0002h (Invalid Input)", rc)
	}
	// A second connection is served concurrently.
	c2, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	r2 := &rawClient{t: t, c: c2, dec: serial.NewDecoder(0), buf: make([]byte, 4096)}
	if rc, _ := r2.do(0x08, 0x0001, nil); rc != 0 {
		t.Errorf("second connection identify: rc %04x", rc)
	}
}
