package webui_test

import (
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"cxlpool/api/apitest"
)

// skipBrowser skips a browser test in -short mode or without Chromium,
// before the test starts its server.
func skipBrowser(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("no Chromium at %s (apt-get install chromium): %v", chromiumPath, err)
	}
}

// TestAuthPasswordChangeInBrowser: an account created with
// PasswordChangeRequired signs in, is held on the "choose a new
// password" screen (the box refuses everything else with 403
// PasswordChangeRequired), changes it and reaches the dashboard.
func TestAuthPasswordChangeInBrowser(t *testing.T) {
	skipBrowser(t)
	env := apitest.NewServer(t)
	const user, first, second = "newop", "first-password-1", "second-password-2"
	b := newBrowser(t, env.HTTP.URL)
	b.allow(http.StatusForbidden, "/redfish/v1/") // what the console asks before it knows

	// The administrator creates the account on the Users page: a password
	// typed for someone else is temporary unless the box is unticked.
	b.login("admin", apitest.AdminPassword)
	b.page("users", "Users & roles")
	b.do("open the new account dialog", chromedp.Click(chromedp.CSS("#user-new")))
	b.wait("new account form", `document.querySelector('dialog[open] #na-user')`)
	if !eval[bool](b, `document.querySelector('#na-must-change').checked`) {
		t.Error("new account: 'must choose a new password' is not ticked by default")
	}
	b.do("fill in the account",
		chromedp.SendKeys(chromedp.CSS("#na-user"), user),
		chromedp.SendKeys(chromedp.CSS("#na-pw"), first),
		chromedp.SetValue(chromedp.CSS("#na-role"), "Operator"),
	)
	eval[bool](b, `document.querySelector('#na-role').dispatchEvent(new Event('change', {bubbles: true}))`)
	b.do("create it", chromedp.Click(chromedp.CSS(`dialog[open] button[type="submit"]`)))
	b.wait("the account listed as having to change its password",
		`[...document.querySelectorAll('main tr')].some(r => r.textContent.includes('`+user+`') && r.textContent.includes('must change password'))`)
	var acct string
	for _, m := range env.Admin.GetOK("/redfish/v1/AccountService/Accounts?$expand=.")["Members"].([]any) {
		if a := m.(map[string]any); a["UserName"] == user {
			acct = a["@odata.id"].(string)
			if a["PasswordChangeRequired"] != true || a["RoleId"] != "Operator" {
				t.Errorf("the account the console created: got %v, %v, want PasswordChangeRequired true, Operator", a["PasswordChangeRequired"], a["RoleId"])
			}
		}
	}
	if acct == "" {
		t.Fatalf("the console did not create %s", user)
	}
	b.logout()

	b.do("open the console afresh", chromedp.Navigate(env.HTTP.URL+"/"))
	b.wait("login form", `document.querySelector('#login-user')`)
	b.do("sign in with the first password",
		chromedp.SendKeys(chromedp.CSS("#login-user"), user),
		chromedp.SendKeys(chromedp.CSS("#login-password"), first+"\r"),
	)
	b.wait("the password change screen", `document.querySelector('#pw-new')`)
	if txt := eval[string](b, `document.querySelector('main').textContent`); !strings.Contains(txt, user) {
		t.Errorf("password screen does not name the account: %q", txt)
	}
	if eval[bool](b, `!!document.querySelector('#whoami')`) {
		t.Error("the console shell is shown before the password changed")
	}
	b.shot("auth-01-password-required")

	// Two different passwords: refused by the console itself.
	b.do("mistype the repetition",
		chromedp.SendKeys(chromedp.CSS("#pw-new"), second),
		chromedp.SendKeys(chromedp.CSS("#pw-new2"), second+"x\r"),
	)
	b.wait("the mismatch said", `document.querySelector('main .alert.bad')`)
	eval[bool](b, `(document.querySelector('#pw-new2').value = '') === ''`)
	b.do("repeat it right", chromedp.SendKeys(chromedp.CSS("#pw-new2"), second+"\r"))
	b.wait("signed in as "+user, `document.querySelector('#whoami') && document.querySelector('#whoami').textContent.includes('`+user+`')`)
	b.wait("dashboard gauges", `document.querySelectorAll('.gauge').length >= 5`)
	b.shot("auth-02-dashboard-after-change")

	if got := env.Admin.GetOK(acct)["PasswordChangeRequired"]; got != false {
		t.Errorf("PasswordChangeRequired after the change: got %v, want false", got)
	}
	if c := env.Basic(user, second); c.Get("/redfish/v1/Chassis").Status != http.StatusOK {
		t.Error("the new password does not open the API")
	}
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("browser console errors:\n%s", strings.Join(errs, "\n"))
	}
}

// TestAuthIdleSignOutInBrowser: with the SessionService's timeout at its
// minimum, the console signs itself out after that long without
// activity (its clock moved on rather than waited for), ending the
// session on the box, and says why; and when the box has already ended
// a session (the box's clock moved on), the next request's 401 returns
// the console to the login page with a reason too.
func TestAuthIdleSignOutInBrowser(t *testing.T) {
	skipBrowser(t)
	env := apitest.NewServer(t)
	if r := env.Admin.Patch("/redfish/v1/SessionService", map[string]any{"SessionTimeout": 30}); r.Status != http.StatusOK {
		t.Fatalf("setting SessionTimeout: got %s", r)
	}
	b := newBrowser(t, env.HTTP.URL)

	// The console's own idle timer.
	b.login("admin", apitest.AdminPassword)
	b.wait("the idle timeout read", `document.documentElement.dataset.idleTimeout === '30'`)
	sess := eval[string](b, `sessionStorage.getItem('cxlpool.session')`)
	if sess == "" {
		t.Fatal("the console keeps no session URI")
	}
	// 31 s pass without activity: the page's clock jumps.
	eval[bool](b, `(() => { const real = Date.now.bind(Date); Date.now = () => real() + 31000; return true; })()`)
	b.wait("back on the login page", `document.querySelector('#login-user') && document.querySelector('main .alert')`)
	if msg := eval[string](b, `document.querySelector('main .alert').textContent`); !strings.Contains(msg, "30 seconds without activity") {
		t.Errorf("idle sign-out reason: got %q, want it to say 30 seconds without activity", msg)
	}
	b.shot("auth-03-idle-signed-out")
	if r := env.Admin.Get(sess); r.Status != http.StatusNotFound {
		t.Errorf("the console's session after the idle sign-out: got %d, want 404 (ended on the box)", r.Status)
	}

	// The box ends the session first: its clock passes the timeout.
	b.do("reload the console", chromedp.Navigate(env.HTTP.URL+"/"))
	b.login("admin", apitest.AdminPassword)
	b.wait("the idle timeout read", `document.documentElement.dataset.idleTimeout === '30'`)
	b.allow(http.StatusUnauthorized, "/redfish/v1/")
	env.Clock.Advance(31 * time.Second)
	b.do("open another page", chromedp.Navigate(env.HTTP.URL+"/#/users"))
	b.wait("back on the login page", `document.querySelector('#login-user') && document.querySelector('main .alert')`)
	if msg := eval[string](b, `document.querySelector('main .alert').textContent`); !strings.Contains(msg, "session has ended") {
		t.Errorf("expired-session reason: got %q, want it to say the session has ended", msg)
	}
	b.shot("auth-04-session-expired")
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("browser console errors:\n%s", strings.Join(errs, "\n"))
	}
}
