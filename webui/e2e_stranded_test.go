package webui_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"cxlpool/api/apitest"
	"cxlpool/dcd"
)

// strandChunk reserves a chunk, grants it to Host2 and has the host give
// it back on its own, which the box records as a lost grant: the chunk
// stays reserved, held by nobody.
func strandChunk(t *testing.T, env *apitest.Env) string {
	t.Helper()
	chunk := reserve(t, env, 1024, false)
	connect(t, env, chunk, "Host2")
	deadline := time.Now().Add(30 * time.Second)
	ctx := context.Background()
	n, _ := strconv.Atoi(chunk[strings.LastIndex(chunk, "/")+1:])
	ch, err := env.App.Ledger.Chunk(ctx, dcd.ChunkID(n))
	if err != nil {
		t.Fatal(err)
	}
	if err := env.App.Box.Host(2).Release(ctx, ch.Tag); err != nil {
		t.Fatal(err)
	}
	for {
		gs, err := env.App.Ledger.Grants(ctx, dcd.GrantFilter{Chunk: ch.ID})
		if err == nil && slices.ContainsFunc(gs, func(g dcd.Grant) bool { return g.State == dcd.GrantLost }) {
			return chunk
		}
		if time.Now().After(deadline) {
			t.Fatal("the grant was not marked lost in 30 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestStrandedChunksInBrowser: after a grant is lost the dashboard shows
// a banner naming the stranded chunks and the pool's health as Warning;
// a read-only user sees the banner without the action; an administrator
// frees the chunks in one click, after which the banner is gone and the
// pool healthy.
func TestStrandedChunksInBrowser(t *testing.T) {
	skipBrowser(t)
	env := apitest.NewServer(t)
	strandChunk(t, env)
	b := newBrowser(t, env.HTTP.URL)

	b.login(apitest.UserReadOnly, apitest.UserPassword)
	b.page("dashboard", "Dashboard")
	b.wait("stranded banner", `document.querySelector('#stranded-banner') && document.querySelector('#stranded-banner').textContent.includes('1 chunk stranded by lost grants')`)
	if n := eval[int](b, `document.querySelectorAll('#free-stranded').length`); n != 0 {
		t.Errorf("read-only user: %d free buttons, want none", n)
	}
	b.logout()

	b.login("admin", apitest.AdminPassword)
	b.page("dashboard", "Dashboard")
	b.wait("stranded banner", `document.querySelector('#stranded-banner') && document.querySelector('#stranded-banner').textContent.includes('1 chunk stranded by lost grants (1 GiB)')`)
	b.wait("pool health Warning", `[...document.querySelectorAll('section[aria-labelledby="health-t"] dt')].some(dt => dt.textContent === 'Memory pool' && dt.nextElementSibling.textContent.includes('Warning'))`)
	b.shot("stranded-01-banner")
	b.do("free the stranded chunks", chromedp.Click(chromedp.CSS("#free-stranded")))
	b.wait("freed", `document.querySelector('#stranded-freed') && document.querySelector('#stranded-freed').textContent.includes('Freed 1 stranded chunk (1 GiB)')`)
	b.wait("banner gone", `!document.querySelector('#stranded-banner')`)
	b.wait("pool health OK", `[...document.querySelectorAll('section[aria-labelledby="health-t"] dt')].some(dt => dt.textContent === 'Memory pool' && dt.nextElementSibling.textContent.includes('OK'))`)
	b.shot("stranded-02-freed")
	if n := env.Admin.GetOK("/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks")["Members@odata.count"]; n != float64(0) {
		t.Errorf("chunks after freeing: got %v, want 0", n)
	}
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("browser errors:\n%s", strings.Join(errs, "\n"))
	}
}
