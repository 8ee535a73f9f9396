package tcp_test

import (
	"context"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/rdma"
	"cxlpool/rdma/internal/fake"
	"cxlpool/rdma/tcp"
)

type access struct {
	DPA, N uint64
	Write  bool
}

// TestCountAccessOverTCP: what the TCP transport moves reaches
// rdma.Config.CountAccess (the virtual box's CHMU) as device ranges, one
// per extent an access touches; atomics count as 8-byte writes.
func TestCountAccessOverTCP(t *testing.T) {
	var mu sync.Mutex
	var got []access
	env := fake.NewEnv(t, rdma.Config{CountAccess: func(dpa, n uint64, write bool) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, access{dpa, n, write})
	}})
	addr := serve(t, env, tcp.Config{})
	x := env.Export(t, rdma.PermReadWrite)
	c := dial(t, addr, x, 1)
	ctx := context.Background()
	if err := c.Read(ctx, make([]byte, 10), 1<<20-4); err != nil { // across the extents
		t.Fatal(err)
	}
	if err := c.Write(ctx, make([]byte, 100), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.FetchAdd(ctx, 16, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CompareAndSwap(ctx, 1<<20+8, 0, 1); err != nil {
		t.Fatal(err)
	}
	want := []access{
		{fake.DPA(1<<20 - 4), 4, false}, {fake.DPA(1 << 20), 6, false},
		{fake.DPA(0), 100, true},
		{fake.DPA(16), 8, true},
		{fake.DPA(1<<20 + 8), 8, true},
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("counted accesses (-want +got):\n%s", diff)
	}
}
