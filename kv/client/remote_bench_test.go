package client_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"cxlpool/dcd"
	"cxlpool/kv"
	"cxlpool/kv/client"
)

// BenchmarkRemoteGet: a remote rack's GetBatchInto of 256 KiB and 2 MiB
// blocks into its buffers (index GET with PIN, READ through the chunk's
// export, the UNPIN posted), beside
// raw TCP moving the same bytes over loopback in the same run (one
// request, one answer of the block's length, from a buffer of the same
// size as the blocks' working set). Two racks take turns: one that
// remembers where blocks were (the default, having read the working set
// once before the timing: the READ starts with the GET and is kept when
// the block has not moved, as every block here has not), and one that
// remembers nothing (Locations -1: the READ waits for the GET's answer,
// as a block read for the first time does). Reported:
// MB/s of each, and x-raw-tcp and x-raw-tcp-cold, each rack's throughput
// over raw TCP's (goal ≥ 0.8), and kept/get, the reads ahead the warm
// rack kept per block. batch=8 is GetBatchInto of 8 blocks (one GET, 8
// READs in flight) beside 8 raw requests pipelined on the one
// connection.
func BenchmarkRemoteGet(b *testing.B) {
	for _, batch := range []int{1, 8} {
		for _, size := range []int{256 << 10, 2 << 20} {
			b.Run(fmt.Sprintf("%dKiB/batch=%d", size>>10, batch), func(b *testing.B) { benchRemoteGet(b, size, batch) })
		}
	}
}

func benchRemoteGet(b *testing.B, size, batch int) {
	r := newBoxRig(b, withExports)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const chunk = 16 << 20
	ns, toks, err := r.app.KV.Create(ctx, kv.CreateRequest{Name: "bench", ChunkSize: chunk, Hosts: []dcd.HostID{0}})
	if err != nil {
		b.Fatal(err)
	}
	ra, err := r.app.KV.Export(ctx, "bench", "rack-bench")
	if err != nil {
		b.Fatal(err)
	}
	h0 := r.host(ctx, b, "bench", ns.Chunks[0].Tag.String(), 0, toks[0])
	n := chunk / size / 2 // a working set of half the chunk
	keys, vals := blockValues(n, size, 3)
	errs, err := h0.PutBatch(ctx, keys, vals)
	for i, e := range errs {
		if e != nil {
			b.Fatalf("put %d: %v", i, e)
		}
	}
	if err != nil {
		b.Fatal(err)
	}
	rack, err := r.rack(ctx, b, "bench", ra.Token)
	if err != nil {
		b.Fatal(err)
	}
	cold, err := r.rack(ctx, b, "bench", ra.Token, func(c *client.Config) { c.Locations = -1 })
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []*client.Client{rack, cold} {
		if _, err := c.Get(ctx, keys[0]); err != nil { // dial the export outside the timing
			b.Fatal(err)
		}
	}
	raw := startRawBlocks(b, n*size)
	rc, err := dialRawBlocks(raw)
	if err != nil {
		b.Fatal(err)
	}
	defer rc.Close()
	bufs := make([][]byte, batch)
	for k := range bufs {
		bufs[k] = make([]byte, size)
	}

	// Interleaved, one of each per iteration, so that the load of a
	// shared machine weighs on both alike.
	get := func(c *client.Client, ks [][]byte) {
		lens, errs, err := c.GetBatchInto(ctx, ks, bufs)
		if err != nil {
			b.Fatal(err)
		}
		for k, n := range lens {
			if errs[k] != nil || n != size {
				b.Fatalf("get: %d bytes, %v; want %d", n, errs[k], size)
			}
		}
	}
	// The remembering rack has read the working set once before the
	// timing, as a rack re-reading shared prefixes has: every timed get
	// of it reads ahead.
	for k := range keys {
		if _, errs, err := rack.GetBatchInto(ctx, keys[k:k+1], bufs[:1]); err != nil || errs[0] != nil {
			b.Fatal(err, errs[0])
		}
	}
	kept0, _ := rack.ReadAhead()
	var remote, coldd, rawd time.Duration
	b.ResetTimer()
	for i := range b.N {
		ks := make([][]byte, batch)
		offs := make([]int, batch)
		for k := range batch {
			at := (i*batch + k) % n
			ks[k], offs[k] = keys[at], at*size
		}
		// The racks take turns going first.
		first, second, d1, d2 := rack, cold, &remote, &coldd
		if i%2 == 1 {
			first, second, d1, d2 = cold, rack, &coldd, &remote
		}
		t0 := time.Now()
		get(first, ks)
		t1 := time.Now()
		get(second, ks)
		t2 := time.Now()
		// Into the same buffers.
		if err := rc.readMany(bufs, offs); err != nil {
			b.Fatal(err)
		}
		*d1 += t1.Sub(t0)
		*d2 += t2.Sub(t1)
		rawd += time.Since(t2)
	}
	b.StopTimer()
	kept, _ := rack.ReadAhead()
	mb := float64(b.N) * float64(batch*size) / 1e6
	b.ReportMetric(mb/remote.Seconds(), "rack-MB/s")
	b.ReportMetric(mb/coldd.Seconds(), "rack-cold-MB/s")
	b.ReportMetric(mb/rawd.Seconds(), "raw-tcp-MB/s")
	b.ReportMetric(rawd.Seconds()/remote.Seconds(), "x-raw-tcp")
	b.ReportMetric(rawd.Seconds()/coldd.Seconds(), "x-raw-tcp-cold")
	b.ReportMetric(float64(kept-kept0)/float64(b.N*batch), "kept/get")
}

// startRawBlocks serves raw reads: a request is the length and offset
// (4 bytes each), the answer that many bytes of a buffer of span bytes.
func startRawBlocks(b testing.TB, span int) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	mem := make([]byte, span)
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				var hdr [8]byte
				for {
					if _, err := io.ReadFull(nc, hdr[:]); err != nil {
						return
					}
					n, off := int(binary.LittleEndian.Uint32(hdr[:])), int(binary.LittleEndian.Uint32(hdr[4:]))
					if off+n > len(mem) {
						return
					}
					if _, err := nc.Write(mem[off : off+n]); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

type rawBlocks struct {
	net.Conn
	br *bufio.Reader
}

func dialRawBlocks(addr string) (*rawBlocks, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &rawBlocks{nc, bufio.NewReaderSize(nc, 64<<10)}, nil
}

// readMany sends every request, then reads every answer.
func (r *rawBlocks) readMany(ps [][]byte, offs []int) error {
	hdrs := make([]byte, 0, 8*len(ps))
	for k, p := range ps {
		hdrs = binary.LittleEndian.AppendUint32(hdrs, uint32(len(p)))
		hdrs = binary.LittleEndian.AppendUint32(hdrs, uint32(offs[k]))
	}
	if _, err := r.Write(hdrs); err != nil {
		return err
	}
	for _, p := range ps {
		if _, err := io.ReadFull(r.br, p); err != nil {
			return err
		}
	}
	return nil
}
