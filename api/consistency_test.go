package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/api"
	"cxlpool/api/apitest"
	"cxlpool/dcd"
)

const consistencyAction = "/redfish/v1/Managers/FM/Actions/Oem/CxlPool.CheckConsistency"

func TestCheckConsistencyAction(t *testing.T) {
	env := apitest.NewServer(t)
	chunk := reserve(t, env.Admin, 2*blockMiB, nil)
	connect(t, env.Admin, chunk, 0)

	acts := get(env.Admin.GetOK("/redfish/v1/Managers/FM"), "Actions", "Oem", "#CxlPool.CheckConsistency", "target")
	if acts != consistencyAction {
		t.Errorf("Manager Actions.Oem: target %v, want %s", acts, consistencyAction)
	}
	for _, c := range []*apitest.Client{env.Operator, env.ReadOnly, env.Host0} {
		wantStatus(t, "check as "+c.User, c.Post(consistencyAction, map[string]any{}), http.StatusForbidden, "InsufficientPrivilege")
	}
	wantStatus(t, "unknown parameter", env.Admin.Post(consistencyAction, map[string]any{"Deep": true}), http.StatusBadRequest, "")

	for _, body := range []any{map[string]any{}, nil} {
		r := env.Admin.Do(http.MethodPost, consistencyAction, body)
		if r.Status != http.StatusOK {
			t.Fatalf("check (body %v): got %s, want 200", body, r)
		}
		got := r.JSON(t)
		want := map[string]any{"Consistent": true, "Unsettled": float64(0), "Violations": []any{},
			"Checked": map[string]any{"Hosts": float64(8), "Chunks": float64(1), "Grants": float64(1), "Orphans": float64(0), "Exports": float64(0)}}
		delete(got, "Time")
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("report on a consistent pool (-want +got):\n%s", diff)
		}
	}

	// The ledger forgets the grant behind the Manager's back: the device
	// still holds it.
	ctx := context.Background()
	grants, err := env.App.Ledger.Grants(ctx, dcd.GrantFilter{Active: true})
	if err != nil || len(grants) != 1 {
		t.Fatalf("active grants: %v, %v", grants, err)
	}
	if _, err := env.App.Ledger.MarkLost(ctx, grants[0].ID, "forgotten by the test"); err != nil {
		t.Fatal(err)
	}
	r := env.Admin.Post(consistencyAction, map[string]any{})
	if r.Status != http.StatusOK {
		t.Fatalf("check: got %s, want 200", r)
	}
	got := r.JSON(t)
	if got["Consistent"] != false || get(got, "Violations", 0, "Rule") != dcd.RuleDeviceExplained {
		t.Errorf("report after the ledger lost a grant: %v, want a %s violation", got, dcd.RuleDeviceExplained)
	}
	if !logged(t, env, "ResourceEvent.1.4.ResourceErrorsDetected", api.DCDURI) {
		t.Errorf("no ResourceErrorsDetected event about the DCD after a check found violations")
	}
}

// TestConsistencyAtStartIsAnEvent: violations the daemon's own check found
// after reconcile become an event once the API runs.
func TestConsistencyAtStartIsAnEvent(t *testing.T) {
	env := apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) {
		c.StartCheck = func(context.Context) (dcd.InvariantReport, error) {
			return dcd.InvariantReport{Violations: []dcd.Violation{{Rule: dcd.RuleGrantOnDevice, Message: "grant 1 is not on the device"}}}, nil
		}
	}})
	eventuallyOK(t, "ResourceErrorsDetected in the EventLog", func() bool {
		return logged(t, env, "ResourceEvent.1.4.ResourceErrorsDetected", api.DCDURI)
	})
}
