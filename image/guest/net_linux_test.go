package guest

import (
	"os"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestConfigureInterface configures lo in a fresh network namespace (root
// only) and reads the result back from the kernel's tables.
func TestConfigureInterface(t *testing.T) {
	done := make(chan struct{})
	var routes, addrs string
	var err error
	go func() {
		defer close(done)
		// The thread is left in the new namespace and must not be reused.
		runtime.LockOSThread()
		if e := unix.Unshare(unix.CLONE_NEWNET); e != nil {
			err = e
			return
		}
		if err = configureInterface("lo", "10.9.0.1/24", "10.9.0.254"); err != nil {
			return
		}
		b, _ := os.ReadFile("/proc/thread-self/net/route")
		routes = string(b)
		b, _ = os.ReadFile("/proc/thread-self/net/fib_trie")
		addrs = string(b)
	}()
	<-done
	if err == unix.EPERM {
		t.Skip("needs root to make a network namespace")
	}
	if err != nil {
		t.Fatal(err)
	}
	// Default route: destination 0, gateway 10.9.0.254 little-endian hex.
	if !strings.Contains(routes, "lo\t00000000\tFE00090A") {
		t.Errorf("no default route via 10.9.0.254 in:\n%s", routes)
	}
	if !strings.Contains(addrs, "10.9.0.1") {
		t.Errorf("address 10.9.0.1 not in fib_trie:\n%s", addrs)
	}
	if err := configureInterface("lo", "not-an-address", ""); err == nil {
		t.Error("bad address: got nil error")
	}
}
