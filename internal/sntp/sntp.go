// Package sntp is a small SNTP client (RFC 4330): one query to an NTP
// server gives the local clock's offset, and a Syncer steps the clock
// when it drifts. The box's management computer needs nothing more: it
// has no hardware clock discipline to feed and a step of a fraction of a
// second is harmless to its logs and sessions.
package sntp

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"
)

// Port is the NTP port a server name without one is asked on.
const Port = "123"

const (
	packetLen = 48
	// ntpEpochOffset is the seconds from 1900-01-01 (NTP era 0) to the
	// Unix epoch.
	ntpEpochOffset = 2208988800
	modeClient     = 3
	modeServer     = 4
	version        = 4
	liAlarm        = 3 // leap indicator: the server's clock is not synchronised
)

// Result is one server's answer.
type Result struct {
	Server string
	// Offset is what to add to the local clock to agree with the
	// server's.
	Offset time.Duration
	// RTT is the round trip, less the server's own processing time.
	RTT     time.Duration
	Stratum int
}

// Query asks server ("host" or "host:port") for the time once. The
// context bounds the wait (5 s if it has no deadline).
func Query(ctx context.Context, server string) (Result, error) {
	addr := server
	if _, _, err := net.SplitHostPort(server); err != nil {
		addr = net.JoinHostPort(server, Port)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "udp", addr)
	if err != nil {
		return Result{}, fmt.Errorf("sntp: %s: %w", server, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()

	req := make([]byte, packetLen)
	req[0] = version<<3 | modeClient
	// The transmit timestamp is random rather than the local time
	// (RFC 4330 §6 allows either): the answer must echo it, which ties the
	// answer to this request, and the local clock is not told to anyone.
	_, _ = rand.Read(req[40:48])
	t1 := time.Now()
	if _, err := conn.Write(req); err != nil {
		return Result{}, fmt.Errorf("sntp: %s: %w", server, err)
	}
	buf := make([]byte, 256)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			switch {
			case ctx.Err() != nil:
				err = ctx.Err()
			case errors.Is(err, os.ErrDeadlineExceeded):
				// The socket's deadline is the context's: it can
				// fire a moment before the context's own timer.
				err = context.DeadlineExceeded
			}
			return Result{}, fmt.Errorf("sntp: %s: %w", server, err)
		}
		t4 := time.Now()
		a, err := parseAnswer(buf[:n], req[40:48])
		if errors.Is(err, errNotOurs) {
			continue // a stale or stray datagram: wait for ours
		}
		if err != nil {
			return Result{}, fmt.Errorf("sntp: %s: %w", server, err)
		}
		// With the origin timestamp random, T1 and T4 are the local
		// clock's readings around the exchange (t4.Sub(t1) uses the
		// monotonic clock; the offsets use the wall clock).
		rtt := t4.Sub(t1) - a.transmit.Sub(a.receive)
		t1w, t4w := t1.Round(0), t4.Round(0)
		offset := (a.receive.Sub(t1w) + a.transmit.Sub(t4w)) / 2
		return Result{Server: server, Offset: offset, RTT: max(rtt, 0), Stratum: a.stratum}, nil
	}
}

// answer is what a server's reply says.
type answer struct {
	stratum           int
	receive, transmit time.Time
}

var errNotOurs = errors.New("reply to another request")

// parseAnswer checks a server reply to the request whose transmit
// timestamp was origin.
func parseAnswer(b []byte, origin []byte) (answer, error) {
	if len(b) < packetLen {
		return answer{}, fmt.Errorf("reply of %d bytes, want at least %d", len(b), packetLen)
	}
	if string(b[24:32]) != string(origin) {
		return answer{}, errNotOurs
	}
	li, vn, mode := b[0]>>6, b[0]>>3&7, b[0]&7
	if mode != modeServer {
		return answer{}, fmt.Errorf("reply in mode %d, want %d (server)", mode, modeServer)
	}
	if vn < 1 || vn > 4 {
		return answer{}, fmt.Errorf("reply of NTP version %d", vn)
	}
	stratum := int(b[1])
	if stratum == 0 {
		return answer{}, fmt.Errorf("kiss-o'-death %q", b[12:16])
	}
	if li == liAlarm || stratum > 15 {
		return answer{}, errors.New("server not synchronised")
	}
	a := answer{stratum: stratum, receive: ntpTime(b[32:40]), transmit: ntpTime(b[40:48])}
	if binary.BigEndian.Uint64(b[40:48]) == 0 {
		return answer{}, errors.New("reply without a transmit timestamp")
	}
	return a, nil
}

// ntpTime decodes a 64-bit NTP timestamp. Seconds with the top bit clear
// are taken as era 1 (after 2036-02-07), which is right until 2104.
func ntpTime(b []byte) time.Time {
	sec := int64(binary.BigEndian.Uint32(b))
	frac := int64(binary.BigEndian.Uint32(b[4:]))
	if sec&0x80000000 == 0 {
		sec += 1 << 32
	}
	nsec := frac * 1e9 >> 32
	return time.Unix(sec-ntpEpochOffset, nsec).UTC()
}

// Syncer keeps the local clock within Threshold of the first NTP server
// that answers, asking every Interval (and at once when woken).
type Syncer struct {
	// Settings returns whether synchronisation is on and the servers to
	// ask in order; it is read before every round, so a change applies
	// at the next one.
	Settings func() (enabled bool, servers []string)
	// Step moves the system clock by d.
	Step func(d time.Duration) error
	// Interval is the time between rounds (15 min); a round in which no
	// server answered is retried after a minute.
	Interval time.Duration
	// Threshold is the offset left alone (100 ms): a step for less is
	// noise.
	Threshold time.Duration
	Log       *slog.Logger

	once sync.Once
	wake chan struct{}
}

// ErrDisabled is SyncOnce's answer when synchronisation is off.
var ErrDisabled = errors.New("sntp: synchronisation is off")

func (s *Syncer) init() {
	s.once.Do(func() {
		s.wake = make(chan struct{}, 1)
		if s.Interval <= 0 {
			s.Interval = 15 * time.Minute
		}
		if s.Threshold <= 0 {
			s.Threshold = 100 * time.Millisecond
		}
		if s.Log == nil {
			s.Log = slog.New(slog.DiscardHandler)
		}
	})
}

// Wake makes Run start a round now (after a settings change).
func (s *Syncer) Wake() {
	s.init()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// SyncOnce asks the servers in turn and steps the clock by the first
// answer's offset if it exceeds Threshold. It returns that answer.
func (s *Syncer) SyncOnce(ctx context.Context) (Result, error) {
	s.init()
	enabled, servers := s.Settings()
	if !enabled {
		return Result{}, ErrDisabled
	}
	if len(servers) == 0 {
		return Result{}, errors.New("sntp: no servers configured")
	}
	var errs []error
	for _, srv := range servers {
		r, err := Query(ctx, srv)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if r.Offset > s.Threshold || r.Offset < -s.Threshold {
			if err := s.Step(r.Offset); err != nil {
				return r, fmt.Errorf("sntp: step the clock by %v: %w", r.Offset, err)
			}
			s.Log.Info("clock stepped", "server", srv, "offset", r.Offset, "rtt", r.RTT, "stratum", r.Stratum)
		}
		return r, nil
	}
	return Result{}, errors.Join(errs...)
}

// Run synchronises until ctx ends.
func (s *Syncer) Run(ctx context.Context) {
	s.init()
	for {
		next := s.Interval
		if _, err := s.SyncOnce(ctx); err != nil && !errors.Is(err, ErrDisabled) {
			if ctx.Err() != nil {
				return
			}
			s.Log.Warn("time synchronisation failed", "err", err)
			next = min(next, time.Minute)
		}
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.wake:
			t.Stop()
		case <-t.C:
		}
	}
}
