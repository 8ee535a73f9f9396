package vmtest

import (
	"context"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"cxlpool/internal/ntptest"
)

// The management network of the first boot. QEMU's user networking
// leases the guest 10.0.2.15 with its built-in DHCP server and forwards
// what the guest sends to 10.0.2.2 (its "host") to the host's loopback.
// Its own name server (10.0.2.3) relays to the host's resolvers, which
// this test must not reach: the guest is given the test's name server at
// 10.0.2.2 (net.dns on the kernel command line, which replaces the
// lease's), serving one name, the NTP server's, which is the test's too.
// Both listen on the host's loopback only, on the protocols' own ports
// (the guest's resolver and NTP client ask ports 53 and 123).
const (
	mgmtHostAlias = "10.0.2.2"
	ntpName       = "ntp.cxlpool.test"
	clockBehind   = time.Hour
)

type mgmtNet struct {
	ntp *ntptest.Server

	mu      sync.Mutex
	queried []string // names the guest asked for
}

// startMgmtNet starts the name server and the NTP server.
func startMgmtNet(t *testing.T) *mgmtNet {
	t.Helper()
	m := &mgmtNet{}
	dns, err := net.ListenPacket("udp4", "127.0.0.1:53")
	if err != nil {
		t.Fatalf("the guest's name server on the host's loopback (port 53: the guest's resolver asks there): %v", err)
	}
	ntpConn, err := net.ListenPacket("udp4", "127.0.0.1:123")
	if err != nil {
		dns.Close()
		t.Fatalf("the guest's NTP server on the host's loopback (port 123): %v", err)
	}
	m.ntp = ntptest.Serve(ntpConn, 0)
	done := make(chan struct{})
	go func() { defer close(done); m.serveDNS(dns) }()
	t.Cleanup(func() { dns.Close(); <-done; m.ntp.Close() })
	return m
}

// serveDNS answers A queries for ntpName with the host alias, AAAA ones
// with no address, and any other name with NXDOMAIN.
func (m *mgmtNet) serveDNS(conn net.PacketConn) {
	buf := make([]byte, 1500)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil {
			continue
		}
		q, err := p.Question()
		if err != nil {
			continue
		}
		name := strings.ToLower(q.Name.String())
		m.mu.Lock()
		m.queried = append(m.queried, name)
		m.mu.Unlock()
		rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
		known := name == ntpName+"."
		if !known {
			rh.RCode = dnsmessage.RCodeNameError
		}
		b := dnsmessage.NewBuilder(nil, rh)
		b.EnableCompression()
		_ = b.StartQuestions()
		_ = b.Question(q)
		_ = b.StartAnswers()
		if known && q.Type == dnsmessage.TypeA {
			_ = b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60},
				dnsmessage.AResource{A: [4]byte{10, 0, 2, 2}})
		}
		if out, err := b.Finish(); err == nil {
			_, _ = conn.WriteTo(out, from)
		}
	}
}

// options puts the first boot on the network: its clock behind, the
// test's name server and NTP server configured on the command line.
func (m *mgmtNet) options(o *Options) {
	o.RTCBase = time.Now().UTC().Add(-clockBehind).Format("2006-01-02T15:04:05")
	o.Append += " cxlpool.net.dns=" + mgmtHostAlias + " cxlpool.ntp.enabled=true cxlpool.ntp.servers=" + ntpName
}

// check shows the lease taken, the name resolved and the clock set.
func (m *mgmtNet) check(t *testing.T, vm *VM, c *client) {
	wait := func(re string) []string {
		t.Helper()
		ctx, cancel := context.WithTimeout(c.e.ctx, 2*time.Minute)
		defer cancel()
		got, _, err := vm.WaitConsole(ctx, regexp.MustCompile(re), 0)
		if err != nil {
			t.Fatalf("%v; console:\n%s", err, tail(vm.Console(), 3000))
		}
		return got
	}
	lease := wait(`network: eth0 DHCPv4 lease (\S+) from (\S+) for (\S+) \(router \[([^\]]*)\], DNS \[([^\]]*)\]\) in (\S+)`)
	if got, want := strings.Join(lease[1:6], " "), "10.0.2.15/24 10.0.2.2 24h0m0s 10.0.2.2 10.0.2.3"; got != want {
		t.Errorf("lease (address, server, time, router, DNS): got %q, want %q", got, want)
	}
	t.Logf("DHCPv4 lease %s from QEMU's server in %s", lease[1], lease[6])
	wait(`network: resolver /etc/resolv.conf: name servers \[` + regexp.QuoteMeta(mgmtHostAlias) + `\] \(from net\.dns\)`)
	step := wait(`msg="clock stepped".* server=` + regexp.QuoteMeta(ntpName) + ` address=` + regexp.QuoteMeta(mgmtHostAlias) + `:123 offset=(\S+)`)
	off, err := time.ParseDuration(step[1])
	if err != nil || off < clockBehind-time.Minute || off > clockBehind+time.Minute {
		t.Errorf("clock stepped by %q, want about %v", step[1], clockBehind)
	}
	m.mu.Lock()
	queried := slices.Clone(m.queried)
	m.mu.Unlock()
	if !slices.Contains(queried, ntpName+".") {
		t.Errorf("names the guest asked the name server for: %v, want %s", queried, ntpName)
	}
	if len(m.ntp.Asked()) == 0 {
		t.Error("the NTP server was never asked")
	}
	t.Logf("name %s resolved by the test's name server (queries %v); clock stepped by %v", ntpName, queried, off)

	// The Redfish view: DHCP on, the leased address, the clock right.
	eth, _ := c.must(http.MethodGet, managerURI+"/EthernetInterfaces/eth0", nil, http.StatusOK)
	if d, _ := eth["DHCPv4"].(map[string]any); d["DHCPEnabled"] != true {
		t.Errorf("EthernetInterfaces/eth0 DHCPv4: got %v, want DHCPEnabled true", eth["DHCPv4"])
	}
	leased := false
	for _, a := range eth["IPv4Addresses"].([]any) {
		a, _ := a.(map[string]any)
		leased = leased || (a["Address"] == "10.0.2.15" && a["AddressOrigin"] == "DHCP")
	}
	if !leased {
		t.Errorf("IPv4Addresses: got %v, want 10.0.2.15 from DHCP", eth["IPv4Addresses"])
	}
	mgr, _ := c.must(http.MethodGet, managerURI, nil, http.StatusOK)
	dt, err := time.Parse(time.RFC3339, mgr["DateTime"].(string))
	if d := time.Since(dt); err != nil || d < -time.Minute || d > time.Minute {
		t.Errorf("Managers/FM DateTime %v: %v from the host's clock, want NTP's (err %v)", mgr["DateTime"], d, err)
	}
}
