package api_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/api/apitest"
)

// sseMsg is one message of an event stream: its id and first record's
// MessageId and OriginOfCondition.
type sseMsg struct {
	ID, MessageID, Origin string
}

// openSSE opens the event stream as c with a Last-Event-ID (none if
// empty) and returns the response and a reader of its messages.
func openSSE(t *testing.T, env *apitest.Env, c *apitest.Client, lastID string) (*http.Response, func() sseMsg) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, env.HTTP.URL+"/redfish/v1/EventService/SSE", nil)
	req.Header.Set("X-Auth-Token", c.Token)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := env.HTTP.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	rd := bufio.NewReader(resp.Body)
	return resp, func() sseMsg {
		t.Helper()
		var m sseMsg
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				t.Fatalf("reading the event stream: %v", err)
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case strings.HasPrefix(line, "id: "):
				m.ID = line[len("id: "):]
			case strings.HasPrefix(line, "data: "):
				var ev struct {
					Events []struct {
						MessageID         string `json:"MessageId"`
						OriginOfCondition struct {
							ID string `json:"@odata.id"`
						}
					}
				}
				if err := json.Unmarshal([]byte(line[len("data: "):]), &ev); err != nil || len(ev.Events) == 0 {
					t.Fatalf("event %q: %v", line, err)
				}
				m.MessageID, m.Origin = ev.Events[0].MessageID, ev.Events[0].OriginOfCondition.ID
			case line == "" && m.ID != "":
				return m
			}
		}
	}
}

// TestSSELastEventID: a client that reconnects with Last-Event-ID gets
// the events it missed before new ones, once each; an id from an earlier
// run of the daemon replays this run's events; a malformed id is a
// client error.
func TestSSELastEventID(t *testing.T) {
	env := apitest.NewServer(t)
	create := func(name string) string {
		t.Helper()
		r := env.Admin.Post("/redfish/v1/AccountService/Accounts",
			map[string]any{"UserName": name, "Password": "password-12", "RoleId": "ReadOnly"})
		if r.Status != http.StatusCreated {
			t.Fatalf("create %s: got %d, want 201: %s", name, r.Status, r.Body)
		}
		return r.Header.Get("Location")
	}

	_, first := openSSE(t, env, env.Admin, "")
	u1 := create("replay1")
	m1 := first()
	if m1.Origin != u1 {
		t.Fatalf("first event: got origin %q, want %q", m1.Origin, u1)
	}
	u2, u3 := create("replay2"), create("replay3")

	// Reconnect after the first event: the two missed ones come first.
	_, again := openSSE(t, env, env.Admin, m1.ID)
	got := []string{again().Origin, again().Origin}
	if diff := cmp.Diff([]string{u2, u3}, got); diff != "" {
		t.Errorf("replayed after Last-Event-ID (-want +got):\n%s", diff)
	}
	u4 := create("replay4")
	if m := again(); m.Origin != u4 {
		t.Errorf("after the replay: got origin %q, want the live event %q", m.Origin, u4)
	}

	// An id from an earlier run (below this run's first id): all of this
	// run's events, starting with the oldest.
	_, earlier := openSSE(t, env, env.Admin, "1")
	// (The test environment's own accounts were created in this run too.)
	var origins []string
	for len(origins) == 0 || origins[len(origins)-1] != u4 {
		m := earlier()
		if strings.HasPrefix(m.Origin, "/redfish/v1/AccountService/Accounts/") {
			origins = append(origins, m.Origin)
		}
	}
	if diff := cmp.Diff([]string{u1, u2, u3, u4}, origins[max(0, len(origins)-4):]); diff != "" {
		t.Errorf("replay of an earlier run's id (-want +got):\n%s", diff)
	}

	for _, bad := range []string{"abc", "-2", "1.5"} {
		resp, _ := openSSE(t, env, env.Admin, bad)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("Last-Event-ID %q: got %d, want 400", bad, resp.StatusCode)
		}
	}
}
