package webui_test

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"

	"cxlpool/api"
	"cxlpool/api/apitest"
)

func testInterfaces() ([]api.NetInterface, error) {
	mac, _ := net.ParseMAC("52:54:00:12:34:56")
	return []api.NetInterface{
		{Name: "eth0", MAC: mac, Up: true, Running: true, MTU: 1500, SpeedMbps: 1000, Addrs: []netip.Prefix{
			netip.MustParsePrefix("10.0.2.15/24"), netip.MustParsePrefix("fe80::5054:ff:fe12:3456/64")}},
		{Name: "eth1", Up: false, MTU: 1500},
	}, nil
}

// memNetwork is the image's settings hook, in memory.
type memNetwork struct {
	mu sync.Mutex
	s  api.NetworkSettings
}

func (m *memNetwork) NetworkSettings() (api.NetworkSettings, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.s, nil
}

func (m *memNetwork) UpdateNetworkSettings(update func(*api.NetworkSettings) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.s
	s.NTPServers = append([]string(nil), m.s.NTPServers...)
	if err := update(&s); err != nil {
		return err
	}
	m.s = s
	return nil
}

// TestNetworkInBrowser: the Network & time page lists the interfaces;
// an administrator's NTP save where the host's operating system owns the
// network shows the box's refusal and why; a read-only user sees no form;
// and on the image an address change says it applies at the next boot.
func TestNetworkInBrowser(t *testing.T) {
	skipBrowser(t)
	env := apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) { c.NetInterfaces = testInterfaces }})
	b := newBrowser(t, env.HTTP.URL)
	b.allow(http.StatusBadRequest, "/redfish/v1/Managers/FM")

	b.login("admin", apitest.AdminPassword)
	b.page("network", "Network & time")
	b.wait("two interfaces", `document.querySelectorAll('#interfaces tbody tr').length === 2`)
	if row := eval[string](b, `document.querySelector('tr[data-iface="eth0"]').textContent`); !strings.Contains(row, "10.0.2.15/24") ||
		!strings.Contains(row, "52:54:00:12:34:56") || !strings.Contains(row, "1000 Mbit/s") {
		t.Errorf("eth0 row: got %q, want its address, MAC and speed", row)
	}
	b.do("enter NTP servers",
		chromedp.SendKeys(chromedp.CSS("#ntp-servers"), "pool.ntp.org 192.168.1.1"),
		chromedp.Click(chromedp.CSS("#ntp-enabled")),
		chromedp.Click(chromedp.CSS("#ntp-save")),
	)
	b.wait("the box's refusal", `document.querySelector('#ntp-form .alert.bad')`)
	if msg := eval[string](b, `document.querySelector('#ntp-form .alert.bad').textContent`); !strings.Contains(msg, "400") ||
		!strings.Contains(msg, "NTP") || !strings.Contains(msg, "operating system") {
		t.Errorf("NTP refusal shown: got %q, want the server's 400 PropertyNotWritable saying the operating system owns it", msg)
	}
	b.do("set the time", chromedp.Click(chromedp.CSS("#time-browser")), chromedp.Click(chromedp.CSS("#time-save")))
	b.wait("the clock's refusal", `document.querySelector('#time-form .alert.bad')`)
	b.shot("network-01-admin-host-os")

	b.logout()
	b.login(apitest.UserReadOnly, apitest.UserPassword)
	b.page("network", "Network & time")
	b.wait("two interfaces for the reader", `document.querySelectorAll('#interfaces tbody tr').length === 2`)
	if n := eval[int](b, `document.querySelectorAll('main form, main button.primary, main input, main select').length`); n != 0 {
		t.Errorf("network page offers a read-only user %d forms and controls, want none", n)
	}
	b.shot("network-02-readonly")
	b.logout()
	b.login(apitest.UserHost0, apitest.UserPassword)
	if eval[bool](b, `[...document.querySelectorAll('nav a')].some(a => a.textContent === 'Network & time')`) {
		t.Error("a host account is offered the Network & time page")
	}
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("browser console errors:\n%s", strings.Join(errs, "\n"))
	}

	// On the image: the address is stored for the next boot.
	nw := &memNetwork{s: api.NetworkSettings{Interface: "eth0", IPv4Address: netip.MustParsePrefix("10.0.2.15/24"),
		IPv4Gateway: netip.MustParseAddr("10.0.2.2")}}
	img := apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) { c.NetInterfaces, c.Network = testInterfaces, nw }})
	b2 := newBrowser(t, img.HTTP.URL)
	b2.login("admin", apitest.AdminPassword)
	b2.page("network", "Network & time")
	b2.wait("the configured address", `document.querySelector('#addr-address') && document.querySelector('#addr-address').value === '10.0.2.15'`)
	eval[bool](b2, `(document.querySelector('#addr-address').value = '') === ''`)
	b2.do("change the address",
		chromedp.SendKeys(chromedp.CSS("#addr-address"), "10.0.2.20"),
		chromedp.Click(chromedp.CSS("#addr-save")),
	)
	b2.wait("saved for the next boot", `document.querySelector('#address-form .alert.ok')`)
	if msg := eval[string](b2, `document.querySelector('#address-form .alert.ok').textContent`); !strings.Contains(msg, "next reboot") {
		t.Errorf("address saved: got %q, want it to say it applies at the next reboot", msg)
	}
	if got, _ := nw.NetworkSettings(); got.IPv4Address != netip.MustParsePrefix("10.0.2.20/24") {
		t.Errorf("stored address: got %v, want 10.0.2.20/24", got.IPv4Address)
	}
	b2.do("enter NTP servers",
		chromedp.SendKeys(chromedp.CSS("#ntp-servers"), "pool.ntp.org"),
		chromedp.Click(chromedp.CSS("#ntp-enabled")),
		chromedp.Click(chromedp.CSS("#ntp-save")),
	)
	b2.wait("NTP on", `document.querySelector('#ntp-state').textContent === 'on'`)
	b2.shot("network-03-image")
	if errs := b2.errors(); len(errs) > 0 {
		t.Errorf("browser console errors:\n%s", strings.Join(errs, "\n"))
	}
}
