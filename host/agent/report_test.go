package agent_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"cxlpool/api/apitest"
	"cxlpool/api/client"
	"cxlpool/dcd"
	"cxlpool/host/agent"
	"cxlpool/host/report"
	"cxlpool/host/vbox"
)

// hostState polls the box until the Memory of system holding conn shows
// Oem.CxlPool.Host.State want (bounded: the agent reports on change).
func hostState(t *testing.T, c *client.Client, system, conn, want string) {
	t.Helper()
	ctx := ctxT(t)
	var last string
	for {
		var sys client.System
		if err := c.Get(ctx, client.SystemsURI+"/"+system, &sys); err != nil {
			t.Fatal(err)
		}
		mems, err := c.SystemMemory(ctx, sys)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mems {
			if x := m.Oem.CxlPool; x != nil && x.Connection != nil && x.Connection.ODataID == conn && x.Host != nil {
				last = x.Host.State
			}
		}
		if last == want {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the box shows %s's memory of %s as %q, want %q", system, conn, last, want)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// The box must not force memory out from under a running program: a
// release the box starts while the host's agent says "in use" waits past
// the release timeout (the host shows "release refused: in use"), and
// completes once the program unmaps.
func TestReleaseWaitsForProgram(t *testing.T) {
	r := newRigWith(t, apitest.Options{ReleaseTimeout: 200 * time.Millisecond})
	a := r.agentAt(t, 0, apitest.UserHost0)
	admin := r.boxClient(t, "admin", apitest.AdminPassword)
	at, err := a.Attach(ctxT(t), agent.AttachRequest{SizeBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	hostState(t, admin, "Host0", at.Connection, "Usable")
	m, err := r.backends[0].Map(ctxT(t), at.Tag)
	if err != nil {
		t.Fatal(err)
	}
	hostState(t, admin, "Host0", at.Connection, "InUse")

	changes, stop := r.env.App.Manager.Subscribe(64)
	defer stop()
	resp, err := admin.Delete(ctxT(t), at.Connection)
	if err != nil {
		t.Fatal(err)
	}
	for waited := false; !waited; {
		select {
		case ch := <-changes:
			waited = ch.Message == dcd.ReleaseWaitsMessage
		case <-ctxT(t).Done():
			t.Fatal("the release did not wait for the host in use")
		}
	}
	// The Memory of a grant being released is gone from the System; the
	// box's store says what the agent reported.
	for ctx := ctxT(t); ; {
		if tg, _, ok := r.env.App.HostReports.Tag(0, at.Tag); ok && tg.State == report.StateReleaseRefused {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the agent did not report the release refused: in use")
		case <-time.After(10 * time.Millisecond):
		}
	}
	copy(m.Bytes(), "still mine") // the program still has its memory
	if !bytes.Equal(m.Bytes()[:10], []byte("still mine")) {
		t.Fatal("the mapping no longer holds what the program wrote")
	}
	_ = m.Close()
	if _, err := admin.Settle(ctxT(t), resp, nil); err != nil {
		t.Fatalf("release after the unmap: %v", err)
	}
	if err := r.backends[0].WaitGone(ctxT(t), at.Tag); err != nil {
		t.Fatal(err)
	}
	if err := admin.DeleteAndWait(ctxT(t), at.Chunk, nil); err != nil {
		t.Fatal(err)
	}
}

// A detach of memory in use is refused (the box hears it), and one that
// waits and is given up releases nothing; it succeeds once unmapped.
// releaseCalls is head 0's backend, saying on calls each time the agent
// asked it to release a tag.
type releaseCalls struct {
	*vbox.Backend
	calls chan struct{}
}

func (b *releaseCalls) Release(ctx context.Context, tag string, force bool) error {
	err := b.Backend.Release(ctx, tag, force)
	select {
	case b.calls <- struct{}{}:
	default:
	}
	return err
}

func TestDetachBusyAndWait(t *testing.T) {
	r := newRig(t)
	be := &releaseCalls{Backend: r.backends[0], calls: make(chan struct{}, 1)}
	a := r.agentWith(t, 0, apitest.UserHost0, agent.Config{Backend: be})
	admin := r.boxClient(t, "admin", apitest.AdminPassword)
	at, err := a.Attach(ctxT(t), agent.AttachRequest{SizeBytes: 256 << 20, Name: "kv"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.backends[0].Map(ctxT(t), at.Tag)
	if err != nil {
		t.Fatal(err)
	}
	var le *agent.LocalError
	if _, err := a.Detach(ctxT(t), at.Tag, agent.DetachOptions{}); !errors.As(err, &le) || le.Status != http.StatusConflict {
		t.Fatalf("Detach while mapped = %v, want 409", err)
	}
	hostState(t, admin, "Host0", at.Connection, "ReleaseRefusedInUse")

	// The user gives up (Ctrl-C: the request ends): the agent clears the
	// refusal and releases nothing. The box shows the refusal already
	// (the first detach's), so the give-up waits until this detach has
	// asked the backend itself: a detach given up before it started
	// leaves that refusal standing, rightly.
	<-be.calls // the first detach's
	ctx, cancel := context.WithCancel(ctxT(t))
	gaveUp := make(chan error, 1)
	go func() {
		_, err := a.Detach(ctx, at.Tag, agent.DetachOptions{Wait: true})
		gaveUp <- err
	}()
	<-be.calls
	hostState(t, admin, "Host0", at.Connection, "ReleaseRefusedInUse")
	cancel()
	if err := <-gaveUp; err == nil {
		t.Fatal("Detach --wait given up succeeded")
	}
	hostState(t, admin, "Host0", at.Connection, "InUse")
	list, err := a.List(ctxT(t))
	if err != nil || len(list) != 1 || list[0].Capacity.Releasing {
		t.Fatalf("after giving up: List() = %+v, %v; want the tag attached, not releasing", list, err)
	}
	m2, err := r.backends[0].Map(ctxT(t), at.Tag)
	if err != nil {
		t.Fatalf("after giving up the tag cannot be mapped again: %v", err)
	}

	done := make(chan error, 1)
	go func() {
		d, err := a.Detach(ctxT(t), at.Tag, agent.DetachOptions{Wait: true})
		if err == nil && !d.ChunkFreed {
			err = errors.New("chunk not freed")
		}
		done <- err
	}()
	hostState(t, admin, "Host0", at.Connection, "ReleaseRefusedInUse")
	_ = m.Close()
	_ = m2.Close()
	if err := <-done; err != nil {
		t.Fatalf("Detach --wait after the unmap: %v", err)
	}
}

// Shared attach by host accounts: refused until an administrator allows
// the share; then both hosts map the same bytes, the last to detach frees
// the share, and the next attach of the share reads zeros.
func TestSharedAttachByName(t *testing.T) {
	r := newRig(t)
	a := r.agentAt(t, 0, apitest.UserHost0)
	b := r.agentAt(t, 1, apitest.UserHost1)
	admin := r.boxClient(t, "admin", apitest.AdminPassword)
	req := agent.AttachRequest{SizeBytes: 256 << 20, Share: "kv"}
	var le *agent.LocalError
	if _, err := a.Attach(ctxT(t), req); !errors.As(err, &le) || le.Status != http.StatusForbidden {
		t.Fatalf("attach to a share nobody allowed = %v, want 403", err)
	}
	if err := admin.AllowShare(ctxT(t), "Host0", "kv", true); err != nil {
		t.Fatal(err)
	}
	at, err := a.Attach(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Attach(ctxT(t), req); !errors.As(err, &le) || le.Status != http.StatusForbidden {
		t.Fatalf("Host1 joins without the allowance = %v, want 403", err)
	}
	if err := admin.AllowShare(ctxT(t), "Host1", "kv", true); err != nil {
		t.Fatal(err)
	}
	msg := []byte("host A writes, host B reads")
	copy(mapPath(t, at)[8192:], msg)
	bt, err := b.Attach(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if bt.Tag != at.Tag || bt.Chunk != at.Chunk {
		t.Fatalf("B joined tag %s chunk %s, want A's %s %s", bt.Tag, bt.Chunk, at.Tag, at.Chunk)
	}
	if got := mapPath(t, bt)[8192 : 8192+len(msg)]; !bytes.Equal(got, msg) {
		t.Errorf("B reads %q, want %q", got, msg)
	}
	if _, err := b.Attach(ctxT(t), agent.AttachRequest{SizeBytes: 512 << 20, Share: "other"}); !errors.As(err, &le) || le.Status != http.StatusForbidden {
		t.Errorf("another share = %v, want 403", err)
	}
	if d, err := a.Detach(ctxT(t), at.Tag, agent.DetachOptions{}); err != nil || d.ChunkFreed {
		t.Fatalf("A's detach = %+v, %v; want the share kept for B", d, err)
	}
	if d, err := b.Detach(ctxT(t), bt.Tag, agent.DetachOptions{}); err != nil || !d.ChunkFreed {
		t.Fatalf("B's detach (the last) = %+v, %v; want the share freed", d, err)
	}
	again, err := b.Attach(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if again.Capacity.Extents[0].DPA != at.Capacity.Extents[0].DPA {
		t.Fatalf("the new share is at %#x, not the old %#x: the zero check proves nothing",
			again.Capacity.Extents[0].DPA, at.Capacity.Extents[0].DPA)
	}
	if got := mapPath(t, again)[8192 : 8192+len(msg)]; !bytes.Equal(got, make([]byte, len(msg))) {
		t.Errorf("the share attached again reads %q, want zeros", got)
	}
	if _, err := b.Detach(ctxT(t), again.Tag, agent.DetachOptions{}); err != nil {
		t.Fatal(err)
	}
}
