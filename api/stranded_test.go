package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"cxlpool/api"
	"cxlpool/api/apitest"
	"cxlpool/dcd"
)

const (
	poolURI         = "/redfish/v1/Chassis/Pool/MemoryDomains/Pool"
	freeStrandedURI = poolURI + "/Actions/Oem/CxlPool.FreeStrandedChunks"
)

// loseGrant makes host h give chunk back on its own, which the ledger
// records as a lost grant (the device no longer holds it), and waits for it.
func loseGrant(t *testing.T, env *apitest.Env, chunk string, h int) {
	t.Helper()
	ctx := context.Background()
	n, _ := strconv.Atoi(chunk[strings.LastIndex(chunk, "/")+1:])
	ch, err := env.App.Ledger.Chunk(ctx, dcd.ChunkID(n))
	if err != nil {
		t.Fatal(err)
	}
	if err := env.App.Box.Host(h).Release(ctx, ch.Tag); err != nil {
		t.Fatalf("host %d gives %s back: %v", h, chunk, err)
	}
	pollUntil(t, "the grant marked lost", func() bool {
		gs, err := env.App.Ledger.Grants(ctx, dcd.GrantFilter{Chunk: ch.ID})
		return err == nil && slices.ContainsFunc(gs, func(g dcd.Grant) bool { return g.State == dcd.GrantLost })
	})
}

func pollUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 10 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// lostEvents are the EventLog's Critical status events about chunk.
func lostEvents(t *testing.T, c *apitest.Client, chunk string) int {
	t.Helper()
	log := c.GetOK(eventLog + "?$expand=.")
	n := 0
	for _, m := range log["Members"].([]any) {
		e := m.(map[string]any)
		if e["MessageId"] == "ResourceEvent.1.4.ResourceStatusChangedCritical" && e["Severity"] == "Critical" {
			if args, _ := e["MessageArgs"].([]any); len(args) == 2 && args[0] == chunk {
				n++
			}
		}
	}
	return n
}

func oemOf(m map[string]any) map[string]any {
	o, _ := m["Oem"].(map[string]any)
	x, _ := o["CxlPool"].(map[string]any)
	return x
}

func healthOf(m map[string]any) any { return m["Status"].(map[string]any)["Health"] }

// TestLostGrantStrandsChunk: a lost grant is announced with a Critical
// event (live over SSE, and in the EventLog), the chunk shows Critical and
// stranded, the pool Warning with the stranded figures; a service started
// after the loss finds it in the ledger and announces it too; the OEM
// action frees every stranded chunk in one step and the pool is healthy
// again.
func TestLostGrantStrandsChunk(t *testing.T) {
	env := apitest.NewServer(t)
	a := env.Admin
	_, next := openSSE(t, env, a, "")
	lostChunk := reserve(t, a, blockMiB, nil)
	connect(t, a, lostChunk, 2)
	keptChunk := reserve(t, a, blockMiB, nil)
	connect(t, a, keptChunk, 3)
	idle := reserve(t, a, blockMiB, nil) // reserved, never granted: not stranded

	if p := a.GetOK(poolURI); healthOf(p) != "OK" || oemOf(p)["StrandedChunks"] != nil {
		t.Fatalf("pool before any loss: health %v, stranded %v; want OK, none", healthOf(p), oemOf(p)["StrandedChunks"])
	}
	loseGrant(t, env, lostChunk, 2)

	for {
		m := next()
		if m.MessageID == "ResourceEvent.1.4.ResourceStatusChangedCritical" {
			if m.Origin != lostChunk {
				t.Errorf("lost event origin %q, want %q", m.Origin, lostChunk)
			}
			break
		}
	}
	pollUntil(t, "the pool shows the stranded chunk", func() bool { return oemOf(a.GetOK(poolURI))["StrandedChunks"] == float64(1) })
	p := a.GetOK(poolURI)
	if healthOf(p) != "Warning" || oemOf(p)["StrandedMiB"] != float64(blockMiB) {
		t.Errorf("pool: health %v, StrandedMiB %v; want Warning, %d", healthOf(p), oemOf(p)["StrandedMiB"], blockMiB)
	}
	if s := oemOf(env.Host0.GetOK(poolURI))["StrandedChunks"]; s != nil {
		t.Errorf("Host0's account sees StrandedChunks %v of other hosts' chunks, want none", s)
	}
	ch := a.GetOK(lostChunk)
	if healthOf(ch) != "Critical" || oemOf(ch)["Stranded"] != true {
		t.Errorf("stranded chunk: health %v, Stranded %v; want Critical, true", healthOf(ch), oemOf(ch)["Stranded"])
	}
	if lg, _ := oemOf(ch)["LostGrants"].([]any); len(lg) != 1 || lg[0].(map[string]any)["SystemId"] != "Host2" {
		t.Errorf("LostGrants %v, want one of Host2", oemOf(ch)["LostGrants"])
	}
	for _, u := range []string{keptChunk, idle} {
		if c := a.GetOK(u); healthOf(c) != "OK" || oemOf(c)["Stranded"] != nil {
			t.Errorf("%s: health %v, Stranded %v; want OK, unset", u, healthOf(c), oemOf(c)["Stranded"])
		}
	}
	if n := lostEvents(t, a, lostChunk); n != 1 {
		t.Errorf("got %d lost events for %s in the EventLog, want 1", n, lostChunk)
	}

	// A service started after the loss (the reconcile at start runs
	// before it) finds the loss in the ledger and announces it.
	cfg := env.Config
	cfg.DataDir = t.TempDir()
	cfg.BcryptCost = bcrypt.MinCost
	srv2, err := api.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts2 := httptest.NewServer(srv2.Handler())
	t.Cleanup(func() { srv2.Close(); ts2.Close() })
	env2 := &apitest.Env{T: t, App: env.App, Server: srv2, HTTP: ts2, Clock: env.Clock, Config: cfg}
	a2 := env2.Login("admin", apitest.AdminPassword)
	if n := lostEvents(t, a2, lostChunk); n != 1 {
		t.Errorf("restarted service: got %d lost events for %s, want 1", n, lostChunk)
	}
	if s := oemOf(a2.GetOK(poolURI))["StrandedChunks"]; s != float64(1) {
		t.Errorf("restarted service: StrandedChunks %v, want 1", s)
	}

	// Only administrators and operators free chunks.
	if r := env.ReadOnly.Post(freeStrandedURI, map[string]any{}); r.Status != http.StatusForbidden {
		t.Errorf("FreeStrandedChunks as ReadOnly: got %s, want 403", r)
	}
	r := env.Operator.Post(freeStrandedURI, map[string]any{})
	if r.Status != http.StatusOK {
		t.Fatalf("FreeStrandedChunks: got %s, want 200", r)
	}
	freed, _ := oemOf(r.JSON(t))["FreedChunks"].([]any)
	if len(freed) != 1 || freed[0].(map[string]any)["@odata.id"] != lostChunk {
		t.Errorf("FreedChunks %v, want [%s]", freed, lostChunk)
	}
	if r := a.Get(lostChunk); r.Status != http.StatusNotFound {
		t.Errorf("GET the freed chunk: got %s, want 404", r)
	}
	for _, u := range []string{keptChunk, idle} {
		if r := a.Get(u); r.Status != http.StatusOK {
			t.Errorf("GET %s after freeing stranded chunks: got %s, want 200 (not stranded)", u, r)
		}
	}
	if p := a.GetOK(poolURI); healthOf(p) != "OK" || oemOf(p)["StrandedChunks"] != nil {
		t.Errorf("pool after freeing: health %v, stranded %v; want OK, none", healthOf(p), oemOf(p)["StrandedChunks"])
	}
	// Nothing left: the action answers 200 with no chunks.
	r = a.Post(freeStrandedURI, nil)
	if freed, _ := oemOf(r.JSON(t))["FreedChunks"].([]any); r.Status != http.StatusOK || len(freed) != 0 {
		t.Errorf("FreeStrandedChunks with none stranded: got %s, want 200 with no chunks", r)
	}
}
