// Package webui is the admin console: a static single-page application
// (Preact + htm, vendored as ES modules under vendor/) embedded in the
// daemon with go:embed and served at "/" by the API server.
//
// The files are public, because the login page must load before there is
// a session; everything the console shows comes from the Redfish API and
// its streams with the session's X-Auth-Token, like any other client. The
// console therefore needs no privileges of its own and can show nothing a
// caller could not GET.
//
// Every response carries a strict Content-Security-Policy: scripts,
// styles, images and connections only from the box itself, no inline
// script or style, no framing. Assets are served gzip-compressed when the
// browser accepts it, with content ETags, and revalidated on every load
// (a firmware update changes them).
package webui

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"sync"
)

//go:embed static vendor/*.js vendor/*.css vendor/*.LICENSE
var files embed.FS

// Routes returns the URL patterns (echo syntax) the console answers.
func Routes() []string { return []string{"/", AssetPrefix + "*"} }

// AssetPrefix starts the URL of every asset: /ui/<file under static/> and
// /ui/vendor/<vendored file>.
const AssetPrefix = "/ui/"

// ContentSecurityPolicy is sent with every console response. connect-src
// 'self' covers fetch, the SSE stream read with fetch, and same-origin
// WebSockets (ws: and wss: match 'self' in CSP Level 3).
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"font-src 'self'; connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; " +
	"frame-ancestors 'none'"

// asset is one file ready to serve. Its ETag and gzip body are made on
// its first request: compressing every file at start-up cost the box's
// boot a sixth of a second under emulation.
type asset struct {
	body  []byte
	ctype string
	once  sync.Once
	gz    []byte // nil when compression does not pay
	etag  string
}

// Console serves the embedded console. Create it with New.
type Console struct {
	assets map[string]*asset // by URL path
}

// New indexes the embedded files; content types are set now, ETags and
// gzip bodies computed once, on first use.
func New() (*Console, error) {
	c := &Console{assets: map[string]*asset{}}
	err := fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		a := &asset{body: body, ctype: contentType(p)}
		switch {
		case p == "static/index.html":
			c.assets["/"] = a
		case strings.HasPrefix(p, "static/"):
			c.assets[AssetPrefix+strings.TrimPrefix(p, "static/")] = a
		default: // vendor/
			c.assets[AssetPrefix+p] = a
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("webui: %w", err)
	}
	if c.assets["/"] == nil {
		return nil, fmt.Errorf("webui: no static/index.html embedded")
	}
	return c, nil
}

// prepare computes the ETag and the gzip body once.
func (a *asset) prepare() {
	a.once.Do(func() {
		sum := sha256.Sum256(a.body)
		a.etag = `"` + hex.EncodeToString(sum[:12]) + `"`
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression) // a valid level: no error
		// Writes to a bytes.Buffer do not fail.
		_, _ = zw.Write(a.body)
		_ = zw.Close()
		if buf.Len() < len(a.body) {
			a.gz = buf.Bytes()
		}
	})
}

func contentType(p string) string {
	switch path.Ext(p) {
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".LICENSE":
		return "text/plain; charset=utf-8"
	}
	if t := mime.TypeByExtension(path.Ext(p)); t != "" {
		return t
	}
	return "application/octet-stream"
}

// ServeHTTP answers GET and HEAD for "/", "/index.html" and the assets.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	p := r.URL.Path
	if p == "/index.html" {
		p = "/"
	}
	a := c.assets[p]
	if a == nil {
		h.Set("Cache-Control", "no-store")
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	// Revalidate every time: an update replaces the files under the
	// same names, and the ETag makes the check cheap.
	a.prepare()
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", a.etag)
	h.Set("Vary", "Accept-Encoding")
	h.Set("Content-Type", a.ctype)
	if inm := r.Header.Get("If-None-Match"); inm != "" && etagListed(inm, a.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	body := a.body
	if a.gz != nil && acceptsGzip(r.Header.Get("Accept-Encoding")) {
		h.Set("Content-Encoding", "gzip")
		body = a.gz
	}
	h.Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(body)
}

func etagListed(hdr, etag string) bool {
	for _, t := range strings.Split(hdr, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == etag || t == "*" {
			return true
		}
	}
	return false
}

// acceptsGzip reads Accept-Encoding: gzip unless refused with q=0.
func acceptsGzip(hdr string) bool {
	for _, part := range strings.Split(hdr, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(name), "gzip") {
			continue
		}
		q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
		return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
	}
	return false
}
