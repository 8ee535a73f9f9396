package api

import (
	"crypto/tls"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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

// TestRenewSelfSigned: the box's own certificate is renewed (new key,
// files replaced, served at once) within 30 days of its end or when it
// was made for longer than 398 days; nothing else is ever replaced.
func TestRenewSelfSigned(t *testing.T) {
	now := time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)
	gen := func(notBefore, notAfter time.Time) func(t *testing.T) (c, k []byte) {
		return func(t *testing.T) (c, k []byte) {
			c, k, err := selfSignedTerm(notBefore, notAfter)
			if err != nil {
				t.Fatal(err)
			}
			return c, k
		}
	}
	day := 24 * time.Hour
	tests := []struct {
		name        string
		pair        func(t *testing.T) (certPEM, keyPEM []byte)
		diskChanged bool // cert.pem on disk is an operator's, not the one served
		want        bool
	}{
		{"generated, 40 days left", gen(now.Add(-357*day), now.Add(40*day)), false, false},
		{"generated, 29 days left", gen(now.Add(-368*day), now.Add(29*day)), false, true},
		{"generated, expired", gen(now.Add(-400*day), now.Add(-3*day)), false, true},
		{"generated by an older version for ten years", gen(now.Add(-day), now.AddDate(10, 0, 0)), false, true},
		{"operator's, 29 days left", func(t *testing.T) ([]byte, []byte) {
			k, c := keyAndCert(t, "site.example")
			return c, k
		}, false, false},
		{"operator's from a CA", func(t *testing.T) ([]byte, []byte) { return customPair(t) }, false, false},
		{"generated served, operator's on disk", gen(now.Add(-368*day), now.Add(29*day)), true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tdir := filepath.Join(dir, tlsDir)
			if err := os.MkdirAll(tdir, 0o700); err != nil {
				t.Fatal(err)
			}
			certPEM, keyPEM := tt.pair(t)
			cert, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				t.Fatal(err)
			}
			clock := now
			if tt.name == "operator's, 29 days left" || tt.name == "operator's from a CA" {
				clock = leafOf(cert).NotAfter.Add(-29 * day)
			}
			diskCert, diskKey := certPEM, keyPEM
			if tt.diskChanged {
				diskCert, diskKey = customPair(t)
			}
			for name, b := range map[string][]byte{certFile: diskCert, keyFile: diskKey} {
				if err := os.WriteFile(filepath.Join(tdir, name), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			s := &Server{cfg: Config{DataDir: dir, Clock: func() time.Time { return clock }}, log: slog.New(slog.DiscardHandler)}
			s.certs.cur.Store(&cert)
			got, err := s.renewSelfSigned()
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("renewed: got %v, want %v", got, tt.want)
			}
			served := leafOf(*s.certs.cur.Load())
			onDisk, err := tls.LoadX509KeyPair(filepath.Join(tdir, certFile), filepath.Join(tdir, keyFile))
			if err != nil {
				t.Fatalf("the pair on disk does not load: %v", err)
			}
			if !tt.want {
				if !served.Equal(leafOf(cert)) || !slices.Equal(onDisk.Certificate[0], leafOf(mustPair(t, diskCert, diskKey)).Raw) {
					t.Error("a certificate that was not due was changed")
				}
				return
			}
			if served.Equal(leafOf(cert)) || !served.Equal(leafOf(onDisk)) {
				t.Error("the served certificate is not the renewed one on disk")
			}
			if !generatedCert(served) || served.NotAfter.Sub(served.NotBefore) > 398*day || !served.NotAfter.After(clock.Add(360*day)) {
				t.Errorf("renewed certificate %v to %v, want a generated one of at most 398 days from now", served.NotBefore, served.NotAfter)
			}
			if publicKeysEqual(served.PublicKey, leafOf(cert).PublicKey) {
				t.Error("the renewed certificate kept the old key")
			}
			ents, _ := os.ReadDir(tdir)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			if diff := cmp.Diff([]string{certFile, keyFile}, names); diff != "" {
				t.Errorf("files in tls/ (-want +got):\n%s", diff)
			}
			if again, _ := s.renewSelfSigned(); again {
				t.Error("renewed again right after a renewal")
			}
		})
	}
}

func mustPair(t *testing.T, c, k []byte) tls.Certificate {
	t.Helper()
	p, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
