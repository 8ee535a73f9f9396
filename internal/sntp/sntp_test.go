package sntp

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// putNTPTime encodes t as a 64-bit NTP timestamp.
func putNTPTime(b []byte, t time.Time) {
	sec := uint64(t.Unix() + ntpEpochOffset)
	frac := uint64(t.Nanosecond()) << 32 / 1e9
	binary.BigEndian.PutUint32(b, uint32(sec))
	binary.BigEndian.PutUint32(b[4:], uint32(frac))
}

// fakeServer is an NTP server on loopback whose clock is ahead of the
// local one by skew. edit, if set, changes each reply before it is sent.
type fakeServer struct {
	conn  net.PacketConn
	skew  time.Duration
	edit  func(reply []byte)
	mu    sync.Mutex
	asked int
}

func newFakeServer(t *testing.T, skew time.Duration, edit func([]byte)) *fakeServer {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{conn: conn, skew: skew, edit: edit}
	done := make(chan struct{})
	t.Cleanup(func() { conn.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 512)
		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			if n < packetLen || buf[0]&7 != modeClient {
				continue
			}
			f.mu.Lock()
			f.asked++
			f.mu.Unlock()
			now := time.Now().Add(f.skew)
			reply := make([]byte, packetLen)
			reply[0] = 0<<6 | version<<3 | modeServer
			reply[1] = 2 // stratum
			copy(reply[12:16], "GPS\x00")
			copy(reply[24:32], buf[40:48]) // originate = the request's transmit
			putNTPTime(reply[32:40], now)
			putNTPTime(reply[40:48], now)
			if f.edit != nil {
				f.edit(reply)
			}
			_, _ = conn.WriteTo(reply, from)
		}
	}()
	return f
}

func (f *fakeServer) addr() string { return f.conn.LocalAddr().String() }

func (f *fakeServer) queries() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asked
}

func near(got, want, tolerance time.Duration) bool {
	d := got - want
	return d <= tolerance && d >= -tolerance
}

func TestQuery(t *testing.T) {
	for _, tc := range []struct {
		name    string
		skew    time.Duration
		edit    func([]byte)
		wantErr string
	}{
		{name: "ahead an hour", skew: time.Hour},
		{name: "behind a day", skew: -24 * time.Hour},
		{name: "in step"},
		{name: "kiss of death", edit: func(b []byte) { b[1] = 0; copy(b[12:16], "RATE") }, wantErr: `kiss-o'-death "RATE"`},
		{name: "unsynchronised", edit: func(b []byte) { b[0] |= liAlarm << 6 }, wantErr: "not synchronised"},
		{name: "client mode", edit: func(b []byte) { b[0] = b[0]&^7 | modeClient }, wantErr: "mode 3"},
		{name: "no transmit time", edit: func(b []byte) { clear(b[40:48]) }, wantErr: "without a transmit timestamp"},
		{name: "short", edit: func(b []byte) { b[0] = 0xff }, wantErr: "mode 7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFakeServer(t, tc.skew, tc.edit)
			r, err := Query(context.Background(), srv.addr())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Query: got %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Query: %v", err)
			}
			// Loopback: the offset is the skew to within scheduling noise.
			if !near(r.Offset, tc.skew, 2*time.Second) {
				t.Errorf("offset: got %v, want %v", r.Offset, tc.skew)
			}
			if r.Stratum != 2 || r.RTT < 0 {
				t.Errorf("stratum %d, rtt %v: want 2 and a non-negative round trip", r.Stratum, r.RTT)
			}
		})
	}
}

// TestQueryIgnoresStrayReplies: a reply that does not echo the request's
// transmit timestamp is not an answer; the query waits for its own.
func TestQueryIgnoresStrayReplies(t *testing.T) {
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go func() {
		buf := make([]byte, 512)
		n, from, err := conn.ReadFrom(buf)
		if err != nil || n < packetLen {
			return
		}
		now := time.Now().Add(time.Minute)
		reply := make([]byte, packetLen)
		reply[0], reply[1] = version<<3|modeServer, 3
		putNTPTime(reply[32:40], now)
		putNTPTime(reply[40:48], now)
		stray := append([]byte(nil), reply...)
		stray[1] = 0 // would be an error if it were taken as the answer
		_, _ = conn.WriteTo(stray, from)
		copy(reply[24:32], buf[40:48])
		_, _ = conn.WriteTo(reply, from)
	}()
	r, err := Query(context.Background(), conn.LocalAddr().String())
	if err != nil {
		t.Fatalf("Query: %v", err)
	}
	if !near(r.Offset, time.Minute, 2*time.Second) || r.Stratum != 3 {
		t.Errorf("got offset %v stratum %d, want about 1m0s and 3", r.Offset, r.Stratum)
	}
}

func TestQueryNoAnswer(t *testing.T) {
	conn, err := net.ListenPacket("udp", "127.0.0.1:0") // reads nothing, answers nothing
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := Query(ctx, conn.LocalAddr().String()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Query of a silent server: got %v, want a deadline error", err)
	}
}

func TestNTPTime(t *testing.T) {
	for _, want := range []time.Time{
		time.Date(2025, 6, 1, 12, 0, 0, 500_000_000, time.UTC),
		time.Date(2036, 2, 7, 6, 28, 16, 0, time.UTC), // era 1 begins
		time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		b := make([]byte, 8)
		putNTPTime(b, want)
		if got := ntpTime(b); !near(got.Sub(want), 0, time.Microsecond) {
			t.Errorf("round trip of %v: got %v", want, got)
		}
	}
}

func TestSyncer(t *testing.T) {
	ahead := newFakeServer(t, time.Hour, nil)
	inStep := newFakeServer(t, 0, nil)
	dead, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.LocalAddr().String()
	dead.Close() // nothing listens: the query fails at once (ICMP) or times out
	for _, tc := range []struct {
		name      string
		enabled   bool
		servers   []string
		wantStep  bool
		wantErr   error
		errSubstr string
	}{
		{name: "off", enabled: false, servers: []string{ahead.addr()}, wantErr: ErrDisabled},
		{name: "no servers", enabled: true, errSubstr: "no servers"},
		{name: "steps", enabled: true, servers: []string{ahead.addr()}, wantStep: true},
		{name: "first failing, second answers", enabled: true, servers: []string{deadAddr, ahead.addr()}, wantStep: true},
		{name: "in step: no step", enabled: true, servers: []string{inStep.addr()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var steps []time.Duration
			s := &Syncer{
				Settings: func() (bool, []string) { return tc.enabled, tc.servers },
				Step:     func(d time.Duration) error { steps = append(steps, d); return nil },
				// Loopback answers within milliseconds; a generous
				// threshold keeps the in-step case from stepping.
				Threshold: time.Second,
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := s.SyncOnce(ctx)
			switch {
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("SyncOnce: got %v, want %v", err, tc.wantErr)
				}
			case tc.errSubstr != "":
				if err == nil || !strings.Contains(err.Error(), tc.errSubstr) {
					t.Fatalf("SyncOnce: got %v, want an error containing %q", err, tc.errSubstr)
				}
			case err != nil:
				t.Fatalf("SyncOnce: %v", err)
			}
			if got := len(steps) == 1; got != tc.wantStep {
				t.Fatalf("steps: got %v, want a step: %v", steps, tc.wantStep)
			}
			if tc.wantStep && !near(steps[0], time.Hour, 2*time.Second) {
				t.Errorf("step: got %v, want about 1h", steps[0])
			}
		})
	}
}

// TestSyncerRun: Run syncs at start, and again at once when woken (after
// a settings change) rather than at the next interval.
func TestSyncerRun(t *testing.T) {
	srv := newFakeServer(t, time.Hour, nil)
	stepped := make(chan time.Duration, 4)
	s := &Syncer{
		Settings: func() (bool, []string) { return true, []string{srv.addr()} },
		Step:     func(d time.Duration) error { stepped <- d; return nil },
		Interval: time.Hour,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for i, what := range []string{"at start", "after waking"} {
		if d := <-stepped; !near(d, time.Hour, 2*time.Second) {
			t.Errorf("step %s: got %v, want about 1h", what, d)
		}
		if i == 0 {
			s.Wake()
		}
	}
	if n := srv.queries(); n != 2 {
		t.Errorf("queries: got %d, want 2", n)
	}
}

func FuzzParseAnswer(f *testing.F) {
	origin := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	good := make([]byte, packetLen)
	good[0], good[1] = version<<3|modeServer, 2
	copy(good[24:32], origin)
	putNTPTime(good[32:40], time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC))
	putNTPTime(good[40:48], time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC))
	f.Add(good)
	f.Add(good[:20])
	f.Add(make([]byte, packetLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := parseAnswer(b, origin)
		if err == nil && (a.stratum < 1 || a.stratum > 15) {
			t.Errorf("accepted stratum %d", a.stratum)
		}
	})
}
