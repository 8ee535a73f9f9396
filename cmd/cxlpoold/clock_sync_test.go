package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/beevik/ntp"

	"cxlpool/internal/ntptest"
)

// ntpServer serves NTP on a loopback port, its clock ahead by skew; it
// returns the port.
func ntpServer(t *testing.T, skew time.Duration) (*ntptest.Server, string) {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := ntptest.Serve(conn, skew)
	t.Cleanup(func() { s.Close() })
	_, port, _ := net.SplitHostPort(conn.LocalAddr().String())
	return s, port
}

// testClockSync is a clockSync whose steps are recorded and whose
// resolver knows ntp.test (loopback) only.
func testClockSync(servers ...string) (*clockSync, *[]time.Duration, *[]string) {
	var steps []time.Duration
	var lookups []string
	s := newClockSync(func() (bool, []string) { return true, servers },
		func(d time.Duration) error { steps = append(steps, d); return nil },
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.lookup = func(_ context.Context, host string) ([]netip.Addr, error) {
		lookups = append(lookups, host)
		if host == "ntp.test" {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return s, &steps, &lookups
}

func TestClockSyncSteps(t *testing.T) {
	_, ahead := ntpServer(t, 3*time.Second)
	_, inStep := ntpServer(t, 0)
	dead, err := net.ListenPacket("udp", "127.0.0.1:0") // bound, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	for _, tc := range []struct {
		name    string
		servers []string
		addr    string // the server that answered
		stepped bool
		lookups string
	}{
		{"by name, stepped", []string{"ntp.test:" + ahead}, "127.0.0.1:" + ahead, true, "ntp.test"},
		{"in step", []string{"127.0.0.1:" + inStep}, "127.0.0.1:" + inStep, false, ""},
		{"unknown name, then the next", []string{"nope.test:" + ahead, "127.0.0.1:" + ahead}, "127.0.0.1:" + ahead, true, "nope.test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, steps, lookups := testClockSync(tc.servers...)
			res, err := s.syncOnce(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if res.Addr != tc.addr || res.Stepped != tc.stepped {
				t.Errorf("got answer from %s stepped %v, want %s stepped %v", res.Addr, res.Stepped, tc.addr, tc.stepped)
			}
			if got := strings.Join(*lookups, ","); got != tc.lookups {
				t.Errorf("names looked up: got %q, want %q", got, tc.lookups)
			}
			if !tc.stepped {
				if len(*steps) != 0 {
					t.Errorf("steps for an offset of %v: got %v, want none (threshold %v)", res.Offset, *steps, s.threshold)
				}
				return
			}
			// The offset is the skew, give or take the loopback's
			// round trip and the two clock readings.
			if len(*steps) != 1 || (*steps)[0] < 2900*time.Millisecond || (*steps)[0] > 3100*time.Millisecond {
				t.Errorf("steps: got %v, want one of about 3s", *steps)
			}
		})
	}
	t.Run("none answers", func(t *testing.T) {
		_, deadPort, _ := net.SplitHostPort(dead.LocalAddr().String())
		s, steps, _ := testClockSync("nope.test", "127.0.0.1:"+deadPort)
		s.query = func(addr string) (*ntp.Response, error) {
			return ntp.QueryWithOptions(addr, ntp.QueryOptions{Timeout: 200 * time.Millisecond})
		}
		_, err := s.syncOnce(context.Background())
		if err == nil || !strings.Contains(err.Error(), "nope.test: resolve") || !strings.Contains(err.Error(), "127.0.0.1:"+deadPort) {
			t.Errorf("got %v, want errors naming both servers", err)
		}
		if len(*steps) != 0 {
			t.Errorf("steps: got %v, want none", *steps)
		}
	})
	t.Run("off", func(t *testing.T) {
		s, _, _ := testClockSync("127.0.0.1:" + ahead)
		s.settings = func() (bool, []string) { return false, []string{"127.0.0.1:" + ahead} }
		if _, err := s.syncOnce(context.Background()); !errors.Is(err, errNTPDisabled) {
			t.Errorf("got %v, want errNTPDisabled", err)
		}
	})
}

// TestClockSyncRun: a round at start, another when woken.
func TestClockSyncRun(t *testing.T) {
	srv, port := ntpServer(t, time.Second)
	stepped := make(chan time.Duration, 4)
	s := newClockSync(func() (bool, []string) { return true, []string{"127.0.0.1:" + port} },
		func(d time.Duration) error { stepped <- d; return nil }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.run(ctx); close(done) }()
	deadline := time.After(10 * time.Second)
	for round := 1; round <= 2; round++ {
		select {
		case <-stepped:
		case <-deadline:
			t.Fatalf("round %d: no step within 10s", round)
		}
		if round == 1 {
			s.Wake()
		}
	}
	cancel()
	<-done
	if n := len(srv.Asked()); n != 2 {
		t.Errorf("server asked %d times, want 2 (start and wake)", n)
	}
}
