package appliance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"cxlpool/bmc"
	"cxlpool/bmc/hwmon"
	"cxlpool/bmc/pldm"
	"cxlpool/bmc/policy"
	"cxlpool/dcd"
	"cxlpool/fabric/fm"
	"cxlpool/fabric/mctp"
)

// BoardConfig configures board management: the PLDM board controller on
// the device link, the policy loop on top of it and the management
// computer's own sensors. Zero fields take the defaults.
type BoardConfig struct {
	// EID is the board controller's EID on the device link (default 9).
	EID mctp.EID
	// PolicyInterval is the fan-control period (default 5 s).
	PolicyInterval time.Duration
	// Watchdog is how long the policy loop may stall before OnStall is
	// called (default 1 min); OnStall nil only logs and records it.
	Watchdog time.Duration
	OnStall  func(stalled time.Duration)
	// CycleOff is how long a head stays off in a power cycle (default 5 s).
	CycleOff time.Duration
	// MaxAge is how old cached board readings may be (default 2 s).
	MaxAge time.Duration
	// HwmonRoot is the hwmon class of the management computer (default
	// /sys/class/hwmon); a directory that does not exist means no sensors.
	HwmonRoot string
	// DiscoverTimeout bounds the discovery at Start (default 3 s), so a
	// device without a board controller delays the daemon only that long;
	// RediscoverInterval is how often an absent board controller is
	// looked for again afterwards (default 30 s).
	DiscoverTimeout    time.Duration
	RediscoverInterval time.Duration
}

func (c *BoardConfig) defaults() {
	if c.EID == mctp.EIDNull {
		c.EID = pldm.DefaultBoardEID
	}
	if c.HwmonRoot == "" {
		c.HwmonRoot = hwmon.DefaultRoot
	}
	if c.DiscoverTimeout <= 0 {
		c.DiscoverTimeout = 3 * time.Second
	}
	if c.RediscoverInterval <= 0 {
		c.RediscoverInterval = 30 * time.Second
	}
}

// alarmBacklog bounds the alarms kept for the first subscriber (the API
// subscribes after Start, when discovery has already raised some).
const alarmBacklog = 64

// Board is the board-management side of the daemon: the PLDM controller of
// the board (sensors, fans, PSUs, head power, identify LED), the policy
// loop (fan control, alarms, the watchdog, safe head power cycles) and the
// hwmon sensors of the management computer. The API reads it; alarms
// reach the API through SubscribeAlarms.
//
// A real device may have no board controller. Then Discover fails, the
// daemon runs on without it (the failure is logged and the controller
// looked for again every RediscoverInterval), and every board method
// answers an error wrapping bmc.ErrUnavailable that says so.
type Board struct {
	cfg  BoardConfig
	log  *slog.Logger
	now  func() time.Time
	ctl  *pldm.Controller
	hw   *hwmon.Reader // nil: the management computer has no hwmon class
	link *Appliance    // whose device link carries PLDM

	mu      sync.Mutex
	loop    *policy.Loop // set once the board controller is discovered
	lastErr error        // why it is not (yet)
	subs    map[chan policy.LogEntry]struct{}
	backlog []policy.LogEntry // alarms raised while nobody subscribed
}

var (
	_ bmc.HeadResetter = (*Board)(nil)
	_ policy.HeadFence = (*dcd.Manager)(nil) // the capacity side of a head power cycle
)

// prepareBoard creates the board side before the device link opens, and
// routes the link's PLDM requests (the board's PlatformEventMessages to
// the FM's EID) to its controller.
func (a *Appliance) prepareBoard(fcfg *fm.Config) {
	bcfg := a.cfg.Board
	bcfg.defaults()
	log := a.cfg.Logger.With("component", "board")
	receiver := fcfg.EID
	if receiver == mctp.EIDNull {
		receiver = fm.DefaultEID
	}
	b := &Board{cfg: bcfg, log: log, now: a.cfg.Clock, link: a, subs: map[chan policy.LogEntry]struct{}{},
		lastErr: errors.New("not discovered yet")}
	b.ctl = pldm.NewController(pldm.NewClient(linkRequester{a}, pldm.ClientConfig{EID: bcfg.EID}), pldm.ControllerConfig{
		ReceiverEID: receiver, MaxAge: bcfg.MaxAge, Clock: a.cfg.Clock, Logger: log})
	if st, err := os.Stat(bcfg.HwmonRoot); err == nil && st.IsDir() {
		b.hw = hwmon.New(bcfg.HwmonRoot, a.cfg.Clock)
	} else {
		log.Info("no hwmon sensors on the management computer", "root", bcfg.HwmonRoot)
	}
	fcfg.Handler = b.ctl.Handle
	a.Board = b
}

// linkRequester sends PLDM requests through the FM's endpoint on the
// device link as it is now (a redialed link has a new one).
type linkRequester struct{ a *Appliance }

func (r linkRequester) Request(ctx context.Context, dst mctp.EID, typ mctp.MsgType, msg []byte) ([]byte, error) {
	var ep *mctp.Endpoint
	switch d := r.a.Device.(type) {
	case *fm.Client:
		ep = d.Endpoint()
	case *redialDevice:
		c, err := d.client()
		if err != nil {
			return nil, err
		}
		ep = c.Endpoint()
	default:
		return nil, fmt.Errorf("appliance: device %T carries no MCTP endpoint: %w", r.a.Device, bmc.ErrUnsupported)
	}
	return ep.Request(ctx, dst, typ, msg)
}

// startBoard runs the policy loop until ctx ends or the appliance closes,
// given how the first discovery of the board controller went (Start runs
// it, for at most DiscoverTimeout); an absent controller is looked for
// again in the background.
func (a *Appliance) startBoard(ctx context.Context, err error) {
	b := a.Board
	ctx, cancel := context.WithCancel(ctx)
	if err != nil {
		b.log.Warn("board controller not found on the device link: sensors, fans, power supplies, the identify LED "+
			"and head power are unavailable until it answers", "eid", b.cfg.EID, "err", err, "retry_every", b.cfg.RediscoverInterval)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(b.cfg.RediscoverInterval):
			}
			if err = b.discover(ctx, a); err != nil {
				b.log.Debug("board controller still not found", "err", err)
			}
		}
		b.mu.Lock()
		loop := b.loop
		b.mu.Unlock()
		_ = loop.Run(ctx)
	}()
	a.closers = append(a.closers, func() error {
		cancel()
		<-done
		b.ctl.Close()
		return nil
	})
}

// discover runs one discovery and, when it succeeds, builds the loop.
func (b *Board) discover(ctx context.Context, a *Appliance) error {
	dctx, cancel := context.WithTimeout(ctx, b.cfg.DiscoverTimeout)
	defer cancel()
	err := b.ctl.Discover(dctx)
	if err == nil {
		var loop *policy.Loop
		loop, err = policy.New(policy.Config{
			Board: b.ctl, Fence: a.Manager, Sink: boardSink{b},
			Interval: b.cfg.PolicyInterval, Watchdog: b.cfg.Watchdog, OnStall: b.cfg.OnStall,
			CycleOff: b.cfg.CycleOff, Clock: b.now, Logger: b.log,
		})
		if err == nil {
			b.mu.Lock()
			b.loop, b.lastErr = loop, nil
			b.mu.Unlock()
			b.log.Info("board controller discovered", "eid", b.cfg.EID)
			return nil
		}
	}
	b.mu.Lock()
	b.lastErr = err
	b.mu.Unlock()
	return err
}

// ready returns nil once the board controller is discovered, else an
// error wrapping bmc.ErrUnavailable that says why there is none.
func (b *Board) ready() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.loop != nil {
		return nil
	}
	return fmt.Errorf("board controller at EID %d is not answering on the device link (%v): %w", b.cfg.EID, b.lastErr, bmc.ErrUnavailable)
}

// Present reports whether the board controller has been discovered.
func (b *Board) Present() bool { return b.ready() == nil }

// Sensors returns the board's numeric sensors, ordered by ID.
func (b *Board) Sensors(ctx context.Context) ([]bmc.Sensor, error) {
	if err := b.ready(); err != nil {
		return nil, err
	}
	return b.ctl.Sensors(ctx)
}

// Sensor returns one board sensor.
func (b *Board) Sensor(ctx context.Context, id string) (bmc.Sensor, error) {
	if err := b.ready(); err != nil {
		return bmc.Sensor{}, err
	}
	return b.ctl.Sensor(ctx, id)
}

// Fans returns the board's fans, ordered by ID.
func (b *Board) Fans(ctx context.Context) ([]bmc.Fan, error) {
	if err := b.ready(); err != nil {
		return nil, err
	}
	return b.ctl.Fans(ctx)
}

// PowerSupplies returns the board's PSUs, ordered by ID.
func (b *Board) PowerSupplies(ctx context.Context) ([]bmc.PowerSupply, error) {
	if err := b.ready(); err != nil {
		return nil, err
	}
	return b.ctl.PowerSupplies(ctx)
}

// HeadPower returns the power state of every host head.
func (b *Board) HeadPower(ctx context.Context) ([]bmc.HeadPower, error) {
	if err := b.ready(); err != nil {
		return nil, err
	}
	return b.ctl.HeadPower(ctx)
}

// Identify returns whether the identify LED is lit.
func (b *Board) Identify(ctx context.Context) (bool, error) {
	if err := b.ready(); err != nil {
		return false, err
	}
	return b.ctl.Identify(ctx)
}

// SetIdentify lights or clears the identify LED.
func (b *Board) SetIdentify(ctx context.Context, on bool) error {
	if err := b.ready(); err != nil {
		return err
	}
	return b.ctl.SetIdentify(ctx, on)
}

// ResetHead powers a host head on, off or through a cycle by way of the
// policy loop, which fences the host's capacity before any power cut
// (bmc.HeadResetter).
func (b *Board) ResetHead(ctx context.Context, host int, t bmc.ResetType) error {
	if err := b.ready(); err != nil {
		return err
	}
	b.mu.Lock()
	loop := b.loop
	b.mu.Unlock()
	return loop.ResetHead(ctx, host, t)
}

// ManagerSensors returns the management computer's own sensors (hwmon),
// ordered by ID; none when it has no hwmon class.
func (b *Board) ManagerSensors(context.Context) ([]bmc.Sensor, error) {
	if b.hw == nil {
		return nil, nil
	}
	s, err := b.hw.Read()
	if err != nil {
		return nil, fmt.Errorf("appliance: management sensors: %w: %w", bmc.ErrUnavailable, err)
	}
	return s, nil
}

// SubscribeAlarms delivers the policy loop's alarms (threshold crossings,
// faults, head power changes, a stalled loop) as event-log entries until
// cancel; the first subscriber also gets those raised before it came. A
// subscriber that falls buf behind loses alarms rather than stalling the
// loop.
func (b *Board) SubscribeAlarms(buf int) (<-chan policy.LogEntry, func()) {
	ch := make(chan policy.LogEntry, max(buf, alarmBacklog))
	b.mu.Lock()
	for _, e := range b.backlog {
		ch <- e
	}
	b.backlog = nil
	b.subs[ch] = struct{}{}
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		if _, ok := b.subs[ch]; ok {
			delete(b.subs, ch)
			close(ch)
		}
		b.mu.Unlock()
	}
}

// boardSink is the policy loop's policy.Sink: alarms go to the daemon's
// log and to the alarm subscribers (the API's EventLog and streams).
type boardSink struct{ b *Board }

func (s boardSink) Event(ev bmc.Event) {
	level := slog.LevelInfo
	switch ev.Health {
	case bmc.Warning:
		level = slog.LevelWarn
	case bmc.Critical:
		level = slog.LevelError
	}
	s.b.log.Log(context.Background(), level, "board event", "kind", ev.Kind, "item", ev.SensorID, "msg", ev.Message)
}

func (s boardSink) Log(e policy.LogEntry) {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.subs) == 0 {
		if len(b.backlog) == alarmBacklog {
			b.backlog = b.backlog[1:]
		}
		b.backlog = append(b.backlog, e)
		return
	}
	for ch := range b.subs {
		select {
		case ch <- e:
		default:
			b.log.Warn("board alarm dropped: subscriber behind", "message", e.MessageID, "origin", e.Origin)
		}
	}
}
