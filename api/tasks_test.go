package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v4"

	"cxlpool/api"
	"cxlpool/api/apitest"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
)

// taskRoute registers a test resource whose POST starts a task that
// waits for release and then ends with err (or 204). Started tasks are
// sent on the returned channel.
func taskRoute(env *apitest.Env, path string, err error, release <-chan struct{}) <-chan *redfish.Task {
	started := make(chan *redfish.Task, 4)
	env.Server.Handle(http.MethodPost, path, redfish.PrivConfigureComponents|redfish.PrivHostCapacity, func(c echo.Context) error {
		var host *redfish.HostID
		if p := redfish.PrincipalOf(c); p.HostID != nil {
			host = p.HostID
		}
		t := env.Server.StartTask(c, redfish.TaskOptions{Name: "test job", Host: host,
			Target: redfish.Target{Type: "Connection", ID: "7", URI: "/redfish/v1/Fabrics/CXL/Connections/7"}},
			func(ctx context.Context, t *redfish.Task) (redfish.TaskResult, error) {
				t.SetPercent(50)
				select {
				case <-release:
				case <-ctx.Done():
					return redfish.TaskResult{}, ctx.Err()
				}
				return redfish.TaskResult{Status: http.StatusNoContent}, err
			})
		started <- t
		return env.Server.Accepted(c, t)
	})
	return started
}

// TestTasks: 202 with a task monitor, the monitor and Task while running
// and after, failures as Exception with the registry message, and host
// isolation of tasks.
func TestTasks(t *testing.T) {
	env := apitest.NewServer(t)
	release := make(chan struct{})
	okTasks := taskRoute(env, "/redfish/v1/Oem/CxlPool/TestOK", nil, release)
	badTasks := taskRoute(env, "/redfish/v1/Oem/CxlPool/TestRejected", dcd.ErrHostRejected, release)
	busyTasks := taskRoute(env, "/redfish/v1/Oem/CxlPool/TestBusy", fmt.Errorf("add: %w", dcd.ErrDeviceBusy), release)

	r := env.Host0.Post("/redfish/v1/Oem/CxlPool/TestOK", map[string]any{})
	wantStatus(t, "start", r, http.StatusAccepted, "")
	apitest.Validate(t, r.Body)
	task := <-okTasks
	mon := r.Header.Get("Location")
	if mon != task.MonitorURI() || !strings.HasPrefix(mon, "/redfish/v1/TaskService/TaskMonitors/") {
		t.Fatalf("Location %q, want the task monitor %q", mon, task.MonitorURI())
	}
	wantStatus(t, "monitor while running", env.Host0.Get(mon), http.StatusAccepted, "")
	running := env.Host0.GetOK(task.URI())
	if running["TaskState"] != "Running" || running["PercentComplete"] != float64(50) {
		t.Errorf("running task: state %v, percent %v", running["TaskState"], running["PercentComplete"])
	}
	wantStatus(t, "other host's task", env.Host1.Get(task.URI()), http.StatusNotFound, "ResourceNotFound")
	wantStatus(t, "other host's monitor", env.Host1.Get(mon), http.StatusNotFound, "ResourceNotFound")
	if n := env.Host1.GetOK("/redfish/v1/TaskService/Tasks")["Members@odata.count"]; n != float64(0) {
		t.Errorf("host1 sees %v tasks, want 0", n)
	}
	env.Admin.GetOK(task.URI())

	rb := env.Operator.Post("/redfish/v1/Oem/CxlPool/TestRejected", map[string]any{})
	bad := <-badTasks
	rbusy := env.Operator.Post("/redfish/v1/Oem/CxlPool/TestBusy", map[string]any{})
	busy := <-busyTasks
	close(release)
	<-task.Done()
	<-bad.Done()
	<-busy.Done()

	wantStatus(t, "monitor after success", env.Host0.Get(mon), http.StatusNoContent, "")
	done := env.Host0.GetOK(task.URI())
	if done["TaskState"] != "Completed" || done["PercentComplete"] != float64(100) || done["EndTime"] == nil {
		t.Errorf("completed task: %v", done)
	}
	if ids := messageIDs(done); !slices.Contains(ids, "TaskEvent.1.0.TaskCompletedOK") {
		t.Errorf("completed task messages %v, want TaskCompletedOK", ids)
	}

	wantStatus(t, "monitor after rejection", env.Operator.Get(rb.Header.Get("Location")), http.StatusConflict, "GeneralError")
	failed := env.Operator.GetOK(bad.URI())
	if failed["TaskState"] != "Exception" || failed["TaskStatus"] != "Critical" {
		t.Errorf("failed task: state %v status %v", failed["TaskState"], failed["TaskStatus"])
	}
	if ids := messageIDs(failed); !slices.Contains(ids, "TaskEvent.1.0.TaskAborted") || !slices.Contains(ids, "Base.1.22.GeneralError") {
		t.Errorf("failed task messages %v", ids)
	}
	br := env.Operator.Get(rbusy.Header.Get("Location"))
	wantStatus(t, "monitor after busy", br, http.StatusServiceUnavailable, "ServiceTemporarilyUnavailable")
	if br.Header.Get("Retry-After") == "" {
		t.Error("busy: no Retry-After")
	}
	env.Admin.GetOK("/redfish/v1/TaskService/Tasks?$expand=.")
}

func messageIDs(task map[string]any) []string {
	var ids []string
	for _, m := range task["Messages"].([]any) {
		ids = append(ids, m.(map[string]any)["MessageId"].(string))
	}
	return ids
}

// sse reads an event stream; events arrive on the channel.
func sse(t *testing.T, env *apitest.Env, c *apitest.Client) <-chan map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, env.HTTP.URL+"/redfish/v1/EventService/SSE", nil)
	req.Header.Set("X-Auth-Token", c.Token)
	resp, err := env.HTTP.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("SSE: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	ch := make(chan map[string]any, 64)
	rd := bufio.NewReader(resp.Body)
	// The stream opens with a comment: after it, the server has
	// subscribed, so later events reach this stream.
	if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, ":") {
		t.Fatalf("SSE first line %q, %v", line, err)
	}
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				var ev map[string]any
				if json.Unmarshal([]byte(data), &ev) == nil {
					apitest.Validate(t, []byte(data))
					ch <- ev
				}
			}
		}
	}()
	return ch
}

// next returns the next event whose first record has messageID.
func next(t *testing.T, ch <-chan map[string]any, messageID string) map[string]any {
	t.Helper()
	for ev := range ch {
		rec := ev["Events"].([]any)[0].(map[string]any)
		if rec["MessageId"] == messageID {
			return rec
		}
	}
	t.Fatalf("stream ended before %s", messageID)
	return nil
}

// TestEvents: capacity changes and API changes reach SSE streams (with
// host isolation), push subscriptions (with retry) and the event log.
func TestEvents(t *testing.T) {
	env := apitest.NewServer(t)
	admin := sse(t, env, env.Admin)
	host0 := sse(t, env, env.Host0)
	host1 := sse(t, env, env.Host1)

	got := make(chan map[string]any, 16)
	var fails atomic.Int32
	fails.Store(1)
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev map[string]any
		b, _ := io.ReadAll(r.Body)
		if fails.Add(-1) >= 0 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		if json.Unmarshal(b, &ev) == nil {
			got <- ev
		}
	}))
	defer dest.Close()
	for _, tc := range []struct {
		body map[string]any
		code int
		msg  string
	}{
		{map[string]any{"Destination": "ftp://example.com/x", "Protocol": "Redfish"}, http.StatusBadRequest, "PropertyValueFormatError"},
		{map[string]any{"Destination": dest.URL, "Protocol": "SNMPv3"}, http.StatusBadRequest, "PropertyValueNotInList"},
		{map[string]any{"Destination": dest.URL}, http.StatusBadRequest, "PropertyMissing"},
	} {
		wantStatus(t, fmt.Sprint(tc.body), env.Admin.Post("/redfish/v1/EventService/Subscriptions", tc.body), tc.code, tc.msg)
	}
	sr := env.Admin.Post("/redfish/v1/EventService/Subscriptions", map[string]any{
		"Destination": dest.URL, "Protocol": "Redfish", "Context": "ctx-1", "RegistryPrefixes": []string{"ResourceEvent"}})
	wantStatus(t, "subscribe", sr, http.StatusCreated, "")
	apitest.Validate(t, sr.Body)
	sub := sr.Header.Get("Location")
	env.Admin.GetOK(sub)
	env.Admin.GetOK("/redfish/v1/EventService/Subscriptions?$expand=.")

	// A capacity change in the manager.
	chunk, err := env.App.Manager.Reserve(context.Background(), dcd.ReserveRequest{Size: 256 << 20, Region: -1})
	if err != nil {
		t.Fatal(err)
	}
	rec := next(t, admin, "ResourceEvent.1.4.ResourceCreated")
	if o := rec["OriginOfCondition"].(map[string]any)["@odata.id"]; o != api.ChunkURI(chunk.ID) {
		t.Errorf("OriginOfCondition %v, want %s", o, api.ChunkURI(chunk.ID))
	}
	pushed := <-got // after one failed attempt
	if pushed["Context"] != "ctx-1" {
		t.Errorf("pushed event Context = %v", pushed["Context"])
	}
	apitest.Validate(t, mustJSON(t, pushed))

	// A host's task: its host sees it, the other host does not.
	release := make(chan struct{})
	close(release)
	started := taskRoute(env, "/redfish/v1/Oem/CxlPool/Job", nil, release)
	env.Host0.Post("/redfish/v1/Oem/CxlPool/Job", map[string]any{})
	task := <-started
	<-task.Done()
	next(t, host0, "TaskEvent.1.0.TaskCompletedOK")
	next(t, admin, "TaskEvent.1.0.TaskCompletedOK")
	// Then an appliance-wide change, which hosts do not see either.
	env.Admin.Patch("/redfish/v1/SessionService", map[string]any{"SessionTimeout": 900})
	next(t, admin, "ResourceEvent.1.4.ResourceChanged")
	wantStatus(t, "unsubscribe", env.Admin.Delete(sub), http.StatusNoContent, "")
	wantStatus(t, "gone", env.Admin.Get(sub), http.StatusNotFound, "ResourceNotFound")

	// Close the streams (Close ends them) and check what host1 saw.
	env.Server.Close()
	for ev := range host1 {
		t.Errorf("host1 saw an event not about its host: %v", ev)
	}
	for range host0 {
	}
	for range admin {
	}
}

// TestEventLog: events land in the EventLog with their registry message.
func TestEventLog(t *testing.T) {
	env := apitest.NewServer(t)
	env.Admin.Patch("/redfish/v1/SessionService", map[string]any{"SessionTimeout": 900})
	log := env.Admin.GetOK("/redfish/v1/Managers/FM/LogServices/EventLog/Entries?$expand=.")
	var ids []string
	for _, m := range log["Members"].([]any) {
		ids = append(ids, m.(map[string]any)["MessageId"].(string))
	}
	if !slices.Contains(ids, "ResourceEvent.1.4.ResourceChanged") || !slices.Contains(ids, "ResourceEvent.1.4.ResourceCreated") {
		t.Errorf("event log MessageIds %v, want ResourceCreated (accounts) and ResourceChanged", ids)
	}
	first := log["Members"].([]any)[0].(map[string]any)["@odata.id"].(string)
	env.Admin.GetOK(first)
	wantStatus(t, "clear", env.Admin.Post("/redfish/v1/Managers/FM/LogServices/EventLog/Actions/LogService.ClearLog", map[string]any{}),
		http.StatusNoContent, "")
	if n := env.Admin.GetOK("/redfish/v1/Managers/FM/LogServices/EventLog/Entries")["Members@odata.count"]; n != float64(0) {
		t.Errorf("entries after ClearLog: %v", n)
	}
	wantStatus(t, "cleared entry", env.Admin.Get(first), http.StatusNotFound, "ResourceNotFound")
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
