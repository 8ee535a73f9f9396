package api_test

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"cxlpool/api"
	"cxlpool/api/apitest"
	"cxlpool/api/redfish"
)

// wantStatus checks a response's status and, if msg is set, that its
// error names that Base message.
func wantStatus(t *testing.T, what string, r *apitest.Response, status int, msg string) {
	t.Helper()
	if r.Status != status {
		t.Errorf("%s: got %s, want %d", what, r, status)
		return
	}
	if msg != "" && !slices.Contains(r.MessageIDs(), "Base.1.22."+msg) {
		t.Errorf("%s: got messages %v, want Base.1.22.%s", what, r.MessageIDs(), msg)
	}
}

// TestRoleMatrix checks who may do what: every role against resources of
// every privilege class, including anonymous callers. Requests that pass
// authorisation but carry an invalid body get 400, which proves that the
// privilege check comes first.
func TestRoleMatrix(t *testing.T) {
	env := apitest.NewServer(t)
	type want struct{ anon, admin, operator, reader, host int }
	const (
		ok       = http.StatusOK
		created  = http.StatusCreated
		noCont   = http.StatusNoContent
		bad      = http.StatusBadRequest
		unauth   = http.StatusUnauthorized
		forbid   = http.StatusForbidden
		notFound = http.StatusNotFound
		notAllow = http.StatusMethodNotAllowed
		conflict = http.StatusConflict
	)
	cases := []struct {
		method, path string
		body         any
		want         want
	}{
		{"GET", "/redfish", nil, want{ok, ok, ok, ok, ok}},
		{"GET", "/redfish/v1", nil, want{ok, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/", nil, want{ok, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/odata", nil, want{ok, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/$metadata", nil, want{ok, ok, ok, ok, ok}},
		{"DELETE", "/redfish/v1", nil, want{notAllow, notAllow, notAllow, notAllow, notAllow}},
		{"GET", "/redfish/v1/SessionService", nil, want{unauth, ok, ok, ok, ok}},
		{"PATCH", "/redfish/v1/SessionService", map[string]any{}, want{unauth, ok, forbid, forbid, forbid}},
		{"GET", "/redfish/v1/SessionService/Sessions", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/AccountService", nil, want{unauth, ok, ok, ok, ok}},
		{"PATCH", "/redfish/v1/AccountService", map[string]any{"Bogus": 1}, want{unauth, bad, forbid, forbid, forbid}},
		{"PUT", "/redfish/v1/AccountService", map[string]any{}, want{unauth, notAllow, notAllow, notAllow, notAllow}},
		{"GET", "/redfish/v1/AccountService/Accounts", nil, want{unauth, ok, ok, ok, ok}},
		{"POST", "/redfish/v1/AccountService/Accounts", map[string]any{}, want{unauth, bad, forbid, forbid, forbid}},
		{"GET", "/redfish/v1/AccountService/Accounts/1", nil, want{unauth, ok, notFound, notFound, notFound}},
		{"DELETE", "/redfish/v1/AccountService/Accounts/1", nil, want{unauth, conflict, forbid, forbid, forbid}},
		{"GET", "/redfish/v1/AccountService/Roles", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/AccountService/Roles/HostUser", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Managers", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Managers/FM", nil, want{unauth, ok, ok, ok, ok}},
		// PATCH the Manager (image slot, clock): ConfigureManager only
		// (managerpatch.go); Manager.Reset exists only with a reboot hook.
		{"PATCH", "/redfish/v1/Managers/FM", map[string]any{}, want{unauth, ok, forbid, forbid, forbid}},
		{"PATCH", "/redfish/v1/Managers/FM", map[string]any{"DateTime": "2026-01-02T03:04:05Z"}, want{unauth, bad, forbid, forbid, forbid}},
		{"POST", "/redfish/v1/Managers/FM/Actions/Manager.Reset", map[string]any{}, want{unauth, notFound, notFound, notFound, notFound}},
		{"GET", "/redfish/v1/Managers/FM/LogServices", nil, want{unauth, ok, ok, ok, forbid}},
		{"GET", "/redfish/v1/Managers/FM/LogServices/AuditLog/Entries", nil, want{unauth, ok, ok, ok, forbid}},
		{"GET", "/redfish/v1/Managers/FM/LogServices/EventLog", nil, want{unauth, ok, ok, ok, forbid}},
		{"POST", "/redfish/v1/Managers/FM/LogServices/EventLog/Actions/LogService.ClearLog", map[string]any{}, want{unauth, noCont, forbid, forbid, forbid}},
		{"POST", "/redfish/v1/Managers/FM/LogServices/AuditLog/Actions/LogService.ClearLog", map[string]any{}, want{unauth, notFound, notFound, notFound, notFound}},
		{"GET", "/redfish/v1/TaskService", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/TaskService/Tasks", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/TaskService/Tasks/999", nil, want{unauth, notFound, notFound, notFound, notFound}},
		{"GET", "/redfish/v1/EventService", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/EventService/Subscriptions", nil, want{unauth, ok, ok, ok, forbid}},
		{"POST", "/redfish/v1/EventService/Subscriptions", map[string]any{}, want{unauth, bad, bad, forbid, forbid}},
		{"GET", "/redfish/v1/Registries", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Registries/Base.1.22.1/Base.1.22.1.json", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/metrics", nil, want{unauth, ok, ok, ok, forbid}},
		// Capacity resources: everyone reads the pool; hosts read only
		// their own host's parts (404 for the others'); reserving,
		// connecting and releasing take ConfigureComponents or the host
		// capacity privilege.
		{"GET", "/redfish/v1/Chassis", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Chassis/Pool", nil, want{unauth, ok, ok, ok, ok}},
		// The identify LED and head power are appliance operations:
		// Administrators and Operators only; host accounts get 403 for
		// every head's reset, theirs included (headpower.go).
		{"PATCH", "/redfish/v1/Chassis/Pool", map[string]any{}, want{unauth, ok, ok, forbid, forbid}},
		{"PATCH", "/redfish/v1/Chassis/Pool", map[string]any{"LocationIndicatorActive": "on"}, want{unauth, bad, bad, forbid, forbid}},
		{"GET", "/redfish/v1/Chassis/Pool/ThermalSubsystem", nil, want{unauth, ok, ok, ok, ok}},
		{"PATCH", "/redfish/v1/Chassis/Pool/ThermalSubsystem", map[string]any{}, want{unauth, notAllow, notAllow, notAllow, notAllow}},
		{"GET", "/redfish/v1/Chassis/Pool/ThermalSubsystem/Fans", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Chassis/Pool/ThermalSubsystem/Fans/Fan1", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Chassis/Pool/ThermalSubsystem/Fans/Fan9", nil, want{unauth, notFound, notFound, notFound, notFound}},
		{"GET", "/redfish/v1/Chassis/Pool/ThermalSubsystem/ThermalMetrics", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Chassis/Pool/PowerSubsystem", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Chassis/Pool/PowerSubsystem/PowerSupplies", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Chassis/Pool/PowerSubsystem/PowerSupplies/PSU1", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Chassis/Pool/PowerSubsystem/PowerSupplies/PSU1/Metrics", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Chassis/Pool/PowerSubsystem/PowerSupplies/PSU7", nil, want{unauth, notFound, notFound, notFound, notFound}},
		{"GET", "/redfish/v1/Chassis/Pool/Sensors", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Chassis/Pool/Sensors/InletTemp", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Chassis/Pool/Sensors/Mgmt_coretemp_temp1", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Chassis/Pool/Sensors/NoSuchSensor", nil, want{unauth, notFound, notFound, notFound, notFound}},
		{"GET", "/redfish/v1/Chassis/Pool/Sensors/Mgmt_nosuch_temp1", nil, want{unauth, notFound, notFound, notFound, notFound}},
		{"DELETE", "/redfish/v1/Chassis/Pool/Sensors/InletTemp", nil, want{unauth, notAllow, notAllow, notAllow, notAllow}},
		{"POST", "/redfish/v1/Systems/Host0/Actions/ComputerSystem.Reset", map[string]any{}, want{unauth, bad, bad, forbid, forbid}},
		{"POST", "/redfish/v1/Systems/Host1/Actions/ComputerSystem.Reset", map[string]any{}, want{unauth, bad, bad, forbid, forbid}},
		{"POST", "/redfish/v1/Systems/Host9/Actions/ComputerSystem.Reset", map[string]any{}, want{unauth, notFound, notFound, forbid, forbid}},
		{"POST", "/redfish/v1/Systems/Host0/Actions/ComputerSystem.Reset", map[string]any{"ResetType": "GracefulShutdown"}, want{unauth, bad, bad, forbid, forbid}},
		{"GET", "/redfish/v1/Systems/Host0/Actions/ComputerSystem.Reset", nil, want{unauth, notAllow, notAllow, notAllow, notAllow}},
		{"GET", "/redfish/v1/Chassis/Pool/PCIeDevices", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Chassis/Pool/PCIeDevices/DCD", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Chassis/Pool/PCIeDevices/DCD/CXLLogicalDevices", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Chassis/Pool/PCIeDevices/DCD/CXLLogicalDevices/0", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Chassis/Pool/PCIeDevices/DCD/CXLLogicalDevices/1", nil, want{unauth, ok, ok, ok, notFound}},
		{"GET", "/redfish/v1/Chassis/Pool/PCIeDevices/DCD/CXLLogicalDevices/0/MemoryRegions", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Chassis/Pool/PCIeDevices/DCD/CXLLogicalDevices/0/MemoryRegions/1", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Chassis/Pool/PCIeDevices/DCD/CXLLogicalDevices/1/MemoryRegions/0", nil, want{unauth, ok, ok, ok, notFound}},
		{"GET", "/redfish/v1/Chassis/Pool/PCIeDevices/DCD/CXLLogicalDevices/0/MemoryRegions/9", nil, want{unauth, notFound, notFound, notFound, notFound}},
		{"GET", "/redfish/v1/Chassis/Pool/FabricAdapters/DCD", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Chassis/Pool/FabricAdapters/DCD/Ports/0", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Chassis/Pool/FabricAdapters/DCD/Ports/1", nil, want{unauth, ok, ok, ok, notFound}},
		{"GET", "/redfish/v1/Chassis/Pool/MemoryDomains", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Chassis/Pool/MemoryDomains/Pool", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks", nil, want{unauth, ok, ok, ok, ok}},
		{"POST", "/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks", map[string]any{}, want{unauth, bad, bad, forbid, bad}},
		{"DELETE", "/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks", nil, want{unauth, notAllow, notAllow, notAllow, notAllow}},
		{"GET", "/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks/1", nil, want{unauth, notFound, notFound, notFound, notFound}},
		{"DELETE", "/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks/1", nil, want{unauth, notFound, notFound, forbid, notFound}},
		{"PATCH", "/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks/1", map[string]any{}, want{unauth, notAllow, notAllow, notAllow, notAllow}},
		{"GET", "/redfish/v1/Fabrics", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Fabrics/CXL", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Fabrics/CXL/Endpoints", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Fabrics/CXL/Endpoints/Host0", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Fabrics/CXL/Endpoints/DCD-LD0", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Fabrics/CXL/Endpoints/Host1", nil, want{unauth, ok, ok, ok, notFound}},
		{"GET", "/redfish/v1/Fabrics/CXL/Endpoints/DCD-LD1", nil, want{unauth, ok, ok, ok, notFound}},
		{"POST", "/redfish/v1/Fabrics/CXL/Endpoints", map[string]any{}, want{unauth, notAllow, notAllow, notAllow, notAllow}},
		{"GET", "/redfish/v1/Fabrics/CXL/Zones", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Fabrics/CXL/Zones/Host0", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Fabrics/CXL/Zones/Host1", nil, want{unauth, ok, ok, ok, notFound}},
		{"GET", "/redfish/v1/Fabrics/CXL/Connections", nil, want{unauth, ok, ok, ok, ok}},
		{"POST", "/redfish/v1/Fabrics/CXL/Connections", map[string]any{}, want{unauth, bad, bad, forbid, bad}},
		{"GET", "/redfish/v1/Fabrics/CXL/Connections/1", nil, want{unauth, notFound, notFound, notFound, notFound}},
		{"DELETE", "/redfish/v1/Fabrics/CXL/Connections/1", nil, want{unauth, notFound, notFound, forbid, notFound}},
		{"PATCH", "/redfish/v1/Fabrics/CXL/Connections/1", map[string]any{}, want{unauth, notAllow, notAllow, notAllow, notAllow}},
		{"GET", "/redfish/v1/Fabrics/RDMA", nil, want{unauth, ok, ok, ok, forbid}},
		{"GET", "/redfish/v1/Fabrics/RDMA/Endpoints", nil, want{unauth, ok, ok, ok, forbid}},
		{"GET", "/redfish/v1/Fabrics/RDMA/Endpoints/Pool", nil, want{unauth, ok, ok, ok, forbid}},
		{"GET", "/redfish/v1/Fabrics/RDMA/Endpoints/rack1", nil, want{unauth, notFound, notFound, notFound, forbid}},
		{"POST", "/redfish/v1/Fabrics/RDMA/Endpoints", map[string]any{}, want{unauth, notAllow, notAllow, notAllow, notAllow}},
		{"GET", "/redfish/v1/Fabrics/RDMA/Connections", nil, want{unauth, ok, ok, ok, forbid}},
		{"POST", "/redfish/v1/Fabrics/RDMA/Connections", map[string]any{}, want{unauth, bad, bad, forbid, forbid}},
		{"GET", "/redfish/v1/Fabrics/RDMA/Connections/0123456789abcdef", nil, want{unauth, notFound, notFound, notFound, forbid}},
		{"DELETE", "/redfish/v1/Fabrics/RDMA/Connections/0123456789abcdef", nil, want{unauth, notFound, notFound, forbid, forbid}},
		{"PATCH", "/redfish/v1/Fabrics/RDMA/Connections/0123456789abcdef", map[string]any{}, want{unauth, notAllow, notAllow, notAllow, notAllow}},
		{"GET", "/redfish/v1/Systems", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Systems/Host0", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Systems/Host1", nil, want{unauth, ok, ok, ok, notFound}},
		{"GET", "/redfish/v1/Systems/Host0/Memory", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/Systems/Host1/Memory", nil, want{unauth, ok, ok, ok, notFound}},
		{"GET", "/redfish/v1/Systems/Host0/Memory/1", nil, want{unauth, notFound, notFound, notFound, notFound}},
		{"GET", "/redfish/v1/Systems/Host9", nil, want{unauth, notFound, notFound, notFound, notFound}},
		{"DELETE", "/redfish/v1/Systems/Host0", nil, want{unauth, notAllow, notAllow, notAllow, notAllow}},
		{"GET", "/redfish/v1/UpdateService", nil, want{unauth, ok, ok, ok, ok}},
		{"POST", "/redfish/v1/UpdateService", map[string]any{}, want{unauth, notAllow, notAllow, notAllow, notAllow}},
		{"GET", "/redfish/v1/UpdateService/FirmwareInventory", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/UpdateService/FirmwareInventory/FM", nil, want{unauth, ok, ok, ok, ok}},
		{"GET", "/redfish/v1/UpdateService/FirmwareInventory/Backup", nil, want{unauth, notFound, notFound, notFound, notFound}},
		// No image (no Config.Update): no push URI (updatepush_test.go has
		// the push's own role rows).
		{"POST", "/redfish/v1/UpdateService/Upload", map[string]any{}, want{unauth, notFound, notFound, notFound, notFound}},
		{"GET", "/redfish/v1/NoSuchThing", nil, want{unauth, notFound, notFound, notFound, notFound}},
		// "/" is the web console's login page (webui): public; other
		// paths outside /redfish stay 401 before 404.
		{"GET", "/", nil, want{ok, ok, ok, ok, ok}},
		{"GET", "/nope", nil, want{unauth, notFound, notFound, notFound, notFound}},
		{"PROPFIND", "/redfish/v1/Managers", nil, want{unauth, notAllow, notAllow, notAllow, notAllow}},
		{"BREW", "/redfish/v1/Managers", nil, want{unauth, notAllow, notAllow, notAllow, notAllow}},
	}
	clients := []struct {
		name string
		c    *apitest.Client
		get  func(want) int
	}{
		{"anonymous", env.Anon, func(w want) int { return w.anon }},
		{"Administrator", env.Admin, func(w want) int { return w.admin }},
		{"Operator", env.Operator, func(w want) int { return w.operator }},
		{"ReadOnly", env.ReadOnly, func(w want) int { return w.reader }},
		{"HostUser", env.Host0, func(w want) int { return w.host }},
		// HTTP Basic must grant exactly what a session grants.
		{"ReadOnly/Basic", env.Basic(apitest.UserReadOnly, apitest.UserPassword), func(w want) int { return w.reader }},
	}
	for _, tc := range cases {
		for _, cl := range clients {
			r := cl.c.Do(tc.method, tc.path, tc.body)
			what := tc.method + " " + tc.path + " as " + cl.name
			want := cl.get(tc.want)
			wantStatus(t, what, r, want, "")
			switch want {
			case unauth:
				wantStatus(t, what, r, want, "NoValidSession")
				if !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Basic") {
					t.Errorf("%s: WWW-Authenticate = %q, want Basic", what, r.Header.Get("WWW-Authenticate"))
				}
			case forbid:
				wantStatus(t, what, r, want, "InsufficientPrivilege")
			case notAllow:
				wantStatus(t, what, r, want, "OperationNotAllowed")
				if r.Header.Get("Allow") == "" {
					t.Errorf("%s: no Allow header", what)
				}
			}
			if r.Status >= 500 {
				t.Errorf("%s: got %d", what, r.Status)
			}
			if r.Status < 300 && r.Status != http.StatusNoContent && strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") &&
				!strings.HasPrefix(tc.path, "/redfish/v1/Registries/Base") && tc.path != "/redfish" && tc.path != "/redfish/v1/odata" {
				apitest.Validate(t, r.Body)
			}
		}
	}
}

// TestAuditLogRecordsEveryChange checks that change requests, refused or
// not, leave an audit entry with who, what and the status, and that
// reads leave none.
func TestAuditLogRecordsEveryChange(t *testing.T) {
	env := apitest.NewServer(t)
	env.ReadOnly.Patch("/redfish/v1/SessionService", map[string]any{"SessionTimeout": 60})
	env.Admin.Patch("/redfish/v1/SessionService", map[string]any{"SessionTimeout": 600})
	env.Anon.Post("/redfish/v1/SessionService/Sessions", map[string]any{"UserName": "mallory", "Password": "wrong-password"})
	env.Admin.Get("/redfish/v1/SessionService")

	entries := env.Admin.GetOK("/redfish/v1/Managers/FM/LogServices/AuditLog/Entries?$expand=.")
	var got []string
	for _, m := range entries["Members"].([]any) {
		e := m.(map[string]any)
		oem := e["Oem"].(map[string]any)["CxlPool"].(map[string]any)
		got = append(got, fmt.Sprintf("%s %s %s %v", e["Username"], oem["Method"], oem["URI"], oem["StatusCode"]))
	}
	for _, want := range []string{
		"reader PATCH /redfish/v1/SessionService 403",
		"admin PATCH /redfish/v1/SessionService 200",
		"mallory POST /redfish/v1/SessionService/Sessions 401",
		"host1 POST /redfish/v1/SessionService/Sessions 201",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("audit log lacks %q; has:\n%s", want, strings.Join(got, "\n"))
		}
	}
	for _, g := range got {
		if strings.Contains(g, " GET ") {
			t.Errorf("audit log records a read: %q", g)
		}
	}
}

// TestLockout checks that Threshold failed logins lock the account for
// Duration from that address, for sessions and Basic alike, that the right
// password then says the account is locked (and until when) while a wrong
// one reads as before, and that an administrator can unlock it. Attempts
// come a Retry-After apart (TestAttackLockoutFromOneSource covers the
// throttling itself).
func TestLockout(t *testing.T) {
	env := apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) {
		c.Lockout = redfish.Lockout{Threshold: 3, Duration: time.Minute}
	}})
	login := func(pw string) *apitest.Response {
		env.Clock.Advance(10 * time.Second) // past any Retry-After so far
		return env.Anon.Post("/redfish/v1/SessionService/Sessions",
			map[string]any{"UserName": apitest.UserReadOnly, "Password": pw})
	}
	for i := range 2 {
		wantStatus(t, "bad login "+strconv.Itoa(i), login("wrong-password"), http.StatusUnauthorized, "NoValidSession")
	}
	// The third failure, over Basic, reaches the threshold.
	env.Clock.Advance(10 * time.Second)
	basicBad := env.Basic(apitest.UserReadOnly, "wrong-password").Get("/redfish/v1/SessionService")
	wantStatus(t, "third failure (Basic)", basicBad, http.StatusUnauthorized, "NoValidSession")
	wrong := login("wrong-password")
	right := login(apitest.UserPassword)
	wantStatus(t, "right password while locked", right, http.StatusUnauthorized, "NoValidSession")
	if !strings.Contains(string(right.Body), "locked until") || strings.Contains(string(wrong.Body), "locked") {
		t.Errorf("only the right password should say the account is locked:\nright: %s\nwrong: %s", right.Body, wrong.Body)
	}
	env.Clock.Advance(10 * time.Second)
	if got := env.Basic(apitest.UserReadOnly, apitest.UserPassword).Get("/redfish/v1/SessionService").Status; got != http.StatusUnauthorized {
		t.Errorf("Basic with right password while locked: got %d, want 401", got)
	}
	acct := findAccount(t, env, apitest.UserReadOnly)
	if acct["Locked"] != true {
		t.Errorf("Locked = %v, want true", acct["Locked"])
	}
	// Sessions opened before the lockout keep working.
	wantStatus(t, "existing session while locked", env.ReadOnly.Get("/redfish/v1/SessionService"), http.StatusOK, "")

	env.Clock.Advance(time.Minute + time.Second)
	wantStatus(t, "after the lockout duration", login(apitest.UserPassword), http.StatusCreated, "")

	// Lock again, then let an administrator unlock.
	for range 3 {
		login("wrong-password")
	}
	wantStatus(t, "relocked", login(apitest.UserPassword), http.StatusUnauthorized, "NoValidSession")
	uri := acct["@odata.id"].(string)
	wantStatus(t, "unlock", env.Admin.Patch(uri, map[string]any{"Locked": false}), http.StatusOK, "")
	wantStatus(t, "after unlock", login(apitest.UserPassword), http.StatusCreated, "")
	wantStatus(t, "lock by client", env.Admin.Patch(uri, map[string]any{"Locked": true}), http.StatusBadRequest, "PropertyValueNotInList")

	// Unknown users fail the same way and do not reveal themselves.
	r := env.Anon.Post("/redfish/v1/SessionService/Sessions", map[string]any{"UserName": "nobody", "Password": "whatever-pw"})
	wantStatus(t, "unknown user", r, http.StatusUnauthorized, "NoValidSession")
	if got, want := messageText(t, r), messageText(t, wrong); got != want {
		t.Errorf("unknown user reads %q, a wrong password %q: want the same", got, want)
	}
}

// messageText is an error's first message and resolution.
func messageText(t *testing.T, r *apitest.Response) string {
	t.Helper()
	e := r.JSON(t)["error"].(map[string]any)["@Message.ExtendedInfo"].([]any)[0].(map[string]any)
	return fmt.Sprint(e["Message"], " ", e["Resolution"])
}

func findAccount(t *testing.T, env *apitest.Env, user string) map[string]any {
	t.Helper()
	col := env.Admin.GetOK("/redfish/v1/AccountService/Accounts?$expand=.")
	for _, m := range col["Members"].([]any) {
		if a := m.(map[string]any); a["UserName"] == user {
			return a
		}
	}
	t.Fatalf("no account %q", user)
	return nil
}

// TestSessionTimeout checks that an idle session expires after
// SessionService.SessionTimeout, that use keeps it alive, and that
// administrators can change the timeout.
func TestSessionTimeout(t *testing.T) {
	env := apitest.NewServer(t)
	wantStatus(t, "timeout below minimum", env.Admin.Patch("/redfish/v1/SessionService", map[string]any{"SessionTimeout": 10}),
		http.StatusBadRequest, "PropertyValueOutOfRange")
	wantStatus(t, "set timeout", env.Admin.Patch("/redfish/v1/SessionService", map[string]any{"SessionTimeout": 60}),
		http.StatusOK, "")
	if got := env.Admin.GetOK("/redfish/v1/SessionService")["SessionTimeout"]; got != float64(60) {
		t.Errorf("SessionTimeout = %v, want 60", got)
	}
	for range 3 {
		env.Clock.Advance(50 * time.Second)
		wantStatus(t, "active session", env.Operator.Get("/redfish/v1/Managers"), http.StatusOK, "")
	}
	env.Clock.Advance(61 * time.Second)
	wantStatus(t, "idle session", env.Operator.Get("/redfish/v1/Managers"), http.StatusUnauthorized, "NoValidSession")
	// The expired sessions (all but the operator's were idle throughout)
	// are gone from the collection too.
	col := env.Login("admin", apitest.AdminPassword).GetOK("/redfish/v1/SessionService/Sessions")
	if n := col["Members@odata.count"]; n != float64(1) {
		t.Errorf("sessions after expiry: got %v, want 1 (the new one)", n)
	}
}

// TestSessionLifecycle: login answers 201 with token and Location, the
// session is visible to its owner and administrators only, and DELETE
// logs out.
func TestSessionLifecycle(t *testing.T) {
	env := apitest.NewServer(t)
	c := env.Login(apitest.UserOperator, apitest.UserPassword)
	if c.Token == "" || !strings.HasPrefix(c.Session, "/redfish/v1/SessionService/Sessions/") {
		t.Fatalf("login: token %q, location %q", c.Token, c.Session)
	}
	s := c.GetOK(c.Session)
	if s["UserName"] != apitest.UserOperator || s["Password"] != nil {
		t.Errorf("session body: UserName %v, Password %v", s["UserName"], s["Password"])
	}
	wantStatus(t, "other user's session", env.ReadOnly.Get(c.Session), http.StatusNotFound, "ResourceNotFound")
	env.Admin.GetOK(c.Session)
	wantStatus(t, "delete other's session", env.ReadOnly.Delete(c.Session), http.StatusNotFound, "ResourceNotFound")
	wantStatus(t, "logout", c.Delete(c.Session), http.StatusNoContent, "")
	wantStatus(t, "after logout", c.Get("/redfish/v1/Managers"), http.StatusUnauthorized, "NoValidSession")
	wantStatus(t, "bad token", env.Anon.Get("/redfish/v1/Managers", "X-Auth-Token", "not-a-token"),
		http.StatusUnauthorized, "NoValidSession")
	wantStatus(t, "login missing password", env.Anon.Post("/redfish/v1/SessionService/Sessions",
		map[string]any{"UserName": "admin"}), http.StatusBadRequest, "PropertyMissing")
}

// TestAccounts covers account administration: host binding, self-service
// password change, uniqueness, and the last administrator.
func TestAccounts(t *testing.T) {
	env := apitest.NewServer(t)
	const accounts = "/redfish/v1/AccountService/Accounts"
	host := findAccount(t, env, apitest.UserHost0)
	oem := host["Oem"].(map[string]any)["CxlPool"].(map[string]any)
	if oem["SystemId"] != "Host0" {
		t.Errorf("host account SystemId = %v, want Host0", oem["SystemId"])
	}
	for _, tc := range []struct {
		name string
		body map[string]any
		code int
		msg  string
	}{
		{"host role without system", map[string]any{"UserName": "h9", "Password": "password-123", "RoleId": "HostUser"},
			http.StatusBadRequest, "PropertyMissing"},
		{"unknown system", map[string]any{"UserName": "h9", "Password": "password-123", "RoleId": "HostUser",
			"Oem": map[string]any{"CxlPool": map[string]any{"SystemId": "Host42"}}}, http.StatusBadRequest, "PropertyValueNotInList"},
		{"system on a non-host role", map[string]any{"UserName": "h9", "Password": "password-123", "RoleId": "Operator",
			"Oem": map[string]any{"CxlPool": map[string]any{"SystemId": "Host1"}}}, http.StatusBadRequest, "PropertyValueConflict"},
		{"unknown role", map[string]any{"UserName": "h9", "Password": "password-123", "RoleId": "Root"},
			http.StatusBadRequest, "PropertyValueNotInList"},
		{"short password", map[string]any{"UserName": "h9", "Password": "short", "RoleId": "Operator"},
			http.StatusBadRequest, "PasswordIncorrectLength"},
		{"bad user name", map[string]any{"UserName": "bad name!", "Password": "password-123", "RoleId": "Operator"},
			http.StatusBadRequest, "PropertyValueFormatError"},
		{"duplicate", map[string]any{"UserName": apitest.UserOperator, "Password": "password-123", "RoleId": "Operator"},
			http.StatusConflict, "ResourceAlreadyExists"},
		{"read-only property", map[string]any{"UserName": "h9", "Password": "password-123", "RoleId": "Operator", "Id": "7"},
			http.StatusBadRequest, "PropertyUnknown"},
	} {
		wantStatus(t, tc.name, env.Admin.Post(accounts, tc.body), tc.code, tc.msg)
	}

	me := findAccount(t, env, apitest.UserReadOnly)["@odata.id"].(string)
	wantStatus(t, "self role change", env.ReadOnly.Patch(me, map[string]any{"RoleId": "Administrator"}),
		http.StatusForbidden, "InsufficientPrivilege")
	wantStatus(t, "self password change", env.ReadOnly.Patch(me, map[string]any{"Password": "new-password-2"}), http.StatusOK, "")
	wantStatus(t, "same session still valid", env.ReadOnly.Get("/redfish/v1/Managers"), http.StatusOK, "")
	wantStatus(t, "old password", env.Basic(apitest.UserReadOnly, apitest.UserPassword).Get("/redfish/v1/Managers"),
		http.StatusUnauthorized, "")
	wantStatus(t, "new password", env.Basic(apitest.UserReadOnly, "new-password-2").Get("/redfish/v1/Managers"), http.StatusOK, "")
	wantStatus(t, "read-only property", env.Admin.Patch(me, map[string]any{"Id": "9"}), http.StatusBadRequest, "PropertyNotWritable")

	// The last enabled administrator can be neither demoted nor deleted.
	wantStatus(t, "demote last admin", env.Admin.Patch(accounts+"/1", map[string]any{"RoleId": "Operator"}),
		http.StatusConflict, "ResourceInUse")
	op := findAccount(t, env, apitest.UserOperator)["@odata.id"].(string)
	wantStatus(t, "promote operator", env.Admin.Patch(op, map[string]any{"RoleId": "Administrator"}), http.StatusOK, "")
	wantStatus(t, "operator now administers", env.Operator.Get(accounts+"/1"), http.StatusOK, "")

	// Deleting an account ends its sessions.
	wantStatus(t, "delete host1", env.Admin.Delete(findAccount(t, env, apitest.UserHost1)["@odata.id"].(string)), http.StatusNoContent, "")
	wantStatus(t, "deleted account's session", env.Host1.Get("/redfish/v1/Managers"), http.StatusUnauthorized, "NoValidSession")

	// Disabling an account ends its sessions and its Basic access.
	wantStatus(t, "disable host0", env.Admin.Patch(findAccount(t, env, apitest.UserHost0)["@odata.id"].(string),
		map[string]any{"Enabled": false}), http.StatusOK, "")
	wantStatus(t, "disabled account's session", env.Host0.Get("/redfish/v1/Managers"), http.StatusUnauthorized, "")
}

// TestLogsAreBounded: each log keeps only its newest LogLimit entries.
func TestLogsAreBounded(t *testing.T) {
	env := apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) { c.LogLimit = 5 }})
	for i := range 8 {
		env.Admin.Patch("/redfish/v1/SessionService", map[string]any{"SessionTimeout": 60 + i})
	}
	for _, log := range []string{"AuditLog", "EventLog"} {
		col := env.Admin.GetOK("/redfish/v1/Managers/FM/LogServices/" + log + "/Entries?$expand=.")
		members := col["Members"].([]any)
		if len(members) != 5 {
			t.Errorf("%s: %d entries, want 5", log, len(members))
			continue
		}
		if log == "AuditLog" {
			last := members[4].(map[string]any)["Oem"].(map[string]any)["CxlPool"].(map[string]any)
			if last["Method"] != "PATCH" {
				t.Errorf("newest audit entry %v, want the last PATCH", last)
			}
		}
	}
}
