//go:build !linux

package main

import (
	"context"
	"errors"
)

// reboot is Linux-only: the box image is Linux.
func reboot(context.Context) error { return errors.New("reboot: not supported on this system") }
