package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"cxlpool/api/client"
)

// storedSession is a login kept on disk for one server.
type storedSession struct {
	Server  string    `json:"server"`
	User    string    `json:"user"`
	Token   string    `json:"token"`
	Session string    `json:"session"`
	Created time.Time `json:"created"`
}

// configDir is $XDG_CONFIG_HOME/poolctl, or ~/.config/poolctl.
func (a *app) configDir() (string, error) {
	if d := a.getenv("XDG_CONFIG_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "poolctl"), nil
	}
	home := a.getenv("HOME")
	if home == "" {
		return "", errors.New("neither $XDG_CONFIG_HOME nor $HOME is set: nowhere to keep the session")
	}
	return filepath.Join(home, ".config", "poolctl"), nil
}

// sessionPath is the token file of a server: one file per server, named
// after its scheme, host and port.
func (a *app) sessionPath(server string) (string, error) {
	dir, err := a.configDir()
	if err != nil {
		return "", err
	}
	u, err := url.Parse(server)
	if err != nil {
		return "", fmt.Errorf("server URL: %w", err)
	}
	name := u.Scheme + "_" + u.Host
	name = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			return r
		}
		return '_'
	}, name)
	return filepath.Join(dir, "sessions", name+".json"), nil
}

// normalServer is the server URL as sessions are keyed by.
func normalServer(s string) string { return strings.TrimRight(s, "/") }

// loadSession returns the stored session for server (nil if none). A token
// file others can read is refused, as ssh refuses a loose private key.
func (a *app) loadSession(server string) (*storedSession, error) {
	p, err := a.sessionPath(server)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("session file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("session file: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("session file %s is accessible by others (mode %04o): remove it or chmod 600 it", p, st.Mode().Perm())
	}
	var s storedSession
	if err := json.NewDecoder(io.LimitReader(f, 1<<20)).Decode(&s); err != nil {
		return nil, fmt.Errorf("session file %s: %w", p, err)
	}
	if normalServer(s.Server) != normalServer(server) || s.Token == "" {
		return nil, nil
	}
	return &s, nil
}

// saveSession writes the session file (0600, in a 0700 directory),
// atomically so that a crash leaves the old file or the new one.
func (a *app) saveSession(s storedSession) (string, error) {
	p, err := a.sessionPath(s.Server)
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("session directory: %w", err)
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, ".session-*") // created 0600
	if err != nil {
		return "", fmt.Errorf("session file: %w", err)
	}
	tmp := f.Name()
	_, werr := f.Write(append(b, '\n'))
	if err := errors.Join(werr, f.Chmod(0o600), f.Sync(), f.Close()); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("session file: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("session file: %w", err)
	}
	return p, nil
}

func (a *app) removeSession(server string) error {
	p, err := a.sessionPath(server)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("session file: %w", err)
	}
	return nil
}

// password finds the password of --user: --password-file, --password,
// $POOLCTL_PASSWORD, a prompt on a terminal, else the next line of
// standard input.
func (a *app) password(prompt string) (string, error) {
	switch {
	case a.g.passwordFile != "":
		return readPasswordFile(a.g.passwordFile)
	case a.g.password != "":
		fmt.Fprintln(a.stderr, "poolctl: warning: --password is visible to other users in the process list; prefer --password-file or $POOLCTL_PASSWORD")
		return a.g.password, nil
	case a.getenv("POOLCTL_PASSWORD") != "":
		return a.getenv("POOLCTL_PASSWORD"), nil
	}
	return a.readSecret(prompt)
}

// readSecret prompts on a terminal (without echo) or reads the next line
// of a redirected standard input.
func (a *app) readSecret(prompt string) (string, error) {
	if f, ok := a.stdin.(*os.File); ok && isTerminal(f) {
		fmt.Fprint(a.stderr, prompt)
		pw, err := readNoEcho(f)
		fmt.Fprintln(a.stderr)
		if err != nil {
			return "", fmt.Errorf("reading password: %w", err)
		}
		return pw, nil
	}
	if a.stdinLines == nil {
		a.stdinLines = &lineReader{r: bufio.NewReader(a.stdin)}
	}
	pw, err := a.stdinLines.next()
	if err != nil {
		return "", fmt.Errorf("reading password from standard input: %w (use --password-file or $POOLCTL_PASSWORD)", err)
	}
	return pw, nil
}

// newPassword reads a password being set for user: from file if given,
// else twice on a terminal (they must match), else the next line of
// standard input. $POOLCTL_PASSWORD is the caller's own password and is
// never taken for it.
func (a *app) newPassword(user, file string) (string, error) {
	if file != "" {
		return readPasswordFile(file)
	}
	hint := "give it with --new-password-file FILE or on standard input ($POOLCTL_PASSWORD is your own password, not the new one)"
	if f, ok := a.stdin.(*os.File); ok && isTerminal(f) {
		pw, err := a.readSecret(fmt.Sprintf("New password for %s: ", user))
		if err != nil {
			return "", err
		}
		again, err := a.readSecret(fmt.Sprintf("New password for %s, again: ", user))
		if err != nil {
			return "", err
		}
		if pw != again {
			return "", errors.New("the two passwords differ; nothing changed")
		}
		return pw, nil
	}
	if a.stdinLines == nil {
		a.stdinLines = &lineReader{r: bufio.NewReader(a.stdin)}
	}
	pw, err := a.stdinLines.next()
	if err != nil {
		return "", fmt.Errorf("reading the new password for %s from standard input: %w (%s)", user, err, hint)
	}
	return pw, nil
}

// withResolution adds the service's reason (a message's Resolution) to a
// refused request: a wrong password, an account locked until a time, a
// wait after failures, the password rule a new password broke.
func withResolution(err error) error {
	var e *client.Error
	if !errors.As(err, &e) {
		return err
	}
	for _, m := range e.Messages {
		if m.Resolution != "" && !strings.Contains(m.Message, "Resolution") {
			return fmt.Errorf("%w\n%s", err, printableLine(m.Resolution))
		}
	}
	return err
}

// printableLine keeps a server's text from driving the terminal.
func printableLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return -1
		}
		return r
	}, s)
}

// --- passwd ---

// cmdPasswd changes the caller's own password (ConfigureSelf). The session
// it runs in stays; the account's other sessions end.
func cmdPasswd(ctx context.Context, a *app, args []string) error {
	fs := a.flags("passwd", "[--new-password-file FILE]")
	pwFile := fs.String("new-password-file", "", "read the new password from the first line of `file` "+
		"(default: prompt twice on a terminal, else the next line of standard input)")
	if _, err := parse(fs, args, 0, 0); err != nil {
		return err
	}
	ctx, cancel := a.deadline(ctx, false)
	defer cancel()
	c, err := a.client()
	if err != nil {
		return err
	}
	uri, user, err := ownAccount(ctx, c)
	if err != nil {
		return explain(err)
	}
	pw, err := a.newPassword(user, *pwFile)
	if err != nil {
		return fmt.Errorf("passwd: %w", err)
	}
	if _, err := c.Patch(ctx, uri, map[string]any{"Password": pw}); err != nil {
		return withResolution(explain(err))
	}
	out := struct {
		User    string `json:"user"`
		Account string `json:"account"`
	}{user, uri}
	if a.g.json {
		return a.printJSON(out)
	}
	fmt.Fprintf(a.stdout, "Changed the password of %s; its other sessions were ended.\n", user)
	return nil
}

// ownAccount finds the caller's account URI and name. An account that
// must change its password first may read nothing but its own account,
// whose URI the 403 PasswordChangeRequired names.
func ownAccount(ctx context.Context, c *client.Client) (uri, user string, err error) {
	me, err := c.Me(ctx)
	if err == nil {
		return me.ODataID, me.UserName, nil
	}
	var e *client.Error
	if errors.As(err, &e) && e.Status == http.StatusForbidden {
		for _, m := range e.Messages {
			if strings.HasSuffix(m.MessageID, ".PasswordChangeRequired") && len(m.MessageArgs) > 0 {
				var acc client.Account
				if gerr := c.Get(ctx, m.MessageArgs[0], &acc); gerr != nil {
					return "", "", gerr
				}
				return acc.ODataID, acc.UserName, nil
			}
		}
	}
	return "", "", err
}

// lineReader hands out the lines of a stream one by one.
type lineReader struct{ r *bufio.Reader }

func (l *lineReader) next() (string, error) {
	line, err := l.r.ReadString('\n')
	if err != nil && (!errors.Is(err, io.EOF) || line == "") {
		if errors.Is(err, io.EOF) {
			return "", errors.New("no more input")
		}
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}

// readPasswordFile reads the first line of a password file.
func readPasswordFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("password file: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	line = strings.TrimRight(line, "\r")
	if line == "" {
		return "", fmt.Errorf("password file %s: first line is empty", path)
	}
	return line, nil
}

// warnInsecure says loudly what --insecure gives up.
func (a *app) warnInsecure() {
	if a.g.insecure && strings.HasPrefix(a.g.server, "https:") {
		fmt.Fprintln(a.stderr, "poolctl: WARNING: --insecure: the server's TLS certificate is NOT verified; "+
			"anyone on the network path can read your password and session token. Use --ca FILE instead.")
	}
}

// clientConfig is the client configuration shared by every command.
func (a *app) clientConfig() client.Config {
	return client.Config{Server: normalServer(a.g.server), CAFile: a.g.ca, Insecure: a.g.insecure,
		UserAgent: "poolctl"}
}

// client returns a client authenticated the way the command line says:
// with --user, HTTP Basic with that user's password (unless the stored
// session is that user's); otherwise the stored session.
func (a *app) client() (*client.Client, error) {
	a.warnInsecure()
	cfg := a.clientConfig()
	sess, err := a.loadSession(cfg.Server)
	if err != nil {
		return nil, err
	}
	switch {
	case sess != nil && (a.g.user == "" || a.g.user == sess.User):
		cfg.User, cfg.Token, cfg.Session = sess.User, sess.Token, sess.Session
	case a.g.user != "":
		pw, err := a.password(fmt.Sprintf("Password for %s at %s: ", a.g.user, cfg.Server))
		if err != nil {
			return nil, err
		}
		cfg.User, cfg.Password = a.g.user, pw
	default:
		return nil, fmt.Errorf("not logged in to %s: run `poolctl login --user NAME` or pass --user", cfg.Server)
	}
	return client.New(cfg)
}

// explain adds what to do about an expired session to a 401.
func explain(err error) error {
	if client.StatusOf(err) == http.StatusUnauthorized {
		return fmt.Errorf("%w\n(the session may have expired or ended: run `poolctl login` again)", err)
	}
	return err
}

// --- login, logout ---

func cmdLogin(ctx context.Context, a *app, args []string) error {
	fs := a.flags("login", "[--user NAME]")
	if _, err := parse(fs, args, 0, 0); err != nil {
		return err
	}
	if a.g.user == "" {
		return usagef("login: --user (or $POOLCTL_USER) is required")
	}
	ctx, cancel := a.deadline(ctx, false)
	defer cancel()
	a.warnInsecure()
	cfg := a.clientConfig()
	pw, err := a.password(fmt.Sprintf("Password for %s at %s: ", a.g.user, cfg.Server))
	if err != nil {
		return err
	}
	cfg.User, cfg.Password = a.g.user, pw
	c, err := client.New(cfg)
	if err != nil {
		return err
	}
	old, _ := a.loadSession(cfg.Server)
	s, err := c.Login(ctx)
	if err != nil {
		return withResolution(err)
	}
	tok, uri := c.Token()
	path, err := a.saveSession(storedSession{Server: cfg.Server, User: cfg.User, Token: tok, Session: uri, Created: time.Now().UTC()})
	if err != nil {
		// Do not leave a session behind that nobody can end.
		_ = c.Logout(context.WithoutCancel(ctx))
		return err
	}
	// The previous session of this file would otherwise linger until
	// it times out.
	if old != nil && old.Token != tok {
		if oc, err := client.New(client.Config{Server: cfg.Server, CAFile: cfg.CAFile, Insecure: cfg.Insecure,
			Token: old.Token, Session: old.Session, UserAgent: cfg.UserAgent}); err == nil {
			_ = oc.Logout(ctx)
		}
	}
	out := struct {
		Server  string `json:"server"`
		User    string `json:"user"`
		Session string `json:"session"`
		File    string `json:"file"`
	}{cfg.Server, cfg.User, s.ODataID, path}
	if a.g.json {
		return a.printJSON(out)
	}
	fmt.Fprintf(a.stdout, "Logged in to %s as %s (session %s).\n", out.Server, out.User, out.Session)
	return nil
}

func cmdLogout(ctx context.Context, a *app, args []string) error {
	fs := a.flags("logout", "")
	if _, err := parse(fs, args, 0, 0); err != nil {
		return err
	}
	ctx, cancel := a.deadline(ctx, false)
	defer cancel()
	a.warnInsecure()
	cfg := a.clientConfig()
	sess, err := a.loadSession(cfg.Server)
	if err != nil {
		return err
	}
	out := struct {
		Server    string `json:"server"`
		LoggedOut bool   `json:"logged_out"`
	}{Server: cfg.Server}
	if sess != nil {
		cfg.Token, cfg.Session = sess.Token, sess.Session
		c, err := client.New(cfg)
		if err != nil {
			return err
		}
		// A session the service already ended (401, 404) is as good as
		// logged out; the file goes either way then.
		err = c.Logout(ctx)
		if st := client.StatusOf(err); err != nil && st != http.StatusUnauthorized && st != http.StatusNotFound {
			return err
		}
		if err := a.removeSession(cfg.Server); err != nil {
			return err
		}
		out.LoggedOut = true
	}
	if a.g.json {
		return a.printJSON(out)
	}
	if out.LoggedOut {
		fmt.Fprintf(a.stdout, "Logged out of %s.\n", out.Server)
	} else {
		fmt.Fprintf(a.stdout, "Not logged in to %s.\n", out.Server)
	}
	return nil
}
