package guest

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/u-root/u-root/pkg/kmodule"
)

// testModulesDep is the image's early stage as the build trims
// modules.dep: ext4's chain and virtio's side by side.
const testModulesDep = `kernel/drivers/virtio/virtio.ko:
kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/virtio/virtio_pci.ko: kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko
kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko
kernel/lib/crc16.ko:
kernel/fs/mbcache.ko:
kernel/fs/jbd2/jbd2.ko:
kernel/fs/ext4/ext4.ko: kernel/lib/crc16.ko kernel/fs/mbcache.ko kernel/fs/jbd2/jbd2.ko
kernel/crypto/crc32c_generic.ko:
`

// testModuleTree writes root/lib/modules/KVER/modules.dep for kmodule.
func testModuleTree(t *testing.T) (root, kver string) {
	t.Helper()
	root, kver = t.TempDir(), "6.1.0-test"
	dir := filepath.Join(root, "lib", "modules", kver)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "modules.dep"), []byte(testModulesDep), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, kver
}

// TestProbeWithKmodule runs the stage through u-root's prober (its dry
// run reports each module file instead of loading it): every module
// loads once, after its dependencies, whatever the parallelism.
func TestProbeWithKmodule(t *testing.T) {
	root, kver := testModuleTree(t)
	names := []string{"virtio", "virtio_ring", "virtio_pci", "virtio_blk", "crc16", "mbcache", "jbd2", "ext4", "crc32c_generic"}
	for _, parallel := range []int{1, 2, 8} {
		var mu sync.Mutex
		var order []string
		p, err := kmodule.NewProber(kmodule.ProbeOpts{RootDir: root, KVer: kver, IgnoreProcMods: true,
			DryRunCB: func(path string) {
				mu.Lock()
				order = append(order, strings.TrimSuffix(filepath.Base(path), ".ko"))
				mu.Unlock()
			}})
		if err != nil {
			t.Fatal(err)
		}
		// ext4 first: its probe loads its dependencies itself.
		list := append([]string{"ext4"}, names...)
		res := ProbeConcurrently(list, parallel, func(n string) error { return p.Probe(n, "") })
		line, errs := ModuleSummary(res, 0)
		if len(errs) > 0 || !strings.HasPrefix(line, "10 modules loaded") {
			t.Errorf("parallel %d: got %q %v, want 10 probes, no errors", parallel, line, errs)
		}
		got := slices.Clone(order)
		slices.Sort(got)
		want := slices.Clone(names)
		slices.Sort(want)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("parallel %d: modules loaded (-want +got):\n%s", parallel, diff)
		}
		at := func(n string) int { return slices.Index(order, n) }
		for _, dep := range [][2]string{{"ext4", "jbd2"}, {"ext4", "crc16"}, {"ext4", "mbcache"}, {"virtio_pci", "virtio"}, {"virtio_blk", "virtio_ring"}} {
			if at(dep[0]) < at(dep[1]) {
				t.Errorf("parallel %d: %s loaded before its dependency %s (order %v)", parallel, dep[0], dep[1], order)
			}
		}
	}
}

func TestProbeConcurrentlyParallel(t *testing.T) {
	// With two slots two probes run at once (the test would hang
	// otherwise).
	both := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	inside := 0
	ProbeConcurrently([]string{"crc16", "mbcache"}, 2, func(string) error {
		mu.Lock()
		inside++
		if inside == 2 {
			once.Do(func() { close(both) })
		}
		mu.Unlock()
		<-both
		return nil
	})
	// At most parallel at a time, started in list order.
	var peak int
	var started []string
	inside = 0
	names := []string{"a", "b", "c", "d", "e", "f"}
	ProbeConcurrently(names, 2, func(n string) error {
		mu.Lock()
		inside++
		peak = max(peak, inside)
		started = append(started, n)
		mu.Unlock()
		runtime.Gosched()
		mu.Lock()
		inside--
		mu.Unlock()
		return nil
	})
	if peak > 2 {
		t.Errorf("got %d probes at once, want at most 2", peak)
	}
	if ProbeConcurrently(names, 1, func(n string) error {
		started = append(started, n)
		return nil
	}); !slices.Equal(started[len(names):], names) {
		t.Errorf("one at a time: started %v, want the list's order %v", started[len(names):], names)
	}
}

func TestProbeFailures(t *testing.T) {
	root, kver := testModuleTree(t)
	errNoDevice := errors.New("no such device")
	p, err := kmodule.NewProber(kmodule.ProbeOpts{RootDir: root, KVer: kver, IgnoreProcMods: true, DryRunCB: func(string) {}})
	if err != nil {
		t.Fatal(err)
	}
	res := ProbeConcurrently([]string{"crc16", "jbd2", "ext4", "missing"}, 2, func(n string) error {
		if n == "jbd2" {
			return errNoDevice
		}
		return p.Probe(n, "")
	})
	var failed []string
	for _, r := range res {
		if r.Err != nil {
			failed = append(failed, r.Name)
			if !strings.HasPrefix(r.Err.Error(), r.Name+": ") {
				t.Errorf("error %q does not name the module %s", r.Err, r.Name)
			}
		}
	}
	if diff := cmp.Diff([]string{"jbd2", "missing"}, failed); diff != "" {
		t.Errorf("failed probes (-want +got):\n%s", diff)
	}
	line, errs := ModuleSummary(res, 0)
	if len(errs) != 2 || !strings.HasPrefix(line, "2 modules loaded") {
		t.Errorf("summary: got %q with %d errors, want 2 loaded and 2 errors", line, len(errs))
	}
}

func TestReadModuleList(t *testing.T) {
	list := filepath.Join(t.TempDir(), "modules")
	if err := os.WriteFile(list, []byte("crc16\nmbcache\njbd2\next4\ncrc32c_generic\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadModuleList(list, func(n string) bool { return n != "mbcache" })
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"crc16", "jbd2", "ext4", "crc32c_generic"}, got); diff != "" {
		t.Errorf("modules (-want +got):\n%s", diff)
	}
	if _, err := ReadModuleList(list+".missing", func(string) bool { return true }); err == nil {
		t.Error("missing list: got nil error")
	}
}
