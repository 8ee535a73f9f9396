package tcp_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	"cxlpool/rdma"
	"cxlpool/rdma/client"
	"cxlpool/rdma/internal/fake"
	"cxlpool/rdma/tcp"
)

// floodMemoryBound is what 1,100 idle connections (and the test's own
// client ends of them) may add to the heap and stacks. Before pending
// connections had small buffers and a budget, each of the 1,024 admitted
// cost 320 KiB: 320 MiB.
const floodMemoryBound = 16 << 20

// TestAttackIdleConnFlood: 1,100 connections that never send a preface,
// from 20 loopback addresses, then more of them arriving while a client
// with a valid token connects and reads. The pending budget stays within
// its bounds (the oldest pending connection of the biggest source goes
// first), the client is never refused, and memory stays bounded.
func TestAttackIdleConnFlood(t *testing.T) {
	const (
		sources   = 20 // 20 × 16 > 256: both bounds bite
		perSource = 55
		churn     = 300 // more idle connections while the client connects
	)
	env := fake.NewEnv(t, rdma.Config{})
	x := env.Export(t, rdma.PermRead)
	want := pattern(4096, 7)
	if _, err := env.File.WriteAt(want, int64(fake.DPA(0))); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The handshake deadline is long, as the attacker's 30 s were: only
	// the budget protects the port here.
	cfg := tcp.Config{Auth: env.Service, HandshakeTimeout: time.Minute}
	srv, err := tcp.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	addr := ln.Addr().String()
	const maxPending = 256 // the default

	// Loopback addresses other than 127.0.0.1 are the attacker's, so
	// the client's address is one the attack does not share.
	attacker := func(i int) *net.Dialer {
		return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%sources))}}
	}
	if c, err := attacker(0).Dial("tcp", addr); err != nil {
		t.Skipf("cannot dial from a second loopback address here: %v", err)
	} else {
		c.Close()
	}
	waitPending := func(n int, evicted uint64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for st := srv.Stats(); st.Pending != n || st.Evicted != evicted; st = srv.Stats() {
			if time.Now().After(deadline) {
				t.Fatalf("pending connections: got %+v, want %d pending, %d evicted", srv.Stats(), n, evicted)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitPending(0, 0)

	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range sources * perSource {
		c, err := attacker(i).Dial("tcp", addr)
		if err != nil {
			t.Fatalf("idle connection %d: %v", i, err)
		}
		idle = append(idle, c)
	}
	waitPending(maxPending, uint64(sources*perSource-maxPending))
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapInuse+after.StackInuse) - int64(before.HeapInuse+before.StackInuse)
	t.Logf("%d idle connections: %+v, heap and stacks grew %d KiB", len(idle), srv.Stats(), grown>>10)
	if grown > floodMemoryBound {
		t.Errorf("heap and stacks grew %d MiB under the flood, want at most %d MiB", grown>>20, floodMemoryBound>>20)
	}

	// More idle connections keep coming while the client connects.
	flood := make(chan error, 1)
	go func() {
		var err error
		for i := range churn {
			var c net.Conn
			if c, err = attacker(i).Dial("tcp", addr); err != nil {
				break
			}
			c.Close() // closed by the server soon anyway; keep the fds few
		}
		flood <- err
	}()
	read := func(name string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := client.Dial(ctx, client.Config{Addr: addr, Export: x.ID, Token: x.Token, Conns: 1})
		if err != nil {
			t.Fatalf("%s: client with a valid token: %v", name, err)
		}
		defer c.Close()
		got := make([]byte, len(want))
		if err := c.Read(ctx, got, 0); err != nil {
			t.Fatalf("%s: read: %v", name, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: read other bytes", name)
		}
	}
	for i := range 20 {
		read(fmt.Sprintf("client %d during the flood", i))
	}
	if err := <-flood; err != nil {
		t.Fatalf("flood: %v", err)
	}
	// Even from an address that holds its whole pending budget, a client
	// with a token gets in: it takes the oldest idle connection's place.
	read("client from the attacker's address")
	if st := srv.Stats(); st.Pending > maxPending {
		t.Errorf("after the flood: %+v, want at most %d pending", st, maxPending)
	}
}

// TestPendingBudget: the per-source bound closes that source's oldest
// pending connection, the total bound the biggest source's, and neither
// touches connections with a session.
func TestPendingBudget(t *testing.T) {
	env := fake.NewEnv(t, rdma.Config{})
	x := env.Export(t, rdma.PermRead)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := tcp.NewServer(tcp.Config{Auth: env.Service, HandshakeTimeout: time.Minute, MaxPending: 4, MaxPendingPerSource: 3})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	addr := ln.Addr().String()
	from := func(last byte) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, last)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Skipf("cannot dial from 127.0.0.%d here: %v", last, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	closed := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := c.Read(make([]byte, 1))
		return err != nil && !isTimeout(err)
	}
	open := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		return isTimeout(err)
	}
	settle := func(n int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for st := srv.Stats(); st.Pending+int(st.Evicted) < n; st = srv.Stats() {
			if time.Now().After(deadline) {
				t.Fatalf("server saw %+v, want %d connections", st, n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// A session holder from the busiest address is never counted.
	holder, err := client.Dial(context.Background(), client.Config{Addr: addr, Export: x.ID, Token: x.Token, Conns: 1,
		Dial: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext})
	if err != nil {
		t.Skipf("cannot dial from 127.0.0.2 here: %v", err)
	}
	defer holder.Close()

	a1, a2, a3 := from(2), from(2), from(2)
	settle(3)
	a4 := from(2) // the per-source bound: a1 goes
	settle(4)
	if !closed(a1) {
		t.Error("oldest pending connection of a source over its bound still open")
	}
	b1 := from(3) // 4 pending now: the total bound is reached
	settle(5)
	b2 := from(3) // the total bound: the biggest source (127.0.0.2) loses a2
	settle(6)
	if !closed(a2) {
		t.Error("oldest pending connection of the biggest source still open")
	}
	for i, c := range []net.Conn{a3, a4, b1, b2} {
		if !open(c) {
			t.Errorf("pending connection %d closed, want it kept", i)
		}
	}
	if st := srv.Stats(); st.Pending != 4 || st.Authenticated != 1 || st.Evicted != 2 {
		t.Errorf("stats: got %+v, want 4 pending, 1 authenticated, 2 evicted", st)
	}
	if err := holder.Read(context.Background(), make([]byte, 8), 0); err != nil {
		t.Errorf("session holder after the evictions: %v", err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
