package appliance_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"cxlpool/appliance"
	"cxlpool/dcd"
	"cxlpool/fabric/serial"
	"cxlpool/sim"
)

// serveBox serves box on addr until the returned stop is called; stopping
// drops every connection, as a device restart or an unplugged cable does.
func serveBox(t *testing.T, box *sim.Box, addr string) (stop func()) {
	t.Helper()
	l, err := serial.Listen(addr)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		box.ServeListener(ctx, l)
	}()
	return func() { cancel(); <-done }
}

func TestDaemonReconnectsAfterLinkLoss(t *testing.T) {
	scfg := sim.DefaultConfig()
	scfg.Capacity = 16 << 30
	box, err := sim.New(scfg)
	if err != nil {
		t.Fatalf("sim.New: %v", err)
	}
	defer box.Close()
	addr := "unix:" + filepath.Join(t.TempDir(), "box.sock")
	stopServe := serveBox(t, box, addr)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	app, err := appliance.Open(ctx, appliance.Config{Device: addr, DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer app.Close()
	mctx, mcancel := context.WithCancel(ctx)
	defer func() { mcancel(); app.Manager.Wait() }()
	if err := app.Start(mctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	m := app.Manager
	c, err := m.Reserve(ctx, dcd.ReserveRequest{Size: 1 << 30, Region: -1})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	g, err := m.Grant(ctx, c.ID, 2)
	if err != nil {
		t.Fatalf("Grant: %v", err)
	}

	changes, unsub := m.Subscribe(64)
	defer unsub()
	stopServe()                        // the link drops
	stopServe = serveBox(t, box, addr) // the device is back
	defer stopServe()

	// The daemon redials, rediscovers and reconciles by itself.
	deadline := time.After(30 * time.Second)
	for seen := false; !seen; {
		select {
		case ch := <-changes:
			seen = ch.Kind == dcd.ChangeDevice
		case <-deadline:
			t.Fatal("no device change published after the link came back")
		}
	}
	var g2 dcd.Grant
	for i := 0; ; i++ { // the first calls may still meet the old link
		c2, err := m.Reserve(ctx, dcd.ReserveRequest{Size: 1 << 30, Region: -1})
		if err != nil {
			t.Fatalf("Reserve after reconnect: %v", err)
		}
		if g2, err = m.Grant(ctx, c2.ID, 3); err == nil {
			break
		}
		if i == 50 {
			t.Fatalf("Grant after reconnect: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if g2.State != dcd.GrantGranted {
		t.Errorf("grant after reconnect is %s, want granted", g2.State)
	}
	if got, err := app.Ledger.Grant(ctx, g.ID); err != nil || got.State != dcd.GrantGranted {
		t.Errorf("grant made before the link loss: %s %v, want still granted", got.State, err)
	}
}
