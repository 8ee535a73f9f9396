package appliance

import (
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cxlpool/fabric"
	"cxlpool/fabric/fm"
	"cxlpool/fabric/serial"
	"cxlpool/internal/lograte"
	"cxlpool/sim"
)

// fakeClock drives the redial backoff: After hands each wait to the test,
// which moves the time on and fires it.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	armed chan fakeTimer
}

type fakeTimer struct {
	d  time.Duration
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), armed: make(chan fakeTimer, 1)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.armed <- fakeTimer{d: d, ch: ch}
	return ch
}

// fireNext waits (in real time, bounded) for the redial loop to wait, moves
// the clock past that wait and ends it. It returns the wait.
func (c *fakeClock) fireNext(t *testing.T) time.Duration {
	t.Helper()
	select {
	case tm := <-c.armed:
		c.mu.Lock()
		c.now = c.now.Add(tm.d)
		now := c.now
		c.mu.Unlock()
		tm.ch <- now
		return tm.d
	case <-time.After(20 * time.Second):
		t.Fatal("the redial loop never waited")
		return 0
	}
}

// countingHandler counts the records that reach the log's output.
type countingHandler struct{ n *atomic.Int64 }

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) Handle(context.Context, slog.Record) error {
	h.n.Add(1)
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }

// stormWindow is the span of (fake) time each storm runs for.
const stormWindow = time.Minute

// maxDialsPerWindow bounds redials in stormWindow with the jitter at its
// least (the most attempts): 8 waits to reach the 5 s cap (5.7 s in all),
// then one per 2.5 s.
const maxDialsPerWindow = 30

// TestAttackReconnectStorm: a device port that accepts and closes every
// connection at once, and a device that answers discovery and then drops
// the link, are redialed with backoff: over a minute of (fake) time the
// dial attempts and log lines stay few, where they used to be thousands a
// second.
func TestAttackReconnectStorm(t *testing.T) {
	for _, tc := range []struct {
		name string
		// serve handles one accepted connection (nil: a virtual box
		// serves it).
		serve func(t *testing.T, nc net.Conn)
		drop  bool // close the link again each time it is back
	}{
		{"accepts and closes at once", func(t *testing.T, nc net.Conn) { nc.Close() }, false},
		{"connects then drops", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "dev.sock"))
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			serve := tc.serve
			var conns connSet
			if serve == nil {
				scfg := sim.DefaultConfig()
				scfg.Capacity = 16 << 30
				box, err := sim.New(scfg)
				if err != nil {
					t.Fatal(err)
				}
				defer box.Close()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				serve = func(t *testing.T, nc net.Conn) {
					// Each link drops soon after it is made: before or
					// after the device answered discovery on it, both
					// are a link that did not stay up. (Dropping on the
					// link-back event raced with the accept.)
					conns.add(nc)
					time.AfterFunc(20*time.Millisecond, func() { nc.Close() })
					_ = box.ServeConn(ctx, nc)
				}
			}
			go func() {
				for {
					nc, err := ln.Accept()
					if err != nil {
						return
					}
					go serve(t, nc)
				}
			}()

			clk := newFakeClock()
			var lines atomic.Int64
			log := slog.New(lograte.New(countingHandler{&lines}, lograte.Options{Now: clk.Now}))
			var dials atomic.Int64
			dial := func(ctx context.Context) (io.ReadWriteCloser, error) {
				dials.Add(1)
				return serial.Dial(ctx, "unix:"+ln.Addr().String())
			}
			d, err := openRedial(context.Background(), dial, fm.Config{Logger: log, Timeout: 200 * time.Millisecond},
				log, redialConfig{Now: clk.Now, After: clk.After, Rand: func() float64 { return 0 }})
			if err != nil {
				t.Fatalf("openRedial: %v", err)
			}
			defer d.Close()
			var resets atomic.Int64
			go func() {
				for ev := range d.Events() {
					if ev.Kind == fabric.EventDeviceReset {
						resets.Add(1)
					}
				}
			}()
			if tc.drop {
				conns.closeAll() // the first link drops too
			}

			var elapsed time.Duration
			var waits []time.Duration
			for elapsed < stormWindow {
				w := clk.fireNext(t)
				waits = append(waits, w)
				elapsed += w
			}
			n := dials.Load() - 1 // the first dial is not a redial
			t.Logf("%s: %d redials in %s, %d link-backs, %d log lines; waits %v", tc.name, n, stormWindow, resets.Load(), lines.Load(), waits)
			if n > maxDialsPerWindow || n < 5 {
				t.Errorf("redials in %s: got %d, want 5…%d", stormWindow, n, maxDialsPerWindow)
			}
			for i := 1; i < len(waits); i++ {
				if waits[i] < waits[i-1] {
					t.Errorf("wait %d is %s after %s: the backoff was reset by a link that did not stay up", i, waits[i], waits[i-1])
				}
			}
			// A handful of distinct messages, each at most its burst per
			// 10 s, plus the counts.
			if got, max := lines.Load(), int64(150); got > max {
				t.Errorf("log lines in %s: got %d, want at most %d", stormWindow, got, max)
			}
		})
	}
}

// connSet remembers the device's side of each link, to drop them.
type connSet struct {
	mu sync.Mutex
	cs []net.Conn
}

func (s *connSet) add(c net.Conn) {
	s.mu.Lock()
	s.cs = append(s.cs, c)
	s.mu.Unlock()
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.cs {
		c.Close()
	}
	s.cs = nil
}

func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		name string
		rand float64
		want []time.Duration
	}{
		{"least jitter", 0, []time.Duration{25, 50, 100, 200, 400, 800, 1600, 2500, 2500}},
		{"most jitter", 0.999999, []time.Duration{50, 100, 200, 400, 800, 1600, 3200, 5000, 5000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := redialConfig{Rand: func() float64 { return tc.rand }}
			rc.setDefaults()
			b := backoff{rc: &rc}
			for i, w := range tc.want {
				if got := b.next().Round(time.Millisecond); got != w*time.Millisecond {
					t.Errorf("wait %d: got %s, want %s", i, got, w*time.Millisecond)
				}
			}
			b.reset()
			if got := b.next().Round(time.Millisecond); got != tc.want[0]*time.Millisecond {
				t.Errorf("after reset: got %s, want %s", got, tc.want[0]*time.Millisecond)
			}
		})
	}
}
