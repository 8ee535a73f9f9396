package kv_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cxlpool/dcd"
	"cxlpool/fabric/cci"
	"cxlpool/host"
	"cxlpool/kv"
	"cxlpool/kv/client"
)

// The crash test runs the index as a real child process (this test binary
// re-executed) so that SIGKILL stops it between any two instructions. The
// pool memory the clients write lives in the parent, as it lives in the
// box's DRAM beyond the daemon.
const (
	envChild  = "CXLPOOL_KV_CRASH_CHILD"
	envDir    = "CXLPOOL_KV_CRASH_DIR"
	envSocket = "CXLPOOL_KV_CRASH_SOCKET"

	crashChunk  = 64 << 20
	crashChunks = 2
)

var crashToken = [kv.TokenSize]byte{9, 9, 9}

func crashTag(i int) cci.Tag { return cci.Tag{0xcc, byte(i)} }

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		if err := crashChild(); err != nil {
			fmt.Fprintln(os.Stderr, "kv crash child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// crashChild opens the index, makes the namespace on its first start and
// serves until killed.
func crashChild() error {
	// CompactAt 1: the log is rewritten each time it doubles (7 times in
	// a run), so kills land around compactions too.
	ix, err := kv.OpenIndex(kv.IndexConfig{Dir: os.Getenv(envDir), CompactAt: 1, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	if err := ix.CreateNamespace("ns", crashChunk, crashChunks*crashChunk); err == nil {
		for i := range crashChunks {
			if err := ix.AddChunk("ns", kv.ChunkInfo{ID: dcd.ChunkID(i + 1), Tag: crashTag(i), Size: crashChunk}); err != nil {
				return err
			}
		}
		if err := ix.SetMember("ns", 0, crashToken); err != nil {
			return err
		}
	} else if !errors.Is(err, kv.ErrConflict) {
		return err
	}
	if err := ix.Verify(); err != nil {
		return err
	}
	srv, err := kv.NewServer(kv.ServerConfig{Index: ix})
	if err != nil {
		return err
	}
	sock := os.Getenv(envSocket)
	os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	go ix.RunReaper(context.Background(), 5*time.Millisecond)
	fmt.Println("ready")
	return srv.Serve(l)
}

type poolMem map[string][]byte

type memMapping []byte

func (m memMapping) Bytes() []byte { return m }
func (m memMapping) Close() error  { return nil }

func (p poolMem) Map(_ context.Context, tag string) (host.Mapping, error) {
	if b, ok := p[tag]; ok {
		return memMapping(b), nil
	}
	return nil, errors.New("no such chunk")
}

// value is key's content: every byte depends on the key, so bytes of
// another key never pass for it.
func value(key []byte, n int) []byte {
	h := fnv.New64a()
	h.Write(key)
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

// ledger is what the clients were told: acknowledged commits and deletes.
type ledger struct {
	mu      sync.Mutex
	state   map[string]string // "committed", "deleted", "maybe" (in flight when killed)
	lengths map[string]int
}

func (l *ledger) set(k, s string, n int) {
	l.mu.Lock()
	l.state[k] = s
	if n > 0 {
		l.lengths[k] = n
	}
	l.mu.Unlock()
}

func startChild(t *testing.T, dir, sock string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=1", envDir+"="+dir, envSocket+"="+sock)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child: %q %v", line, err)
	}
	return cmd
}

func TestCrashDuringStormLosesNothingCommitted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the index as a child process")
	}
	dir := t.TempDir()
	sock := filepath.Join(t.TempDir(), "kv.sock")
	mem := poolMem{}
	for i := range crashChunks {
		mem[crashTag(i).String()] = make([]byte, crashChunk)
	}
	led := &ledger{state: map[string]string{}, lengths: map[string]int{}}
	dial := func() (*client.Client, error) {
		return client.Dial(context.Background(), client.Config{Network: "unix", Addr: sock, Namespace: "ns", Host: 0, Token: crashToken,
			Mapper: mem, Timeout: 5 * time.Second})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const rounds = 4
	for round := range rounds {
		cmd := startChild(t, dir, sock)
		verify(t, round, dial, led, mem)
		// The storm: 4 clients put, commit and delete until the kill.
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := dial()
				if err != nil {
					return
				}
				defer c.Close()
				var mine []string
				for i := 0; ; i++ {
					k := fmt.Sprintf("r%d-w%d-%d", round, w, i)
					n := 4096 + (i*7919)%(60<<10)
					led.set(k, "maybe", n)
					if err := c.Put(context.Background(), []byte(k), value([]byte(k), n)); err != nil {
						if errors.Is(err, client.ErrNoSpace) {
							led.set(k, "deleted", 0) // refused: never stored
							continue
						}
						return // the daemon died
					}
					led.set(k, "committed", n)
					mine = append(mine, k)
					if i%3 == 2 {
						d := mine[0]
						mine = mine[1:]
						led.set(d, "maybe", 0)
						errs, err := c.Delete(context.Background(), [][]byte{[]byte(d)})
						if err != nil {
							return
						}
						if errs[0] != nil {
							t.Errorf("delete of the committed %s: %v", d, errs[0])
						}
						led.set(d, "deleted", 0)
					}
				}
			}()
		}
		time.Sleep(time.Duration(100+rng.IntN(300)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		wg.Wait()
	}
	cmd := startChild(t, dir, sock)
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	verify(t, rounds, dial, led, mem)
}

// verify checks a restarted index against what the clients were told:
// an acknowledged delete is gone; every key present reads back its own
// bytes; every acknowledged commit is there; nothing is reserved; the
// space adds up.
func verify(t *testing.T, round int, dial func() (*client.Client, error), led *ledger, mem poolMem) {
	t.Helper()
	c, err := dial()
	if err != nil {
		t.Fatalf("round %d: dial: %v", round, err)
	}
	defer c.Close()
	led.mu.Lock()
	defer led.mu.Unlock()
	var keys [][]byte
	for k := range led.state {
		keys = append(keys, []byte(k))
	}
	vals, errs, err := c.GetBatch(context.Background(), keys)
	if err != nil {
		t.Fatalf("round %d: get: %v", round, err)
	}
	var present, committed, deletedSeen int
	var used uint64
	for i, k := range keys {
		st := led.state[string(k)]
		if st == "committed" {
			committed++
		}
		if errs[i] != nil {
			if !errors.Is(errs[i], client.ErrNotFound) {
				t.Fatalf("round %d: get %s: %v", round, k, errs[i])
			}
			continue
		}
		present++
		if st == "deleted" {
			deletedSeen++
			t.Errorf("round %d: %s was deleted (acknowledged) but is back", round, k)
		}
		if want := value(k, len(vals[i])); string(vals[i]) != string(want) {
			t.Errorf("round %d: %s reads bytes that are not its own", round, k)
		}
		used += (uint64(len(vals[i])) + 4095) / 4096 * 4096
	}
	st, err := c.Stat(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Reserved != 0 {
		t.Errorf("round %d: %d bytes reserved after a restart: uncommitted space leaked", round, st.Reserved)
	}
	if st.Used != used || st.Blocks != uint64(present) {
		t.Errorf("round %d: index counts %d blocks, %d bytes; the keys present are %d, %d bytes", round, st.Blocks, st.Used, present, used)
	}
	// The namespace is large enough that the storm never evicts: every
	// acknowledged commit must be there.
	if st.Evictions != 0 {
		t.Fatalf("round %d: %d evictions; the test needs a namespace that never fills", round, st.Evictions)
	}
	if missing := committed - countCommittedPresent(keys, errs, led); missing > 0 {
		t.Errorf("round %d: %d acknowledged commits lost", round, missing)
	}
	t.Logf("round %d: %d keys known, %d present, %d bytes used of %d", round, len(keys), present, st.Used, st.Capacity)
}

func countCommittedPresent(keys [][]byte, errs []error, led *ledger) int {
	n := 0
	for i, k := range keys {
		if led.state[string(k)] == "committed" && errs[i] == nil {
			n++
		}
	}
	return n
}
