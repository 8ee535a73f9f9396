package api_test

import (
	"testing"

	"cxlpool/api/apitest"
)

// A host account is not offered push subscriptions it may not use.
func TestEventServiceLinksByRole(t *testing.T) {
	env := apitest.NewServer(t)
	for _, tc := range []struct {
		name   string
		client *apitest.Client
		want   bool
	}{
		{"admin", env.Admin, true},
		{"read-only", env.ReadOnly, true},
		{"host", env.Host0, false},
	} {
		es := tc.client.GetOK("/redfish/v1/EventService")
		if _, got := es["Subscriptions"]; got != tc.want {
			t.Errorf("%s: EventService links Subscriptions = %v, want %v", tc.name, got, tc.want)
		}
		if es["ServerSentEventUri"] == nil {
			t.Errorf("%s: no ServerSentEventUri", tc.name)
		}
	}
}
