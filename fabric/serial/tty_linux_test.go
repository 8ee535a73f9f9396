//go:build linux

package serial

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// openPTY returns the master side of a new pseudo-terminal and the path of
// its slave, which stands in for a real serial line.
func openPTY(t *testing.T) (*os.File, string) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	var n int
	var ioErr error
	rc, err := m.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	err = rc.Control(func(fd uintptr) {
		if ioErr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ioErr != nil {
			return
		}
		n, ioErr = unix.IoctlGetInt(int(fd), unix.TIOCGPTN)
	})
	if err != nil || ioErr != nil {
		t.Skipf("pty setup: %v %v", err, ioErr)
	}
	return m, fmt.Sprintf("/dev/pts/%d", n)
}

func TestDialTTY(t *testing.T) {
	master, slave := openPTY(t)
	c, err := Dial(context.Background(), "tty:"+slave+"?baud=9600")
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	l := NewLink(c, LinkConfig{})
	defer l.Close()

	// The line discipline must be raw 8N1 at 9600 baud.
	fd, err := unix.Open(slave, unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	tio, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name string
		got  bool
	}{
		{"ICANON off", tio.Lflag&unix.ICANON == 0},
		{"ECHO off", tio.Lflag&unix.ECHO == 0},
		{"ISIG off", tio.Lflag&unix.ISIG == 0},
		{"ICRNL off", tio.Iflag&unix.ICRNL == 0},
		{"IXON off", tio.Iflag&unix.IXON == 0},
		{"OPOST off", tio.Oflag&unix.OPOST == 0},
		{"CS8", tio.Cflag&unix.CSIZE == unix.CS8},
		{"no parity", tio.Cflag&unix.PARENB == 0},
		{"one stop bit", tio.Cflag&unix.CSTOPB == 0},
		{"CLOCAL", tio.Cflag&unix.CLOCAL != 0},
		{"9600 baud", tio.Cflag&unix.CBAUD == unix.B9600},
		{"VMIN 1", tio.Cc[unix.VMIN] == 1},
	}
	for _, c := range checks {
		if !c.got {
			t.Errorf("termios: want %s", c.name)
		}
	}

	// Bytes a cooked tty would mangle: CR, ^C, XON/XOFF, ^D, DEL, plus flags.
	pkt := []byte{0x01, 0x0d, 0x0a, 0x03, 0x11, 0x13, 0x04, 0x7f, Flag, Escape, 0x1a, 0x00}
	frame, err := AppendFrame(nil, pkt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := master.Write(frame); err != nil {
		t.Fatalf("master write: %v", err)
	}
	got, err := l.ReadPacket()
	if err != nil {
		t.Fatalf("ReadPacket: %v", err)
	}
	if diff := cmp.Diff(pkt, got); diff != "" {
		t.Errorf("tty -> link packet (-want +got):\n%s", diff)
	}

	if err := l.WritePacket(pkt); err != nil {
		t.Fatalf("WritePacket: %v", err)
	}
	back := NewDecoder(0)
	var echoed []byte
	buf := make([]byte, 256)
	for echoed == nil {
		n, err := master.Read(buf)
		if err != nil {
			t.Fatalf("master read: %v", err)
		}
		back.Feed(buf[:n], func(p []byte) { echoed = append([]byte(nil), p...) })
	}
	if diff := cmp.Diff(pkt, echoed); diff != "" {
		t.Errorf("link -> tty packet (-want +got):\n%s", diff)
	}
}

func TestDialTTYErrors(t *testing.T) {
	for _, addr := range []string{"tty:/nonexistent/tty", "tty:/dev/null"} {
		if c, err := Dial(context.Background(), addr); err == nil {
			c.Close()
			t.Errorf("Dial(%q): got nil error, want one", addr)
		}
	}
}
