package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/api/apitest"
)

// poolMiB is the virtual box's pool (1 TiB).
const poolMiB = 1 << 20

func quotaBody(v any) map[string]any {
	return map[string]any{"Oem": map[string]any{"CxlPool": map[string]any{"QuotaMiB": v}}}
}

// quotaOf is a system's Oem.CxlPool.QuotaMiB as the administrator reads it.
func quotaOf(t *testing.T, env *apitest.Env, h int) any {
	t.Helper()
	return get(env.Admin.GetOK(systemURI(h)), "Oem", "CxlPool", "QuotaMiB")
}

// TestSystemQuotaRoles: who may set a host's quota. Administrators and
// operators may; readers may not; a host account may not change its own
// (403) and does not see the others (404, as for GET).
func TestSystemQuotaRoles(t *testing.T) {
	env := apitest.NewServer(t)
	for i, tc := range []struct {
		who    string
		c      *apitest.Client
		host   int
		status int
		msg    string
	}{
		{"anonymous", env.Anon, 3, http.StatusUnauthorized, ""},
		{"administrator", env.Admin, 3, http.StatusOK, ""},
		{"operator", env.Operator, 3, http.StatusOK, ""},
		{"reader", env.ReadOnly, 3, http.StatusForbidden, "InsufficientPrivilege"},
		{"host0 on its own system", env.Host0, 0, http.StatusForbidden, "InsufficientPrivilege"},
		{"host0 on another host", env.Host0, 1, http.StatusNotFound, "ResourceNotFound"},
		{"host0 on a host that does not exist", env.Host0, 9, http.StatusNotFound, "ResourceNotFound"},
		{"administrator on a host that does not exist", env.Admin, 9, http.StatusNotFound, "ResourceNotFound"},
	} {
		want := 1024 * (i + 1)
		r := tc.c.Patch(systemURI(tc.host), quotaBody(want))
		wantStatus(t, tc.who, r, tc.status, tc.msg)
		apitest.Validate(t, r.Body)
		if tc.host > 7 {
			continue
		}
		got := quotaOf(t, env, tc.host)
		if tc.status == http.StatusOK {
			if q := get(r.JSON(t), "Oem", "CxlPool", "QuotaMiB"); q != float64(want) {
				t.Errorf("%s: answer's QuotaMiB %v, want %d", tc.who, q, want)
			}
			if got != float64(want) {
				t.Errorf("%s: Host%d QuotaMiB %v after the PATCH, want %d", tc.who, tc.host, got, want)
			}
		} else if tc.host != 3 && got != float64(0) {
			t.Errorf("%s: Host%d QuotaMiB %v after a refused PATCH, want 0", tc.who, tc.host, got)
		}
	}
	// The host reads its own quota.
	if q := get(env.Host0.GetOK(systemURI(0)), "Oem", "CxlPool", "QuotaMiB"); q != float64(0) {
		t.Errorf("Host0's own QuotaMiB: got %v, want 0", q)
	}
}

// TestSystemQuotaValidates: bad bodies get the specific Base message and
// change nothing, not even the valid part of the body.
func TestSystemQuotaValidates(t *testing.T) {
	env := apitest.NewServer(t)
	a := env.Admin
	if r := a.Patch(systemURI(2), quotaBody(4096)); r.Status != http.StatusOK {
		t.Fatalf("setting the first quota: %s", r)
	}
	before := a.Get(systemURI(2))
	withQuota := func(k string, v any) map[string]any {
		b := quotaBody(2048)
		b[k] = v
		return b
	}
	oem := func(k string, v any) map[string]any {
		b := quotaBody(2048)
		b["Oem"].(map[string]any)["CxlPool"].(map[string]any)[k] = v
		return b
	}
	for _, tc := range []struct {
		name string
		body any
		msg  string
	}{
		{"string", quotaBody("2048"), "PropertyValueTypeError"},
		{"fraction", quotaBody(1.5), "PropertyValueTypeError"},
		{"boolean", quotaBody(true), "PropertyValueTypeError"},
		{"null", quotaBody(nil), "PropertyValueTypeError"},
		{"negative", quotaBody(-1), "PropertyValueOutOfRange"},
		{"more than the pool", quotaBody(poolMiB + 1), "PropertyValueOutOfRange"},
		{"beyond int64", `{"Oem":{"CxlPool":{"QuotaMiB":99999999999999999999}}}`, "PropertyValueOutOfRange"},
		{"name too", withQuota("Name", "db1"), "PropertyNotWritable"},
		{"host name too", withQuota("HostName", "db1"), "PropertyNotWritable"},
		{"status too", withQuota("Status", map[string]any{"State": "Disabled"}), "PropertyNotWritable"},
		{"power state too", withQuota("PowerState", "Off"), "PropertyNotWritable"},
		{"granted too", oem("GrantedMiB", 1), "PropertyNotWritable"},
		{"link too", oem("LinkUp", false), "PropertyNotWritable"},
		{"unknown property", withQuota("AssetTag", "x"), "PropertyUnknown"},
		{"unknown Oem property", oem("Colour", "red"), "PropertyUnknown"},
		{"Oem not an object", map[string]any{"Oem": 1}, "PropertyValueTypeError"},
		{"not JSON", `{"Oem":`, "MalformedJSON"},
		{"an array", `[]`, "UnrecognizedRequestBody"},
	} {
		r := a.Patch(systemURI(2), tc.body)
		wantStatus(t, tc.name, r, http.StatusBadRequest, tc.msg)
		apitest.Validate(t, r.Body)
	}
	after := a.Get(systemURI(2))
	if diff := cmp.Diff(string(before.Body), string(after.Body)); diff != "" {
		t.Errorf("Host2 changed after refused PATCHes (-before +after):\n%s", diff)
	}
	if got := quotaOf(t, env, 2); got != float64(4096) {
		t.Errorf("Host2 QuotaMiB: got %v, want 4096", got)
	}

	// The whole pool is a valid quota; nothing to change is a 200 that
	// changes nothing.
	wantStatus(t, "the whole pool", a.Patch(systemURI(2), quotaBody(poolMiB)), http.StatusOK, "")
	for _, body := range []any{map[string]any{}, map[string]any{"Oem": map[string]any{}}, map[string]any{"Oem": map[string]any{"CxlPool": map[string]any{}}}} {
		r := a.Patch(systemURI(2), body)
		wantStatus(t, "empty PATCH", r, http.StatusOK, "")
		if got := get(r.JSON(t), "Oem", "CxlPool", "QuotaMiB"); got != float64(poolMiB) {
			t.Errorf("empty PATCH %v: QuotaMiB %v, want %d", body, got, poolMiB)
		}
	}

	// If-Match: a stale ETag changes nothing, the current one applies.
	etag := a.Get(systemURI(2)).Header.Get("ETag")
	wantStatus(t, "stale If-Match", a.Patch(systemURI(2), quotaBody(0), "If-Match", `W/"stale"`), http.StatusPreconditionFailed, "PreconditionFailed")
	if got := quotaOf(t, env, 2); got != float64(poolMiB) {
		t.Errorf("Host2 QuotaMiB after a stale If-Match: got %v, want %d", got, poolMiB)
	}
	r := a.Patch(systemURI(2), quotaBody(0), "If-Match", etag)
	wantStatus(t, "current If-Match", r, http.StatusOK, "")
	if got := quotaOf(t, env, 2); got != float64(0) {
		t.Errorf("Host2 QuotaMiB after clearing: got %v, want 0", got)
	}
	if got, want := r.Header.Get("ETag"), a.Get(systemURI(2)).Header.Get("ETag"); got != want {
		t.Errorf("PATCH answer's ETag %s, want the resource's %s", got, want)
	}
}

// TestSystemQuotaEnforced: a quota limits every way capacity reaches the
// host (an administrator's grant, a share, the host's own requests); a
// quota below what the host holds is accepted with a note, keeps what
// the host holds and refuses more; clearing it lets grants through.
func TestSystemQuotaEnforced(t *testing.T) {
	env := apitest.NewServer(t)
	a := env.Admin
	events := sse(t, env, a)
	hostEvents := sse(t, env, env.Host0)

	// Host0 holds two blocks, one of them shared with Host1.
	shared := reserve(t, a, blockMiB, map[string]any{"Sharable": true})
	connect(t, a, shared, 1)
	connect(t, a, shared, 0)
	connect(t, env.Host0, reserve(t, env.Host0, blockMiB, nil), 0)

	// One block: below what Host0 holds. Accepted, with a note.
	r := a.Patch(systemURI(0), quotaBody(blockMiB))
	wantStatus(t, "quota below the holding", r, http.StatusOK, "")
	apitest.Validate(t, r.Body)
	body := r.JSON(t)
	info, _ := body["@Message.ExtendedInfo"].([]any)
	if len(info) != 1 || get(info[0], "MessageId") != "Base.1.22.PropertyModified" ||
		!strings.Contains(get(info[0], "Resolution").(string), "512 MiB, more than its new quota of 256 MiB") {
		t.Errorf("@Message.ExtendedInfo of a quota below the holding: got %v, want Base.PropertyModified naming 512 and 256 MiB", info)
	}
	if got, want := r.Header.Get("ETag"), a.Get(systemURI(0)).Header.Get("ETag"); got != want {
		t.Errorf("PATCH answer's ETag %s, want the resource's %s (the note is not part of it)", got, want)
	}
	if got := get(a.GetOK(systemURI(0)), "Oem", "CxlPool", "GrantedMiB"); got != float64(2*blockMiB) {
		t.Errorf("Host0 GrantedMiB after the quota: got %v, want %d (it keeps what it holds)", got, 2*blockMiB)
	}
	for _, evs := range []<-chan map[string]any{events, hostEvents} {
		ev := next(t, evs, "ResourceEvent.1.4.ResourceChanged")
		if got := get(ev, "OriginOfCondition", "@odata.id"); got != systemURI(0) {
			t.Errorf("quota event origin %v, want %s", got, systemURI(0))
		}
	}

	// Every path to more capacity for Host0 is refused.
	other := reserve(t, a, blockMiB, map[string]any{"Sharable": true})
	connect(t, a, other, 2)
	own := reserve(t, a, blockMiB, nil)
	for _, tc := range []struct {
		name string
		r    *apitest.Response
	}{
		{"administrator's grant", a.Post(connectionsURI, connectBody(own, 0))},
		{"operator's grant", env.Operator.Post(connectionsURI, connectBody(own, 0))},
		{"share with Host0", a.Post(connectionsURI, connectBody(other, 0))},
		{"grant to Host0 and Host3 at once", a.Post(connectionsURI, connectBody(other, 3, 0))},
		{"host's own reservation", env.Host0.Post(chunksURI, map[string]any{"MemoryChunkSizeMiB": blockMiB})},
	} {
		wantStatus(t, tc.name, tc.r, http.StatusConflict, "CreateLimitReachedForResource")
		if !strings.Contains(string(tc.r.Body), "quota (Oem.CxlPool.QuotaMiB") {
			t.Errorf("%s: the refusal does not name the quota: %s", tc.name, tc.r)
		}
	}

	// Room for exactly one more block: one grant passes, the next not.
	wantStatus(t, "quota of three blocks", a.Patch(systemURI(0), quotaBody(3*blockMiB)), http.StatusOK, "")
	connect(t, a, own, 0)
	wantStatus(t, "share beyond three blocks", a.Post(connectionsURI, connectBody(other, 0)), http.StatusConflict, "CreateLimitReachedForResource")

	// No limit again.
	wantStatus(t, "no quota", a.Patch(systemURI(0), quotaBody(0)), http.StatusOK, "")
	connect(t, a, other, 0)
	if got := get(a.GetOK(systemURI(0)), "Oem", "CxlPool", "GrantedMiB"); got != float64(4*blockMiB) {
		t.Errorf("Host0 GrantedMiB without a quota: got %v, want %d", got, 4*blockMiB)
	}
}
