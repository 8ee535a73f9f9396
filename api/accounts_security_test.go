package api_test

import (
	"bufio"
	"context"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"cxlpool/api"
	"cxlpool/api/apitest"
	"cxlpool/api/redfish"
)

// streamTimeout bounds how long a test waits for a stream to end once its
// principal changed; the service ends it at once, so this is only there to
// turn a hang into a failure.
const streamTimeout = 10 * time.Second

const accountsURI = "/redfish/v1/AccountService/Accounts"

// maxDelay is the longest wait between failed sign-ins (redfish/auth.go).
const maxDelay = 30 * time.Second

// createAccount makes an account as the admin and returns its URI.
func createAccount(t *testing.T, env *apitest.Env, name, role, system string) string {
	t.Helper()
	body := map[string]any{"UserName": name, "Password": apitest.UserPassword, "RoleId": role}
	if system != "" {
		body["Oem"] = map[string]any{"CxlPool": map[string]any{"SystemId": system}}
	}
	r := env.Admin.Post(accountsURI, body)
	if r.Status != http.StatusCreated {
		t.Fatalf("create %s: got %s, want 201", name, r)
	}
	return r.Header.Get("Location")
}

func lastSegment(uri string) int {
	n, _ := strconv.Atoi(uri[strings.LastIndex(uri, "/")+1:])
	return n
}

// TestAttackAccountIDReuse reproduces issue #13's leak: an Operator with
// the highest account Id starts a task on Host2 and is deleted; a new
// HostUser bound to Host0 used to receive the same Id and, with it, the
// Operator's task and its monitor's Connection of Host2. Ids are now never
// handed out again, and tasks belong to the account's identity.
func TestAttackAccountIDReuse(t *testing.T) {
	env := apitest.NewServer(t)
	opURI := createAccount(t, env, "op2", redfish.RoleOperator, "")
	op := env.Login("op2", apitest.UserPassword)
	chunk := reserve(t, op, blockMiB, nil)
	mon := startConnect(t, op, chunk, 2)
	final := waitTask(t, op, mon)
	if final.Status != http.StatusCreated {
		t.Fatalf("connect: got %s, want 201", final)
	}
	task := taskOf(t, op, final)["@odata.id"].(string)

	wantStatus(t, "delete op2", env.Admin.Delete(opURI), http.StatusNoContent, "")
	hostURI := createAccount(t, env, "newhost", redfish.RoleHostUser, "Host0")
	if got, old := lastSegment(hostURI), lastSegment(opURI); got <= old {
		t.Errorf("new account Id %d after deleting Id %d: want a larger one (Ids never reused)", got, old)
	}
	h := env.Login("newhost", apitest.UserPassword)
	wantStatus(t, "old task monitor", h.Get(mon), http.StatusNotFound, "ResourceNotFound")
	wantStatus(t, "old task", h.Get(task), http.StatusNotFound, "ResourceNotFound")
	tasks := h.GetOK("/redfish/v1/TaskService/Tasks")
	if n := tasks["Members@odata.count"]; n != float64(0) {
		t.Errorf("new host account lists %v tasks, want 0: %v", n, tasks["Members"])
	}
	wantStatus(t, "old account URI", env.Admin.Get(opURI), http.StatusNotFound, "ResourceNotFound")
	// Logged in again under the old name, an account is still someone new.
	createAccount(t, env, "op2", redfish.RoleHostUser, "Host2")
	again := env.Login("op2", apitest.UserPassword)
	wantStatus(t, "recreated name, old task monitor", again.Get(mon), http.StatusCreated, "") // Host2's task: its host's
	tasks = again.GetOK("/redfish/v1/TaskService/Tasks")
	if n := tasks["Members@odata.count"]; n != float64(1) {
		t.Errorf("Host2 account lists %v tasks, want 1 (its host's)", n)
	}
}

// sseStream is an open SSE connection; ended is closed at EOF.
type sseStream struct {
	ended  chan struct{}
	events chan string
	cancel context.CancelFunc
}

// openStream opens the SSE stream as c (token or Basic) and fails unless it
// is answered 200.
func openStream(t *testing.T, env *apitest.Env, c *apitest.Client) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.HTTP.URL+"/redfish/v1/EventService/SSE", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.UseBasic {
		req.SetBasicAuth(c.User, c.Password)
	} else {
		req.Header.Set("X-Auth-Token", c.Token)
	}
	resp, err := env.HTTP.Client().Do(req)
	if err != nil {
		t.Fatalf("open SSE as %s: %v", c.User, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("open SSE as %s: got %d, want 200", c.User, resp.StatusCode)
	}
	s := &sseStream{ended: make(chan struct{}), events: make(chan string, 1024), cancel: cancel}
	go func() {
		defer close(s.ended)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "data: ") {
				select {
				case s.events <- line:
				default:
				}
			}
		}
	}()
	return s
}

func (s *sseStream) wantEnd(t *testing.T, what string) {
	t.Helper()
	select {
	case <-s.ended:
	case <-time.After(streamTimeout):
		t.Errorf("%s: the SSE stream is still open", what)
	}
}

func (s *sseStream) wantOpen(t *testing.T, what string) {
	t.Helper()
	select {
	case <-s.ended:
		t.Errorf("%s: the SSE stream ended", what)
	default:
	}
}

// TestStreamsEndWithTheirPrincipal (#21 §5): an SSE stream ends when its
// account is deleted, disabled, re-bound to another host, given another
// role or renamed, when its session is logged out, and (HTTP Basic) when
// its password changes; other accounts' streams stay open.
func TestStreamsEndWithTheirPrincipal(t *testing.T) {
	env := apitest.NewServer(t)
	bystander := openStream(t, env, env.ReadOnly)
	for i, tc := range []struct {
		name   string
		role   string
		system string
		basic  bool
		change func(t *testing.T, uri string, c *apitest.Client)
	}{
		{"deleted", redfish.RoleHostUser, "Host0", false, func(t *testing.T, uri string, _ *apitest.Client) {
			wantStatus(t, "delete", env.Admin.Delete(uri), http.StatusNoContent, "")
		}},
		{"disabled", redfish.RoleHostUser, "Host0", false, func(t *testing.T, uri string, _ *apitest.Client) {
			wantStatus(t, "disable", env.Admin.Patch(uri, map[string]any{"Enabled": false}), http.StatusOK, "")
		}},
		{"re-bound to another host", redfish.RoleHostUser, "Host0", false, func(t *testing.T, uri string, _ *apitest.Client) {
			wantStatus(t, "rebind", env.Admin.Patch(uri, map[string]any{
				"Oem": map[string]any{"CxlPool": map[string]any{"SystemId": "Host1"}}}), http.StatusOK, "")
		}},
		{"given another role", redfish.RoleOperator, "", false, func(t *testing.T, uri string, _ *apitest.Client) {
			wantStatus(t, "demote", env.Admin.Patch(uri, map[string]any{"RoleId": "ReadOnly"}), http.StatusOK, "")
		}},
		{"session logged out", redfish.RoleHostUser, "Host0", false, func(t *testing.T, _ string, c *apitest.Client) {
			wantStatus(t, "logout", c.Delete(c.Session), http.StatusNoContent, "")
		}},
		{"session deleted by an administrator", redfish.RoleOperator, "", false, func(t *testing.T, _ string, c *apitest.Client) {
			wantStatus(t, "delete session", env.Admin.Delete(c.Session), http.StatusNoContent, "")
		}},
		{"Basic password changed", redfish.RoleHostUser, "Host0", true, func(t *testing.T, uri string, _ *apitest.Client) {
			wantStatus(t, "password", env.Admin.Patch(uri, map[string]any{"Password": "another-pass-9"}), http.StatusOK, "")
		}},
		{"deleted, Basic", redfish.RoleOperator, "", true, func(t *testing.T, uri string, _ *apitest.Client) {
			wantStatus(t, "delete", env.Admin.Delete(uri), http.StatusNoContent, "")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "s" + strconv.Itoa(i)
			uri := createAccount(t, env, name, tc.role, tc.system)
			c := env.Basic(name, apitest.UserPassword)
			if !tc.basic {
				c = env.Login(name, apitest.UserPassword)
			}
			st := openStream(t, env, c)
			st.wantOpen(t, "before the change")
			tc.change(t, uri, c)
			st.wantEnd(t, tc.name)
		})
	}
	bystander.wantOpen(t, "another account's stream")
}

// TestTelemetryStreamEndsWithItsAccount: the telemetry WebSocket closes
// (1008) when its account is deleted.
func TestTelemetryStreamEndsWithItsAccount(t *testing.T) {
	env := apitest.NewServer(t)
	if env.Config.Telemetry == nil {
		t.Skip("no telemetry in this build of the appliance")
	}
	uri := createAccount(t, env, "wsuser", redfish.RoleOperator, "")
	c := env.Login("wsuser", apitest.UserPassword)
	wsURL := "ws" + strings.TrimPrefix(env.HTTP.URL, "http") + api.TelemetryStreamURI
	conn, resp, err := websocket.DefaultDialer.Dial(wsURL, http.Header{"X-Auth-Token": {c.Token}})
	if err != nil {
		t.Fatalf("dial telemetry stream: %v (%v)", err, resp)
	}
	defer conn.Close()
	wantStatus(t, "delete", env.Admin.Delete(uri), http.StatusNoContent, "")
	_ = conn.SetReadDeadline(time.Now().Add(streamTimeout))
	for {
		_, _, err := conn.ReadMessage()
		if err == nil {
			continue // frames sent before the close
		}
		if !websocket.IsCloseError(err, websocket.ClosePolicyViolation) {
			t.Errorf("telemetry stream after the account was deleted: got %v, want close 1008", err)
		}
		return
	}
}

// TestAttackSSEFlood: one account opens streams until refused; the cap
// per account holds (429, Base message naming it), other accounts are
// still served until the total cap (503 with Retry-After), and an
// administrator still gets one from the reserve. Open streams stay within
// the configured bound, which bounds their memory.
func TestAttackSSEFlood(t *testing.T) {
	const perAccount, total = 3, 12
	env := apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) {
		c.MaxStreamsPerAccount, c.MaxStreams = perAccount, total
	}})
	for i := range perAccount {
		openStream(t, env, env.Host0).wantOpen(t, "stream "+strconv.Itoa(i))
	}
	r := env.Host0.Get("/redfish/v1/EventService/SSE")
	wantStatus(t, "one stream over the account's cap", r, http.StatusTooManyRequests, "EventSubscriptionLimitExceeded")
	// Other accounts fill the rest of what non-administrators may have
	// (total minus the reserve of 8 for administrators).
	open := perAccount
	for i := 0; open < total-8; i++ {
		name := "flood" + strconv.Itoa(i)
		createAccount(t, env, name, redfish.RoleReadOnly, "")
		c := env.Login(name, apitest.UserPassword)
		for j := 0; j < perAccount && open < total-8; j++ {
			openStream(t, env, c)
			open++
		}
	}
	r = env.Operator.Get("/redfish/v1/EventService/SSE")
	wantStatus(t, "another account once the service is full", r, http.StatusServiceUnavailable, "EventSubscriptionLimitExceeded")
	if r.Header.Get("Retry-After") == "" {
		t.Errorf("503 without Retry-After")
	}
	adm := openStream(t, env, env.Admin)
	// The legitimate subscriber is served: an event reaches it.
	wantStatus(t, "change", env.Admin.Patch("/redfish/v1/SessionService", map[string]any{"SessionTimeout": 900}), http.StatusOK, "")
	select {
	case <-adm.events:
	case <-time.After(streamTimeout):
		t.Errorf("the administrator's stream got no event")
	}
	if got := metricValue(t, env, "cxlpool_api_event_streams"); got > total {
		t.Errorf("open streams %v, want at most %d", got, total)
	}
	// The flood goes on: refused streams hold nothing.
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 200 {
		if r := env.Host0.Get("/redfish/v1/EventService/SSE"); r.Status != http.StatusTooManyRequests {
			t.Fatalf("flooding stream: got %s, want 429", r)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 4<<20 {
		t.Errorf("heap grew by %d KiB over 200 refused streams, want under 4 MiB", grew>>10)
	}
	if got := metricValue(t, env, "cxlpool_api_event_streams"); got > total {
		t.Errorf("open streams after the flood %v, want at most %d", got, total)
	}
}

// metricValue reads one gauge from /metrics (-1 if absent).
func metricValue(t *testing.T, env *apitest.Env, name string) float64 {
	t.Helper()
	r := env.Admin.Get("/metrics")
	for _, line := range strings.Split(string(r.Body), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// TestAttackSessionTableFill: one HostUser logging in 254 times keeps at
// most its own limit of sessions (its oldest are ended), and however many
// accounts fill the table, an administrator can still sign in.
func TestAttackSessionTableFill(t *testing.T) {
	env := apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) { c.MaxSessionsPerAccount = 4 }})
	first := env.Login(apitest.UserHost0, apitest.UserPassword)
	for range 253 {
		env.Login(apitest.UserHost0, apitest.UserPassword)
	}
	wantStatus(t, "oldest of the flooding account's sessions", first.Get("/redfish/v1/Managers"), http.StatusUnauthorized, "NoValidSession")
	sessions := env.Admin.GetOK("/redfish/v1/SessionService/Sessions?$expand=.")
	n := 0
	for _, m := range sessions["Members"].([]any) {
		if m.(map[string]any)["UserName"] == apitest.UserHost0 {
			n++
		}
	}
	if n != 4 {
		t.Errorf("host0 holds %d sessions, want its limit 4", n)
	}
	env.Login("admin", apitest.AdminPassword) // still signs in

	// Many accounts together: non-administrators are refused at the
	// reserve, administrators still get in.
	for i := 0; ; i++ {
		name := "fill" + strconv.Itoa(i)
		createAccount(t, env, name, redfish.RoleReadOnly, "")
		refused := false
		for range 4 {
			r := env.Anon.Post("/redfish/v1/SessionService/Sessions", map[string]any{"UserName": name, "Password": apitest.UserPassword})
			if r.Status == http.StatusServiceUnavailable {
				wantStatus(t, "table full for non-administrators", r, http.StatusServiceUnavailable, "SessionLimitExceeded")
				refused = true
				break
			}
			if r.Status != http.StatusCreated {
				t.Fatalf("login %s: got %s", name, r)
			}
		}
		if refused {
			break
		}
		if i > 100 {
			t.Fatal("the session table never filled")
		}
	}
	for range 40 { // more than the reserve: the oldest other sessions make room
		env.Login("admin", apitest.AdminPassword)
	}
}

// TestAttackLockoutFromOneSource: an attacker's failed sign-ins as admin
// from one address are throttled (429 with a growing Retry-After) and
// lock admin from that address only; the real administrator signs in from
// another address meanwhile. The right password from the locked address
// says until when; a wrong one reads as any wrong password. Lockouts reach
// the audit and event logs.
func TestAttackLockoutFromOneSource(t *testing.T) {
	env := apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) {
		c.Lockout = redfish.Lockout{Threshold: 5, Duration: 5 * time.Minute}
	}})
	attacker := env.Anon.From("127.0.0.2")
	login := func(c *apitest.Client, pw string) *apitest.Response {
		return c.Post("/redfish/v1/SessionService/Sessions", map[string]any{"UserName": "admin", "Password": pw})
	}
	// Guess until locked, waiting out each Retry-After.
	var delays []string
	for failures := 0; failures < 5; {
		r := login(attacker, "guess-"+strconv.Itoa(failures))
		if r.Status == http.StatusTooManyRequests {
			wantStatus(t, "too soon", r, http.StatusTooManyRequests, "GeneralError")
			ra := r.Header.Get("Retry-After")
			delays = append(delays, ra)
			secs, _ := strconv.Atoi(ra)
			env.Clock.Advance(time.Duration(secs) * time.Second)
			continue
		}
		wantStatus(t, "guess "+strconv.Itoa(failures), r, http.StatusUnauthorized, "NoValidSession")
		failures++
	}
	r := login(attacker, "guess-x")
	wantStatus(t, "too soon after the lockout", r, http.StatusTooManyRequests, "GeneralError")
	delays = append(delays, r.Header.Get("Retry-After"))
	if want := []string{"1", "2", "4", "8"}; !slices.Equal(delays, want) {
		t.Errorf("Retry-After after each failure: got %v, want %v", delays, want)
	}
	env.Clock.Advance(8 * time.Second)
	// Locked from 127.0.0.2: a wrong password reads as before, the right
	// one says until when.
	wrong := login(attacker, "guess-x")
	wantStatus(t, "wrong password while locked", wrong, http.StatusUnauthorized, "NoValidSession")
	env.Clock.Advance(maxDelay)
	right := login(attacker, apitest.AdminPassword)
	wantStatus(t, "right password while locked", right, http.StatusUnauthorized, "NoValidSession")
	if strings.Contains(string(wrong.Body), "locked") {
		t.Errorf("a wrong password tells the guesser the account is locked: %s", wrong.Body)
	}
	if !strings.Contains(string(right.Body), "locked until") {
		t.Errorf("right password while locked does not say until when: %s", right.Body)
	}
	// The real administrator, from elsewhere, signs in and sees Locked.
	admin := env.Login("admin", apitest.AdminPassword)
	if acct := admin.GetOK(accountsURI + "/1"); acct["Locked"] != true {
		t.Errorf("Locked = %v, want true (locked from one address)", acct["Locked"])
	}
	wantStatus(t, "Basic from elsewhere", env.Basic("admin", apitest.AdminPassword).Get("/redfish/v1/Managers"), http.StatusOK, "")

	audit := admin.GetOK("/redfish/v1/Managers/FM/LogServices/AuditLog/Entries?$expand=.")
	found := false
	for _, m := range audit["Members"].([]any) {
		if msg, _ := m.(map[string]any)["Message"].(string); strings.Contains(msg, "locked out") && strings.Contains(msg, "127.0.0.2") {
			found = true
		}
	}
	if !found {
		t.Errorf("the audit log has no lockout entry")
	}
	throttled := 0
	for _, m := range audit["Members"].([]any) {
		if msg, _ := m.(map[string]any)["Message"].(string); strings.Contains(msg, "the next attempt from there waits") {
			throttled++
		}
	}
	if throttled < 3 {
		t.Errorf("the audit log has %d throttling entries, want one per delayed failure (3 or more)", throttled)
	}
	events := admin.GetOK("/redfish/v1/Managers/FM/LogServices/EventLog/Entries?$expand=.")
	found = false
	for _, m := range events["Members"].([]any) {
		if id, _ := m.(map[string]any)["MessageId"].(string); strings.HasSuffix(id, "ResourceWarningThresholdExceeded") {
			found = true
		}
	}
	if !found {
		t.Errorf("the event log has no lockout event")
	}
	throttled = 0
	for _, m := range events["Members"].([]any) {
		if id, _ := m.(map[string]any)["MessageId"].(string); strings.HasSuffix(id, "ResourceErrorsDetected") {
			throttled++
		}
	}
	if throttled != 1 {
		t.Errorf("the event log has %d throttling events, want 1 (when the delays started)", throttled)
	}

	// Unlock (DMTF: PATCH Locked false) lets the address in again.
	env.Clock.Advance(maxDelay)
	wantStatus(t, "unlock", admin.Patch(accountsURI+"/1", map[string]any{"Locked": false}), http.StatusOK, "")
	if r := login(attacker, apitest.AdminPassword); r.Status != http.StatusCreated {
		t.Errorf("after unlock: got %s, want 201", r)
	}
}

// TestPasswordPolicy: each rule refuses with its own message and says
// which rule it is; administrators set the length bounds.
func TestPasswordPolicy(t *testing.T) {
	env := apitest.NewServer(t)
	for _, tc := range []struct {
		name, user, pw, msg, rule string
	}{
		{"short", "pp1", "short", "PasswordIncorrectLength", "MinPasswordLength"},
		{"too long for bcrypt", "pp1", strings.Repeat("x", 73), "PasswordIncorrectLength", "MaxPasswordLength"},
		{"white space only", "pp1", "          ", "PasswordComplexityNotMet", "white space"},
		{"the user name", "longusername", "longusername", "PasswordComplexityNotMet", "user name"},
		{"the user name in other case", "longusername", "LongUserName", "PasswordComplexityNotMet", "user name"},
		{"the user name reversed", "longusername", "emanresugnol", "PasswordComplexityNotMet", "user name"},
		{"common", "pp1", "Password123", "PasswordComplexityNotMet", "most commonly used"},
		{"common (qwertyuiop)", "pp1", "qwertyuiop", "PasswordComplexityNotMet", "most commonly used"},
	} {
		r := env.Admin.Post(accountsURI, map[string]any{"UserName": tc.user, "Password": tc.pw, "RoleId": "Operator"})
		wantStatus(t, tc.name, r, http.StatusBadRequest, tc.msg)
		if !strings.Contains(string(r.Body), tc.rule) {
			t.Errorf("%s: the answer does not name the rule (%q): %s", tc.name, tc.rule, r.Body)
		}
	}
	me := findAccount(t, env, apitest.UserReadOnly)["@odata.id"].(string)
	wantStatus(t, "own password: common", env.ReadOnly.Patch(me, map[string]any{"Password": "iloveyou1"}), http.StatusBadRequest, "PasswordComplexityNotMet")
	wantStatus(t, "own password: reversed name", env.ReadOnly.Patch(me, map[string]any{"Password": "redaer"}), http.StatusBadRequest, "PasswordIncorrectLength")
	wantStatus(t, "own password: acceptable", env.ReadOnly.Patch(me, map[string]any{"Password": "reader-new-pass-1"}), http.StatusOK, "")

	const svc = "/redfish/v1/AccountService"
	wantStatus(t, "min below 8", env.Admin.Patch(svc, map[string]any{"MinPasswordLength": 4}), http.StatusBadRequest, "PropertyValueOutOfRange")
	wantStatus(t, "max above 72", env.Admin.Patch(svc, map[string]any{"MaxPasswordLength": 100}), http.StatusBadRequest, "PropertyValueOutOfRange")
	wantStatus(t, "min above max", env.Admin.Patch(svc, map[string]any{"MinPasswordLength": 40, "MaxPasswordLength": 30}), http.StatusBadRequest, "PropertyValueOutOfRange")
	wantStatus(t, "operator may not", env.Operator.Patch(svc, map[string]any{"MinPasswordLength": 12}), http.StatusForbidden, "InsufficientPrivilege")
	wantStatus(t, "min 12", env.Admin.Patch(svc, map[string]any{"MinPasswordLength": 12}), http.StatusOK, "")
	if got := env.Admin.GetOK(svc)["MinPasswordLength"]; got != float64(12) {
		t.Errorf("MinPasswordLength = %v, want 12", got)
	}
	wantStatus(t, "11 bytes under min 12", env.Admin.Post(accountsURI, map[string]any{"UserName": "pp2", "Password": "abcdefgh-11", "RoleId": "Operator"}),
		http.StatusBadRequest, "PasswordIncorrectLength")
	wantStatus(t, "12 bytes", env.Admin.Post(accountsURI, map[string]any{"UserName": "pp2", "Password": "abcdefgh-123", "RoleId": "Operator"}),
		http.StatusCreated, "")
}

// TestDefaultHostQuota (#13): with no quota of its own, a host account
// cannot reserve the whole pool: the default is a fair share (pool over
// heads), answered 409 naming the rule; administrators and operators set
// the default on the pool's MemoryDomain, host accounts may not, and a
// host's own quota overrides it.
func TestDefaultHostQuota(t *testing.T) {
	env := apitest.NewServer(t)
	const domain = "/redfish/v1/Chassis/Pool/MemoryDomains/Pool"
	d := env.Admin.GetOK(domain)
	oem := d["Oem"].(map[string]any)["CxlPool"].(map[string]any)
	total := int(d["MemorySizeMiB"].(float64))
	share := int(oem["DefaultHostQuotaMiB"].(float64))
	if oem["DefaultHostQuotaIsFairShare"] != true || share != total/8 {
		t.Fatalf("default quota %v MiB (fair share %v), want %d (the pool over 8 heads)", share, oem["DefaultHostQuotaIsFairShare"], total/8)
	}
	r := env.Host0.Post(chunksURI, map[string]any{"MemoryChunkSizeMiB": total / 2, "AddressRangeType": "Volatile"})
	wantStatus(t, "host reserves half the pool", r, http.StatusConflict, "CreateLimitReachedForResource")
	if !strings.Contains(string(r.Body), "DefaultHostQuotaMiB") {
		t.Errorf("the refusal does not name the default quota: %s", r.Body)
	}
	reserve(t, env.Host0, share, nil) // exactly its share
	wantStatus(t, "one block more", env.Host0.Post(chunksURI, map[string]any{"MemoryChunkSizeMiB": blockMiB, "AddressRangeType": "Volatile"}),
		http.StatusConflict, "CreateLimitReachedForResource")
	// An administrator's grant to a host follows the same rule.
	big := reserve(t, env.Admin, share, nil)
	r = waitTask(t, env.Admin, startConnect(t, env.Admin, big, 1))
	if r.Status != http.StatusCreated {
		t.Fatalf("admin grants the fair share to Host1: %s", r)
	}
	more := reserve(t, env.Admin, blockMiB, nil)
	wantStatus(t, "admin grants beyond Host1's default", env.Admin.Post(connectionsURI, connectBody(more, 1)),
		http.StatusConflict, "CreateLimitReachedForResource")

	body := func(n int) map[string]any {
		return map[string]any{"Oem": map[string]any{"CxlPool": map[string]any{"DefaultHostQuotaMiB": n}}}
	}
	wantStatus(t, "host sets the default", env.Host0.Patch(domain, body(0)), http.StatusForbidden, "InsufficientPrivilege")
	wantStatus(t, "negative", env.Admin.Patch(domain, body(-1)), http.StatusBadRequest, "PropertyValueOutOfRange")
	wantStatus(t, "over the pool", env.Admin.Patch(domain, body(total+1)), http.StatusBadRequest, "PropertyValueOutOfRange")
	wantStatus(t, "operator sets it", env.Operator.Patch(domain, body(share+blockMiB)), http.StatusOK, "")
	oem = env.Admin.GetOK(domain)["Oem"].(map[string]any)["CxlPool"].(map[string]any)
	if oem["DefaultHostQuotaMiB"] != float64(share+blockMiB) || oem["DefaultHostQuotaIsFairShare"] != false {
		t.Errorf("after PATCH: %v MiB, fair share %v", oem["DefaultHostQuotaMiB"], oem["DefaultHostQuotaIsFairShare"])
	}
	reserve(t, env.Host0, blockMiB, nil) // room for one more block now
	if q := env.Host0.GetOK(domain)["Oem"].(map[string]any)["CxlPool"].(map[string]any)["QuotaMiB"]; q != float64(share+blockMiB) {
		t.Errorf("host's QuotaMiB = %v, want the default it is under (%d)", q, share+blockMiB)
	}
	// A host's own quota overrides the default.
	wantStatus(t, "own quota", env.Admin.Patch(systemURI(0), map[string]any{"Oem": map[string]any{"CxlPool": map[string]any{"QuotaMiB": total / 2}}}),
		http.StatusOK, "")
	reserve(t, env.Host0, 4*blockMiB, nil)
}

// TestOwnedObjectsEndWithTheirAccount: a deleted account's push
// subscriptions are removed and its unused stream tickets no longer open
// the telemetry stream.
func TestOwnedObjectsEndWithTheirAccount(t *testing.T) {
	env := apitest.NewServer(t)
	uri := createAccount(t, env, "subowner", redfish.RoleOperator, "")
	c := env.Login("subowner", apitest.UserPassword)
	r := c.Post("/redfish/v1/EventService/Subscriptions", map[string]any{
		"Destination": "https://127.0.0.1:9/events", "Protocol": "Redfish"})
	wantStatus(t, "subscribe", r, http.StatusCreated, "")
	sub := r.Header.Get("Location")
	other := env.Admin.Post("/redfish/v1/EventService/Subscriptions", map[string]any{
		"Destination": "https://127.0.0.1:9/admin", "Protocol": "Redfish"})
	wantStatus(t, "admin subscribes", other, http.StatusCreated, "")
	var ticket string
	if env.Config.Telemetry != nil {
		tr := c.Post(api.TelemetryTicketURI, map[string]any{})
		wantStatus(t, "ticket", tr, http.StatusOK, "")
		ticket = tr.JSON(t)["Ticket"].(string)
	}

	wantStatus(t, "delete the owner", env.Admin.Delete(uri), http.StatusNoContent, "")
	wantStatus(t, "the owner's subscription", env.Admin.Get(sub), http.StatusNotFound, "ResourceNotFound")
	wantStatus(t, "another's subscription", env.Admin.Get(other.Header.Get("Location")), http.StatusOK, "")
	if ticket != "" {
		wsURL := "ws" + strings.TrimPrefix(env.HTTP.URL, "http") + api.TelemetryStreamURI + "?ticket=" + ticket
		conn, resp, err := websocket.DefaultDialer.Dial(wsURL, nil)
		if err == nil {
			conn.Close()
			t.Errorf("a deleted account's ticket opened the telemetry stream")
		} else if resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("a deleted account's ticket: got %v (%v), want 401", err, resp)
		}
	}
}
