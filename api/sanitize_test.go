package api_test

import (
	"net/http"
	"strings"
	"testing"

	"cxlpool/api/apitest"
	"cxlpool/sim"
)

// TestRegionThatDoesNotSanitize: region 0's Sanitize on Release is off and
// fixed. The MemoryDomain says so beside the region, and a chunk there is
// refused with the rule, as a client's request that cannot be served (400),
// not a server fault.
func TestRegionThatDoesNotSanitize(t *testing.T) {
	env := apitest.NewServer(t, apitest.Options{Sim: func(c *sim.Config) {
		c.SanitizeOnRelease = []bool{false, true}
		c.SoRConfigurable = []bool{false, true}
	}})
	const rule = "region 0 does not sanitize capacity a host releases itself (Sanitize on Release is off and the device does not let it be changed), so no new chunk is placed in it"
	dom := env.Admin.GetOK("/redfish/v1/Chassis/Pool/MemoryDomains/Pool")
	for i, want := range []struct {
		sor     bool
		refused any
	}{{false, rule}, {true, nil}} {
		r := get(dom, "Oem", "CxlPool", "Regions", i)
		if got := get(r, "SanitizeOnRelease"); got != want.sor {
			t.Errorf("region %d SanitizeOnRelease: got %v, want %v", i, got, want.sor)
		}
		if got := get(r, "AllocationRefused"); got != want.refused {
			t.Errorf("region %d AllocationRefused: got %v, want %v", i, got, want.refused)
		}
	}
	resp := env.Admin.Post(chunksURI, map[string]any{"MemoryChunkSizeMiB": blockMiB, "AddressRangeType": "Volatile",
		"Oem": map[string]any{"CxlPool": map[string]any{"Region": 0}}})
	if resp.Status != http.StatusBadRequest || !strings.Contains(string(resp.Body), rule) {
		t.Errorf("chunk in region 0: got %s, want 400 naming the rule", resp)
	}
	reserve(t, env.Admin, blockMiB, map[string]any{"Region": 1})
}
