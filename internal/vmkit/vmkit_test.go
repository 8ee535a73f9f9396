package vmkit

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCPIO: files come after their directories, each directory once, and
// the archive ends with the trailer.
func TestCPIO(t *testing.T) {
	var b bytes.Buffer
	c := NewCPIO(&b)
	c.File("init", 0o755, []byte("x"))
	c.File("lib/modules/a.ko", 0o644, []byte("ab"))
	c.File("lib/modules/b.ko", 0o644, nil)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "kernel/net"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kernel/net/c.ko"), []byte("c"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Modules(dir, []string{"kernel/net/c.ko"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for rest := b.Bytes(); len(rest) >= 110; {
		hdr := string(rest[:110])
		if !strings.HasPrefix(hdr, "070701") {
			t.Fatalf("bad magic %q", hdr[:6])
		}
		var size, nameLen int
		parseHex(t, hdr[54:62], &size)
		parseHex(t, hdr[94:102], &nameLen)
		name := string(rest[110 : 110+nameLen-1])
		got = append(got, name)
		n := (110 + nameLen + 3) &^ 3
		n += (size + 3) &^ 3
		rest = rest[n:]
	}
	want := []string{"init", "lib", "lib/modules", "lib/modules/a.ko", "lib/modules/b.ko",
		"lib/modules/c.ko", "modules.order", "TRAILER!!!"}
	if !bytes.Contains(b.Bytes(), []byte("modules.order\x00/lib/modules/c.ko\n")) {
		t.Error("modules.order does not name /lib/modules/c.ko")
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
}

func parseHex(t *testing.T, s string, v *int) {
	t.Helper()
	n, err := strconv.ParseUint(s, 16, 32)
	if err != nil {
		t.Fatal(err)
	}
	*v = int(n)
}
