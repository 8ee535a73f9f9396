// Package python holds the Python client of the KV store (cxlpool_kv,
// standard library only); this Go test runs its unit tests so that
// `go test ./...` covers them.
package python

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestPython runs `python3 -m unittest` on tests/, with the Go codec's
// golden frames (kv/wire/testdata) for the byte-exact cases.
func TestPython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found: the Python client's tests cannot run here")
	}
	golden, err := filepath.Abs(filepath.Join("..", "..", "kv", "wire", "testdata"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(golden); err != nil {
		t.Logf("no golden frames at %s: the Python golden-frame cases skip", golden)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "discover", "-v", "-s", "tests", "-t", ".")
	cmd.Env = append(os.Environ(), "CXLPOOL_KV_GOLDEN="+golden, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("python3 -m unittest:\n%s", out)
	if err != nil {
		t.Fatalf("python3 -m unittest: %v", err)
	}
}
