package build

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestVerbsLinkEnv: each provider is found under the name rdma-core gives
// its archive, the group holds them with libibverbs and libnl, and a
// missing archive names the package to install.
func TestVerbsLinkEnv(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"librxe-rdmav34.a", "libmlx5.a", "libibverbs.a", "libnl-route-3.a", "libnl-3.a"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := VerbsLinkEnv(dir, []string{"rxe", "mlx5"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"CGO_CFLAGS=-O2 -g -DRDMA_STATIC_PROVIDERS=rxe,mlx5",
		"CGO_LDFLAGS=-O2 -g -Wl,--start-group -l:librxe-rdmav34.a -l:libmlx5.a -l:libibverbs.a -l:libnl-route-3.a -l:libnl-3.a -Wl,--end-group"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	for _, tt := range []struct {
		name      string
		providers []string
		wantErr   string
	}{
		{"none", nil, "no verbs providers"},
		{"not installed", []string{"bnxt_re"}, "apt-get install libibverbs-dev"},
		{"not a name", []string{"rxe,mlx5"}, `provider "rxe,mlx5"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := VerbsLinkEnv(dir, tt.providers)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got %v, want an error saying %q", err, tt.wantErr)
			}
		})
	}
	if err := os.Remove(filepath.Join(dir, "libnl-3.a")); err != nil {
		t.Fatal(err)
	}
	if _, err := VerbsLinkEnv(dir, []string{"rxe"}); err == nil || !strings.Contains(err.Error(), "libnl") {
		t.Errorf("without libnl-3.a: got %v, want an error naming it", err)
	}
}
