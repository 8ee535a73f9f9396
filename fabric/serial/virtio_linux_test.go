//go:build linux

package serial

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDialVirtio opens a FIFO through the virtio: scheme: like a
// virtio-serial port it is a pollable file on which termios ioctls fail.
// What is written comes back, and Close unblocks a pending Read.
func TestDialVirtio(t *testing.T) {
	path := filepath.Join(t.TempDir(), "port")
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	c, err := Dial(context.Background(), "virtio://"+path)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	if _, err := c.Write([]byte("frame")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "frame" {
		t.Fatalf("got %q %v, want frame", got, err)
	}
	done := make(chan error)
	go func() { _, err := c.Read(got); done <- err }()
	c.Close()
	if err := <-done; err == nil {
		t.Fatal("Read after Close: got nil error")
	}
	if _, err := Dial(context.Background(), "virtio:"); !errors.Is(err, ErrAddress) {
		t.Errorf("empty path: got %v, want ErrAddress", err)
	}
	if _, err := Dial(context.Background(), "virtio:"+filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("missing device: got nil error")
	}
}
