package api_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/api"
	"cxlpool/api/apitest"
	"cxlpool/image/manifest"
	imgupdate "cxlpool/image/update"
)

// Activate is the fake's slot switch, with the real one's rules: the
// running slot cancels a trial; another slot must be ready and at least
// the running slot's security version (the box's floor once committed);
// nothing while the running slot is itself on trial.
func (f *fakeUpdater) Activate(slot string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	run := slices.IndexFunc(f.slots, func(s imgupdate.SlotStatus) bool { return s.Running })
	i := slices.IndexFunc(f.slots, func(s imgupdate.SlotStatus) bool { return s.Slot == slot })
	switch {
	case i < 0:
		return fmt.Errorf("%w: %q", imgupdate.ErrUnknownSlot, slot)
	case f.slots[run].Trial:
		return imgupdate.ErrTrialPending
	case i == run:
		for j := range f.slots {
			f.slots[j].Trial = false
		}
		return nil
	case f.slots[i].State != imgupdate.StateReady:
		return fmt.Errorf("slot %s is %s: %w", slot, f.slots[i].State, imgupdate.ErrSlotNotReady)
	case f.slots[i].SecurityVersion < f.slots[run].SecurityVersion:
		return fmt.Errorf("update: slot %s: %w", slot, manifest.ErrRollback)
	}
	f.slots[i].Trial = true
	return nil
}

func (f *fakeUpdater) setSlot(i int, info imgupdate.SlotInfo, trial bool) {
	f.mu.Lock()
	f.slots[i].SlotInfo, f.slots[i].Trial = info, trial
	f.mu.Unlock()
}

const (
	managerPath = "/redfish/v1/Managers/FM"
	imageA      = api.FirmwareInventoryURI + "/Image-A"
	imageB      = api.FirmwareInventoryURI + "/Image-B"
)

func activeImage(uri string) map[string]any {
	return map[string]any{"Links": map[string]any{"ActiveSoftwareImage": map[string]any{"@odata.id": uri}}}
}

// trialOf is the slot Id on trial ("" for none), from FirmwareInventory.
func trialOf(t *testing.T, c *apitest.Client) string {
	t.Helper()
	for _, id := range []string{"Image-A", "Image-B"} {
		o := c.GetOK(api.FirmwareInventoryURI + "/" + id)
		if o["Oem"].(map[string]any)["CxlPool"].(map[string]any)["Trial"] == true {
			return id
		}
	}
	return ""
}

// TestManagerActivateImage: the Manager links the running image and both
// slots; PATCH Links.ActiveSoftwareImage schedules the other slot, the
// running one cancels, and what the slots cannot do is refused with the
// reason, never a 5xx.
func TestManagerActivateImage(t *testing.T) {
	f := newFakeUpdater()
	env := updateEnv(t, f, nil)
	m := env.ReadOnly.GetOK(managerPath)
	links := m["Links"].(map[string]any)
	if diff := cmp.Diff(map[string]any{"@odata.id": imageA}, links["ActiveSoftwareImage"]); diff != "" {
		t.Errorf("ActiveSoftwareImage (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]any{map[string]any{"@odata.id": imageA}, map[string]any{"@odata.id": imageB}}, links["SoftwareImages"]); diff != "" {
		t.Errorf("SoftwareImages (-want +got):\n%s", diff)
	}
	if _, ok := m["Actions"]; ok {
		t.Errorf("Manager without a reboot hook offers actions: %v", m["Actions"])
	}

	ready := func(v string, sv uint64) imgupdate.SlotInfo {
		return imgupdate.SlotInfo{State: imgupdate.StateReady, Version: v, SecurityVersion: sv, Size: 4096}
	}
	steps := []struct {
		name      string
		b         imgupdate.SlotInfo // slot B before the request
		bTrial    bool
		aTrial    bool // the running slot A on trial
		uri       string
		status    int
		msg       string
		wantTrial string
	}{
		{"activate the pushed image", ready("2.0.0", 4), false, false, imageB, http.StatusOK, "", "Image-B"},
		{"again: no change", ready("2.0.0", 4), true, false, imageB + "/", http.StatusOK, "", "Image-B"},
		{"the running image cancels the trial", ready("2.0.0", 4), true, false, imageA, http.StatusOK, "", ""},
		{"roll back to an image of the same security version", ready("0.9.0", 3), false, false, imageB, http.StatusOK, "", "Image-B"},
		{"roll back below the floor", ready("0.8.0", 2), false, false, imageB, http.StatusBadRequest, "Update.1.3.ActivateFailed", ""},
		{"empty slot", imgupdate.SlotInfo{State: imgupdate.StateEmpty}, false, false, imageB, http.StatusConflict, "Update.1.3.ActivateFailed", ""},
		{"slot being written", imgupdate.SlotInfo{State: imgupdate.StateWriting, Version: "2.0.0"}, false, false, imageB, http.StatusConflict, "Update.1.3.ActivateFailed", ""},
		{"bad slot", imgupdate.SlotInfo{State: imgupdate.StateBad, Version: "2.0.0"}, false, false, imageB, http.StatusConflict, "Update.1.3.ActivateFailed", ""},
		{"the running image is on trial", ready("2.0.0", 4), false, true, imageB, http.StatusConflict, "Update.1.3.ActivateFailed", "Image-A"},
	}
	for _, st := range steps {
		f.setSlot(1, st.b, st.bTrial)
		f.setSlot(0, ready("1.0.0", 3), st.aTrial)
		r := env.Admin.Patch(managerPath, activeImage(st.uri))
		if r.Status != st.status || (st.msg != "" && !slices.Contains(r.MessageIDs(), st.msg)) {
			t.Errorf("%s: got %s, want %d %s", st.name, r, st.status, st.msg)
			continue
		}
		if r.Status == http.StatusOK {
			apitest.Validate(t, r.Body)
			if got := r.JSON(t)["Links"].(map[string]any)["ActiveSoftwareImage"]; !cmp.Equal(got, map[string]any{"@odata.id": imageA}) {
				t.Errorf("%s: ActiveSoftwareImage after the PATCH = %v, want the running %s", st.name, got, imageA)
			}
		} else {
			apitest.Validate(t, r.Body)
		}
		if got := trialOf(t, env.ReadOnly); got != st.wantTrial {
			t.Errorf("%s: slot on trial %q, want %q", st.name, got, st.wantTrial)
		}
	}
}

// TestManagerPatchRefused: who may PATCH the Manager, and what a bad
// request gets (4xx with the Base message, nothing changed).
func TestManagerPatchRefused(t *testing.T) {
	f := newFakeUpdater()
	f.setSlot(1, imgupdate.SlotInfo{State: imgupdate.StateReady, Version: "2.0.0", SecurityVersion: 4, Size: 1}, false)
	env := updateEnv(t, f, nil)
	plain := apitest.NewServer(t) // no image slots, no clock of its own
	tests := []struct {
		name   string
		env    *apitest.Env
		c      func(*apitest.Env) *apitest.Client
		body   any
		hdr    []string
		status int
		msg    string
	}{
		{"anonymous", env, func(e *apitest.Env) *apitest.Client { return e.Anon }, activeImage(imageB), nil, http.StatusUnauthorized, "Base.1.22.NoValidSession"},
		{"Operator", env, func(e *apitest.Env) *apitest.Client { return e.Operator }, activeImage(imageB), nil, http.StatusForbidden, "Base.1.22.InsufficientPrivilege"},
		{"ReadOnly", env, func(e *apitest.Env) *apitest.Client { return e.ReadOnly }, activeImage(imageB), nil, http.StatusForbidden, "Base.1.22.InsufficientPrivilege"},
		{"HostUser", env, func(e *apitest.Env) *apitest.Client { return e.Host0 }, activeImage(imageB), nil, http.StatusForbidden, "Base.1.22.InsufficientPrivilege"},
		{"not a firmware URI", env, admin, activeImage("/redfish/v1/Systems/Host0"), nil, http.StatusBadRequest, "Base.1.22.PropertyValueFormatError"},
		{"not a URI", env, admin, activeImage("Image-B"), nil, http.StatusBadRequest, "Base.1.22.PropertyValueFormatError"},
		{"firmware that is no image slot", env, admin, activeImage(api.FirmwareInventoryURI + "/FM"), nil, http.StatusBadRequest, "Base.1.22.PropertyValueNotInList"},
		{"no such image", env, admin, activeImage(api.FirmwareInventoryURI + "/Image-C"), nil, http.StatusNotFound, "Base.1.22.ResourceMissingAtURI"},
		{"link of the wrong type", env, admin, map[string]any{"Links": map[string]any{"ActiveSoftwareImage": imageB}}, nil, http.StatusBadRequest, "Base.1.22.PropertyValueTypeError"},
		{"link without @odata.id", env, admin, map[string]any{"Links": map[string]any{"ActiveSoftwareImage": map[string]any{}}}, nil, http.StatusBadRequest, "Base.1.22.PropertyMissing"},
		{"null link", env, admin, map[string]any{"Links": map[string]any{"ActiveSoftwareImage": nil}}, nil, http.StatusBadRequest, "Base.1.22.PropertyValueTypeError"},
		{"SoftwareImages", env, admin, map[string]any{"Links": map[string]any{"SoftwareImages": []any{}}}, nil, http.StatusBadRequest, "Base.1.22.PropertyNotWritable"},
		{"read-only property", env, admin, map[string]any{"FirmwareVersion": "9"}, nil, http.StatusBadRequest, "Base.1.22.PropertyNotWritable"},
		{"unknown property", env, admin, map[string]any{"Bogus": 1}, nil, http.StatusBadRequest, "Base.1.22.PropertyUnknown"},
		{"stale If-Match", env, admin, activeImage(imageB), []string{"If-Match", `W/"0123456789abcdef01234567"`}, http.StatusPreconditionFailed, "Base.1.22.PreconditionFailed"},
		{"image off the image", plain, admin, activeImage(imageB), nil, http.StatusBadRequest, "Base.1.22.PropertyNotWritable"},
		{"DateTime off the image", plain, admin, map[string]any{"DateTime": "2026-01-02T03:04:05Z"}, nil, http.StatusBadRequest, "Base.1.22.PropertyNotWritable"},
		{"offset not +HH:MM", plain, admin, map[string]any{"DateTimeLocalOffset": "+5"}, nil, http.StatusBadRequest, "Base.1.22.PropertyValueFormatError"},
		{"offset out of range", plain, admin, map[string]any{"DateTimeLocalOffset": "+15:00"}, nil, http.StatusBadRequest, "Base.1.22.PropertyValueOutOfRange"},
		{"offset null", plain, admin, map[string]any{"DateTimeLocalOffset": nil}, nil, http.StatusBadRequest, "Base.1.22.PropertyValueTypeError"},
		{"a bad offset changes nothing else", env, admin, map[string]any{"DateTimeLocalOffset": "x", "Links": map[string]any{"ActiveSoftwareImage": map[string]any{"@odata.id": imageB}}},
			nil, http.StatusBadRequest, "Base.1.22.PropertyValueFormatError"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.c(tt.env).Do(http.MethodPatch, managerPath, tt.body, tt.hdr...)
			if r.Status != tt.status || !slices.Contains(r.MessageIDs(), tt.msg) {
				t.Errorf("got %s, want %d %s", r, tt.status, tt.msg)
			}
			if tt.env == env {
				if got := trialOf(t, env.Admin); got != "" {
					t.Errorf("slot %s on trial after a refused request", got)
				}
			}
		})
	}
}

func admin(e *apitest.Env) *apitest.Client { return e.Admin }

// TestManagerDateTime: DateTime goes to the SetTime hook; the local
// offset is kept and DateTime shown in it; If-Match tolerates the clock
// having ticked, not a real change.
func TestManagerDateTime(t *testing.T) {
	var mu sync.Mutex
	var set []time.Time
	env := apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) {
		c.SetTime = func(_ context.Context, at time.Time) error {
			mu.Lock()
			set = append(set, at)
			mu.Unlock()
			return nil
		}
	}})
	const uri = managerPath
	tests := []struct {
		name   string
		body   map[string]any
		status int
		msg    string
	}{
		{"DateTime", map[string]any{"DateTime": "2026-01-02T03:04:05+01:00"}, http.StatusOK, ""},
		{"DateTime not RFC 3339", map[string]any{"DateTime": "2 Jan 2026"}, http.StatusBadRequest, "Base.1.22.PropertyValueFormatError"},
		{"DateTime too early", map[string]any{"DateTime": "1999-12-31T23:59:59Z"}, http.StatusBadRequest, "Base.1.22.PropertyValueOutOfRange"},
		{"DateTime not a string", map[string]any{"DateTime": 1700000000}, http.StatusBadRequest, "Base.1.22.PropertyValueTypeError"},
		{"offset", map[string]any{"DateTimeLocalOffset": "+05:30"}, http.StatusOK, ""},
	}
	for _, tt := range tests {
		r := env.Admin.Patch(uri, tt.body)
		if r.Status != tt.status || (tt.msg != "" && !slices.Contains(r.MessageIDs(), tt.msg)) {
			t.Errorf("%s: got %s, want %d %s", tt.name, r, tt.status, tt.msg)
		}
	}
	mu.Lock()
	want := []time.Time{time.Date(2026, 1, 2, 2, 4, 5, 0, time.UTC)}
	if diff := cmp.Diff(want, set, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
		t.Errorf("times set (-want +got):\n%s", diff)
	}
	mu.Unlock()

	m := env.ReadOnly.GetOK(uri)
	dt, err := time.Parse(time.RFC3339, m["DateTime"].(string))
	if err != nil || m["DateTimeLocalOffset"] != "+05:30" || !dt.Equal(env.Clock.Now()) || m["DateTime"].(string)[19:] != "+05:30" {
		t.Errorf("DateTime %v, DateTimeLocalOffset %v: want the clock (%s) shown at +05:30", m["DateTime"], m["DateTimeLocalOffset"], env.Clock.Now())
	}

	etag := env.Admin.Get(uri).Header.Get("ETag")
	env.Clock.Advance(5 * time.Second)
	if r := env.Admin.Patch(uri, map[string]any{"DateTimeLocalOffset": "+05:30"}, "If-Match", etag); r.Status != http.StatusOK {
		t.Errorf("If-Match of 5 s ago, nothing changed: got %s, want 200", r)
	}
	if r := env.Admin.Patch(uri, map[string]any{"DateTimeLocalOffset": "-03:00"}, "If-Match", etag); r.Status != http.StatusOK {
		t.Errorf("If-Match of 5 s ago, nothing changed: got %s, want 200", r)
	}
	if r := env.Admin.Patch(uri, map[string]any{"DateTimeLocalOffset": "+00:00"}, "If-Match", etag); r.Status != http.StatusPreconditionFailed {
		t.Errorf("If-Match from before the offset changed: got %s, want 412", r)
	}
	etag = env.Admin.Get(uri).Header.Get("ETag")
	env.Clock.Advance(2 * time.Minute)
	if r := env.Admin.Patch(uri, map[string]any{"DateTimeLocalOffset": "+00:00"}, "If-Match", etag); r.Status != http.StatusPreconditionFailed {
		t.Errorf("If-Match of 2 min ago: got %s, want 412", r)
	}
}

// TestManagerReset: the action exists with the reboot hook only, answers
// before rebooting, refuses what it does not do, and waits (as an
// activation does) for a push being written.
func TestManagerReset(t *testing.T) {
	const target = "/redfish/v1/Managers/FM/Actions/Manager.Reset"
	plain := apitest.NewServer(t)
	if r := plain.Admin.Post(target, map[string]any{}); r.Status != http.StatusNotFound {
		t.Errorf("reset without a reboot hook: got %s, want 404", r)
	}

	f := newFakeUpdater()
	f.hold = make(chan struct{})
	reboots := make(chan struct{}, 4)
	env := updateEnv(t, f, func(context.Context) error { reboots <- struct{}{}; return nil })
	act := env.ReadOnly.GetOK(managerPath)["Actions"].(map[string]any)["#Manager.Reset"]
	want := map[string]any{"target": target, "ResetType@Redfish.AllowableValues": []any{"GracefulRestart", "ForceRestart"}}
	if diff := cmp.Diff(want, act); diff != "" {
		t.Errorf("Manager.Reset action (-want +got):\n%s", diff)
	}

	// A push being written holds resets and activations off.
	body, ct := pushBody(t, `{}`, image(3000))
	push := env.Admin.Do(http.MethodPost, api.UpdateUploadURI, body, "Content-Type", ct)
	if push.Status != http.StatusAccepted {
		t.Fatalf("push: got %s, want 202", push)
	}
	if r := env.Admin.Post(target, map[string]any{}); r.Status != http.StatusConflict {
		t.Errorf("reset during a push: got %s, want 409", r)
	}
	if r := env.Admin.Patch(managerPath, activeImage(imageA)); r.Status != http.StatusConflict || !slices.Contains(r.MessageIDs(), "Update.1.3.UpdateInProgress") {
		t.Errorf("activation during a push: got %s, want 409 UpdateInProgress", r)
	}
	close(f.hold)
	waitTask(t, env.Admin, push.Header.Get("Location"))

	tests := []struct {
		name   string
		c      *apitest.Client
		body   map[string]any
		status int
		msg    string
	}{
		{"ReadOnly", env.ReadOnly, map[string]any{}, http.StatusForbidden, "Base.1.22.InsufficientPrivilege"},
		{"Operator", env.Operator, map[string]any{}, http.StatusForbidden, "Base.1.22.InsufficientPrivilege"},
		{"HostUser", env.Host0, map[string]any{}, http.StatusForbidden, "Base.1.22.InsufficientPrivilege"},
		{"unsupported type", env.Admin, map[string]any{"ResetType": "On"}, http.StatusBadRequest, "Base.1.22.ActionParameterValueNotInList"},
		{"unknown parameter", env.Admin, map[string]any{"Delay": 3}, http.StatusBadRequest, "Base.1.22.PropertyUnknown"},
		{"default (graceful)", env.Admin, map[string]any{}, http.StatusNoContent, ""},
		{"ForceRestart", env.Admin, map[string]any{"ResetType": "ForceRestart"}, http.StatusNoContent, ""},
	}
	for _, tt := range tests {
		r := tt.c.Post(target, tt.body)
		if r.Status != tt.status || (tt.msg != "" && !slices.Contains(r.MessageIDs(), tt.msg)) {
			t.Errorf("%s: got %s, want %d %s", tt.name, r, tt.status, tt.msg)
		}
		if r.Status == http.StatusNoContent {
			<-reboots // the test would time out if the hook were never called
		}
	}
	select {
	case <-reboots:
		t.Error("a refused reset rebooted the box")
	default:
	}
}
