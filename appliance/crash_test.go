package appliance_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/appliance"
	"cxlpool/dcd"
	"cxlpool/fabric/cci"
	"cxlpool/fabric/serial"
	"cxlpool/sim"
)

// The crash test runs the daemon as a real child process (this test binary
// re-executed) so that SIGKILL stops it between any two instructions: no
// deferred cleanup, no flushed buffers, exactly like a power cut of the
// management computer. The virtual box lives on in the parent, as the real
// device would.
const (
	envChild  = "CXLPOOL_STORM_CHILD"
	envDevice = "CXLPOOL_STORM_DEVICE"
	envData   = "CXLPOOL_STORM_DATA"
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		if err := stormChild(); err != nil {
			fmt.Fprintln(os.Stderr, "storm child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const blk = 256 << 20

// stormChild opens the daemon on the shared box and grants, shares,
// releases and deletes from 8 hosts at once until it is killed.
func stormChild() error {
	ctx := context.Background()
	app, err := appliance.Open(ctx, appliance.Config{
		Device: os.Getenv(envDevice), DataDir: os.Getenv(envData),
		Logger:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		AddTimeout: 5 * time.Second, ReleaseTimeout: 5 * time.Second,
	})
	if err != nil {
		return err
	}
	if err := app.Start(ctx); err != nil {
		return err
	}
	fmt.Println("ready")
	m := app.Manager
	var wg sync.WaitGroup
	for h := 0; h < 8; h++ {
		wg.Add(1)
		go func(host dcd.HostID) {
			defer wg.Done()
			for i := 0; ; i++ {
				shared := i%4 == 3
				c, err := m.Reserve(ctx, dcd.ReserveRequest{Size: uint64(1+i%3) * blk, Region: -1, Sharable: shared})
				if err != nil {
					continue
				}
				g, err := m.Grant(ctx, c.ID, host)
				if err != nil {
					continue
				}
				if shared {
					if g2, err := m.Grant(ctx, c.ID, (host+1)%8); err == nil && i%8 == 7 {
						m.Release(ctx, g2.ID)
					}
				}
				if i%2 == 0 {
					m.Release(ctx, g.ID)
					if !shared {
						m.DeleteChunk(ctx, c.ID)
					}
				}
			}
		}(dcd.HostID(h))
	}
	wg.Wait()
	return nil
}

func TestCrashDuringGrantStormKeepsLedgerAndDeviceInAgreement(t *testing.T) {
	if testing.Short() {
		t.Skip("starts daemons as child processes")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	scfg := sim.DefaultConfig()
	scfg.Capacity = 64 << 30
	box, err := sim.New(scfg)
	if err != nil {
		t.Fatalf("sim.New: %v", err)
	}
	defer box.Close()
	sock := "unix:" + filepath.Join(t.TempDir(), "box.sock")
	l, err := serial.Listen(sock)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	go box.ServeListener(ctx, l)
	defer l.Close()
	data := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))

	var total dcd.ReconcileReport
	const rounds = 20
	for round := 0; round < rounds; round++ {
		killAfter := time.Duration(rng.IntN(400)) * time.Millisecond
		runAndKill(t, sock, data, killAfter)
		rep := checkAgreement(t, sock, data, box, round)
		total.Granted += rep.Granted
		total.Failed += rep.Failed
		total.Released += rep.Released
		total.Resumed += rep.Resumed
		total.Orphans += rep.Orphans
		total.Adopted += rep.Adopted
		total.Withdrawn += rep.Withdrawn
	}
	t.Logf("over %d crashes, reconcile found: %d adds to complete, %d adds to fail, %d releases to complete, %d flows to resume, %d grants to adopt, %d offers to withdraw",
		rounds, total.Granted, total.Failed, total.Released, total.Resumed, total.Adopted, total.Withdrawn)
	if total.Orphans != 0 {
		t.Errorf("reconcile found %d orphans: the ledger lost track of capacity", total.Orphans)
	}
}

func runAndKill(t *testing.T, device, data string, after time.Duration) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=1", envDevice+"="+device, envData+"="+data)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child: %v", err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- true
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			cmd.Wait()
			t.Fatalf("child exited before it was ready: %s", stderr.String())
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("child not ready: %s", stderr.String())
	}
	time.Sleep(after)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill: %v", err)
	}
	cmd.Wait()
}

// checkAgreement starts a fresh daemon on the same data and box, lets
// reconcile finish, and compares the ledger with the device.
func checkAgreement(t *testing.T, device, data string, box *sim.Box, round int) dcd.ReconcileReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	app, err := appliance.Open(ctx, appliance.Config{Device: device, DataDir: data,
		Logger: slog.New(slog.DiscardHandler), AddTimeout: 5 * time.Second, ReleaseTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("round %d: reopen: %v", round, err)
	}
	defer app.Close()
	mctx, mcancel := context.WithCancel(ctx)
	defer func() { mcancel(); app.Manager.Wait() }()
	if err := app.Start(mctx); err != nil {
		t.Fatalf("round %d: restart: %v", round, err)
	}
	if err := app.Manager.Settle(ctx); err != nil {
		t.Fatalf("round %d: %v", round, err)
	}
	rep := app.Manager.StartReport() // what the crash left behind
	if again, err := app.Manager.Reconcile(ctx); err != nil {
		t.Fatalf("round %d: second reconcile: %v", round, err)
	} else if again != (dcd.ReconcileReport{}) {
		t.Errorf("round %d: a second reconcile still had work: %+v", round, again)
	}
	// The invariant checker covers what the ledger promises: every grant
	// granted (none left in flight), held by the device exactly, nothing
	// on the device unexplained or offered to nobody, one holder per DPA
	// byte, exports backed.
	for _, check := range []struct {
		what string
		run  func() (dcd.InvariantReport, error)
	}{
		{"the check at start", func() (dcd.InvariantReport, error) { return app.StartCheck(ctx) }},
		{"a check after the second reconcile", func() (dcd.InvariantReport, error) { return app.Manager.CheckInvariants(ctx, app.Exports) }},
	} {
		inv, err := check.run()
		if err != nil {
			t.Fatalf("round %d: %s: %v", round, check.what, err)
		}
		if err := inv.Err(); err != nil {
			t.Errorf("round %d: %s: %v", round, check.what, err)
		}
		if inv.Unsettled != 0 {
			t.Errorf("round %d: %s: %d grants still adding or releasing after reconcile settled", round, check.what, inv.Unsettled)
		}
		if inv.Orphans != 0 {
			t.Errorf("round %d: %s: %d orphans in the ledger", round, check.what, inv.Orphans)
		}
	}
	// What the device answers over the wire is what its hosts hold.
	for h := 0; h < 8; h++ {
		l, err := app.Device.Extents(ctx, uint16(h))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(sortExtents(l.Extents), sortExtents(box.Host(h).Extents())); diff != "" {
			t.Errorf("round %d: host %d: the device's answer differs from what the host holds:\n%s", round, h, diff)
		}
	}
	return rep
}

func sortExtents(es []cci.Extent) []cci.Extent {
	out := append([]cci.Extent(nil), es...)
	sort.Slice(out, func(i, j int) bool { return out[i].DPA < out[j].DPA })
	return out
}
