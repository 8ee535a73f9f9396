package fleetview_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/api"
	"cxlpool/api/apitest"
	"cxlpool/fleet"
)

// fakeFleet is a fleet plane the test sets the state and records of.
type fakeFleet struct {
	mu    sync.Mutex
	st    api.FleetStatus
	boxes []fleet.Inventory
}

func (f *fakeFleet) FleetStatus() api.FleetStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st
}

func (f *fakeFleet) FleetBoxes(context.Context) ([]fleet.Inventory, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.st.Connected() {
		return nil, api.ErrFleetNotJoined
	}
	return f.boxes, nil
}

func (f *fakeFleet) set(st api.FleetStatus) {
	f.mu.Lock()
	f.st = st
	f.mu.Unlock()
}

const gib = 1 << 30

// twoBoxes: box a has Host0 (8 GiB free), box b has Host0 and Host1 (4
// GiB free, an export server); b's Host1 is at its quota.
func twoBoxes() []fleet.Inventory {
	t0 := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	return []fleet.Inventory{
		{Box: "box-a", Serial: "0x000000000000000a", API: "https://a/redfish/v1", Health: fleet.HealthOK, Updated: t0,
			Heads:   []fleet.Head{{LD: 0, Host: "Host0", LinkUp: true}},
			Regions: []fleet.RegionCapacity{{Index: 0, Length: 16 * gib, BlockSize: gib, Free: 8 * gib, Reserved: 8 * gib, Granted: 8 * gib}}},
		{Box: "box-b", Serial: "0x000000000000000b", API: "https://b/redfish/v1", Export: "tcp://b:7000", Health: fleet.HealthOK, Updated: t0,
			Heads:   []fleet.Head{{LD: 0, Host: "Host0", LinkUp: true}, {LD: 1, Host: "Host1", LinkUp: true, Granted: 2 * gib, Quota: 2 * gib}},
			Regions: []fleet.RegionCapacity{{Index: 0, Length: 8 * gib, BlockSize: gib, Free: 4 * gib, Reserved: 4 * gib, Granted: 2 * gib}}},
	}
}

func fleetEnv(t *testing.T, f *fakeFleet) *apitest.Env {
	return apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) { c.Fleet = f }})
}

// TestFleetView: the fleet resource lists every box's record and the
// plane's state, validates against the OEM schema, and is for appliance
// roles only.
func TestFleetView(t *testing.T) {
	f := &fakeFleet{st: api.FleetStatus{State: "Connected", Box: "box-a", Servers: "nats://127.0.0.1:4222", Embedded: true}, boxes: twoBoxes()}
	env := fleetEnv(t, f)
	r := env.ReadOnly.Get(api.FleetURI)
	if r.Status != http.StatusOK {
		t.Fatalf("GET as a reader: %s", r)
	}
	apitest.Validate(t, r.Body)
	body := r.JSON(t)
	boxes, _ := body["Boxes"].([]any)
	if len(boxes) != 2 {
		t.Fatalf("boxes %v, want 2", body["Boxes"])
	}
	b := boxes[1].(map[string]any)
	got := map[string]any{"Box": b["Box"], "FreeMiB": b["FreeMiB"], "Export": b["Export"], "Heads": len(b["Heads"].([]any))}
	want := map[string]any{"Box": "box-b", "FreeMiB": float64(4096), "Export": "tcp://b:7000", "Heads": 2}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("box b (-want +got):\n%s", diff)
	}
	if h := body["Status"].(map[string]any)["Health"]; h != "OK" {
		t.Errorf("health %v, want OK while connected", h)
	}
	if h := env.Admin.GetOK("/redfish/v1/Managers/FM")["Status"].(map[string]any)["Health"]; h != "OK" {
		t.Errorf("manager health %v, want OK while connected", h)
	}
	if r := env.Host0.Get(api.FleetURI); r.Status != http.StatusForbidden {
		t.Errorf("GET as a host: %s, want 403", r)
	}
}

// TestFleetNotJoined: while the plane retries, the box serves, the
// Manager's Status is Warning with a Condition naming the reason, and the
// fleet resource shows the state; placement answers 503 (the box, not
// the client, is not ready).
func TestFleetNotJoined(t *testing.T) {
	f := &fakeFleet{}
	f.set(api.FleetStatus{State: "Retrying", Box: "box-a", Servers: "nats://127.0.0.1:4222", Embedded: true, Attempts: 3,
		LastError: "listen tcp 127.0.0.1:4222: bind: address already in use", Since: time.Now(), Next: time.Now().Add(time.Second)})
	env := fleetEnv(t, f)
	r := env.Admin.Get("/redfish/v1/Managers/FM")
	apitest.Validate(t, r.Body)
	st := r.JSON(t)["Status"].(map[string]any)
	conds, _ := st["Conditions"].([]any)
	if st["Health"] != "Warning" || len(conds) != 1 {
		t.Fatalf("manager status %v, want Warning with one condition", st)
	}
	c := conds[0].(map[string]any)
	if !containsSuffix([]string{c["MessageId"].(string)}, "Base.CouldNotEstablishConnection") ||
		!strings.Contains(c["Message"].(string), "address already in use") {
		t.Errorf("condition %v: want CouldNotEstablishConnection naming the reason", c)
	}
	r = env.Admin.Get(api.FleetURI)
	apitest.Validate(t, r.Body)
	body := r.JSON(t)
	plane := body["Plane"].(map[string]any)
	if plane["State"] != "Retrying" || !strings.Contains(plane["LastError"].(string), "in use") || body["Status"].(map[string]any)["Health"] != "Warning" {
		t.Errorf("fleet view while retrying: %v", body)
	}
	if r := env.Admin.Post(api.FleetPlaceURI, map[string]any{"Host": "Host0", "SizeMiB": 1024}); r.Status != http.StatusServiceUnavailable ||
		!containsSuffix(r.MessageIDs(), "Base.ServiceTemporarilyUnavailable") {
		t.Errorf("place while not joined: %s, want 503 ServiceTemporarilyUnavailable", r)
	}

	// Joined: the warning goes.
	f.set(api.FleetStatus{State: "Connected", Box: "box-a"})
	if h := env.Admin.GetOK("/redfish/v1/Managers/FM")["Status"].(map[string]any); h["Health"] != "OK" || h["Conditions"] != nil {
		t.Errorf("manager status once joined: %v", h)
	}
}

// TestFleetPlace: the placement action's answers and refusals.
func TestFleetPlace(t *testing.T) {
	f := &fakeFleet{st: api.FleetStatus{State: "Connected", Box: "box-a"}, boxes: twoBoxes()}
	env := fleetEnv(t, f)
	for _, tc := range []struct {
		name     string
		client   *apitest.Client
		body     map[string]any
		status   int
		msg      string   // for an error
		offers   []string // boxes, best first
		refusals int
	}{
		{"host on two boxes", env.Admin, map[string]any{"Host": "Host0", "SizeMiB": 2048}, http.StatusOK, "", []string{"box-a", "box-b"}, 0},
		{"one box's host", env.ReadOnly, map[string]any{"Host": "box-b/Host0", "SizeMiB": 2048}, http.StatusOK, "", []string{"box-b"}, 0},
		{"over quota", env.Admin, map[string]any{"Host": "Host1", "SizeMiB": 1024}, http.StatusOK, "", []string{}, 1},
		{"remote rack", env.Admin, map[string]any{"Host": "rack9", "SizeMiB": 1024}, http.StatusOK, "", []string{"box-b"}, 1},
		{"too big", env.Admin, map[string]any{"Host": "Host0", "SizeMiB": 10240}, http.StatusOK, "", []string{}, 2},
		{"zero size", env.Admin, map[string]any{"Host": "Host0", "SizeMiB": 0}, http.StatusBadRequest, "Base.PropertyValueOutOfRange", nil, 0},
		{"no size", env.Admin, map[string]any{"Host": "Host0"}, http.StatusBadRequest, "Base.PropertyMissing", nil, 0},
		{"bad box", env.Admin, map[string]any{"Host": "box.x/Host0", "SizeMiB": 1}, http.StatusBadRequest, "Base.PropertyValueFormatError", nil, 0},
		{"box without the host", env.Admin, map[string]any{"Host": "box-a/Host7", "SizeMiB": 1}, http.StatusBadRequest, "Base.PropertyValueNotInList", nil, 0},
		{"host role", env.Host0, map[string]any{"Host": "Host0", "SizeMiB": 1}, http.StatusForbidden, "Base.InsufficientPrivilege", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.client.Post(api.FleetPlaceURI, tc.body)
			if r.Status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.Status, tc.status, r)
			}
			apitest.Validate(t, r.Body)
			if tc.msg != "" {
				if ids := r.MessageIDs(); !containsSuffix(ids, tc.msg) {
					t.Errorf("messages %v, want %s", ids, tc.msg)
				}
				return
			}
			body := r.JSON(t)
			got := []string{}
			for _, o := range body["Offers"].([]any) {
				got = append(got, o.(map[string]any)["Box"].(string))
			}
			if diff := cmp.Diff(tc.offers, got); diff != "" {
				t.Errorf("offers (-want +got):\n%s", diff)
			}
			if n := len(body["Refusals"].([]any)); n != tc.refusals {
				t.Errorf("refusals %v, want %d", body["Refusals"], tc.refusals)
			}
		})
	}
}

// containsSuffix: MessageIds carry the registry version
// (Base.1.22.1.PropertyMissing); want is "Base.PropertyMissing".
func containsSuffix(ids []string, want string) bool {
	reg, key, _ := strings.Cut(want, ".")
	for _, id := range ids {
		if strings.HasPrefix(id, reg+".") && strings.HasSuffix(id, "."+key) {
			return true
		}
	}
	return false
}
