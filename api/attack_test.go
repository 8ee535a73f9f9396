package api_test

// Attacks on the Redfish listener from anyone who can reach it (issue
// #13): floods of connections that never authenticate. Each runs over
// loopback only, bounded in attempts and time, with the caps set low; it
// asserts that a legitimate client is still served during and after the
// flood, that the connections the service holds for the attackers stay
// under the caps, and that memory stays under a stated bound. The
// attackers run in a child process (this test binary again), so that the
// memory measured is the service's alone. `make attack` runs every
// TestAttack of the repository.

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cxlpool/api"
	"cxlpool/api/apitest"
)

// Caps and flood sizes of the attack tests.
const (
	attackMaxUnauth  = 32
	attackPerSource  = 8
	attackSources    = 8    // 127.0.0.2 ... 127.0.0.9
	attackConcurrent = 1024 // connections the attackers try to hold at once
	// attackMemBound is the growth of the service's heap and stacks
	// allowed while a flood holds everything it can: attackMaxUnauth
	// connections of at most 64 KiB each (a TLS connection, a 16 KiB
	// login body, buffers, two goroutines), and room for the collector.
	// Without the caps the service would hold attackConcurrent of them.
	attackMemBound = attackMaxUnauth*64<<10 + 6<<20
)

// flood is attackConcurrent goroutines opening connections from
// attackSources loopback addresses (not the legitimate client's
// 127.0.0.1), each doing hold on its connection until the server closes
// it, then again, until stop or budget attempts in all.
type flood struct {
	budget   int64
	attempts atomic.Int64
	stopped  chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
}

func startFlood(t *testing.T, addr string, budget int64, hold func(net.Conn)) *flood {
	f := &flood{budget: budget, stopped: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	for i := range attackConcurrent {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%attackSources))}}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for f.attempts.Add(1) <= f.budget {
				select {
				case <-f.stopped:
					return
				default:
				}
				c, err := d.Dial("tcp", addr)
				if err != nil {
					continue
				}
				f.mu.Lock()
				f.conns[c] = struct{}{}
				f.mu.Unlock()
				// The safety net only: the service closes first.
				c.SetDeadline(time.Now().Add(time.Minute))
				hold(c)
				f.mu.Lock()
				delete(f.conns, c)
				f.mu.Unlock()
				c.Close()
			}
		}()
	}
	t.Cleanup(f.stop)
	return f
}

// stop ends the flood: every attacker connection is closed.
func (f *flood) stop() {
	select {
	case <-f.stopped:
		return
	default:
	}
	close(f.stopped)
	f.closeAll()
	f.wg.Wait()
}

func (f *flood) closeAll() {
	for {
		f.mu.Lock()
		for c := range f.conns {
			c.Close()
		}
		n := len(f.conns)
		f.mu.Unlock()
		if n == 0 {
			return
		}
		runtime.Gosched()
	}
}

// attacker is a flood run by a child process.
type attacker struct {
	budget   int64
	stdin    io.WriteCloser
	out      strings.Builder
	exited   chan struct{}
	stopOnce sync.Once
}

// startAttacker runs the flood of mode (see attackHold) against addr in
// a child process until stop.
func startAttacker(t *testing.T, addr string, budget int64, mode string) *attacker {
	t.Helper()
	if c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).Dial("tcp", addr); err != nil {
		t.Skipf("cannot dial from 127.0.0.2 (loopback is not a /8 here): %v", err)
	} else {
		c.Close()
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAttackerProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "CXLPOOL_ATTACKER="+addr+" "+mode+" "+strconv.FormatInt(budget, 10))
	a := &attacker{budget: budget, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &a.out, &a.out
	var err error
	if a.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		cmd.Wait()
		close(a.exited)
	}()
	t.Cleanup(func() { a.stop() })
	return a
}

// stop ends the child's flood and returns its attempts.
func (a *attacker) stop() int64 {
	a.stopOnce.Do(func() { a.stdin.Close() })
	<-a.exited
	for _, l := range strings.Split(a.out.String(), "\n") {
		if v, ok := strings.CutPrefix(l, "attempts "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return -1
}

// attackHold is what each attacker does on a connection, by mode.
func attackHold(mode string) func(net.Conn) {
	tlsFirst := func(c net.Conn, then func(net.Conn)) {
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true})
		if tc.HandshakeContext(context.Background()) == nil {
			then(tc)
		}
	}
	switch mode {
	case "slowlogin":
		return slowLogin
	case "slowlogin-tls":
		return func(c net.Conn) { tlsFirst(c, slowLogin) }
	case "idle": // a quarter complete the TLS handshake first
		var n atomic.Int64
		idle := func(c net.Conn) { io.Copy(io.Discard, c) }
		return func(c net.Conn) {
			if n.Add(1)%4 == 0 {
				tlsFirst(c, idle)
			} else {
				idle(c)
			}
		}
	}
	panic("attack mode " + mode)
}

// TestAttackerProcess is the attackers' child process (startAttacker);
// run directly it does nothing. It floods until its stdin closes or its
// budget is spent, then prints its attempts.
func TestAttackerProcess(t *testing.T) {
	spec := os.Getenv("CXLPOOL_ATTACKER")
	if spec == "" {
		t.Skip("the attackers' child process of the attack tests")
	}
	var addr, mode string
	var budget int64
	if _, err := fmt.Sscan(spec, &addr, &mode, &budget); err != nil {
		t.Fatal(err)
	}
	f := startFlood(t, addr, budget, attackHold(mode))
	spent := make(chan struct{})
	go func() { f.wg.Wait(); close(spent) }()
	stdin := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(stdin) }()
	select {
	case <-spent:
	case <-stdin:
	}
	f.stop()
	fmt.Printf("attempts %d\n", min(f.attempts.Load(), budget))
}

// connMetrics reads the listener's connection metrics (out of band, over
// env's own listener, which the flood does not touch).
type connMetrics struct {
	unauth, refused, evicted int
}

func readConnMetrics(t *testing.T, env *apitest.Env) connMetrics {
	t.Helper()
	r := env.Admin.Get("/metrics")
	if r.Status != http.StatusOK {
		t.Fatalf("metrics: got %s", r)
	}
	var m connMetrics
	sc := bufio.NewScanner(strings.NewReader(string(r.Body)))
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		n, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		switch {
		case name == `cxlpool_http_connections{state="unauthenticated"}`:
			m.unauth = int(n)
		case strings.HasPrefix(name, "cxlpool_http_connections_refused_total"):
			m.refused += int(n)
		case name == "cxlpool_http_connections_evicted_total":
			m.evicted = int(n)
		}
	}
	return m
}

// waitFlooded polls until the caps are reached: every unauthenticated slot
// is taken and newcomers are being refused or evicted.
func waitFlooded(t *testing.T, env *apitest.Env, f *attacker) connMetrics {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		m := readConnMetrics(t, env)
		if m.unauth > attackMaxUnauth {
			t.Fatalf("%d unauthenticated connections held, cap %d", m.unauth, attackMaxUnauth)
		}
		if m.unauth == attackMaxUnauth && m.refused+m.evicted > 0 {
			return m
		}
		select {
		case <-f.exited:
			t.Fatalf("the flood ended (%d attempts spent?) before the caps were reached: %+v: %s", f.budget, m, f.out.String())
		default:
		}
	}
	t.Fatal("the flood did not reach the caps")
	return connMetrics{}
}

// memInUse is the heap and stacks in use after a collection.
func memInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse + ms.StackInuse)
}

func attackEnv(t *testing.T) *apitest.Env {
	return apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) {
		c.Transport.MaxUnauthConns = attackMaxUnauth
		c.Transport.MaxUnauthConnsPerSource = attackPerSource
	}})
}

// legitimate checks that a new client (its own connection, from
// 127.0.0.1) is served: Basic GET 200 and a login 201.
func legitimate(t *testing.T, base string) {
	t.Helper()
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}}
	req, _ := http.NewRequest(http.MethodGet, base+"/redfish/v1/Systems", nil)
	req.SetBasicAuth("admin", apitest.AdminPassword)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("legitimate GET: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("legitimate GET: got %d, want 200", resp.StatusCode)
	}
	resp, err = client.Post(base+"/redfish/v1/SessionService/Sessions", "application/json",
		strings.NewReader(`{"UserName":"admin","Password":"`+apitest.AdminPassword+`"}`))
	if err != nil {
		t.Fatalf("legitimate login: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("legitimate login: got %d, want 201", resp.StatusCode)
	}
}

// runFlood is an attack: the flood until the caps hold, the legitimate
// client and the memory bound during it, then both again after it.
func runFlood(t *testing.T, env *apitest.Env, base string, budget int64, mode string, during func()) {
	addr := base[strings.Index(base, "//")+2:]
	before := memInUse()
	start := time.Now()
	f := startAttacker(t, addr, budget, mode)
	waitFlooded(t, env, f)
	legitimate(t, base)
	if during != nil {
		during()
	}
	grew := memInUse() - before
	m2 := readConnMetrics(t, env)
	if m2.unauth > attackMaxUnauth {
		t.Errorf("%d unauthenticated connections held, cap %d", m2.unauth, attackMaxUnauth)
	}
	attempts := f.stop()
	t.Logf("%d attempts, %d connections at once, in %v; held %d unauthenticated connections (cap %d); refused %d, evicted %d; "+
		"service memory grew %.1f MiB (bound %.1f MiB)", attempts, attackConcurrent, time.Since(start).Round(time.Millisecond),
		m2.unauth, attackMaxUnauth, m2.refused, m2.evicted, float64(grew)/(1<<20), float64(attackMemBound)/(1<<20))
	if grew > attackMemBound {
		t.Errorf("memory grew by %.1f MiB during the flood, bound %.1f MiB", float64(grew)/(1<<20), float64(attackMemBound)/(1<<20))
	}
	for deadline := time.Now().Add(60 * time.Second); readConnMetrics(t, env).unauth > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the attackers' connections are still counted after they closed")
		}
	}
	legitimate(t, base)
}

// slowLogin sends a login's headers and the first bytes of its body, then
// nothing: the attack of issue #13 (20,100 of them took 715 MiB and every
// file descriptor).
func slowLogin(c net.Conn) {
	fmt.Fprintf(c, "POST /redfish/v1/SessionService/Sessions HTTP/1.1\r\nHost: box\r\nContent-Type: application/json\r\n"+
		"Content-Length: 16000\r\n\r\n{\"UserName\":\"admin\",\"Password\":\"")
	io.Copy(io.Discard, c)
}

// TestAttackSlowBodyLogin: slow login bodies from 8 addresses, 256 at a
// time, no credentials, over plain HTTP and HTTPS.
func TestAttackSlowBodyLogin(t *testing.T) {
	for _, tt := range []struct {
		name, mode string
		plain      bool
		budget     int64
	}{{"http", "slowlogin", true, 8000}, {"https", "slowlogin-tls", false, 4000}} {
		t.Run(tt.name, func(t *testing.T) {
			env := attackEnv(t)
			runFlood(t, env, serveOn(t, env, tt.plain), tt.budget, tt.mode, nil)
		})
	}
}

// TestAttackIdleConnections: connections that send nothing (not even a
// TLS ClientHello) or stop after the handshake, on the HTTPS port. A
// client that had authenticated before keeps its connection throughout.
func TestAttackIdleConnections(t *testing.T) {
	env := attackEnv(t)
	base := serveOn(t, env, false)
	var mu sync.Mutex
	var conns []string
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		mu.Lock()
		conns = append(conns, i.Conn.LocalAddr().String())
		mu.Unlock()
	}}
	admin := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func() {
		t.Helper()
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, base+"/redfish/v1/Chassis", nil)
		req.SetBasicAuth("admin", apitest.AdminPassword)
		resp, err := admin.Do(req)
		if err != nil {
			t.Fatalf("authenticated client: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("authenticated client: got %d, want 200", resp.StatusCode)
		}
	}
	get()
	runFlood(t, env, base, 8000, "idle", get)
	get()
	mu.Lock()
	defer mu.Unlock()
	for i, c := range conns {
		if c != conns[0] {
			t.Errorf("request %d used connection %s, want the first one %s (an authenticated connection was closed)", i, c, conns[0])
		}
	}
}
