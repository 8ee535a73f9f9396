package webui_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"cxlpool/api"
	"cxlpool/api/apitest"
	"cxlpool/fleet"
)

// consoleFleet is a fleet plane the test sets the state of.
type consoleFleet struct {
	mu    sync.Mutex
	st    api.FleetStatus
	boxes []fleet.Inventory
}

func (f *consoleFleet) FleetStatus() api.FleetStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st
}

func (f *consoleFleet) FleetBoxes(context.Context) ([]fleet.Inventory, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.st.Connected() {
		return nil, api.ErrFleetNotJoined
	}
	return f.boxes, nil
}

// TestFleetInBrowser: the fleet page lists the boxes, their free
// capacity per region and their hosts, answers the placement form (an
// offer, and a refusal naming the quota), and shows the plane's reason
// when it is not connected. A host account has no fleet page.
func TestFleetInBrowser(t *testing.T) {
	skipBrowser(t)
	const gib = 1 << 30
	at := time.Now().UTC()
	f := &consoleFleet{st: api.FleetStatus{State: "Connected", Box: "box-a", Servers: "nats://127.0.0.1:4222", Embedded: true},
		boxes: []fleet.Inventory{
			{Box: "box-a", Serial: "0xa", Firmware: "1.2", API: "https://a:8443/redfish/v1", Health: fleet.HealthOK, Updated: at,
				Heads:   []fleet.Head{{LD: 0, Host: "gpu1", LinkUp: true}},
				Regions: []fleet.RegionCapacity{{Index: 0, Length: 16 * gib, BlockSize: gib, Free: 12 * gib, Reserved: 4 * gib, Granted: 4 * gib}}},
			{Box: "box-b", Serial: "0xb", Firmware: "1.2", API: "https://b:8443/redfish/v1", Health: fleet.HealthWarning, Updated: at,
				Heads:   []fleet.Head{{LD: 0, Host: "gpu2", LinkUp: true, Granted: 2 * gib, Quota: 2 * gib}, {LD: 1, Host: "gpu3", LinkUp: false}},
				Regions: []fleet.RegionCapacity{{Index: 0, Length: 8 * gib, BlockSize: gib, Free: 6 * gib, Reserved: 2 * gib, Granted: 2 * gib}}},
		}}
	env := apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) { c.Fleet = f }})
	b := newBrowser(t, env.HTTP.URL)

	b.login("admin", apitest.AdminPassword)
	b.page("fleet", "Fleet")
	b.wait("two boxes", `document.querySelectorAll('#fleet-boxes tbody tr').length === 2`)
	b.wait("free per region", `document.querySelector('#fleet-regions').textContent.includes('12 GiB') && document.querySelector('#fleet-regions').textContent.includes('6 GiB')`)
	b.wait("three hosts", `document.querySelectorAll('#fleet-hosts tbody tr').length === 3`)
	b.wait("connected", `document.querySelector('#fleet-state').textContent.includes('Connected')`)
	b.shot("fleet-01-boxes")

	b.ask("gpu1", "8")
	b.wait("offer of box-a", `document.querySelector('#place-best') && document.querySelector('#place-best').textContent.includes('box-a') && document.querySelector('#place-best').textContent.includes('https://a:8443/redfish/v1')`)
	b.shot("fleet-02-offer")

	b.ask("gpu2", "1")
	b.wait("refusal naming the quota", `document.querySelector('#place-none') && document.querySelector('#place-refusals').textContent.includes('quota')`)
	b.shot("fleet-03-refusal")

	f.mu.Lock()
	f.st = api.FleetStatus{State: "Retrying", Box: "box-a", Servers: "nats://127.0.0.1:4222", Embedded: true, Attempts: 4,
		LastError: "listen tcp 127.0.0.1:4222: bind: address already in use", Since: at, Next: at.Add(8 * time.Second)}
	f.mu.Unlock()
	b.page("fleet", "Fleet")
	b.wait("the plane's reason", `document.querySelector('#fleet-error') && document.querySelector('#fleet-error').textContent.includes('address already in use')`)
	b.shot("fleet-04-retrying")
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("browser errors:\n%s", strings.Join(errs, "\n"))
	}
	b.logout()

	b.login(apitest.UserHost0, apitest.UserPassword)
	if eval[bool](b, `[...document.querySelectorAll('nav a')].some(a => a.textContent === 'Fleet')`) {
		t.Error("a host account sees the fleet page")
	}
}

// ask fills the placement form (emptied first, as a user would) and
// submits it.
func (b *browser) ask(host, gib string) {
	b.t.Helper()
	clear := `for (const id of ['#place-host', '#place-size']) { const e = document.querySelector(id); e.value = ''; e.dispatchEvent(new Event('input', { bubbles: true })); }`
	eval[bool](b, clear+"; true")
	b.do("ask for "+host, chromedp.SendKeys(chromedp.CSS("#place-host"), host),
		chromedp.SendKeys(chromedp.CSS("#place-size"), gib), chromedp.Click(chromedp.CSS("#place-ask")))
}
