package main

import (
	"strings"
	"testing"
	"time"

	"cxlpool/api"
	"cxlpool/api/apitest"
)

// TestAccountsAddSaysHowToGiveThePassword: `accounts add` tells the
// administrator how the new account gets its password, never pointing at
// $POOLCTL_PASSWORD (the administrator's own); --temporary makes the
// account choose its own with `poolctl passwd`, which then works.
func TestAccountsAddSaysHowToGiveThePassword(t *testing.T) {
	c := newCLI(t)
	newPW := c.passwordFile("h9", "first-pass-123")
	r := c.ok(c.as("admin", "accounts", "add", "h9", "--role", "HostUser", "--system", "Host3",
		"--new-password-file", newPW, "--temporary"))
	for _, want := range []string{"Created account h9", "over a trusted channel", "--user h9 login", "poolctl --user h9 passwd"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("accounts add output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout+r.stderr, "POOLCTL_PASSWORD") {
		t.Errorf("accounts add points at $POOLCTL_PASSWORD:\n%s%s", r.stdout, r.stderr)
	}
	// Without a password anywhere, the error says where the new one goes.
	c.fails(c.as("admin", "accounts", "add", "h10", "--role", "Operator"), 1, "--new-password-file")

	// The temporary password's holder sets its own.
	mine := c.passwordFile("h9-new", "my-own-pass-456")
	c.ok(c.run("--user", "h9", "--password-file", newPW, "passwd", "--new-password-file", mine))
	if got := c.env.Basic("h9", "my-own-pass-456").Get("/redfish/v1/Systems/Host3").Status; got != 200 {
		t.Errorf("after passwd: GET as h9 got %d, want 200", got)
	}
	// The policy's reason reaches the user.
	common := c.passwordFile("h9-common", "password123")
	c.fails(c.run("--user", "h9", "--password-file", mine, "passwd", "--new-password-file", common), 1, "most commonly used")
}

// TestAccountsUnlock: the right password for an account locked from this
// address says until when; `accounts unlock` lets it in again.
func TestAccountsUnlock(t *testing.T) {
	c := newCLI(t, apitest.Options{Config: func(cfg *api.Config) {
		cfg.Lockout = api.Lockout{Threshold: 2, Duration: time.Hour}
	}})
	bad := c.passwordFile("reader-bad", "not-the-password")
	c.fails(c.run("--user", "reader", "--password-file", bad, "login"), 1, "user name or password is not right")
	c.env.Clock.Advance(time.Minute)
	c.fails(c.run("--user", "reader", "--password-file", bad, "login"), 1, "user name or password is not right")
	c.env.Clock.Advance(time.Minute)
	c.fails(c.as("reader", "login"), 1, "locked until")
	r := c.ok(c.as("admin", "accounts", "unlock", "reader"))
	if !strings.Contains(r.stdout, "Unlocked account reader") {
		t.Errorf("accounts unlock: got %q", r.stdout)
	}
	c.env.Clock.Advance(time.Minute)
	c.ok(c.as("reader", "login"))
}
