package build

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// LibDir is where Debian's multiarch libraries are (libibverbs-dev's
// static archives among them).
const LibDir = "/usr/lib/x86_64-linux-gnu"

// DefaultVerbsProviders are the rdma-core providers the image's daemon
// carries: soft-RoCE (rxe), which needs no RDMA NIC. A vendor whose board
// has one adds its provider (mlx5, bnxt_re, irdma, …) with mkimage
// -verbs-providers, and its kernel driver with -modules.
func DefaultVerbsProviders() []string { return []string{"rxe"} }

// VerbsLinkEnv is the environment that links the daemon's RDMA verbs
// (rdma/verbs built with the verbs and verbs_static tags) statically:
// libibverbs, the providers' archives and libnl, found in libDir. A
// static libibverbs registers the providers RDMA_STATIC_PROVIDERS names
// instead of dlopening them, so the image needs none of rdma-core's .so
// files, /etc/libibverbs.d or libnl's shared libraries (zstd, the
// dynamic set was ~0.8 MB; the archives' code the daemon uses adds
// ~0.1 MB).
func VerbsLinkEnv(libDir string, providers []string) ([]string, error) {
	if len(providers) == 0 {
		return nil, fmt.Errorf("build: no verbs providers (rxe for soft-RoCE)")
	}
	libs := []string{"-Wl,--start-group"}
	for _, p := range providers {
		if p == "" || strings.ContainsAny(p, "/, ") {
			return nil, fmt.Errorf("build: verbs provider %q", p)
		}
		// rdma-core names most archives lib<name>-rdmav<ABI>.a; the
		// providers with a direct-verbs API of their own (mlx4, mlx5,
		// efa, mana) lib<name>.a.
		found := ""
		for _, pat := range []string{"lib" + p + "-rdmav*.a", "lib" + p + ".a"} {
			if m, _ := filepath.Glob(filepath.Join(libDir, pat)); len(m) > 0 {
				found = filepath.Base(m[0])
				break
			}
		}
		if found == "" {
			return nil, fmt.Errorf("build: verbs provider %s: no lib%s-rdmav*.a or lib%s.a in %s (apt-get install libibverbs-dev)", p, p, p, libDir)
		}
		libs = append(libs, "-l:"+found)
	}
	for _, a := range []string{"libibverbs.a", "libnl-route-3.a", "libnl-3.a"} {
		if _, err := os.Stat(filepath.Join(libDir, a)); err != nil {
			return nil, fmt.Errorf("build: %w (apt-get install libibverbs-dev, which brings libnl-3-dev and libnl-route-3-dev)", err)
		}
		libs = append(libs, "-l:"+a)
	}
	libs = append(libs, "-Wl,--end-group")
	return []string{
		"CGO_CFLAGS=-O2 -g -DRDMA_STATIC_PROVIDERS=" + strings.Join(providers, ","),
		"CGO_LDFLAGS=-O2 -g " + strings.Join(libs, " "),
	}, nil
}
