//go:build verbs && cgo && linux && verbs_static

package verbs

// The box image's link (image/build): libibverbs, the providers and
// libnl from their static archives (Debian's libibverbs-dev ships them),
// so the image needs no libibverbs.so, provider .so files, driver files
// under /etc/libibverbs.d or libnl beside the C library the daemon
// already links. A static libibverbs cannot dlopen providers: the ones
// it carries are chosen at build time, by the builder's environment
//
//	CGO_CFLAGS=-DRDMA_STATIC_PROVIDERS=rxe,mlx5
//	CGO_LDFLAGS=-Wl,--start-group -l:librxe-rdmav34.a -l:libmlx5.a -l:libibverbs.a -l:libnl-route-3.a -l:libnl-3.a -Wl,--end-group
//
// (image/build.VerbsLinkEnv writes them), which is why this file names
// no libraries itself.
