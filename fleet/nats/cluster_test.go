package nats_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	fleetnats "cxlpool/fleet/nats"
)

// testUser and testPassword are the cluster's one account.
const testUser, testPassword = "fleet", "s3cret-fleet"

// natsServer is the external server binary (Debian's nats-server); tests
// that need a real cluster skip without it, saying so.
func natsServer(t testing.TB) string {
	t.Helper()
	for _, p := range []string{"nats-server", "/usr/sbin/nats-server", "/usr/bin/nats-server"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Skip("nats-server is not installed (apt-get install nats-server; .ci/run installs it): the real-cluster tests need it")
	return ""
}

// freePort picks a port nothing listens on now, below Linux's ephemeral
// range (32768 and up): a port the kernel handed out as free (":0") is
// also what it hands the next outgoing connection of any test running
// beside this one, which then holds it when nats-server binds it.
func freePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		port := 20000 + rand.IntN(12000)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatal("no free port below the ephemeral range")
	return 0
}

// node is one nats-server of a test cluster.
type node struct {
	name, conf, URL string
	cmd             *exec.Cmd
	done            chan struct{}
	t               testing.TB
	bin             string
}

// cluster is three nats-server nodes on loopback with JetStream and
// password authentication.
type cluster struct {
	nodes []*node
}

func startCluster(t testing.TB) *cluster {
	t.Helper()
	bin := natsServer(t)
	// A port taken between freePort and the server's bind makes a node
	// exit at once; the cluster then starts again on other ports.
	for attempt := 1; ; attempt++ {
		c, err := tryCluster(t, bin)
		if err == nil {
			return c
		}
		if attempt == 3 {
			t.Fatalf("start the test cluster: %v", err)
		}
		t.Logf("start the test cluster (attempt %d): %v; again on other ports", attempt, err)
	}
}

// tryCluster starts the three nodes and waits until each listens for
// clients, or fails (killing them) when one exits first.
func tryCluster(t testing.TB, bin string) (*cluster, error) {
	dir := t.TempDir()
	const n = 3
	ports, cports := make([]int, n), make([]int, n)
	for i := range n {
		ports[i], cports[i] = freePort(t), freePort(t)
	}
	c := &cluster{}
	for i := range n {
		var routes []string
		for j := range n {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", cports[j]))
			}
		}
		nd := &node{name: fmt.Sprintf("n%d", i+1), URL: fmt.Sprintf("nats://127.0.0.1:%d", ports[i]), t: t, bin: bin}
		nd.conf = filepath.Join(dir, nd.name+".conf")
		conf := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
jetstream { store_dir: %q, max_memory_store: 64MB, max_file_store: 1GB }
cluster { name: fleettest, listen: 127.0.0.1:%d, routes: [%s] }
authorization { users: [ { user: %s, password: %s } ] }
`, nd.name, ports[i], filepath.Join(dir, nd.name), cports[i], strings.Join(routes, ", "), testUser, testPassword)
		if err := os.WriteFile(nd.conf, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		nd.start()
		c.nodes = append(c.nodes, nd)
	}
	for _, nd := range c.nodes {
		if err := nd.listening(); err != nil {
			for _, nd := range c.nodes {
				nd.kill()
			}
			return nil, err
		}
	}
	t.Cleanup(func() {
		for _, nd := range c.nodes {
			nd.kill()
		}
		if !t.Failed() {
			return
		}
		for _, nd := range c.nodes {
			b, _ := os.ReadFile(nd.conf + ".log")
			if len(b) > 4096 {
				b = b[len(b)-4096:]
			}
			t.Logf("node %s's log (its end):\n%s", nd.name, b)
		}
	})
	return c, nil
}

// listening waits until the node accepts client connections; it fails if
// the server exits first (a port in use) or takes over a minute.
func (nd *node) listening() error {
	addr := strings.TrimPrefix(nd.URL, "nats://")
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case <-nd.done:
			b, _ := os.ReadFile(nd.conf + ".log")
			return fmt.Errorf("node %s exited at start: %s", nd.name, strings.TrimSpace(string(b)))
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s: not listening on %s after a minute", nd.name, addr)
		}
		time.Sleep(20 * time.Millisecond) // a poll interval, not a wait for an event
	}
}

func (nd *node) start() {
	nd.t.Helper()
	nd.cmd = exec.Command(nd.bin, "-c", nd.conf)
	// The server's own log, appended across restarts: a failing test
	// shows it (startCluster), so a node that could not start or join
	// says why instead of leaving a placement error to guess from.
	logf, err := os.OpenFile(nd.conf+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		nd.t.Fatal(err)
	}
	nd.cmd.Stdout, nd.cmd.Stderr = logf, logf
	if err := nd.cmd.Start(); err != nil {
		logf.Close()
		nd.t.Fatalf("start %s: %v", nd.name, err)
	}
	nd.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); logf.Close(); close(done) }(nd.cmd, nd.done)
}

// kill ends the node with SIGKILL: no goodbye to its peers or clients.
func (nd *node) kill() {
	if nd.cmd == nil {
		return
	}
	nd.cmd.Process.Signal(syscall.SIGKILL)
	<-nd.done
	nd.cmd = nil
}

func (c *cluster) urls(idx ...int) []string {
	var out []string
	for _, i := range idx {
		out = append(out, c.nodes[i].URL)
	}
	return out
}

// credsFile writes USER:PASSWORD credentials, mode 0600.
func credsFile(t testing.TB, user, pass string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fleet.creds")
	if err := os.WriteFile(p, []byte(user+":"+pass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// verboseLogger shows a plane's warnings with go test -v, else nothing.
func verboseLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

// connect polls Connect until the cluster has elected its JetStream meta
// leader and the assets exist (bounded by a deadline, not a sleep).
func connect(t testing.TB, cfg fleetnats.Config) *fleetnats.Plane {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		p, err := fleetnats.Connect(ctx, cfg)
		cancel()
		if err == nil {
			t.Cleanup(func() { p.Close() })
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("connect to %v: %v", cfg.URLs, err)
		}
		time.Sleep(100 * time.Millisecond) // a retry interval, not a wait for an event
	}
}
