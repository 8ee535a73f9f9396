package appliance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"cxlpool/fabric"
	"cxlpool/fabric/fm"
	"cxlpool/fabric/serial"
)

// redialDevice is a fabric.Device over a link that can drop (a socket to a
// device that restarts, a serial line that is unplugged). When the link is
// lost it dials again with backoff and then reports EventDeviceReset, so
// the Manager rediscovers and reconciles exactly as after a device reset.
// Calls made while the link is down fail with fabric.ErrClosed.
type redialDevice struct {
	dial func(context.Context) (io.ReadWriteCloser, error)
	cfg  fm.Config
	log  *slog.Logger

	ctx    context.Context // lives until Close
	cancel context.CancelFunc
	events chan fabric.Event
	done   chan struct{}

	mu  sync.Mutex
	cur *fm.Client // nil while the link is down
}

// Backoff bounds between dial attempts.
const (
	redialMin = 50 * time.Millisecond
	redialMax = 5 * time.Second
)

var _ fabric.Device = (*redialDevice)(nil)

// openRedial dials once (failing if the device is not there at start, so a
// wrong address is reported at once) and then keeps the link up.
func openRedial(ctx context.Context, dial func(context.Context) (io.ReadWriteCloser, error), cfg fm.Config, log *slog.Logger) (*redialDevice, error) {
	d := &redialDevice{dial: dial, cfg: cfg, log: log, events: make(chan fabric.Event, 256), done: make(chan struct{})}
	c, err := d.connect(ctx)
	if err != nil {
		return nil, err
	}
	d.ctx, d.cancel = context.WithCancel(context.WithoutCancel(ctx))
	d.cur = c
	go d.run(c)
	return d, nil
}

func (d *redialDevice) connect(ctx context.Context) (*fm.Client, error) {
	rw, err := d.dial(ctx)
	if err != nil {
		return nil, err
	}
	link := serial.NewLink(rw, serial.LinkConfig{Logger: d.log})
	c, err := fm.Open(ctx, link, d.cfg)
	if err != nil {
		link.Close()
		return nil, err
	}
	return c, nil
}

// run forwards the current client's events and redials when its stream
// ends (the link was lost). It owns the outer events channel.
func (d *redialDevice) run(c *fm.Client) {
	defer close(d.done)
	defer close(d.events)
	for {
		for ev := range c.Events() {
			select {
			case d.events <- ev:
			case <-d.ctx.Done():
				return
			}
		}
		if d.ctx.Err() != nil {
			return
		}
		d.log.Warn("device link lost; reconnecting")
		d.mu.Lock()
		d.cur = nil
		d.mu.Unlock()
		c.Close()
		var err error
		if c, err = d.redial(); err != nil {
			return // closed while redialing
		}
		if d.ctx.Err() != nil {
			c.Close()
			return
		}
		d.mu.Lock()
		d.cur = c
		d.mu.Unlock()
		d.log.Info("device link back")
		select {
		case d.events <- fabric.Event{Kind: fabric.EventDeviceReset, Time: time.Now()}:
		case <-d.ctx.Done():
			return
		}
	}
}

func (d *redialDevice) redial() (*fm.Client, error) {
	wait := redialMin
	for {
		c, err := d.connect(d.ctx)
		if err == nil {
			return c, nil
		}
		d.log.Debug("device redial failed", "err", err, "retry_in", wait)
		select {
		case <-d.ctx.Done():
			return nil, d.ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, redialMax)
	}
}

func (d *redialDevice) client() (*fm.Client, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cur == nil {
		return nil, fmt.Errorf("device link is down, reconnecting: %w", fabric.ErrClosed)
	}
	return d.cur, nil
}

func (d *redialDevice) Discover(ctx context.Context) (fabric.Box, error) {
	c, err := d.client()
	if err != nil {
		return fabric.Box{}, err
	}
	return c.Discover(ctx)
}

func (d *redialDevice) Heads(ctx context.Context) ([]fabric.Head, error) {
	c, err := d.client()
	if err != nil {
		return nil, err
	}
	return c.Heads(ctx)
}

func (d *redialDevice) Add(ctx context.Context, r fabric.AddRequest) error {
	c, err := d.client()
	if err != nil {
		return err
	}
	return c.Add(ctx, r)
}

func (d *redialDevice) Release(ctx context.Context, r fabric.ReleaseRequest) error {
	c, err := d.client()
	if err != nil {
		return err
	}
	return c.Release(ctx, r)
}

func (d *redialDevice) Extents(ctx context.Context, host uint16) (fabric.ExtentList, error) {
	c, err := d.client()
	if err != nil {
		return fabric.ExtentList{}, err
	}
	return c.Extents(ctx, host)
}

func (d *redialDevice) Tags(ctx context.Context) (fabric.TagList, error) {
	c, err := d.client()
	if err != nil {
		return fabric.TagList{}, err
	}
	return c.Tags(ctx)
}

func (d *redialDevice) Events() <-chan fabric.Event { return d.events }

// Close stops redialing and closes the current link.
func (d *redialDevice) Close() error {
	d.cancel()
	d.mu.Lock()
	c := d.cur
	d.cur = nil
	d.mu.Unlock()
	var err error
	if c != nil {
		err = c.Close()
	}
	<-d.done
	if errors.Is(err, fabric.ErrClosed) {
		err = nil
	}
	return err
}
