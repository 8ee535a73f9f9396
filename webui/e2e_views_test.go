package webui_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"cxlpool/api/apitest"
	"cxlpool/sim"
)

// The console's views of the pool in a real browser: the heatmap of the
// allocated capacity by host and chunk, the top-K naming host and chunk,
// the topology's labelled regions and shared chunks, the layout at 800 px
// and at phone width, and a host account told a page is not for its role.

const chunksURI = "/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks"

// connect grants chunk to host and waits for the connection's task.
func connect(t *testing.T, env *apitest.Env, chunk, host string) {
	t.Helper()
	r := env.Admin.Post("/redfish/v1/Fabrics/CXL/Connections", map[string]any{
		"MemoryChunkInfo": []map[string]any{{"MemoryChunk": map[string]any{"@odata.id": chunk}}},
		"Links":           map[string]any{"InitiatorEndpoints": []map[string]any{{"@odata.id": "/redfish/v1/Fabrics/CXL/Endpoints/" + host}}},
	})
	if r.Status != http.StatusAccepted {
		t.Fatalf("connect %s to %s: %s", chunk, host, r)
	}
	mon := r.Header.Get("Location")
	deadline := time.Now().Add(30 * time.Second)
	for r = env.Admin.Get(mon); r.Status == http.StatusAccepted; r = env.Admin.Get(mon) {
		if time.Now().After(deadline) {
			t.Fatalf("connect %s to %s: task still running after 30 s", chunk, host)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if r.Status != http.StatusCreated {
		t.Fatalf("connect %s to %s: task: %s", chunk, host, r)
	}
}

// reserve reserves a chunk of sizeMiB and returns its URI.
func reserve(t *testing.T, env *apitest.Env, sizeMiB int, sharable bool) string {
	t.Helper()
	body := map[string]any{"MemoryChunkSizeMiB": sizeMiB}
	if sharable {
		body["Oem"] = map[string]any{"CxlPool": map[string]any{"Sharable": true}}
	}
	r := env.Admin.Post(chunksURI, body)
	if r.Status != http.StatusCreated {
		t.Fatalf("reserve %d MiB: %s", sizeMiB, r)
	}
	return r.Header.Get("Location")
}

func chunkID(uri string) string { return uri[strings.LastIndex(uri, "/")+1:] }

// sharedScene gives Host2 a 2 GiB chunk of its own and a 1 GiB one it
// shares with Host5, both hosts running a Zipf load on what they hold;
// it returns the two chunks' URIs.
func sharedScene(t *testing.T, env *apitest.Env) (own, shared string) {
	t.Helper()
	own = reserve(t, env, 2048, false)
	connect(t, env, own, "Host2")
	shared = reserve(t, env, 1024, true)
	connect(t, env, shared, "Host2")
	connect(t, env, shared, "Host5")
	for _, h := range []int{2, 5} {
		if err := env.App.Box.StartWorkload(h, sim.WorkloadZipf, sim.WorkloadParams{}); err != nil {
			t.Fatalf("starting Host%d's workload: %v", h, err)
		}
	}
	return own, shared
}

// TestPoolViewsInBrowser: Host2 holds a 2 GiB chunk and shares a 1 GiB
// one with Host5, both under load. The heatmap's allocated view shows one
// group per holder (Host2, shared) with each chunk labelled, hovering a
// cell names host, chunk, offset and rate, the whole-pool view is one
// click away; the pool's top-K rows name host and chunk. The topology
// labels both regions (sharable or not, used and free) and draws the
// shared chunk to both holders.
func TestPoolViewsInBrowser(t *testing.T) {
	skipBrowser(t)
	env := apitest.NewServer(t)
	own, shared := sharedScene(t, env)
	// A chunk in two device ranges: reserve two, delete the first, and a
	// chunk of both sizes takes the hole and the blocks after the second.
	hole := reserve(t, env, 256, true)
	reserve(t, env, 256, true)
	if r := env.Admin.Delete(hole); r.Status != http.StatusNoContent {
		t.Fatalf("delete %s: %s", hole, r)
	}
	split := reserve(t, env, 512, true)
	connect(t, env, split, "Host3")
	if err := env.App.Box.StartWorkload(3, sim.WorkloadZipf, sim.WorkloadParams{}); err != nil {
		t.Fatalf("starting Host3's workload: %v", err)
	}
	ext := env.Admin.GetOK(split)["Oem"].(map[string]any)["CxlPool"].(map[string]any)["Extents"].([]any)
	if len(ext) != 2 {
		t.Fatalf("chunk %s lies in %v, want two ranges", split, ext)
	}
	b := newBrowser(t, env.HTTP.URL)
	b.login("admin", apitest.AdminPassword)

	b.page("topology", "Topology")
	b.wait("regions labelled", `document.querySelectorAll('#topology-svg [data-region-label]').length === 2`)
	labels := eval[string](b, `[...document.querySelectorAll('#topology-svg [data-region-label]')].map(g => g.textContent).join(' | ')`)
	for _, want := range []string{"Region 0 · not sharable", "Region 1 · sharable", "2 GiB used", "1.75 GiB used", "free"} {
		if !strings.Contains(labels, want) {
			t.Errorf("region labels %q lack %q", labels, want)
		}
	}
	b.wait("shared chunk drawn to both holders", fmt.Sprintf(`[...document.querySelectorAll('#topology-svg g[data-chunk=%q] path.chunk-line.shared')].map(p => p.dataset.to).sort().join() === 'Host2,Host5'`, chunkID(shared)))
	if got := eval[string](b, fmt.Sprintf(`[...document.querySelectorAll('#topology-svg g[data-chunk=%q] path')].map(p => p.dataset.to).join()`, chunkID(own))); got != "Host2" {
		t.Errorf("Host2's own chunk drawn to %q, want Host2 only", got)
	}
	b.wait("chunk table", `document.querySelectorAll('#topo-chunks tbody tr').length === 3`)
	b.wait("the split chunk drawn in two ranges", fmt.Sprintf(`document.querySelectorAll('#topology-svg g[data-chunk=%q] rect').length === 2 && document.querySelector('#topo-chunks tr[data-chunk=%q]').textContent.includes('2 ranges')`, chunkID(split), chunkID(split)))
	b.shot("views-01-topology")

	if _, ok := env.Admin.GetOK("/redfish/v1")["TelemetryService"]; !ok {
		t.Skip("this build serves no TelemetryService: no heatmap to check")
	}
	b.page("hotpages", "Hot pages")
	b.wait("allocated heatmap groups", `document.querySelectorAll('#heat-groups .heat-group').length === 3`)
	groups := eval[[]string](b, `[...document.querySelectorAll('#heat-groups .heat-group')].map(g => g.dataset.group)`)
	if strings.Join(groups, ",") != "Host2,Host3,shared" {
		t.Errorf("heatmap groups: got %v, want [Host2 Host3 shared]", groups)
	}
	// The split chunk: two cells of 256 MiB, the second at the start of
	// its second range.
	if got := eval[int](b, `document.querySelector('.heat-group[data-group="Host3"] canvas').width`); got != 2 {
		t.Errorf("Host3's split chunk drawn in %d cells, want 2", got)
	}
	eval[bool](b, `(() => {
		const cv = document.querySelector('.heat-group[data-group="Host3"] canvas');
		const r = cv.getBoundingClientRect();
		cv.dispatchEvent(new MouseEvent('mousemove', { bubbles: true, clientX: r.left + 0.75 * r.width, clientY: r.top + r.height / 2 }));
		return true;
	})()`)
	b.wait("hover in the second range", `document.querySelector('#heat-hover').textContent.includes('Host3')`)
	want := fmt.Sprintf("%s · offset 256 MiB of 512 MiB · DPA 0x%x", "chunk "+chunkID(split), uint64(ext[1].(map[string]any)["OffsetMiB"].(float64))<<20)
	if hover := eval[string](b, `document.querySelector('#heat-hover').textContent`); !strings.Contains(hover, want) {
		t.Errorf("hover over the split chunk's second cell: got %q, want it to contain %q", hover, want)
	}
	if got := eval[string](b, `document.querySelector('.heat-group[data-group="Host2"] .heat-chunk').dataset.chunk`); got != chunkID(own) {
		t.Errorf("Host2's group shows chunk %s, want %s", got, chunkID(own))
	}
	caption := eval[string](b, `document.querySelector('.heat-group[data-group="shared"] figcaption').textContent`)
	if !strings.Contains(caption, "Chunk "+chunkID(shared)) || !strings.Contains(caption, "Host2") || !strings.Contains(caption, "Host5") {
		t.Errorf("shared chunk's label %q does not name the chunk and both holders", caption)
	}
	b.wait("heat in Host2's chunk", `document.querySelector('#heat-frames') && Number(document.querySelector('#heat-frames').textContent) > 2 && /hottest ≈ [1-9]/.test(document.querySelector('.heat-group[data-group="Host2"] figcaption').textContent)`)
	// Point at the second cell of Host2's chunk: 256 MiB cells, so
	// offset 256 MiB into the chunk.
	eval[bool](b, `(() => {
		const cv = document.querySelector('.heat-group[data-group="Host2"] canvas');
		const r = cv.getBoundingClientRect();
		cv.dispatchEvent(new MouseEvent('mousemove', { bubbles: true, clientX: r.left + (1.5 / cv.width) * r.width, clientY: r.top + r.height / (2 * cv.height) }));
		return true;
	})()`)
	b.wait("hover text", `document.querySelector('#heat-hover').textContent.includes('offset')`)
	hover := eval[string](b, `document.querySelector('#heat-hover').textContent`)
	for _, want := range []string{"Host2", "chunk " + chunkID(own), "offset 256 MiB of 2 GiB", "DPA 0x", "accesses/epoch"} {
		if !strings.Contains(hover, want) {
			t.Errorf("hover text %q lacks %q", hover, want)
		}
	}
	b.wait("log colour scale ticks", `document.querySelectorAll('.heat-ticks span').length >= 3`)
	b.wait("pool top-K naming host and chunk", `[...document.querySelectorAll('table.topk[data-scope="-2"] tbody tr')].some(r => r.querySelector('.topk-host').textContent.includes('Host') && /^\d+$/.test(r.querySelector('.topk-chunk').textContent))`)
	b.shot("views-02-heatmap-allocated")

	b.do("switch to the whole pool", chromedp.Click(chromedp.CSS("#heat-view-pool")))
	b.wait("whole-pool heatmap", `document.querySelector('#heatmap') && document.querySelector('#heatmap').width > 1 && !document.querySelector('#heat-groups')`)
	if got := eval[string](b, `document.querySelector('#heat-view-pool').getAttribute('aria-selected')`); got != "true" {
		t.Errorf("whole-pool tab aria-selected: got %q, want true", got)
	}
	b.shot("views-03-heatmap-pool")

	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("browser errors:\n%s", strings.Join(errs, "\n"))
	}
}

// overflowJS reports what makes the page wider than the window, if
// anything: the page itself, or a table whose overflow no scrolling
// container inside the window takes.
const overflowJS = `(() => {
	const w = document.documentElement.clientWidth;
	const bad = [];
	if (document.documentElement.scrollWidth > w + 1) bad.push('page ' + document.documentElement.scrollWidth + ' > ' + w);
	for (const t of document.querySelectorAll('main table')) {
		const r = t.getBoundingClientRect();
		if (r.width === 0) continue;
		let p = t.parentElement, scroller = null;
		for (; p && p !== document.body; p = p.parentElement) {
			const o = getComputedStyle(p).overflowX;
			if (o === 'auto' || o === 'scroll') { scroller = p; break; }
		}
		const box = (scroller || t).getBoundingClientRect();
		if (box.right > w + 1 || box.left < -1) bad.push((t.id || t.className || 'table') + ' ' + Math.round(box.left) + '..' + Math.round(box.right) + ' of ' + w);
	}
	return bad.join('; ');
})()`

// TestLayoutInBrowser: at 800 px and at phone width (390 px) no page is
// wider than the window (a wide table scrolls inside its card), and the
// page list stays reachable; a host account opening an appliance-wide
// page (directly, by its address) is told it is not permitted for its
// role, and no page shows it a raw refusal.
func TestLayoutInBrowser(t *testing.T) {
	skipBrowser(t)
	env := apitest.NewServer(t)
	own := reserve(t, env, 1024, true)
	connect(t, env, own, "Host0")
	connect(t, env, own, "Host1")
	b := newBrowser(t, env.HTTP.URL)
	b.login("admin", apitest.AdminPassword)
	pages := []struct{ path, heading string }{
		{"dashboard", "Dashboard"}, {"hosts", "Hosts & capacity"}, {"topology", "Topology"}, {"hotpages", "Hot pages"},
		{"events", "Events & audit log"}, {"board", "Sensors, fans & power"}, {"exports", "Exports"}, {"kv", "KV-cache namespaces"},
		{"firmware", "Firmware"}, {"users", "Users & roles"}, {"network", "Network & time"}, {"settings", "Settings"},
	}
	for _, width := range []int64{800, 390} {
		b.do(fmt.Sprintf("viewport %d px", width), chromedp.EmulateViewport(width, 844))
		for _, p := range pages {
			b.page(p.path, p.heading)
			if bad := eval[string](b, overflowJS); bad != "" {
				b.shot(fmt.Sprintf("failed-layout-%d-%s", width, p.path))
				t.Errorf("%d px, %s page: wider than the window: %s", width, p.path, bad)
			}
			if !eval[bool](b, `(() => { const a = document.querySelector('nav a[aria-current="page"]'); return !!a && a.getBoundingClientRect().height > 0; })()`) {
				t.Errorf("%d px, %s page: the page list does not show the current page", width, p.path)
			}
		}
		for _, p := range []string{"hosts", "topology", "kv"} {
			b.page(p, map[string]string{"hosts": "Hosts & capacity", "topology": "Topology", "kv": "KV-cache namespaces"}[p])
			b.shot(fmt.Sprintf("layout-%d-%s", width, p))
		}
	}
	b.do("viewport back", chromedp.EmulateViewport(1360, 900))
	b.logout()

	b.login(apitest.UserHost0, apitest.UserPassword)
	for _, p := range []struct{ path, title string }{{"exports", "Exports"}, {"kv", "KV-cache namespaces"}, {"network", "Network & time"}} {
		b.do("open "+p.path+" directly", chromedp.Navigate(env.HTTP.URL+"/#/"+p.path))
		b.wait(p.path+": not permitted", `document.querySelector('#not-permitted')`)
		msg := eval[string](b, `document.querySelector('#not-permitted').textContent`)
		if !strings.Contains(msg, "Not permitted for your role") || !strings.Contains(msg, "HostUser") || !strings.Contains(msg, p.title) {
			t.Errorf("%s for a host account: got %q, want it not permitted for the role HostUser", p.path, msg)
		}
	}
	b.shot("layout-host-not-permitted")
	// The pages a host account is offered show no raw refusal.
	for _, p := range pages {
		if eval[bool](b, fmt.Sprintf(`![...document.querySelectorAll('nav a')].some(a => a.getAttribute('href') === '#/%s')`, p.path)) {
			continue
		}
		// A host's pages may head themselves differently (its Events page
		// is the live stream only, waiting for events).
		b.do("open "+p.path, chromedp.Navigate(env.HTTP.URL+"/#/"+p.path))
		b.wait(p.path+" page for a host", `document.querySelector('main h1') && (!document.querySelector('main .loading') || location.hash === '#/events')`)
		if bad := eval[string](b, `[...document.querySelectorAll('main .alert.bad')].filter(a => !a.querySelector('.forbidden-role')).map(a => a.textContent).join(' | ')`); bad != "" {
			t.Errorf("host account, %s page: a refusal that does not name the role: %s", p.path, bad)
		}
	}
	// Its heatmap shows its own capacity only, under its own name: the
	// chunk it shares with Host1 is Host0's as far as it may see.
	if _, ok := env.Host0.GetOK("/redfish/v1")["TelemetryService"]; ok {
		b.do("open hot pages as a host", chromedp.Navigate(env.HTTP.URL+"/#/hotpages"))
		b.wait("the host's heatmap", `document.querySelector('#heat-groups .heat-group')`)
		if got := eval[[]string](b, `[...document.querySelectorAll('#heat-groups .heat-group')].map(g => g.dataset.group)`); strings.Join(got, ",") != "Host0" {
			t.Errorf("heatmap groups for Host0's account: got %v, want [Host0]", got)
		}
		b.shot("layout-host-hotpages")
	}
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("browser errors:\n%s", strings.Join(errs, "\n"))
	}
}
