package api_test

import (
	"net/http"
	"strings"
	"testing"

	"cxlpool/api/apitest"
)

// TestRefusalsNameTheRule: each refusal of a capacity request says which
// rule refused it and, where one exists, what would work.
func TestRefusalsNameTheRule(t *testing.T) {
	env := apitest.NewServer(t)
	a := env.Admin
	plain := reserve(t, a, blockMiB, nil) // region 0: not sharable
	connect(t, a, plain, 1)
	if r := a.Patch(systemURI(3), map[string]any{"Oem": map[string]any{"CxlPool": map[string]any{"QuotaMiB": 2 * blockMiB}}}); r.Status != http.StatusOK {
		t.Fatalf("quota: %s", r)
	}
	big := reserve(t, a, 3*blockMiB, nil)

	for _, tc := range []struct {
		name   string
		do     func() *apitest.Response
		status int
		id     string
		want   []string // in the Resolution
	}{
		{"size not a block multiple", func() *apitest.Response {
			return a.Post(chunksURI, map[string]any{"MemoryChunkSizeMiB": 3})
		}, http.StatusBadRequest, "Base.1.22.PropertyValueIncorrect", []string{"multiples of 256 MiB", "Use 256 MiB"}},
		{"size between multiples", func() *apitest.Response {
			return a.Post(chunksURI, map[string]any{"MemoryChunkSizeMiB": 300})
		}, http.StatusBadRequest, "Base.1.22.PropertyValueIncorrect", []string{"Use 256 MiB or 512 MiB"}},
		{"larger than one region", func() *apitest.Response {
			return a.Post(chunksURI, map[string]any{"MemoryChunkSizeMiB": 600 << 10})
		}, http.StatusConflict, "Base.1.22.ResourceExhaustion", []string{"A chunk lies in one DC region",
			"region 0 (not sharable) has 523264 MiB free", "The largest chunk that fits now is 523264 MiB (region 0)"}},
		{"sharing a chunk of a region that is not", func() *apitest.Response {
			return a.Post(connectionsURI, connectBody(plain, 2))
		}, http.StatusConflict, "Base.1.22.PropertyValueResourceConflict", []string{"region 0, which is not sharable",
			"Host1 holds it", "Release it from Host1 first", "--shared"}},
		{"over the host's quota", func() *apitest.Response {
			return a.Post(connectionsURI, connectBody(big, 3))
		}, http.StatusConflict, "Base.1.22.CreateLimitReachedForResource", []string{"Host3's quota (Oem.CxlPool.QuotaMiB of /redfish/v1/Systems/Host3) is 512 MiB",
			"768 MiB more does not fit (at most 512 MiB would)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.do()
			if r.Status != tc.status {
				t.Fatalf("got %s, want %d", r, tc.status)
			}
			apitest.Validate(t, r.Body)
			info, _ := r.JSON(t)["error"].(map[string]any)["@Message.ExtendedInfo"].([]any)
			if len(info) == 0 {
				t.Fatalf("no @Message.ExtendedInfo in %s", r)
			}
			m := info[0].(map[string]any)
			res, _ := m["Resolution"].(string)
			if m["MessageId"] != tc.id {
				t.Errorf("MessageId %v, want %s", m["MessageId"], tc.id)
			}
			for _, w := range tc.want {
				if !strings.Contains(res, w) {
					t.Errorf("Resolution %q lacks %q", res, w)
				}
			}
		})
	}
}
