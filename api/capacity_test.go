package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/api/apitest"
	"cxlpool/sim"
)

const (
	chunksURI      = "/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks"
	connectionsURI = "/redfish/v1/Fabrics/CXL/Connections"
	// blockMiB is the virtual box's default block size.
	blockMiB = 256
)

func initiator(h int) string { return "/redfish/v1/Fabrics/CXL/Endpoints/Host" + strconv.Itoa(h) }

func systemURI(h int) string { return "/redfish/v1/Systems/Host" + strconv.Itoa(h) }

// reserve creates a chunk as c and returns its URI.
func reserve(t *testing.T, c *apitest.Client, sizeMiB int, oem map[string]any) string {
	t.Helper()
	body := map[string]any{"MemoryChunkSizeMiB": sizeMiB, "AddressRangeType": "Volatile"}
	if oem != nil {
		body["Oem"] = map[string]any{"CxlPool": oem}
	}
	r := c.Post(chunksURI, body)
	if r.Status != http.StatusCreated {
		t.Fatalf("reserve %d MiB as %s: got %s, want 201", sizeMiB, c.User, r)
	}
	apitest.Validate(t, r.Body)
	loc := r.Header.Get("Location")
	if id := r.JSON(t)["@odata.id"]; id != loc || !strings.HasPrefix(loc, chunksURI+"/") {
		t.Fatalf("reserve: Location %q, body @odata.id %v", loc, id)
	}
	return loc
}

func connectBody(chunk string, hosts ...int) map[string]any {
	inits := make([]map[string]any, len(hosts))
	for i, h := range hosts {
		inits[i] = map[string]any{"@odata.id": initiator(h)}
	}
	return map[string]any{
		"ConnectionType": "Memory",
		"MemoryChunkInfo": []map[string]any{{
			"MemoryChunk":        map[string]any{"@odata.id": chunk},
			"AccessCapabilities": []string{"Read", "Write"},
		}},
		"Links": map[string]any{"InitiatorEndpoints": inits},
	}
}

// startConnect asks for chunk to be connected to hosts and returns the
// task monitor of the 202.
func startConnect(t *testing.T, c *apitest.Client, chunk string, hosts ...int) string {
	t.Helper()
	r := c.Post(connectionsURI, connectBody(chunk, hosts...))
	if r.Status != http.StatusAccepted {
		t.Fatalf("connect %s to %v as %s: got %s, want 202", chunk, hosts, c.User, r)
	}
	apitest.Validate(t, r.Body)
	mon := r.Header.Get("Location")
	if !strings.HasPrefix(mon, "/redfish/v1/TaskService/TaskMonitors/") {
		t.Fatalf("connect: Location %q is not a task monitor", mon)
	}
	return mon
}

// waitTask polls a task monitor until its task has ended and returns the
// monitor's final answer.
func waitTask(t *testing.T, c *apitest.Client, monitor string) *apitest.Response {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := c.Get(monitor)
		if r.Status != http.StatusAccepted {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s still running after 30 s", monitor)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// taskOf fetches the Task a finished monitor names (Link: rel=describedby).
func taskOf(t *testing.T, c *apitest.Client, r *apitest.Response) map[string]any {
	t.Helper()
	link := r.Header.Get("Link")
	uri, _, ok := strings.Cut(strings.TrimPrefix(link, "<"), ">")
	if !ok {
		t.Fatalf("finished monitor without a Link to its task: %q", link)
	}
	return c.GetOK(uri)
}

// connect grants chunk to hosts and returns the first Connection's URI.
func connect(t *testing.T, c *apitest.Client, chunk string, hosts ...int) string {
	t.Helper()
	r := waitTask(t, c, startConnect(t, c, chunk, hosts...))
	if r.Status != http.StatusCreated {
		t.Fatalf("connect %s to %v: task ended %s, want 201", chunk, hosts, r)
	}
	apitest.Validate(t, r.Body)
	return r.Header.Get("Location")
}

// release deletes a Connection and waits for the release task.
func release(t *testing.T, c *apitest.Client, conn string) {
	t.Helper()
	r := c.Delete(conn)
	if r.Status != http.StatusAccepted {
		t.Fatalf("DELETE %s: got %s, want 202", conn, r)
	}
	apitest.Validate(t, r.Body)
	if f := waitTask(t, c, r.Header.Get("Location")); f.Status != http.StatusNoContent {
		t.Fatalf("release %s: task ended %s, want 204", conn, f)
	}
}

func members(t *testing.T, c *apitest.Client, uri string) []string {
	t.Helper()
	col := c.GetOK(uri)
	var out []string
	for _, m := range col["Members"].([]any) {
		out = append(out, m.(map[string]any)["@odata.id"].(string))
	}
	if n := int(col["Members@odata.count"].(float64)); n != len(out) {
		t.Errorf("%s: Members@odata.count %d, %d members", uri, n, len(out))
	}
	return out
}

// get walks a decoded JSON value: get(m, "Links", "Endpoints", 0, "@odata.id").
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

func linkIDs(v any) []string {
	out := []string{}
	for _, l := range v.([]any) {
		out = append(out, l.(map[string]any)["@odata.id"].(string))
	}
	return out
}

// heldMiB is what the virtual host on LD ld holds, per the device.
func heldMiB(env *apitest.Env, ld int, tag string) uint64 {
	var n uint64
	for _, e := range env.App.Box.Host(ld).Extents() {
		if tag == "" || e.Tag.String() == tag {
			n += e.Length >> 20
		}
	}
	return n
}

// TestCapacityFlow is the flow of redfish-model.md: reserve, connect (a
// task that completes), the host's Memory shows it, release (a task),
// delete, done by an administrator and by the host itself.
func TestCapacityFlow(t *testing.T) {
	for _, who := range []string{"Administrator", "HostUser"} {
		t.Run(who, func(t *testing.T) {
			env := apitest.NewServer(t)
			c := env.Admin
			if who == "HostUser" {
				c = env.Host0
			}
			dom := c.GetOK("/redfish/v1/Chassis/Pool/MemoryDomains/Pool")
			if dom["MemoryChunkIncrementMiB"] != float64(blockMiB) || dom["MinMemoryChunkSizeMiB"] != float64(blockMiB) ||
				dom["MemorySizeMiB"] != float64(1<<20) || dom["AllowsMemoryChunkCreation"] != true {
				t.Errorf("memory domain: %v", dom)
			}
			chunk := reserve(t, c, 4*blockMiB, nil)
			ch := c.GetOK(chunk)
			if ch["MemoryChunkSizeMiB"] != float64(1024) || get(ch, "Status", "State") != "StandbyOffline" {
				t.Errorf("reserved chunk: %v", ch)
			}
			tag := get(ch, "Oem", "CxlPool", "Tag").(string)

			mon := startConnect(t, c, chunk, 0)
			done := waitTask(t, c, mon)
			wantStatus(t, "connect task", done, http.StatusCreated, "")
			apitest.Validate(t, done.Body)
			conn := done.Header.Get("Location")
			body := done.JSON(t)
			if body["@odata.id"] != conn || body["ConnectionType"] != "Memory" || get(body, "Status", "State") != "Enabled" ||
				get(body, "Links", "InitiatorEndpoints", 0, "@odata.id") != initiator(0) ||
				get(body, "MemoryChunkInfo", 0, "MemoryChunk", "@odata.id") != chunk {
				t.Errorf("connection: %v", body)
			}
			if task := taskOf(t, c, done); task["TaskState"] != "Completed" {
				t.Errorf("task state %v, want Completed", task["TaskState"])
			}
			if diff := cmp.Diff(body, c.GetOK(conn)); diff != "" {
				t.Errorf("GET of the connection differs from the task's answer (-task +get):\n%s", diff)
			}

			mem := members(t, c, systemURI(0)+"/Memory")
			if len(mem) != 1 {
				t.Fatalf("Host0 memory: %v, want one", mem)
			}
			m := c.GetOK(mem[0])
			if m["MemoryDeviceType"] != "Logical" || m["CapacityMiB"] != float64(1024) ||
				!slices.Equal(linkIDs(get(m, "Links", "MemoryMediaSources")), []string{chunk}) {
				t.Errorf("memory: %v", m)
			}
			if got := get(c.GetOK(systemURI(0)), "MemorySummary", "TotalSystemMemoryGiB"); got != float64(1) {
				t.Errorf("TotalSystemMemoryGiB = %v, want 1", got)
			}
			ch = c.GetOK(chunk)
			if get(ch, "Status", "State") != "Enabled" || get(ch, "AddressRangeOffsetMiB") == nil ||
				!slices.Equal(linkIDs(get(ch, "Links", "Endpoints")), []string{initiator(0)}) {
				t.Errorf("granted chunk: %v", ch)
			}
			region := c.GetOK("/redfish/v1/Chassis/Pool/PCIeDevices/DCD/CXLLogicalDevices/0/MemoryRegions/0")
			var regionMiB float64
			for _, e := range region["MemoryExtents"].([]any) {
				if e.(map[string]any)["Tag"] == tag {
					regionMiB += e.(map[string]any)["ExtentSizeMiB"].(float64)
				}
			}
			if regionMiB != 1024 || heldMiB(env, 0, tag) != 1024 {
				t.Errorf("extents of the chunk's tag: region shows %v MiB, host holds %d MiB, want 1024", regionMiB, heldMiB(env, 0, tag))
			}

			wantStatus(t, "delete granted chunk", c.Delete(chunk), http.StatusConflict, "ResourceInUse")
			release(t, c, conn)
			wantStatus(t, "released connection", c.Get(conn), http.StatusNotFound, "ResourceNotFound")
			if mem := members(t, c, systemURI(0)+"/Memory"); len(mem) != 0 {
				t.Errorf("memory after release: %v", mem)
			}
			if n := heldMiB(env, 0, ""); n != 0 {
				t.Errorf("host still holds %d MiB after release", n)
			}
			wantStatus(t, "delete chunk", c.Delete(chunk), http.StatusNoContent, "")
			wantStatus(t, "deleted chunk", c.Get(chunk), http.StatusNotFound, "ResourceNotFound")
		})
	}
}

// TestCapacityHostAnswers: a host that rejects or never answers ends the
// task in Exception with nothing granted; a host whose link is down is
// refused at once.
func TestCapacityHostAnswers(t *testing.T) {
	env := apitest.NewServer(t, apitest.Options{AddTimeout: 200 * time.Millisecond})
	for _, tc := range []struct {
		name string
		ld   int
		mode sim.PolicyMode
	}{
		{"rejected", 2, sim.Reject},
		{"never answers", 3, sim.NeverAnswer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env.App.Box.Host(tc.ld).SetPolicy(sim.Policy{Mode: tc.mode})
			chunk := reserve(t, env.Admin, blockMiB, nil)
			done := waitTask(t, env.Admin, startConnect(t, env.Admin, chunk, tc.ld))
			wantStatus(t, "task", done, http.StatusConflict, "GeneralError")
			apitest.Validate(t, done.Body)
			task := taskOf(t, env.Admin, done)
			if task["TaskState"] != "Exception" || !slices.Contains(messageIDs(task), "TaskEvent.1.0.TaskAborted") {
				t.Errorf("task: state %v, messages %v", task["TaskState"], messageIDs(task))
			}
			// Nothing half granted: no connection, no memory, nothing on
			// the device, and the chunk is free to go.
			for _, conn := range members(t, env.Admin, connectionsURI) {
				if get(env.Admin.GetOK(conn), "Links", "InitiatorEndpoints", 0, "@odata.id") == initiator(tc.ld) {
					t.Errorf("connection %s left for host %d", conn, tc.ld)
				}
			}
			if mem := members(t, env.Admin, systemURI(tc.ld)+"/Memory"); len(mem) != 0 {
				t.Errorf("memory: %v", mem)
			}
			if n := heldMiB(env, tc.ld, ""); n != 0 {
				t.Errorf("host holds %d MiB", n)
			}
			ch := env.Admin.GetOK(chunk)
			if get(ch, "Status", "State") != "StandbyOffline" || len(get(ch, "Links", "Endpoints").([]any)) != 0 {
				t.Errorf("chunk after failed grant: %v", ch)
			}
			wantStatus(t, "delete chunk", env.Admin.Delete(chunk), http.StatusNoContent, "")
		})
	}
	t.Run("link down", func(t *testing.T) {
		env.App.Box.SetLink(4, false)
		deadline := time.Now().Add(10 * time.Second)
		for get(env.Admin.GetOK(systemURI(4)), "Status", "State") != "UnavailableOffline" {
			if time.Now().After(deadline) {
				t.Fatal("Host4's link never shown down")
			}
			time.Sleep(2 * time.Millisecond)
		}
		if ep := env.Admin.GetOK(initiator(4)); get(ep, "Status", "State") != "UnavailableOffline" {
			t.Errorf("endpoint of a down host: %v", ep["Status"])
		}
		chunk := reserve(t, env.Admin, blockMiB, nil)
		r := env.Admin.Post(connectionsURI, connectBody(chunk, 4))
		wantStatus(t, "connect to a down host", r, http.StatusConflict, "GeneralError")
		apitest.Validate(t, r.Body)
	})
}

// TestCapacitySharing: a sharable chunk is shared by a second Connection
// or by one Connection naming several hosts; a non-sharable one is not;
// several hosts get all or nothing.
func TestCapacitySharing(t *testing.T) {
	env := apitest.NewServer(t)
	a := env.Admin
	shared := reserve(t, a, 2*blockMiB, map[string]any{"Sharable": true})
	ch := a.GetOK(shared)
	if get(ch, "Oem", "CxlPool", "Sharable") != true {
		t.Fatalf("sharable chunk: %v", ch)
	}
	tag := get(ch, "Oem", "CxlPool", "Tag").(string)
	c0 := connect(t, a, shared, 0)
	c1 := connect(t, a, shared, 1)
	for _, h := range []int{0, 1} {
		if n := heldMiB(env, h, tag); n != 2*blockMiB {
			t.Errorf("host %d holds %d MiB of the shared chunk, want %d", h, n, 2*blockMiB)
		}
		if mem := members(t, a, systemURI(h)+"/Memory"); len(mem) != 1 {
			t.Errorf("Host%d memory: %v", h, mem)
		}
	}
	if got := linkIDs(get(a.GetOK(shared), "Links", "Endpoints")); !slices.Equal(got, []string{initiator(0), initiator(1)}) {
		t.Errorf("shared chunk endpoints (admin): %v", got)
	}
	// A host sees the chunk it shares, and in it only itself.
	hv := env.Host0.GetOK(shared)
	if got := linkIDs(get(hv, "Links", "Endpoints")); !slices.Equal(got, []string{initiator(0)}) {
		t.Errorf("shared chunk endpoints (Host0): %v", got)
	}
	if b, _ := json.Marshal(hv); strings.Contains(string(b), "Host1") {
		t.Errorf("Host0's view of a shared chunk mentions Host1: %s", b)
	}
	metrics := string(a.Get("/metrics").Body)
	for _, want := range []string{
		fmt.Sprintf(`cxlpool_pool_bytes{state="shared"} %g`, float64(2*blockMiB<<20)),
		fmt.Sprintf(`cxlpool_host_granted_bytes{host="Host1"} %g`, float64(2*blockMiB<<20)),
		`cxlpool_grants{state="granted"} 2`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// One Connection naming two hosts.
	multi := reserve(t, a, blockMiB, map[string]any{"Sharable": true})
	done := waitTask(t, a, startConnect(t, a, multi, 2, 3))
	wantStatus(t, "two hosts at once", done, http.StatusCreated, "")
	var created []string
	for _, m := range taskOf(t, a, done)["Messages"].([]any) {
		if args, _ := m.(map[string]any)["MessageArgs"].([]any); len(args) == 2 && args[1] == "Enabled" {
			created = append(created, args[0].(string))
		}
	}
	if len(created) != 2 || created[0] != done.Header.Get("Location") {
		t.Errorf("task messages name connections %v, want two starting with %s", created, done.Header.Get("Location"))
	}
	for i, conn := range created {
		if got := get(a.GetOK(conn), "Links", "InitiatorEndpoints", 0, "@odata.id"); got != initiator(2+i) {
			t.Errorf("%s initiator %v, want %s", conn, got, initiator(2+i))
		}
	}

	// A chunk that is not sharable stays with its first host.
	single := reserve(t, a, blockMiB, nil)
	connect(t, a, single, 4)
	// The refusal names the rule (region 0 is not sharable), not just "in use".
	wantStatus(t, "share a non-sharable chunk", a.Post(connectionsURI, connectBody(single, 5)), http.StatusConflict, "PropertyValueResourceConflict")
	wantStatus(t, "two hosts, non-sharable", a.Post(connectionsURI, connectBody(reserve(t, a, blockMiB, nil), 5, 6)),
		http.StatusConflict, "PropertyValueResourceConflict")

	// All or nothing: Host7 rejects, so Host6 must not keep its part.
	env.App.Box.Host(7).SetPolicy(sim.Policy{Mode: sim.Reject})
	aon := reserve(t, a, blockMiB, map[string]any{"Sharable": true})
	aonTag := get(a.GetOK(aon), "Oem", "CxlPool", "Tag").(string)
	done = waitTask(t, a, startConnect(t, a, aon, 6, 7))
	wantStatus(t, "one of two hosts rejects", done, http.StatusConflict, "GeneralError")
	if eps := get(a.GetOK(aon), "Links", "Endpoints").([]any); len(eps) != 0 {
		t.Errorf("chunk still connected to %v", eps)
	}
	if n := heldMiB(env, 6, aonTag); n != 0 {
		t.Errorf("Host6 kept %d MiB of a failed shared grant", n)
	}

	release(t, a, c0)
	if n := heldMiB(env, 1, tag); n != 2*blockMiB {
		t.Errorf("Host1 holds %d MiB after Host0 released its share", n)
	}
	release(t, a, c1)
	wantStatus(t, "delete shared chunk", a.Delete(shared), http.StatusNoContent, "")
}

// TestCapacityHostIsolation: a host sees and changes only its own system,
// connections and chunks; everything else is 404, as if it did not exist.
func TestCapacityHostIsolation(t *testing.T) {
	env := apitest.NewServer(t)
	h0, h1 := env.Host0, env.Host1
	chunk1 := reserve(t, h1, blockMiB, nil)
	conn1 := connect(t, h1, chunk1, 1)
	chunk0 := reserve(t, h0, blockMiB, nil)
	mem1 := members(t, h1, systemURI(1)+"/Memory")[0]

	for _, uri := range []string{
		systemURI(1), systemURI(1) + "/Memory", mem1, conn1, chunk1,
		initiator(1), "/redfish/v1/Fabrics/CXL/Endpoints/DCD-LD1", "/redfish/v1/Fabrics/CXL/Zones/Host1",
		"/redfish/v1/Chassis/Pool/PCIeDevices/DCD/CXLLogicalDevices/1",
		"/redfish/v1/Chassis/Pool/PCIeDevices/DCD/CXLLogicalDevices/1/MemoryRegions/0",
		"/redfish/v1/Chassis/Pool/FabricAdapters/DCD/Ports/1",
	} {
		wantStatus(t, "Host0 GET "+uri, h0.Get(uri), http.StatusNotFound, "ResourceNotFound")
	}
	for uri, want := range map[string][]string{
		"/redfish/v1/Systems":               {systemURI(0)},
		connectionsURI:                      nil,
		chunksURI:                           {chunk0},
		"/redfish/v1/Fabrics/CXL/Endpoints": {initiator(0), "/redfish/v1/Fabrics/CXL/Endpoints/DCD-LD0"},
		"/redfish/v1/Fabrics/CXL/Zones":     {"/redfish/v1/Fabrics/CXL/Zones/Host0"},
		"/redfish/v1/Chassis/Pool/FabricAdapters/DCD/Ports": {"/redfish/v1/Chassis/Pool/FabricAdapters/DCD/Ports/0"},
		"/redfish/v1/Chassis/Pool/PCIeDevices/DCD/CXLLogicalDevices": {
			"/redfish/v1/Chassis/Pool/PCIeDevices/DCD/CXLLogicalDevices/0"},
	} {
		if got := members(t, h0, uri); !slices.Equal(got, want) {
			t.Errorf("Host0 %s: %v, want %v", uri, got, want)
		}
	}
	if got := members(t, h1, chunksURI); !slices.Equal(got, []string{chunk1}) {
		t.Errorf("Host1 chunks: %v", got)
	}
	for _, tc := range []struct {
		name string
		r    *apitest.Response
	}{
		{"connect other's chunk", h0.Post(connectionsURI, connectBody(chunk1, 0))},
		{"connect to other's initiator", h0.Post(connectionsURI, connectBody(chunk0, 1))},
		{"connect to own and other's", h0.Post(connectionsURI, connectBody(chunk0, 0, 1))},
	} {
		wantStatus(t, tc.name, tc.r, http.StatusNotFound, "ResourceMissingAtURI")
	}
	wantStatus(t, "delete other's connection", h0.Delete(conn1), http.StatusNotFound, "ResourceNotFound")
	wantStatus(t, "delete other's chunk", h0.Delete(chunk1), http.StatusNotFound, "ResourceNotFound")
	wantStatus(t, "read-only reserve", env.ReadOnly.Post(chunksURI, map[string]any{"MemoryChunkSizeMiB": blockMiB}),
		http.StatusForbidden, "InsufficientPrivilege")
	wantStatus(t, "read-only release", env.ReadOnly.Delete(conn1), http.StatusForbidden, "InsufficientPrivilege")

	// A host's reservations count against its quota with what it holds.
	if err := env.App.Manager.Ledger().SetHostQuota(context.Background(), 0, 3*blockMiB<<20); err != nil {
		t.Fatal(err)
	}
	reserve(t, h0, 2*blockMiB, nil)
	wantStatus(t, "over quota", h0.Post(chunksURI, map[string]any{"MemoryChunkSizeMiB": blockMiB}),
		http.StatusConflict, "CreateLimitReachedForResource")
	if q := get(h0.GetOK("/redfish/v1/Chassis/Pool/MemoryDomains/Pool"), "Oem", "CxlPool"); get(q, "QuotaMiB") != float64(3*blockMiB) ||
		get(q, "HeldMiB") != float64(3*blockMiB) || get(q, "GrantedMiB") != nil {
		t.Errorf("Host0's pool view: %v", q)
	}
	wantStatus(t, "delete own chunk", h0.Delete(chunk0), http.StatusNoContent, "")
	wantStatus(t, "within quota again", h0.Post(chunksURI, map[string]any{"MemoryChunkSizeMiB": blockMiB}), http.StatusCreated, "")
	release(t, h1, conn1)
}

// TestCapacityRequests: malformed and impossible requests get the
// specific Base message, never a 5xx.
func TestCapacityRequests(t *testing.T) {
	env := apitest.NewServer(t)
	a := env.Admin
	chunk := reserve(t, a, blockMiB, nil)
	conn := connect(t, a, chunk, 0)
	free := reserve(t, a, blockMiB, nil)
	chunkBody := func(kv ...any) map[string]any {
		m := map[string]any{"MemoryChunkSizeMiB": blockMiB}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	oem := func(kv ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return map[string]any{"CxlPool": m}
	}
	withConn := func(edit func(map[string]any)) map[string]any {
		b := connectBody(free, 1)
		edit(b)
		return b
	}
	for _, tc := range []struct {
		name, uri string
		body      any
		code      int
		msg       string
	}{
		{"no size", chunksURI, map[string]any{"AddressRangeType": "Volatile"}, 400, "PropertyMissing"},
		{"zero size", chunksURI, chunkBody("MemoryChunkSizeMiB", 0), 400, "PropertyValueOutOfRange"},
		{"negative size", chunksURI, chunkBody("MemoryChunkSizeMiB", -256), 400, "PropertyValueOutOfRange"},
		{"huge size", chunksURI, chunkBody("MemoryChunkSizeMiB", int64(1)<<50), 400, "PropertyValueOutOfRange"},
		{"not a block multiple", chunksURI, chunkBody("MemoryChunkSizeMiB", 100), 400, "PropertyValueIncorrect"},
		{"more than the pool", chunksURI, chunkBody("MemoryChunkSizeMiB", 1<<21), 409, "ResourceExhaustion"},
		{"persistent", chunksURI, chunkBody("AddressRangeType", "PMEM"), 400, "PropertyValueNotInList"},
		{"size as string", chunksURI, chunkBody("MemoryChunkSizeMiB", "256"), 400, "PropertyValueTypeError"},
		{"unknown region", chunksURI, chunkBody("Oem", oem("Region", 9)), 400, "PropertyValueNotInList"},
		{"sharable in region 0", chunksURI, chunkBody("Oem", oem("Region", 0, "Sharable", true)), 400, "PropertyValueConflict"},
		{"two names", chunksURI, chunkBody("DisplayName", "a", "Oem", oem("Name", "b")), 400, "PropertyValueConflict"},
		{"long name", chunksURI, chunkBody("DisplayName", strings.Repeat("n", 65)), 400, "StringValueTooLong"},
		{"control in name", chunksURI, chunkBody("DisplayName", "a\x01b"), 400, "PropertyValueFormatError"},
		{"set Id", chunksURI, chunkBody("Id", "7"), 400, "PropertyNotWritable"},
		{"set tag", chunksURI, chunkBody("Oem", oem("Tag", "x")), 400, "PropertyNotWritable"},
		{"unknown property", chunksURI, chunkBody("Colour", "red"), 400, "PropertyUnknown"},
		{"no chunk info", connectionsURI, withConn(func(b map[string]any) { b["MemoryChunkInfo"] = []any{} }), 400, "ArraySizeTooShort"},
		{"two chunks", connectionsURI, withConn(func(b map[string]any) {
			b["MemoryChunkInfo"] = append(b["MemoryChunkInfo"].([]map[string]any), b["MemoryChunkInfo"].([]map[string]any)[0])
		}), 400, "ArraySizeTooLong"},
		{"read only access", connectionsURI, withConn(func(b map[string]any) {
			b["MemoryChunkInfo"].([]map[string]any)[0]["AccessCapabilities"] = []string{"Read"}
		}), 400, "PropertyValueIncorrect"},
		{"no initiators", connectionsURI, withConn(func(b map[string]any) { b["Links"] = map[string]any{} }), 400, "PropertyMissing"},
		{"empty initiators", connectionsURI, withConn(func(b map[string]any) {
			b["Links"] = map[string]any{"InitiatorEndpoints": []any{}}
		}), 400, "ArraySizeTooShort"},
		{"storage", connectionsURI, withConn(func(b map[string]any) { b["ConnectionType"] = "Storage" }), 400, "PropertyValueNotInList"},
		{"chunk URI elsewhere", connectionsURI, connectBody("/redfish/v1/Systems/Host0", 1), 400, "PropertyValueFormatError"},
		{"no such chunk", connectionsURI, connectBody(chunksURI+"/999", 1), 404, "ResourceMissingAtURI"},
		{"no such host", connectionsURI, connectBody(free, 42), 404, "ResourceMissingAtURI"},
		{"target as initiator", connectionsURI, withConn(func(b map[string]any) {
			b["Links"] = map[string]any{"InitiatorEndpoints": []any{map[string]any{"@odata.id": "/redfish/v1/Fabrics/CXL/Endpoints/DCD-LD1"}}}
		}), 400, "PropertyValueIncorrect"},
		{"same host twice", connectionsURI, connectBody(free, 1, 1), 400, "PropertyValueConflict"},
		{"wrong target", connectionsURI, withConn(func(b map[string]any) {
			b["Links"].(map[string]any)["TargetEndpoints"] = []any{map[string]any{"@odata.id": "/redfish/v1/Fabrics/CXL/Endpoints/DCD-LD2"}}
		}), 400, "PropertyValueConflict"},
		{"host already has it", connectionsURI, connectBody(chunk, 0), 409, "ResourceInUse"},
	} {
		r := a.Post(tc.uri, tc.body)
		wantStatus(t, tc.name, r, tc.code, tc.msg)
		apitest.Validate(t, r.Body)
	}
	// The right target is accepted alongside its initiator.
	ok := connectBody(free, 1)
	ok["Links"].(map[string]any)["TargetEndpoints"] = []any{map[string]any{"@odata.id": "/redfish/v1/Fabrics/CXL/Endpoints/DCD-LD1"}}
	r := a.Post(connectionsURI, ok)
	wantStatus(t, "with target", r, http.StatusAccepted, "")
	wantStatus(t, "connect task", waitTask(t, a, r.Header.Get("Location")), http.StatusCreated, "")

	etag := a.Get(conn).Header.Get("ETag")
	wantStatus(t, "stale If-Match", a.Delete(conn, "If-Match", `W/"stale"`), http.StatusPreconditionFailed, "PreconditionFailed")
	wantStatus(t, "stale If-Match on chunk", a.Delete(free, "If-Match", `W/"stale"`), http.StatusPreconditionFailed, "PreconditionFailed")
	r = a.Delete(conn, "If-Match", etag)
	wantStatus(t, "current If-Match", r, http.StatusAccepted, "")
	waitTask(t, a, r.Header.Get("Location"))
	for _, uri := range []string{chunksURI + "/007", chunksURI + "/x", chunksURI + "/0", connectionsURI + "/-1", connectionsURI + "/99999999999999999999"} {
		wantStatus(t, "GET "+uri, a.Get(uri), http.StatusNotFound, "ResourceNotFound")
		wantStatus(t, "DELETE "+uri, a.Delete(uri), http.StatusNotFound, "ResourceNotFound")
	}
	wantStatus(t, "PATCH chunk", a.Patch(chunk, map[string]any{}), http.StatusMethodNotAllowed, "OperationNotAllowed")
}

// TestCapacityValidates fills the pool (a reserved chunk, a granted one,
// a shared one) and validates every resource the capacity routes serve,
// reached by following links from the service root as an administrator
// and as a host, with and without $expand.
func TestCapacityValidates(t *testing.T) {
	env := apitest.NewServer(t)
	reserve(t, env.Admin, blockMiB, map[string]any{"Name": "spare"})
	connect(t, env.Host0, reserve(t, env.Host0, 2*blockMiB, nil), 0)
	shared := reserve(t, env.Admin, blockMiB, map[string]any{"Sharable": true})
	connect(t, env.Admin, shared, 0, 1)
	for _, c := range []*apitest.Client{env.Admin, env.Host0} {
		seen := map[string]bool{}
		queue := []string{"/redfish/v1"}
		for len(queue) > 0 {
			u := queue[0]
			queue = queue[1:]
			if seen[u] || strings.Contains(u, "/TaskMonitors/") {
				continue
			}
			seen[u] = true
			r := c.Get(u)
			if r.Status != http.StatusOK {
				t.Errorf("%s: GET %s: got %s, want 200", c.User, u, r)
				continue
			}
			apitest.Validate(t, r.Body)
			if _, isCol := r.JSON(t)["Members"]; isCol {
				apitest.Validate(t, c.Get(u+"?$expand=.").Body)
			}
			for _, l := range apitest.Links(r.Body) {
				if capacityResource(l) {
					queue = append(queue, l)
				}
			}
		}
		for _, want := range []string{
			"/redfish/v1/Chassis/Pool/PCIeDevices/DCD/CXLLogicalDevices/0/MemoryRegions/1",
			"/redfish/v1/Chassis/Pool/FabricAdapters/DCD/Ports/0", "/redfish/v1/Fabrics/CXL/Zones/Host0",
			"/redfish/v1/UpdateService/FirmwareInventory/DCD", systemURI(0) + "/Memory/2", shared,
		} {
			if !seen[want] {
				t.Errorf("%s: walk did not reach %s", c.User, want)
			}
		}
		t.Logf("%s: walked %d resources", c.User, len(seen))
	}
}

// capacityResource reports whether uri is one of the capacity routes
// (TestWalkValidates covers the rest).
func capacityResource(uri string) bool {
	for _, p := range []string{"/redfish/v1/Chassis", "/redfish/v1/Fabrics", "/redfish/v1/Systems", "/redfish/v1/UpdateService"} {
		if uri == p || strings.HasPrefix(uri, p+"/") {
			return true
		}
	}
	return false
}

// TestCapacityGolden compares the main capacity resources, with a chunk
// granted to a host, with testdata/*.golden.json, and checks that the
// pool gauges add up to the pool.
func TestCapacityGolden(t *testing.T) {
	env := apitest.NewServer(t)
	chunk := reserve(t, env.Admin, 4*blockMiB, map[string]any{"Name": "db-cache"})
	conn := connect(t, env.Admin, chunk, 0)
	for _, tc := range []struct{ name, uri string }{
		{"chassis-pool", "/redfish/v1/Chassis/Pool"},
		{"dcd", "/redfish/v1/Chassis/Pool/PCIeDevices/DCD"},
		{"memorydomain", "/redfish/v1/Chassis/Pool/MemoryDomains/Pool"},
		{"memorychunk", chunk},
		{"connection", conn},
		{"system", systemURI(0)},
		{"system-memory", systemURI(0) + "/Memory/1"},
	} {
		checkGolden(t, tc.name, tc.uri, env.Admin.GetOK(tc.uri))
	}

	// The pool gauges add up to the pool.
	reserve(t, env.Admin, blockMiB, nil)
	var sum float64
	want := map[string]float64{"reserved": blockMiB << 20, "granted": 4 * blockMiB << 20, "shared": 0, "orphaned": 0}
	for _, line := range strings.Split(string(env.Admin.Get("/metrics").Body), "\n") {
		name, value, ok := strings.Cut(line, " ")
		state, found := strings.CutPrefix(name, `cxlpool_pool_bytes{state="`)
		if !ok || !found {
			continue
		}
		state = strings.TrimSuffix(state, `"}`)
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		sum += v
		if w, ok := want[state]; ok && v != w {
			t.Errorf("pool bytes %s = %g, want %g", state, v, w)
		}
	}
	if sum != 1<<40 {
		t.Errorf("pool bytes add up to %g, want %g", sum, float64(1<<40))
	}
}

// TestCapacityEvents: grants and releases reach the event stream as
// changes of the Connection resources.
func TestCapacityEvents(t *testing.T) {
	env := apitest.NewServer(t)
	events := sse(t, env, env.Host0)
	conn := connect(t, env.Host0, reserve(t, env.Host0, blockMiB, nil), 0)
	ev := next(t, events, "ResourceEvent.1.4.ResourceCreated")
	if got := get(ev, "OriginOfCondition", "@odata.id"); got != conn {
		t.Errorf("created event origin %v, want %s", got, conn)
	}
	release(t, env.Host0, conn)
	next(t, events, "ResourceEvent.1.4.ResourceRemoved")
}
