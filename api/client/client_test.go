package client_test

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/labstack/echo/v4"

	"cxlpool/api"
	"cxlpool/api/apitest"
	"cxlpool/api/client"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
)

func newClient(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	c, err := client.New(cfg)
	if err != nil {
		t.Fatalf("client.New: %v", err)
	}
	return c
}

// TestURIs: the client's fixed URIs are the service's.
func TestURIs(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{client.ChassisURI, api.ChassisURI},
		{client.DCDURI, api.DCDURI},
		{client.MemoryDomainURI, api.MemoryDomainURI},
		{client.FabricURI, api.FabricURI},
		{client.SystemsURI, api.SystemsURI},
		{client.ChunksURI + "/7", api.ChunkURI(7)},
		{client.ConnectionsURI + "/7", api.ConnectionURI(7)},
		{client.SystemsURI + "/Host3", api.SystemURI(3)},
	} {
		if tc.got != tc.want {
			t.Errorf("got URI %q, want %q", tc.got, tc.want)
		}
	}
}

func TestNewRejectsBadServers(t *testing.T) {
	for _, s := range []string{"", "ftp://x", "http://", "https://user:pw@host", "http://h/?q=1", "::"} {
		if _, err := client.New(client.Config{Server: s}); err == nil {
			t.Errorf("New(%q): got nil error, want one", s)
		}
	}
}

// TestSessions: Login stores a token used by later requests; Logout ends
// the session so that the token is refused with NoValidSession.
func TestSessions(t *testing.T) {
	env := apitest.NewServer(t)
	ctx := context.Background()
	c := newClient(t, client.Config{Server: env.HTTP.URL, User: "admin", Password: apitest.AdminPassword})
	s, err := c.Login(ctx)
	if err != nil {
		t.Fatalf("Login: %v", err)
	}
	tok, uri := c.Token()
	if tok == "" || uri != s.ODataID || !strings.HasPrefix(uri, client.SessionsURI+"/") {
		t.Fatalf("after Login: token %q session %q (body %q), want a token and the session URI", tok, uri, s.ODataID)
	}
	if s.UserName != "admin" {
		t.Errorf("session UserName: got %q, want admin", s.UserName)
	}
	// A token-only client (what poolctl builds from its session file).
	tc := newClient(t, client.Config{Server: env.HTTP.URL, Token: tok, Session: uri})
	me, err := tc.Me(ctx)
	if err != nil {
		t.Fatalf("Me with the token: %v", err)
	}
	if me.UserName != "admin" || me.RoleID != "Administrator" {
		t.Errorf("Me: got %s/%s, want admin/Administrator", me.UserName, me.RoleID)
	}
	if err := tc.Logout(ctx); err != nil {
		t.Fatalf("Logout: %v", err)
	}
	if tok, _ := tc.Token(); tok != "" {
		t.Errorf("token after Logout: got %q, want none", tok)
	}
	// A client with only the ended token sees the 401.
	dead := newClient(t, client.Config{Server: env.HTTP.URL, Token: tok, Session: uri})
	err = dead.Get(ctx, client.AccountsURI, nil)
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusUnauthorized || !e.Has("Base.NoValidSession") {
		t.Fatalf("GET with an ended session: got %v, want 401 NoValidSession", err)
	}
	// Basic fallback: the expired token is dropped and the credentials
	// used instead.
	if err := c.Get(ctx, client.AccountsURI, nil); err != nil {
		t.Fatalf("GET after logout with credentials to fall back on: %v", err)
	}
	if tok, _ := c.Token(); tok != "" {
		t.Errorf("token after fallback: got %q, want it dropped", tok)
	}
}

func TestLoginRefused(t *testing.T) {
	env := apitest.NewServer(t)
	c := newClient(t, client.Config{Server: env.HTTP.URL, User: "admin", Password: "wrong-password"})
	_, err := c.Login(context.Background())
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusUnauthorized {
		t.Fatalf("Login with a wrong password: got %v, want a 401 *Error", err)
	}
	if !strings.Contains(err.Error(), "NoValidSession") {
		t.Errorf("error text %q does not name the MessageId", err)
	}
}

// TestErrors: Redfish error bodies become *Error with the message and the
// MessageId in the text; other bodies are kept, made printable.
func TestErrors(t *testing.T) {
	env := apitest.NewServer(t)
	ctx := context.Background()
	c := newClient(t, client.Config{Server: env.HTTP.URL, User: "admin", Password: apitest.AdminPassword})
	err := c.Get(ctx, client.AccountsURI+"/999", nil)
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("GET a missing account: got %v, want *client.Error", err)
	}
	if e.Status != 404 || !e.Has("Base.ResourceNotFound") || !client.IsNotFound(err) {
		t.Errorf("got status %d messages %+v, want 404 ResourceNotFound", e.Status, e.Messages)
	}
	msg := err.Error()
	for _, want := range []string{"GET " + client.AccountsURI + "/999", "404 Not Found", "ManagerAccount", "(Base.1."} {
		if !strings.Contains(msg, want) {
			t.Errorf("error text %q lacks %q", msg, want)
		}
	}

	// Several messages: a POST with two unknown properties.
	_, err = c.Post(ctx, client.AccountsURI, map[string]any{"UserName": "x", "Password": "password-1",
		"RoleId": "Operator", "Bogus": 1, "Other": 2})
	if !errors.As(err, &e) || e.Status != 400 {
		t.Fatalf("POST with unknown properties: got %v, want 400", err)
	}
	if !e.Has("Base.PropertyUnknown") {
		t.Errorf("got messages %+v, want PropertyUnknown", e.Messages)
	}

	// A body that is not a Redfish error, with control characters.
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, "<html>\x1b[31mbusy\x07</html>")
	}))
	defer proxy.Close()
	pc := newClient(t, client.Config{Server: proxy.URL})
	err = pc.Get(ctx, "/redfish/v1", nil)
	if !errors.As(err, &e) {
		t.Fatalf("GET through the proxy: got %v, want *client.Error", err)
	}
	if got, want := e.Raw, "<html> [31mbusy </html>"; got != want {
		t.Errorf("Raw: got %q, want %q", got, want)
	}
	if e.RetryAfter.Seconds() != 3 {
		t.Errorf("RetryAfter: got %v, want 3s", e.RetryAfter)
	}
}

func TestOtherOriginsRefused(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	c := newClient(t, client.Config{Server: "http://127.0.0.1:1", User: "u", Password: "p"})
	if err := c.Get(context.Background(), srv.URL+"/redfish/v1", nil); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Errorf("GET on another origin: got %v, want a refusal", err)
	}
	if hits.Load() != 0 {
		t.Errorf("the other origin got %d requests, want 0", hits.Load())
	}
}

// TestTLS: a CA file makes a TLS server trusted, Insecure skips the
// check, and neither means the system roots (which do not know it).
func TestTLS(t *testing.T) {
	env := apitest.NewServer(t)
	ts := httptest.NewUnstartedServer(env.Server.Handler())
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the point
	ts.StartTLS()
	defer ts.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		cfg      client.Config
		wantErr  string
		buildErr bool
	}{
		{name: "system roots", cfg: client.Config{}, wantErr: "certificate"},
		{name: "ca file", cfg: client.Config{CAFile: ca}},
		{name: "insecure", cfg: client.Config{Insecure: true}},
		{name: "junk ca", cfg: client.Config{CAFile: junk}, buildErr: true},
		{name: "missing ca", cfg: client.Config{CAFile: filepath.Join(dir, "none.pem")}, buildErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Server, cfg.User, cfg.Password = ts.URL, "admin", apitest.AdminPassword
			c, err := client.New(cfg)
			if tc.buildErr {
				if err == nil {
					t.Fatalf("New: got nil error, want one")
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			_, err = c.Login(ctx)
			if tc.wantErr == "" && err != nil {
				t.Fatalf("Login: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Login: got %v, want an error about %q", err, tc.wantErr)
			}
		})
	}
}

// taskRoute adds a test resource whose POST starts a task that waits for
// release and then ends with err, or 201 with Location.
func taskRoute(env *apitest.Env, path string, err error, release <-chan struct{}) {
	env.Server.Handle(http.MethodPost, path, redfish.PrivConfigureComponents|redfish.PrivHostCapacity, func(c echo.Context) error {
		t := env.Server.StartTask(c, redfish.TaskOptions{Name: "test job",
			Target: redfish.Target{Type: "Connection", ID: "7", URI: "/redfish/v1/Fabrics/CXL/Connections/7"}},
			func(ctx context.Context, _ *redfish.Task) (redfish.TaskResult, error) {
				select {
				case <-release:
				case <-ctx.Done():
					return redfish.TaskResult{}, ctx.Err()
				}
				return redfish.TaskResult{Status: http.StatusCreated, Location: client.AccountsURI + "/1",
					Body: map[string]any{"Id": "done"}}, err
			})
		return env.Server.Accepted(c, t)
	})
}

// TestWaitTask: a 202 is polled until the task ends; the monitor's final
// answer (or its error) is what Settle returns.
func TestWaitTask(t *testing.T) {
	env := apitest.NewServer(t)
	release := make(chan struct{})
	taskRoute(env, "/redfish/v1/Oem/CxlPool/TestOK", nil, release)
	taskRoute(env, "/redfish/v1/Oem/CxlPool/TestRejected", dcd.ErrHostRejected, release)
	ctx := context.Background()
	c := newClient(t, client.Config{Server: env.HTTP.URL, User: "admin", Password: apitest.AdminPassword,
		PollInitial: 1, PollMax: 1})
	for _, tc := range []struct {
		path    string
		wantErr string
	}{
		{"/redfish/v1/Oem/CxlPool/TestOK", ""},
		{"/redfish/v1/Oem/CxlPool/TestRejected", "did not accept"},
	} {
		r, err := c.Post(ctx, tc.path, map[string]any{})
		if err != nil || r.Status != http.StatusAccepted || r.Location() == "" {
			t.Fatalf("POST %s: got %v %v, want 202 with a monitor", tc.path, r, err)
		}
		var task client.Task
		if err := r.Decode(&task); err != nil || task.TaskState != "Running" {
			t.Fatalf("202 body: got %+v (%v), want a running Task", task, err)
		}
		polls := 0
		done := make(chan struct{})
		var final *client.Response
		var ferr error
		go func() {
			defer close(done)
			final, ferr = c.Settle(ctx, r, func(client.Task) {
				polls++
				if polls == 2 {
					release <- struct{}{}
				}
			})
		}()
		<-done
		if tc.wantErr != "" {
			var e *client.Error
			if !errors.As(ferr, &e) || e.Status != http.StatusConflict || !strings.Contains(ferr.Error(), tc.wantErr) {
				t.Errorf("Settle %s: got %v, want a 409 saying %q", tc.path, ferr, tc.wantErr)
			}
			continue
		}
		if ferr != nil {
			t.Fatalf("Settle %s: %v", tc.path, ferr)
		}
		if final.Status != http.StatusCreated || final.Location() != client.AccountsURI+"/1" {
			t.Errorf("final answer: got %d Location %q, want 201 with the resource", final.Status, final.Location())
		}
		if polls < 2 {
			t.Errorf("progress calls: got %d, want at least 2", polls)
		}
	}

	// A cancelled wait stops polling.
	r, err := c.Post(ctx, "/redfish/v1/Oem/CxlPool/TestOK", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	_, err = c.WaitTask(cctx, r.Location(), func(client.Task) { cancel() })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("WaitTask after cancel: got %v, want context.Canceled", err)
	}
	close(release)
}

// TestList: links-only collections are fetched member by member across
// nextLink pages; expanded ones are used as they are.
func TestList(t *testing.T) {
	type item struct {
		client.Resource
		N int `json:"N"`
	}
	var gets atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gets.Add(1)
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.RequestURI() {
		case "/redfish/v1":
			fmt.Fprint(w, `{"ProtocolFeaturesSupported":{"ExpandQuery":{"NoLinks":false}}}`)
		case "/c":
			fmt.Fprint(w, `{"Members":[{"@odata.id":"/c/1"},{"@odata.id":"/c/2"}],"Members@odata.count":3,"Members@odata.nextLink":"/c?$skip=2"}`)
		case "/c?$skip=2":
			fmt.Fprint(w, `{"Members":[{"@odata.id":"/c/3","Id":"3","N":3}],"Members@odata.count":3}`)
		case "/c/1", "/c/2":
			id := strings.TrimPrefix(r.URL.Path, "/c/")
			fmt.Fprintf(w, `{"@odata.id":"/c/%s","Id":"%s","N":%s}`, id, id, id)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c := newClient(t, client.Config{Server: srv.URL})
	got, err := client.List[item](context.Background(), c, "/c")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var ns []int
	for _, it := range got {
		ns = append(ns, it.N)
	}
	if diff := cmp.Diff([]int{1, 2, 3}, ns); diff != "" {
		t.Errorf("members (-want +got):\n%s", diff)
	}

	// The real service expands: one request for the collection.
	env := apitest.NewServer(t)
	ac := newClient(t, client.Config{Server: env.HTTP.URL, User: "admin", Password: apitest.AdminPassword})
	accts, err := ac.Accounts(context.Background())
	if err != nil {
		t.Fatalf("Accounts: %v", err)
	}
	var names []string
	for _, a := range accts {
		names = append(names, a.UserName)
	}
	if diff := cmp.Diff([]string{"admin", "operator", "reader", "host0", "host1"}, names); diff != "" {
		t.Errorf("accounts (-want +got):\n%s", diff)
	}
	for _, a := range accts {
		if want := map[string]string{"host0": "Host0", "host1": "Host1"}[a.UserName]; a.SystemID() != want {
			t.Errorf("account %s: SystemID %q, want %q", a.UserName, a.SystemID(), want)
		}
	}
}

// TestAccounts: create, find oneself, delete.
func TestAccounts(t *testing.T) {
	env := apitest.NewServer(t)
	ctx := context.Background()
	c := newClient(t, client.Config{Server: env.HTTP.URL, User: "admin", Password: apitest.AdminPassword})
	acc, err := c.CreateAccount(ctx, client.NewAccount{UserName: "h3", Password: "host-password-3", RoleID: "HostUser", SystemID: "Host3"})
	if err != nil {
		t.Fatalf("CreateAccount: %v", err)
	}
	if acc.SystemID() != "Host3" || acc.RoleID != "HostUser" {
		t.Errorf("created account: got %+v, want a HostUser bound to Host3", acc)
	}
	hc := newClient(t, client.Config{Server: env.HTTP.URL, User: "h3", Password: "host-password-3"})
	me, err := hc.Me(ctx)
	if err != nil || me.SystemID() != "Host3" {
		t.Fatalf("Me as h3: got %+v %v, want the account bound to Host3", me, err)
	}
	if _, err := c.CreateAccount(ctx, client.NewAccount{UserName: "h3", Password: "host-password-3", RoleID: "HostUser", SystemID: "Host3"}); client.StatusOf(err) != http.StatusConflict {
		t.Errorf("creating h3 again: got %v, want 409", err)
	}
	if err := c.DeleteAndWait(ctx, acc.ODataID, nil); err != nil {
		t.Fatalf("DeleteAndWait: %v", err)
	}
	if _, err := hc.Me(ctx); client.StatusOf(err) != http.StatusUnauthorized {
		t.Errorf("Me after the account is gone: got %v, want 401", err)
	}
}

// TestEvents: the SSE stream delivers the service's events as they
// happen, and ends cleanly when its context does.
func TestEvents(t *testing.T) {
	env := apitest.NewServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newClient(t, client.Config{Server: env.HTTP.URL, User: "admin", Password: apitest.AdminPassword})
	stream, err := c.Events(ctx)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	defer stream.Close()
	// The stream is subscribed once Events returns.
	r := env.Admin.Post(client.AccountsURI, map[string]any{"UserName": "watched", "Password": "user-password-1", "RoleId": "ReadOnly"})
	if r.Status != http.StatusCreated {
		t.Fatalf("creating an account: %s", r)
	}
	want := r.Header.Get("Location")
	for {
		ev, err := stream.Next()
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		if len(ev.Events) == 0 {
			t.Fatalf("event %s without records", ev.ID)
		}
		rec := ev.Events[0]
		if rec.Origin() == want {
			if got := client.MessageKey(rec.MessageID); got != "ResourceEvent.ResourceCreated" {
				t.Errorf("event for the new account: got %s, want ResourceEvent.ResourceCreated", got)
			}
			break
		}
	}
	cancel()
	if _, err := stream.Next(); !client.IsClosed(err) {
		t.Errorf("Next after cancel: got %v, want a closed-stream error", err)
	}
}
