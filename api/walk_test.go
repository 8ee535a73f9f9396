package api_test

import (
	"net/http"
	"testing"

	"cxlpool/api/apitest"
)

// TestWalkValidates follows every link from ServiceRoot as the admin and
// validates each resource against its DMTF schema.
func TestWalkValidates(t *testing.T) {
	env := apitest.NewServer(t)
	seen := map[string]bool{}
	queue := []string{"/redfish/v1"}
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		if seen[u] {
			continue
		}
		seen[u] = true
		r := env.Admin.Get(u)
		if r.Status != http.StatusOK {
			t.Errorf("GET %s: got %d, want 200: %s", u, r.Status, r.Body)
			continue
		}
		apitest.Validate(t, r.Body)
		for _, l := range apitest.Links(r.Body) {
			if !seen[l] {
				queue = append(queue, l)
			}
		}
	}
	t.Logf("walked %d resources", len(seen))
}
