//go:build verbs && cgo && linux && !verbs_static

package verbs

// The default link: libibverbs.so, which dlopens the provider of each
// device it finds (named by /etc/libibverbs.d/*.driver; rdma-core's
// ibverbs-providers installs them).

/*
#cgo LDFLAGS: -libverbs
*/
import "C"
