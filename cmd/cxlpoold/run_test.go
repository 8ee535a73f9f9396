package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"cxlpool/host/vbox"
)

// syncBuffer collects what run prints while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startDaemon runs the daemon as `make run` does (plain HTTP so the test
// needs no certificate) until the returned stop is called.
func startDaemon(t *testing.T, data string) (addr string, out *syncBuffer, stop func()) {
	t.Helper()
	addr = freeAddr(t)
	out = &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--data", data, "--listen", addr, "--http", "--fleet-client-listen", "127.0.0.1:0", "--sim-capacity", "16GiB", "--log-level", "error"}, out, io.Discard)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "Redfish API at") {
		select {
		case err := <-done:
			t.Fatalf("run ended before serving: %v\n%s", err, out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon did not start:\n%s", out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return addr, out, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}
}

func TestRunServesAndRestarts(t *testing.T) {
	data := filepath.Join(t.TempDir(), "var")
	t.Setenv("CXLPOOL_ADMIN_PASSWORD", "")
	addr, out, stop := startDaemon(t, data)
	for _, want := range []string{"8 heads", "16 GiB in 2 regions", "initial Redfish account: user admin"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("startup output lacks %q:\n%s", want, out)
		}
	}
	var resp *http.Response
	var err error
	for i := 0; i < 100; i++ { // the listener opens just after the banner
		if resp, err = http.Get("http://" + addr + "/redfish/v1"); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("GET service root: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /redfish/v1 = %d, want 200", resp.StatusCode)
	}
	stop()

	fi, err := os.Stat(filepath.Join(data, "initial-admin-password"))
	if err != nil {
		t.Fatalf("initial password file: %v", err)
	}
	if mode := fi.Mode().Perm(); mode != 0o600 {
		t.Errorf("initial password file mode %v, want 0600", mode)
	}
	// A restart keeps the ledger and the accounts: no new password.
	_, out2, stop2 := startDaemon(t, data)
	stop2()
	if strings.Contains(out2.String(), "initial Redfish account") {
		t.Errorf("restart generated a new admin password:\n%s", out2)
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	tests := [][]string{
		{"--sim-capacity", "lots"},
		{"--log-level", "chatty"},
		{"extra-argument"},
		{"--sim-workload", "busy"},
		{"--chmu", "@0x1000"},
		{"--chmu", "bar@-8"},
		{"--external-host", "2=tcp://127.0.0.1:1"},
		{"--fleet", "http://a:4222"},
		{"--fleet", "nats://a:4222"},         // an external cluster without credentials
		{"--fleet-listen", "127.0.0.1:6222"}, // a cluster of boxes without a shared secret
		{"--fleet-ttl", "1s"},
		{"--aggregator", "https://agg/redfish/v1"}, // without credentials
	}
	for _, args := range tests {
		if err := run(context.Background(), args, io.Discard, io.Discard); err == nil {
			t.Errorf("run(%q) succeeded, want an error", args)
		}
	}
}

// --external-host hands a head of the built-in box to an external host:
// its socket gives the head's identity to the host's backend.
func TestRunExternalHost(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "h2.sock")
	out := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--data", filepath.Join(dir, "var"), "--listen", freeAddr(t), "--http", "--fleet-client-listen", "127.0.0.1:0", "--sim-capacity", "16GiB",
			"--sim-workload", "none", "--external-host", "2=unix:" + sock, "--log-level", "error"}, out, io.Discard)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "Redfish API at") {
		select {
		case err := <-done:
			t.Fatalf("run ended: %v\n%s", err, out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon did not start:\n%s", out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(out.String(), "external hosts 2=unix:"+sock) {
		t.Errorf("startup output does not name the external host:\n%s", out)
	}
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	b, err := vbox.Dial(dctx, "unix:"+sock, vbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	id, err := b.Identity(dctx)
	if err != nil || id.LD != 2 {
		t.Errorf("Identity() = %+v, %v; want LD 2", id, err)
	}
	_ = b.Close()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
}
