package agent_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cxlpool/api/apitest"
	"cxlpool/api/client"
	"cxlpool/host/agent"
	"cxlpool/host/vbox"
	"cxlpool/sim"
)

// rig is the in-process appliance with heads 0 and 1 handed to external
// hosts, a vbox backend dialled for each.
type rig struct {
	env      *apitest.Env
	backends [2]*vbox.Backend
}

func newRig(t testing.TB) *rig { return newRigWith(t, apitest.Options{}) }

// newRigWith is newRig with the box's options (its virtual box is always
// the small one below).
func newRigWith(t testing.TB, o apitest.Options) *rig {
	t.Helper()
	o.Sim = func(c *sim.Config) {
		c.Capacity = 16 << 30
		c.WorkloadTick = -1
	}
	env := apitest.NewServer(t, o)
	r := &rig{env: env}
	box := env.App.Box
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	dir := t.TempDir()
	for ld := range 2 {
		if err := box.SetExternal(ld); err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(dir, "host"+string(rune('0'+ld))+".sock")
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer func() { done <- struct{}{} }()
			_ = box.ServeHostListener(ctx, ld, l)
		}()
		b, err := vbox.Dial(t.Context(), "unix:"+sock, vbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		r.backends[ld] = b
	}
	t.Cleanup(func() {
		for _, b := range r.backends {
			_ = b.Close()
		}
		cancel()
		<-done
		<-done
	})
	return r
}

func (r *rig) boxClient(t testing.TB, user, password string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{Server: r.env.HTTP.URL, User: user, Password: password, PollInitial: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// agentAt enrolls an agent for head ld as user and serves its local API.
func (r *rig) agentAt(t testing.TB, ld int, user string) *agent.LocalClient {
	t.Helper()
	return r.agentWith(t, ld, user, agent.Config{})
}

// agentWith is agentAt with cfg's Heartbeat, Version and, if set, Backend
// (else head ld's).
func (r *rig) agentWith(t testing.TB, ld int, user string, cfg agent.Config) *agent.LocalClient {
	t.Helper()
	if cfg.Backend == nil {
		cfg.Backend = r.backends[ld]
	}
	cfg.Box = r.boxClient(t, user, apitest.UserPassword)
	a, err := agent.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "cxlhost.sock")
	l, err := agent.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return agent.NewLocalClient(sock)
}

// mapPath maps an attachment's memory the way a program in another process
// would: open the printed path and map the single extent at its offset.
func mapPath(t *testing.T, at agent.Attachment) []byte {
	t.Helper()
	if len(at.Capacity.Extents) != 1 {
		t.Fatalf("attachment has %d extents; the test maps one", len(at.Capacity.Extents))
	}
	e := at.Capacity.Extents[0]
	f, err := os.OpenFile(at.Capacity.Path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := unix.Mmap(int(f.Fd()), int64(e.Offset), int(e.Length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(b) })
	return b
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestEnrollment(t *testing.T) {
	r := newRig(t)
	tests := []struct {
		name    string
		ld      int
		user    string
		pass    string
		wantErr error
	}{
		{"own head", 0, apitest.UserHost0, apitest.UserPassword, nil},
		{"another head's account", 0, apitest.UserHost1, apitest.UserPassword, agent.ErrWrongHead},
		{"not a host account", 1, "admin", apitest.AdminPassword, agent.ErrNotHostAccount},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := agent.New(ctxT(t), agent.Config{Backend: r.backends[tt.ld], Box: r.boxClient(t, tt.user, tt.pass)})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("New() = %v, want %v", err, tt.wantErr)
			}
			if err == nil && a.System() != "Host0" {
				t.Errorf("System() = %s, want Host0", a.System())
			}
		})
	}
	// A wrong password is the box's 401, passed on.
	_, err := agent.New(ctxT(t), agent.Config{Backend: r.backends[0], Box: r.boxClient(t, apitest.UserHost0, "wrong")})
	if client.StatusOf(err) != http.StatusUnauthorized {
		t.Errorf("wrong password: %v, want 401", err)
	}
}

// The whole path: agent A attaches, a program writes through A's printed
// mapping, detach is refused while A's backend maps it and succeeds after,
// and agent B, attaching on another head, reads zeros.
func TestAttachWriteDetachReattach(t *testing.T) {
	r := newRig(t)
	a := r.agentAt(t, 0, apitest.UserHost0)
	b := r.agentAt(t, 1, apitest.UserHost1)
	const size = 256 << 20
	at, err := a.Attach(ctxT(t), agent.AttachRequest{SizeBytes: size, Name: "kv"})
	if err != nil {
		t.Fatal(err)
	}
	if at.Capacity.Size != size || at.System != "Host0" || len(at.Env) < 2 {
		t.Fatalf("Attach() = %+v", at)
	}
	if want := "CXLPOOL_DAX_PATH=" + at.Capacity.Path; at.Env[0] != want {
		t.Errorf("Env[0] = %q, want %q", at.Env[0], want)
	}
	secret := []byte("host A's KV cache block")
	copy(mapPath(t, at)[4096:], secret)

	// The backend sees the same bytes through its own mapping.
	m, err := r.backends[0].Map(ctxT(t), at.Tag)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Bytes()[4096 : 4096+len(secret)]; !bytes.Equal(got, secret) {
		t.Fatalf("backend mapping reads %q, want %q", got, secret)
	}
	list, err := a.List(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Tag != at.Tag || list[0].Name != "kv" || !list[0].Capacity.InUse {
		t.Fatalf("List() = %+v, want the kv attachment in use", list)
	}
	var le *agent.LocalError
	if _, err := a.Detach(ctxT(t), at.Tag, agent.DetachOptions{}); !errors.As(err, &le) || le.Status != http.StatusConflict {
		t.Fatalf("Detach while mapped = %v, want 409 in use", err)
	}
	_ = m.Close()
	if d, err := a.Detach(ctxT(t), at.Tag, agent.DetachOptions{}); err != nil || !d.ChunkFreed {
		t.Fatalf("Detach = %+v, %v; want the chunk freed", d, err)
	}
	if list, err := a.List(ctxT(t)); err != nil || len(list) != 0 {
		t.Fatalf("after detach: List() = %+v, %v; want nothing", list, err)
	}
	if _, err := a.Detach(ctxT(t), at.Tag, agent.DetachOptions{}); !errors.As(err, &le) || le.Status != http.StatusNotFound {
		t.Errorf("second Detach = %v, want 404", err)
	}

	bt, err := b.Attach(ctxT(t), agent.AttachRequest{SizeBytes: size})
	if err != nil {
		t.Fatal(err)
	}
	if bt.System != "Host1" {
		t.Errorf("B attached as %s", bt.System)
	}
	// The box hands out the lowest free block, so B gets the bytes A had:
	// what makes the zero check below mean something.
	if a0, b0 := at.Capacity.Extents[0], bt.Capacity.Extents[0]; b0.DPA != a0.DPA {
		t.Fatalf("B got %#x+%#x, not A's old %#x: the test proves nothing", b0.DPA, b0.Length, a0.DPA)
	}
	if got := mapPath(t, bt)[4096 : 4096+len(secret)]; !bytes.Equal(got, make([]byte, len(secret))) {
		t.Errorf("B reads %q where A wrote, want zeros", got)
	}
	if _, err := b.Detach(ctxT(t), bt.Tag, agent.DetachOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestAttachRefusals(t *testing.T) {
	r := newRig(t)
	a := r.agentAt(t, 0, apitest.UserHost0)
	var le *agent.LocalError
	for _, tt := range []struct {
		req    agent.AttachRequest
		status int
	}{
		{agent.AttachRequest{SizeBytes: 0}, http.StatusBadRequest},
		{agent.AttachRequest{SizeBytes: 1000}, http.StatusBadRequest},
		{agent.AttachRequest{SizeBytes: 1 << 50}, http.StatusConflict}, // more than the pool: the box refuses
	} {
		_, err := a.Attach(ctxT(t), tt.req)
		if !errors.As(err, &le) || (le.Status != tt.status && !(tt.status == http.StatusConflict && le.Status >= 400 && le.Status < 500)) {
			t.Errorf("Attach(%d) = %v, want status %d", tt.req.SizeBytes, err, tt.status)
		}
	}
	if list, err := r.backends[0].List(ctxT(t)); err != nil || len(list) != 0 {
		t.Errorf("after refusals the host holds %+v, %v", list, err)
	}
}

// A shared attach: A attaches sharable capacity, an administrator shares
// the chunk to Host1, B's agent lists the same tag and B reads A's writes
// through its own mapping; A's detach keeps the chunk for B, B's frees it.
func TestSharedAttach(t *testing.T) {
	r := newRig(t)
	a := r.agentAt(t, 0, apitest.UserHost0)
	b := r.agentAt(t, 1, apitest.UserHost1)
	at, err := a.Attach(ctxT(t), agent.AttachRequest{SizeBytes: 256 << 20, Name: "shared-kv", Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("written by host A, read by host B")
	copy(mapPath(t, at)[1<<20:], msg)

	admin := r.boxClient(t, "admin", apitest.AdminPassword)
	ep, err := admin.Initiator(ctxT(t), "Host1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Connect(ctxT(t), at.Chunk, []string{ep.ODataID}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := r.backends[1].Wait(ctxT(t), at.Tag); err != nil {
		t.Fatal(err)
	}
	list, err := b.List(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Tag != at.Tag || list[0].Name != "shared-kv" {
		t.Fatalf("B lists %+v, want the shared tag %s", list, at.Tag)
	}
	m, err := r.backends[1].Map(ctxT(t), at.Tag)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Bytes()[1<<20 : 1<<20+len(msg)]; !bytes.Equal(got, msg) {
		t.Errorf("B reads %q, want %q", got, msg)
	}
	_ = m.Close()
	d, err := a.Detach(ctxT(t), at.Tag, agent.DetachOptions{})
	if err != nil || d.ChunkFreed || d.Kept == "" {
		t.Fatalf("A's detach of a chunk B still holds = %+v, %v; want the chunk kept", d, err)
	}
	if list, err := b.List(ctxT(t)); err != nil || len(list) != 1 {
		t.Fatalf("after A's detach B lists %+v, %v; want the tag still", list, err)
	}
	// B may not free A's chunk; it stays reserved to A, with no grants.
	if d, err := b.Detach(ctxT(t), at.Tag, agent.DetachOptions{}); err != nil || d.ChunkFreed {
		t.Fatalf("B's detach = %+v, %v; want released, chunk kept", d, err)
	}
	if err := r.boxClient(t, apitest.UserHost0, apitest.UserPassword).DeleteAndWait(ctxT(t), at.Chunk, nil); err != nil {
		t.Errorf("A frees its chunk after both detached: %v", err)
	}
}
