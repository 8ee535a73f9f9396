package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"cxlpool/api"
	"cxlpool/fabric/linuxcxl"
	"cxlpool/image/update"
)

// onImage reports whether the daemon runs from the box image: the boot
// loader puts cxlpool.slot= on the kernel command line.
func onImage(cmdline string) bool {
	b, err := os.ReadFile(cmdline)
	return err == nil && strings.Contains(" "+string(b), " cxlpool.slot=")
}

// imageUpdater is the UpdateService's view of the A/B slots when running
// from the image, nil elsewhere (a developer's machine has no slots to
// write). A box whose keys cannot be read still serves, without pushes.
func imageUpdater(log *slog.Logger) api.Updater {
	if !onImage(update.CmdlinePath) {
		return nil
	}
	svc, err := update.ServiceFromBoot(update.DefaultDisk, update.DefaultKeysDir, update.CmdlinePath)
	if err != nil {
		log.Warn("image updates are off", "err", err)
		return nil
	}
	return svc
}

// imageClock is the Manager's DateTime setter when running from the
// image, where the clock is the box's own; nil elsewhere, where it belongs
// to the host's operating system and the API says so.
func imageClock() func(context.Context, time.Time) error {
	if !onImage(update.CmdlinePath) {
		return nil
	}
	return setClock
}

// localCXL lists the CXL memory devices the Linux driver bound here, when
// the kernel has a CXL bus at all.
func localCXL() func() ([]linuxcxl.MemDev, error) {
	if _, err := os.Stat("/sys/bus/cxl"); err != nil {
		return nil
	}
	r := linuxcxl.New(linuxcxl.Options{})
	return func() ([]linuxcxl.MemDev, error) {
		devs, err := r.List()
		if err != nil {
			return nil, fmt.Errorf("local cxl: %w", err)
		}
		return devs, nil
	}
}
