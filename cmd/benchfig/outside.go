package main

import (
	"context"
	"encoding/binary"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"cxlpool/internal/rawio"
	"cxlpool/rdma/client"
)

// benchLine prints one measurement as a go test benchmark line of the
// package "outside", so table reads it like the rest.
func benchLine(w io.Writer, name string, ops int, elapsed time.Duration, p50, p99 time.Duration, mbps float64) error {
	nsop := 0.0
	if ops > 0 {
		nsop = float64(elapsed.Nanoseconds()) / float64(ops)
	}
	_, err := fmt.Fprintf(w, "pkg: outside\nBenchmark%s\t%d\t%.0f ns/op\t%.0f p50-ns\t%.0f p99-ns\t%g MB/s\n",
		name, max(ops, 1), nsop, float64(p50.Nanoseconds()), float64(p99.Nanoseconds()), mbps)
	return err
}

// maxRawSize bounds what a raw-bench request may ask for.
const maxRawSize = 1 << 30

// rawServeCmd answers each 4-byte big-endian size with that many bytes,
// on every connection, until ctx ends: the least a server can do for the
// reads export bench makes, with the export server's system calls (raw
// ones for small reads and writes, internal/rawio) and, like it, no
// polling for the next request.
func rawServeCmd(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("%w: raw-serve ADDR", errUsage)
	}
	ln, err := net.Listen("tcp", args[0])
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); ln.Close() }()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go serveRaw(c)
	}
}

func serveRaw(nc net.Conn) {
	defer nc.Close()
	c := rawio.New(nc)
	var hdr [4]byte
	var buf []byte
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n == 0 || n > maxRawSize {
			return
		}
		if cap(buf) < int(n) {
			buf = make([]byte, n)
		}
		if _, err := c.Write(buf[:n]); err != nil {
			return
		}
	}
}

// rawBench is one connection, one read of size bytes at a time, for d,
// with the export client's shape: its small reads and writes are raw
// system calls (internal/rawio) and a wait for an answer polls for poll
// before it sleeps (poll <= 0: it sleeps at once).
func rawBench(ctx context.Context, addr string, size int, d, poll time.Duration) (ops int, elapsed, p50, p99 time.Duration, err error) {
	var dialer net.Dialer
	nc, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	defer nc.Close()
	c := rawio.New(nc)
	c.SetPoll(poll)
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(size))
	buf := make([]byte, size)
	lat := make([]time.Duration, 0, 1<<16)
	start := time.Now()
	for ctx.Err() == nil {
		t0 := time.Now()
		if _, err := c.Write(hdr[:]); err != nil {
			return 0, 0, 0, 0, err
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return 0, 0, 0, 0, err
		}
		t1 := time.Now()
		lat = append(lat, t1.Sub(t0))
		if t1.Sub(start) >= d {
			break
		}
	}
	elapsed = time.Since(start)
	if len(lat) == 0 {
		return 0, 0, 0, 0, ctx.Err()
	}
	slices.Sort(lat)
	return len(lat), elapsed, lat[len(lat)/2], lat[len(lat)*99/100], nil
}

func rawBenchCmd(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("benchfig raw-bench", flag.ContinueOnError)
	addr := fs.String("addr", "", "raw-serve's `host:port`")
	size := fs.Int("size", 64, "bytes per read")
	d := fs.Duration("duration", 2*time.Second, "how long to measure")
	name := fs.String("name", "", "the benchmark line's `name` (default RawSIZE)")
	poll := fs.Duration("poll", client.DefaultPoll, "how long a wait for an answer polls before it sleeps, as poolctl export bench's --poll (0: not at all)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *addr == "" || *size <= 0 || *size > maxRawSize || *d <= 0 || *poll < 0 || *poll > client.MaxPoll {
		return fmt.Errorf("%w: raw-bench -addr ADDR -size 1..%d -duration D [-poll 0..%v]", errUsage, maxRawSize, client.MaxPoll)
	}
	if *name == "" {
		*name = "Raw" + strconv.Itoa(*size)
	}
	ops, el, p50, p99, err := rawBench(ctx, *addr, *size, *d, *poll)
	if err != nil {
		return fmt.Errorf("raw-bench %s: %w", *addr, err)
	}
	return benchLine(stdout, *name, ops, el, p50, p99, float64(ops)*float64(*size)/el.Seconds()/1e6)
}

// poolctlCmd reads `poolctl --json export bench` output.
func poolctlCmd(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) != 1 {
		return fmt.Errorf("%w: poolctl NAME < export-bench.json", errUsage)
	}
	var b struct {
		Ops        int     `json:"ops"`
		ElapsedSec float64 `json:"elapsed_seconds"`
		MBps       float64 `json:"mb_per_second"`
		P50Micros  float64 `json:"p50_microseconds"`
		P99Micros  float64 `json:"p99_microseconds"`
	}
	if err := json.NewDecoder(stdin).Decode(&b); err != nil {
		return fmt.Errorf("poolctl export bench output: %w", err)
	}
	us := func(v float64) time.Duration { return time.Duration(v * 1e3) }
	return benchLine(stdout, args[0], b.Ops, time.Duration(b.ElapsedSec*1e9), us(b.P50Micros), us(b.P99Micros), b.MBps)
}

// redisCmd reads `redis-benchmark --csv` output (Redis 7: "test","rps",
// "avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms",
// "p99_latency_ms","max_latency_ms") and prints the first test's line;
// size is the value size, for MB/s.
func redisCmd(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) != 2 {
		return fmt.Errorf("%w: redis NAME SIZE < redis-benchmark.csv", errUsage)
	}
	size, err := strconv.Atoi(args[1])
	if err != nil || size <= 0 {
		return fmt.Errorf("%w: redis NAME SIZE: size %q", errUsage, args[1])
	}
	recs, err := csv.NewReader(stdin).ReadAll()
	if err != nil {
		return fmt.Errorf("redis-benchmark output: %w", err)
	}
	if len(recs) < 2 {
		return errors.New("redis-benchmark output: no result line")
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[strings.TrimSpace(h)] = i
	}
	get := func(k string) (float64, error) {
		i, ok := col[k]
		if !ok || i >= len(recs[1]) {
			return 0, fmt.Errorf("redis-benchmark output: no %q column (Redis 7's --csv has it)", k)
		}
		return strconv.ParseFloat(recs[1][i], 64)
	}
	rps, err := get("rps")
	if err != nil {
		return err
	}
	p50, err := get("p50_latency_ms")
	if err != nil {
		return err
	}
	p99, err := get("p99_latency_ms")
	if err != nil {
		return err
	}
	ms := func(v float64) time.Duration { return time.Duration(v * 1e6) }
	el := time.Second
	return benchLine(stdout, args[0], int(rps), el, ms(p50), ms(p99), rps*float64(size)/1e6)
}
