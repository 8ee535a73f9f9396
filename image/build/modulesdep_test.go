package build

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/u-root/u-root/pkg/kmodule"
)

// TestModulesDepForKmodule: the modules.dep the build writes is one that
// u-root's kmodule (boxinit's loader) resolves: every module, with its
// dependencies first. A "path: " line with nothing after the colon made
// every probe fail with "module not in depmap" on the image.
func TestModulesDepForKmodule(t *testing.T) {
	root, kver := t.TempDir(), "6.1.0-test"
	dir := filepath.Join(root, "lib", "modules", kver)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dep := ModulesDepLine("kernel/lib/crc16.ko", nil) + ModulesDepLine("kernel/fs/jbd2/jbd2.ko", nil) +
		ModulesDepLine("kernel/fs/ext4/ext4.ko", []string{"kernel/lib/crc16.ko", "kernel/fs/jbd2/jbd2.ko"})
	if strings.Contains(dep, ": \n") {
		t.Errorf("modules.dep has a line with a trailing space:\n%s", dep)
	}
	if err := os.WriteFile(filepath.Join(dir, "modules.dep"), []byte(dep), 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	p, err := kmodule.NewProber(kmodule.ProbeOpts{RootDir: root, KVer: kver, IgnoreProcMods: true, DryRunCB: func(path string) {
		mu.Lock()
		order = append(order, filepath.Base(path))
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"crc16", "jbd2", "ext4"} {
		if err := p.Probe(m, ""); err != nil {
			t.Errorf("probe %s: %v", m, err)
		}
	}
	if len(order) != 3 || order[2] != "ext4.ko" {
		t.Errorf("loaded %v, want crc16 and jbd2, then ext4", order)
	}
}
