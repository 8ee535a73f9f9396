package webui_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"cxlpool/api/apitest"
)

// TestConsoleScreenshots writes the README's console screenshots: every
// page once, as an administrator, on a box with something to show (Host2
// holding a chunk of its own and sharing one with Host5 under load, a KV
// namespace), plus two pages at phone width and a host account's view.
// It runs only when WEBUI_README_SHOTS names the directory to write
// (webui/screenshots for the README):
//
//	WEBUI_README_SHOTS=$PWD/webui/screenshots go test ./webui -run TestConsoleScreenshots
func TestConsoleScreenshots(t *testing.T) {
	dir := os.Getenv("WEBUI_README_SHOTS")
	if dir == "" {
		t.Skip("WEBUI_README_SHOTS is not set: no README screenshots to write")
	}
	skipBrowser(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	env := apitest.NewServer(t)
	sharedScene(t, env)
	if env.App.KV != nil {
		r := env.Admin.Post("/redfish/v1/Oem/CxlPool/KVNamespaces", map[string]any{"Name": "llama70b", "ChunkSizeMiB": 256, "QuotaMiB": 2048, "Hosts": []string{"Host0", "Host1"}})
		if r.Status != http.StatusCreated {
			t.Fatalf("creating a KV namespace: %s", r)
		}
	}
	b := newBrowser(t, env.HTTP.URL)
	// What the window shows, as JPEG at 60 %: 15–90 KiB a page instead
	// of 100–300 KiB for a full-length PNG.
	save := func(name string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
		defer cancel()
		q := int64(60)
		img, err := chromedp.Run(ctx, chromedp.Action[[]byte](func(ctx context.Context, tg *chromedp.Target) ([]byte, error) {
			r, err := cdp.Call(ctx, tg, page.CaptureScreenshot, page.CaptureScreenshotParams{Format: page.CaptureScreenshotFormatJpeg, Quality: &q})
			if err != nil {
				return nil, err
			}
			return r.Data, nil
		}))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".jpg"), img, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b.do("viewport", chromedp.EmulateViewport(1280, 800))
	b.do("open the console", chromedp.Navigate(env.HTTP.URL+"/"))
	b.wait("login form", `document.querySelector('#login-user')`)
	save("login")
	b.login("admin", apitest.AdminPassword)
	for _, p := range []struct{ path, heading, ready string }{
		{"dashboard", "Dashboard", `document.querySelectorAll('.gauge').length >= 5`},
		{"hosts", "Hosts & capacity", `document.querySelectorAll('#hosts-table tbody tr').length === 8`},
		{"topology", "Topology", `document.querySelectorAll('#topology-svg [data-region-label]').length === 2`},
		{"hotpages", "Hot pages", `!document.querySelector('#heat-frames') || (Number(document.querySelector('#heat-frames').textContent) > 20 && document.querySelector('table.topk'))`},
		{"events", "Events & audit log", `document.querySelectorAll('#log-EventLog tbody tr').length > 0`},
		{"board", "Sensors, fans & power", `true`},
		{"exports", "Exports", `true`},
		{"kv", "KV-cache namespaces", `document.querySelector('tr[data-ns]') || document.querySelector('.unavailable')`},
		{"firmware", "Firmware", `true`},
		{"users", "Users & roles", `document.querySelector('#accounts tbody tr')`},
		{"network", "Network & time", `true`},
		{"settings", "Settings", `true`},
	} {
		b.page(p.path, p.heading)
		b.wait(p.path+" ready", p.ready)
		save(p.path)
	}
	b.do("phone width", chromedp.EmulateViewport(390, 844))
	for _, p := range []struct{ path, heading string }{{"hosts", "Hosts & capacity"}, {"hotpages", "Hot pages"}} {
		b.page(p.path, p.heading)
		save("phone-" + p.path)
	}
	b.do("viewport", chromedp.EmulateViewport(1280, 800))
	b.logout()
	b.login(apitest.UserHost0, apitest.UserPassword)
	b.do("open exports as a host", chromedp.Navigate(env.HTTP.URL+"/#/exports"))
	b.wait("not permitted", `document.querySelector('#not-permitted')`)
	save("host-not-permitted")
}
