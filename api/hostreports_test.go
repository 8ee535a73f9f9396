package api_test

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cxlpool/api"
	"cxlpool/api/apitest"
	"cxlpool/host/report"
	"cxlpool/sim"
)

// fakeClock is a settable clock for the report store.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func hostReport(tag, state string, inUse bool) map[string]any {
	return map[string]any{"Agent": "cxlhost test", "HeartbeatSeconds": 5, "Tags": []map[string]any{{
		"Tag": tag, "Accepted": true, "Usable": state != report.StateAccepted, "InUse": inUse,
		"Mode": "simfile", "State": state, "Path": "/proc/1/fd/7", "SizeBytes": 256 << 20,
	}}}
}

// TestHostReports: only a host's own account reports for it; the Memory
// of the System shows the report beside the grant (accepted by the host
// is not usable on the host) and, past the TTL, that the agent is silent.
func TestHostReports(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	env := apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) {
		c.HostReports = report.New(report.Config{Clock: clk.Now, TTL: 30 * time.Second})
	}})
	chunk := reserve(t, env.Host0, 256, nil)
	connect(t, env.Host0, chunk, 0)
	tag := strings.ToLower(get(env.Host0.GetOK(chunk), "Oem", "CxlPool", "Tag").(string))
	action := systemURI(0) + "/Actions/Oem/CxlPool.HostReport"
	mem := systemURI(0) + "/Memory/" + chunk[strings.LastIndex(chunk, "/")+1:]

	hostState := func() map[string]any {
		t.Helper()
		r := env.Admin.Get(mem)
		if r.Status != http.StatusOK {
			t.Fatalf("GET %s: %s", mem, r)
		}
		apitest.Validate(t, r.Body)
		return get(r.JSON(t), "Oem", "CxlPool", "Host").(map[string]any)
	}
	if got := hostState()["State"]; got != "NotReported" {
		t.Errorf("before any report: State %v, want NotReported", got)
	}
	for _, tc := range []struct {
		who    string
		c      *apitest.Client
		uri    string
		status int
		msg    string
	}{
		{"another host's account", env.Host1, action, http.StatusNotFound, "ResourceNotFound"},
		{"administrator", env.Admin, action, http.StatusForbidden, "InsufficientPrivilege"},
		{"reader", env.ReadOnly, action, http.StatusForbidden, "InsufficientPrivilege"},
		{"host1 for itself: fine", env.Host1, systemURI(1) + "/Actions/Oem/CxlPool.HostReport", http.StatusNoContent, ""},
	} {
		wantStatus(t, tc.who, tc.c.Post(tc.uri, hostReport(tag, report.StateInUse, true)), tc.status, tc.msg)
	}
	if got := hostState()["State"]; got != "NotReported" {
		t.Errorf("after refused reports: State %v, want NotReported (host1 reported for its own system only)", got)
	}
	wantStatus(t, "bad state", env.Host0.Post(action, hostReport(tag, "happy", false)), http.StatusBadRequest, "PropertyValueIncorrect")

	for _, tc := range []struct {
		state  string
		inUse  bool
		want   string
		usable bool
	}{
		{report.StateAccepted, false, "NotSurfaced", false},
		{report.StateOnline, false, "Usable", true},
		{report.StateInUse, true, "InUse", true},
		{report.StateReleaseRefused, true, "ReleaseRefusedInUse", true},
	} {
		wantStatus(t, tc.state, env.Host0.Post(action, hostReport(tag, tc.state, tc.inUse)), http.StatusNoContent, "")
		h := hostState()
		if h["State"] != tc.want || h["Usable"] != tc.usable || h["Accepted"] != true || h["InUse"] != tc.inUse {
			t.Errorf("reported %q: Host = %v, want State %s Usable %v InUse %v Accepted", tc.state, h, tc.want, tc.usable, tc.inUse)
		}
	}
	if got := get(env.Host0.GetOK(systemURI(0)), "Oem", "CxlPool", "HostAgent", "State"); got != "Reporting" {
		t.Errorf("System HostAgent State %v, want Reporting", got)
	}
	clk.Add(31 * time.Second)
	if got := hostState()["State"]; got != "AgentSilent" {
		t.Errorf("past the TTL: State %v, want AgentSilent", got)
	}
	r := env.Admin.Get(systemURI(0))
	apitest.Validate(t, r.Body)
	if got := get(r.JSON(t), "Oem", "CxlPool", "HostAgent", "State"); got != "Silent" {
		t.Errorf("past the TTL: System HostAgent State %v, want Silent", got)
	}
}

// TestForceReleaseRoles: host accounts and readers may not force a
// release; an administrator may.
func TestForceReleaseRoles(t *testing.T) {
	env := apitest.NewServer(t)
	chunk := reserve(t, env.Host0, 256, nil)
	conn := connect(t, env.Host0, chunk, 0)
	action := conn + "/Actions/Oem/CxlPool.ForceRelease"
	wantStatus(t, "own host", env.Host0.Post(action, map[string]any{}), http.StatusForbidden, "InsufficientPrivilege")
	wantStatus(t, "other host", env.Host1.Post(action, map[string]any{}), http.StatusForbidden, "InsufficientPrivilege")
	wantStatus(t, "reader", env.ReadOnly.Post(action, map[string]any{}), http.StatusForbidden, "InsufficientPrivilege")
	r := env.Admin.Post(action, map[string]any{})
	if r.Status != http.StatusAccepted {
		t.Fatalf("administrator: %s, want 202", r)
	}
	if f := waitTask(t, env.Admin, r.Header.Get("Location")); f.Status != http.StatusNoContent {
		t.Fatalf("forced release task ended %s, want 204", f)
	}
}

// TestSharedAttachRule: shares are closed by default; once an
// administrator allows Host0 and Host1 share "kv", both attach the same
// chunk; the size must match; the last to leave frees the chunk.
func TestSharedAttachRule(t *testing.T) {
	env := apitest.NewServer(t)
	attach := func(h int) string { return systemURI(h) + "/Actions/Oem/CxlPool.AttachShare" }
	leave := func(h int) string { return systemURI(h) + "/Actions/Oem/CxlPool.LeaveShare" }
	allow := func(h int) string { return systemURI(h) + "/Actions/Oem/CxlPool.AllowShare" }
	body := map[string]any{"Share": "kv", "SizeMiB": 256}
	wantStatus(t, "not allowed", env.Host0.Post(attach(0), body), http.StatusForbidden, "InsufficientPrivilege")
	wantStatus(t, "host allows itself", env.Host0.Post(allow(0), map[string]any{"Share": "kv", "Allow": true}),
		http.StatusForbidden, "InsufficientPrivilege")
	wantStatus(t, "bad name", env.Admin.Post(allow(0), map[string]any{"Share": "K V", "Allow": true}),
		http.StatusBadRequest, "PropertyValueFormatError")
	for _, h := range []int{0, 1} {
		wantStatus(t, "allow", env.Admin.Post(allow(h), map[string]any{"Share": "kv", "Allow": true}), http.StatusNoContent, "")
	}
	if got := get(env.Host0.GetOK(systemURI(0)), "Oem", "CxlPool", "Shares"); len(got.([]any)) != 1 {
		t.Errorf("Host0 Shares = %v, want [kv]", got)
	}
	var conns []string
	for _, h := range []int{0, 1} {
		c := []*apitest.Client{env.Host0, env.Host1}[h]
		r := c.Post(attach(h), body)
		if r.Status != http.StatusAccepted {
			t.Fatalf("Host%d attach: %s, want 202", h, r)
		}
		f := waitTask(t, c, r.Header.Get("Location"))
		if f.Status != http.StatusCreated {
			t.Fatalf("Host%d attach task: %s, want 201", h, f)
		}
		conns = append(conns, f.Header.Get("Location"))
	}
	chunk0 := get(env.Admin.GetOK(conns[0]), "MemoryChunkInfo", 0, "MemoryChunk", "@odata.id")
	chunk1 := get(env.Admin.GetOK(conns[1]), "MemoryChunkInfo", 0, "MemoryChunk", "@odata.id")
	if chunk0 != chunk1 {
		t.Fatalf("the hosts of share kv hold chunks %v and %v, want the same", chunk0, chunk1)
	}
	wantStatus(t, "again", env.Host0.Post(attach(0), body), http.StatusConflict, "ResourceAlreadyExists")
	wantStatus(t, "another size", env.Host0.Post(attach(0), map[string]any{"Share": "kv", "SizeMiB": 512}),
		http.StatusBadRequest, "PropertyValueIncorrect")
	release(t, env.Host0, conns[0])
	wantStatus(t, "leave while host1 holds it", env.Host0.Post(leave(0), map[string]any{"Share": "kv"}), http.StatusConflict, "ResourceInUse")
	release(t, env.Host1, conns[1])
	wantStatus(t, "last leaves", env.Host1.Post(leave(1), map[string]any{"Share": "kv"}), http.StatusNoContent, "")
	if r := env.Admin.Get(chunk0.(string)); r.Status != http.StatusNotFound {
		t.Errorf("after the last left, GET %v = %d, want 404", chunk0, r.Status)
	}
}

// TestReleaseWaitShownOnMemory: while a release the box started waits for
// a program on the host (the agent reports the tag in use and the host
// has not given it back), the Memory of the System is still there,
// Disabled, and says why (ReleaseRefusedInUse); once an administrator
// forces the release it is gone.
func TestReleaseWaitShownOnMemory(t *testing.T) {
	env := apitest.NewServer(t, apitest.Options{ReleaseTimeout: 200 * time.Millisecond})
	chunk := reserve(t, env.Host0, 256, nil)
	conn := connect(t, env.Host0, chunk, 0)
	tag := strings.ToLower(get(env.Host0.GetOK(chunk), "Oem", "CxlPool", "Tag").(string))
	action := systemURI(0) + "/Actions/Oem/CxlPool.HostReport"
	mem := systemURI(0) + "/Memory/" + chunk[strings.LastIndex(chunk, "/")+1:]
	wantStatus(t, "in use", env.Host0.Post(action, hostReport(tag, report.StateInUse, true)), http.StatusNoContent, "")

	env.App.Box.Host(0).SetPolicy(sim.Policy{Mode: sim.NeverAnswer}) // the host does not let go
	r := env.Admin.Delete(conn)
	if r.Status != http.StatusAccepted {
		t.Fatalf("DELETE %s: %s, want 202", conn, r)
	}
	task := r.Header.Get("Location")
	deadline := time.Now().Add(20 * time.Second)
	for get(env.Admin.GetOK(mem), "Status", "State") != "Disabled" {
		if time.Now().After(deadline) {
			t.Fatalf("Memory never shown Disabled while released: %v", env.Admin.GetOK(mem))
		}
		time.Sleep(5 * time.Millisecond)
	}
	wantStatus(t, "refused", env.Host0.Post(action, hostReport(tag, report.StateReleaseRefused, true)), http.StatusNoContent, "")
	got := env.Admin.Get(mem)
	apitest.Validate(t, got.Body)
	m := got.JSON(t)
	if get(m, "Enabled") != false || get(m, "Oem", "CxlPool", "Host", "State") != "ReleaseRefusedInUse" {
		t.Errorf("Memory of a release that waits: Enabled %v, Host %v; want false, ReleaseRefusedInUse",
			get(m, "Enabled"), get(m, "Oem", "CxlPool", "Host"))
	}
	if ms := members(t, env.Host0, systemURI(0)+"/Memory"); !slices.Contains(ms, mem) {
		t.Errorf("Memory collection %v lacks %s while it is being released", ms, mem)
	}
	if tr := env.Admin.Get(task); tr.Status != http.StatusAccepted || get(tr.JSON(t), "TaskState") != "Running" {
		t.Errorf("release task monitor: %s; want 202, Running while the host's program maps the memory", tr)
	}

	f := env.Admin.Post(conn+"/Actions/Oem/CxlPool.ForceRelease", map[string]any{})
	if f.Status != http.StatusAccepted {
		t.Fatalf("force: %s, want 202", f)
	}
	waitTask(t, env.Admin, f.Header.Get("Location"))
	waitTask(t, env.Admin, task)
	wantStatus(t, "memory after the forced release", env.Admin.Get(mem), http.StatusNotFound, "ResourceNotFound")
}
