package api_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/api/apitest"
)

// TestFilterQuery: $filter keeps the members of a collection that match,
// counts only them, pages them with a nextLink that keeps the filter, and
// combines with $expand and $select.
func TestFilterQuery(t *testing.T) {
	env := apitest.NewServer(t)
	const accounts = "/redfish/v1/AccountService/Accounts"
	userNames := func(q string) ([]string, map[string]any) {
		t.Helper()
		body := env.Admin.GetOK(accounts + "?$expand=.&" + q)
		var names []string
		for _, m := range body["Members"].([]any) {
			names = append(names, m.(map[string]any)["UserName"].(string))
		}
		slices.Sort(names)
		return names, body
	}
	for _, tc := range []struct {
		filter string
		want   []string
	}{
		{"RoleId eq 'HostUser'", []string{apitest.UserHost0, apitest.UserHost1}},
		{"RoleId eq 'Administrator' or RoleId eq 'ReadOnly'", []string{"admin", apitest.UserReadOnly}},
		{"not (RoleId eq 'HostUser') and UserName ne 'admin'", []string{apitest.UserOperator, apitest.UserReadOnly}},
		{"Oem/CxlPool/SystemId eq 'Host1'", []string{apitest.UserHost1}},
		{"UserName eq 'nobody'", nil},
	} {
		got, body := userNames("$filter=" + url.QueryEscape(tc.filter))
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("$filter=%s (-want +got):\n%s", tc.filter, diff)
		}
		if n := body["Members@odata.count"]; n != float64(len(tc.want)) {
			t.Errorf("$filter=%s: Members@odata.count %v, want %d", tc.filter, n, len(tc.want))
		}
	}

	// Paging a filtered collection: the nextLink carries the filter.
	f := url.QueryEscape("RoleId ne 'Administrator'")
	first := env.Admin.GetOK(accounts + "?$top=3&$filter=" + f)
	if n := len(first["Members"].([]any)); n != 3 || first["Members@odata.count"] != float64(4) {
		t.Fatalf("first page: %d members of %v, want 3 of 4", n, first["Members@odata.count"])
	}
	next, _ := first["Members@odata.nextLink"].(string)
	second := env.Admin.GetOK(next)
	if n := len(second["Members"].([]any)); n != 1 {
		t.Errorf("page at %s: %d members, want 1", next, n)
	}

	// $select applies to the filtered, expanded members.
	// (Not GetOK: a $select answer leaves out required properties.)
	sel := env.Admin.Get(accounts + "?$expand=.&$select=UserName&$filter=" + url.QueryEscape("UserName eq 'admin'"))
	var selBody struct{ Members []map[string]any }
	_ = json.Unmarshal(sel.Body, &selBody)
	if m := selBody.Members; sel.Status != http.StatusOK || len(m) != 1 || m[0]["RoleId"] != nil || m[0]["UserName"] != "admin" {
		t.Errorf("$select with $filter: got %s, want only admin's UserName", sel)
	}

	// A host user filters only what it may see.
	r := env.Host0.Get("/redfish/v1/Systems?$filter=" + url.QueryEscape("Id eq 'Host1'"))
	var hostView map[string]any
	_ = json.Unmarshal(r.Body, &hostView)
	if r.Status != http.StatusOK || hostView["Members@odata.count"] != float64(0) {
		t.Errorf("Host0 filtering for Host1: got %s, want 200 with no members", r)
	}
}
