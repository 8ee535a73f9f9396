package appliance_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"cxlpool/appliance"
	"cxlpool/dcd"
	"cxlpool/fleet"
	fleetnats "cxlpool/fleet/nats"
	"cxlpool/sim"
)

// TestFleetEmbedded is the daemon's default plane: the embedded server on
// the data directory gets the box's record and its capacity and Redfish
// events, and a restart on the same directory keeps the box's identity
// and the stream (events replay from sequence 1).
func TestFleetEmbedded(t *testing.T) {
	dir := t.TempDir()
	cfg := appliance.Config{Device: appliance.DeviceSim, DataDir: dir, Sim: sim.DefaultConfig(),
		Fleet: appliance.FleetConfig{Enabled: true, Listen: "127.0.0.1:0", TTL: 3 * time.Second, API: "https://box:8443/redfish/v1"}}
	cfg.Sim.Capacity = 16 << 30
	app, stop := startTelApp(t, cfg)
	defer stop()
	if app.Fleet == nil {
		t.Fatal("no fleet plane by configuration")
	}
	p := joined(t, app)
	if app.Fleet.Embedded() == nil {
		t.Fatal("no embedded fleet server by configuration")
	}
	box := app.Fleet.Service.Box()
	if want := fleet.BoxIDFromSerial(cfg.Sim.Serial); box != want {
		t.Errorf("box id %s, want %s", box, want)
	}
	ctx := context.Background()
	c, err := app.Manager.Reserve(ctx, dcd.ReserveRequest{Size: blk, Region: 0})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.Manager.Grant(ctx, c.ID, 2); err != nil {
		t.Fatal(err)
	}
	host := uint16(2)
	app.Fleet.Service.PublishRedfish(fleet.RedfishEvent{MessageID: "ResourceEvent.ResourceChanged", Origin: "/redfish/v1/Systems/Host2", Host: &host})

	// The grant's record and events, as another box would read them.
	deadline := time.Now().Add(30 * time.Second)
	for {
		boxes, err := p.Boxes(ctx)
		if err == nil && len(boxes) == 1 && boxes[0].Heads[2].Granted == blk {
			if boxes[0].Regions[0].Reserved != blk || boxes[0].API != cfg.Fleet.API {
				t.Errorf("record: %+v", boxes[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("record with the grant not seen: %+v, %v", boxes, err)
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
	granted := waitEvent(t, p, 1, "cxlpool.box."+string(box)+".host.2.>", func(e fleetnats.Event) bool {
		return e.Kind == fleet.KindCapacity && e.State == string(dcd.GrantGranted)
	})
	waitEvent(t, p, 1, "cxlpool.box."+string(box)+".host.2.redfish", func(e fleetnats.Event) bool {
		return e.MessageID == "ResourceEvent.ResourceChanged"
	})
	stop()

	// Restart on the same data directory: same identity, the stream kept.
	app2, stop2 := startTelApp(t, cfg)
	defer stop2()
	if got := app2.Fleet.Service.Box(); got != box {
		t.Errorf("after a restart the box is %s, want %s", got, box)
	}
	waitEvent(t, joined(t, app2), 1, "cxlpool.box."+string(box)+".host.2.>", func(e fleetnats.Event) bool {
		return e.ID == granted.ID && e.Seq == granted.Seq
	})
}

// joined waits (bounded) until app's fleet plane has joined.
func joined(t *testing.T, app *appliance.Appliance) *fleetnats.Plane {
	t.Helper()
	select {
	case <-app.Fleet.Joined():
		return app.Fleet.Plane()
	case <-time.After(60 * time.Second):
		t.Fatalf("fleet plane not joined within 60s: %+v", app.Fleet.State())
		return nil
	}
}

// waitEvent subscribes from seq and returns the first event match accepts.
func waitEvent(t *testing.T, p *fleetnats.Plane, from uint64, filter string, match func(fleetnats.Event) bool) fleetnats.Event {
	t.Helper()
	got := make(chan fleetnats.Event, 1)
	var once sync.Once
	stop, err := p.Subscribe(context.Background(), from, filter, func(e fleetnats.Event) {
		if match(e) {
			once.Do(func() { got <- e })
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	select {
	case e := <-got:
		return e
	case <-time.After(30 * time.Second):
		t.Fatalf("no event on %s matched", filter)
		return fleetnats.Event{}
	}
}
