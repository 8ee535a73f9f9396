package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"

	"cxlpool/api/apitest"
)

// TestGofish drives the service with an independent Redfish client
// (github.com/stmcginnis/gofish) over TLS: log in, walk Fabrics and
// Chassis, create a chunk and a connection, see the host's Memory,
// release, log out. gofish knows nothing of this project: what it can
// decode and do, any DMTF-conformant client can.
func TestGofish(t *testing.T) {
	env := apitest.NewServer(t)
	ts := httptest.NewTLSServer(env.Server.Handler())
	defer ts.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := gofish.ConnectContext(ctx, gofish.ClientConfig{Endpoint: ts.URL, Username: "admin",
		Password: apitest.AdminPassword, HTTPClient: ts.Client()})
	if err != nil {
		t.Fatalf("gofish login: %v", err)
	}
	svc := c.GetService()

	fabrics, err := svc.Fabrics()
	if err != nil || len(fabrics) != 2 {
		t.Fatalf("fabrics: %d, %v", len(fabrics), err)
	}
	// The CXL fabric, and the RDMA fabric of exports (exports.go), in
	// whichever order gofish fetched them.
	byType := map[schemas.Protocol]*schemas.Fabric{}
	for _, f := range fabrics {
		byType[f.FabricType] = f
	}
	fab := byType[schemas.CXLProtocol]
	if fab == nil || byType[schemas.TCPProtocol] == nil {
		t.Fatalf("fabrics %q, %q, want a CXL and a TCP one", fabrics[0].FabricType, fabrics[1].FabricType)
	}
	eps, err := fab.Endpoints()
	if err != nil || len(eps) != 16 {
		t.Fatalf("endpoints: %d, %v", len(eps), err)
	}
	var host0 *schemas.Endpoint
	for _, ep := range eps {
		if ep.ID == "Host0" {
			host0 = ep
		}
	}
	if host0 == nil || len(host0.ConnectedEntities) != 1 || host0.ConnectedEntities[0].EntityRole != schemas.InitiatorEntityRole {
		t.Fatalf("Host0 initiator endpoint: %+v", host0)
	}
	if zones, err := fab.Zones(); err != nil || len(zones) != 8 {
		t.Errorf("zones: %d, %v", len(zones), err)
	}

	chassis, err := svc.Chassis()
	if err != nil || len(chassis) != 1 {
		t.Fatalf("chassis: %d, %v", len(chassis), err)
	}
	devs, err := chassis[0].PCIeDevices()
	if err != nil || len(devs) != 1 || devs[0].CXLDevice.DeviceType != schemas.Type3CXLDeviceType {
		t.Fatalf("PCIe devices: %v, %v", devs, err)
	}
	lds, err := devs[0].CXLLogicalDevices()
	if err != nil || len(lds) != 8 {
		t.Fatalf("CXL logical devices: %d, %v", len(lds), err)
	}
	domains, err := chassis[0].MemoryDomains()
	if err != nil || len(domains) != 1 {
		t.Fatalf("memory domains: %d, %v", len(domains), err)
	}
	dom := domains[0]
	if dom.MemoryChunkIncrementMiB == nil || *dom.MemoryChunkIncrementMiB != blockMiB || !dom.AllowsMemoryChunkCreation {
		t.Errorf("memory domain: increment %v, creation %v", dom.MemoryChunkIncrementMiB, dom.AllowsMemoryChunkCreation)
	}

	resp, err := c.Post(chunksURI, map[string]any{"MemoryChunkSizeMiB": 2 * blockMiB, "AddressRangeType": "Volatile"})
	if err != nil {
		t.Fatalf("create chunk: %v", err)
	}
	resp.Body.Close()
	chunkURI := resp.Header.Get("Location")
	chunk, err := schemas.GetMemoryChunks(c, chunkURI)
	if err != nil || chunk.MemoryChunkSizeMiB == nil || *chunk.MemoryChunkSizeMiB != 2*blockMiB {
		t.Fatalf("chunk %s: %+v, %v", chunkURI, chunk, err)
	}

	resp, tm, err := schemas.PostWithTask(c, connectionsURI, connectBody(chunkURI, 0), nil, false)
	if err != nil || tm == nil {
		t.Fatalf("create connection: response %v, task %v, %v", resp, tm, err)
	}
	// Poll at once rather than after the advertised Retry-After (1 s):
	// the virtual hosts answer in milliseconds.
	tm.RetryAfter = time.Time{}
	done, err := schemas.WaitForTaskMonitor(ctx, c, 5*time.Millisecond, tm, nil)
	if err != nil {
		t.Fatalf("connection task: %v", err)
	}
	done.Body.Close()
	if done.StatusCode != http.StatusCreated {
		t.Fatalf("connection task ended %d, want 201", done.StatusCode)
	}
	conn, err := schemas.GetConnection(c, done.Header.Get("Location"))
	if err != nil || conn.ConnectionType != schemas.MemoryConnectionType || len(conn.MemoryChunkInfo) != 1 {
		t.Fatalf("connection: %+v, %v", conn, err)
	}
	inits, err := conn.InitiatorEndpoints()
	if err != nil || len(inits) != 1 || inits[0].ID != "Host0" {
		t.Errorf("connection initiators: %v, %v", inits, err)
	}

	systems, err := svc.Systems()
	if err != nil || len(systems) != 8 {
		t.Fatalf("systems: %d, %v", len(systems), err)
	}
	var mem []*schemas.Memory
	for _, sys := range systems {
		if sys.ID == "Host0" {
			mem, err = sys.Memory()
		}
	}
	if err != nil || len(mem) != 1 || mem[0].MemoryDeviceType != schemas.LogicalMemoryDeviceType ||
		mem[0].CapacityMiB == nil || *mem[0].CapacityMiB != 2*blockMiB {
		t.Fatalf("Host0 memory: %+v, %v", mem, err)
	}

	resp, err = c.Delete(conn.ODataID)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("release: %v, %v", resp, err)
	}
	tm = schemas.ParseTaskMonitorInfo(c, resp)
	resp.Body.Close()
	tm.RetryAfter = time.Time{}
	if done, err = schemas.WaitForTaskMonitor(ctx, c, 5*time.Millisecond, tm, nil); err != nil {
		t.Fatalf("release task: %v", err)
	}
	done.Body.Close()
	if done.StatusCode != http.StatusNoContent {
		t.Errorf("release task ended %d, want 204", done.StatusCode)
	}
	if mem, err := systems[0].Memory(); err != nil || len(mem) != 0 {
		t.Errorf("Host0 memory after release: %d, %v", len(mem), err)
	}
	if resp, err = c.Delete(chunkURI); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete chunk: %v, %v", resp, err)
	}
	resp.Body.Close()

	sess, err := c.GetSession()
	if err != nil {
		t.Fatal(err)
	}
	c.Logout()
	r := env.Anon.Get("/redfish/v1/Managers", "X-Auth-Token", sess.Token)
	wantStatus(t, "after gofish logout", r, http.StatusUnauthorized, "NoValidSession")
}
