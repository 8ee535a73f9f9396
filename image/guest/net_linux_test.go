package guest

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
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

// TestWriteResolver: the owner's name servers (net.dns) replace the
// lease's; without either no resolver file is written.
func TestWriteResolver(t *testing.T) {
	lease := []net.IP{net.ParseIP("10.0.2.3")}
	for _, tc := range []struct {
		name   string
		static []string
		lease  []net.IP
		want   string // "" for no file
	}{
		{"lease", nil, lease, "domain lab.example\nnameserver 10.0.2.3\nsearch lab.example\n"},
		{"net.dns wins", []string{"10.0.2.2", "2001:db8::53"}, lease, "domain lab.example\nnameserver 10.0.2.2\nnameserver 2001:db8::53\nsearch lab.example\n"},
		{"none", nil, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var console strings.Builder
			path := filepath.Join(t.TempDir(), "resolv.conf")
			in := &Init{Out: &console}
			if err := in.writeResolver(path, tc.static, tc.lease, []string{"lab.example"}, "lab.example"); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if tc.want == "" {
				if err == nil {
					t.Errorf("got a resolver file %q, want none", b)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, string(b)); diff != "" {
				t.Errorf("resolv.conf (-want +got):\n%s", diff)
			}
			if !strings.Contains(console.String(), "name servers") {
				t.Errorf("console: got %q, want the name servers said", console.String())
			}
		})
	}
}
