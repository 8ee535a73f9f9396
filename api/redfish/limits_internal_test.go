package redfish

import (
	"log/slog"
	"net"
	"testing"
)

// fakeConn is an accepted connection from addr that records its Close.
type fakeConn struct {
	net.Conn
	addr   net.Addr
	closed bool
}

func (c *fakeConn) RemoteAddr() net.Addr { return c.addr }
func (c *fakeConn) Close() error         { c.closed = true; return nil }

// TestConnTrackerPolicy: unauthenticated connections are capped per
// source and in total; at the total cap the newcomer gets in and the
// oldest connection of the source holding the most is closed;
// authenticated connections count only against MaxConns and are never
// closed for anyone.
func TestConnTrackerPolicy(t *testing.T) {
	type op struct {
		do   string // "accept" from src, "auth" or "close" conn n (0-based accept order)
		src  string
		n    int
		want string // accept: "ok", "refused" or "ok, evicts N"
	}
	cfg := Transport{MaxConns: 6, MaxUnauthConns: 4, MaxUnauthConnsPerSource: 2}
	tests := []struct {
		name string
		ops  []op
	}{
		{"per-source cap evicts the source's own oldest", []op{
			{do: "accept", src: "10.0.0.1", want: "ok"},
			{do: "accept", src: "10.0.0.1", want: "ok"},
			{do: "accept", src: "10.0.0.1", want: "ok, evicts 0"},
			{do: "accept", src: "10.0.0.2", want: "ok"},
			{do: "accept", src: "10.0.0.1", want: "ok, evicts 1"},
		}},
		{"authenticated connections leave the per-source count", []op{
			{do: "accept", src: "10.0.0.1", want: "ok"},
			{do: "accept", src: "10.0.0.1", want: "ok"},
			{do: "auth", n: 0},
			{do: "accept", src: "10.0.0.1", want: "ok"},
		}},
		{"total cap evicts the oldest of the heaviest source", []op{
			{do: "accept", src: "10.0.0.1", want: "ok"},
			{do: "accept", src: "10.0.0.2", want: "ok"},
			{do: "accept", src: "10.0.0.2", want: "ok"},
			{do: "accept", src: "10.0.0.3", want: "ok"},
			{do: "accept", src: "10.0.0.4", want: "ok, evicts 1"},
			{do: "accept", src: "10.0.0.5", want: "ok, evicts 0"}, // all hold one: the oldest
			{do: "accept", src: "10.0.0.6", want: "ok, evicts 2"},
		}},
		{"a newcomer is never the one evicted", []op{
			{do: "accept", src: "10.0.0.1", want: "ok"},
			{do: "accept", src: "10.0.0.2", want: "ok"},
			{do: "accept", src: "10.0.0.3", want: "ok"},
			{do: "accept", src: "10.0.0.4", want: "ok"},
			{do: "accept", src: "10.0.0.9", want: "ok, evicts 0"},
			{do: "accept", src: "10.0.0.8", want: "ok, evicts 1"},
			{do: "accept", src: "10.0.0.7", want: "ok, evicts 2"},
			{do: "accept", src: "10.0.0.6", want: "ok, evicts 3"},
			{do: "accept", src: "10.0.0.5", want: "ok, evicts 4"},
		}},
		{"authenticated connections are not evicted; MaxConns refuses", []op{
			{do: "accept", src: "10.0.0.1", want: "ok"},
			{do: "auth", n: 0},
			{do: "accept", src: "10.0.0.1", want: "ok"},
			{do: "auth", n: 1},
			{do: "accept", src: "10.0.0.2", want: "ok"},
			{do: "accept", src: "10.0.0.3", want: "ok"},
			{do: "accept", src: "10.0.0.4", want: "ok"},
			{do: "accept", src: "10.0.0.5", want: "ok"},
			{do: "accept", src: "10.0.0.6", want: "refused"}, // 6 connections
			{do: "close", n: 0},
			{do: "accept", src: "10.0.0.6", want: "ok, evicts 2"},
		}},
		{"authenticating an evicted connection changes nothing", []op{
			{do: "accept", src: "10.0.0.1", want: "ok"},
			{do: "accept", src: "10.0.0.1", want: "ok"},
			{do: "accept", src: "10.0.0.2", want: "ok"},
			{do: "accept", src: "10.0.0.3", want: "ok"},
			{do: "accept", src: "10.0.0.4", want: "ok, evicts 0"},
			{do: "auth", n: 0},
			{do: "close", n: 0},
			{do: "accept", src: "10.0.0.5", want: "ok, evicts 1"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newConnTracker(cfg, slog.New(slog.DiscardHandler))
			var raw []*fakeConn
			var tracked []*trackedConn
			for i, o := range tt.ops {
				switch o.do {
				case "accept":
					before := make([]bool, len(raw))
					for j, c := range raw {
						before[j] = c.closed
					}
					fc := &fakeConn{addr: &net.TCPAddr{IP: net.ParseIP(o.src), Port: 40000 + i}}
					tc := tr.admit(fc)
					got := "refused"
					if tc != nil {
						got = "ok"
						raw, tracked = append(raw, fc), append(tracked, tc)
						for j := range before {
							if raw[j].closed && !before[j] {
								got += ", evicts " + string(rune('0'+j))
							}
						}
					}
					if got != o.want {
						t.Fatalf("op %d, accept from %s: got %s, want %s", i, o.src, got, o.want)
					}
				case "auth":
					tr.authenticated(tracked[o.n])
				case "close":
					tracked[o.n].Close()
				}
				total, unauth := tr.counts()
				open, listed := 0, 0
				for _, c := range tracked {
					if !c.closed {
						open++
					}
					if c.listed {
						listed++
					}
				}
				if total != open || unauth != listed || unauth > cfg.MaxUnauthConns || total > cfg.MaxConns {
					t.Fatalf("op %d: counts total %d unauth %d; %d open, %d listed", i, total, unauth, open, listed)
				}
			}
		})
	}
}

// TestSourceOf: connections are counted per IPv4 address and per IPv6
// /64.
func TestSourceOf(t *testing.T) {
	tests := []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 1}, "192.0.2.7"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.7"), Port: 1}, "192.0.2.7"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:3:4:5:6"), Port: 1}, "2001:db8:1:2::/64"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:ffff::1"), Port: 1}, "2001:db8:1:2::/64"},
		{&net.UnixAddr{Name: "@sock", Net: "unix"}, "@sock"},
	}
	for _, tt := range tests {
		if got := sourceOf(tt.addr); got != tt.want {
			t.Errorf("sourceOf(%v): got %s, want %s", tt.addr, got, tt.want)
		}
	}
}
