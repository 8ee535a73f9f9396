//go:build !linux

package main

import (
	"context"
	"errors"
	"time"
)

// setClock is Linux-only: the box image is Linux.
func setClock(context.Context, time.Time) error {
	return errors.New("clock: not supported on this system")
}
