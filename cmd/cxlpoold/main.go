// Command cxlpoold is the memory box's daemon: the Fabric Manager of the
// multi-headed Dynamic Capacity Device and keeper of the capacity ledger.
//
//	cxlpoold --device sim --data ./var --listen 127.0.0.1:8443
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	name := "cxlpoold"
	isInit, err := uinit(ctx, os.Args[1:])
	if isInit {
		name = "boxinit"
	} else {
		err = run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	}
	stop()
	if err != nil && !(isInit && ctx.Err() != nil) {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}
