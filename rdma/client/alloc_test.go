package client_test

import (
	"context"
	"testing"

	"cxlpool/rdma"
	"cxlpool/rdma/client"
)

// TestSmallOpsAllocationFree: a small READ, WRITE, FAA or PING costs no
// allocation on either side (client and server run in this process), with
// a context that has no Done channel and with a cancellable one, as
// poolctl's is.
func TestSmallOpsAllocationFree(t *testing.T) {
	env, addr := setup(t)
	x := env.Export(t, rdma.PermReadWrite)
	cctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl, err := client.Dial(cctx, client.Config{Addr: addr, Export: x.ID, Token: x.Token, Conns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	buf := make([]byte, 64)
	ops := []struct {
		name string
		do   func(ctx context.Context) error
	}{
		{"read64", func(ctx context.Context) error { return cl.Read(ctx, buf, 4096) }},
		{"write64", func(ctx context.Context) error { return cl.Write(ctx, buf, 8192) }},
		{"faa", func(ctx context.Context) error { _, err := cl.FetchAdd(ctx, 0, 1); return err }},
		{"ping", func(ctx context.Context) error { return cl.Ping(ctx) }},
	}
	for _, ctx := range []struct {
		name string
		ctx  context.Context
	}{{"background", context.Background()}, {"cancellable", cctx}} {
		for _, op := range ops {
			t.Run(ctx.name+"/"+op.name, func(t *testing.T) {
				var opErr error
				got := testing.AllocsPerRun(200, func() {
					if err := op.do(ctx.ctx); err != nil {
						opErr = err
					}
				})
				if opErr != nil {
					t.Fatal(opErr)
				}
				if want := 0.0; got != want {
					t.Errorf("allocations per %s: got %v, want %v", op.name, got, want)
				}
			})
		}
	}
}

// BenchmarkRead64 is the 64-byte READ round trip on loopback, client and
// server in this process, with a cancellable context as poolctl's; run
// with -benchmem: the path makes no allocation on either side.
func BenchmarkRead64(b *testing.B) {
	env, addr := setup(b)
	x := env.Export(b, rdma.PermRead)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl, err := client.Dial(ctx, client.Config{Addr: addr, Export: x.ID, Token: x.Token, Conns: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	buf := make([]byte, 64)
	b.ReportAllocs()
	for b.Loop() {
		if err := cl.Read(ctx, buf, 4096); err != nil {
			b.Fatal(err)
		}
	}
}
