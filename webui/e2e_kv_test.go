package webui_test

import (
	"context"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"cxlpool/api/apitest"
	"cxlpool/kv"
)

// TestKVNamespacesInBrowser: an administrator creates a KV-cache
// namespace for Host0 and Host1 in the console and is shown each host's
// token once; a block Host0 commits with that token shows in the list
// without a reload (the BlockStored event); the administrator resizes it,
// has Host2 join (its token shown) and Host1 leave, and deletes it; a
// read-only user sees the list without a control.
func TestKVNamespacesInBrowser(t *testing.T) {
	skipBrowser(t)
	env := apitest.NewServer(t)
	if env.App.KV == nil {
		t.Skip("this build runs no KV store")
	}
	b := newBrowser(t, env.HTTP.URL)
	b.login("admin", apitest.AdminPassword)
	b.page("kv", "KV-cache namespaces")
	b.wait("empty list", `document.querySelector('#kv-none')`)

	b.do("new namespace", chromedp.Click(chromedp.CSS("#kv-create")))
	b.wait("create form", `document.querySelector('dialog[open] #kv-name')`)
	b.do("fill the form",
		chromedp.SendKeys(chromedp.CSS("#kv-name"), "llama70b"),
		chromedp.SetValue(chromedp.CSS("#kv-chunk"), ""),
		chromedp.SendKeys(chromedp.CSS("#kv-chunk"), "256"),
		chromedp.SendKeys(chromedp.CSS("#kv-quota"), "1024"),
		chromedp.Click(chromedp.CSS("#kv-host-Host0")),
		chromedp.Click(chromedp.CSS("#kv-host-Host1")),
	)
	b.shot("kv-01-create")
	b.do("create", chromedp.Click(chromedp.CSS("#kv-create-submit")))
	b.wait("tokens shown", `document.querySelectorAll('#kv-tokens tbody tr').length === 2`)
	b.shot("kv-02-tokens")
	tok := eval[string](b, `[...document.querySelectorAll('#kv-tokens tbody tr')].find(r => r.cells[0].textContent === 'Host0').querySelector('.kv-token').textContent`)
	b.do("done", chromedp.Click(chromedp.CSS("#kv-done")))
	b.wait("the namespace listed", `document.querySelector('tr[data-ns="llama70b"]')`)
	if got := eval[string](b, `document.querySelector('tr[data-ns="llama70b"] .kv-members').textContent`); !strings.Contains(got, "Host0") || !strings.Contains(got, "Host1") {
		t.Errorf("members shown: got %q, want Host0 and Host1", got)
	}
	if got := eval[string](b, `document.querySelector('tr[data-ns="llama70b"] .kv-quota').textContent`); got != "1 GiB" {
		t.Errorf("quota shown: got %q, want 1 GiB", got)
	}

	// Host0 stores a block with its token: the page follows the event.
	raw, err := hex.DecodeString(tok)
	if err != nil || len(raw) != kv.TokenSize {
		t.Fatalf("token shown %q: not %d hex bytes (%v)", tok, kv.TokenSize, err)
	}
	sess, err := env.App.KV.Ix.Open("llama70b", 0, [kv.TokenSize]byte(raw), 0)
	if err != nil {
		t.Fatalf("opening a session with the token the console showed: %v", err)
	}
	defer sess.Close()
	res, err := sess.Put(context.Background(), []kv.PutItem{{Key: []byte("prefix-1"), Length: 1 << 20}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("put: %v %v", err, res)
	}
	if errs, err := sess.Commit([]uint64{res[0].Block.ID}); err != nil || errs[0] != nil {
		t.Fatalf("commit: %v %v", err, errs)
	}
	b.wait("the block counted live", `document.querySelector('tr[data-ns="llama70b"] .kv-blocks').textContent === '1'`)
	b.shot("kv-03-list")

	// Resize: the quota to 512 MiB.
	b.clickLabel("Resize namespace llama70b")
	b.wait("resize form", `document.querySelector('dialog[open] #kv-resize-quota')`)
	b.do("resize",
		chromedp.SetValue(chromedp.CSS("#kv-resize-quota"), ""),
		chromedp.SendKeys(chromedp.CSS("#kv-resize-quota"), "512"),
		chromedp.Click(chromedp.CSS("#kv-resize-submit")),
	)
	b.wait("quota 512 MiB", `!document.querySelector('dialog[open]') && document.querySelector('tr[data-ns="llama70b"] .kv-quota').textContent === '512 MiB'`)

	// Members: Host2 joins (its token shown once), Host1 leaves.
	b.clickLabel("Members of namespace llama70b")
	b.wait("members dialog", `document.querySelector('dialog[open] #kv-member-list')`)
	b.clickLabel("Add Host2 to llama70b")
	b.wait("Host2 joined with its token", `document.querySelector('dialog[open] #kv-tokens') && document.querySelector('dialog[open] #kv-tokens').textContent.includes('Host2') && document.querySelector('button[aria-label="Remove Host2 from llama70b"]')`)
	b.shot("kv-04-members")
	b.clickLabel("Remove Host1 from llama70b")
	b.wait("Host1 left", `document.querySelector('button[aria-label="Add Host1 to llama70b"]')`)
	b.do("done", chromedp.Click(chromedp.CSS("#kv-members-done")))
	b.wait("members Host0 and Host2", `(t => t.includes('Host0') && t.includes('Host2') && !t.includes('Host1'))(document.querySelector('tr[data-ns="llama70b"] .kv-members').textContent)`)
	ns, err := env.App.KV.Namespace("llama70b")
	if err != nil {
		t.Fatal(err)
	}
	if got := len(ns.Members); got != 2 {
		t.Errorf("members on the box: got %d, want 2 (Host0, Host2)", got)
	}

	// A read-only user sees the namespace and no control.
	b.logout()
	b.login(apitest.UserReadOnly, apitest.UserPassword)
	b.page("kv", "KV-cache namespaces")
	b.wait("the namespace for the reader", `document.querySelector('tr[data-ns="llama70b"]')`)
	if n := eval[int](b, `document.querySelectorAll('main button').length`); n != 0 {
		t.Errorf("buttons for a read-only user: got %d, want 0", n)
	}
	b.logout()

	// Delete.
	b.login("admin", apitest.AdminPassword)
	b.page("kv", "KV-cache namespaces")
	b.wait("the namespace", `document.querySelector('tr[data-ns="llama70b"]')`)
	b.clickLabel("Delete namespace llama70b")
	b.wait("delete confirmation", `document.querySelector('dialog[open] #confirm-ok')`)
	b.do("confirm", chromedp.Click(chromedp.CSS("#confirm-ok")))
	b.wait("no namespace left", `document.querySelector('#kv-none') && !document.querySelector('dialog[open]')`)
	if got := len(env.App.KV.Namespaces()); got != 0 {
		t.Errorf("namespaces on the box after delete: got %d, want 0", got)
	}
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("browser errors:\n%s", strings.Join(errs, "\n"))
	}
}
