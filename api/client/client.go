// Package client is a small typed Redfish client for cxlpool's management
// API, used by cmd/poolctl. It speaks only what the DMTF model and the
// Redfish protocol define (sessions with X-Auth-Token and HTTP Basic,
// Redfish error bodies, task monitors, Server-Sent Events), so it does not
// import the server: the CLI stays small and the API is exercised the way
// any other Redfish client would use it.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config describes how to reach and authenticate to a service. Zero
// values mean the documented defaults.
type Config struct {
	// Server is the service's base URL, e.g. "https://127.0.0.1:8443".
	Server string
	// User and Password are the account's credentials: Login turns them
	// into a session; without a session every request carries them as
	// HTTP Basic.
	User, Password string
	// Token is the X-Auth-Token of an existing session and Session its
	// URI (from an earlier Login). A token takes precedence over Basic.
	Token, Session string
	// CAFile is a PEM file with the CA certificates (or the server's own
	// self-signed certificate) to trust instead of the system roots.
	CAFile string
	// Insecure skips TLS certificate verification. Anyone on the path can
	// then read the credentials: it exists for first contact with a box
	// whose certificate has not been fetched yet.
	Insecure bool
	// Timeout bounds each request (30 s); it does not apply to event
	// streams or to waiting for tasks as a whole.
	Timeout time.Duration
	// PollInitial and PollMax bound the interval between task monitor
	// polls (100 ms doubling up to 2 s, and never beyond a Retry-After).
	PollInitial, PollMax time.Duration
	// HTTPClient replaces the client built from the TLS settings (tests).
	HTTPClient *http.Client
	// UserAgent is sent with every request ("cxlpool-client").
	UserAgent string
}

// Client talks to one Redfish service. It is safe for concurrent use.
type Client struct {
	cfg  Config
	base *url.URL
	http *http.Client

	mu          sync.Mutex
	token       string
	session     string
	expand      bool // the service expands collections ($expand=.)
	expandKnown bool
}

// maxBody bounds a response body read into memory.
const maxBody = 16 << 20

// New checks cfg and builds the HTTP client (TLS settings included).
func New(cfg Config) (*Client, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.PollInitial <= 0 {
		cfg.PollInitial = 100 * time.Millisecond
	}
	if cfg.PollMax <= 0 {
		cfg.PollMax = 2 * time.Second
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "cxlpool-client"
	}
	u, err := url.Parse(strings.TrimRight(cfg.Server, "/"))
	if err != nil {
		return nil, fmt.Errorf("client: server URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: server URL %q: want http(s)://HOST[:PORT]", cfg.Server)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("client: server URL %q: no credentials, query or fragment allowed", cfg.Server)
	}
	hc := cfg.HTTPClient
	if hc == nil {
		tc, err := TLSConfig(cfg.CAFile, cfg.Insecure)
		if err != nil {
			return nil, err
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = tc
		tr.ResponseHeaderTimeout = cfg.Timeout
		hc = &http.Client{Transport: tr}
	}
	// Redirects would carry credentials elsewhere; Redfish does not use
	// them, so they are answered as they are.
	hcopy := *hc
	hcopy.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Client{cfg: cfg, base: u, http: &hcopy, token: cfg.Token, session: cfg.Session}, nil
}

// TLSConfig is the TLS client configuration for a CA file and the
// insecure switch. Without either it is nil (system roots).
func TLSConfig(caFile string, insecure bool) (*tls.Config, error) {
	if caFile == "" && !insecure {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if insecure {
		tc.InsecureSkipVerify = true
		return tc, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("client: CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("client: CA file %s: no PEM certificates in it", caFile)
	}
	tc.RootCAs = pool
	return tc, nil
}

// Server is the base URL the client talks to.
func (c *Client) Server() string { return c.base.String() }

// User is the configured user name ("" for a session-only client).
func (c *Client) User() string { return c.cfg.User }

// Token returns the session token and the session's URI ("" without a
// session).
func (c *Client) Token() (token, session string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.token, c.session
}

func (c *Client) setToken(token, session string) {
	c.mu.Lock()
	c.token, c.session = token, session
	c.mu.Unlock()
}

// Response is a finished request.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Decode unmarshals the body into v.
func (r *Response) Decode(v any) error {
	if err := json.Unmarshal(r.Body, v); err != nil {
		return fmt.Errorf("client: decoding response: %w", err)
	}
	return nil
}

// Location is the Location header as a path on the service.
func (r *Response) Location() string { return r.Header.Get("Location") }

// Do sends one request. body is nil, []byte (sent as is) or a value sent
// as JSON. A status of 400 or more is returned as *Error; 2xx (and 304) as
// a Response.
func (c *Client) Do(ctx context.Context, method, path string, body any) (*Response, error) {
	var raw []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		raw = b
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			return nil, fmt.Errorf("client: encoding %s %s: %w", method, path, err)
		}
	}
	tok, _ := c.Token()
	resp, err := c.send(ctx, method, path, raw, auth{token: tok, basic: true})
	if err != nil {
		return nil, err
	}
	// A session that ended (timeout, logout elsewhere) falls back to
	// Basic when the client has credentials, so that a long-lived
	// client keeps working.
	if resp.Status == http.StatusUnauthorized && tok != "" && c.cfg.User != "" && c.cfg.Password != "" {
		c.setToken("", "")
		if resp, err = c.send(ctx, method, path, raw, auth{basic: true}); err != nil {
			return nil, err
		}
	}
	if resp.Status >= 400 {
		return resp, parseError(method, path, resp)
	}
	return resp, nil
}

// resolve turns a path (or a same-origin absolute URL) into a URL on the
// service. Other origins are refused: the request would carry credentials.
func (c *Client) resolve(path string) (*url.URL, error) {
	ref, err := url.Parse(path)
	if err != nil {
		return nil, fmt.Errorf("client: bad URI %q: %w", path, err)
	}
	u := c.base.ResolveReference(ref)
	if u.Scheme != c.base.Scheme || u.Host != c.base.Host {
		return nil, fmt.Errorf("client: URI %q points outside %s", path, c.base)
	}
	return u, nil
}

// auth is how one request authenticates.
type auth struct {
	token string // X-Auth-Token, if set
	basic bool   // else HTTP Basic with the configured credentials
}

func (c *Client) newRequest(ctx context.Context, method, path string, body []byte, a auth) (*http.Request, error) {
	u, err := c.resolve(path)
	if err != nil {
		return nil, err
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("OData-Version", "4.0")
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	switch {
	case a.token != "":
		req.Header.Set("X-Auth-Token", a.token)
	case a.basic && c.cfg.User != "" && c.cfg.Password != "":
		req.SetBasicAuth(c.cfg.User, c.cfg.Password)
	}
	return req, nil
}

func (c *Client) send(ctx context.Context, method, path string, body []byte, a auth) (*Response, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := c.newRequest(ctx, method, path, body, a)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: reading response: %w", method, path, err)
	}
	if len(b) > maxBody {
		return nil, fmt.Errorf("client: %s %s: response larger than %d bytes", method, path, maxBody)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// Get fetches path and decodes it into v (if not nil).
func (c *Client) Get(ctx context.Context, path string, v any) error {
	r, err := c.Do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	if v == nil {
		return nil
	}
	return r.Decode(v)
}

// Post sends body as JSON.
func (c *Client) Post(ctx context.Context, path string, body any) (*Response, error) {
	return c.Do(ctx, http.MethodPost, path, body)
}

// Patch sends body as JSON.
func (c *Client) Patch(ctx context.Context, path string, body any) (*Response, error) {
	return c.Do(ctx, http.MethodPatch, path, body)
}

// Delete deletes the resource at path. A 202 answer means the deletion
// continues in a task; WaitDone waits for it.
func (c *Client) Delete(ctx context.Context, path string) (*Response, error) {
	return c.Do(ctx, http.MethodDelete, path, nil)
}

// Login opens a Redfish session with the configured credentials; later
// requests carry its X-Auth-Token.
func (c *Client) Login(ctx context.Context) (Session, error) {
	if c.cfg.User == "" {
		return Session{}, errors.New("client: login: no user name")
	}
	raw, err := json.Marshal(map[string]string{"UserName": c.cfg.User, "Password": c.cfg.Password})
	if err != nil {
		return Session{}, fmt.Errorf("client: login: %w", err)
	}
	// The login request carries no credentials of its own: the body is
	// the credential.
	resp, err := c.send(ctx, http.MethodPost, SessionsURI, raw, auth{})
	if err != nil {
		return Session{}, err
	}
	if resp.Status >= 400 {
		return Session{}, parseError(http.MethodPost, SessionsURI, resp)
	}
	tok := resp.Header.Get("X-Auth-Token")
	if tok == "" {
		return Session{}, fmt.Errorf("client: login: %d answer without X-Auth-Token", resp.Status)
	}
	var s Session
	if len(resp.Body) > 0 {
		if err := resp.Decode(&s); err != nil {
			return Session{}, err
		}
	}
	if loc := resp.Location(); loc != "" {
		s.ODataID = loc
	}
	if s.ODataID == "" {
		return Session{}, fmt.Errorf("client: login: no session URI in the answer")
	}
	if u, err := c.resolve(s.ODataID); err == nil {
		s.ODataID = u.Path
	}
	c.setToken(tok, s.ODataID)
	return s, nil
}

// Logout deletes the client's session. Without a session it does nothing.
func (c *Client) Logout(ctx context.Context) error {
	tok, sess := c.Token()
	if tok == "" || sess == "" {
		return nil
	}
	resp, err := c.send(ctx, http.MethodDelete, sess, nil, auth{token: tok})
	if err != nil {
		return err
	}
	c.setToken("", "")
	if resp.Status >= 400 {
		return parseError(http.MethodDelete, sess, resp)
	}
	return nil
}

// retryAfter reads a Retry-After header given in seconds (0 if absent).
func retryAfter(h http.Header) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(h.Get("Retry-After")))
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}
