//go:build verbs && cgo && linux

package verbs_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"

	"cxlpool/rdma"
	"cxlpool/rdma/client"
	"cxlpool/rdma/internal/fake"
	"cxlpool/rdma/tcp"
	"cxlpool/rdma/verbs"
	"cxlpool/rdma/wire"
)

// device skips the test unless an RDMA device (soft-RoCE will do:
// rdma link add rxe0 type rxe netdev eth0) is present and usable.
func device(t *testing.T) verbs.Config {
	t.Helper()
	names, err := verbs.Devices()
	if err != nil || len(names) == 0 {
		t.Skipf("no RDMA device (%v): skipping the verbs transport tests", err)
	}
	return verbs.Config{Device: names[0]}
}

func TestVerbs(t *testing.T) {
	cfg := device(t)
	env := fake.NewEnv(t, rdma.Config{})
	vs, err := verbs.NewServer(cfg)
	if err != nil {
		t.Skipf("RDMA device unusable: %v", err)
	}
	defer vs.Close()
	s, err := tcp.NewServer(tcp.Config{Auth: env.Service, Extensions: map[wire.Opcode]tcp.Extension{wire.OpConnect: vs}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	defer s.Close()
	x := env.Export(t, rdma.PermReadWrite)
	ctx := context.Background()
	c, err := verbs.Dial(ctx, client.Config{Addr: ln.Addr().String(), Export: x.ID, Token: x.Token}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Size() != fake.ChunkSize {
		t.Fatalf("got size %d, want %d", c.Size(), fake.ChunkSize)
	}
	data := bytes.Repeat([]byte("verbs!"), 500000) // spans both extents
	tests := []struct {
		name string
		run  func() error
		want error
	}{
		{"write", func() error { return c.Write(ctx, data, 100) }, nil},
		{"read back", func() error {
			got := make([]byte, len(data))
			if err := c.Read(ctx, got, 100); err != nil {
				return err
			}
			if !bytes.Equal(got, data) {
				return errors.New("read back differs")
			}
			return nil
		}, nil},
		{"faa", func() error { _, err := c.FetchAdd(ctx, 8, 1); return err }, nil},
		{"unaligned", func() error { _, err := c.FetchAdd(ctx, 9, 1); return err }, rdma.ErrAlign},
		{"past end", func() error { return c.Read(ctx, make([]byte, 2), fake.ChunkSize-1) }, rdma.ErrRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.run(); !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
	host := make([]byte, 6)
	if _, err := env.File.ReadAt(host, int64(fake.DPA(100))); err != nil || string(host) != "verbs!" {
		t.Errorf("host reads %q, %v", host, err)
	}
	if err := env.Service.Revoke(ctx, x.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.Read(ctx, make([]byte, 8), 0); !errors.Is(err, rdma.ErrRevoked) {
		t.Errorf("read after revoke: got %v, want ErrRevoked", err)
	}
}
