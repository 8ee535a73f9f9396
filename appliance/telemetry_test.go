package appliance_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"cxlpool/appliance"
	"cxlpool/sim"
)

// The pipeline's own tests are in hmu/telemetry; these helpers start
// whole daemons for the appliance's tests.

func openTelApp(t *testing.T, cfg appliance.Config) *appliance.Appliance {
	t.Helper()
	app, stop := startTelApp(t, cfg)
	t.Cleanup(stop)
	return app
}

// startTelApp opens and starts an appliance; stop (idempotent) shuts it down.
func startTelApp(t *testing.T, cfg appliance.Config) (*appliance.Appliance, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if cfg.Device == "" {
		cfg.Device = appliance.DeviceSim
		cfg.Sim = sim.DefaultConfig()
		cfg.Sim.Capacity = 16 << 30
	}
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	app, err := appliance.Open(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := app.Start(ctx); err != nil {
		cancel()
		app.Close()
		t.Fatal(err)
	}
	var once sync.Once
	return app, func() { once.Do(func() { cancel(); app.Manager.Wait(); app.Close() }) }
}

// TestTelemetryAssembled: the virtual box's CHMU is built in, so its
// daemon always has telemetry, over every head; the --chmu parser the
// daemon's flags use is the pipeline's.
func TestTelemetryAssembled(t *testing.T) {
	app := openTelApp(t, appliance.Config{})
	if app.Telemetry == nil {
		t.Fatal("no telemetry on the virtual box")
	}
	if got, want := app.Telemetry.Hosts(), len(app.Manager.Box().Heads); got != want {
		t.Errorf("telemetry tracks %d hosts, want %d (the heads)", got, want)
	}
	if _, err := appliance.ParseCHMU("bar@-1"); err == nil {
		t.Error("ParseCHMU(bar@-1): no error")
	}
}
