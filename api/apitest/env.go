// Package apitest runs the Redfish service in-process for tests: a
// sim-backed appliance, the API on an httptest server, logged-in clients
// for every role, and a validator that checks payloads against the DMTF
// JSON schemas kept in the repository (api/schemas/dmtf).
package apitest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"cxlpool/api"
	"cxlpool/api/redfish"
	"cxlpool/appliance"
	"cxlpool/sim"
)

// AdminPassword is the "admin" account's password in every Env.
const AdminPassword = "admin-password-1"

// Clock is a settable clock for the API (sessions, lockout). It starts at
// a fixed instant so golden files are stable.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Options adjust an Env.
type Options struct {
	// Config edits the API configuration before New.
	Config func(*api.Config)
	// Sim edits the virtual box's configuration.
	Sim func(*sim.Config)
	// Log receives the daemon's logs (discarded if nil).
	Log io.Writer
	// AddTimeout is how long a host may take to accept offered capacity
	// (2 s if zero); tests of hosts that never answer shorten it.
	AddTimeout time.Duration
	// ReleaseTimeout is how long a host may take to give capacity back
	// before the release is forced (2 s if zero).
	ReleaseTimeout time.Duration
	// Board edits board management's configuration (the management
	// computer's sensors come from bmc/hwmon's fixture tree by default).
	Board func(*appliance.BoardConfig)
}

// Env is a running service with clients.
type Env struct {
	T      testing.TB
	App    *appliance.Appliance
	Server *api.Server
	HTTP   *httptest.Server
	Clock  *Clock
	Config api.Config

	// Clients, each logged in with its own session: the built-in admin,
	// an Operator, a ReadOnly user, and HostUser accounts bound to
	// Host0 and Host1. Anon sends no credentials.
	Anon, Admin, Operator, ReadOnly, Host0, Host1 *Client
}

// Test user names and their (shared) password.
const (
	UserOperator = "operator"
	UserReadOnly = "reader"
	UserHost0    = "host0"
	UserHost1    = "host1"
	UserPassword = "user-password-1"
)

// NewServer starts a sim-backed appliance and the API over it, with the
// clients logged in. Everything stops at the end of the test.
func NewServer(t testing.TB, opts ...Options) *Env {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	logw := o.Log
	if logw == nil {
		logw = io.Discard
	}
	log := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithCancel(context.Background())
	scfg := sim.DefaultConfig()
	if o.Sim != nil {
		o.Sim(&scfg)
	}
	dir := t.TempDir()
	addTimeout := o.AddTimeout
	if addTimeout <= 0 {
		addTimeout = 2 * time.Second
	}
	app, err := appliance.Open(ctx, appliance.Config{Device: appliance.DeviceSim, DataDir: dir, Sim: scfg,
		Logger: log, AddTimeout: addTimeout, ReleaseTimeout: cmp.Or(o.ReleaseTimeout, 2*time.Second), Synchronous: "NORMAL", ExportListen: "127.0.0.1:0",
		Board: boardConfig(t, o)})
	if err != nil {
		cancel()
		t.Fatalf("appliance.Open: %v", err)
	}
	if err := app.Start(ctx); err != nil {
		cancel()
		app.Close()
		t.Fatalf("appliance.Start: %v", err)
	}
	clock := NewClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	cfg := api.Config{
		Manager: app.Manager, Device: app.Device, DataDir: dir, Logger: log, Clock: clock.Now,
		AdminPassword: AdminPassword, FirmwareVersion: "test-1.0", BcryptCost: bcrypt.MinCost,
		PushRetryInterval: 10 * time.Millisecond, Exports: app.Exports, ExportAddr: app.ExportAddr,
		Board: app.Board, KV: app.KV, KVEvents: app.SubscribeKVEvents, HostReports: app.HostReports,
		History: app.History,
	}
	if app.Telemetry != nil { // a nil *appliance.Telemetry must stay a nil interface
		cfg.Telemetry = app.Telemetry
	}
	if o.Config != nil {
		o.Config(&cfg)
	}
	srv, err := api.New(cfg)
	if err != nil {
		cancel()
		app.Close()
		t.Fatalf("api.New: %v", err)
	}
	ts := httptest.NewServer(srv.Handler())
	e := &Env{T: t, App: app, Server: srv, HTTP: ts, Clock: clock, Config: cfg}
	t.Cleanup(func() {
		srv.Close()
		ts.Close()
		cancel()
		app.Manager.Wait()
		app.Close()
	})
	e.Anon = &Client{env: e}
	e.Admin = e.Login("admin", AdminPassword)
	e.Operator = e.AddUser(UserOperator, redfish.RoleOperator, "")
	e.ReadOnly = e.AddUser(UserReadOnly, redfish.RoleReadOnly, "")
	e.Host0 = e.AddUser(UserHost0, redfish.RoleHostUser, "Host0")
	e.Host1 = e.AddUser(UserHost1, redfish.RoleHostUser, "Host1")
	return e
}

// AddUser creates an account (bound to systemID for host roles) and
// returns a client logged in as it.
func (e *Env) AddUser(name, role, systemID string) *Client {
	e.T.Helper()
	body := map[string]any{"UserName": name, "Password": UserPassword, "RoleId": role}
	if systemID != "" {
		body["Oem"] = map[string]any{"CxlPool": map[string]any{"SystemId": systemID}}
	}
	r := e.Admin.Post("/redfish/v1/AccountService/Accounts", body)
	if r.Status != http.StatusCreated {
		e.T.Fatalf("creating account %s: got %d, want 201: %s", name, r.Status, r.Body)
	}
	return e.Login(name, UserPassword)
}

// Login opens a Redfish session.
func (e *Env) Login(user, password string) *Client {
	e.T.Helper()
	c := &Client{env: e, User: user, Password: password}
	r := c.Post("/redfish/v1/SessionService/Sessions", map[string]any{"UserName": user, "Password": password})
	if r.Status != http.StatusCreated {
		e.T.Fatalf("login %s: got %d, want 201: %s", user, r.Status, r.Body)
	}
	c.Token = r.Header.Get("X-Auth-Token")
	c.Session = r.Header.Get("Location")
	return c
}

// Basic returns a client that sends HTTP Basic credentials.
func (e *Env) Basic(user, password string) *Client {
	return &Client{env: e, User: user, Password: password, UseBasic: true}
}

// Client sends requests as one principal.
type Client struct {
	env      *Env
	User     string
	Password string
	Token    string // X-Auth-Token of the session
	Session  string // the session's URI
	UseBasic bool
	// Source, if set, is the loopback address requests come from
	// ("127.0.0.2"), for tests of per-address policies.
	Source string
}

// From returns a copy of c whose requests come from the loopback address
// source (Linux routes all of 127.0.0.0/8 to lo).
func (c *Client) From(source string) *Client {
	d := *c
	d.Source = source
	return &d
}

func (c *Client) httpClient() *http.Client {
	if c.Source == "" {
		return c.env.HTTP.Client()
	}
	tr := c.env.HTTP.Client().Transport.(*http.Transport).Clone()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(c.Source)}}
	tr.DialContext = dialer.DialContext
	return &http.Client{Transport: tr}
}

// Response is a finished request.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Do sends a request. body may be nil, []byte or string (sent as is) or
// anything else (sent as JSON). headers are name, value pairs.
func (c *Client) Do(method, path string, body any, headers ...string) *Response {
	c.env.T.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			c.env.T.Fatalf("marshal body: %v", err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, c.env.HTTP.URL+path, rd)
	if err != nil {
		c.env.T.Fatalf("request %s %s: %v", method, path, err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	switch {
	case c.UseBasic:
		req.SetBasicAuth(c.User, c.Password)
	case c.Token != "":
		req.Header.Set("X-Auth-Token", c.Token)
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		c.env.T.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.env.T.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// Get, Post, Patch and Delete are Do shorthands.
func (c *Client) Get(path string, headers ...string) *Response {
	c.env.T.Helper()
	return c.Do(http.MethodGet, path, nil, headers...)
}

// Post sends body as JSON.
func (c *Client) Post(path string, body any, headers ...string) *Response {
	c.env.T.Helper()
	return c.Do(http.MethodPost, path, body, headers...)
}

// Patch sends body as JSON.
func (c *Client) Patch(path string, body any, headers ...string) *Response {
	c.env.T.Helper()
	return c.Do(http.MethodPatch, path, body, headers...)
}

// Delete sends a DELETE.
func (c *Client) Delete(path string, headers ...string) *Response {
	c.env.T.Helper()
	return c.Do(http.MethodDelete, path, nil, headers...)
}

// GetOK fetches a resource, requires 200, validates it against its schema
// and returns it decoded.
func (c *Client) GetOK(path string) map[string]any {
	c.env.T.Helper()
	r := c.Get(path)
	if r.Status != http.StatusOK {
		c.env.T.Fatalf("GET %s as %q: got %d, want 200: %s", path, c.User, r.Status, r.Body)
	}
	Validate(c.env.T, r.Body)
	return r.JSON(c.env.T)
}

// JSON decodes the body as an object.
func (r *Response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("response body is not a JSON object: %v: %s", err, r.Body)
	}
	return m
}

// MessageIDs lists the @Message.ExtendedInfo MessageIds of an error
// response (nil if it is not one).
func (r *Response) MessageIDs() []string {
	var e struct {
		Error struct {
			Info []struct {
				MessageID string `json:"MessageId"`
			} `json:"@Message.ExtendedInfo"`
		} `json:"error"`
	}
	if json.Unmarshal(r.Body, &e) != nil {
		return nil
	}
	var ids []string
	for _, m := range e.Error.Info {
		ids = append(ids, m.MessageID)
	}
	return ids
}

// String summarises the response for failure messages.
func (r *Response) String() string {
	b := r.Body
	if len(b) > 600 {
		b = b[:600]
	}
	return fmt.Sprintf("%d %s", r.Status, b)
}

// Links returns every @odata.id in a JSON body except the body's own, in
// document order, for walking the service.
func Links(body []byte) []string {
	var v any
	if json.Unmarshal(body, &v) != nil {
		return nil
	}
	self := ""
	if m, ok := v.(map[string]any); ok {
		self, _ = m["@odata.id"].(string)
	}
	var out []string
	var walk func(any)
	walk = func(x any) {
		switch t := x.(type) {
		case map[string]any:
			if id, ok := t["@odata.id"].(string); ok && id != self {
				out = append(out, id)
			}
			for _, k := range sortedKeys(t) {
				walk(t[k])
			}
		case []any:
			for _, e := range t {
				walk(e)
			}
		}
	}
	walk(v)
	return out
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
