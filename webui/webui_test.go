package webui

import (
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func newConsole(t *testing.T) *Console {
	t.Helper()
	c, err := New()
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func serve(c *Console, method, target string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	c.ServeHTTP(w, r)
	return w
}

func TestServe(t *testing.T) {
	c := newConsole(t)
	tests := []struct {
		name, method, path string
		hdr                []string
		status             int
		ctype, encoding    string
	}{
		{"index", "GET", "/", nil, 200, "text/html; charset=utf-8", ""},
		{"index by name", "GET", "/index.html", nil, 200, "text/html; charset=utf-8", ""},
		{"index gzip", "GET", "/", []string{"Accept-Encoding", "gzip, deflate, br"}, 200, "text/html; charset=utf-8", "gzip"},
		{"module", "GET", "/ui/js/main.js", []string{"Accept-Encoding", "gzip"}, 200, "text/javascript; charset=utf-8", "gzip"},
		{"vendored module", "GET", "/ui/vendor/preact.module.js", nil, 200, "text/javascript; charset=utf-8", ""},
		{"stylesheet", "GET", "/ui/app.css", nil, 200, "text/css; charset=utf-8", ""},
		{"icon", "GET", "/ui/favicon.svg", nil, 200, "image/svg+xml", ""},
		{"gzip refused", "GET", "/ui/js/main.js", []string{"Accept-Encoding", "gzip;q=0"}, 200, "text/javascript; charset=utf-8", ""},
		{"head", "HEAD", "/", nil, 200, "text/html; charset=utf-8", ""},
		{"missing", "GET", "/ui/nope.js", nil, 404, "text/plain; charset=utf-8", ""},
		{"manifest not served", "GET", "/ui/vendor/MANIFEST", nil, 404, "text/plain; charset=utf-8", ""},
		{"post", "POST", "/", nil, 405, "text/plain; charset=utf-8", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := serve(c, tt.method, tt.path, tt.hdr...)
			h := w.Result().Header
			got := []string{h.Get("Content-Type"), h.Get("Content-Encoding")}
			if w.Code != tt.status || !slices.Equal(got, []string{tt.ctype, tt.encoding}) {
				t.Errorf("got %d %q, want %d %q", w.Code, got, tt.status, []string{tt.ctype, tt.encoding})
			}
			want := map[string]string{
				"Content-Security-Policy": ContentSecurityPolicy,
				"X-Content-Type-Options":  "nosniff",
				"Referrer-Policy":         "no-referrer",
				"X-Frame-Options":         "DENY",
			}
			for k, v := range want {
				if h.Get(k) != v {
					t.Errorf("%s: got %q, want %q", k, h.Get(k), v)
				}
			}
			if tt.method == "HEAD" && w.Body.Len() != 0 {
				t.Errorf("HEAD body: got %d bytes, want none", w.Body.Len())
			}
		})
	}
}

func TestServeGzipAndETag(t *testing.T) {
	c := newConsole(t)
	plain := serve(c, "GET", "/ui/js/main.js")
	zipped := serve(c, "GET", "/ui/js/main.js", "Accept-Encoding", "gzip")
	zr, err := gzip.NewReader(zipped.Body)
	if err != nil {
		t.Fatalf("gzip body: %v", err)
	}
	unzipped, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("gzip body: %v", err)
	}
	if diff := cmp.Diff(plain.Body.String(), string(unzipped)); diff != "" {
		t.Errorf("gzip body differs from plain (-plain +gunzipped):\n%s", diff)
	}
	if got := zipped.Header().Get("Vary"); got != "Accept-Encoding" {
		t.Errorf("Vary: got %q, want Accept-Encoding", got)
	}
	etag := plain.Header().Get("ETag")
	if etag == "" || zipped.Header().Get("ETag") != etag {
		t.Fatalf("ETag: got %q and %q, want one non-empty tag", etag, zipped.Header().Get("ETag"))
	}
	if got := serve(c, "GET", "/ui/js/main.js", "If-None-Match", etag).Code; got != http.StatusNotModified {
		t.Errorf("If-None-Match: got %d, want 304", got)
	}
	if got := serve(c, "GET", "/ui/js/main.js", "If-None-Match", `"other"`).Code; got != http.StatusOK {
		t.Errorf("stale If-None-Match: got %d, want 200", got)
	}
	if got := plain.Header().Get("Cache-Control"); got != "no-cache" {
		t.Errorf("Cache-Control: got %q, want no-cache", got)
	}
}

func TestAcceptsGzip(t *testing.T) {
	tests := []struct {
		hdr  string
		want bool
	}{
		{"", false},
		{"gzip", true},
		{"deflate, gzip;q=1.0, *;q=0.5", true},
		{"GZIP", true},
		{"gzip;q=0", false},
		{"gzip; q=0", false},
		{"br", false},
		{"x-gzip", false},
	}
	for _, tt := range tests {
		if got := acceptsGzip(tt.hdr); got != tt.want {
			t.Errorf("acceptsGzip(%q): got %v, want %v", tt.hdr, got, tt.want)
		}
	}
}

var (
	htmlRef      = regexp.MustCompile(`(?:src|href)="(/ui/[^"]+)"`)
	staticImport = regexp.MustCompile(`(?m)^\s*(?:import\s*(?:[^'"\n;]*?from\s*)?|export\s*[^'"\n;]*?from\s*)["']([^"']+)["']`)
	dynImport    = regexp.MustCompile(`\bimport\(\s*["']([^"']+)["']\s*\)`)
)

// imports returns the modules a module loads before it runs (static
// imports and re-exports), or with dynamic too, everything it may load.
func imports(src string, dynamic bool) []string {
	var out []string
	for _, m := range staticImport.FindAllStringSubmatch(src, -1) {
		out = append(out, m[1])
	}
	if dynamic {
		for _, m := range dynImport.FindAllStringSubmatch(src, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

func resolve(from, ref string) string {
	if strings.HasPrefix(ref, "/") {
		return path.Clean(ref)
	}
	return path.Join(path.Dir(from), ref)
}

// firstPage is everything the login page loads: the HTML, what it links
// (stylesheet, icon, module preloads, the entry module) and, transitively,
// every module imported statically. Pages behind dynamic import() load
// only after login.
func firstPage(t *testing.T, c *Console) []string {
	t.Helper()
	index := serve(c, "GET", "/").Body.String()
	seen := map[string]bool{"/": true}
	order := []string{"/"}
	var queue []string
	for _, m := range htmlRef.FindAllStringSubmatch(index, -1) {
		queue = append(queue, m[1])
	}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		order = append(order, p)
		w := serve(c, "GET", p)
		if w.Code != http.StatusOK {
			t.Errorf("%s: got %d, want 200", p, w.Code)
			continue
		}
		if strings.HasSuffix(p, ".js") {
			for _, ref := range imports(w.Body.String(), false) {
				queue = append(queue, resolve(p, ref))
			}
		}
	}
	return order
}

// TestFirstPageSize measures what a browser transfers to show the login
// page (bodies as sent with Accept-Encoding: gzip) and holds it under the
// 150 KiB budget the README states.
func TestFirstPageSize(t *testing.T) {
	const budget = 150 << 10
	c := newConsole(t)
	total, raw := 0, 0
	for _, p := range firstPage(t, c) {
		w := serve(c, "GET", p, "Accept-Encoding", "gzip")
		n := w.Body.Len()
		raw += len(c.assets[p].body)
		total += n
		t.Logf("%-32s %6d B (%s)", p, n, w.Header().Get("Content-Encoding"))
	}
	t.Logf("first page: %d B transferred (%.1f KiB gzipped; %.1f KiB uncompressed)", total, float64(total)/1024, float64(raw)/1024)
	if total > budget {
		t.Errorf("first page transfers %d B, want at most %d B", total, budget)
	}
	for _, p := range firstPage(t, c) {
		if strings.Contains(p, "uPlot") || strings.Contains(p, "/pages/") {
			t.Errorf("first page loads %s; pages and charts must load on demand", p)
		}
	}
}

// TestModulesResolve: every import (static or dynamic) of every console
// module names an asset that is served.
func TestModulesResolve(t *testing.T) {
	c := newConsole(t)
	n := 0
	for p, a := range c.assets {
		if !strings.HasSuffix(p, ".js") {
			continue
		}
		for _, ref := range imports(string(a.body), true) {
			n++
			if target := resolve(p, ref); c.assets[target] == nil {
				t.Errorf("%s imports %q: %s is not served", p, ref, target)
			}
		}
	}
	if n < 20 {
		t.Errorf("found %d imports, want the module graph (at least 20)", n)
	}
}

// TestNoInlineCode: the Content-Security-Policy forbids inline scripts
// and styles, so none may be written; and the console's own code builds
// no HTML from strings.
func TestNoInlineCode(t *testing.T) {
	index, err := files.ReadFile("static/index.html")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []*regexp.Regexp{
		regexp.MustCompile(`<script(?:\s+type="module")?\s*>`),
		regexp.MustCompile(`<style`),
		regexp.MustCompile(`\sstyle=`),
		regexp.MustCompile(`\son[a-z]+=`),
		regexp.MustCompile(`javascript:`),
	} {
		if bad.Match(index) {
			t.Errorf("index.html matches %v: inline code the CSP would block", bad)
		}
	}
	err = fs.WalkDir(files, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !strings.HasSuffix(p, ".js") {
			return err
		}
		src, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		for _, bad := range []string{"innerHTML", "dangerouslySetInnerHTML", "eval(", "new Function", "document.write", "insertAdjacentHTML"} {
			if strings.Contains(string(src), bad) {
				t.Errorf("%s uses %s", p, bad)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestVendorManifest checks the vendored files against the checksums
// refresh.sh recorded, and that every embedded vendored file is listed.
func TestVendorManifest(t *testing.T) {
	f, err := os.Open("vendor/MANIFEST")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	listed := map[string]bool{}
	pkgs := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		switch fields[0] {
		case "package":
			if len(fields) != 4 || !strings.HasPrefix(fields[3], "sha512-") {
				t.Errorf("bad package line %q", sc.Text())
			}
			pkgs++
		case "file":
			if len(fields) != 4 {
				t.Errorf("bad file line %q", sc.Text())
				continue
			}
			body, err := os.ReadFile(path.Join("vendor", fields[1]))
			if err != nil {
				t.Errorf("%s: %v", fields[1], err)
				continue
			}
			sum := sha256.Sum256(body)
			if got := hex.EncodeToString(sum[:]); got != fields[2] {
				t.Errorf("%s: sha256 %s, want %s (run webui/vendor/refresh.sh; never edit vendored files)", fields[1], got, fields[2])
			}
			listed[fields[1]] = true
		default:
			t.Errorf("unknown manifest line %q", sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if pkgs != 3 {
		t.Errorf("got %d packages, want 3 (preact, htm, uplot)", pkgs)
	}
	vendored, err := fs.Glob(files, "vendor/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range vendored {
		if !listed[path.Base(p)] {
			t.Errorf("%s is embedded but not in MANIFEST", p)
		}
	}
}
