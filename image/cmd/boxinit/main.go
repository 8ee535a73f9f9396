//go:build linux

// Command boxinit is the box's u-root uinit on its own: see package
// cxlpool/image/guest. It prepares the box, keeps a shell on the console
// and runs cxlpoold for the box's life. The image itself carries no
// separate boxinit: its cxlpoold, built with the boxinit tag, is both
// (`cxlpoold boxinit`), which saves a second Go runtime and the shared
// packages in the initramfs. This command stays for running the init
// stage alone (tests, other images).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"cxlpool/image/guest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := guest.RunUinit(ctx)
	stop()
	if err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "boxinit:", err)
		os.Exit(1)
	}
}
