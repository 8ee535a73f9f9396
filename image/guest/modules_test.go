package guest

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The early stage of the image: ext4's chain and virtio's side by side.
var testModules = []Module{
	{Name: "virtio"}, {Name: "virtio_ring"},
	{Name: "virtio_pci", Deps: []string{"virtio", "virtio_ring"}},
	{Name: "virtio_blk", Deps: []string{"virtio_ring", "virtio"}},
	{Name: "crc16"}, {Name: "mbcache"}, {Name: "jbd2"},
	{Name: "ext4", Deps: []string{"crc16", "mbcache", "jbd2"}},
	{Name: "virtio_net", Deps: []string{"net_failover", "virtio"}}, // net_failover: an earlier stage's
}

func TestLoadConcurrentlyOrder(t *testing.T) {
	for _, parallel := range []int{1, 2, 8} {
		var mu sync.Mutex
		loaded := map[string]bool{}
		var bad []string
		res := LoadConcurrently(testModules, parallel, func(m Module) error {
			mu.Lock()
			for _, d := range m.Deps {
				if d != "net_failover" && !loaded[d] {
					bad = append(bad, m.Name+" before "+d)
				}
			}
			loaded[m.Name] = true
			mu.Unlock()
			return nil
		})
		if len(bad) > 0 {
			t.Errorf("parallel %d: loaded %v", parallel, bad)
		}
		line, errs := ModuleSummary(res, 0)
		if len(errs) > 0 || !strings.HasPrefix(line, "9 modules loaded") {
			t.Errorf("parallel %d: got %q %v, want 9 loaded, no errors", parallel, line, errs)
		}
	}
}

func TestLoadConcurrentlyParallel(t *testing.T) {
	// crc16 and mbcache have no dependencies: with two slots both are
	// loading at once (the test would hang otherwise).
	both := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	inside := 0
	LoadConcurrently([]Module{{Name: "crc16"}, {Name: "mbcache"}}, 2, func(m Module) error {
		mu.Lock()
		inside++
		if inside == 2 {
			once.Do(func() { close(both) })
		}
		mu.Unlock()
		<-both
		return nil
	})
	// At most parallel at a time.
	var peak int
	inside = 0
	LoadConcurrently(testModules, 2, func(m Module) error {
		mu.Lock()
		inside++
		peak = max(peak, inside)
		mu.Unlock()
		runtime.Gosched()
		mu.Lock()
		inside--
		mu.Unlock()
		return nil
	})
	if peak > 2 {
		t.Errorf("got %d loads at once, want at most 2", peak)
	}
}

func TestLoadConcurrentlyFailures(t *testing.T) {
	errNoDevice := errors.New("no such device")
	res := LoadConcurrently(testModules, 2, func(m Module) error {
		switch m.Name {
		case "jbd2":
			return errNoDevice
		case "virtio":
			return errAlreadyLoaded
		}
		return nil
	})
	got := map[string]string{}
	for _, r := range res {
		switch {
		case r.Err != nil:
			got[r.Name] = r.Err.Error()
		case r.Present:
			got[r.Name] = "present"
		}
	}
	want := map[string]string{
		"jbd2":   "jbd2: no such device",
		"ext4":   "ext4: needs jbd2, which did not load",
		"virtio": "present",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	line, errs := ModuleSummary(res, 0)
	if len(errs) != 2 || !strings.HasPrefix(line, "6 modules loaded") {
		t.Errorf("summary: got %q with %d errors, want 6 loaded and 2 errors", line, len(errs))
	}
}

func TestReadModules(t *testing.T) {
	dir := t.TempDir()
	dep := "kernel/fs/ext4/ext4.ko: kernel/lib/crc16.ko kernel/fs/mbcache.ko kernel/fs/jbd2/jbd2.ko\n" +
		"kernel/lib/crc16.ko:\nkernel/fs/mbcache.ko:\nkernel/fs/jbd2/jbd2.ko:\n" +
		"kernel/crypto/crc32c-generic.ko:\n"
	if err := os.WriteFile(filepath.Join(dir, "modules.dep"), []byte(dep), 0o644); err != nil {
		t.Fatal(err)
	}
	list := filepath.Join(dir, "modules")
	if err := os.WriteFile(list, []byte("crc16\nmbcache\njbd2\next4\ncrc32c_generic\nmissing\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadModules(list, dir, func(n string) bool { return n != "mbcache" })
	want := []Module{
		{Name: "crc16", Path: filepath.Join(dir, "kernel/lib/crc16.ko")},
		{Name: "jbd2", Path: filepath.Join(dir, "kernel/fs/jbd2/jbd2.ko")},
		{Name: "ext4", Path: filepath.Join(dir, "kernel/fs/ext4/ext4.ko"), Deps: []string{"crc16", "mbcache", "jbd2"}},
		{Name: "crc32c_generic", Path: filepath.Join(dir, "kernel/crypto/crc32c-generic.ko")},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("modules (-want +got):\n%s", diff)
	}
	if err == nil || !strings.Contains(err.Error(), "missing: not in modules.dep") {
		t.Errorf("got error %v, want one about the missing module", err)
	}
}
