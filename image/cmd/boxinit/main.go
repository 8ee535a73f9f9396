//go:build linux

// Command boxinit is the box's u-root uinit: see package cxlpool/image/guest.
// It prepares the box, keeps a shell on the console and runs cxlpoold for
// the box's life.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"

	"cxlpool/image/guest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// Write to the console itself: init hands us a pipe that closes when
	// init's own output ends.
	var out io.Writer = os.Stdout
	if c, err := os.OpenFile("/dev/console", os.O_WRONLY, 0); err == nil {
		out = c
	}
	// u-root's dhclient logs each DHCP packet whole through the standard
	// logger; boxinit says what matters on the console itself.
	log.SetOutput(io.Discard)
	err := (&guest.Init{Out: out}).Main(ctx)
	stop()
	if err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "boxinit:", err)
		os.Exit(1)
	}
}
