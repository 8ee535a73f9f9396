package api_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"cxlpool/api"
	"cxlpool/api/apitest"
	"cxlpool/dcd"
	"cxlpool/dcd/sqlite"
	"cxlpool/fabric"
	"cxlpool/fabric/fm"
	"cxlpool/fabric/serial"
	"cxlpool/sim"
)

// faultyDevice is the FM's link to a virtual box with two faults of other
// devices and links: a device that logs no Add Capacity Response record
// when the host accepted nothing (the host's rejection is then seen only
// in the device's lists), and a link that is down (every call fails as
// the redialing link does while it reconnects).
type faultyDevice struct {
	fabric.Device
	silentReject atomic.Bool
	dead         atomic.Bool
	events       chan fabric.Event
}

func newFaultyDevice(d fabric.Device) *faultyDevice {
	f := &faultyDevice{Device: d, events: make(chan fabric.Event, 256)}
	go func() {
		defer close(f.events)
		for ev := range d.Events() {
			if f.silentReject.Load() && ev.Kind == fabric.EventAddResponse && len(ev.Extents) == 0 {
				continue
			}
			f.events <- ev
		}
	}()
	return f
}

var errLinkDown = fmt.Errorf("device link is down, reconnecting: %w", fabric.ErrClosed)

func (f *faultyDevice) Events() <-chan fabric.Event { return f.events }

func (f *faultyDevice) Discover(ctx context.Context) (fabric.Box, error) {
	if f.dead.Load() {
		return fabric.Box{}, errLinkDown
	}
	return f.Device.Discover(ctx)
}

func (f *faultyDevice) Heads(ctx context.Context) ([]fabric.Head, error) {
	if f.dead.Load() {
		return nil, errLinkDown
	}
	return f.Device.Heads(ctx)
}

func (f *faultyDevice) Add(ctx context.Context, r fabric.AddRequest) error {
	if f.dead.Load() {
		return errLinkDown
	}
	return f.Device.Add(ctx, r)
}

func (f *faultyDevice) Release(ctx context.Context, r fabric.ReleaseRequest) error {
	if f.dead.Load() {
		return errLinkDown
	}
	return f.Device.Release(ctx, r)
}

func (f *faultyDevice) Extents(ctx context.Context, host uint16) (fabric.ExtentList, error) {
	if f.dead.Load() {
		return fabric.ExtentList{}, errLinkDown
	}
	return f.Device.Extents(ctx, host)
}

func (f *faultyDevice) Tags(ctx context.Context) (fabric.TagList, error) {
	if f.dead.Load() {
		return fabric.TagList{}, errLinkDown
	}
	return f.Device.Tags(ctx)
}

// faultEnv runs the API over a Manager whose device is a faultyDevice in
// front of a virtual box served on a Unix socket.
func faultEnv(t *testing.T) (*apitest.Env, *sim.Box, *faultyDevice) {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	scfg := sim.DefaultConfig()
	scfg.Capacity = 16 << 30
	box, err := sim.New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Close() })
	sock := filepath.Join(t.TempDir(), "box.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); box.ServeListener(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-served })

	rw, err := serial.Dial(ctx, "unix:"+sock)
	if err != nil {
		t.Fatal(err)
	}
	client, err := fm.Open(ctx, serial.NewLink(rw, serial.LinkConfig{Logger: log}), fm.Config{Logger: log, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	dev := newFaultyDevice(client)
	dir := t.TempDir()
	led, err := sqlite.Open(ctx, filepath.Join(dir, "inventory.db"), sqlite.Options{Logger: log, Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	m, err := dcd.NewManager(dcd.Config{Ledger: led, Device: dev, Logger: log,
		AddTimeout: 500 * time.Millisecond, ReleaseTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	mctx, mcancel := context.WithCancel(ctx)
	if err := m.Start(mctx); err != nil {
		mcancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { mcancel(); m.Wait() })
	clock := apitest.NewClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	cfg := api.Config{Manager: m, Device: dev, DataDir: dir, Logger: log, Clock: clock.Now,
		AdminPassword: apitest.AdminPassword, FirmwareVersion: "test-1.0", BcryptCost: bcrypt.MinCost}
	srv, err := api.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { srv.Close(); ts.Close() })
	env := &apitest.Env{T: t, Server: srv, HTTP: ts, Clock: clock, Config: cfg}
	env.Admin = env.Login("admin", apitest.AdminPassword)
	return env, box, dev
}

// resolution is the first message's Resolution of an error answer.
func resolution(t *testing.T, r *apitest.Response) string {
	t.Helper()
	msgs, _ := get(r.JSON(t), "error", "@Message.ExtendedInfo").([]any)
	if len(msgs) == 0 {
		return ""
	}
	s, _ := msgs[0].(map[string]any)["Resolution"].(string)
	return s
}

// TestDeviceFaultAnswers: a host that accepts nothing is a 409 naming the
// host's refusal whether or not the device logs a record for it, and a
// device that cannot be reached is a 503 with Retry-After; neither leaves
// anything granted, and the next grant works.
func TestDeviceFaultAnswers(t *testing.T) {
	env, box, dev := faultEnv(t)
	noneHeld := func(t *testing.T, ld int) {
		t.Helper()
		if exts := box.Host(ld).Extents(); len(exts) != 0 {
			t.Errorf("host %d holds %v after the failed grant", ld, exts)
		}
		tags, err := dev.Device.Tags(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, tg := range tags.Tags {
			if tg.HasPending(uint16(ld)) {
				t.Errorf("an offer to host %d is still pending: %+v", ld, tg)
			}
		}
	}
	for _, tc := range []struct {
		name   string
		ld     int
		setup  func()
		status int
		msg    string
		retry  bool
		reason string // in the Resolution
	}{
		{"host rejects, device logs the answer", 1, func() { box.Host(1).SetPolicy(sim.Policy{Mode: sim.Reject}) },
			http.StatusConflict, "GeneralError", false, "did not accept"},
		{"host rejects, device logs no answer record", 2, func() {
			box.Host(2).SetPolicy(sim.Policy{Mode: sim.Reject})
			dev.silentReject.Store(true)
		}, http.StatusConflict, "GeneralError", false, "did not accept"},
		{"device link down", 3, func() { dev.dead.Store(true) },
			http.StatusServiceUnavailable, "ServiceTemporarilyUnavailable", true, "does not answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.setup()
			chunk := reserve(t, env.Admin, blockMiB, nil)
			done := waitTask(t, env.Admin, startConnect(t, env.Admin, chunk, tc.ld))
			wantStatus(t, "task", done, tc.status, tc.msg)
			apitest.Validate(t, done.Body)
			if got := done.Header.Get("Retry-After") != ""; got != tc.retry {
				t.Errorf("Retry-After %q, want one: %v", done.Header.Get("Retry-After"), tc.retry)
			}
			if r := resolution(t, done); !strings.Contains(r, tc.reason) {
				t.Errorf("resolution %q, want it to say %q", r, tc.reason)
			}
			dev.dead.Store(false)
			dev.silentReject.Store(false)
			noneHeld(t, tc.ld)
			// The state is clean: the same host takes the chunk now.
			box.Host(tc.ld).SetPolicy(sim.Policy{Mode: sim.AcceptAll})
			connect(t, env.Admin, chunk, tc.ld)
			if n := box.Host(tc.ld).Extents(); len(n) == 0 {
				t.Errorf("host %d holds nothing after the retried grant", tc.ld)
			}
		})
	}
	t.Run("reads while the link is down", func(t *testing.T) {
		dev.dead.Store(true)
		defer dev.dead.Store(false)
		r := env.Admin.Get("/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks")
		if r.Status >= 500 {
			t.Errorf("chunks collection with the link down: got %s, want no 5xx (the ledger answers)", r)
		}
	})
}
