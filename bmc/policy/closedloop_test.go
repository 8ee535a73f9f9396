package policy_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"cxlpool/bmc"
	"cxlpool/bmc/pldm"
	"cxlpool/bmc/policy"
	"cxlpool/fabric/mctp"
	"cxlpool/sim/board"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type nopSink struct{}

func (nopSink) Event(bmc.Event)     {}
func (nopSink) Log(policy.LogEntry) {}

// TestClosedLoop drives the simulated board at full load from minimum fan
// duty and lets the policy loop, talking PLDM through the controller,
// bring the DIMM banks back under their caution threshold.
func TestClosedLoop(t *testing.T) {
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	b, err := board.New(board.Config{Clock: clk.Now, PollInterval: time.Hour, InitialDuty: 20})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	da, bo := mctp.Pipe()
	wg.Go(func() { _ = b.Serve(ctx, bo) })
	var ctrl *pldm.Controller
	ep := mctp.NewEndpoint(da, mctp.Config{EID: 0x10}, func(ctx context.Context, src mctp.EID, typ mctp.MsgType, msg []byte) ([]byte, bool) {
		return ctrl.Handle(ctx, src, typ, msg)
	})
	ctrl = pldm.NewController(pldm.NewClient(ep, pldm.ClientConfig{}), pldm.ControllerConfig{ReceiverEID: 0x10, Clock: clk.Now, EventBuffer: 1024})
	defer ctrl.Close()
	wg.Go(func() { _ = ep.Run(ctx) })
	if err := ctrl.Discover(ctx); err != nil {
		t.Fatalf("Discover: %v", err)
	}
	loop, err := policy.New(policy.Config{Board: ctrl, Sink: nopSink{}, Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	b.SetLoad(1)
	hottest := func() float64 {
		var m float64
		for _, v := range b.Snapshot().Banks {
			m = max(m, v)
		}
		return m
	}
	clk.Advance(30 * time.Minute) // uncontrolled: 20 % fans at full load
	if h := hottest(); h < 85 {
		t.Fatalf("uncontrolled DIMMs at %.1f °C, want the scenario to start critical (≥ 85 °C)", h)
	}
	for range 60 { // 30 minutes of 30 s control periods
		clk.Advance(30 * time.Second)
		if err := b.Poll(ctx); err != nil {
			t.Fatalf("board Poll: %v", err)
		}
		if err := loop.Step(ctx); err != nil {
			t.Fatalf("Step: %v", err)
		}
	}
	t.Logf("controlled: hottest %.1f °C at duty %g %%", hottest(), loop.Duty())
	if h := hottest(); h >= 75 {
		t.Errorf("controlled DIMMs at %.1f °C with duty %g %%, want below the 75 °C caution threshold", h, loop.Duty())
	}
	if d := loop.Duty(); d < 50 {
		t.Errorf("duty at full load: got %g %%, want at least 50 %%", d)
	}
}
