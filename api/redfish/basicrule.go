package redfish

import (
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// basicRequestRule guards against cross-site request forgery through HTTP
// Basic: a browser that once answered the box's Basic challenge sends the
// credentials again by itself, with requests any web page can make (a
// form, or a fetch of a "simple" request that needs no CORS preflight).
// So a state-changing request (POST, PATCH, PUT, DELETE) authenticated by
// Basic must
//
//   - carry Content-Type: application/json if it has a body (415
//     otherwise), which pages of other origins cannot send without a
//     preflight the service never grants; the firmware push's
//     multipart/form-data is the one exception (its route takes nothing
//     else, and the push needs ConfigureManager);
//   - come from the box's own origin if it carries Origin (403
//     otherwise): browsers send Origin with every such request, scripts
//     and command-line clients send none.
//
// Sessions need neither: X-Auth-Token is a header no page of another
// origin can set (that too needs a preflight), which is why the web
// console signs in with a session and sends X-Requested-With.
func (s *Service) basicRequestRule(r *http.Request, p *Principal, pattern string) *Error {
	switch r.Method {
	case http.MethodPost, http.MethodPatch, http.MethodPut, http.MethodDelete:
	default:
		return nil
	}
	if p.SessionID != "" || r.Header.Get("X-Auth-Token") != "" {
		return nil
	}
	if _, _, basic := r.BasicAuth(); !basic {
		return nil
	}
	if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r) {
		m := M("Base.HeaderInvalid", "Origin: "+o)
		m.Resolution = "A state-changing request authenticated by HTTP Basic from a browser must come from the service's own origin (" +
			requestOrigin(r) + "); nothing was changed. Send it from the web console, or with a session (X-Auth-Token)."
		return NewError(http.StatusForbidden, m)
	}
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || (mt == "multipart/form-data" && s.uploads[pattern] > 0)) {
		return nil
	}
	if ct == "" {
		ct = "(none)"
	}
	m := M("Base.HeaderInvalid", "Content-Type: "+ct)
	m.Resolution = "A state-changing request authenticated by HTTP Basic must send its body as Content-Type: application/json " +
		"(the firmware push: multipart/form-data); nothing was changed. Resubmit the request with that header."
	return NewError(http.StatusUnsupportedMediaType, m)
}

// requestOrigin is the origin the request was sent to: its scheme and
// Host.
func requestOrigin(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// sameOrigin reports whether origin (an Origin header) is the request's
// own: the same scheme, host and port, default ports made explicit
// (RFC 6454). "null" and anything that does not parse are not.
func sameOrigin(origin string, r *http.Request) bool {
	o, err := url.Parse(origin)
	if err != nil || o.Host == "" || o.Path != "" || o.RawQuery != "" || o.User != nil {
		return false
	}
	want, err := url.Parse(requestOrigin(r))
	if err != nil {
		return false
	}
	return strings.EqualFold(o.Scheme, want.Scheme) && hostPort(o) == hostPort(want)
}

// hostPort is u's host (lower case) and port, the scheme's default port
// if none is given.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if strings.EqualFold(u.Scheme, "https") {
			port = "443"
		}
	}
	return net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}
