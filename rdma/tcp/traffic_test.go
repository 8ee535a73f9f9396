package tcp_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/rdma"
	"cxlpool/rdma/client"
	"cxlpool/rdma/internal/fake"
	"cxlpool/rdma/tcp"
)

// TestTrafficOverTCP: the export's counters see each operation the server
// ran once, whether copied or zero-copy, alone or in a batch; the pins
// the server takes only to order its operations do not count.
func TestTrafficOverTCP(t *testing.T) {
	env := fake.NewEnv(t, rdma.Config{})
	addr := serve(t, env, tcp.Config{})
	x := env.Export(t, rdma.PermReadWrite)
	c := dial(t, addr, x, 1)
	ctx := context.Background()
	big := tcp.CopyLimit + 1
	if err := c.Write(ctx, make([]byte, 100), 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Read(ctx, make([]byte, big), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.FetchAdd(ctx, 8, 1); err != nil {
		t.Fatal(err)
	}
	// A batch whose WRITE follows a zero-copy READ of the same bytes: the
	// server looks up the WRITE's addresses to keep the order.
	ops := []client.Op{
		{Kind: client.OpRead, Offset: 0, Buf: make([]byte, big)},
		{Kind: client.OpWrite, Offset: 0, Buf: make([]byte, 64)},
	}
	if err := c.Batch(ctx, ops); err != nil {
		t.Fatal(err)
	}
	got, err := env.Service.Traffic(x.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := rdma.Traffic{Reads: 2, Writes: 2, Atomics: 1, BytesRead: 2 * uint64(big), BytesWritten: 164}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("traffic (-want +got):\n%s", diff)
	}
}
