package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"cxlpool/dcd"
)

// Plane is the transport the Service publishes on (fleet/nats).
type Plane interface {
	// PutInventory writes the box's record; the plane expires it a TTL
	// after the last write.
	PutInventory(ctx context.Context, inv Inventory) error
	// Publish stores e on the event stream and returns its stream
	// sequence once the stream acknowledged it.
	Publish(ctx context.Context, e Envelope) (uint64, error)
}

// RedfishEvent is an event of the box's Redfish EventService, as the API
// hands it to the fleet (cmd/cxlpoold converts the API's events).
type RedfishEvent struct {
	MessageID  string
	Args       []string
	Origin     string
	Host       *uint16
	Resolution string
	Time       time.Time
}

// Config holds the Service's dependencies.
type Config struct {
	Manager *dcd.Manager
	Plane   Plane
	Logger  *slog.Logger
	Clock   func() time.Time
	// API is the box's Redfish service root URL published in its record.
	API string
	// Export returns the export server's address once it listens (""
	// when there is none).
	Export func() string
	// Heartbeat is how often the record is rewritten without a change;
	// it must be well under the plane's TTL (a third of it is usual).
	Heartbeat time.Duration
	// Health returns the box's health; nil: OK.
	Health func() Health
	// Queue bounds the events waiting for the stream's acknowledgement
	// (while the plane is unreachable); past it the oldest are dropped
	// and counted in the log. 0: 4096.
	Queue int
}

// Service feeds the plane from a running daemon: the inventory record on
// every capacity change and every heartbeat, and every capacity change and
// Redfish event on the stream, each retried until the stream
// acknowledges it.
type Service struct {
	cfg     Config
	log     *slog.Logger
	box     BoxID
	started time.Time

	mu      sync.Mutex
	queue   []Envelope
	next    uint64 // envelope counter
	dropped int    // since the last log line
	lost    uint64 // dropped since the start
	wake    chan struct{}
	kick    chan struct{} // Kick: write the record now
	last    Inventory
	rev     uint64
	acked   uint64 // the last stream sequence acknowledged
}

// NewService checks cfg; the box's identity comes from the Manager's
// discovery, so the Manager must have started.
func NewService(cfg Config) (*Service, error) {
	if cfg.Manager == nil || cfg.Plane == nil {
		return nil, errors.New("fleet: a Manager and a Plane are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 10 * time.Second
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 4096
	}
	if cfg.Export == nil {
		cfg.Export = func() string { return "" }
	}
	b := cfg.Manager.Box()
	if b.Identity.Serial == 0 && len(b.Heads) == 0 {
		return nil, errors.New("fleet: the Manager has not discovered the device yet")
	}
	return &Service{cfg: cfg, log: cfg.Logger, box: BoxIDFromSerial(b.Identity.Serial),
		started: cfg.Clock(), wake: make(chan struct{}, 1), kick: make(chan struct{}, 1)}, nil
}

// Box is this box's fleet identity.
func (s *Service) Box() BoxID { return s.box }

// PublishRedfish queues a Redfish event for the stream. It never blocks.
func (s *Service) PublishRedfish(ev RedfishEvent) {
	t := ev.Time
	if t.IsZero() {
		t = s.cfg.Clock()
	}
	s.enqueue(Envelope{Kind: KindRedfish, Time: t, Host: ev.Host, MessageID: ev.MessageID,
		Args: ev.Args, Origin: ev.Origin, Resolution: ev.Resolution})
}

func (s *Service) enqueue(e Envelope) {
	s.mu.Lock()
	s.next++
	e.Box = s.box
	// Unique per box and run: the stream drops a retried duplicate.
	e.ID = fmt.Sprintf("%s-%d-%d", s.box, s.started.UnixNano(), s.next)
	s.queue = append(s.queue, e)
	if len(s.queue) > s.cfg.Queue {
		s.queue = s.queue[1:]
		s.dropped++
		s.lost++
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Acked is the stream sequence of the last event the stream acknowledged.
func (s *Service) Acked() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked
}

// Backlog is how many events wait for the stream's acknowledgement and
// how many were dropped since the start because the queue overflowed
// while the plane was unreachable.
func (s *Service) Backlog() (queued int, dropped uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue), s.lost
}

// ErrNotJoined is what a Plane answers while it has not joined the fleet
// yet (the daemon joins in the background): the Service keeps its events
// queued and says nothing more in the log, the plane's state says why.
var ErrNotJoined = errors.New("fleet: the plane has not joined yet")

// Kick makes the Service retry its queued events now and write its
// record (the plane just joined) instead of at its next backoff or
// heartbeat.
func (s *Service) Kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run publishes until ctx ends.
func (s *Service) Run(ctx context.Context) {
	changes, unsubscribe := s.cfg.Manager.Subscribe(1024)
	defer unsubscribe()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); s.sendLoop(ctx) }()
	defer wg.Wait()

	tick := time.NewTicker(s.cfg.Heartbeat)
	defer tick.Stop()
	s.putInventory(ctx, true)
	for {
		select {
		case <-ctx.Done():
			return
		case c, ok := <-changes:
			if !ok {
				return
			}
			s.enqueue(changeEnvelope(c))
			// Coalesce a burst into one record.
			for more := true; more; {
				select {
				case c, ok := <-changes:
					if !ok {
						return
					}
					s.enqueue(changeEnvelope(c))
				default:
					more = false
				}
			}
			s.putInventory(ctx, false)
		case <-tick.C:
			s.putInventory(ctx, true)
		case <-s.kick:
			s.putInventory(ctx, true)
		}
	}
}

func changeEnvelope(c dcd.Change) Envelope {
	e := Envelope{Kind: KindCapacity, Time: c.Time, Change: string(c.Kind), Chunk: int64(c.Chunk), Message: c.Message}
	if c.Kind != dcd.ChangeChunk || c.Grant != nil {
		h := uint16(c.Host)
		e.Host = &h
	}
	if c.Grant != nil {
		e.Grant, e.State, e.Size = int64(c.Grant.ID), string(c.Grant.State), c.Grant.Size()
		h := uint16(c.Grant.Host)
		e.Host = &h
	}
	return e
}

// sendLoop publishes the queue in order, retrying the head until the
// stream acknowledges it: an event is never skipped while the plane is
// down, only dropped when the queue overflows (and that is logged).
func (s *Service) sendLoop(ctx context.Context) {
	backoff := 50 * time.Millisecond
	for {
		s.mu.Lock()
		if s.dropped > 0 {
			s.log.Warn("fleet: events dropped while the plane was unreachable", "dropped", s.dropped)
			s.dropped = 0
		}
		if len(s.queue) == 0 {
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-s.wake:
			}
			continue
		}
		e := s.queue[0]
		s.mu.Unlock()
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		seq, err := s.cfg.Plane.Publish(pctx, e)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Debug("fleet: publish failed; retrying", "id", e.ID, "err", err)
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			case <-s.wake: // Kick (joined) or a new event: try the head now
				t.Stop()
			}
			backoff = min(backoff*2, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		s.mu.Lock()
		if len(s.queue) > 0 && s.queue[0].ID == e.ID {
			s.queue = s.queue[1:]
		}
		s.acked = seq
		s.mu.Unlock()
	}
}

// putInventory writes the record if it changed, or always on a heartbeat.
func (s *Service) putInventory(ctx context.Context, heartbeat bool) {
	inv, err := s.Inventory(ctx)
	if err != nil {
		s.log.Warn("fleet: reading the inventory", "err", err)
		return
	}
	s.mu.Lock()
	changed := inv.Changed(s.last)
	if !changed && !heartbeat {
		s.mu.Unlock()
		return
	}
	s.rev++
	inv.Revision = s.rev
	s.last = inv
	s.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.cfg.Plane.PutInventory(pctx, inv); err != nil && ctx.Err() == nil && !errors.Is(err, ErrNotJoined) {
		// The next heartbeat writes it again.
		s.log.Warn("fleet: writing the inventory record", "err", err)
	}
}

// Inventory reads the box's record from the Manager and its ledger.
func (s *Service) Inventory(ctx context.Context) (Inventory, error) {
	m := s.cfg.Manager
	box := m.Box()
	led := m.Ledger()
	hosts, err := led.Hosts(ctx)
	if err != nil {
		return Inventory{}, fmt.Errorf("fleet: hosts: %w", err)
	}
	regions, err := led.Regions(ctx)
	if err != nil {
		return Inventory{}, fmt.Errorf("fleet: regions: %w", err)
	}
	chunks, err := led.Chunks(ctx)
	if err != nil {
		return Inventory{}, fmt.Errorf("fleet: chunks: %w", err)
	}
	grants, err := led.Grants(ctx, dcd.GrantFilter{Active: true})
	if err != nil {
		return Inventory{}, fmt.Errorf("fleet: grants: %w", err)
	}
	granted := map[dcd.HostID]uint64{}
	grantedChunk := map[dcd.ChunkID]bool{}
	for _, g := range grants {
		if g.State == dcd.GrantGranted {
			granted[g.Host] += g.Size()
			grantedChunk[g.Chunk] = true
		}
	}
	health := HealthOK
	if s.cfg.Health != nil {
		health = s.cfg.Health()
	}
	inv := Inventory{Box: s.box, Serial: fmt.Sprintf("%#016x", box.Identity.Serial), Firmware: box.Identity.FirmwareRevision,
		API: s.cfg.API, Export: s.cfg.Export(), Health: health, Updated: s.cfg.Clock(), Started: s.started,
		Heads: []Head{}, Regions: []RegionCapacity{}}
	for _, h := range hosts {
		q, err := m.EffectiveQuota(ctx, h)
		if err != nil {
			return Inventory{}, fmt.Errorf("fleet: quota of host %d: %w", h.ID, err)
		}
		inv.Heads = append(inv.Heads, Head{LD: uint16(h.ID), Port: h.Port, Host: h.Name, LinkUp: h.LinkUp, Granted: granted[h.ID], Quota: q})
	}
	for _, r := range regions {
		rc := RegionCapacity{Index: r.Index, Length: r.Length, BlockSize: r.BlockSize, Sharable: r.Sharable}
		for _, c := range chunks {
			if c.Region != r.Index {
				continue
			}
			rc.Reserved += c.Size
			if grantedChunk[c.ID] {
				rc.Granted += c.Size
			}
		}
		rc.Free = r.Length - min(rc.Reserved, r.Length)
		inv.Regions = append(inv.Regions, rc)
	}
	return inv, nil
}
