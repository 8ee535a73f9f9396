//go:build linux && boxinit

package main

import (
	"context"

	"cxlpool/image/guest"
)

// uinit runs the box image's init stage when this binary is started as
// `cxlpoold boxinit` (the image's u-root uinit): one Go binary for both
// keeps a second runtime and the packages they share out of the
// initramfs (~2 MB gzipped). Only builds with the boxinit tag, which the
// image build sets, carry it.
func uinit(ctx context.Context, args []string) (bool, error) {
	if len(args) == 0 || args[0] != "boxinit" {
		return false, nil
	}
	return true, guest.RunUinit(ctx)
}
