package api_test

import (
	"net/http"
	"slices"
	"testing"

	"cxlpool/api/apitest"
)

// TestPasswordChangeRequired: an account created with
// PasswordChangeRequired logs in (the session's body says the password
// must change), may then only read its account and session, set its
// password and log out; everything else is 403 PasswordChangeRequired
// naming the account. Setting the password lifts the restriction on the
// same session.
func TestPasswordChangeRequired(t *testing.T) {
	env := apitest.NewServer(t)
	const accounts = "/redfish/v1/AccountService/Accounts"
	r := env.Admin.Post(accounts, map[string]any{"UserName": "newbie", "Password": "first-password-1",
		"RoleId": "Administrator", "PasswordChangeRequired": true})
	wantStatus(t, "create with PasswordChangeRequired", r, http.StatusCreated, "")
	acct := r.Header.Get("Location")
	if got := r.JSON(t)["PasswordChangeRequired"]; got != true {
		t.Errorf("created account's PasswordChangeRequired: got %v, want true", got)
	}

	login := env.Anon.Post("/redfish/v1/SessionService/Sessions", map[string]any{"UserName": "newbie", "Password": "first-password-1"})
	wantStatus(t, "login", login, http.StatusCreated, "")
	apitest.Validate(t, login.Body)
	if ids := sessionMessages(t, login); !slices.Equal(ids, []string{"Base.1.22.PasswordChangeRequired"}) {
		t.Errorf("login body messages: got %v, want [Base.1.22.PasswordChangeRequired]", ids)
	}
	c := env.Login("newbie", "first-password-1")
	basic := env.Basic("newbie", "first-password-1")

	for _, tc := range []struct {
		name         string
		client       *apitest.Client
		method, path string
		body         any
		status       int
	}{
		{"own account", c, "GET", acct, nil, http.StatusOK},
		{"own account, HEAD", c, "HEAD", acct, nil, http.StatusOK},
		{"own session", c, "GET", c.Session, nil, http.StatusOK},
		{"service root (public)", c, "GET", "/redfish/v1", nil, http.StatusOK},
		{"accounts", c, "GET", accounts, nil, http.StatusForbidden},
		{"manager", c, "GET", "/redfish/v1/Managers/FM", nil, http.StatusForbidden},
		{"sessions", c, "GET", "/redfish/v1/SessionService/Sessions", nil, http.StatusForbidden},
		{"other account", c, "GET", accounts + "/1", nil, http.StatusForbidden},
		{"unknown path", c, "GET", "/redfish/v1/NoSuch", nil, http.StatusForbidden},
		{"other change", c, "PATCH", "/redfish/v1/SessionService", map[string]any{"SessionTimeout": 60}, http.StatusForbidden},
		{"own role", c, "PATCH", acct, map[string]any{"RoleId": "ReadOnly"}, http.StatusForbidden},
		{"own flag", c, "PATCH", acct, map[string]any{"PasswordChangeRequired": false}, http.StatusForbidden},
		{"basic: own account", basic, "GET", acct, nil, http.StatusOK},
		{"basic: manager", basic, "GET", "/redfish/v1/Managers/FM", nil, http.StatusForbidden},
	} {
		r := tc.client.Do(tc.method, tc.path, tc.body)
		msg := ""
		if tc.status == http.StatusForbidden {
			msg = "PasswordChangeRequired"
			if !slices.Contains(messageArgs(t, r), acct) {
				t.Errorf("%s: message args %v, want the account %s", tc.name, messageArgs(t, r), acct)
			}
		}
		wantStatus(t, tc.name, r, tc.status, msg)
	}
	if got := env.Admin.GetOK(acct)["PasswordChangeRequired"]; got != true {
		t.Errorf("PasswordChangeRequired after refused changes: got %v, want true", got)
	}

	wantStatus(t, "too short", c.Patch(acct, map[string]any{"Password": "short"}), http.StatusBadRequest, "PasswordIncorrectLength")
	wantStatus(t, "set the password", c.Patch(acct, map[string]any{"Password": "second-password-2"}), http.StatusOK, "")
	wantStatus(t, "same session, now free", c.Get("/redfish/v1/Managers/FM"), http.StatusOK, "")
	if got := c.GetOK(acct)["PasswordChangeRequired"]; got != false {
		t.Errorf("PasswordChangeRequired after the change: got %v, want false", got)
	}
	login = env.Anon.Post("/redfish/v1/SessionService/Sessions", map[string]any{"UserName": "newbie", "Password": "second-password-2"})
	wantStatus(t, "login with the new password", login, http.StatusCreated, "")
	if ids := sessionMessages(t, login); len(ids) != 0 {
		t.Errorf("login after the change: got messages %v, want none", ids)
	}

	// An administrator sets a temporary password and requires a change:
	// the explicit flag wins over the password's reset of it. The account
	// may still log out.
	op := findAccount(t, env, apitest.UserOperator)["@odata.id"].(string)
	wantStatus(t, "temporary password", env.Admin.Patch(op, map[string]any{"Password": "temporary-pw-3", "PasswordChangeRequired": true}),
		http.StatusOK, "")
	oc := env.Login(apitest.UserOperator, "temporary-pw-3")
	wantStatus(t, "operator gated", oc.Get("/redfish/v1/Chassis"), http.StatusForbidden, "PasswordChangeRequired")
	wantStatus(t, "operator logs out", oc.Delete(oc.Session), http.StatusNoContent, "")

	// Only user administrators may set the flag.
	me := findAccount(t, env, apitest.UserReadOnly)["@odata.id"].(string)
	wantStatus(t, "reader sets own flag", env.ReadOnly.Patch(me, map[string]any{"PasswordChangeRequired": true}),
		http.StatusForbidden, "InsufficientPrivilege")
	wantStatus(t, "flag not a bool", env.Admin.Patch(me, map[string]any{"PasswordChangeRequired": "yes"}),
		http.StatusBadRequest, "PropertyValueTypeError")
}

// messageArgs returns the MessageArgs of an error response's messages.
func messageArgs(t *testing.T, r *apitest.Response) []string {
	t.Helper()
	var out []string
	body, ok := r.JSON(t)["error"].(map[string]any)
	if !ok {
		return nil
	}
	infos, _ := body["@Message.ExtendedInfo"].([]any)
	for _, m := range infos {
		args, _ := m.(map[string]any)["MessageArgs"].([]any)
		for _, a := range args {
			if s, ok := a.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// sessionMessages returns the MessageIds of a success body's
// @Message.ExtendedInfo.
func sessionMessages(t *testing.T, r *apitest.Response) []string {
	t.Helper()
	var out []string
	infos, _ := r.JSON(t)["@Message.ExtendedInfo"].([]any)
	for _, m := range infos {
		if id, ok := m.(map[string]any)["MessageId"].(string); ok {
			out = append(out, id)
		}
	}
	return out
}

// TestNoChallengeForScripts: a 401 carries the Basic challenge, except
// for requests marked X-Requested-With: XMLHttpRequest (the console's),
// for which a browser would pop up its own login dialog.
func TestNoChallengeForScripts(t *testing.T) {
	env := apitest.NewServer(t)
	for _, tc := range []struct {
		name      string
		headers   []string
		challenge bool
	}{
		{"no credentials", nil, true},
		{"stale token", []string{"X-Auth-Token", "stale"}, true},
		{"script, no credentials", []string{"X-Requested-With", "XMLHttpRequest"}, false},
		{"script, stale token", []string{"X-Auth-Token", "stale", "X-Requested-With", "XMLHttpRequest"}, false},
	} {
		r := env.Anon.Get("/redfish/v1/Managers", tc.headers...)
		wantStatus(t, tc.name, r, http.StatusUnauthorized, "NoValidSession")
		if got := r.Header.Get("WWW-Authenticate") != ""; got != tc.challenge {
			t.Errorf("%s: WWW-Authenticate %q, want a challenge: %v", tc.name, r.Header.Get("WWW-Authenticate"), tc.challenge)
		}
	}
	r := env.Anon.Post("/redfish/v1/SessionService/Sessions", map[string]any{"UserName": "admin", "Password": "wrong-password"},
		"X-Requested-With", "XMLHttpRequest")
	wantStatus(t, "script's failed login", r, http.StatusUnauthorized, "NoValidSession")
	if h := r.Header.Get("WWW-Authenticate"); h != "" {
		t.Errorf("script's failed login: WWW-Authenticate %q, want none", h)
	}
}
