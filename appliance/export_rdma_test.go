package appliance_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"cxlpool/appliance"
	"cxlpool/dcd"
	"cxlpool/rdma"
	"cxlpool/rdma/client"
	"cxlpool/rdma/verbs"
	"cxlpool/sim"
)

// TestExportRDMANamedDeviceMustOpen: a device the operator names but that
// does not open (no such device, or a build without verbs) stops the
// start with an error naming the flag, rather than a TCP-only daemon.
func TestExportRDMANamedDeviceMustOpen(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	scfg := sim.DefaultConfig()
	scfg.Capacity = 16 << 30
	app, err := appliance.Open(ctx, appliance.Config{Device: appliance.DeviceSim, Sim: scfg, DataDir: t.TempDir(),
		Logger: slog.New(slog.DiscardHandler), ExportListen: "127.0.0.1:0", ExportRDMA: "nosuchrdma0"})
	if err != nil {
		t.Fatal(err)
	}
	err = app.Start(ctx)
	cancel()
	app.Close()
	if !errors.Is(err, verbs.ErrNoDevice) && !errors.Is(err, verbs.ErrNotBuilt) {
		t.Errorf("got %v, want ErrNoDevice or ErrNotBuilt", err)
	}
}

// TestExportServedByTheDaemon: the daemon's export server with
// --export-rdma auto serves an export of granted capacity over TCP (and,
// where the machine has an RDMA device and the build the verbs tag, over
// verbs: the VM test runs it so), and the virtual box's CHMU counts what
// the TCP path moves.
func TestExportServedByTheDaemon(t *testing.T) {
	listen, dev := "127.0.0.1:0", ""
	d := &net.Dialer{}
	if a := os.Getenv("CXLPOOL_VERBS_SERVER_ADDR"); a != "" { // the VM test
		listen, dev = net.JoinHostPort(a, "0"), os.Getenv("CXLPOOL_VERBS_SERVER_DEV")
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(os.Getenv("CXLPOOL_VERBS_CLIENT_ADDR"))}
	}
	rdmaFlag := appliance.ExportRDMAAuto
	if dev != "" {
		rdmaFlag = dev
	}
	app := openTelApp(t, appliance.Config{ExportListen: listen, ExportRDMA: rdmaFlag})
	ctx := t.Context()
	c, err := app.Manager.Reserve(ctx, dcd.ReserveRequest{Size: blk, Region: 0})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.Manager.Grant(ctx, c.ID, 1); err != nil {
		t.Fatal(err)
	}
	x, err := app.Exports.Create(ctx, rdma.CreateRequest{Chunk: c.ID, Client: "rack-7", Perms: rdma.PermReadWrite})
	if err != nil {
		t.Fatal(err)
	}
	ccfg := client.Config{Addr: app.ExportAddr.String(), Export: x.ID, Token: x.Token, Dial: d.DialContext}
	tc, err := client.Dial(ctx, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	before := app.Box.CHMU().Stats().Accesses
	if err := tc.Write(ctx, bytes.Repeat([]byte{7}, 4096), 0); err != nil {
		t.Fatal(err)
	}
	// The telemetry pipeline enables the CHMU once it runs; a bounded
	// wait for it rather than a fixed sleep.
	for end := time.Now().Add(30 * time.Second); app.Box.CHMU().Stats().Accesses == before && time.Now().Before(end); {
		if err := tc.Read(ctx, make([]byte, 4096), 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := app.Box.CHMU().Stats().Accesses; got == before {
		t.Errorf("the CHMU counted no exported access (still %d)", got)
	}
	if dev == "" {
		return
	}
	vc, err := verbs.Dial(ctx, ccfg, verbs.Config{Device: os.Getenv("CXLPOOL_VERBS_CLIENT_DEV"), GIDIndex: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer vc.Close()
	got := make([]byte, 4096)
	if err := vc.Read(ctx, got, 0); err != nil || !bytes.Equal(got, bytes.Repeat([]byte{7}, 4096)) {
		t.Fatalf("verbs READ of what TCP wrote: %v (got %x…)", err, got[:8])
	}
	if _, err := vc.FetchAdd(ctx, 8192, 5); err != nil {
		t.Fatal(err)
	}
	if err := app.Exports.Revoke(ctx, x.ID); err != nil {
		t.Fatal(err)
	}
	if err := vc.Read(ctx, got, 0); !errors.Is(err, rdma.ErrRevoked) {
		t.Errorf("verbs READ after the revoke: got %v, want ErrRevoked", err)
	}
}
