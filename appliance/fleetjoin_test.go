package appliance_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"cxlpool/appliance"
	"cxlpool/dcd"
	"cxlpool/fleet"
	fleetnats "cxlpool/fleet/nats"
)

// TestFleetJoinsInBackground: the embedded server's port is taken when
// the box starts. Start succeeds, the box grants as usual, the plane says
// Retrying and why; the capacity events wait in the queue. Once the port
// is free the plane joins by itself and the queued events reach the
// stream in order.
func TestFleetJoinsInBackground(t *testing.T) {
	squat, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer squat.Close()
	addr := squat.Addr().String()
	app, stop := startTelApp(t, appliance.Config{
		Fleet: appliance.FleetConfig{Enabled: true, Listen: addr, TTL: 3 * time.Second, RetryMax: 200 * time.Millisecond}})
	defer stop()

	// Start returned: the box serves while the plane retries.
	deadline := time.Now().Add(30 * time.Second)
	var st appliance.FleetState
	for st = app.Fleet.State(); st.State != appliance.FleetRetrying; st = app.Fleet.State() {
		if time.Now().After(deadline) {
			t.Fatalf("fleet state %+v, want %s", st, appliance.FleetRetrying)
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
	if !strings.Contains(st.LastError, addr) || !st.Embedded {
		t.Errorf("retrying state %+v: want the taken address %s in the error, embedded", st, addr)
	}
	ctx := context.Background()
	c, err := app.Manager.Reserve(ctx, dcd.ReserveRequest{Size: blk, Region: 0})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.Manager.Grant(ctx, c.ID, 1); err != nil {
		t.Fatalf("grant while the fleet plane is down: %v", err)
	}
	select {
	case <-app.Fleet.Joined():
		t.Fatal("joined while the port is taken")
	default:
	}

	squat.Close()
	p := joined(t, app)
	if st := app.Fleet.State(); st.State != appliance.FleetConnected || st.LastError != "" || st.Attempts < 2 {
		t.Errorf("after the port was freed: %+v, want Connected after at least 2 attempts", st)
	}
	// The grant made while unjoined is on the stream.
	box := app.Fleet.Service.Box()
	waitEvent(t, p, 1, fleet.SubjectRoot+"."+string(box)+".host.1.capacity", func(e fleetnats.Event) bool {
		return e.State == string(dcd.GrantGranted)
	})
	deadline = time.Now().Add(30 * time.Second)
	for {
		boxes, err := p.Boxes(ctx)
		if err == nil && len(boxes) == 1 && boxes[0].Heads[1].Granted == blk {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("record with the grant not seen after joining: %+v, %v", boxes, err)
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
}
