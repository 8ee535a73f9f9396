package verbs_test

import (
	"bytes"
	"errors"
	"net"
	"testing"

	"cxlpool/rdma"
	"cxlpool/rdma/client"
	"cxlpool/rdma/internal/fake"
	"cxlpool/rdma/tcp"
	"cxlpool/rdma/verbs"
)

// TestOpenFallsBackToTCP: a server without the verbs extension (or a
// binary without the tag, or a machine without a device) is reached over
// TCP, and Open says why; a bad token is refused, not retried.
func TestOpenFallsBackToTCP(t *testing.T) {
	env := fake.NewEnv(t, rdma.Config{})
	s, err := tcp.NewServer(tcp.Config{Auth: env.Service})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	x := env.Export(t, rdma.PermReadWrite)
	ctx := t.Context()
	cfg := client.Config{Addr: ln.Addr().String(), Export: x.ID, Token: x.Token}
	c, why, err := verbs.Open(ctx, cfg, verbs.Config{GIDIndex: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if why == "" {
		t.Error("Open picked verbs on a server without the verbs extension")
	}
	t.Logf("transport: %s", why)
	if err := c.Write(ctx, []byte("tcp"), 10); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 3)
	if err := c.Read(ctx, got, 10); err != nil || !bytes.Equal(got, []byte("tcp")) {
		t.Errorf("read back %q, %v", got, err)
	}
	bad := cfg
	bad.Token[0] ^= 1
	if c, _, err := verbs.Open(ctx, bad, verbs.Config{}); !errors.Is(err, rdma.ErrDenied) {
		t.Errorf("bad token: got %v, want ErrDenied", err)
		if c != nil {
			c.Close()
		}
	}
}
