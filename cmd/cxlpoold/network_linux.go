package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"cxlpool/api"
	"cxlpool/image/guest"
	"cxlpool/image/update"
)

// imageNetwork is the network and time settings hook when running from
// the image (nil elsewhere, where the host's operating system owns them):
// it sets the configured host name now and keeps the clock synchronised
// with the configured NTP servers (stepping it with setClock, which also
// writes the hardware clock) until ctx ends.
func imageNetwork(ctx context.Context, log *slog.Logger) api.NetworkConfig {
	if !onImage(update.CmdlinePath) {
		return nil
	}
	log = log.With("component", "network")
	n := &confNetwork{defaults: guest.ConfigPath, data: filepath.Join(guest.DataMount, guest.DataConfig),
		cmdline: update.CmdlinePath, resolvConf: guest.ResolvConf, setHostname: func(h string) error { return unix.Sethostname([]byte(h)) }, log: log}
	ts := newClockSync(n.ntpSettings, func(d time.Duration) error { return setClock(ctx, time.Now().Add(d)) }, log)
	n.ntpChanged = ts.Wake
	n.applyHostname()
	go ts.run(ctx)
	return n
}
