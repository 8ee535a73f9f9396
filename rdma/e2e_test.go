package rdma_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"

	"cxlpool/appliance"
	"cxlpool/dcd"
	"cxlpool/rdma"
	"cxlpool/rdma/client"
	"cxlpool/rdma/tcp"
	"cxlpool/sim"
)

// e2e is a whole daemon on the virtual box with the export service and
// its TCP server in front of the box's memory.
type e2e struct {
	app  *appliance.Appliance
	mem  *rdma.Mapping
	svc  *rdma.Service
	addr string
}

func newE2E(t testing.TB) *e2e {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	scfg := sim.DefaultConfig()
	scfg.Capacity = 2 << 30
	scfg.BlockSize = 2 << 20
	app, err := appliance.Open(ctx, appliance.Config{Device: appliance.DeviceSim, DataDir: t.TempDir(),
		Sim: scfg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Start(ctx); err != nil {
		t.Fatal(err)
	}
	dram := app.Box.DRAM()
	mem, err := rdma.MapFile(dram.File(), 0, dram.Size())
	if err != nil {
		t.Fatal(err)
	}
	svc, err := rdma.NewService(rdma.Config{Ledger: app.Ledger, Memory: mem})
	if err != nil {
		t.Fatal(err)
	}
	changes, unsubscribe := app.Manager.Subscribe(256)
	runDone := make(chan struct{})
	go func() { defer close(runDone); svc.Run(ctx, changes) }()
	srv, err := tcp.NewServer(tcp.Config{Auth: svc})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		srv.Close()
		cancel()
		<-runDone
		unsubscribe()
		svc.Close(context.Background())
		mem.Close()
		app.Manager.Wait()
		app.Close()
	})
	return &e2e{app: app, mem: mem, svc: svc, addr: ln.Addr().String()}
}

// chunk reserves size bytes in region 0 and grants them to host.
func (e *e2e) chunk(t testing.TB, size uint64, host dcd.HostID) dcd.Chunk {
	t.Helper()
	ctx := context.Background()
	c, err := e.app.Manager.Reserve(ctx, dcd.ReserveRequest{Size: size, Region: 0})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.app.Manager.Grant(ctx, c.ID, host); err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *e2e) grant(t testing.TB, chunk dcd.ChunkID) dcd.Grant {
	t.Helper()
	gs, err := e.app.Ledger.Grants(context.Background(), dcd.GrantFilter{Chunk: chunk, Active: true})
	if err != nil || len(gs) != 1 {
		t.Fatalf("grants of chunk %d: %v, %v", chunk, gs, err)
	}
	return gs[0]
}

func TestEndToEnd(t *testing.T) {
	e := newE2E(t)
	ctx := context.Background()
	c := e.chunk(t, 4<<20, 2)
	g := e.grant(t, c.ID)
	host := e.app.Box.Host(2)
	dpa := g.Extents[0].DPA

	x, err := e.svc.Create(ctx, rdma.CreateRequest{Chunk: c.ID, Client: "rack-9", Perms: rdma.PermReadWrite})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.Dial(ctx, client.Config{Addr: e.addr, Export: x.ID, Token: x.Token})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// What the host writes, the remote client reads, and back.
	if _, err := host.WriteAt([]byte("from the host"), dpa+100); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 13)
	if err := cl.Read(ctx, got, 100); err != nil {
		t.Fatal(err)
	}
	if string(got) != "from the host" {
		t.Errorf("client reads %q, want the host's bytes", got)
	}
	big := bytes.Repeat([]byte("remote"), 300000)
	if err := cl.Write(ctx, big, 4096); err != nil {
		t.Fatal(err)
	}
	hb := make([]byte, len(big))
	if _, err := host.ReadAt(hb, dpa+4096); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(hb, big) {
		t.Error("host reads other bytes than the client wrote")
	}
	if _, err := cl.FetchAdd(ctx, 8, 41); err != nil {
		t.Fatal(err)
	}
	w := make([]byte, 8)
	if _, err := host.ReadAt(w, dpa+8); err != nil {
		t.Fatal(err)
	}
	if w[0] != 41 {
		t.Errorf("host sees word %x after FAA, want 41", w)
	}
	if err := cl.Read(ctx, got, 4<<20-1); !errors.Is(err, rdma.ErrRange) {
		t.Errorf("read past the chunk: got %v, want ErrRange", err)
	}

	// A chunk that holds nothing on the device cannot be exported.
	empty, err := e.app.Manager.Reserve(ctx, dcd.ReserveRequest{Size: 2 << 20, Region: 0})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Create(ctx, rdma.CreateRequest{Chunk: empty.ID, Client: "c", Perms: rdma.PermRead}); !errors.Is(err, rdma.ErrNoExtents) {
		t.Errorf("export of an ungranted chunk: got %v, want ErrNoExtents", err)
	}
}

func TestReleaseRevokesAndSanitizes(t *testing.T) {
	for _, via := range []string{"Leaving", "notification"} {
		t.Run(via, func(t *testing.T) {
			e := newE2E(t)
			ctx := context.Background()
			c := e.chunk(t, 2<<20, 0)
			g := e.grant(t, c.ID)
			x, err := e.svc.Create(ctx, rdma.CreateRequest{Chunk: c.ID, Client: "old", Perms: rdma.PermReadWrite})
			if err != nil {
				t.Fatal(err)
			}
			cl, err := client.Dial(ctx, client.Config{Addr: e.addr, Export: x.ID, Token: x.Token, Conns: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			secret := bytes.Repeat([]byte("secret"), 1000)
			if err := cl.Write(ctx, secret, 0); err != nil {
				t.Fatal(err)
			}

			if via == "Leaving" {
				if err := e.svc.Leaving(ctx, g, false, func() error { return nil }); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := e.app.Manager.Release(ctx, g.ID); err != nil {
				t.Fatal(err)
			}
			// The open session fails cleanly; with only the change
			// notification the revoke lands shortly after the release.
			for i := 0; ; i++ {
				err := cl.Read(ctx, make([]byte, 6), 0)
				if errors.Is(err, rdma.ErrRevoked) {
					break
				}
				if err != nil || i == 1000 {
					t.Fatalf("read after release: got %v, want ErrRevoked", err)
				}
				time.Sleep(5 * time.Millisecond) // the service follows the manager asynchronously
			}
			if _, err := client.Dial(ctx, client.Config{Addr: e.addr, Export: x.ID, Token: x.Token}); !errors.Is(err, rdma.ErrDenied) {
				t.Errorf("reopen after release: got %v, want ErrDenied", err)
			}

			// The same chunk given to another host and exported to
			// another client reads as zeros.
			g2, err := e.app.Manager.Grant(ctx, c.ID, 5)
			if err != nil {
				t.Fatal(err)
			}
			y, err := e.svc.Create(ctx, rdma.CreateRequest{Chunk: c.ID, Client: "new", Perms: rdma.PermRead})
			if err != nil {
				t.Fatal(err)
			}
			cl2, err := client.Dial(ctx, client.Config{Addr: e.addr, Export: y.ID, Token: y.Token})
			if err != nil {
				t.Fatal(err)
			}
			defer cl2.Close()
			got := make([]byte, len(secret))
			if err := cl2.Read(ctx, got, 0); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, make([]byte, len(secret))) {
				t.Error("the new client reads the old client's data")
			}
			hb := make([]byte, len(secret))
			if _, err := e.app.Box.Host(5).ReadAt(hb, g2.Extents[0].DPA); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(hb, make([]byte, len(secret))) {
				t.Error("the new host reads the old client's data")
			}
			// Wherever the capacity went, the old bytes are gone.
			old, err := e.mem.Bytes(g.Extents[0].DPA, uint64(len(secret)))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(old, make([]byte, len(secret))) {
				t.Error("the released capacity was not sanitized")
			}
		})
	}
}
