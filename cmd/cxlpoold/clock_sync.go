package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/beevik/ntp"
)

// clockSync keeps the box's clock within threshold of the first NTP
// server that answers, asking every interval and at once when woken
// (after a settings change). The NTP exchange and the answer's checks are
// github.com/beevik/ntp's (RFC 5905: kiss-o'-death, stratum, leap,
// dispersion, a reference time that is fresh); server names resolve with
// Go's resolver, which on the image reads /etc/resolv.conf as boxinit
// writes it from the DHCP lease or net.dns. The clock is stepped, not
// slewed: the box's management computer has no clock discipline to feed,
// and a step of a fraction of a second is harmless to its logs and
// sessions.
type clockSync struct {
	// settings says whether synchronisation is on and the servers to ask
	// in order ("host" or "host:port", host a name or an address); it is
	// read before every round.
	settings func() (enabled bool, servers []string)
	// step moves the system clock (and the hardware clock) by d.
	step func(d time.Duration) error
	// lookup resolves a server name; query asks one server address
	// ("ip:port") for the time.
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	query  func(addr string) (*ntp.Response, error)
	// interval between rounds; threshold: an offset left alone.
	interval, threshold time.Duration
	log                 *slog.Logger
	wake                chan struct{}
}

// errNTPDisabled is syncOnce's answer when synchronisation is off.
var errNTPDisabled = errors.New("ntp: synchronisation is off")

// newClockSync returns a synchronisation with the system's resolver and
// beevik/ntp's client: rounds every 15 minutes, steps over 100 ms.
func newClockSync(settings func() (bool, []string), step func(time.Duration) error, log *slog.Logger) *clockSync {
	return &clockSync{
		settings: settings, step: step, log: log,
		lookup: func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		},
		query: func(addr string) (*ntp.Response, error) {
			return ntp.QueryWithOptions(addr, ntp.QueryOptions{Timeout: 5 * time.Second})
		},
		interval: 15 * time.Minute, threshold: 100 * time.Millisecond,
		wake: make(chan struct{}, 1),
	}
}

// Wake makes run start a round now.
func (s *clockSync) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// syncResult is one round's answer.
type syncResult struct {
	Server, Addr string
	Offset, RTT  time.Duration
	Stratum      uint8
	Stepped      bool
}

// syncOnce asks the servers in turn (every address of a name) and steps
// the clock by the first valid answer's offset if it exceeds threshold.
func (s *clockSync) syncOnce(ctx context.Context) (syncResult, error) {
	enabled, servers := s.settings()
	if !enabled {
		return syncResult{}, errNTPDisabled
	}
	if len(servers) == 0 {
		return syncResult{}, errors.New("ntp: no servers configured")
	}
	var errs []error
	for _, srv := range servers {
		host, port, err := net.SplitHostPort(srv)
		if err != nil {
			host, port = srv, "123"
		}
		var addrs []netip.Addr
		if a, err := netip.ParseAddr(host); err == nil {
			addrs = []netip.Addr{a}
		} else {
			lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			addrs, err = s.lookup(lctx, host)
			cancel()
			if err != nil {
				errs = append(errs, fmt.Errorf("ntp: %s: resolve: %w", srv, err))
				continue
			}
		}
		for _, a := range addrs {
			addr := net.JoinHostPort(a.Unmap().String(), port)
			r, err := s.query(addr)
			if err == nil {
				err = r.Validate()
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("ntp: %s (%s): %w", srv, addr, err))
				continue
			}
			res := syncResult{Server: srv, Addr: addr, Offset: r.ClockOffset, RTT: r.RTT, Stratum: r.Stratum}
			if r.ClockOffset > s.threshold || r.ClockOffset < -s.threshold {
				if err := s.step(r.ClockOffset); err != nil {
					return res, fmt.Errorf("ntp: step the clock by %v: %w", r.ClockOffset, err)
				}
				res.Stepped = true
				s.log.Info("clock stepped", "server", srv, "address", addr, "offset", r.ClockOffset, "rtt", r.RTT, "stratum", r.Stratum)
			} else {
				s.log.Debug("clock in step", "server", srv, "address", addr, "offset", r.ClockOffset, "rtt", r.RTT)
			}
			return res, nil
		}
	}
	return syncResult{}, errors.Join(errs...)
}

// run synchronises until ctx ends. A failed round is retried after 2 s,
// 4 s, … up to a minute: at boot the daemon starts before the network
// has its lease.
func (s *clockSync) run(ctx context.Context) {
	retry := 2 * time.Second
	for {
		next := s.interval
		if _, err := s.syncOnce(ctx); err != nil && !errors.Is(err, errNTPDisabled) {
			if ctx.Err() != nil {
				return
			}
			if retry >= 8*time.Second {
				// The first failures are the boot's: the network comes up.
				s.log.Warn("time synchronisation failed", "err", err, "retry in", retry)
			}
			next, retry = min(next, retry), min(2*retry, time.Minute)
		} else {
			retry = 2 * time.Second
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
