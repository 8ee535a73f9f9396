// Command flash writes a signed box disk image to a disk or a file (see
// package cxlpool/image/flash):
//
//	flash -image bin/image/disk.img -device /dev/sdX -keys bin/image/signing.pub
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"cxlpool/image/flash"
	"cxlpool/image/manifest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err) // the package's errors start with "flash:"
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("flash", flag.ContinueOnError)
	image := fs.String("image", "bin/image/disk.img", "disk image (with .manifest.json and .manifest.sig beside it)")
	device := fs.String("device", "", "target disk (/dev/sdX) or file")
	keys := fs.String("keys", "bin/image/signing.pub", "trusted public key file or directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *device == "" {
		return fmt.Errorf("-device is required")
	}
	k, err := manifest.LoadPublicKeys(*keys)
	if err != nil {
		return err
	}
	last := int64(-1)
	m, err := flash.Flash(ctx, flash.Options{Image: *image, Device: *device, Keys: k,
		Progress: func(done, total int64) {
			if pct := done * 100 / max(total, 1); pct/10 != last {
				last = pct / 10
				fmt.Printf("\rflash: %3d%% of %d MB", pct, total>>20)
			}
		}})
	fmt.Println()
	if err != nil {
		return err
	}
	fmt.Printf("flash: wrote %s version %s (key %s) to %s and verified it\n", *image, m.Version, m.KeyID, *device)
	return nil
}
