package fleet_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"cxlpool/appliance"
	"cxlpool/dcd"
	"cxlpool/fleet"
	"cxlpool/sim"
)

// flakyPlane refuses the first fails publishes, then stores in order.
type flakyPlane struct {
	mu       sync.Mutex
	fails    int
	attempts []string
	stored   []fleet.Envelope
	invs     []fleet.Inventory
	changed  chan struct{}
}

func (p *flakyPlane) PutInventory(_ context.Context, inv fleet.Inventory) error {
	p.mu.Lock()
	p.invs = append(p.invs, inv)
	p.mu.Unlock()
	p.poke()
	return nil
}

func (p *flakyPlane) Publish(_ context.Context, e fleet.Envelope) (uint64, error) {
	p.mu.Lock()
	defer p.poke()
	defer p.mu.Unlock()
	p.attempts = append(p.attempts, e.ID)
	if p.fails > 0 {
		p.fails--
		return 0, errors.New("no responders")
	}
	p.stored = append(p.stored, e)
	return uint64(len(p.stored)), nil
}

func (p *flakyPlane) poke() {
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

// waitFor polls cond under the plane's lock until it holds, bounded.
func (p *flakyPlane) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		p.mu.Lock()
		ok := cond()
		p.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-p.changed:
		case <-deadline:
			t.Fatalf("%s: not within 30s", what)
		}
	}
}

// TestServiceDelivers: events reach the plane in order, each retried
// under the same id until stored while the plane refuses, and the record
// follows the ledger (a grant shows on its head and region).
func TestServiceDelivers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	scfg := sim.DefaultConfig()
	scfg.Capacity, scfg.Heads = 4<<30, 4
	app, err := appliance.Open(ctx, appliance.Config{DataDir: t.TempDir(), Sim: scfg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	if err := app.Start(ctx); err != nil {
		t.Fatal(err)
	}
	plane := &flakyPlane{fails: 3, changed: make(chan struct{}, 1)}
	svc, err := fleet.NewService(fleet.Config{Manager: app.Manager, Plane: plane, Heartbeat: time.Hour, API: "https://b/redfish/v1"})
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); svc.Run(rctx) }()
	defer func() { rcancel(); <-done }()

	plane.waitFor(t, "first record", func() bool { return len(plane.invs) >= 1 })
	for _, m := range []string{"A", "B", "C"} {
		svc.PublishRedfish(fleet.RedfishEvent{MessageID: m})
	}
	plane.waitFor(t, "three events stored", func() bool { return len(plane.stored) >= 3 })
	plane.mu.Lock()
	var got []string
	for _, e := range plane.stored[:3] {
		got = append(got, e.MessageID)
	}
	if strings.Join(got, "") != "ABC" {
		t.Errorf("stored %q, want A, B, C in order", got)
	}
	// The first event was tried four times (three refusals), each time
	// under its one id, so a stream that had stored it de-duplicates.
	for i := range 4 {
		if plane.attempts[i] != plane.stored[0].ID {
			t.Errorf("attempt %d was %s, want the first event's id %s", i, plane.attempts[i], plane.stored[0].ID)
		}
	}
	plane.mu.Unlock()

	c, err := app.Manager.Reserve(ctx, dcd.ReserveRequest{Size: scfg.BlockSize, Region: 0})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.Manager.Grant(ctx, c.ID, 1); err != nil {
		t.Fatal(err)
	}
	plane.waitFor(t, "a record with the grant", func() bool {
		inv := plane.invs[len(plane.invs)-1]
		return inv.Heads[1].Granted == scfg.BlockSize && inv.Regions[0].Granted == scfg.BlockSize
	})
	plane.waitFor(t, "the grant's capacity event", func() bool {
		for _, e := range plane.stored {
			if e.Kind == fleet.KindCapacity && e.State == string(dcd.GrantGranted) && e.Host != nil && *e.Host == 1 && e.Size == scfg.BlockSize {
				return true
			}
		}
		return false
	})
	plane.mu.Lock()
	last := plane.invs[len(plane.invs)-1]
	plane.mu.Unlock()
	if last.Box != svc.Box() || last.API != "https://b/redfish/v1" || last.Revision < 2 || last.Health != fleet.HealthOK {
		t.Errorf("record: box %s api %s revision %d health %s", last.Box, last.API, last.Revision, last.Health)
	}
	if got, want := last.Regions[0].Free, last.Regions[0].Length-scfg.BlockSize; got != want {
		t.Errorf("region 0 free %d, want %d", got, want)
	}
}
