package main

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/api"
	"cxlpool/api/apitest"
	"cxlpool/api/redfish"
	"cxlpool/image/guest"
)

// testConfNetwork is a confNetwork over temporary copies of the image's
// configuration layers, recording what it applies.
type testConfNetwork struct {
	*confNetwork
	hostnames []string
	wakes     int
}

func newTestConfNetwork(t *testing.T, data, cmdline string) *testConfNetwork {
	t.Helper()
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tn := &testConfNetwork{}
	tn.confNetwork = &confNetwork{
		defaults: write("boxinit.conf", guest.DefaultConfig), data: write("cxlpool.conf", data),
		cmdline: write("cmdline", cmdline), log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		resolvConf:  write("resolv.conf", "nameserver 10.0.2.3\n"),
		setHostname: func(h string) error { tn.hostnames = append(tn.hostnames, h); return nil },
		ntpChanged:  func() { tn.wakes++ },
	}
	return tn
}

func (tn *testConfNetwork) file(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(tn.data)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var cmpNet = cmp.Options{cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })}

func TestConfNetwork(t *testing.T) {
	tn := newTestConfNetwork(t, guest.DataConfigTemplate+"net.hostname = box-1\n", "console=ttyS0 cxlpool.slot=a\n")
	got, err := tn.NetworkSettings()
	if err != nil {
		t.Fatal(err)
	}
	want := api.NetworkSettings{HostName: "box-1", Interface: "eth0", DHCPv4: true}
	if diff := cmp.Diff(want, got, cmpNet); diff != "" {
		t.Errorf("settings from the image's defaults (-want +got):\n%s", diff)
	}
	tn.applyHostname()
	if diff := cmp.Diff([]string{"box-1"}, tn.hostnames); diff != "" {
		t.Errorf("host names set at start (-want +got):\n%s", diff)
	}

	// NTP: stored and the client woken; the host name is left alone.
	if err := tn.UpdateNetworkSettings(func(s *api.NetworkSettings) error {
		s.NTPEnabled, s.NTPServers = true, []string{"10.0.0.1", "pool.ntp.org"}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if on, servers := tn.ntpSettings(); !on || strings.Join(servers, " ") != "10.0.0.1 pool.ntp.org" {
		t.Errorf("NTP after the update: got %v %v", on, servers)
	}
	if tn.wakes != 1 || len(tn.hostnames) != 1 {
		t.Errorf("after the NTP change: %d wakes, host names %v; want 1 wake and no new host name", tn.wakes, tn.hostnames)
	}

	// Host name and address: stored in the data partition's file; the
	// host name is set now, the address waits for the init at boot.
	if err := tn.UpdateNetworkSettings(func(s *api.NetworkSettings) error {
		s.HostName, s.Interface, s.DHCPv4 = "pool-7", "enp3s0", false
		s.IPv4Address, s.IPv4Gateway = netip.MustParsePrefix("192.168.1.50/24"), netip.Addr{}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	wantFile := guest.DataConfigTemplate + "net.hostname = pool-7\nntp.enabled = true\nntp.servers = 10.0.0.1 pool.ntp.org\n" +
		"net.address = 192.168.1.50/24\nnet.dhcp = false\nnet.iface = enp3s0\n"
	if diff := cmp.Diff(wantFile, tn.file(t)); diff != "" {
		t.Errorf("cxlpool.conf (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"box-1", "pool-7"}, tn.hostnames); diff != "" {
		t.Errorf("host names set (-want +got):\n%s", diff)
	}
	// What the init will read at the next boot.
	var c guest.Config
	if err := c.LoadLayers(tn.defaults, tn.data, tn.cmdline); err != nil {
		t.Fatal(err)
	}
	if c.NetIface != "enp3s0" || c.NetDHCP || c.NetAddress != "192.168.1.50/24" || c.NetGateway != "" || c.HostName != "pool-7" {
		t.Errorf("init's view: iface %q dhcp %v address %q gateway %q host %q", c.NetIface, c.NetDHCP, c.NetAddress, c.NetGateway, c.HostName)
	}

	// A refused update changes nothing.
	before := tn.file(t)
	refused := errors.New("no")
	if err := tn.UpdateNetworkSettings(func(s *api.NetworkSettings) error { s.HostName = "x"; return refused }); !errors.Is(err, refused) {
		t.Errorf("refused update: got %v, want %v", err, refused)
	}
	if tn.file(t) != before || tn.wakes != 1 || len(tn.hostnames) != 2 {
		t.Error("a refused update changed the file or applied something")
	}

	// Without a resolver, NTP servers must be addresses; other changes
	// go through although the stored servers have names.
	if err := os.Remove(tn.resolvConf); err != nil {
		t.Fatal(err)
	}
	err = tn.UpdateNetworkSettings(func(s *api.NetworkSettings) error { s.NTPServers = []string{"10.0.0.1", "ntp.example"}; return nil })
	var apiErr *redfish.Error
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || !strings.Contains(apiErr.Messages[0].Resolution, "IP address") {
		t.Errorf("NTP server name without a resolver: got %v, want 400 PropertyValueIncorrect asking for an address", err)
	}
	if err := tn.UpdateNetworkSettings(func(s *api.NetworkSettings) error { s.HostName = "pool-8"; return nil }); err != nil {
		t.Errorf("host name change without a resolver: %v", err)
	}
	if err := tn.UpdateNetworkSettings(func(s *api.NetworkSettings) error { s.NTPServers = []string{"10.0.0.2"}; return nil }); err != nil {
		t.Errorf("NTP server address without a resolver: %v", err)
	}
	// A box on DHCP gets its resolver with the lease (at the next boot).
	if err := tn.UpdateNetworkSettings(func(s *api.NetworkSettings) error {
		s.DHCPv4, s.NTPServers = true, []string{"ntp.example"}
		return nil
	}); err != nil {
		t.Errorf("NTP server name with DHCP on: %v", err)
	}
}

// TestConfNetworkThroughAPI: the Redfish PATCHes reach the data
// partition's file.
func TestConfNetworkThroughAPI(t *testing.T) {
	tn := newTestConfNetwork(t, guest.DataConfigTemplate, "")
	env := apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) { c.Network = tn.confNetwork }})
	r := env.Admin.Patch("/redfish/v1/Managers/FM/NetworkProtocol", map[string]any{"NTP": map[string]any{
		"ProtocolEnabled": true, "NTPServers": []string{"time.example.org"}}})
	if r.Status != http.StatusOK {
		t.Fatalf("PATCH NTP: got %s, want 200", r)
	}
	ifs, err := api.SystemInterfaces()
	if err != nil || len(ifs) == 0 {
		t.Logf("no network interface to PATCH here (%v): host name step skipped", err)
	} else if r := env.Admin.Patch("/redfish/v1/Managers/FM/EthernetInterfaces/"+ifs[0].Name, map[string]any{"HostName": "pool-9"}); r.Status != http.StatusOK {
		t.Fatalf("PATCH HostName: got %s, want 200", r)
	}
	file := tn.file(t)
	for _, line := range []string{"ntp.enabled = true", "ntp.servers = time.example.org"} {
		if !strings.Contains(file, line+"\n") {
			t.Errorf("cxlpool.conf lacks %q:\n%s", line, file)
		}
	}
	if np := env.Admin.GetOK("/redfish/v1/Managers/FM/NetworkProtocol"); len(ifs) > 0 && np["HostName"] != "pool-9" {
		t.Errorf("HostName after the PATCH: got %v, want pool-9", np["HostName"])
	}
}
