package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"cxlpool/sim"
)

// memberCount is a collection's Members@odata.count as the admin sees it.
func (c *cli) memberCount(uri string) int {
	c.t.Helper()
	r := c.env.Admin.Get(uri)
	if r.Status != http.StatusOK {
		c.t.Fatalf("GET %s: %s", uri, r)
	}
	n, _ := r.JSON(c.t)["Members@odata.count"].(float64)
	return int(n)
}

// TestHostRequest: the host path. A host account asks for memory with
// nothing but a size, ends up with the chunk in its system's Memory, sees
// its own share of the pool, and gives the memory back.
func TestHostRequest(t *testing.T) {
	c := newCLI(t)
	c.ok(c.as("host0", "login"))

	r := c.ok(c.run("request", "2GiB", "--name", "scratch"))
	c.golden("request", r.stdout)
	if !strings.Contains(r.stderr, "Reserved chunk 1 (2 GiB); connecting it to Host0") {
		t.Errorf("request progress: got %q", r.stderr)
	}

	// What the service shows: the chunk backs Host0's Memory.
	mem := c.env.Admin.GetOK("/redfish/v1/Systems/Host0/Memory/1")
	if got := mem["CapacityMiB"]; got != float64(2048) {
		t.Errorf("Host0 Memory/1 CapacityMiB: got %v, want 2048", got)
	}
	src, _ := mem["Links"].(map[string]any)["MemoryMediaSources"].([]any)
	if len(src) != 1 || src[0].(map[string]any)["@odata.id"] != "/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks/1" {
		t.Errorf("Host0 Memory/1 MemoryMediaSources: got %v, want chunk 1", src)
	}

	// --json: the same flow, parsed.
	g := decodeJSON[grantOut](t, c.ok(c.run("--json", "request", "1GiB")))
	var extents uint64
	for _, e := range g.Extents {
		extents += e.SizeBytes
	}
	if g.State != "granted" || g.System != "Host0" || g.Chunk != "2" || g.SizeBytes != 1<<30 || g.GrantedBytes != 1<<30 ||
		extents != 1<<30 || g.Memory != "/redfish/v1/Systems/Host0/Memory/2" ||
		g.ConnectionURI != "/redfish/v1/Fabrics/CXL/Connections/"+g.Connection {
		t.Errorf("request --json: got %+v", g)
	}

	// The host's views.
	c.golden("host-chunks", c.ok(c.run("chunks")).stdout)
	c.golden("host-connections", c.ok(c.run("connections")).stdout)
	c.golden("host-hosts", c.ok(c.run("hosts")).stdout)
	c.golden("host-status", c.ok(c.run("status")).stdout)
	st := decodeJSON[statusOut](t, c.ok(c.run("status", "--json")))
	if st.HeldBytes == nil || *st.HeldBytes != 3<<30 || st.QuotaBytes == nil || st.Chunks != 2 || st.Connections != 2 ||
		st.Device == nil || st.Device.Health != "OK" || st.TotalBytes != 1<<40 {
		t.Errorf("status --json as host0: got %+v", st)
	}
	hosts := decodeJSON[[]hostOut](t, c.ok(c.run("hosts", "--json")))
	if len(hosts) != 1 || hosts[0].System != "Host0" || hosts[0].GrantedBytes != 3<<30 || !hosts[0].LinkUp ||
		hosts[0].Head == nil || *hosts[0].Head != 0 {
		t.Errorf("hosts --json as host0: got %+v", hosts)
	}

	// Another host sees none of it and cannot release it.
	if cs := decodeJSON[[]chunkOut](t, c.ok(c.as("host1", "--json", "chunks"))); len(cs) != 0 {
		t.Errorf("host1's chunks: got %+v, want none", cs)
	}
	c.fails(c.as("host1", "release", g.Connection), exitError, "ResourceNotFound")

	// Give it back: a connection, then a chunk by its connections.
	r = c.ok(c.run("release", "1"))
	c.golden("release", r.stdout)
	r = c.ok(c.run("release", "--chunk", "2", "--free"))
	c.golden("release-free", r.stdout)
	c.ok(c.run("free", "1"))
	if n := c.memberCount("/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks"); n != 0 {
		t.Errorf("chunks left: got %d, want 0", n)
	}
	if n := c.memberCount("/redfish/v1/Systems/Host0/Memory"); n != 0 {
		t.Errorf("Host0 Memory left: got %d, want 0", n)
	}
}

// TestRejectedGrant: a host that refuses the capacity gets nothing, and
// the chunk reserved for it is freed again.
func TestRejectedGrant(t *testing.T) {
	c := newCLI(t)
	c.env.App.Box.Host(0).SetPolicy(sim.Policy{Mode: sim.Reject})
	r := c.as("host0", "request", "2GiB")
	c.fails(r, exitError, "did not accept")
	if !strings.Contains(r.stderr, "chunk 1 was freed again") {
		t.Errorf("stderr %q does not say the chunk was freed", r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("stdout of a rejected request: got %q, want nothing", r.stdout)
	}
	if n := c.memberCount("/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks"); n != 0 {
		t.Errorf("chunks after a rejected grant: got %d, want 0", n)
	}
	if n := c.memberCount("/redfish/v1/Fabrics/CXL/Connections"); n != 0 {
		t.Errorf("connections after a rejected grant: got %d, want 0", n)
	}
}

// TestAdminCapacity: an administrator gives capacity to a named host,
// shares a chunk with a second host, and takes it all back; plus the
// pool-wide views.
func TestAdminCapacity(t *testing.T) {
	c := newCLI(t)
	c.ok(c.as("admin", "login"))
	c.fails(c.run("request", "1GiB"), exitUsage, "--host is required: account admin is not bound to a host")

	c.ok(c.run("request", "1GiB", "--host", "Host1", "--shared", "--name", "db"))
	c.ok(c.run("request", "512MiB", "--host", "2"))
	r := c.ok(c.run("share", "1", "--host", "Host3"))
	c.golden("share", r.stdout)
	c.golden("admin-chunks", c.ok(c.run("chunks")).stdout)
	c.golden("admin-connections", c.ok(c.run("connections")).stdout)
	c.golden("admin-hosts", c.ok(c.run("hosts")).stdout)
	c.golden("admin-status", c.ok(c.run("status")).stdout)

	cs := decodeJSON[[]chunkOut](t, c.ok(c.run("chunks", "--json")))
	if len(cs) != 2 || cs[0].Name != "db" || !cs[0].Sharable || strings.Join(cs[0].Hosts, ",") != "Host1,Host3" ||
		len(cs[0].Connections) != 2 || cs[1].SizeBytes != 512<<20 {
		t.Errorf("chunks --json: got %+v", cs)
	}
	conns := decodeJSON[[]connectionOut](t, c.ok(c.run("connections", "--json")))
	if len(conns) != 3 || conns[2].Hosts[0] != "Host3" || conns[2].GrantState != "granted" || conns[2].GrantedBytes != 1<<30 {
		t.Errorf("connections --json: got %+v", conns)
	}
	st := decodeJSON[statusOut](t, c.ok(c.run("status", "--json")))
	if st.SharedBytes == nil || *st.SharedBytes != 1<<30 || st.GrantedBytes == nil || *st.GrantedBytes != 512<<20 ||
		st.FreeBytes != 1<<40-(1<<30)-(512<<20) || len(st.Regions) != 2 || st.QuotaBytes != nil {
		t.Errorf("status --json: got %+v", st)
	}

	// A chunk hosts hold cannot be freed; release --chunk --free can.
	c.fails(c.run("free", "1"), exitError, "poolctl release --chunk 1 --free")
	rel := decodeJSON[releaseOut](t, c.ok(c.run("--json", "release", "--chunk", "1", "--free")))
	if len(rel.Released) != 2 || rel.Freed == nil || rel.Freed.ID != "1" {
		t.Errorf("release --chunk 1 --free --json: got %+v", rel)
	}
	c.ok(c.run("release", "2", "--free"))
	if n := c.memberCount("/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks"); n != 0 {
		t.Errorf("chunks left: got %d, want 0", n)
	}
}

func TestCapacityUsage(t *testing.T) {
	c := newCLI(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"request"}, "missing argument"},
		{[]string{"request", "lots"}, `size "lots"`},
		{[]string{"request", "256MB"}, "unknown unit"},
		{[]string{"request", "1000"}, "whole number of MiB"},
		{[]string{"request", "1GiB", "2GiB"}, "unexpected argument"},
		{[]string{"share", "1"}, "--host is required"},
		{[]string{"share", "1/2", "--host", "Host1"}, "not a chunk Id"},
		{[]string{"share", "1", "--host", "Host/1"}, "not a host"},
		{[]string{"release"}, "one of them"},
		{[]string{"release", "1", "--chunk", "2"}, "one of them"},
		{[]string{"free", "/redfish/v1/Systems/Host0"}, "not a chunk URI"},
		{[]string{"free"}, "missing argument"},
	} {
		c.fails(c.as("admin", tc.args...), exitUsage, tc.want)
	}
	// Ids and URIs both name a resource.
	c.fails(c.as("admin", "free", "/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks/9"), exitError, "ResourceNotFound")
	c.fails(c.as("admin", "free", "9"), exitError, "ResourceNotFound")
}

// TestRequestNoWait: --wait=false returns with the task monitor once the
// capacity is offered.
func TestRequestNoWait(t *testing.T) {
	c := newCLI(t)
	c.env.App.Box.Host(0).SetPolicy(sim.Policy{Mode: sim.NeverAnswer})
	g := decodeJSON[grantOut](t, c.ok(c.as("host0", "--json", "request", "1GiB", "--wait=false")))
	if g.State != "pending" || !strings.HasPrefix(g.Task, "/redfish/v1/TaskService/TaskMonitors/") || g.Chunk != "1" {
		t.Errorf("request --wait=false: got %+v, want a pending grant with its task monitor", g)
	}
}

// TestWatchGrant: a host watching its events sees its grant happen.
func TestWatchGrant(t *testing.T) {
	c := newCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lines, stop := c.watch(ctx, "host0")
	c.ok(c.as("host0", "request", "1GiB"))
	var got []string
	for l := range lines {
		got = append(got, c.normalise(l))
		if strings.Contains(l, "/redfish/v1/Fabrics/CXL/Connections/1") && strings.Contains(l, "granted") {
			break
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("watch: %v", err)
	}
	want := "<event>  <time>  OK       ResourceEvent.ResourceStateChanged  /redfish/v1/Fabrics/CXL/Connections/1  " +
		"The state of resource '/redfish/v1/Fabrics/CXL/Connections/1' has changed to granted."
	if len(got) == 0 || got[len(got)-1] != want {
		t.Errorf("watch as host0: got lines\n%s\nwant the last to be\n%s", strings.Join(got, "\n"), want)
	}
}
