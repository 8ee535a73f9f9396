package vbox_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cxlpool/fabric"
	"cxlpool/fabric/cci"
	"cxlpool/fabric/fm"
	"cxlpool/fabric/serial"
	"cxlpool/host"
	"cxlpool/host/hosttest"
	"cxlpool/host/vbox"
	"cxlpool/sim"
)

const testLD = 3

// rig is a small virtual box (head 3 external) with an FM client on the
// device side and its external host socket listening in a temp dir.
type rig struct {
	box  *sim.Box
	fm   *fm.Client
	sock string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Capacity = 8 << 30
	cfg.BlockSize = 2 << 20
	cfg.WorkloadTick = -1
	box, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := box.SetExternal(testLD); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sock := filepath.Join(t.TempDir(), "host3.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	hostDone := make(chan error, 1)
	go func() { hostDone <- box.ServeHostListener(ctx, testLD, l) }()
	devSide, fmSide := net.Pipe()
	served := make(chan error, 1)
	go func() { served <- box.ServeConn(ctx, devSide) }()
	c, err := fm.Open(ctx, serial.NewLink(fmSide, serial.LinkConfig{}), fm.Config{PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Discover(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		cancel()
		<-served
		if err := <-hostDone; err != nil {
			t.Errorf("ServeHostListener: %v", err)
		}
		_ = box.Close()
	})
	return &rig{box: box, fm: c, sock: sock}
}

func (r *rig) dial(t *testing.T) *vbox.Backend {
	t.Helper()
	b, err := vbox.Dial(t.Context(), "unix:"+r.sock, vbox.Config{PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func (r *rig) fixture(t *testing.T) hosttest.Fixture {
	b := r.dial(t)
	return hosttest.Fixture{
		Backend: b,
		Want:    host.Identity{Serial: r.box.Config().Serial, LD: testLD},
		Block:   r.box.Config().BlockSize,
		Grant: func(ctx context.Context, tag string, size uint64) error {
			tg, err := cci.ParseTag(tag)
			if err != nil {
				return err
			}
			return r.fm.Add(ctx, fabric.AddRequest{Host: testLD, Policy: fabric.AddFree, Region: 0, Length: size, Tag: tg})
		},
		Revoke: func(ctx context.Context, tag string) error {
			tg, err := cci.ParseTag(tag)
			if err != nil {
				return err
			}
			var length uint64
			list, err := b.List(ctx)
			if err != nil {
				return err
			}
			for _, c := range list {
				if c.Tag == tag {
					length = c.Size
				}
			}
			return r.fm.Release(ctx, fabric.ReleaseRequest{Host: testLD, Policy: fabric.ReleaseTagBased, Sanitize: true, Length: length, Tag: tg})
		},
	}
}

func TestContract(t *testing.T) {
	hosttest.Run(t, func(t *testing.T) hosttest.Fixture { return newRig(t).fixture(t) })
}

// A second host process on the same head is refused while one is
// connected: one head, one host.
func TestSecondHostRefused(t *testing.T) {
	r := newRig(t)
	r.dial(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	// The box closes the second connection without a hello: it never
	// gets the memory file.
	if b2, err := vbox.Dial(ctx, "unix:"+r.sock, vbox.Config{PollInterval: time.Hour}); err == nil {
		_ = b2.Close()
		t.Fatal("a second host on the same head got a hello; want the connection closed")
	}
}

// A head that keeps its built-in policy is not served to an external host.
func TestNotExternal(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	peer := os.NewFile(uintptr(fds[1]), "peer")
	defer peer.Close()
	nc, err := net.FileConn(os.NewFile(uintptr(fds[0]), "box"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.box.ServeHost(ctx, 0, nc.(*net.UnixConn)); err == nil {
		t.Error("ServeHost on a head with its built-in policy succeeded")
	}
}
