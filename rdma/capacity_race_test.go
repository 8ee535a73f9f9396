package rdma_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"cxlpool/dcd"
	"cxlpool/fabric/cci"
	"cxlpool/rdma"
	"cxlpool/rdma/client"
	"cxlpool/rdma/internal/fake"
	"cxlpool/rdma/tcp"
	"cxlpool/sim"
)

// serve puts a TCP export server in front of auth for the test.
func serve(t *testing.T, auth rdma.Authenticator) string {
	t.Helper()
	srv, err := tcp.NewServer(tcp.Config{Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func overlapsAny(a, b []cci.Extent) bool {
	for _, x := range a {
		for _, y := range b {
			if x.DPA < y.DPA+y.Length && y.DPA < x.DPA+x.Length {
				return true
			}
		}
	}
	return false
}

// TestHostOwnReleaseWhileAnotherFlowWaits is issue #21 §1: host 2 gives
// back an exported chunk on its own while one of its own grants waits for
// its answer. The release must be noticed (the export revoked, the grant
// lost) although a flow of host 2 is waiting, and the next host's capacity
// must not land on the blocks the export reached.
func TestHostOwnReleaseWhileAnotherFlowWaits(t *testing.T) {
	e := newE2E(t)
	ctx := context.Background()
	svc := e.app.Exports
	addr := serve(t, svc)
	x := e.chunk(t, 4<<20, 2)
	gx := e.grant(t, x.ID)
	exp, err := svc.Create(ctx, rdma.CreateRequest{Chunk: x.ID, Client: "rack-7", Perms: rdma.PermReadWrite})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.Dial(ctx, client.Config{Addr: addr, Export: exp.ID, Token: exp.Token, Conns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// Host 2 thinks a while before answering its next add: that flow
	// waits on host 2 all through what follows.
	host2 := e.app.Box.Host(2)
	host2.SetPolicy(sim.Policy{Mode: sim.AcceptAll, Delay: 3 * time.Second})
	y, err := e.app.Manager.Reserve(ctx, dcd.ReserveRequest{Size: 2 << 20, Region: 0})
	if err != nil {
		t.Fatal(err)
	}
	gy, err := e.app.Manager.BeginGrant(ctx, y.ID, 2)
	if err != nil {
		t.Fatal(err)
	}

	if err := host2.Release(ctx, x.Tag); err != nil {
		t.Fatalf("host 2 releasing chunk %d itself: %v", x.ID, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := cl.Read(ctx, make([]byte, 8), 0)
		if errors.Is(err, rdma.ErrRevoked) || errors.Is(err, rdma.ErrDenied) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("export of the chunk host 2 gave back still serves (last read: %v)", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if g, _ := e.app.Ledger.Grant(ctx, gy.ID); g.State != dcd.GrantAdding {
		t.Logf("host 2's other grant is %s already: the machine was too slow for the interleaving to be exercised", g.State)
	}
	for {
		g, err := e.app.Ledger.Grant(ctx, gx.ID)
		if err == nil && g.State == dcd.GrantLost {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("grant %d after host 2 released it itself: %v (%v), want lost", gx.ID, g.State, err)
		}
		time.Sleep(5 * time.Millisecond)
	}

	// The next host's capacity goes elsewhere: x still owns its blocks.
	z := e.chunk(t, 4<<20, 5)
	gz := e.grant(t, z.ID)
	if overlapsAny(gz.Extents, x.Extents) {
		t.Fatalf("host 5's chunk %v placed on chunk %d's blocks %v, which an export reached", gz.Extents, x.ID, x.Extents)
	}
	secret := bytes.Repeat([]byte("host5"), 100)
	if _, err := e.app.Box.Host(5).WriteAt(secret, gz.Extents[0].DPA); err != nil {
		t.Fatal(err)
	}
	if err := cl.Read(ctx, make([]byte, len(secret)), 0); err == nil {
		t.Fatal("the revoked export still reads")
	}
	if _, err := svc.Create(ctx, rdma.CreateRequest{Chunk: x.ID, Client: "rack-7", Perms: rdma.PermRead}); !errors.Is(err, rdma.ErrNoExtents) {
		t.Errorf("export of a chunk nobody holds: got %v, want ErrNoExtents", err)
	}
}

// TestLeavingIsOneStep is issue #21 §3: both holders of a shared chunk
// leaving at once must revoke its exports (each sees the other's record),
// and an export created while the only holder leaves either fails or is
// revoked; never does one outlive both.
func TestLeavingIsOneStep(t *testing.T) {
	ctx := context.Background()
	for round := range 50 {
		env := fake.NewEnv(t, rdma.Config{})
		a := env.Grant
		b := env.Ledger.AddGrant(env.Chunk.ID, 3, dcd.GrantGranted, a.Extents...)
		x := env.Export(t, rdma.PermRead)
		var wg sync.WaitGroup
		for _, g := range []dcd.Grant{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := env.Service.Leaving(ctx, g, false, func() error {
					env.Ledger.SetState(g.ID, dcd.GrantReleasing)
					return nil
				})
				if err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if _, err := env.Service.Get(x.ID); !errors.Is(err, rdma.ErrNotFound) {
			t.Fatalf("round %d: export outlived both holders leaving at once: %v", round, err)
		}
	}
	for round := range 50 {
		env := fake.NewEnv(t, rdma.Config{})
		var wg sync.WaitGroup
		var made rdma.Export
		var cerr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			made, cerr = env.Service.Create(ctx, rdma.CreateRequest{Chunk: env.Chunk.ID, Client: "c", Perms: rdma.PermRead})
		}()
		go func() {
			defer wg.Done()
			_ = env.Service.Leaving(ctx, env.Grant, false, func() error {
				env.Ledger.SetState(env.Grant.ID, dcd.GrantReleasing)
				return nil
			})
		}()
		wg.Wait()
		if cerr == nil {
			if _, err := env.Service.Get(made.ID); !errors.Is(err, rdma.ErrNotFound) {
				t.Fatalf("round %d: export created beside the last holder's release is still live", round)
			}
		}
	}
}

// TestLeavingGoneScrubs: when the device has already given the capacity
// back, what a writable export could have written is zeroed once it is
// cut; a read-only export's bytes are left alone.
func TestLeavingGoneScrubs(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		perms rdma.Perm
		zero  bool
	}{{rdma.PermReadWrite, true}, {rdma.PermRead, false}} {
		env := fake.NewEnv(t, rdma.Config{})
		env.Export(t, tc.perms)
		b, err := env.Mem.Bytes(env.Grant.Extents[0].DPA, 4096)
		if err != nil {
			t.Fatal(err)
		}
		copy(b, "written by a remote rack after the device's sanitize")
		if err := env.Service.Leaving(ctx, env.Grant, true, func() error {
			env.Ledger.SetState(env.Grant.ID, dcd.GrantLost)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		b, _ = env.Mem.Bytes(env.Grant.Extents[0].DPA, 4096)
		if got := bytes.Count(b, []byte{0}) == len(b); got != tc.zero {
			t.Errorf("perms %s: zeroed %v, want %v", tc.perms, got, tc.zero)
		}
	}
}
