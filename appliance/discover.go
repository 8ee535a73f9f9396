package appliance

import (
	"context"
	"sync/atomic"

	"cxlpool/fabric"
)

// earlyDiscovery runs the device's discovery as soon as the link is open,
// while Open goes on to open the ledger: discovery is round trips on the
// link and opening the ledger is CPU, a tenth of a second each of the
// box's boot under emulation. The Manager's first Discover (its Start)
// takes that result; any later one (after the link is redialed) asks the
// device. Changes between the two arrive as device events, as they would
// during a slower Start.
type earlyDiscovery struct {
	fabric.Device
	done chan struct{}
	box  fabric.Box
	err  error
	used atomic.Bool
}

func discoverEarly(ctx context.Context, dev fabric.Device) *earlyDiscovery {
	d := &earlyDiscovery{Device: dev, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		d.box, d.err = dev.Discover(ctx)
	}()
	return d
}

// Discover returns the early discovery's model the first time, unless it
// failed; otherwise it discovers now.
func (d *earlyDiscovery) Discover(ctx context.Context) (fabric.Box, error) {
	if d.used.CompareAndSwap(false, true) {
		select {
		case <-d.done:
			if d.err == nil {
				return d.box, nil
			}
		case <-ctx.Done():
			return fabric.Box{}, ctx.Err()
		}
	}
	return d.Device.Discover(ctx)
}

// StartAdd sends an add without waiting when the device can
// (fabric.AddStarter); otherwise it sends nothing and says so.
func (d *earlyDiscovery) StartAdd(r fabric.AddRequest) (func(context.Context) error, error) {
	if s, ok := d.Device.(fabric.AddStarter); ok {
		return s.StartAdd(r)
	}
	return nil, fabric.ErrNotSent
}
