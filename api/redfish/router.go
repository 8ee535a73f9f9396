package redfish

import (
	"errors"
	"fmt"
	"net/http"
	"path"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"
)

// route is one method on one path pattern.
type route struct {
	priv Privilege
	h    echo.HandlerFunc
}

// pathEntry is everything registered for one path pattern; echo routes
// every method of the pattern to it so that 401, 405 and Allow are decided
// here, in one place.
type pathEntry struct {
	pattern string
	methods map[string]route
}

func (pe *pathEntry) allow() []string {
	var out []string
	for m := range pe.methods {
		out = append(out, m)
		if m == http.MethodGet {
			out = append(out, http.MethodHead)
		}
	}
	slices.Sort(out)
	return out
}

func (pe *pathEntry) public() bool {
	for _, r := range pe.methods {
		if r.priv == Public {
			return true
		}
	}
	return false
}

// Handle registers h for method on path (an echo pattern such as
// "/redfish/v1/AccountService/Accounts/:id"). priv is the set of
// privileges of which the caller needs one, or Public. HEAD is served by
// the GET handler. Registering the same method and path twice, or a zero
// privilege, is a programming error reported by New.
func (s *Service) Handle(method, path string, priv Privilege, h echo.HandlerFunc) {
	pe := s.paths[path]
	if pe == nil {
		pe = &pathEntry{pattern: path, methods: map[string]route{}}
		s.paths[path] = pe
		s.echo.Any(path, s.dispatch(pe))
	}
	if _, dup := pe.methods[method]; dup || priv == 0 || method == http.MethodHead || !slices.Contains(routedMethods, method) {
		s.routeErrs = append(s.routeErrs, fmt.Errorf("api: route %s %s: duplicate, HEAD or no privilege", method, path))
		return
	}
	pe.methods[method] = route{priv: priv, h: h}
}

// HandleUpload registers h for POST on path like Handle, for a body of up
// to limit bytes sent as multipart/form-data (an image push): the body
// limit, the Content-Type rule for Basic-authenticated changes and the
// transport's minimum upload rate follow from it.
func (s *Service) HandleUpload(path string, priv Privilege, limit int64, h echo.HandlerFunc) {
	s.Handle(http.MethodPost, path, priv, h)
	s.uploads[path] = limit
}

// bodyLimit is the request body bound for the route c matched: an upload
// route's own, everything else MaxBodyBytes.
func (s *Service) bodyLimit(c echo.Context) int64 {
	if l, ok := s.uploads[c.Path()]; ok {
		return l
	}
	return s.cfg.MaxBodyBytes
}

// HasRoute reports whether a GET route is registered for the pattern, so
// that ServiceRoot links only to what this build serves.
func (s *Service) HasRoute(pattern string) bool {
	pe := s.paths[pattern]
	return pe != nil && pe.methods[http.MethodGet].h != nil
}

func (s *Service) buildRouter() {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	// Audit entries and sessions record the peer's address, never a
	// client-supplied X-Forwarded-For.
	e.IPExtractor = echo.ExtractIPDirect()
	s.echo = e
	e.Pre(s.preMiddleware)
	e.Use(s.recoverMiddleware, s.metrics.middleware, s.auditMiddleware, s.bodyLimitMiddleware)
	e.RouteNotFound("/*", s.notFound)
}

// preMiddleware runs before routing: Redfish treats a trailing slash as
// the same URI, and every response carries OData-Version.
func (s *Service) preMiddleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if p := r.URL.Path; len(p) > 1 && strings.HasSuffix(p, "/") {
			r.URL.Path = strings.TrimRight(p, "/")
			if r.URL.Path == "" {
				r.URL.Path = "/"
			}
			r.URL.RawPath = ""
		}
		// echo routes only the common methods; others are sent through
		// the path's dispatcher as an unrouted method, to be answered 405
		// (after authentication) like any method the path lacks.
		if !slices.Contains(routedMethods, r.Method) {
			c.Set(methodKey, r.Method)
			r.Method = http.MethodConnect
		}
		h := c.Response().Header()
		h.Set("OData-Version", "4.0")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		return next(c)
	}
}

// routedMethods are the methods Handle accepts (and HEAD).
var routedMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPatch, http.MethodPut, http.MethodDelete}

// methodKey keeps the original method of a request rerouted as CONNECT.
const methodKey = "redfish.method"

// dispatch authenticates and authorises, then runs the method's handler.
// Unauthenticated requests to anything that is not public get 401 before
// the service reveals whether the method (405) exists.
func (s *Service) dispatch(pe *pathEntry) echo.HandlerFunc {
	return func(c echo.Context) error {
		if orig, ok := c.Get(methodKey).(string); ok {
			c.Request().Method = orig
		}
		m := c.Request().Method
		if m == http.MethodHead {
			m = http.MethodGet
		}
		// Checked before the public routes too: a client speaking another
		// OData version gets 412 even from the service root.
		if v := c.Request().Header.Get("OData-Version"); v != "" && v != "4.0" {
			return NewError(http.StatusPreconditionFailed, M("Base.HeaderInvalid", "OData-Version: "+v))
		}
		rt, ok := pe.methods[m]
		if ok && rt.priv == Public {
			if m == http.MethodGet {
				// A public resource (the service root) shows a caller
				// who sent credentials what that caller may use.
				if hasCredentials(c.Request()) {
					if p, err := s.auth.Authenticate(c); err == nil {
						SetPrincipal(c, p)
					}
				}
				s.setAllow(c, pe)
			}
			return rt.h(c)
		}
		if !ok && pe.public() {
			return ErrMethodNotAllowed(pe.allow())
		}
		p, err := s.auth.Authenticate(c)
		if err != nil {
			return err
		}
		SetPrincipal(c, p)
		if err := s.basicRequestRule(c.Request(), p, pe.pattern); err != nil {
			return err
		}
		if !ok {
			return ErrMethodNotAllowed(pe.allow())
		}
		if !p.Has(rt.priv) {
			return ErrInsufficientPrivilege()
		}
		if m == http.MethodGet {
			s.setAllow(c, pe)
		}
		return rt.h(c)
	}
}

// setAllow answers a GET or HEAD with Allow (DSP0266 "Allow"): the
// methods of the resource the caller's privileges let it use, so that a
// client knows before it tries whether a PATCH or DELETE is open to it.
// handleError drops it from error answers other than 405.
func (s *Service) setAllow(c echo.Context, pe *pathEntry) {
	p := PrincipalOf(c)
	var out []string
	for _, m := range pe.allow() {
		mm := m
		if m == http.MethodHead {
			mm = http.MethodGet
		}
		if rt := pe.methods[mm]; rt.priv == Public || p.Has(rt.priv) {
			out = append(out, m)
		}
	}
	c.Response().Header().Set("Allow", strings.Join(out, ", "))
}

// Routed reports whether any method is registered for the pattern.
func (s *Service) Routed(pattern string) bool { return s.paths[pattern] != nil }

// CanRead reports whether p may GET the resource at pattern (a route
// pattern): links to what the caller cannot read are left out.
func (s *Service) CanRead(p *Principal, pattern string) bool {
	pe := s.paths[pattern]
	if pe == nil {
		return false
	}
	rt, ok := pe.methods[http.MethodGet]
	return ok && rt.h != nil && (rt.priv == Public || p.Has(rt.priv))
}

// hasCredentials reports whether r carries a session token or Basic
// credentials.
func hasCredentials(r *http.Request) bool {
	if r.Header.Get("X-Auth-Token") != "" {
		return true
	}
	_, _, ok := r.BasicAuth()
	return ok
}

// notFound answers paths no route matches: 401 without credentials, 404
// with them.
func (s *Service) notFound(c echo.Context) error {
	if orig, ok := c.Get(methodKey).(string); ok {
		c.Request().Method = orig
	}
	p, err := s.auth.Authenticate(c)
	if err != nil {
		return err
	}
	SetPrincipal(c, p)
	return ErrResourceNotFound("Resource", path.Base(c.Request().URL.Path))
}

// recoverMiddleware turns a panic into 500 InternalError: a bug, logged
// with its stack, never a dropped connection.
func (s *Service) recoverMiddleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				if r == http.ErrAbortHandler {
					panic(r)
				}
				err = ErrInternal(fmt.Errorf("panic: %v\n%s", r, debug.Stack()))
			}
		}()
		return next(c)
	}
}

// bodyLimitMiddleware refuses declared oversize bodies at once and caps
// the rest while they are read (the decoder maps the cap to 413).
func (s *Service) bodyLimitMiddleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		limit := s.bodyLimit(c)
		if r.ContentLength > limit {
			return ErrPayloadTooLarge()
		}
		r.Body = http.MaxBytesReader(c.Response(), r.Body, limit)
		return next(c)
	}
}

// handleError writes every error response. Handlers return *Error (or a
// domain error, mapped by Config.MapError); echo's own errors are mapped to the
// same registry messages.
func (s *Service) handleError(err error, c echo.Context) {
	e := s.toError(c, err)
	if e.Status >= 500 && e.Status != http.StatusNotImplemented && e.Status != http.StatusServiceUnavailable {
		s.log.Error("request failed", "method", c.Request().Method, "uri", c.Request().URL.RequestURI(),
			"status", e.Status, "err", e)
	} else if e.Cause != nil {
		s.log.Debug("request refused", "method", c.Request().Method, "uri", c.Request().URL.RequestURI(),
			"status", e.Status, "err", e)
	}
	if c.Response().Committed {
		return
	}
	// Allow describes a resource; an error answer has its own (405 sets
	// it again from e.Header).
	c.Response().Header().Del("Allow")
	if werr := s.writeError(c, e); werr != nil {
		s.log.Debug("writing error response", "err", werr)
	}
}

func (s *Service) toError(c echo.Context, err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return ErrPayloadTooLarge()
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		switch he.Code {
		case http.StatusNotFound:
			return ErrResourceNotFound("Resource", path.Base(c.Request().URL.Path))
		case http.StatusMethodNotAllowed:
			// A method echo does not route at all (PROPFIND, ...).
			if _, aerr := s.auth.Authenticate(c); aerr != nil {
				return s.toError(c, aerr)
			}
			if pe := s.paths[c.Path()]; pe != nil {
				return ErrMethodNotAllowed(pe.allow())
			}
			return ErrMethodNotAllowed(nil)
		case http.StatusRequestEntityTooLarge:
			return ErrPayloadTooLarge()
		case http.StatusUnsupportedMediaType:
			return ErrUnsupportedMediaType()
		case http.StatusUnauthorized:
			return ErrNoValidSession()
		case http.StatusForbidden:
			return ErrInsufficientPrivilege()
		case http.StatusBadRequest:
			return ErrMalformedJSON()
		}
		return ErrInternal(err)
	}
	return s.mapError(err, Target{})
}

// writeError writes the Redfish error body.
func (s *Service) writeError(c echo.Context, e *Error) error {
	for k, vs := range e.Header {
		for _, v := range vs {
			c.Response().Header().Add(k, v)
		}
	}
	msgs := e.Messages
	if len(msgs) == 0 {
		msgs = []Msg{M("Base.GeneralError")}
	}
	info := make([]Message, len(msgs))
	for i, m := range msgs {
		info[i] = s.reg.Resolve(m)
	}
	// The top-level code is the message itself when there is one, and
	// GeneralError when several explain the failure (DSP0266 9.6.5).
	code := s.reg.Resolve(M("Base.GeneralError"))
	if len(info) == 1 {
		code = info[0]
	}
	body := map[string]any{"error": map[string]any{
		"code":                  code.MessageID,
		"message":               code.Message,
		"@Message.ExtendedInfo": info,
	}}
	b, err := EncodeJSON(body)
	if err != nil {
		return err
	}
	return s.WriteJSON(c, e.Status, b)
}
