package rdma_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"cxlpool/rdma"
	"cxlpool/rdma/client"
)

// BenchmarkLoopback measures the export over TCP on loopback beside two
// baselines from the same run: raw TCP between the same processes (a
// plain server that streams or swallows the same sizes and answers
// ping-pongs), and Redis GET/SET of the same sizes when redis-server is
// installed. Reported: 1 MiB READ and WRITE throughput (MB/s) with the
// ratio to raw TCP (goal ≥ 0.8) and to Redis, and 64-byte READ latency
// p50/p99 with the p50 ratio to a raw ping-pong (goal ≤ 1.3).
func BenchmarkLoopback(b *testing.B) {
	e := newE2E(b)
	// A cancellable context, like poolctl's (signal.NotifyContext): a
	// context without a Done channel skips the client's context watch,
	// which once made this harness read better than poolctl.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c0 := e.chunk(b, 64<<20, 0)
	x, err := e.svc.Create(ctx, rdma.CreateRequest{Chunk: c0.ID, Client: "bench", Perms: rdma.PermReadWrite})
	if err != nil {
		b.Fatal(err)
	}
	cl, err := client.Dial(ctx, client.Config{Addr: e.addr, Export: x.ID, Token: x.Token})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	raw := startRaw(b)
	defer raw.Close()
	rc, err := dialRaw(raw.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer rc.Close()
	var redis *respConn
	if path, err := exec.LookPath("redis-server"); err != nil {
		b.Log("redis-server not installed: skipping the Redis comparison (apt-get install redis-server)")
	} else if redis, err = startRedis(b, path); err != nil {
		b.Logf("redis-server did not start, skipping the Redis comparison: %v", err)
		redis = nil
	}

	const mib = 1 << 20
	bulk := 128 * b.N
	small := 5000 * b.N
	buf := make([]byte, mib)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	b.ResetTimer()

	// The figures are compared with each other, and the machine may be
	// busy with other work: the contenders take turns in short rounds,
	// so that a change of load falls on all of them alike.
	type contender struct {
		name string
		op   func(i int) error
		d    time.Duration
		lat  []time.Duration
	}
	bulkRounds := func(cs []*contender, n int) {
		const round = 4
		for i := 0; i < n; i += round {
			for j := range cs {
				c := cs[(i/round+j)%len(cs)] // who goes first rotates
				t0 := time.Now()
				for k := i; k < min(i+round, n); k++ {
					if err := c.op(k); err != nil {
						b.Fatalf("%s: %v", c.name, err)
					}
				}
				c.d += time.Since(t0)
			}
		}
	}
	latRounds := func(cs []*contender, n int) {
		for i := range n {
			for j := range cs {
				c := cs[(i+j)%len(cs)]
				t0 := time.Now()
				if err := c.op(i); err != nil {
					b.Fatalf("%s: %v", c.name, err)
				}
				c.lat = append(c.lat, time.Since(t0))
			}
		}
	}
	mbps := func(c *contender) float64 { return float64(bulk) * mib / c.d.Seconds() / 1e6 }
	pct := func(c *contender) (p50, p99 float64) {
		slices.Sort(c.lat)
		return float64(c.lat[len(c.lat)/2].Nanoseconds()), float64(c.lat[len(c.lat)*99/100].Nanoseconds())
	}

	// Every contender moves 1 MiB pieces round a 32 MiB working set,
	// first once untimed so that none pays for first-touch page faults.
	span := rawSpan / mib
	for i := range span {
		if err := cl.Write(ctx, buf, uint64(i)*mib); err != nil {
			b.Fatal(err)
		}
		if err := rc.write(buf, i*mib); err != nil {
			b.Fatal(err)
		}
	}
	small64 := buf[:64]
	exW := &contender{name: "export write", op: func(i int) error { return cl.Write(ctx, buf, uint64(i%span)*mib) }}
	exR := &contender{name: "export read", op: func(i int) error { return cl.Read(ctx, buf, uint64(i%span)*mib) }}
	exL := &contender{name: "export read64", op: func(int) error { return cl.Read(ctx, small64, 4096) }}
	rawW := &contender{name: "raw write", op: func(i int) error { return rc.write(buf, i%span*mib) }}
	rawR := &contender{name: "raw read", op: func(i int) error { return rc.read(buf, i%span*mib) }}
	rawL := &contender{name: "raw ping-pong", op: func(int) error { return rc.read(small64, 4096) }}
	ws, rs, ls := []*contender{exW, rawW}, []*contender{exR, rawR}, []*contender{exL, rawL}
	var rdW, rdR, rdL *contender
	if redis != nil {
		key := "kv-block"
		if err := redis.set("small", small64); err != nil {
			b.Fatal(err)
		}
		rdW = &contender{name: "redis set", op: func(int) error { return redis.set(key, buf) }}
		rdR = &contender{name: "redis get", op: func(int) error { return redis.get(key, buf) }}
		rdL = &contender{name: "redis get64", op: func(int) error { return redis.get("small", small64) }}
		ws, rs, ls = append(ws, rdW), append(rs, rdR), append(ls, rdL)
	}
	bulkRounds(ws, bulk)
	bulkRounds(rs, bulk)
	latRounds(ls, small)
	b.StopTimer()

	exP50, exP99 := pct(exL)
	rawP50, rawP99 := pct(rawL)
	b.ReportMetric(mbps(exR), "read-MB/s")
	b.ReportMetric(mbps(exW), "write-MB/s")
	b.ReportMetric(mbps(rawR), "raw-read-MB/s")
	b.ReportMetric(mbps(rawW), "raw-write-MB/s")
	b.ReportMetric(mbps(exR)/mbps(rawR), "read/raw")
	b.ReportMetric(mbps(exW)/mbps(rawW), "write/raw")
	b.ReportMetric(exP50, "read64-p50-ns")
	b.ReportMetric(exP99, "read64-p99-ns")
	b.ReportMetric(rawP50, "raw-pingpong-p50-ns")
	b.ReportMetric(rawP99, "raw-pingpong-p99-ns")
	b.ReportMetric(exP50/rawP50, "p50/raw")
	if redis != nil {
		rdP50, rdP99 := pct(rdL)
		b.ReportMetric(mbps(rdR), "redis-get-MB/s")
		b.ReportMetric(mbps(rdW), "redis-set-MB/s")
		b.ReportMetric(mbps(exR)/mbps(rdR), "read/redis")
		b.ReportMetric(mbps(exW)/mbps(rdW), "write/redis")
		b.ReportMetric(rdP50, "redis-get64-p50-ns")
		b.ReportMetric(rdP99, "redis-get64-p99-ns")
		b.ReportMetric(exP50/rdP50, "p50/redis")
	}
}

// startRaw serves the raw-TCP baseline: a request is one opcode byte, a
// 4-byte length and a 4-byte offset into a 32 MiB buffer (the same
// working set as the export's, so caches favour neither); 'R' answers
// length bytes from the buffer, 'W' reads length bytes into it and
// answers one byte.
func startRaw(b testing.TB) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				br := bufio.NewReaderSize(nc, 64<<10)
				mem := make([]byte, rawSpan+1<<20)
				var hdr [9]byte
				for {
					if _, err := io.ReadFull(br, hdr[:]); err != nil {
						return
					}
					n := int(binary.LittleEndian.Uint32(hdr[1:]))
					off := int(binary.LittleEndian.Uint32(hdr[5:])) % rawSpan
					var err error
					switch hdr[0] {
					case 'R':
						_, err = nc.Write(mem[off : off+n])
					case 'W':
						if _, err = io.ReadFull(br, mem[off:off+n]); err == nil {
							_, err = nc.Write(hdr[:1])
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln
}

type rawConn struct {
	net.Conn
	br *bufio.Reader
}

func dialRaw(addr string) (*rawConn, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &rawConn{nc, bufio.NewReaderSize(nc, 64<<10)}, nil
}

const rawSpan = 32 << 20

func (r *rawConn) read(p []byte, off int) error {
	var hdr [9]byte
	hdr[0] = 'R'
	binary.LittleEndian.PutUint32(hdr[1:], uint32(len(p)))
	binary.LittleEndian.PutUint32(hdr[5:], uint32(off))
	if _, err := r.Write(hdr[:]); err != nil {
		return err
	}
	_, err := io.ReadFull(r.br, p)
	return err
}

func (r *rawConn) write(p []byte, off int) error {
	var hdr [9]byte
	hdr[0] = 'W'
	binary.LittleEndian.PutUint32(hdr[1:], uint32(len(p)))
	binary.LittleEndian.PutUint32(hdr[5:], uint32(off))
	bufs := net.Buffers{hdr[:], p}
	if _, err := bufs.WriteTo(r.Conn); err != nil {
		return err
	}
	_, err := r.br.ReadByte()
	return err
}

// respConn is a minimal RESP2 client: enough for SET and GET.
type respConn struct {
	nc net.Conn
	br *bufio.Reader
}

func startRedis(b *testing.B, path string) (*respConn, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir := b.TempDir()
	cmd := exec.Command(path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"), "--protected-mode", "no")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var nc net.Conn
	for i := 0; ; i++ {
		if nc, err = net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			break
		}
		if i == 200 {
			return nil, err
		}
		time.Sleep(10 * time.Millisecond) // the server is starting: nothing to wait on but its port
	}
	b.Cleanup(func() { nc.Close() })
	r := &respConn{nc: nc, br: bufio.NewReaderSize(nc, 64<<10)}
	return r, r.set("ping", []byte("pong"))
}

func (r *respConn) cmd(args ...[]byte) error {
	hdr := fmt.Appendf(nil, "*%d\r\n", len(args))
	bufs := net.Buffers{}
	for _, a := range args {
		hdr = fmt.Appendf(hdr, "$%d\r\n", len(a))
		bufs = append(bufs, hdr, a)
		hdr = []byte("\r\n")
	}
	bufs = append(bufs, hdr)
	_, err := bufs.WriteTo(r.nc)
	return err
}

func (r *respConn) set(key string, v []byte) error {
	if err := r.cmd([]byte("SET"), []byte(key), v); err != nil {
		return err
	}
	line, err := r.br.ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+OK\r\n" {
		return fmt.Errorf("redis SET: %q", line)
	}
	return nil
}

func (r *respConn) get(key string, dst []byte) error {
	if err := r.cmd([]byte("GET"), []byte(key)); err != nil {
		return err
	}
	line, err := r.br.ReadString('\n')
	if err != nil {
		return err
	}
	if line[0] != '$' {
		return fmt.Errorf("redis GET: %q", line)
	}
	n, err := strconv.Atoi(line[1 : len(line)-2])
	if err != nil || n != len(dst) {
		return fmt.Errorf("redis GET: %d bytes for %d", n, len(dst))
	}
	if _, err := io.ReadFull(r.br, dst); err != nil {
		return err
	}
	_, err = r.br.Discard(2)
	return err
}
