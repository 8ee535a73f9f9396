package appliance_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"

	"cxlpool/appliance"
	"cxlpool/dcd"
	"cxlpool/fabric/serial"
	"cxlpool/rdma"
	"cxlpool/sim"
)

// TestExportsSurviveRestart restarts the daemon on the same data
// directory and the same box (served on a socket from this process, as a
// real device outlives its daemon; the pool is mapped through the box's
// memory file as a DAX device would be): a live export comes back with
// its token and bytes, a revoked one does not, and one whose chunk was
// released does not either.
func TestExportsSurviveRestart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	scfg := sim.DefaultConfig()
	scfg.Capacity = 16 << 30
	box, err := sim.New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	sock := "unix:" + filepath.Join(t.TempDir(), "box.sock")
	l, err := serial.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	go box.ServeListener(ctx, l)
	defer l.Close()
	cfg := appliance.Config{Device: sock, DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler),
		DAXPath: fmt.Sprintf("/proc/self/fd/%d", box.DRAM().File().Fd())}

	app, stop := startTelApp(t, cfg)
	defer stop()
	c, err := app.Manager.Reserve(ctx, dcd.ReserveRequest{Size: blk, Region: 0})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.Manager.Grant(ctx, c.ID, 1); err != nil {
		t.Fatal(err)
	}
	gone, err := app.Manager.Reserve(ctx, dcd.ReserveRequest{Size: blk, Region: 0})
	if err != nil {
		t.Fatal(err)
	}
	gg, err := app.Manager.Grant(ctx, gone.ID, 2)
	if err != nil {
		t.Fatal(err)
	}
	create := func(chunk dcd.ChunkID) rdma.Export {
		x, err := app.Exports.Create(ctx, rdma.CreateRequest{Chunk: chunk, Client: "rack-7", Perms: rdma.PermReadWrite})
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	live, revoked, released := create(c.ID), create(c.ID), create(gone.ID)
	h, err := app.Exports.Authenticate(live.ID, live.Token)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.WriteAt([]byte("survives"), 64); err != nil {
		t.Fatal(err)
	}
	if err := app.Exports.Revoke(ctx, revoked.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Manager.Release(ctx, gg.ID); err != nil {
		t.Fatal(err)
	}
	stop()

	again := openTelApp(t, cfg)
	tests := []struct {
		name string
		x    rdma.Export
		want error
	}{{"live", live, nil}, {"revoked", revoked, rdma.ErrDenied}, {"chunk released", released, rdma.ErrDenied}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := again.Exports.Authenticate(tt.x.ID, tt.x.Token)
			if err != tt.want {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if err != nil {
				return
			}
			got := make([]byte, 8)
			if err := h.ReadAt(got, 64); err != nil || string(got) != "survives" {
				t.Errorf("got %q, %v; want \"survives\"", got, err)
			}
		})
	}
	if got := len(again.Exports.List()); got != 1 {
		t.Errorf("got %d exports after the restart, want 1", got)
	}
}
