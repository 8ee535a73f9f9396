package main

// A black-box client of the cxlsim binary: it speaks only the published
// formats (DSP0253 framing, MCTP transport header, CCI message) with its own
// few lines of encoding, and imports nothing from this repository, so it
// proves that the box interoperates with any spec-following Fabric Manager.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	fmEID   = 0x20
	boxEID  = 0x08
	typeFM  = 0x07
	typeT3  = 0x08
	gib     = 1 << 30
	tib     = 1 << 40
	capUnit = 256 << 20
)

// bbFCS is the RFC 1662 FCS-16 register without the final complement.
func bbFCS(crc uint16, p []byte) uint16 {
	for _, b := range p {
		crc ^= uint16(b)
		for i := 0; i < 8; i++ {
			if crc&1 != 0 {
				crc = crc>>1 ^ 0x8408
			} else {
				crc >>= 1
			}
		}
	}
	return crc
}

type bbClient struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
	tag  byte // CCI message tag
	mtag byte // MCTP tag
}

func (c *bbClient) writePacket(pkt []byte) {
	f := []byte{0x7e, 0x01, byte(len(pkt))}
	for _, b := range pkt {
		if b == 0x7e || b == 0x7d {
			f = append(f, 0x7d, b^0x20)
		} else {
			f = append(f, b)
		}
	}
	fcs := bbFCS(0xffff, append([]byte{0x01, byte(len(pkt))}, pkt...))
	f = append(f, byte(fcs>>8), byte(fcs), 0x7e)
	if _, err := c.conn.Write(f); err != nil {
		c.t.Fatalf("write frame: %v", err)
	}
}

func (c *bbClient) readPacket() []byte {
	for {
		b, err := c.r.ReadByte()
		if err != nil {
			c.t.Fatalf("read frame: %v", err)
		}
		if b != 0x7e {
			continue
		}
		rev, _ := c.r.ReadByte()
		for rev == 0x7e {
			rev, _ = c.r.ReadByte()
		}
		n, _ := c.r.ReadByte()
		if rev != 0x01 {
			continue
		}
		pkt := make([]byte, 0, n)
		for len(pkt) < int(n) {
			b, err := c.r.ReadByte()
			if err != nil {
				c.t.Fatalf("read frame: %v", err)
			}
			if b == 0x7d {
				e, _ := c.r.ReadByte()
				b = e ^ 0x20
			}
			pkt = append(pkt, b)
		}
		hi, _ := c.r.ReadByte()
		lo, _ := c.r.ReadByte()
		end, _ := c.r.ReadByte()
		want := bbFCS(0xffff, append([]byte{0x01, n}, pkt...))
		if end != 0x7e || uint16(hi)<<8|uint16(lo) != want {
			c.t.Fatalf("bad frame from the box: fcs %02x%02x want %04x, end %02x", hi, lo, want, end)
		}
		return pkt
	}
}

// call sends one CCI request and returns the response's return code and
// payload. Requests are split into 64-byte MCTP packets; responses are
// reassembled from SOM to EOM.
func (c *bbClient) call(mctpType byte, opcode uint16, payload []byte) (uint16, []byte) {
	c.t.Helper()
	c.tag++
	c.mtag = (c.mtag + 1) & 7
	n := len(payload)
	body := []byte{mctpType, 0x00, c.tag, 0x00, byte(opcode), byte(opcode >> 8), byte(n), byte(n >> 8), byte(n >> 16), 0, 0, 0, 0}
	body = append(body, payload...)
	for seq, off := 0, 0; off < len(body); seq++ {
		end := min(off+64, len(body))
		flags := byte(0x08 | c.mtag | byte(seq&3)<<4) // TO=1
		if off == 0 {
			flags |= 0x80
		}
		if end == len(body) {
			flags |= 0x40
		}
		c.writePacket(append([]byte{0x01, boxEID, fmEID, flags}, body[off:end]...))
		off = end
	}
	var msg []byte
	for {
		p := c.readPacket()
		if len(p) < 4 || p[1] != fmEID {
			c.t.Fatalf("packet not for us: % x", p)
		}
		if p[3]&0x08 != 0 { // a request from the box (event notification): not ours
			continue
		}
		if p[3]&7 != c.mtag {
			c.t.Fatalf("response MCTP tag %d, want %d", p[3]&7, c.mtag)
		}
		if p[3]&0x80 != 0 {
			msg = msg[:0]
		}
		msg = append(msg, p[4:]...)
		if p[3]&0x40 != 0 {
			break
		}
	}
	if len(msg) < 13 || msg[0] != mctpType {
		c.t.Fatalf("response % x: want MCTP type %02x and a CCI header", msg, mctpType)
	}
	cci := msg[1:]
	if cci[0]&0x0f != 1 || cci[1] != c.tag || binary.LittleEndian.Uint16(cci[3:]) != opcode {
		c.t.Fatalf("response header % x does not answer opcode %04x tag %d", cci[:12], opcode, c.tag)
	}
	plen := int(uint32(cci[5]) | uint32(cci[6])<<8 | uint32(cci[7]&0x1f)<<16)
	if plen != len(cci)-12 {
		c.t.Fatalf("response length field %d, payload %d", plen, len(cci)-12)
	}
	return binary.LittleEndian.Uint16(cci[8:]), cci[12:]
}

func startCxlsim(t *testing.T, args ...string) net.Conn {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "cxlsim")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build cxlsim: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, append([]string{"--listen", "tcp://127.0.0.1:0"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start cxlsim: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if i := strings.Index(sc.Text(), "tcp://"); i >= 0 {
				addr <- strings.Fields(sc.Text()[i+len("tcp://"):])[0]
			}
		}
		io.Copy(io.Discard, out)
	}()
	var a string
	select {
	case a = <-addr:
	case <-time.After(60 * time.Second):
		t.Fatal("cxlsim did not print its address")
	}
	conn, err := net.Dial("tcp", a)
	if err != nil {
		t.Fatalf("dial %s: %v", a, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func addPayload(host uint16, policy, region byte, length uint64, tag []byte) []byte {
	p := make([]byte, 0x20)
	binary.LittleEndian.PutUint16(p[0:], host)
	p[2], p[3] = policy, region
	binary.LittleEndian.PutUint64(p[4:], length)
	copy(p[0x0c:], tag)
	return p
}

func releasePayload(host uint16, flags byte, length uint64, tag []byte) []byte {
	p := make([]byte, 0x20)
	binary.LittleEndian.PutUint16(p[0:], host)
	p[2] = flags
	binary.LittleEndian.PutUint64(p[4:], length)
	copy(p[0x0c:], tag)
	return p
}

// extents returns (DPA, length, tag) of every extent host holds (5603h).
func (c *bbClient) extents(host uint16) (total uint32, lens []uint64, tags [][]byte) {
	c.t.Helper()
	req := make([]byte, 12)
	binary.LittleEndian.PutUint16(req, host)
	binary.LittleEndian.PutUint32(req[4:], 8)
	rc, p := c.call(typeFM, 0x5603, req)
	if rc != 0 {
		c.t.Fatalf("Get DC Region Extent Lists: rc %04x", rc)
	}
	n := binary.LittleEndian.Uint32(p[8:])
	total = binary.LittleEndian.Uint32(p[0x0c:])
	for i := 0; i < int(n); i++ {
		e := p[0x18+0x28*i:]
		lens = append(lens, binary.LittleEndian.Uint64(e[8:]))
		tags = append(tags, e[16:32])
	}
	return total, lens, tags
}

func (c *bbClient) waitExtents(host uint16, want int) (lens []uint64, tags [][]byte) {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		total, lens, tags := c.extents(host)
		if int(total) == want {
			return lens, tags
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("host %d holds %d extents, want %d", host, total, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestBlackBoxClient(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the cxlsim binary")
	}
	conn := startCxlsim(t)
	conn.SetDeadline(time.Now().Add(60 * time.Second))
	c := &bbClient{t: t, conn: conn, r: bufio.NewReader(conn)}

	// Discover: Identify first, then heads and capacity.
	rc, id := c.call(typeT3, 0x0001, nil)
	if rc != 0 || len(id) != 0x12 || id[0x11] != 0x03 {
		t.Fatalf("Identify: rc %04x payload % x, want success from a Type-3 device", rc, id)
	}
	rc, mh := c.call(typeFM, 0x5500, []byte{0, 8})
	if rc != 0 || mh[0] != 8 || mh[1] != 8 {
		t.Fatalf("Get Multi-Headed Info: rc %04x LDs %d heads %d, want 8 and 8", rc, mh[0], mh[1])
	}
	rc, dcd := c.call(typeFM, 0x5600, nil)
	if rc != 0 {
		t.Fatalf("Get DCD Info: rc %04x", rc)
	}
	if hosts, total := dcd[0], binary.LittleEndian.Uint64(dcd[0x0c:])*capUnit; hosts != 8 || total != tib {
		t.Fatalf("Get DCD Info: %d hosts, %d bytes; want 8 hosts and 1 TiB", hosts, total)
	}

	// Add 1 GiB to host 2, see it in its extent list, release it.
	tag := []byte("black-box-tag-01")
	if rc, _ := c.call(typeFM, 0x5604, addPayload(2, 0, 0, gib, tag)); rc != 0 {
		t.Fatalf("Initiate DC Add: rc %04x", rc)
	}
	lens, tags := c.waitExtents(2, 1)
	var sum uint64
	for i := range lens {
		sum += lens[i]
		if !bytes.Equal(tags[i], tag) {
			t.Errorf("extent tag % x, want % x", tags[i], tag)
		}
	}
	if sum != gib {
		t.Errorf("host 2 holds %d bytes, want 1 GiB", sum)
	}
	if rc, _ := c.call(typeFM, 0x5605, releasePayload(2, 0x20, gib, tag)); rc != 0 {
		t.Fatalf("Initiate DC Release: rc %04x", rc)
	}
	c.waitExtents(2, 0)

	// Bad requests get the spec's return codes.
	const (
		invalidInput       = 0x0002
		unsupported        = 0x0003
		invalidPayloadLen  = 0x0016
		resourcesExhausted = 0x001d
	)
	bad := []struct {
		name    string
		typ     byte
		op      uint16
		payload []byte
		want    uint16
	}{
		{"add for an unknown host", typeFM, 0x5604, addPayload(9, 0, 0, gib, tag), invalidInput},
		{"add not a block multiple", typeFM, 0x5604, addPayload(2, 0, 0, gib+4096, tag), invalidInput},
		{"add beyond the region", typeFM, 0x5604, addPayload(2, 0, 0, tib, tag), resourcesExhausted},
		{"add with an unknown policy", typeFM, 0x5604, addPayload(2, 7, 0, gib, tag), invalidInput},
		{"add in region 8", typeFM, 0x5604, addPayload(2, 0, 8, gib, tag), invalidInput},
		{"add too short", typeFM, 0x5604, make([]byte, 8), invalidPayloadLen},
		{"release of an unknown tag", typeFM, 0x5605, releasePayload(2, 0, gib, []byte("never-added-tag!")), invalidInput},
		{"head info for head 9", typeFM, 0x5501, []byte{9, 1}, invalidInput},
		{"extent list of host 9", typeFM, 0x5603, []byte{9, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0}, invalidInput},
		{"FM-API opcode on type 08h", typeT3, 0x5600, nil, unsupported},
		{"Identify on type 07h", typeFM, 0x0001, nil, unsupported},
		{"unknown opcode", typeT3, 0x0fff, nil, unsupported},
		{"response limit out of range", typeT3, 0x0004, []byte{7}, invalidInput},
	}
	for _, tt := range bad {
		if rc, _ := c.call(tt.typ, tt.op, tt.payload); rc != tt.want {
			t.Errorf("%s: rc %04x, want %04x", tt.name, rc, tt.want)
		}
	}
}
