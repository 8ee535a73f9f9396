package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cxlpool/fabric/serial"
	"cxlpool/host/vbox"
	"cxlpool/kv/client"
	"cxlpool/sim"
)

// The daemon crash test runs cxlpoold itself (this test binary re-executed
// into run) so that SIGKILL stops the whole daemon, index, ledger and
// servers, between any two instructions. The box runs in the test process
// on a unix socket, as cxlsim would: its memory outlives the daemon, and
// host 0 is an external host whose backend (host/vbox) the test's clients
// map the namespaces' chunks through.
const envDaemonArgs = "CXLPOOLD_TEST_DAEMON_ARGS"

func TestMain(m *testing.M) {
	if a := os.Getenv(envDaemonArgs); a != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := run(ctx, strings.Split(a, "\x1f"), os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "cxlpoold:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const crashAdminPass = "Admin-password-kv-crash-1"

// externalBox serves a virtual box on a unix socket from the test
// process, as cxlsim does, so its memory outlives the daemon; head 0 is an
// external host whose backend (returned) maps the chunks for the test's
// clients. args are the daemon's flags for it (args[5] its API address,
// the KV socket in dir).
func externalBox(t *testing.T) (dir string, h0 *vbox.Backend, args []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	dir = t.TempDir()
	scfg := sim.DefaultConfig()
	scfg.Capacity = 4 << 30
	scfg.BlockSize = 16 << 20
	box, err := sim.New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Close() })
	hostSock := filepath.Join(dir, "h0.sock")
	wait, err := box.ServeExternalHosts(ctx, sim.ExternalHosts{0: "unix:" + hostSock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wait)
	t.Cleanup(cancel) // before wait (cleanups run last first)
	boxSock := "unix:" + filepath.Join(dir, "box.sock")
	l, err := serial.Listen(boxSock)
	if err != nil {
		t.Fatal(err)
	}
	go box.ServeListener(ctx, l)
	t.Cleanup(func() { l.Close() })
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	h0, err = vbox.Dial(dctx, "unix:"+hostSock, vbox.Config{})
	dcancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h0.Close() })
	args = []string{"--device", boxSock, "--data", filepath.Join(dir, "var"), "--listen", freeAddr(t), "--http",
		"--fleet", "off", "--kv-socket", filepath.Join(dir, "kv.sock"), "--log-level", "warn"}
	return dir, h0, args
}

// kvDaemon is one life of the daemon child.
type kvDaemon struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
}

func startKVDaemon(t *testing.T, api string, args []string) *kvDaemon {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envDaemonArgs+"="+strings.Join(args, "\x1f"), "CXLPOOL_ADMIN_PASSWORD="+crashAdminPass)
	d := &kvDaemon{cmd: cmd, stderr: &syncBuffer{}}
	cmd.Stderr = d.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		said := false
		for sc.Scan() {
			if !said && strings.Contains(sc.Text(), "Redfish API at") {
				said = true
				ready <- true
			}
		}
		if !said {
			ready <- false
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			_ = cmd.Wait()
			t.Fatalf("daemon exited before serving:\n%s", d.stderr)
		}
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("daemon not serving within 90 s:\n%s", d.stderr)
	}
	// The listener opens just after the banner.
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := http.Get(api + "/redfish/v1")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			d.kill()
			t.Fatalf("API not answering: %v\n%s", err, d.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return d
}

func (d *kvDaemon) kill() {
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	_ = d.cmd.Wait()
}

// crashValue is key's content: every byte depends on the key, so another
// key's bytes never pass for it.
func crashValue(key string, n int) []byte {
	h := fnv.New64a()
	h.Write([]byte(key))
	x := h.Sum64() | 1
	v := make([]byte, n)
	for i := range v {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		v[i] = byte(x)
	}
	return v
}

// crashLedger is what the clients were told, per namespace: acknowledged
// commits and deletes ("maybe": in flight when the daemon died).
type crashLedger struct {
	mu      sync.Mutex
	state   map[string]string
	lengths map[string]int
}

func (l *crashLedger) set(k, s string, n int) {
	l.mu.Lock()
	l.state[k] = s
	if n > 0 {
		l.lengths[k] = n
	}
	l.mu.Unlock()
}

// crashNS is a namespace of the test: keep never fills (every
// acknowledged commit must come back), evict is small and evicts all the
// time (what comes back must be its own bytes).
type crashNS struct {
	name              string
	chunkMiB, quota   uint64
	workers, budget   int // budget: puts per worker per daemon life (0: until it dies)
	minSize, sizeSpan int
	token             [32]byte
	led               *crashLedger
}

// TestDaemonKilledDuringKVStorm: cxlpoold runs against an external box;
// clients on host 0 put, commit, get and delete in two namespaces (one
// evicting all the time, one never) while the daemon is SIGKILLed at
// random points, five times. After each restart every acknowledged commit
// of the namespace that never evicts reads back its exact bytes, no
// acknowledged delete is back, whatever is there is its own bytes, nothing
// is reserved, and the space adds up: the index's free space plus its
// live blocks is its capacity, and host 0 holds exactly the namespaces'
// chunks (no capacity leaked by a growth the kill cut short).
func TestDaemonKilledDuringKVStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the daemon as a child process five times")
	}
	ctx := t.Context()
	dir, h0, args := externalBox(t)
	kvSock := filepath.Join(dir, "kv.sock")
	api := "http://" + args[5]

	spaces := []*crashNS{
		{name: "keep", chunkMiB: 64, quota: 64, workers: 3, budget: 250, minSize: 4096, sizeSpan: 28 << 10},
		{name: "evict", chunkMiB: 16, quota: 32, workers: 2, minSize: 1 << 20, sizeSpan: 1 << 20},
	}
	d := startKVDaemon(t, api, args)
	for _, ns := range spaces {
		ns.led = &crashLedger{state: map[string]string{}, lengths: map[string]int{}}
		ns.token = createKVNamespace(t, api, ns.name, ns.chunkMiB, ns.quota)
	}
	dial := func(ns *crashNS) (*client.Client, error) {
		return client.Dial(ctx, client.Config{Network: "unix", Addr: kvSock, Namespace: ns.name, Host: 0, Token: ns.token,
			Mapper: h0, Timeout: 20 * time.Second})
	}
	rng := rand.New(rand.NewPCG(15, 9))
	const rounds = 5
	var lives []string
	for round := range rounds {
		if round > 0 {
			d = startKVDaemon(t, api, args)
		}
		for _, ns := range spaces {
			verifyKVAfterRestart(t, round, api, ns, dial, h0, spaces)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		puts, evicted := 0, 0
		for _, ns := range spaces {
			for w := range ns.workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					n, ev := kvStormWorker(t, ctx, dial, ns, round, w)
					mu.Lock()
					puts, evicted = puts+n, evicted+ev
					mu.Unlock()
				}()
			}
		}
		// Kill somewhere in the storm: during puts, commits, deletes,
		// evictions, a growth of the evicting namespace, a compaction.
		time.Sleep(time.Duration(300+rng.IntN(900)) * time.Millisecond)
		st, _ := kvStats(api, "evict")
		d.kill()
		wg.Wait()
		lives = append(lives, fmt.Sprintf("life %d: %d puts acknowledged, %d gets found their block evicted, evict namespace had %d evictions",
			round, puts, evicted, st.Evictions))
		if t.Failed() {
			t.Fatalf("storm round %d failed; daemon log:\n%s", round, d.stderr)
		}
	}
	d = startKVDaemon(t, api, args)
	defer d.kill()
	for _, ns := range spaces {
		verifyKVAfterRestart(t, rounds, api, ns, dial, h0, spaces)
	}
	for _, l := range lives {
		t.Log(l)
	}
	if t.Failed() {
		t.Logf("last daemon's log:\n%s", d.stderr)
	}
}

// kvStormWorker puts, commits and deletes (one in three) until the daemon
// dies or its budget is spent; on the evicting namespace it also reads back
// earlier keys, which must be their own bytes or gone.
func kvStormWorker(t *testing.T, ctx context.Context, dial func(*crashNS) (*client.Client, error), ns *crashNS, round, w int) (puts, evicted int) {
	c, err := dial(ns)
	if err != nil {
		return 0, 0
	}
	defer c.Close()
	var mine []string
	for i := 0; ns.budget == 0 || i < ns.budget; i++ {
		k := fmt.Sprintf("%s-r%d-w%d-%d", ns.name, round, w, i)
		n := ns.minSize + (i*7919)%ns.sizeSpan
		ns.led.set(k, "maybe", n)
		if err := c.Put(ctx, []byte(k), crashValue(k, n)); err != nil {
			if errors.Is(err, client.ErrNoSpace) {
				ns.led.set(k, "deleted", 0) // refused: never stored
				continue
			}
			return puts, evicted // the daemon died
		}
		ns.led.set(k, "committed", n)
		puts++
		mine = append(mine, k)
		if ns.budget == 0 && len(mine) > 1 {
			r := mine[(i*31)%len(mine)]
			v, err := c.Get(ctx, []byte(r))
			switch {
			case errors.Is(err, client.ErrNotFound):
				evicted++
			case err != nil:
				return puts, evicted
			case !bytes.Equal(v, crashValue(r, len(v))):
				t.Errorf("%s: a get during the storm returned bytes that are not its own", r)
			}
		}
		if i%3 == 2 {
			d := mine[0]
			mine = mine[1:]
			ns.led.set(d, "maybe", 0)
			errs, err := c.Delete(ctx, [][]byte{[]byte(d)})
			if err != nil {
				return puts, evicted
			}
			if errs[0] != nil && !(ns.budget == 0 && errors.Is(errs[0], client.ErrNotFound)) {
				t.Errorf("delete of the committed %s: %v", d, errs[0])
			}
			ns.led.set(d, "deleted", 0)
		}
	}
	return puts, evicted
}

// kvStatsBody is the Stats of a namespace's Redfish resource.
type kvStatsBody struct {
	Blocks        uint64 `json:"Blocks"`
	UsedBytes     uint64 `json:"UsedBytes"`
	ReservedBytes uint64 `json:"ReservedBytes"`
	FreeBytes     uint64 `json:"FreeBytes"`
	CapacityMiB   uint64 `json:"CapacityMiB"`
	Evictions     uint64 `json:"Evictions"`
}

func kvStats(api, name string) (kvStatsBody, error) {
	var body struct {
		Stats kvStatsBody `json:"Stats"`
	}
	err := adminJSON(http.MethodGet, api+"/redfish/v1/Oem/CxlPool/KVNamespaces/"+name, nil, &body)
	return body.Stats, err
}

func adminJSON(method, url string, in, out any) error {
	var rd io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return err
	}
	req.SetBasicAuth("admin", crashAdminPass)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

func createKVNamespace(t *testing.T, api, name string, chunkMiB, quotaMiB uint64) [32]byte {
	t.Helper()
	var body struct {
		Tokens []struct{ Host, Token string }
	}
	if err := adminJSON(http.MethodPost, api+"/redfish/v1/Oem/CxlPool/KVNamespaces",
		map[string]any{"Name": name, "ChunkSizeMiB": chunkMiB, "QuotaMiB": quotaMiB, "Hosts": []string{"Host0"}}, &body); err != nil {
		t.Fatal(err)
	}
	var tok [32]byte
	if len(body.Tokens) != 1 {
		t.Fatalf("create %s: tokens %+v", name, body.Tokens)
	}
	if b, err := hex.DecodeString(body.Tokens[0].Token); err != nil || len(b) != 32 {
		t.Fatalf("token %q: %v", body.Tokens[0].Token, err)
	} else {
		copy(tok[:], b)
	}
	return tok
}

// verifyKVAfterRestart checks a restarted daemon's namespace against what
// its clients were told, and that no space leaked.
func verifyKVAfterRestart(t *testing.T, round int, api string, ns *crashNS, dial func(*crashNS) (*client.Client, error), h0 *vbox.Backend, all []*crashNS) {
	t.Helper()
	c, err := dial(ns)
	if err != nil {
		t.Fatalf("round %d: %s: dial: %v", round, ns.name, err)
	}
	defer c.Close()
	led := ns.led
	led.mu.Lock()
	defer led.mu.Unlock()
	keys := make([][]byte, 0, len(led.state))
	for k := range led.state {
		keys = append(keys, []byte(k))
	}
	vals, errs, err := c.GetBatch(context.Background(), keys)
	if err != nil {
		t.Fatalf("round %d: %s: get: %v", round, ns.name, err)
	}
	var present, lost int
	var used uint64
	for i, k := range keys {
		st := led.state[string(k)]
		if errs[i] != nil {
			if !errors.Is(errs[i], client.ErrNotFound) {
				t.Fatalf("round %d: get %s: %v", round, k, errs[i])
			}
			if st == "committed" && ns.budget > 0 {
				lost++
			}
			continue
		}
		present++
		if st == "deleted" {
			t.Errorf("round %d: %s was deleted (acknowledged) but is back", round, k)
		}
		if !bytes.Equal(vals[i], crashValue(string(k), len(vals[i]))) {
			t.Errorf("round %d: %s reads bytes that are not its own", round, k)
		}
		if n := led.lengths[string(k)]; n != len(vals[i]) {
			t.Errorf("round %d: %s reads %d bytes, it was put with %d", round, k, len(vals[i]), n)
		}
		used += (uint64(len(vals[i])) + 4095) / 4096 * 4096
	}
	if lost > 0 {
		t.Errorf("round %d: %s: %d acknowledged commits lost (the namespace never evicts)", round, ns.name, lost)
	}
	st, err := kvStats(api, ns.name)
	if err != nil {
		t.Fatal(err)
	}
	if ns.budget > 0 && st.Evictions != 0 {
		t.Fatalf("round %d: %s: %d evictions; the test needs it never to fill", round, ns.name, st.Evictions)
	}
	if st.ReservedBytes != 0 {
		t.Errorf("round %d: %s: %d bytes reserved after a restart: uncommitted space leaked", round, ns.name, st.ReservedBytes)
	}
	if st.Blocks != uint64(present) || st.UsedBytes != used {
		t.Errorf("round %d: %s: the index counts %d blocks, %d bytes; the keys present are %d, %d bytes", round, ns.name, st.Blocks, st.UsedBytes, present, used)
	}
	if st.UsedBytes+st.FreeBytes != st.CapacityMiB<<20 {
		t.Errorf("round %d: %s: %d bytes used + %d free ≠ capacity %d MiB: space leaked", round, ns.name, st.UsedBytes, st.FreeBytes, st.CapacityMiB)
	}
	if ns == all[len(all)-1] {
		checkHostHoldsNamespaces(t, round, api, h0, all)
	}
	t.Logf("round %d: %s: %d keys known, %d present, %d of %d MiB used", round, ns.name, len(keys), present, st.UsedBytes, st.CapacityMiB)
}

// checkHostHoldsNamespaces: host 0 holds exactly the namespaces' chunks
// once the start's sweep has given back what a cut-short growth left
// (its release is answered by the host asynchronously: bounded poll).
func checkHostHoldsNamespaces(t *testing.T, round int, api string, h0 *vbox.Backend, all []*crashNS) {
	t.Helper()
	var want uint64
	for _, ns := range all {
		st, err := kvStats(api, ns.name)
		if err != nil {
			t.Fatal(err)
		}
		want += st.CapacityMiB << 20
	}
	var got uint64
	for deadline := time.Now().Add(30 * time.Second); ; {
		caps, err := h0.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got = 0
		for _, c := range caps {
			if !c.Releasing {
				got += c.Size
			}
		}
		if got == want || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got != want {
		t.Errorf("round %d: host 0 holds %d MiB, the namespaces %d MiB: pool capacity leaked", round, got>>20, want>>20)
	}
}

// TestDaemonStopDeliversLastKVEvents: the BlockStored events of the last
// commits before a clean stop (SIGTERM right after the last commit is
// acknowledged) reach an SSE client before the daemon closes its stream:
// the daemon quiesces the KV store before the API stops its streams, and
// a stream writes what it was given before it ends.
func TestDaemonStopDeliversLastKVEvents(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the daemon as a child process")
	}
	ctx := t.Context()
	dir, h0, args := externalBox(t)
	kvSock := filepath.Join(dir, "kv.sock")
	api := "http://" + args[5]
	d := startKVDaemon(t, api, args)
	defer d.kill()
	tok := createKVNamespace(t, api, "last", 16, 16)

	req, err := http.NewRequest(http.MethodGet, api+"/redfish/v1/EventService/SSE", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("admin", crashAdminPass)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewReader(resp.Body)
	if l, err := lines.ReadString('\n'); err != nil || !strings.HasPrefix(l, ":") {
		t.Fatalf("SSE stream opens with %q, %v", l, err)
	}

	c, err := client.Dial(ctx, client.Config{Network: "unix", Addr: kvSock, Namespace: "last", Host: 0, Token: tok, Mapper: h0})
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	want := map[string]bool{}
	for i := range n {
		key := []byte{0, 0, 0, 0, 0, 0, 1, byte(i)}
		if err := c.Put(ctx, key, []byte("block")); err != nil {
			t.Fatal(err)
		}
		want[fmt.Sprintf("BlockStored %d", 256+i)] = true
	}
	c.Close()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The stream ends when the daemon stops: everything before is read.
	var events []string
	for {
		l, err := lines.ReadString('\n')
		if err != nil {
			break
		}
		if !strings.HasPrefix(l, "data: ") {
			continue
		}
		var ev struct {
			Events []struct{ MessageArgs []string }
		}
		if err := json.Unmarshal([]byte(l[len("data: "):]), &ev); err != nil {
			t.Fatalf("SSE data %q: %v", l, err)
		}
		for _, e := range ev.Events {
			if len(e.MessageArgs) == 2 && strings.HasPrefix(e.MessageArgs[1], "BlockStored") {
				events = append(events, e.MessageArgs[1])
				delete(want, e.MessageArgs[1])
			}
		}
	}
	if err := d.cmd.Wait(); err != nil {
		t.Errorf("daemon after SIGTERM: %v\n%s", err, d.stderr)
	}
	if len(want) > 0 {
		t.Errorf("%d of %d BlockStored events did not reach the SSE client before the stop (got %d: %v)", len(want), n, len(events), events)
	}
}
