package vmkit

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// MountPseudo mounts, in a guest whose init is a test program, what
// it needs: /proc, /sys, /dev (devtmpfs) and a tmpfs /tmp.
func MountPseudo() error {
	for _, m := range []struct{ src, dir, fs string }{
		{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"}, {"tmpfs", "/tmp", "tmpfs"},
	} {
		_ = os.MkdirAll(m.dir, 0o755)
		if err := unix.Mount(m.src, m.dir, m.fs, 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount %s: %w", m.dir, err)
		}
	}
	return nil
}

// LoadModules loads, in the guest, each module file the file order names
// (one path a line, dependencies first); one already loaded is fine.
func LoadModules(order string) error {
	b, err := os.ReadFile(order)
	if err != nil {
		return err
	}
	for line := range strings.Lines(string(b)) {
		p := strings.TrimSpace(line)
		if p == "" {
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("load %s: %w", p, err)
		}
	}
	return nil
}
