//go:build verbs && cgo && linux

package verbs

import (
	"bytes"
	"errors"
	"net"
	"os"
	"testing"

	"cxlpool/rdma"
	"cxlpool/rdma/client"
	"cxlpool/rdma/internal/fake"
	"cxlpool/rdma/tcp"
	"cxlpool/rdma/wire"
)

// TestIsolationAcrossExports: a client holding one export's queue pair
// that aims at another export's memory with that export's remote keys (a
// rack that learned or guessed them) is refused by the device: each
// export's memory is in a protection domain of its own.
func TestIsolationAcrossExports(t *testing.T) {
	sdev, cdev := os.Getenv("CXLPOOL_VERBS_SERVER_DEV"), os.Getenv("CXLPOOL_VERBS_CLIENT_DEV")
	if sdev == "" {
		names, err := Devices()
		if err != nil || len(names) == 0 {
			t.Skipf("no RDMA device (%v)", err)
		}
		sdev, cdev = names[0], names[0]
	}
	listen, d := "127.0.0.1:0", &net.Dialer{}
	if a := os.Getenv("CXLPOOL_VERBS_SERVER_ADDR"); a != "" {
		listen = net.JoinHostPort(a, "0")
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(os.Getenv("CXLPOOL_VERBS_CLIENT_ADDR"))}
	}
	env := fake.NewEnv(t, rdma.Config{})
	vs, err := NewServer(Config{Device: sdev, GIDIndex: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer vs.Close()
	s, err := tcp.NewServer(tcp.Config{Auth: env.Service, Extensions: map[wire.Opcode]tcp.Extension{wire.OpConnect: vs}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	defer s.Close()
	ctx := t.Context()
	dial := func(off uint64) *Client {
		x, err := env.Service.Create(ctx, rdma.CreateRequest{Chunk: env.Chunk.ID, Client: "rack-7", Perms: rdma.PermReadWrite,
			Offset: off, Length: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		c, err := Dial(ctx, client.Config{Addr: ln.Addr().String(), Export: x.ID, Token: x.Token, Dial: d.DialContext},
			Config{Device: cdev, GIDIndex: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	mine, theirs := dial(0), dial(1<<20)
	secret := bytes.Repeat([]byte{0x5e}, 4096)
	if err := theirs.Write(ctx, secret, 0); err != nil {
		t.Fatal(err)
	}
	mine.reply.Regions = theirs.reply.Regions // their addresses and keys
	got := make([]byte, len(secret))
	err = mine.Read(ctx, got, 0)
	if !errors.Is(err, rdma.ErrRevoked) {
		t.Errorf("READ with another export's key: got %v, want the device's refusal (ErrRevoked)", err)
	}
	if bytes.Equal(got, secret) {
		t.Error("READ with another export's key returned its bytes")
	}
	if err := theirs.Read(ctx, got, 0); err != nil || !bytes.Equal(got, secret) {
		t.Errorf("the other export after the attempt: %v", err)
	}
}
