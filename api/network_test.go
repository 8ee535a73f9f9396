package api_test

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/api"
	"cxlpool/api/apitest"
)

const (
	netProtoURI = "/redfish/v1/Managers/FM/NetworkProtocol"
	ethURI      = "/redfish/v1/Managers/FM/EthernetInterfaces"
)

// fakeNetwork is the image's NetworkConfig in memory.
type fakeNetwork struct {
	mu      sync.Mutex
	s       api.NetworkSettings
	updates int
	fail    error
}

func (f *fakeNetwork) NetworkSettings() (api.NetworkSettings, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.s
	s.NTPServers = append([]string(nil), f.s.NTPServers...)
	return s, nil
}

func (f *fakeNetwork) UpdateNetworkSettings(update func(*api.NetworkSettings) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	s := f.s
	s.NTPServers = append([]string(nil), f.s.NTPServers...)
	if err := update(&s); err != nil {
		return err
	}
	f.s = s
	f.updates++
	return nil
}

func (f *fakeNetwork) settings() api.NetworkSettings {
	s, _ := f.NetworkSettings()
	return s
}

func fakeInterfaces() ([]api.NetInterface, error) {
	mac, _ := net.ParseMAC("52:54:00:12:34:56")
	return []api.NetInterface{
		{Name: "eth1", Up: false, MTU: 1500},
		{Name: "eth0", MAC: mac, Up: true, Running: true, MTU: 1500, SpeedMbps: 1000, Addrs: []netip.Prefix{
			netip.MustParsePrefix("10.0.2.15/24"), netip.MustParsePrefix("169.254.3.4/16"),
			netip.MustParsePrefix("fe80::5054:ff:fe12:3456/64"), netip.MustParsePrefix("2001:db8::15/64")}},
	}, nil
}

// networkEnv is a service with fake interfaces and, if nw is not nil,
// the image's settings hook.
func networkEnv(t *testing.T, nw *fakeNetwork) *apitest.Env {
	return apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) {
		c.NetInterfaces = fakeInterfaces
		if nw != nil {
			c.Network = nw
		}
	}})
}

func TestNetworkRoleMatrix(t *testing.T) {
	env := networkEnv(t, &fakeNetwork{})
	const (
		ok     = http.StatusOK
		bad    = http.StatusBadRequest
		unauth = http.StatusUnauthorized
		forbid = http.StatusForbidden
		nf     = http.StatusNotFound
	)
	for _, tc := range []struct {
		method, path string
		body         any
		want         [5]int // anon, admin, operator, reader, host
	}{
		{"GET", netProtoURI, nil, [5]int{unauth, ok, ok, ok, forbid}},
		{"PATCH", netProtoURI, map[string]any{}, [5]int{unauth, ok, forbid, forbid, forbid}},
		{"PATCH", netProtoURI, map[string]any{"HostName": "x"}, [5]int{unauth, bad, forbid, forbid, forbid}},
		{"GET", ethURI, nil, [5]int{unauth, ok, ok, ok, forbid}},
		{"POST", ethURI, map[string]any{}, [5]int{unauth, http.StatusMethodNotAllowed, http.StatusMethodNotAllowed, http.StatusMethodNotAllowed, http.StatusMethodNotAllowed}},
		{"GET", ethURI + "/eth0", nil, [5]int{unauth, ok, ok, ok, forbid}},
		{"GET", ethURI + "/wlan9", nil, [5]int{unauth, nf, nf, nf, forbid}},
		{"PATCH", ethURI + "/eth0", map[string]any{}, [5]int{unauth, ok, forbid, forbid, forbid}},
		{"PATCH", ethURI + "/eth0", map[string]any{"MTUSize": 9000}, [5]int{unauth, bad, forbid, forbid, forbid}},
		{"DELETE", ethURI + "/eth0", nil, [5]int{unauth, http.StatusMethodNotAllowed, http.StatusMethodNotAllowed, http.StatusMethodNotAllowed, http.StatusMethodNotAllowed}},
	} {
		for i, c := range []*apitest.Client{env.Anon, env.Admin, env.Operator, env.ReadOnly, env.Host0} {
			r := c.Do(tc.method, tc.path, tc.body)
			if r.Status != tc.want[i] {
				t.Errorf("%s %s as %q: got %s, want %d", tc.method, tc.path, c.User, r, tc.want[i])
			}
		}
	}
	// The Manager links them for those who may read them.
	for _, tc := range []struct {
		c    *apitest.Client
		want bool
	}{{env.Admin, true}, {env.ReadOnly, true}, {env.Host0, false}} {
		m := tc.c.GetOK("/redfish/v1/Managers/FM")
		_, np := m["NetworkProtocol"]
		_, eth := m["EthernetInterfaces"]
		if np != tc.want || eth != tc.want {
			t.Errorf("Manager as %q links NetworkProtocol %v, EthernetInterfaces %v; want %v", tc.c.User, np, eth, tc.want)
		}
	}
}

// TestNetworkWithoutImage: on a computer whose operating system owns the
// network, everything reads and nothing writes, with a message saying
// why.
func TestNetworkWithoutImage(t *testing.T) {
	env := networkEnv(t, nil)
	np := env.ReadOnly.GetOK(netProtoURI)
	ntp := np["NTP"].(map[string]any)
	if ntp["ProtocolEnabled"] != nil {
		t.Errorf("NTP.ProtocolEnabled without the image: got %v, want null (unknown)", ntp["ProtocolEnabled"])
	}
	if np["HostName"] == "" {
		t.Error("HostName is empty")
	}
	// httptest serves plain HTTP.
	if h := np["HTTP"].(map[string]any); h["ProtocolEnabled"] != true || h["Port"] == nil {
		t.Errorf("HTTP: got %v, want enabled with the served port", h)
	}
	certs := env.Admin.Get("/redfish/v1/Managers/FM/NetworkProtocol/HTTPS/Certificates").Status == http.StatusOK
	if _, linked := np["HTTPS"].(map[string]any)["Certificates"]; linked != certs {
		t.Errorf("HTTPS.Certificates linked: %v, want %v (whether the collection is served)", linked, certs)
	}
	eth := env.Admin.GetOK(ethURI + "/eth0")
	for _, p := range []string{"IPv4StaticAddresses", "DHCPv4"} {
		if _, ok := eth[p]; ok {
			t.Errorf("%s shown without the image: the service does not know it", p)
		}
	}
	for _, tc := range []struct {
		name, uri string
		body      any
		prop      string
	}{
		{"NTP servers", netProtoURI, map[string]any{"NTP": map[string]any{"NTPServers": []string{"pool.ntp.org"}}}, "NTP"},
		{"NTP on", netProtoURI, map[string]any{"NTP": map[string]any{"ProtocolEnabled": true}}, "NTP"},
		{"host name", ethURI + "/eth0", map[string]any{"HostName": "box"}, "HostName"},
		{"address", ethURI + "/eth0", map[string]any{"IPv4StaticAddresses": []any{map[string]any{"Address": "10.0.2.20", "SubnetMask": "255.255.255.0"}}}, "IPv4StaticAddresses"},
		{"dhcp", ethURI + "/eth0", map[string]any{"DHCPv4": map[string]any{"DHCPEnabled": false}}, "DHCPv4"},
	} {
		r := env.Admin.Patch(tc.uri, tc.body)
		wantStatus(t, tc.name, r, http.StatusBadRequest, "PropertyNotWritable")
		if !strings.Contains(string(r.Body), "operating system") || !strings.Contains(string(r.Body), tc.prop) {
			t.Errorf("%s: refusal does not say the operating system owns %s: %s", tc.name, tc.prop, r.Body)
		}
	}
}

func TestNetworkProtocolNTP(t *testing.T) {
	nw := &fakeNetwork{s: api.NetworkSettings{HostName: "box-1", NTPServers: []string{"10.0.0.1"}}}
	env := networkEnv(t, nw)
	np := env.Admin.GetOK(netProtoURI)
	if diff := cmp.Diff(map[string]any{"ProtocolEnabled": false, "NTPServers": []any{"10.0.0.1"}, "Port": float64(123)}, np["NTP"]); diff != "" {
		t.Errorf("NTP (-want +got):\n%s", diff)
	}
	if np["HostName"] != "box-1" {
		t.Errorf("HostName: got %v, want box-1", np["HostName"])
	}
	ntp := func(v map[string]any) map[string]any { return map[string]any{"NTP": v} }
	for _, tc := range []struct {
		name   string
		body   any
		status int
		msg    string
	}{
		{"unknown property", ntp(map[string]any{"Servers": []string{"a"}}), 400, "PropertyUnknown"},
		{"port", ntp(map[string]any{"Port": 1123}), 400, "PropertyNotWritable"},
		{"host name here", map[string]any{"HostName": "b"}, 400, "PropertyNotWritable"},
		{"https", map[string]any{"HTTPS": map[string]any{"Port": 8443}}, 400, "PropertyNotWritable"},
		{"not a list", ntp(map[string]any{"NTPServers": "pool.ntp.org"}), 400, "PropertyValueTypeError"},
		{"bad name", ntp(map[string]any{"NTPServers": []string{"bad name!"}}), 400, "PropertyValueFormatError"},
		{"too many", ntp(map[string]any{"NTPServers": []string{"a.example", "b.example", "c.example", "d.example", "e.example"}}), 400, "ArraySizeTooLong"},
		{"on without servers", ntp(map[string]any{"ProtocolEnabled": true, "NTPServers": []string{}}), 400, "PropertyValueConflict"},
		{"on", ntp(map[string]any{"ProtocolEnabled": true}), 200, ""},
		{"servers", ntp(map[string]any{"NTPServers": []string{" pool.ntp.org ", "", "192.168.1.1", "pool.ntp.org", "2001:db8::1"}}), 200, ""},
		{"clearing the servers while on", ntp(map[string]any{"NTPServers": []string{}}), 400, "PropertyValueConflict"},
	} {
		wantStatus(t, tc.name, env.Admin.Patch(netProtoURI, tc.body), tc.status, tc.msg)
	}
	want := api.NetworkSettings{HostName: "box-1", NTPEnabled: true, NTPServers: []string{"pool.ntp.org", "192.168.1.1", "2001:db8::1"}}
	if diff := cmp.Diff(want, nw.settings(), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }),
		cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("stored settings (-want +got):\n%s", diff)
	}
	got := env.Admin.GetOK(netProtoURI)["NTP"].(map[string]any)
	if got["ProtocolEnabled"] != true || len(got["NTPServers"].([]any)) != 3 {
		t.Errorf("NTP after the changes: got %v", got)
	}
	// A failure to store is a server error, and nothing is claimed.
	nw.mu.Lock()
	nw.fail = errors.New("disk full")
	nw.mu.Unlock()
	wantStatus(t, "store fails", env.Admin.Patch(netProtoURI, ntp(map[string]any{"ProtocolEnabled": false})), 500, "InternalError")
}

func TestEthernetInterfaces(t *testing.T) {
	nw := &fakeNetwork{s: api.NetworkSettings{Interface: "eth0", IPv4Address: netip.MustParsePrefix("10.0.2.15/24"),
		IPv4Gateway: netip.MustParseAddr("10.0.2.2")}}
	env := networkEnv(t, nw)
	col := env.ReadOnly.GetOK(ethURI + "?$expand=.")
	members := col["Members"].([]any)
	if len(members) != 2 {
		t.Fatalf("interfaces: got %d, want 2", len(members))
	}
	for _, m := range members {
		apitest.Validate(t, mustJSON(t, m))
	}
	eth0 := members[0].(map[string]any)
	if eth0["Id"] != "eth0" {
		t.Fatalf("first interface: got %v, want eth0 (sorted by name)", eth0["Id"])
	}
	wantV4 := []any{
		map[string]any{"Address": "10.0.2.15", "SubnetMask": "255.255.255.0", "AddressOrigin": "Static", "Gateway": "10.0.2.2"},
		map[string]any{"Address": "169.254.3.4", "SubnetMask": "255.255.0.0", "AddressOrigin": "IPv4LinkLocal"},
	}
	if diff := cmp.Diff(wantV4, eth0["IPv4Addresses"]); diff != "" {
		t.Errorf("IPv4Addresses (-want +got):\n%s", diff)
	}
	wantV6 := []any{
		map[string]any{"Address": "fe80::5054:ff:fe12:3456", "PrefixLength": float64(64), "AddressOrigin": "LinkLocal"},
		map[string]any{"Address": "2001:db8::15", "PrefixLength": float64(64)},
	}
	if diff := cmp.Diff(wantV6, eth0["IPv6Addresses"]); diff != "" {
		t.Errorf("IPv6Addresses (-want +got):\n%s", diff)
	}
	for k, want := range map[string]any{"MACAddress": "52:54:00:12:34:56", "LinkStatus": "LinkUp", "InterfaceEnabled": true,
		"MTUSize": float64(1500), "SpeedMbps": float64(1000), "DHCPv4": map[string]any{"DHCPEnabled": false},
		"IPv4StaticAddresses": []any{map[string]any{"Address": "10.0.2.15", "SubnetMask": "255.255.255.0", "Gateway": "10.0.2.2"}}} {
		if diff := cmp.Diff(want, eth0[k]); diff != "" {
			t.Errorf("eth0 %s (-want +got):\n%s", k, diff)
		}
	}
	eth1 := env.Admin.GetOK(ethURI + "/eth1")
	if eth1["LinkStatus"] != "NoLink" || eth1["InterfaceEnabled"] != false || len(eth1["IPv4StaticAddresses"].([]any)) != 0 {
		t.Errorf("eth1: got LinkStatus %v, InterfaceEnabled %v, IPv4StaticAddresses %v", eth1["LinkStatus"], eth1["InterfaceEnabled"], eth1["IPv4StaticAddresses"])
	}
	if _, ok := eth1["MACAddress"]; ok {
		t.Error("eth1 without a hardware address shows a MACAddress")
	}
}

func TestEthernetPatch(t *testing.T) {
	start := api.NetworkSettings{Interface: "eth0", IPv4Address: netip.MustParsePrefix("10.0.2.15/24"),
		IPv4Gateway: netip.MustParseAddr("10.0.2.2")}
	static := func(entries ...any) map[string]any {
		if entries == nil {
			entries = []any{}
		}
		return map[string]any{"IPv4StaticAddresses": entries}
	}
	addr := func(a, mask, gw string) map[string]any {
		m := map[string]any{}
		for k, v := range map[string]string{"Address": a, "SubnetMask": mask, "Gateway": gw} {
			if v != "-" {
				m[k] = v
			}
		}
		return m
	}
	eth0, eth1 := ethURI+"/eth0", ethURI+"/eth1"
	nw := &fakeNetwork{}
	env := networkEnv(t, nw)
	for _, tc := range []struct {
		name   string
		uri    string
		body   any
		status int
		msg    string
		want   api.NetworkSettings // when 200
		reset  bool                // the answer says a reboot applies it
	}{
		{"host name", eth1, map[string]any{"HostName": "pool-7"}, 200, "",
			api.NetworkSettings{HostName: "pool-7", Interface: "eth0", IPv4Address: start.IPv4Address, IPv4Gateway: start.IPv4Gateway}, false},
		{"host name with a domain", eth0, map[string]any{"HostName": "pool.example.com"}, 400, "PropertyValueFormatError", start, false},
		{"host name empty", eth0, map[string]any{"HostName": ""}, 400, "PropertyValueFormatError", start, false},
		{"fqdn", eth0, map[string]any{"FQDN": "a.b"}, 400, "PropertyNotWritable", start, false},
		{"dhcp on", eth0, map[string]any{"DHCPv4": map[string]any{"DHCPEnabled": true}}, 200, "",
			api.NetworkSettings{Interface: "eth0", DHCPv4: true}, true},
		{"dhcp on, static cleared", eth0, map[string]any{"DHCPv4": map[string]any{"DHCPEnabled": true}, "IPv4StaticAddresses": []any{}}, 200, "",
			api.NetworkSettings{Interface: "eth0", DHCPv4: true}, true},
		{"dhcp on with a static address", eth0, map[string]any{"DHCPv4": map[string]any{"DHCPEnabled": true},
			"IPv4StaticAddresses": []any{addr("10.0.2.16", "255.255.255.0", "-")}}, 400, "PropertyValueConflict", start, false},
		{"dhcp on another interface", eth1, map[string]any{"DHCPv4": map[string]any{"DHCPEnabled": true}}, 200, "",
			api.NetworkSettings{Interface: "eth1", DHCPv4: true}, true},
		{"dhcp off on an unconfigured interface", eth1, map[string]any{"DHCPv4": map[string]any{"DHCPEnabled": false}}, 400, "PropertyValueConflict", start, false},
		{"dhcp off", eth0, map[string]any{"DHCPv4": map[string]any{"DHCPEnabled": false}}, 200, "", start, false},
		{"dhcp option", eth0, map[string]any{"DHCPv4": map[string]any{"UseNTPServers": true}}, 400, "PropertyUnknown", start, false},
		{"new address", eth0, static(addr("192.168.1.50", "255.255.255.0", "192.168.1.1")), 200, "",
			api.NetworkSettings{Interface: "eth0", IPv4Address: netip.MustParsePrefix("192.168.1.50/24"), IPv4Gateway: netip.MustParseAddr("192.168.1.1")}, true},
		{"keep with {}", eth0, static(map[string]any{}), 200, "", start, false},
		{"change the gateway only", eth0, static(map[string]any{"Gateway": "10.0.2.1"}), 200, "",
			api.NetworkSettings{Interface: "eth0", IPv4Address: start.IPv4Address, IPv4Gateway: netip.MustParseAddr("10.0.2.1")}, true},
		{"no gateway", eth0, static(map[string]any{"Gateway": ""}), 200, "",
			api.NetworkSettings{Interface: "eth0", IPv4Address: start.IPv4Address}, true},
		{"moves to another interface", eth1, static(addr("10.9.0.2", "255.255.0.0", "-")), 200, "",
			api.NetworkSettings{Interface: "eth1", IPv4Address: netip.MustParsePrefix("10.9.0.2/16")}, true},
		{"remove the only address", eth0, static(nil), 400, "ArraySizeTooShort", start, false},
		{"empty list", eth0, static(), 400, "ArraySizeTooShort", start, false},
		{"two addresses", eth0, static(map[string]any{}, addr("10.0.3.1", "255.255.255.0", "-")), 400, "ArraySizeTooLong", start, false},
		{"no mask on a new interface", eth1, static(addr("10.9.0.2", "-", "-")), 400, "PropertyMissing", start, false},
		{"{} on an unconfigured interface", eth1, static(map[string]any{}), 400, "PropertyMissing", start, false},
		{"bad address", eth0, static(addr("10.0.2.300", "255.255.255.0", "-")), 400, "PropertyValueFormatError", start, false},
		{"IPv6 address", eth0, static(addr("2001:db8::1", "255.255.255.0", "-")), 400, "PropertyValueFormatError", start, false},
		{"loopback", eth0, static(addr("127.0.0.2", "255.0.0.0", "-")), 400, "PropertyValueIncorrect", start, false},
		{"network address", eth0, static(addr("10.0.2.0", "255.255.255.0", "-")), 400, "PropertyValueIncorrect", start, false},
		{"broadcast address", eth0, static(addr("10.0.2.255", "255.255.255.0", "-")), 400, "PropertyValueIncorrect", start, false},
		{"holey mask", eth0, static(addr("10.0.2.9", "255.0.255.0", "-")), 400, "PropertyValueIncorrect", start, false},
		{"gateway elsewhere", eth0, static(addr("10.0.2.9", "255.255.255.0", "10.0.3.1")), 400, "PropertyValueConflict", start, false},
		{"gateway is the address", eth0, static(addr("10.0.2.9", "255.255.255.0", "10.0.2.9")), 400, "PropertyValueConflict", start, false},
		{"origin", eth0, static(map[string]any{"AddressOrigin": "DHCP"}), 400, "PropertyNotWritable", start, false},
		{"unknown interface", ethURI + "/wlan0", map[string]any{"HostName": "x"}, 404, "ResourceNotFound", start, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nw.mu.Lock()
			nw.s = start
			nw.mu.Unlock()
			r := env.Admin.Patch(tc.uri, tc.body)
			wantStatus(t, tc.name, r, tc.status, tc.msg)
			if diff := cmp.Diff(tc.want, nw.settings(), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }),
				cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("stored settings (-want +got):\n%s", diff)
			}
			if r.Status != http.StatusOK {
				return
			}
			apitest.Validate(t, r.Body)
			if got := slices.Contains(sessionMessages(t, r), "Base.1.22.ResetRequired"); got != tc.reset {
				t.Errorf("ResetRequired in the answer: got %v, want %v", got, tc.reset)
			}
		})
	}
}

// TestEthernetDHCP: from a box on DHCP, the lease's address shows its
// origin; a static address needs DHCP off in the same request, and DHCP
// goes off only with a static address to take its place.
func TestEthernetDHCP(t *testing.T) {
	start := api.NetworkSettings{Interface: "eth0", DHCPv4: true}
	nw := &fakeNetwork{s: start}
	env := networkEnv(t, nw)
	eth0 := ethURI + "/eth0"
	got := env.Admin.GetOK(eth0)
	apitest.Validate(t, mustJSON(t, got))
	if diff := cmp.Diff(map[string]any{"DHCPEnabled": true}, got["DHCPv4"]); diff != "" {
		t.Errorf("DHCPv4 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]any{"Address": "10.0.2.15", "SubnetMask": "255.255.255.0", "AddressOrigin": "DHCP"},
		got["IPv4Addresses"].([]any)[0]); diff != "" {
		t.Errorf("leased address (-want +got):\n%s", diff)
	}
	if n := len(got["IPv4StaticAddresses"].([]any)); n != 0 {
		t.Errorf("IPv4StaticAddresses under DHCP: got %d, want none", n)
	}
	static := []any{map[string]any{"Address": "192.168.1.50", "SubnetMask": "255.255.255.0", "Gateway": "192.168.1.1"}}
	off := map[string]any{"DHCPEnabled": false}
	for _, tc := range []struct {
		name   string
		body   any
		status int
		msg    string
		want   api.NetworkSettings
		reset  bool
	}{
		{"static while on", map[string]any{"IPv4StaticAddresses": static}, 400, "PropertyValueConflict", start, false},
		{"off without an address", map[string]any{"DHCPv4": off}, 400, "PropertyValueConflict", start, false},
		{"off and cleared", map[string]any{"DHCPv4": off, "IPv4StaticAddresses": []any{}}, 400, "ArraySizeTooShort", start, false},
		{"keep it on", map[string]any{"IPv4StaticAddresses": []any{}}, 200, "", start, false},
		{"off with an address", map[string]any{"DHCPv4": off, "IPv4StaticAddresses": static}, 200, "",
			api.NetworkSettings{Interface: "eth0", IPv4Address: netip.MustParsePrefix("192.168.1.50/24"), IPv4Gateway: netip.MustParseAddr("192.168.1.1")}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nw.mu.Lock()
			nw.s = start
			nw.mu.Unlock()
			r := env.Admin.Patch(eth0, tc.body)
			wantStatus(t, tc.name, r, tc.status, tc.msg)
			if diff := cmp.Diff(tc.want, nw.settings(), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }),
				cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("stored settings (-want +got):\n%s", diff)
			}
			if r.Status != http.StatusOK {
				return
			}
			if got := slices.Contains(sessionMessages(t, r), "Base.1.22.ResetRequired"); got != tc.reset {
				t.Errorf("ResetRequired in the answer: got %v, want %v", got, tc.reset)
			}
		})
	}
}
