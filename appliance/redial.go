package appliance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
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
//
// Every way back goes through the same backoff, whatever failed: the dial,
// the device's discovery on the new link (a port that accepts and closes
// at once, a device that does not answer), or a link that was up but did
// not stay up for redialStable. Only a link that stayed up that long
// resets the backoff, so a device that drops every connection at once is
// redialed a handful of times a minute, not in a hot loop.
type redialDevice struct {
	dial func(context.Context) (io.ReadWriteCloser, error)
	cfg  fm.Config
	log  *slog.Logger
	rc   redialConfig

	ctx    context.Context // lives until Close
	cancel context.CancelFunc
	events chan fabric.Event
	done   chan struct{}

	mu  sync.Mutex
	cur *fm.Client // nil while the link is down
	// found is the discovery a redial made to check the new link; the
	// Manager's next Discover (after the EventDeviceReset) takes it.
	found *fabric.Box
}

// redialConfig is the redial policy and its clock and randomness (tests
// replace them).
type redialConfig struct {
	// Min and Max bound the wait before an attempt; each failure doubles
	// it. Stable is how long a link must stay up to reset the wait.
	Min, Max, Stable time.Duration
	// ProbeTimeout bounds the discovery that checks a new link.
	ProbeTimeout time.Duration
	Now          func() time.Time
	After        func(time.Duration) <-chan time.Time
	// Rand returns a number in [0, 1) for the jitter.
	Rand func() float64
}

// Redial policy defaults.
const (
	redialMin          = 50 * time.Millisecond
	redialMax          = 5 * time.Second
	redialStable       = 30 * time.Second
	redialProbeTimeout = 30 * time.Second
)

func (c *redialConfig) setDefaults() {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Min, redialMin)
	def(&c.Max, redialMax)
	def(&c.Stable, redialStable)
	def(&c.ProbeTimeout, redialProbeTimeout)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.After == nil {
		c.After = time.After
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
}

// backoff is the wait before the next attempt: exponential between Min
// and Max, with half of it random ("equal jitter"), so that daemons
// redialing one device do not march in step and the wait never drops
// below half its base.
type backoff struct {
	rc   *redialConfig
	base time.Duration
}

// next returns the wait before the coming attempt and doubles the base.
func (b *backoff) next() time.Duration {
	if b.base <= 0 {
		b.base = b.rc.Min
	}
	w := b.base/2 + time.Duration(b.rc.Rand()*float64(b.base/2))
	b.base = min(2*b.base, b.rc.Max)
	return w
}

func (b *backoff) reset() { b.base = 0 }

var _ fabric.Device = (*redialDevice)(nil)

// openRedial dials once (failing if the device is not there at start, so a
// wrong address is reported at once) and then keeps the link up.
func openRedial(ctx context.Context, dial func(context.Context) (io.ReadWriteCloser, error), cfg fm.Config, log *slog.Logger, rc redialConfig) (*redialDevice, error) {
	rc.setDefaults()
	d := &redialDevice{dial: dial, cfg: cfg, log: log, rc: rc, events: make(chan fabric.Event, 256), done: make(chan struct{})}
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
	var bo backoff
	bo.rc = &d.rc
	for {
		up := d.rc.Now()
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
		lived := d.rc.Now().Sub(up)
		if lived >= d.rc.Stable {
			bo.reset()
		}
		d.log.Warn("device link lost; reconnecting", "was_up", lived.Round(time.Millisecond))
		d.mu.Lock()
		d.cur, d.found = nil, nil
		d.mu.Unlock()
		c.Close()
		var box fabric.Box
		var err error
		if c, box, err = d.redial(&bo); err != nil {
			return // closed while redialing
		}
		d.mu.Lock()
		d.cur, d.found = c, &box
		d.mu.Unlock()
		d.log.Info("device link back")
		select {
		case d.events <- fabric.Event{Kind: fabric.EventDeviceReset, Time: d.rc.Now()}:
		case <-d.ctx.Done():
			c.Close()
			return
		}
	}
}

// redial waits out the backoff before every attempt and returns a link on
// which the device answered its discovery.
func (d *redialDevice) redial(bo *backoff) (*fm.Client, fabric.Box, error) {
	for {
		wait := bo.next()
		select {
		case <-d.ctx.Done():
			return nil, fabric.Box{}, d.ctx.Err()
		case <-d.rc.After(wait):
		}
		c, box, err := d.attempt()
		if err == nil {
			return c, box, nil
		}
		if d.ctx.Err() != nil {
			return nil, fabric.Box{}, d.ctx.Err()
		}
		d.log.Warn("device redial failed", "err", err, "waited", wait.Round(time.Millisecond))
	}
}

// attempt dials and discovers the device on the new link: a link is back
// only when the device answers on it.
func (d *redialDevice) attempt() (*fm.Client, fabric.Box, error) {
	c, err := d.connect(d.ctx)
	if err != nil {
		return nil, fabric.Box{}, err
	}
	ctx, cancel := context.WithTimeout(d.ctx, d.rc.ProbeTimeout)
	defer cancel()
	box, err := c.Discover(ctx)
	if err != nil {
		c.Close()
		return nil, fabric.Box{}, fmt.Errorf("discovery on the new link: %w", err)
	}
	return c, box, nil
}

func (d *redialDevice) client() (*fm.Client, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cur == nil {
		return nil, fmt.Errorf("device link is down, reconnecting: %w", fabric.ErrClosed)
	}
	return d.cur, nil
}

// Discover returns the discovery the last redial made, once; otherwise it
// asks the device.
func (d *redialDevice) Discover(ctx context.Context) (fabric.Box, error) {
	d.mu.Lock()
	found := d.found
	d.found = nil
	d.mu.Unlock()
	if found != nil {
		return *found, nil
	}
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

// StartAdd is fm.Client's StartAdd on the current link (fabric.AddStarter).
func (d *redialDevice) StartAdd(r fabric.AddRequest) (func(context.Context) error, error) {
	c, err := d.client()
	if err != nil {
		return nil, err
	}
	return c.StartAdd(r)
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
