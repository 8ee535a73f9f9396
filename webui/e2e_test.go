package webui_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"cxlpool/api/apitest"
	"cxlpool/sim"
)

// The console in a real browser: headless Chromium drives it against the
// daemon's API on the virtual box, as an administrator and then as a
// read-only user. Every page is screenshotted (into $WEBUI_SCREENSHOTS if
// set, else a temporary directory) and any error the browser reports
// fails the test, apart from the refusals a step provokes on purpose.

const chromiumPath = "/usr/bin/chromium"

// stepTimeout guards each browser step so that a broken page fails the
// test instead of hanging it; it is not a performance assertion.
const stepTimeout = 60 * time.Second

type browser struct {
	t    *testing.T
	ctx  context.Context
	base string
	dir  string

	mu       sync.Mutex
	messages []chromedp.ConsoleMessage
	allowed  []string // "STATUS URL-substring" of refusals a step expects
}

func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("no Chromium at %s (apt-get install chromium): %v", chromiumPath, err)
	}
	dir := os.Getenv("WEBUI_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.WindowSize(1360, 900),
		chromedp.UserDataDir(t.TempDir()),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{t: t, ctx: ctx, base: base, dir: dir}
	// Start the browser and its tab before subscribing to the console,
	// so that no message of the first page is lost.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.messages = append(b.messages, m)
			b.mu.Unlock()
		}
	}()
	t.Logf("screenshots in %s", dir)
	return b
}

// do runs steps with the step guard.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.shot("failed-" + strings.ReplaceAll(what, " ", "-"))
		b.t.Fatalf("%s: %v", what, err)
	}
}

// wait polls a JavaScript expression until it is truthy.
func (b *browser) wait(what, expr string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[any](expr, chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		b.shot("failed-" + strings.ReplaceAll(what, " ", "-"))
		b.t.Fatalf("waiting for %s (%s): %v", what, expr, err)
	}
}

func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

func (b *browser) shot(name string) {
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	if err := os.WriteFile(filepath.Join(b.dir, name+".png"), png, 0o644); err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
	}
}

// page opens a console page and waits until it has rendered its heading
// (and finished loading).
func (b *browser) page(name, heading string) {
	b.t.Helper()
	b.do("open "+name, chromedp.Navigate(b.base+"/#/"+name))
	b.wait(name+" page", fmt.Sprintf(`[...document.querySelectorAll('main h1')].some(h => h.textContent.includes(%q)) && !document.querySelector('main .loading')`, heading))
}

// allow expects a refusal: the browser logs a failed request to the
// console, which is not an error of the console's.
func (b *browser) allow(status int, urlPart string) {
	b.mu.Lock()
	b.allowed = append(b.allowed, fmt.Sprintf("%d %s", status, urlPart))
	b.mu.Unlock()
}

// errors returns the console errors and exceptions not expected.
func (b *browser) errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, m := range b.messages {
		if m.Type != chromedp.ConsoleError && m.Type != chromedp.ConsoleException {
			continue
		}
		expected := false
		for _, a := range b.allowed {
			status, part, _ := strings.Cut(a, " ")
			if m.Source == "network" && strings.Contains(m.Text, "status of "+status) && strings.Contains(m.URL, part) {
				expected = true
			}
		}
		if !expected {
			out = append(out, fmt.Sprintf("%s (%s:%d)", m.String(), m.URL, m.Line))
		}
	}
	return out
}

func (b *browser) login(user, password string) {
	b.t.Helper()
	b.do("open the login page", chromedp.Navigate(b.base+"/"))
	b.wait("login form", `document.querySelector('#login-user')`)
	// The keyboard alone: type the user, Tab to the password, Enter.
	b.do("log in as "+user,
		chromedp.SendKeys(chromedp.CSS("#login-user"), user),
		chromedp.SendKeys(chromedp.CSS("#login-password"), password+"\r"),
	)
	b.wait("logged in as "+user, fmt.Sprintf(`document.querySelector('#whoami') && document.querySelector('#whoami').textContent.includes(%q)`, user))
}

func (b *browser) logout() {
	b.t.Helper()
	b.do("log out", chromedp.Click(chromedp.CSS("#logout")))
	b.wait("login form after logout", `document.querySelector('#login-user')`)
}

// clickLabel clicks the button whose aria-label is label.
func (b *browser) clickLabel(label string) {
	b.t.Helper()
	b.do("click "+label, chromedp.Click(chromedp.CSS(fmt.Sprintf(`button[aria-label=%q]`, label))))
}

func TestConsoleInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("no Chromium at %s (apt-get install chromium): %v", chromiumPath, err)
	}
	env := apitest.NewServer(t)
	b := newBrowser(t, env.HTTP.URL)

	// The first page and its security headers.
	resp, err := http.Get(env.HTTP.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("Content-Security-Policy: got %q, want script-src 'self' and frame-ancestors 'none'", csp)
	}

	b.do("open the console", chromedp.Navigate(env.HTTP.URL+"/"))
	b.wait("login form", `document.querySelector('#login-user')`)
	b.shot("01-login")

	b.login("admin", apitest.AdminPassword)
	b.wait("dashboard gauges", `document.querySelectorAll('.gauge').length >= 5`)
	b.shot("02-dashboard")

	// Eight hosts, each with a grant button for the administrator.
	b.page("hosts", "Hosts & capacity")
	b.wait("8 hosts", `document.querySelectorAll('#hosts-table tbody tr').length === 8`)
	if n := eval[int](b, `document.querySelectorAll('button[aria-label^="Grant capacity to"]').length`); n != 8 {
		t.Errorf("grant buttons for the administrator: got %d, want 8", n)
	}
	b.shot("03-hosts")

	// Grant 1 GiB to Host2: review, confirm, watch the task finish.
	b.clickLabel("Grant capacity to Host2")
	b.wait("grant dialog", `document.querySelector('dialog[open] #grant-size')`)
	b.do("set the size, sharable",
		chromedp.SetValue(chromedp.CSS("#grant-size"), ""),
		chromedp.SendKeys(chromedp.CSS("#grant-size"), "1"),
		chromedp.Click(chromedp.CSS("#grant-sharable")),
		chromedp.Click(chromedp.CSS("#grant-next")),
	)
	b.wait("grant confirmation", `document.querySelector('#dlg-confirm')`)
	b.do("confirm the grant", chromedp.Click(chromedp.CSS("#dlg-confirm")))
	b.wait("grant task completed", `document.querySelector('#grant-result') && [...document.querySelectorAll('.task .badge')].some(x => x.textContent === 'Completed')`)
	b.shot("04-grant-done")
	sys := env.Admin.GetOK("/redfish/v1/Systems/Host2")
	if got := sys["Oem"].(map[string]any)["CxlPool"].(map[string]any)["GrantedMiB"]; got != float64(1024) {
		t.Errorf("Host2 GrantedMiB after the grant: got %v, want 1024", got)
	}
	b.do("close the dialog", chromedp.Click(chromedp.CSS("#dlg-done")))
	b.wait("Host2 holds a chunk", `document.querySelector('tr[data-host="Host2"] .chip')`)

	// Share it with Host5: the same memory, a second connection.
	b.wait("Host5's share button", `document.querySelector('button[aria-label="Share a chunk with Host5"]')`)
	b.clickLabel("Share a chunk with Host5")
	b.wait("share dialog", `document.querySelector('dialog[open] #share-chunk')`)
	b.do("confirm the share", chromedp.Click(chromedp.CSS("#dlg-confirm")))
	b.wait("share task completed", `[...document.querySelectorAll('dialog[open] .task .badge')].some(x => x.textContent === 'Completed')`)
	b.do("close the dialog", chromedp.Click(chromedp.CSS("#dlg-done")))
	b.wait("Host5 shares the chunk", `document.querySelector('tr[data-host="Host5"] .chip .badge.info')`)
	b.shot("04b-shared")

	// The topology shows the chunk placed and linked to Host2.
	b.page("topology", "Topology")
	b.wait("shared chunk in the topology", `document.querySelector('#topology-svg g[data-chunk] rect[fill^="url(#hatch-"]') && document.querySelectorAll('#topology-svg g[data-chunk] path').length === 2 && document.querySelectorAll('#topology-svg g[data-head]').length === 8`)
	b.shot("05-topology")

	// Hot pages from the telemetry WebSocket, where the box serves it.
	// Host2 runs a Zipf workload on what it holds, so the heatmap and its
	// top-K have something to show.
	if err := env.App.Box.StartWorkload(2, sim.WorkloadZipf, sim.WorkloadParams{}); err != nil {
		t.Fatalf("starting Host2's workload: %v", err)
	}
	b.page("hotpages", "Hot pages")
	if _, ok := env.Admin.GetOK("/redfish/v1")["TelemetryService"]; ok {
		b.wait("first heatmap frames", `Number((document.querySelector('#heat-frames') || {}).textContent) > 0`)
		first := eval[int](b, `Number(document.querySelector('#heat-frames').textContent)`)
		b.wait("the heatmap updates", fmt.Sprintf(`Number(document.querySelector('#heat-frames').textContent) > %d`, first+2))
		b.wait("the allocated heatmap drawn", `document.querySelector('#heat-groups canvas') && document.querySelector('#heat-groups canvas').width > 0`)
		b.do("the whole pool", chromedp.Click(chromedp.CSS("#heat-view-pool")))
		b.wait("the whole-pool heatmap drawn", `document.querySelector('#heatmap') && document.querySelector('#heatmap').width > 1`)
		b.wait("hot units in the pool's top-K", `document.querySelector('table.topk[data-scope="-2"] tbody tr')`)
	} else {
		t.Log("heatmap step skipped: this build serves no TelemetryService (no telemetry stream mounted)")
		b.wait("not-available state", `document.querySelector('.unavailable')`)
	}
	b.shot("06-hotpages")

	// Export the granted chunk to a remote rack, see the token once, revoke.
	b.page("exports", "Exports")
	if eval[bool](b, `!!document.querySelector('#export-create')`) {
		b.do("new export", chromedp.Click(chromedp.CSS("#export-create")))
		b.wait("export form", `document.querySelector('dialog[open] select#exp-chunk')`)
		b.do("create the export",
			chromedp.SendKeys(chromedp.CSS("#exp-client"), "rack7"),
			chromedp.Click(chromedp.CSS(`dialog[open] button[type="submit"]`)),
		)
		b.wait("the export's token", `document.querySelector('#export-token') && document.querySelector('#export-token').textContent.length > 10`)
		b.shot("06b-export-created")
		b.do("close", chromedp.Click(chromedp.CSS(`dialog[open] .dlg-actions button`)))
		b.wait("one export listed", `document.querySelectorAll('#exports tbody tr').length === 1`)
		b.do("revoke", chromedp.Click(chromedp.CSS(`#exports button[aria-label^="Revoke export"]`)))
		b.do("confirm the revocation", chromedp.Click(chromedp.CSS("#confirm-ok")))
		b.wait("no export left", `!document.querySelector('#exports') && !document.querySelector('dialog[open]')`)
	} else {
		t.Log("export step skipped: this build serves no RDMA fabric")
	}

	b.page("events", "Events & audit log")
	b.wait("event log entries", `document.querySelectorAll('#log-EventLog tbody tr').length > 0`)
	b.do("filter the event log", chromedp.SendKeys(chromedp.CSS("#log-filter"), "Task"))
	b.shot("07-events")
	b.do("open the audit log", chromedp.Click(chromedp.CSS("#tab-audit")))
	b.wait("audit entries naming the grant", `[...document.querySelectorAll('#log-AuditLog tbody tr')].some(r => r.textContent.includes('/Fabrics/CXL/Connections'))`)
	b.shot("08-audit")

	for i, p := range []struct{ path, heading string }{
		{"board", "Sensors, fans & power"},
		{"firmware", "Firmware"},
		{"users", "Users & roles"},
		{"settings", "Settings"},
	} {
		b.page(p.path, p.heading)
		b.shot(fmt.Sprintf("%02d-%s", 9+i, p.path))
	}

	// Release the capacity again and watch that task finish too.
	b.page("hosts", "Hosts & capacity")
	b.wait("Host5's release button", `document.querySelector('tr[data-host="Host5"] button[aria-label^="Release chunk"]')`)
	b.do("release from Host5", chromedp.Click(chromedp.CSS(`tr[data-host="Host5"] button[aria-label^="Release chunk"]`)))
	b.wait("release dialog", `document.querySelector('dialog[open] #dlg-confirm')`)
	if eval[bool](b, `!!document.querySelector('#release-free')`) {
		t.Error("releasing one holder of a shared chunk offers to return it to the pool")
	}
	b.do("confirm the release", chromedp.Click(chromedp.CSS("#dlg-confirm")))
	b.wait("release finished", `document.querySelector('#release-result')`)
	b.do("close the dialog", chromedp.Click(chromedp.CSS("#dlg-done")))
	b.wait("Host5 holds nothing", `document.querySelector('tr[data-host="Host5"]') && !document.querySelector('tr[data-host="Host5"] .chip')`)
	b.wait("Host2's release button", `document.querySelector('tr[data-host="Host2"] button[aria-label^="Release chunk"]')`)
	b.do("release", chromedp.Click(chromedp.CSS(`tr[data-host="Host2"] button[aria-label^="Release chunk"]`)))
	b.wait("release dialog", `document.querySelector('dialog[open] #dlg-confirm')`)
	b.do("confirm the release", chromedp.Click(chromedp.CSS("#dlg-confirm")))
	b.wait("release finished", `document.querySelector('#release-result')`)
	b.shot("14-release-done")
	b.do("close the dialog", chromedp.Click(chromedp.CSS("#dlg-done")))
	b.wait("Host2 holds nothing", `document.querySelector('tr[data-host="Host2"]') && !document.querySelector('tr[data-host="Host2"] .chip')`)
	if got := env.Admin.GetOK("/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks")["Members@odata.count"]; got != float64(0) {
		t.Errorf("chunks after the release: got %v, want 0 (returned to the pool)", got)
	}

	// Dark theme.
	b.page("dashboard", "Dashboard")
	b.wait("dashboard gauges", `document.querySelectorAll('.gauge').length >= 5`)
	b.do("switch to the light theme", chromedp.Click(chromedp.CSS(`.topbar button[aria-label^="Theme"]`)))
	b.do("switch to the dark theme", chromedp.Click(chromedp.CSS(`.topbar button[aria-label^="Theme"]`)))
	b.wait("dark theme", `document.documentElement.dataset.theme === 'dark'`)
	b.shot("15-dashboard-dark")
	b.do("back to the system theme", chromedp.Click(chromedp.CSS(`.topbar button[aria-label^="Theme"]`)))

	// A read-only user sees no button that would fail, and a direct
	// attempt shows the box's refusal.
	b.logout()
	b.login(apitest.UserReadOnly, apitest.UserPassword)
	b.page("hosts", "Hosts & capacity")
	b.wait("8 hosts for the reader", `document.querySelectorAll('#hosts-table tbody tr').length === 8`)
	if n := eval[int](b, `document.querySelectorAll('#hosts-table button').length`); n != 0 {
		t.Errorf("buttons on the hosts page for a read-only user: got %d, want 0", n)
	}
	b.shot("16-readonly-hosts")
	// No page offers the read-only user an action that would change the box.
	for _, p := range []struct{ path, heading string }{
		{"dashboard", "Dashboard"}, {"topology", "Topology"}, {"hotpages", "Hot pages"},
		{"events", "Events & audit log"}, {"board", "Sensors, fans & power"}, {"exports", "Exports"},
		{"firmware", "Firmware"}, {"users", "Users & roles"}, {"settings", "Settings"},
	} {
		b.page(p.path, p.heading)
		if n := eval[int](b, `document.querySelectorAll('main button.primary, main button.danger, main select:not([disabled]):not(#log-sev), main input:not([disabled]):not([type="search"])').length`); n != 0 {
			b.shot("failed-readonly-" + p.path)
			t.Errorf("%s page offers a read-only user %d change controls, want none", p.path, n)
		}
	}
	b.allow(http.StatusForbidden, "/MemoryChunks")
	b.page("dashboard", "Dashboard")
	b.do("open the grant form directly", chromedp.Navigate(env.HTTP.URL+"/#/hosts?grant=Host2"))
	b.wait("grant form", `document.querySelector('dialog[open] #grant-next')`)
	b.do("try to grant", chromedp.Click(chromedp.CSS("#grant-next")))
	b.wait("confirm button", `document.querySelector('#dlg-confirm')`)
	b.do("confirm", chromedp.Click(chromedp.CSS("#dlg-confirm")))
	b.wait("the box's refusal", `document.querySelector('dialog[open] .alert.bad')`)
	msg := eval[string](b, `document.querySelector('dialog[open] .alert.bad').textContent`)
	if !strings.Contains(msg, "403") || !strings.Contains(strings.ToLower(msg), "insufficient privileges") {
		t.Errorf("refusal shown: got %q, want the server's 403 InsufficientPrivilege message", msg)
	}
	b.shot("17-readonly-denied")

	// A host account sees its own host only, and may grant to it.
	b.do("close the dialog", chromedp.Click(chromedp.CSS("#dlg-done")))
	b.logout()
	b.login(apitest.UserHost0, apitest.UserPassword)
	b.page("hosts", "Hosts & capacity")
	b.wait("only Host0", `document.querySelectorAll('#hosts-table tbody tr').length === 1 && document.querySelector('tr[data-host="Host0"]')`)
	if n := eval[int](b, `document.querySelectorAll('button[aria-label="Grant capacity to Host0"]').length`); n != 1 {
		t.Errorf("grant buttons for Host0's own account: got %d, want 1", n)
	}
	if eval[bool](b, `[...document.querySelectorAll('nav a')].some(a => a.textContent === 'Exports')`) {
		t.Error("a host account is offered the Exports page")
	}
	b.shot("18-host-account")

	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("browser console errors:\n%s", strings.Join(errs, "\n"))
	}
}
