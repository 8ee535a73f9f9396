package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"flag"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/api/apitest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// cli runs poolctl against one in-process service, with its own config
// directory and password files.
type cli struct {
	t      *testing.T
	env    *apitest.Env
	server string
	dir    string // config home
	pw     map[string]string
}

// newCLI starts the service and isolates poolctl's environment: its own
// XDG_CONFIG_HOME and no POOLCTL_* variables from the caller's shell.
func newCLI(t *testing.T, opts ...apitest.Options) *cli {
	t.Helper()
	env := apitest.NewServer(t, opts...)
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	for _, v := range []string{"POOLCTL_SERVER", "POOLCTL_USER", "POOLCTL_PASSWORD"} {
		t.Setenv(v, "")
	}
	c := &cli{t: t, env: env, server: env.HTTP.URL, dir: dir, pw: map[string]string{}}
	c.passwordFile("admin", apitest.AdminPassword)
	for _, u := range []string{apitest.UserOperator, apitest.UserReadOnly, apitest.UserHost0, apitest.UserHost1} {
		c.passwordFile(u, apitest.UserPassword)
	}
	return c
}

// passwordFile writes a password file for user.
func (c *cli) passwordFile(user, pw string) string {
	c.t.Helper()
	p := filepath.Join(c.t.TempDir(), user+".pw")
	if err := os.WriteFile(p, []byte(pw+"\n"), 0o600); err != nil {
		c.t.Fatal(err)
	}
	c.pw[user] = p
	return p
}

// result is one poolctl run.
type result struct {
	stdout, stderr string
	code           int
}

// run runs poolctl with --server set.
func (c *cli) run(args ...string) result {
	c.t.Helper()
	return c.runCtx(context.Background(), args...)
}

func (c *cli) runCtx(ctx context.Context, args ...string) result {
	c.t.Helper()
	var out, errb bytes.Buffer
	err := run(ctx, append([]string{"--server", c.server}, args...), &out, &errb)
	code := report(err, &errb)
	return result{out.String(), errb.String(), code}
}

// as runs poolctl as user with its password file.
func (c *cli) as(user string, args ...string) result {
	c.t.Helper()
	return c.run(append([]string{"--user", user, "--password-file", c.pw[user]}, args...)...)
}

// ok requires exit status 0.
func (c *cli) ok(r result) result {
	c.t.Helper()
	if r.code != 0 {
		c.t.Fatalf("poolctl: exit %d, want 0\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	return r
}

// fails requires exit status code and stderr containing want.
func (c *cli) fails(r result, code int, want string) {
	c.t.Helper()
	if r.code != code || !strings.Contains(r.stderr, want) {
		c.t.Errorf("poolctl: got exit %d with stderr %q, want exit %d mentioning %q", r.code, r.stderr, code, want)
	}
}

var (
	reTime    = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
	reSession = regexp.MustCompile(`(Sessions/)[A-Za-z0-9_-]+`)
	reEventID = regexp.MustCompile(`(?m)^\d{13,}  `) // watch's event ids: microseconds since the epoch and on
)

// normalise replaces what differs between runs: the server's address,
// the config directory, session ids and times.
func (c *cli) normalise(s string) string {
	s = strings.ReplaceAll(s, c.server, "SERVER")
	s = strings.ReplaceAll(s, c.dir, "CONFIG")
	s = reSession.ReplaceAllString(s, "${1}<id>")
	s = reEventID.ReplaceAllString(s, "<event>  ")
	return reTime.ReplaceAllString(s, "<time>")
}

// golden compares got (normalised) with testdata/name.golden; -update
// rewrites it.
func (c *cli) golden(name, got string) {
	c.t.Helper()
	got = c.normalise(got)
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			c.t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			c.t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		c.t.Fatalf("reading golden file (run with -update to create it): %v", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		c.t.Errorf("%s mismatch (-want +got):\n%s", path, diff)
	}
}

// decodeJSON parses --json output.
func decodeJSON[T any](t *testing.T, r result) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("--json output does not parse: %v\n%s", err, r.stdout)
	}
	return v
}

func TestUsage(t *testing.T) {
	c := newCLI(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, exitUsage, "no command given"},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"--bogus", "status"}, exitUsage, "flag provided but not defined"},
		{[]string{"login"}, exitUsage, "--user"},
		{[]string{"login", "extra"}, exitUsage, `unexpected argument "extra"`},
		{[]string{"accounts", "frob"}, exitUsage, `unknown subcommand "frob"`},
		{[]string{"accounts", "add", "x"}, exitUsage, "--role is required"},
		{[]string{"accounts", "add"}, exitUsage, "missing argument"},
		{[]string{"--timeout", "-1s", "accounts"}, exitUsage, "--timeout"},
		{[]string{"watch", "--count", "-1"}, exitUsage, "--count"},
		{[]string{"accounts"}, exitError, "not logged in to SERVER"},
	} {
		r := c.run(tc.args...)
		r.stderr = c.normalise(r.stderr)
		c.fails(r, tc.code, tc.want)
	}
	r := c.ok(c.run("-h"))
	for _, want := range []string{"usage: poolctl", "request", "--password-file", "exit status"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("poolctl -h: output lacks %q:\n%s", want, r.stdout)
		}
	}
	c.ok(c.run("help"))
}

// TestLoginLogout: login stores a 0600 token file per server that later
// commands use without credentials; logout ends the session and removes
// it.
func TestLoginLogout(t *testing.T) {
	c := newCLI(t)
	r := c.ok(c.as("admin", "login"))
	c.golden("login", r.stdout)

	path, err := (&app{getenv: os.Getenv}).sessionPath(c.server)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("session file: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("session file mode: got %04o, want 0600", st.Mode().Perm())
	}
	if dst, err := os.Stat(filepath.Dir(path)); err != nil || dst.Mode().Perm() != 0o700 {
		t.Errorf("session directory: got %v %v, want mode 0700", dst.Mode().Perm(), err)
	}
	if !strings.HasPrefix(path, filepath.Join(c.dir, "poolctl")) {
		t.Errorf("session file %s is not under $XDG_CONFIG_HOME/poolctl", path)
	}
	b, _ := os.ReadFile(path)
	if strings.Contains(r.stdout, "token") || !strings.Contains(string(b), `"token"`) {
		t.Errorf("the token belongs in the file, not on the screen:\nstdout %q\nfile %s", r.stdout, b)
	}

	// The stored session is used without --user.
	r = c.ok(c.run("accounts"))
	c.golden("accounts", r.stdout)

	// Another server has no session.
	other := c.run("--server", "http://127.0.0.1:1", "accounts")
	c.fails(other, exitError, "not logged in to http://127.0.0.1:1")

	var before storedSession
	if err := json.Unmarshal(mustRead(t, path), &before); err != nil {
		t.Fatal(err)
	}
	r = c.ok(c.run("logout"))
	c.golden("logout", r.stdout)
	if r := c.env.Anon.Get("/redfish/v1/AccountService/Accounts", "X-Auth-Token", before.Token); r.Status != http.StatusUnauthorized {
		t.Errorf("the logged-out session's token: got %d, want 401 (the session must end on the service)", r.Status)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("session file after logout: got %v, want it removed", err)
	}
	c.fails(c.run("accounts"), exitError, "not logged in")
	r = c.ok(c.run("logout"))
	if !strings.Contains(r.stdout, "Not logged in") {
		t.Errorf("second logout: got %q, want a note that there is no session", r.stdout)
	}

	// --json login output names the session, never the token.
	r = c.ok(c.as("admin", "--json", "login"))
	got := decodeJSON[map[string]string](t, r)
	if got["user"] != "admin" || !strings.HasPrefix(got["session"], "/redfish/v1/SessionService/Sessions/") ||
		got["server"] != c.server || got["file"] != path {
		t.Errorf("login --json: got %v", got)
	}
	if _, ok := got["token"]; ok {
		t.Errorf("login --json prints the token")
	}

	// A session ended elsewhere: the stored token gets a 401 with advice.
	tok := c.env.Login("admin", apitest.AdminPassword)
	var sess storedSession
	if err := json.Unmarshal(mustRead(t, path), &sess); err != nil {
		t.Fatal(err)
	}
	if r := tok.Delete(sess.Session); r.Status != http.StatusNoContent {
		t.Fatalf("deleting the session: %s", r)
	}
	c.fails(c.run("accounts"), exitError, "poolctl login")
	c.ok(c.run("logout")) // the dead session's file goes anyway
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("session file after logout of a dead session: got %v, want it removed", err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestLoginRefused(t *testing.T) {
	c := newCLI(t)
	bad := c.passwordFile("wrong", "not-the-password")
	r := c.run("--user", "admin", "--password-file", bad, "login")
	c.fails(r, exitError, "NoValidSession")
	if r.stdout != "" {
		t.Errorf("stdout of a refused login: got %q, want nothing", r.stdout)
	}
}

// TestSessionFileLoose: a token file others can read is refused.
func TestSessionFileLoose(t *testing.T) {
	c := newCLI(t)
	c.ok(c.as("admin", "login"))
	path, _ := (&app{getenv: os.Getenv}).sessionPath(c.server)
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	c.fails(c.run("accounts"), exitError, "accessible by others")
}

// TestPasswordSources: the environment, the flag (with a warning) and
// redirected standard input all work.
func TestPasswordSources(t *testing.T) {
	c := newCLI(t)
	t.Setenv("POOLCTL_PASSWORD", apitest.AdminPassword)
	c.ok(c.run("--user", "admin", "accounts"))
	t.Setenv("POOLCTL_PASSWORD", "")

	r := c.ok(c.run("--user", "admin", "--password", apitest.AdminPassword, "accounts"))
	if !strings.Contains(r.stderr, "process list") {
		t.Errorf("--password: stderr %q lacks the warning", r.stderr)
	}

	var out, errb bytes.Buffer
	a := &app{stdin: strings.NewReader(apitest.AdminPassword + "\n"), stdout: &out, stderr: &errb, getenv: os.Getenv}
	if err := a.run(context.Background(), []string{"--server", c.server, "--user", "admin", "accounts"}); err != nil {
		t.Fatalf("password on stdin: %v (%s)", err, errb.String())
	}
	a = &app{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: os.Getenv}
	if err := a.run(context.Background(), []string{"--server", c.server, "--user", "admin", "accounts"}); err == nil ||
		!strings.Contains(err.Error(), "standard input") {
		t.Errorf("no password anywhere: got %v, want an error about standard input", err)
	}
}

// TestAccounts: add (a host account bound to its system), list as JSON,
// the host's own view, remove.
func TestAccounts(t *testing.T) {
	c := newCLI(t)
	c.ok(c.as("admin", "login"))
	newPW := c.passwordFile("h5", "host5-password")
	r := c.ok(c.run("accounts", "add", "h5", "--role", "HostUser", "--system", "Host5", "--new-password-file", newPW))
	c.golden("accounts-add", r.stdout)

	type acct struct {
		ID, URI, User, Role, System string
		Enabled, Locked             bool
	}
	list := decodeJSON[[]acct](t, c.ok(c.run("accounts", "--json")))
	var found *acct
	for i := range list {
		if list[i].User == "h5" {
			found = &list[i]
		}
	}
	if found == nil || found.Role != "HostUser" || found.System != "Host5" || !found.Enabled ||
		found.URI != "/redfish/v1/AccountService/Accounts/"+found.ID {
		t.Fatalf("accounts --json: h5 is %+v, want an enabled HostUser bound to Host5", found)
	}

	// The host sees only itself.
	own := decodeJSON[[]acct](t, c.ok(c.as("h5", "--json", "accounts", "list")))
	if len(own) != 1 || own[0].User != "h5" {
		t.Errorf("h5's accounts: got %+v, want only itself", own)
	}
	c.fails(c.as("h5", "accounts", "add", "x", "--role", "ReadOnly", "--new-password-file", newPW),
		exitError, "InsufficientPrivilege")

	// Server-side validation comes back with its MessageId.
	c.fails(c.run("accounts", "add", "h6", "--role", "HostUser", "--new-password-file", newPW), exitError, "PropertyMissing")

	r = c.ok(c.run("accounts", "remove", "h5"))
	c.golden("accounts-remove", r.stdout)
	c.fails(c.run("accounts", "remove", "h5"), exitError, `no account "h5"`)
}

// signalWriter closes ch at its first write.
type signalWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	ch   chan struct{}
	once sync.Once
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.once.Do(func() { close(w.ch) })
	return w.buf.Write(p)
}

// watch starts `poolctl watch` as user and returns its output lines; stop
// ends it and returns its error. It returns once the stream is open.
func (c *cli) watch(ctx context.Context, user string, extra ...string) (lines <-chan string, stop func() error) {
	c.t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	errw := &signalWriter{ch: make(chan struct{})}
	done := make(chan error, 1)
	args := append([]string{"--server", c.server, "--user", user, "--password-file", c.pw[user], "watch"}, extra...)
	go func() {
		err := run(ctx, args, pw, errw)
		pw.Close()
		done <- err
	}()
	out := make(chan string, 100)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			select {
			case out <- sc.Text():
			default: // nobody is reading any more
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case <-errw.ch:
	case err := <-done:
		cancel()
		c.t.Fatalf("watch ended before the stream opened: %v", err)
	}
	return out, func() error {
		cancel()
		return <-done
	}
}

// TestWatch: events show up as they happen, as lines or JSON lines; a
// cancelled context (Ctrl-C) ends the watch without an error.
func TestWatch(t *testing.T) {
	c := newCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var jsonID string // the event id the --json watch printed
	for _, asJSON := range []bool{false, true} {
		var extra []string
		if asJSON {
			extra = []string{"--json"}
		}
		lines, stop := c.watch(ctx, "admin", extra...)
		name := "watched" + map[bool]string{false: "text", true: "json"}[asJSON]
		r := c.env.Admin.Post("/redfish/v1/AccountService/Accounts",
			map[string]any{"UserName": name, "Password": apitest.UserPassword, "RoleId": "ReadOnly"})
		if r.Status != http.StatusCreated {
			t.Fatalf("creating an account: %s", r)
		}
		uri := r.Header.Get("Location")
		var line string
		for l := range lines {
			if strings.Contains(l, uri) {
				line = l
				break
			}
		}
		if err := stop(); err != nil {
			t.Fatalf("watch after cancel: got %v, want nil", err)
		}
		if asJSON {
			var ev eventOut
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("watch --json line %q: %v", line, err)
			}
			if ev.Origin != uri || !strings.HasSuffix(ev.MessageID, ".ResourceCreated") || ev.Severity != "OK" || ev.EventID == "" {
				t.Errorf("watch --json: got %+v, want ResourceCreated for %s", ev, uri)
			}
			jsonID = ev.EventID
			continue
		}
		if got := c.normalise(line); got != "<event>  <time>  OK       ResourceEvent.ResourceCreated       "+uri+"  The resource was created successfully." {
			t.Errorf("watch line: got %q", got)
		}
	}

	// --count ends the watch by itself.
	lines, stop := c.watch(ctx, "admin", "--count", "1")
	c.env.Admin.Post("/redfish/v1/AccountService/Accounts",
		map[string]any{"UserName": "counted", "Password": apitest.UserPassword, "RoleId": "ReadOnly"})
	n := 0
	for range lines {
		n++
	}
	if err := stop(); err != nil || n != 1 {
		t.Errorf("watch --count 1: got %d lines and %v, want 1 line and no error", n, err)
	}

	// --after replays what came after an event seen earlier: the next
	// event after the --json watch's is the "counted" account's creation.
	lines, stop = c.watch(ctx, "admin", "--json", "--count", "1", "--after", jsonID)
	var replayed []eventOut
	for l := range lines {
		var ev eventOut
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("watch --after line %q: %v", l, err)
		}
		replayed = append(replayed, ev)
	}
	if err := stop(); err != nil || len(replayed) != 1 {
		t.Fatalf("watch --after %s: got %+v and %v, want the counted account's creation", jsonID, replayed, err)
	}
	if got := c.env.Admin.GetOK(replayed[0].Origin)["UserName"]; got != "counted" {
		t.Errorf("watch --after %s: replayed the creation of %v, want counted", jsonID, got)
	}
}

// TestTLS: --ca trusts the server's certificate, nothing trusts it not,
// and --insecure works with a loud warning.
func TestTLS(t *testing.T) {
	c := newCLI(t)
	ts := httptest.NewUnstartedServer(c.env.Server.Handler())
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the point
	ts.StartTLS()
	defer ts.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	c.server = ts.URL
	c.fails(c.as("admin", "login"), exitError, "certificate")
	r := c.ok(c.as("admin", "--ca", ca, "login"))
	if strings.Contains(r.stderr, "WARNING") {
		t.Errorf("--ca login warned: %q", r.stderr)
	}
	r = c.ok(c.as("admin", "--insecure", "accounts"))
	if !strings.Contains(r.stderr, "WARNING: --insecure") {
		t.Errorf("--insecure: stderr %q lacks the warning", r.stderr)
	}
}
