package appliance_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cxlpool/appliance"
	"cxlpool/bmc"
	"cxlpool/bmc/policy"
	"cxlpool/dcd"
	"cxlpool/sim"
)

// fakeClock drives the simulated board's physics, so a test can let
// minutes pass at once.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// hwmonFixture is bmc/hwmon's fixture tree of a management computer.
func hwmonFixture(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "bmc", "hwmon", "testdata", "basic"))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// startApp runs a daemon on the in-process virtual box.
func startApp(t *testing.T, mod func(*appliance.Config)) *appliance.Appliance {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	cfg := appliance.Config{Device: appliance.DeviceSim, DataDir: t.TempDir(), Sim: sim.DefaultConfig(), Logger: logger,
		AddTimeout: 2 * time.Second, ReleaseTimeout: 2 * time.Second, Synchronous: "NORMAL"}
	cfg.Board.HwmonRoot = hwmonFixture(t)
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	app, err := appliance.Open(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatalf("Open: %v", err)
	}
	if err := app.Start(ctx); err != nil {
		cancel()
		app.Close()
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		app.Manager.Wait()
		app.Close()
	})
	return app
}

// eventually polls cond until it holds or 20 s have passed.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestBoardOnTheVirtualBox(t *testing.T) {
	app := startApp(t, nil)
	b := app.Board
	ctx := t.Context()
	if !b.Present() {
		t.Fatal("board controller not discovered on the virtual box")
	}
	sensors, err := b.Sensors(ctx)
	if err != nil {
		t.Fatalf("Sensors: %v", err)
	}
	var ids []string
	for _, s := range sensors {
		ids = append(ids, s.ID)
	}
	for _, want := range []string{"InletTemp", "OutletTemp", "DIMMBank1Temp", "Fan1Speed", "PSU1InputPower", "PSU2OutputVoltage"} {
		if !slices.Contains(ids, want) {
			t.Errorf("Sensors: %s missing from %v", want, ids)
		}
	}
	fans, err := b.Fans(ctx)
	if err != nil || len(fans) != 4 {
		t.Fatalf("Fans: got %d fans, %v; want 4", len(fans), err)
	}
	psus, err := b.PowerSupplies(ctx)
	if err != nil || len(psus) != 2 {
		t.Fatalf("PowerSupplies: got %d, %v; want 2", len(psus), err)
	}
	if p := psus[0]; p.InputWatts <= p.OutputWatts || p.OutputWatts <= 0 || p.InputVolts < 200 || p.OutputVolts < 11 {
		t.Errorf("PSU1 readings implausible: %+v", p)
	}
	heads, err := b.HeadPower(ctx)
	if err != nil || len(heads) != 8 {
		t.Fatalf("HeadPower: got %d heads, %v; want 8", len(heads), err)
	}
	for _, h := range heads {
		if h.State != bmc.PowerOn {
			t.Errorf("head %d is %s at start, want On", h.Host, h.State)
		}
	}
	for _, on := range []bool{true, false} {
		if err := b.SetIdentify(ctx, on); err != nil {
			t.Fatalf("SetIdentify(%v): %v", on, err)
		}
		if got := app.Box.Board().Snapshot().Identify; got != on {
			t.Errorf("identify LED after SetIdentify(%v): got %v", on, got)
		}
		if got, err := b.Identify(ctx); err != nil || got != on {
			t.Errorf("Identify after SetIdentify(%v): got %v, %v", on, got, err)
		}
	}
	mgmt, err := b.ManagerSensors(ctx)
	if err != nil || len(mgmt) == 0 {
		t.Errorf("ManagerSensors from the fixture: got %d, %v; want some", len(mgmt), err)
	}
}

func TestBoardWithoutHwmon(t *testing.T) {
	app := startApp(t, func(c *appliance.Config) { c.Board.HwmonRoot = filepath.Join(t.TempDir(), "missing") })
	got, err := app.Board.ManagerSensors(t.Context())
	if err != nil || len(got) != 0 {
		t.Errorf("ManagerSensors without a hwmon class: got %d, %v; want none and no error", len(got), err)
	}
}

// A failed fan raises alarms with their registry messages, and the policy
// loop runs the other fans flat out.
func TestBoardFanFailure(t *testing.T) {
	clock := &fakeClock{now: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)}
	app := startApp(t, func(c *appliance.Config) {
		c.Sim.Board.Clock = clock.Now
		c.Board.PolicyInterval = 20 * time.Millisecond
	})
	alarms, cancel := app.Board.SubscribeAlarms(64)
	defer cancel()
	board := app.Box.Board()
	if err := board.FailFan(0, true); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	if err := board.Poll(t.Context()); err != nil {
		t.Fatalf("Poll: %v", err)
	}
	want := map[string]string{
		"ResourceEvent.1.4.ResourceErrorThresholdExceeded": "Fan1Speed",
		"ResourceEvent.1.4.ResourceStatusChangedCritical":  "Fan1",
	}
	got := map[string]string{}
	timeout := time.After(20 * time.Second)
	for len(got) < len(want) {
		select {
		case e := <-alarms:
			if _, ok := want[e.MessageID]; ok && e.Origin == want[e.MessageID] {
				got[e.MessageID] = e.Origin
				if e.Severity != policy.SeverityCritical {
					t.Errorf("%s severity %s, want Critical", e.MessageID, e.Severity)
				}
			}
		case <-timeout:
			t.Fatalf("alarms: got %v, want %v", got, want)
		}
	}
	eventually(t, "the working fans at 100 %", func() bool {
		s := board.Snapshot()
		return !slices.ContainsFunc(s.FanDuty[1:], func(d float64) bool { return d < 100 })
	})
	fans, err := app.Board.Fans(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if fans[0].Health != bmc.Critical {
		t.Errorf("Fan1 health after failing: got %s, want Critical", fans[0].Health)
	}
}

// A head power cycle releases the host's capacity (forced and sanitized)
// before the power is cut, the link goes down and up, and the host can be
// given capacity again.
func TestBoardPowerCycleFencesCapacity(t *testing.T) {
	app := startApp(t, func(c *appliance.Config) { c.Board.CycleOff = 100 * time.Millisecond })
	ctx := t.Context()
	m := app.Manager
	c, err := m.Reserve(ctx, dcd.ReserveRequest{Size: 1 << 30, Region: -1})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	g, err := m.Grant(ctx, c.ID, 3)
	if err != nil {
		t.Fatalf("Grant: %v", err)
	}
	changes, unsub := m.Subscribe(256)
	defer unsub()
	if err := app.Board.ResetHead(ctx, 3, bmc.ResetPowerCycle); err != nil {
		t.Fatalf("ResetHead: %v", err)
	}
	got, err := app.Ledger.Grant(ctx, g.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != dcd.GrantReleased || !strings.Contains(got.Reason, "power cycle") {
		t.Errorf("grant after the power cycle: got %s %q, want released for the power cycle", got.State, got.Reason)
	}
	if l, err := app.Device.Extents(ctx, 3); err != nil || len(l.Extents) != 0 {
		t.Errorf("device extents of host 3: got %d, %v; want none", len(l.Extents), err)
	}
	eventually(t, "host 3's link back up", func() bool { h, _ := m.Box().Head(3); return h.LinkUp })
	var msgs []string
	for len(changes) > 0 {
		if ch := <-changes; ch.Kind == dcd.ChangeHost && ch.Host == 3 {
			msgs = append(msgs, ch.Message)
		}
	}
	// The link changes arrive on the device's time; the fence must come
	// before the cut and be lifted after it.
	if len(msgs) == 0 || msgs[0] != "fenced for a head power cycle" || !slices.Contains(msgs, "link down") || !slices.Contains(msgs, "fence lifted") {
		t.Errorf("host 3 changes: got %v, want the fence first, the link going down and the fence lifted", msgs)
	}
	if _, err := m.Grant(ctx, c.ID, 3); err != nil {
		t.Errorf("Grant after the power cycle: %v", err)
	}
	heads, err := app.Board.HeadPower(ctx)
	if err != nil || heads[3].State != bmc.PowerOn {
		t.Errorf("head 3 after the cycle: %+v, %v; want On", heads, err)
	}
}

// A device without a board controller: the daemon runs, the board
// answers unavailable and says why.
func TestBoardAbsent(t *testing.T) {
	app := startApp(t, func(c *appliance.Config) {
		c.Sim.Board.EID = 0x30 // nobody answers at EID 9
		c.Board.DiscoverTimeout = 200 * time.Millisecond
	})
	ctx := t.Context()
	if app.Board.Present() {
		t.Fatal("Present: got true without a board controller at EID 9")
	}
	_, err := app.Board.Sensors(ctx)
	if !errors.Is(err, bmc.ErrUnavailable) || !strings.Contains(err.Error(), "not answering") {
		t.Errorf("Sensors without a board: got %v, want ErrUnavailable saying the controller is not answering", err)
	}
	if err := app.Board.ResetHead(ctx, 3, bmc.ResetPowerCycle); !errors.Is(err, bmc.ErrUnavailable) {
		t.Errorf("ResetHead without a board: got %v, want ErrUnavailable", err)
	}
	c, err := app.Manager.Reserve(ctx, dcd.ReserveRequest{Size: 1 << 30, Region: -1})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if _, err := app.Manager.Grant(ctx, c.ID, 1); err != nil {
		t.Errorf("Grant without a board: %v", err)
	}
}
