package nats_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"cxlpool/appliance"
	"cxlpool/dcd"
	"cxlpool/fleet"
	fleetnats "cxlpool/fleet/nats"
	"cxlpool/sim"
)

// daemonEnv makes the test binary a daemon on a virtual box (TestMain),
// so that a test can SIGKILL a whole box: the box, its ledger and its
// fleet publisher die together as they would on hardware.
const daemonEnv = "CXLPOOL_FLEET_TEST_DAEMON"

func TestMain(m *testing.M) {
	if os.Getenv(daemonEnv) != "" {
		if err := runDaemon(); err != nil {
			fmt.Fprintln(os.Stderr, "daemon:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testBlock is the test boxes' DC block size.
const testBlock = 256 << 20

// runDaemon is one box: appliance on a virtual box with the fleet plane
// on the cluster named in the environment; it grants one block to host
// GRANT once up, prints "ready BOX" and runs until SIGTERM.
func runDaemon() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	serial, err := strconv.ParseUint(os.Getenv("SERIAL"), 0, 64)
	if err != nil {
		return err
	}
	ttl, err := time.ParseDuration(os.Getenv("TTL"))
	if err != nil {
		return err
	}
	scfg := sim.DefaultConfig()
	scfg.Capacity, scfg.BlockSize, scfg.Heads, scfg.Serial = 4<<30, testBlock, 4, serial
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	app, err := appliance.Open(ctx, appliance.Config{DataDir: os.Getenv("DATA"), Sim: scfg, Logger: log,
		Fleet: appliance.FleetConfig{Enabled: true, URLs: strings.Split(os.Getenv("URLS"), ","), CredsFile: os.Getenv("CREDS"),
			TTL: ttl, Replicas: 3, API: "https://" + os.Getenv("SERIAL") + ".example:8443/redfish/v1"}})
	if err != nil {
		return err
	}
	defer app.Close()
	if err := app.Start(ctx); err != nil {
		return err
	}
	if g := os.Getenv("GRANT"); g != "" {
		h, err := strconv.Atoi(g)
		if err != nil {
			return err
		}
		c, err := app.Manager.Reserve(ctx, dcd.ReserveRequest{Size: testBlock, Region: 0})
		if err != nil {
			return err
		}
		if _, err := app.Manager.Grant(ctx, c.ID, dcd.HostID(h)); err != nil {
			return err
		}
	}
	fmt.Printf("ready %s\n", app.Fleet.Service.Box())
	<-ctx.Done()
	return nil
}

// daemon is a running box process.
type daemon struct {
	cmd  *exec.Cmd
	done chan struct{}
	box  fleet.BoxID
}

func startDaemon(t *testing.T, env ...string) *daemon {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{daemonEnv + "=1"}, env...)...)
	logf, err := os.CreateTemp(t.TempDir(), "daemon-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{cmd: cmd, done: make(chan struct{})}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if box, ok := strings.CutPrefix(sc.Text(), "ready "); ok {
				ready <- box
			}
		}
		io.Copy(io.Discard, out)
	}()
	go func() { cmd.Wait(); close(d.done) }()
	t.Cleanup(d.kill)
	select {
	case box := <-ready:
		d.box = fleet.BoxID(box)
	case <-d.done:
		b, _ := os.ReadFile(logf.Name())
		t.Fatalf("daemon exited before it was ready:\n%s", b)
	case <-time.After(90 * time.Second):
		b, _ := os.ReadFile(logf.Name())
		t.Fatalf("daemon not ready within 90s:\n%s", b)
	}
	return d
}

func (d *daemon) kill() {
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
}

// waitBoxes polls p until cond holds of the live records, bounded.
func waitBoxes(t *testing.T, p *fleetnats.Plane, what string, limit time.Duration, cond func(map[fleet.BoxID]fleet.Inventory) bool) map[fleet.BoxID]fleet.Inventory {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		list, err := p.Boxes(ctx)
		cancel()
		if err == nil {
			m := map[fleet.BoxID]fleet.Inventory{}
			for _, inv := range list {
				m[inv.Box] = inv
			}
			if cond(m) {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v (last: %d boxes, err %v)", what, limit, len(list), err)
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
}

// TestFleetDaemons runs three boxes, each on its own node of a three-node
// cluster: every node shows all three records (with the granted capacity
// of the box that granted), a grant's event is on the stream for all; a
// box killed with SIGKILL is gone within its TTL and comes back under the
// same identity after a restart.
func TestFleetDaemons(t *testing.T) {
	c := startCluster(t)
	creds := credsFile(t, testUser, testPassword)
	const ttl = 3 * time.Second
	var obs []*fleetnats.Plane
	for i := range c.nodes {
		obs = append(obs, connect(t, fleetnats.Config{URLs: c.urls(i), CredsFile: creds, Replicas: 3, TTL: ttl, Name: fmt.Sprintf("observer%d", i)}))
	}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	env := func(i int) []string {
		e := []string{"DATA=" + dirs[i], fmt.Sprintf("SERIAL=%#x", 0xc0ffee00+i+1), "URLS=" + c.nodes[i].URL,
			"CREDS=" + creds, "TTL=" + ttl.String()}
		if i == 0 {
			e = append(e, "GRANT=1")
		}
		return e
	}
	var ds []*daemon
	for i := range 3 {
		ds = append(ds, startDaemon(t, env(i)...))
	}
	all := func(m map[fleet.BoxID]fleet.Inventory) bool {
		for _, d := range ds {
			if _, ok := m[d.box]; !ok {
				return false
			}
		}
		// The granting box's record shows the grant.
		return len(m[ds[0].box].Heads) > 1 && m[ds[0].box].Heads[1].Granted == testBlock
	}
	for i, p := range obs {
		m := waitBoxes(t, p, fmt.Sprintf("node %d sees all three boxes", i), 30*time.Second, all)
		if got := m[ds[1].box].Regions[0].Free; got != 2<<30 {
			t.Errorf("node %d: %s region 0 free %d, want %d", i, ds[1].box, got, 2<<30)
		}
		if got, want := m[ds[0].box].Regions[0].Granted, uint64(testBlock); got != want {
			t.Errorf("node %d: %s region 0 granted %d, want %d", i, ds[0].box, got, want)
		}
	}
	// The grant on box 0 is on the stream, seen from box 2's node.
	evs := collect(t, obs[2], 1, fmt.Sprintf("%s.%s.host.1.capacity", fleet.SubjectRoot, ds[0].box), 1)
	if evs[0].Box != ds[0].box || evs[0].Kind != fleet.KindCapacity {
		t.Errorf("first capacity event of host 1: %+v", evs[0].Envelope)
	}

	// SIGKILL box 1: no goodbye, its record expires.
	before := waitBoxes(t, obs[0], "box 1 present", time.Second, func(m map[fleet.BoxID]fleet.Inventory) bool { _, ok := m[ds[1].box]; return ok })[ds[1].box]
	killed := time.Now()
	ds[1].kill()
	waitBoxes(t, obs[0], "the killed box disappears", 4*ttl, func(m map[fleet.BoxID]fleet.Inventory) bool { _, ok := m[ds[1].box]; return !ok })
	gone := time.Since(killed)
	t.Logf("killed box gone from the fleet after %v (TTL %v)", gone.Round(time.Millisecond), ttl)

	restarted := time.Now()
	d := startDaemon(t, env(1)...)
	if d.box != ds[1].box {
		t.Errorf("restarted box is %s, want the same identity %s", d.box, ds[1].box)
	}
	ds[1] = d
	for i, p := range obs {
		m := waitBoxes(t, p, fmt.Sprintf("node %d sees the restarted box", i), 30*time.Second, func(m map[fleet.BoxID]fleet.Inventory) bool {
			inv, ok := m[d.box]
			return ok && inv.Started.After(before.Started)
		})
		if m[d.box].Serial != before.Serial {
			t.Errorf("restarted box serial %s, want %s", m[d.box].Serial, before.Serial)
		}
	}
	t.Logf("inventory converged on all three nodes %v after the restart began (daemon start included)", time.Since(restarted).Round(time.Millisecond))
	if gone > 3*ttl {
		t.Errorf("killed box took %v to disappear, want within the TTL plus the server's expiry sweep (%v)", gone, 3*ttl)
	}
}
