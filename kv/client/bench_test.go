package client_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"sort"
	"testing"
	"time"

	"cxlpool/kv/client"
	"cxlpool/kv/wire"
)

// BenchmarkLookup: one GET round trip (locate a key) over loopback TCP,
// beside the floor: a ping-pong of the same frame sizes with a server
// that does nothing. Reports p50 latency of each.
func BenchmarkLookup(b *testing.B) {
	b.Run("kv-get", func(b *testing.B) {
		r := newRig(b, "tcp")
		c, err := client.Dial(context.Background(), client.Config{Addr: r.addr, Namespace: "ns", Host: 0, Token: r.tok, Mapper: r.mapper})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		key := []byte("bench-key-0123456789abcdef")
		if err := c.Put(context.Background(), key, make([]byte, 4096)); err != nil {
			b.Fatal(err)
		}
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			t0 := time.Now()
			ps, _, err := c.Pin(context.Background(), [][]byte{key})
			if err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
			b.StopTimer()
			c.Unpin(context.Background(), ps) // outside the timing: one round trip is measured
			b.StartTimer()
		}
		reportP50(b, lat)
	})
	b.Run("tcp-floor", func(b *testing.B) {
		req, _ := wire.AppendRequest(nil, &wire.Request{Op: wire.OpGet, Flags: wire.FlagPin, Keys: [][]byte{[]byte("bench-key-0123456789abcdef")}})
		resp, _ := wire.AppendResponse(nil, &wire.Response{Op: wire.OpGet, Items: []wire.Item{{Status: wire.OK}}})
		resp = append(resp, make([]byte, wire.LocSize)...)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		go func() {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			defer nc.Close()
			r := bufio.NewReader(nc)
			buf := make([]byte, len(req))
			for {
				if _, err := io.ReadFull(r, buf); err != nil {
					return
				}
				if _, err := nc.Write(resp); err != nil {
					return
				}
			}
		}()
		nc, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		buf := make([]byte, len(resp))
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			t0 := time.Now()
			if _, err := nc.Write(req); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(nc, buf); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		reportP50(b, lat)
	})
}

func reportP50(b *testing.B, lat []time.Duration) {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
}

// BenchmarkBlocks: put then get of 256 KiB blocks through the client
// (reserve, write into the mapping, commit; locate, copy out, check),
// beside memcpy of the same bytes twice. MB/s of block bytes.
func BenchmarkBlocks(b *testing.B) {
	const size = 256 << 10
	val := make([]byte, size)
	for i := range val {
		val[i] = byte(i)
	}
	b.Run("kv-put-get", func(b *testing.B) {
		r := newRig(b, "tcp")
		c, err := client.Dial(context.Background(), client.Config{Addr: r.addr, Namespace: "ns", Host: 0, Token: r.tok, Mapper: r.mapper})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		b.SetBytes(size)
		b.ResetTimer()
		for i := range b.N {
			k := fmt.Appendf(nil, "b%d", i)
			if err := c.Put(context.Background(), k, val); err != nil {
				b.Fatal(err)
			}
			if _, err := c.Get(context.Background(), k); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			c.Delete(context.Background(), [][]byte{k}) // the test namespace holds 16 blocks
			b.StartTimer()
		}
	})
	b.Run("memcpy", func(b *testing.B) {
		pool := make([]byte, size)
		b.SetBytes(size)
		for range b.N {
			copy(pool, val)
			out := make([]byte, size)
			copy(out, pool)
		}
	})
}
