package webui_test

import (
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"cxlpool/api/apitest"
)

// TestHostsQuotaResize: on the hosts page an administrator sets Host3's
// quota and sees it in the table, resizes Host3 up from nothing (one
// chunk granted, its task followed to Completed) and back down to nothing
// (the chunk released, task Completed), and sees the box refuse a grant
// beyond the quota with its own message; a read-only user is offered none
// of these controls.
func TestHostsQuotaResize(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("no Chromium at %s (apt-get install chromium): %v", chromiumPath, err)
	}
	env := apitest.NewServer(t)
	b := newBrowser(t, env.HTTP.URL)
	oem := func(sys string) map[string]any {
		return env.Admin.GetOK("/redfish/v1/Systems/" + sys)["Oem"].(map[string]any)["CxlPool"].(map[string]any)
	}
	chunks := func() float64 {
		return env.Admin.GetOK("/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks")["Members@odata.count"].(float64)
	}

	// Host0's agent reports (an empty report: it holds nothing yet).
	if r := env.Host0.Post("/redfish/v1/Systems/Host0/Actions/Oem/CxlPool.HostReport", map[string]any{"Tags": []any{}}); r.Status != 204 {
		t.Fatalf("host report: %s", r)
	}
	b.login("admin", apitest.AdminPassword)
	b.page("hosts", "Hosts & capacity")
	b.wait("8 hosts", `document.querySelectorAll('#hosts-table tbody tr').length === 8`)
	b.wait("Host0's agent shown", `document.querySelector('tr[data-host="Host0"] [data-agent="Reporting"]') !== null`)
	if n := eval[int](b, `document.querySelectorAll('[data-agent]').length`); n != 1 {
		t.Errorf("%d hosts show an agent, want 1 (only Host0 reports)", n)
	}
	for _, label := range []string{"Set quota of", "Resize"} {
		if n := eval[int](b, `document.querySelectorAll('button[aria-label^="`+label+` Host"]').length`); n != 8 {
			t.Errorf("%q buttons for the administrator: got %d, want 8", label, n)
		}
	}

	// Quota: 2 GiB, set with the keyboard (Enter submits), shown in the table.
	b.clickLabel("Set quota of Host3")
	b.wait("quota dialog", `document.querySelector('dialog[open] #quota-size')`)
	b.do("type the quota",
		chromedp.SetValue(chromedp.CSS("#quota-size"), ""),
		chromedp.SendKeys(chromedp.CSS("#quota-size"), "2\r"),
	)
	b.wait("quota set", `document.querySelector('#quota-result')`)
	b.shot("hosts-01-quota-set")
	b.do("close the dialog", chromedp.Click(chromedp.CSS("#dlg-done")))
	b.wait("Host3's quota in the table", `document.querySelector('tr[data-host="Host3"] td.quota').textContent.includes('2 GiB')`)
	if got := oem("Host3")["QuotaMiB"]; got != float64(2048) {
		t.Errorf("Host3 QuotaMiB: got %v, want 2048", got)
	}
	b.shot("hosts-02-quota-in-table")

	// Resize up from nothing: one chunk of 1 GiB granted, task Completed.
	b.clickLabel("Resize Host3")
	b.wait("resize dialog", `document.querySelector('dialog[open] #resize-target')`)
	if got := eval[string](b, `document.querySelector('#resize-granted').textContent`); got != "0 MiB" {
		t.Errorf("resize dialog shows Host3 holding %q, want 0 MiB", got)
	}
	b.do("target 1 GiB",
		chromedp.SetValue(chromedp.CSS("#resize-target"), ""),
		chromedp.SendKeys(chromedp.CSS("#resize-target"), "1"),
		chromedp.Click(chromedp.CSS("#resize-next")),
	)
	b.wait("grow review", `document.querySelector('#dlg-confirm') && document.querySelector('#dlg-confirm').textContent === 'Grant 1 GiB'`)
	b.do("confirm the grow", chromedp.Click(chromedp.CSS("#dlg-confirm")))
	b.wait("grow task completed", `document.querySelector('#resize-result') && [...document.querySelectorAll('dialog[open] .task .badge')].some(x => x.textContent === 'Completed')`)
	b.shot("hosts-03-grown")
	if got := oem("Host3")["GrantedMiB"]; got != float64(1024) {
		t.Errorf("Host3 GrantedMiB after growing: got %v, want 1024", got)
	}
	b.do("close the dialog", chromedp.Click(chromedp.CSS("#dlg-done")))
	b.wait("Host3 holds a chunk", `document.querySelector('tr[data-host="Host3"] .chip')`)

	// Resize down to nothing: the chunk is proposed, released, and the
	// capacity goes back to the pool.
	b.clickLabel("Resize Host3")
	b.wait("resize dialog", `document.querySelector('dialog[open] #resize-target') && document.querySelector('#resize-granted').textContent === '1 GiB'`)
	b.do("target 0",
		chromedp.SetValue(chromedp.CSS("#resize-target"), ""),
		chromedp.SendKeys(chromedp.CSS("#resize-target"), "0"),
		chromedp.Click(chromedp.CSS("#resize-next")),
	)
	b.wait("shrink review", `document.querySelector('#dlg-confirm') && document.querySelectorAll('input[name="resize-chunk"]:checked').length === 1`)
	if got := eval[string](b, `document.querySelector('#resize-after').textContent`); got != "0 MiB" {
		t.Errorf("shrink plan leaves Host3 with %q, want 0 MiB", got)
	}
	b.shot("hosts-04-shrink-plan")
	b.do("confirm the shrink", chromedp.Click(chromedp.CSS("#dlg-confirm")))
	b.wait("shrink task completed", `document.querySelector('#resize-result') && [...document.querySelectorAll('dialog[open] .task .badge')].some(x => x.textContent === 'Completed')`)
	b.shot("hosts-05-shrunk")
	b.do("close the dialog", chromedp.Click(chromedp.CSS("#dlg-done")))
	b.wait("Host3 holds nothing", `document.querySelector('tr[data-host="Host3"]') && !document.querySelector('tr[data-host="Host3"] .chip')`)
	if got := oem("Host3")["GrantedMiB"]; got != float64(0) {
		t.Errorf("Host3 GrantedMiB after shrinking: got %v, want 0", got)
	}
	if n := chunks(); n != 0 {
		t.Errorf("chunks after shrinking to nothing: got %v, want 0 (returned to the pool)", n)
	}

	// A grant beyond the quota: the box's refusal, and nothing left behind.
	b.allow(http.StatusConflict, "/Fabrics/CXL/Connections")
	b.clickLabel("Grant capacity to Host3")
	b.wait("grant dialog", `document.querySelector('dialog[open] #grant-size')`)
	b.do("4 GiB",
		chromedp.SetValue(chromedp.CSS("#grant-size"), ""),
		chromedp.SendKeys(chromedp.CSS("#grant-size"), "4"),
		chromedp.Click(chromedp.CSS("#grant-next")),
	)
	b.wait("grant confirmation", `document.querySelector('#dlg-confirm')`)
	b.do("confirm the grant", chromedp.Click(chromedp.CSS("#dlg-confirm")))
	b.wait("the box's refusal", `document.querySelector('dialog[open] .alert.bad') && document.querySelector('#dlg-done')`)
	msg := eval[string](b, `document.querySelector('dialog[open] .alert.bad').textContent`)
	if !strings.Contains(msg, "409") || !strings.Contains(msg, "limit of possible resources") || !strings.Contains(msg, "quota") {
		t.Errorf("refusal shown: got %q, want the server's 409 CreateLimitReachedForResource naming the quota", msg)
	}
	b.shot("hosts-06-over-quota")
	b.do("close the dialog", chromedp.Click(chromedp.CSS("#dlg-done")))
	if n := chunks(); n != 0 {
		t.Errorf("chunks after a refused grant: got %v, want 0 (the reservation given back)", n)
	}

	// A read-only user sees the quota but no control to change it.
	b.logout()
	b.login(apitest.UserReadOnly, apitest.UserPassword)
	b.page("hosts", "Hosts & capacity")
	b.wait("8 hosts for the reader", `document.querySelectorAll('#hosts-table tbody tr').length === 8`)
	if got := eval[string](b, `document.querySelector('tr[data-host="Host3"] td.quota').textContent`); !strings.Contains(got, "2 GiB") {
		t.Errorf("Host3's quota for the reader: got %q, want 2 GiB", got)
	}
	if n := eval[int](b, `document.querySelectorAll('button[aria-label^="Set quota of"], button[aria-label^="Resize "]').length`); n != 0 {
		t.Errorf("quota/resize controls for a read-only user: got %d, want none", n)
	}
	b.shot("hosts-07-readonly")

	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("browser console errors:\n%s", strings.Join(errs, "\n"))
	}
}
