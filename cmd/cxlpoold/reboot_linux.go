package main

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// rebootGrace lets the client that pushed an image read its finished
// task before the box goes down.
const rebootGrace = 2 * time.Second

// reboot syncs the filesystems and restarts the box (the image's init is
// PID 1; there is no service manager to ask). The SQLite inventory is
// crash-safe, so no orderly shutdown is needed beyond the sync.
func reboot(ctx context.Context) error {
	select {
	case <-time.After(rebootGrace):
	case <-ctx.Done():
		return ctx.Err()
	}
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART); err != nil {
		return fmt.Errorf("reboot: %w", err)
	}
	return nil
}
