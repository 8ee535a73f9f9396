package board

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"cxlpool/bmc/pldm"
	"cxlpool/fabric/mctp"
)

// TestAttach serves the board and a stand-in DCD endpoint (EID 8) on one
// link, as the virtual box does, and talks to both from the daemon's end.
func TestAttach(t *testing.T) {
	b, _ := newBoard(t, Config{TID: 7})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	daemonLink, boxLink := mctp.Pipe()
	rest := b.Attach(ctx, boxLink)

	dcd := mctp.NewEndpoint(rest, mctp.Config{EID: 8}, func(_ context.Context, _ mctp.EID, typ mctp.MsgType, msg []byte) ([]byte, bool) {
		return append([]byte("dcd:"), msg...), typ == mctp.MsgTypeCXLCCI
	})
	daemon := mctp.NewEndpoint(daemonLink, mctp.Config{EID: 0x10}, nil)
	var wg sync.WaitGroup
	wg.Go(func() { _ = dcd.Run(ctx) })
	wg.Go(func() { _ = daemon.Run(ctx) })

	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	// Interleave requests to both endpoints.
	var rw sync.WaitGroup
	for i := range 8 {
		rw.Go(func() {
			msg := []byte{byte(i), 1, 2, 3}
			got, err := daemon.Request(rctx, 8, mctp.MsgTypeCXLCCI, msg)
			if err != nil || !bytes.Equal(got, append([]byte("dcd:"), msg...)) {
				t.Errorf("request %d to the DCD: got %q, %v", i, got, err)
			}
		})
		rw.Go(func() {
			tid, err := pldm.NewClient(daemon, pldm.ClientConfig{}).GetTID(rctx)
			if err != nil || tid != 7 {
				t.Errorf("GetTID %d from the board: got %d, %v, want 7", i, tid, err)
			}
		})
	}
	rw.Wait()
	for _, eid := range []mctp.EID{8, 9} {
		got, err := daemon.GetEndpointID(rctx, eid)
		if err != nil || got != eid {
			t.Errorf("GetEndpointID(%d): got %d, %v", eid, got, err)
		}
	}
	types, err := daemon.GetMessageTypeSupport(rctx, 9)
	if err != nil || len(types) != 2 || types[1] != mctp.MsgTypePLDM {
		t.Errorf("board message types: got %v, %v, want control and PLDM", types, err)
	}

	// Closing the DCD's side closes the shared link: the daemon sees it.
	_ = dcd.Close()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-rctx.Done():
		t.Fatal("endpoints still running after the shared link was closed")
	}
}
