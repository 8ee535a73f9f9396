package dcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"cxlpool/fabric"
	"cxlpool/fabric/cci"
)

// Config holds the Manager's dependencies and policy knobs.
type Config struct {
	Ledger Ledger
	Device fabric.Device
	Logger *slog.Logger
	Clock  func() time.Time
	// AddTimeout bounds how long a host may take to answer an add before
	// the Manager withdraws the offer with a forced release.
	AddTimeout time.Duration
	// ReleaseTimeout bounds how long a host may take to give capacity
	// back before the release is forced.
	ReleaseTimeout time.Duration
	// BusyRetries is how many times a command answered Busy or Retry
	// Required is sent again (with backoff) before ErrDeviceBusy.
	BusyRetries int
}

func (c *Config) defaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.AddTimeout <= 0 {
		c.AddTimeout = 10 * time.Second
	}
	if c.ReleaseTimeout <= 0 {
		c.ReleaseTimeout = 10 * time.Second
	}
	if c.BusyRetries <= 0 {
		c.BusyRetries = 8
	}
}

// ChangeKind says what a Change is about.
type ChangeKind string

// Change kinds published to subscribers.
const (
	ChangeChunk  ChangeKind = "chunk"
	ChangeGrant  ChangeKind = "grant"
	ChangeHost   ChangeKind = "host"
	ChangeOrphan ChangeKind = "orphan"
	ChangeDevice ChangeKind = "device"
)

// Change is a notification that something in the capacity domain changed,
// for the API's event streams.
type Change struct {
	Kind    ChangeKind
	Chunk   ChunkID
	Grant   *Grant
	Host    HostID
	Message string
	Time    time.Time
}

// Manager runs the capacity flows. All methods are safe for concurrent use.
// Device commands are serialised per host head (the device processes DC
// events per LD in order) and per chunk (a tag's life is a sequence), while
// different heads proceed in parallel.
type Manager struct {
	cfg Config
	log *slog.Logger

	mu          sync.Mutex
	box         fabric.Box
	hostMu      map[HostID]*sync.Mutex
	chunkMu     map[ChunkID]*sync.Mutex
	waiters     map[HostID]map[chan fabric.Event]struct{}
	subs        map[chan Change]struct{}
	inflight    map[GrantID]bool
	startReport ReconcileReport
	reconc      chan struct{}

	bg sync.WaitGroup
}

// NewManager returns a Manager; call Start before using it.
func NewManager(cfg Config) (*Manager, error) {
	if cfg.Ledger == nil || cfg.Device == nil {
		return nil, errors.New("dcd: manager needs a ledger and a device")
	}
	cfg.defaults()
	return &Manager{
		cfg:      cfg,
		log:      cfg.Logger,
		hostMu:   make(map[HostID]*sync.Mutex),
		chunkMu:  make(map[ChunkID]*sync.Mutex),
		waiters:  make(map[HostID]map[chan fabric.Event]struct{}),
		subs:     make(map[chan Change]struct{}),
		inflight: make(map[GrantID]bool),
		reconc:   make(chan struct{}, 1),
	}, nil
}

// Start discovers the device, records the inventory, reconciles the ledger
// with the device and then follows device events until ctx is done.
func (m *Manager) Start(ctx context.Context) error {
	box, err := m.cfg.Device.Discover(ctx)
	if err != nil {
		return fmt.Errorf("dcd: discover: %w", err)
	}
	if err := m.adoptBox(ctx, box); err != nil {
		return err
	}
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		m.eventLoop(ctx)
	}()
	rep, err := m.Reconcile(ctx)
	if err != nil {
		return fmt.Errorf("dcd: reconcile at start: %w", err)
	}
	m.mu.Lock()
	m.startReport = rep
	m.mu.Unlock()
	return nil
}

// StartReport is what the reconcile at Start found: how much work a crash
// or an unclean stop had left behind.
func (m *Manager) StartReport() ReconcileReport {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.startReport
}

// Wait blocks until the background work started by Start has stopped
// (after its context is cancelled or the device's event stream ends).
func (m *Manager) Wait() { m.bg.Wait() }

// Settle waits until no grant or release is in flight, for callers that
// need a quiet ledger (shutdown, tests, consistency checks).
func (m *Manager) Settle(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		m.mu.Lock()
		n := len(m.inflight)
		m.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("settle: %d flows still in flight: %w", n, ctx.Err())
		case <-t.C:
		}
	}
}

func (m *Manager) adoptBox(ctx context.Context, box fabric.Box) error {
	inv := Inventory{Serial: box.Identity.Serial}
	for _, h := range box.Heads {
		inv.Hosts = append(inv.Hosts, Host{ID: HostID(h.LD), Port: h.Port, LinkUp: h.LinkUp})
	}
	for _, r := range box.Regions {
		inv.Regions = append(inv.Regions, Region{Index: r.Index, Base: r.Base, Length: r.Length,
			BlockSize: r.BlockSize, Sharable: r.Sharable, SanitizeOnRelease: r.SanitizeOnRelease})
	}
	if err := m.cfg.Ledger.SyncInventory(ctx, inv); err != nil {
		return fmt.Errorf("dcd: record inventory: %w", err)
	}
	m.mu.Lock()
	m.box = box
	m.mu.Unlock()
	m.log.Info("device discovered", "serial", fmt.Sprintf("%#x", box.Identity.Serial),
		"heads", len(box.Heads), "regions", len(box.Regions), "dynamic_bytes", box.TotalDynamic)
	return nil
}

// Box returns the current model of the device.
func (m *Manager) Box() fabric.Box {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.box
}

// Ledger exposes the ledger for read-only queries by the API.
func (m *Manager) Ledger() Ledger { return m.cfg.Ledger }

// Subscribe returns a channel of changes; cancel stops delivery. A slow
// subscriber loses changes rather than slowing the Manager.
func (m *Manager) Subscribe(buf int) (<-chan Change, func()) {
	ch := make(chan Change, buf)
	m.mu.Lock()
	m.subs[ch] = struct{}{}
	m.mu.Unlock()
	return ch, func() {
		m.mu.Lock()
		if _, ok := m.subs[ch]; ok {
			delete(m.subs, ch)
			close(ch)
		}
		m.mu.Unlock()
	}
}

func (m *Manager) publish(c Change) {
	c.Time = m.cfg.Clock()
	m.mu.Lock()
	defer m.mu.Unlock()
	for ch := range m.subs {
		select {
		case ch <- c:
		default:
		}
	}
}

func (m *Manager) lockHost(h HostID) func() {
	m.mu.Lock()
	l, ok := m.hostMu[h]
	if !ok {
		l = new(sync.Mutex)
		m.hostMu[h] = l
	}
	m.mu.Unlock()
	l.Lock()
	return l.Unlock
}

func (m *Manager) lockChunk(c ChunkID) func() {
	m.mu.Lock()
	l, ok := m.chunkMu[c]
	if !ok {
		l = new(sync.Mutex)
		m.chunkMu[c] = l
	}
	m.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// ReserveRequest asks for a chunk of pool capacity.
type ReserveRequest struct {
	Name     string
	Size     uint64
	Region   int // -1: the first region that fits (sharable or not, per Sharable)
	Sharable bool
}

// Reserve creates a chunk. Nothing is sent to the device: capacity is
// promised by the ledger's admission check and placed by the device when
// the chunk is first granted.
func (m *Manager) Reserve(ctx context.Context, r ReserveRequest) (Chunk, error) {
	if r.Size == 0 {
		return Chunk{}, fmt.Errorf("reserve: size must be positive: %w", ErrInvalid)
	}
	regions, err := m.cfg.Ledger.Regions(ctx)
	if err != nil {
		return Chunk{}, fmt.Errorf("reserve: %w", err)
	}
	var tried bool
	lastErr := fmt.Errorf("reserve: no region matches: %w", ErrInvalid)
	for _, reg := range regions {
		if r.Region >= 0 && reg.Index != r.Region {
			continue
		}
		if r.Region < 0 && reg.Sharable != r.Sharable {
			continue
		}
		tried = true
		c, err := m.cfg.Ledger.CreateChunk(ctx, Chunk{Name: r.Name, Region: reg.Index, Size: r.Size, Sharable: r.Sharable})
		if err == nil {
			m.log.Info("chunk reserved", "chunk", c.ID, "region", c.Region, "bytes", c.Size, "tag", c.Tag)
			m.publish(Change{Kind: ChangeChunk, Chunk: c.ID, Message: "reserved"})
			return c, nil
		}
		lastErr = fmt.Errorf("reserve: %w", err)
		if !errors.Is(err, ErrNoCapacity) {
			return Chunk{}, lastErr
		}
	}
	if !tried && r.Region >= 0 {
		return Chunk{}, fmt.Errorf("reserve: region %d: %w", r.Region, ErrNotFound)
	}
	return Chunk{}, lastErr
}

// DeleteChunk returns a chunk's capacity to the pool. It fails with
// ErrConflict while any host still holds (or is being given) the chunk.
func (m *Manager) DeleteChunk(ctx context.Context, id ChunkID) error {
	defer m.lockChunk(id)()
	if err := m.cfg.Ledger.DeleteChunk(ctx, id); err != nil {
		return fmt.Errorf("delete chunk %d: %w", id, err)
	}
	m.log.Info("chunk deleted", "chunk", id)
	m.publish(Change{Kind: ChangeChunk, Chunk: id, Message: "deleted"})
	return nil
}

// Grant gives host access to a chunk: the first grant of a chunk adds fresh
// capacity with the chunk's tag; later grants of a sharable chunk enable
// shared access to the same extents. Grant returns when the host has
// answered (granted, or ErrHostRejected), the host timed out (the offer is
// withdrawn; ErrHostTimeout), or the device refused. If ctx ends first the
// grant is left in progress and completes in the background.
func (m *Manager) Grant(ctx context.Context, chunk ChunkID, host HostID) (Grant, error) {
	g, err := m.BeginGrant(ctx, chunk, host)
	if err != nil {
		return g, err
	}
	return m.AwaitGrant(ctx, g.ID)
}

// BeginGrant validates and records the intent to grant, then runs the
// device side in the background; AwaitGrant (or the ledger) tells the
// outcome. The API uses it to answer 202 with a task.
func (m *Manager) BeginGrant(ctx context.Context, chunk ChunkID, host HostID) (Grant, error) {
	box := m.Box()
	h, ok := box.Head(uint16(host))
	if !ok {
		return Grant{}, fmt.Errorf("grant chunk %d: host %d: %w", chunk, host, ErrNotFound)
	}
	if !h.LinkUp {
		return Grant{}, fmt.Errorf("grant chunk %d to host %d: %w", chunk, host, ErrLinkDown)
	}
	g, err := m.cfg.Ledger.BeginGrant(ctx, chunk, host)
	if err != nil {
		return g, fmt.Errorf("grant chunk %d to host %d: %w", chunk, host, err)
	}
	m.publish(Change{Kind: ChangeGrant, Chunk: chunk, Host: host, Grant: &g, Message: "adding"})
	m.spawn(ctx, g.ID, func(ctx context.Context) { m.runAdd(ctx, g, false) })
	return g, nil
}

// AwaitGrant waits until grant id leaves the adding state and returns it.
// A failed grant returns the domain error that explains it.
func (m *Manager) AwaitGrant(ctx context.Context, id GrantID) (Grant, error) {
	return m.await(ctx, id, GrantAdding)
}

// Release takes a grant's capacity back from its host with sanitize on
// release, forcing it if the host does not answer in time.
func (m *Manager) Release(ctx context.Context, id GrantID) (Grant, error) {
	g, err := m.BeginRelease(ctx, id)
	if err != nil {
		return g, err
	}
	return m.await(ctx, g.ID, GrantReleasing)
}

// BeginRelease records the intent to release and runs the device side in
// the background.
func (m *Manager) BeginRelease(ctx context.Context, id GrantID) (Grant, error) {
	g, err := m.cfg.Ledger.BeginRelease(ctx, id)
	if err != nil {
		return g, fmt.Errorf("release grant %d: %w", id, err)
	}
	m.publish(Change{Kind: ChangeGrant, Chunk: g.Chunk, Host: g.Host, Grant: &g, Message: "releasing"})
	m.spawn(ctx, g.ID, func(ctx context.Context) { m.runRelease(ctx, g) })
	return g, nil
}

// track registers in-flight background work on a grant so that Reconcile
// does not drive the same grant twice; it returns false when the grant is
// already being driven.
func (m *Manager) track(id GrantID) (func(), bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inflight[id] {
		return nil, false
	}
	m.inflight[id] = true
	return func() {
		m.mu.Lock()
		delete(m.inflight, id)
		m.mu.Unlock()
	}, true
}

// spawn runs fn in the background for grant id unless it is already in
// flight. The work outlives the caller's request: it must finish or be
// picked up by reconcile, never be abandoned halfway.
func (m *Manager) spawn(ctx context.Context, id GrantID, fn func(context.Context)) {
	done, ok := m.track(id)
	if !ok {
		return
	}
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		defer done()
		fn(context.WithoutCancel(ctx))
	}()
}

func (m *Manager) await(ctx context.Context, id GrantID, from GrantState) (Grant, error) {
	ch, cancel := m.Subscribe(16)
	defer cancel()
	for {
		g, err := m.cfg.Ledger.Grant(ctx, id)
		if err != nil {
			return g, err
		}
		if g.State != from {
			return g, grantErr(g)
		}
		select {
		case <-ctx.Done():
			return g, ctx.Err()
		case <-ch:
		case <-time.After(time.Second): // a missed change never strands a waiter
		}
	}
}

// grantErr turns a terminal grant into the error its caller sees.
func grantErr(g Grant) error {
	switch g.State {
	case GrantFailed, GrantLost:
		// Reasons are stored as text (they must survive restarts) and
		// start with the sentinel's text, as failGrant writes them.
		for _, e := range []error{ErrHostRejected, ErrHostTimeout, ErrLinkDown, ErrDeviceBusy, ErrNoCapacity, ErrDevice} {
			if strings.HasPrefix(g.Reason, e.Error()) {
				return fmt.Errorf("grant %d: %s: %w", g.ID, g.Reason, e)
			}
		}
		return fmt.Errorf("grant %d %s: %s: %w", g.ID, g.State, g.Reason, ErrDevice)
	}
	return nil
}

// runAdd drives one grant from adding to granted or failed. resumed is set
// when reconcile found the add pending on the device after a restart, so
// the command must not be sent again.
func (m *Manager) runAdd(ctx context.Context, g Grant, resumed bool) {
	defer m.lockChunk(g.Chunk)()
	defer m.lockHost(g.Host)()
	c, err := m.cfg.Ledger.Chunk(ctx, g.Chunk)
	if err != nil {
		m.failGrant(ctx, g, fmt.Errorf("%w: chunk vanished: %v", ErrDevice, err))
		return
	}
	events := m.watch(g.Host)
	defer m.unwatch(g.Host, events)

	if !resumed {
		req := fabric.AddRequest{Host: uint16(g.Host), Region: uint8(c.Region), Length: c.Size, Tag: c.Tag, Policy: fabric.AddFree}
		shared, err := m.sharedWith(ctx, g)
		if err != nil {
			m.failGrant(ctx, g, fmt.Errorf("%w: %v", ErrDevice, err))
			return
		}
		if shared {
			req = fabric.AddRequest{Host: uint16(g.Host), Region: uint8(c.Region), Tag: c.Tag, Policy: fabric.AddSharedAccess}
		}
		if err := m.retryBusy(ctx, func() error { return m.cfg.Device.Add(ctx, req) }); err != nil {
			if !errors.Is(err, fabric.ErrTimeout) {
				m.failGrant(ctx, g, deviceErr(err))
				return
			}
			// The command may or may not have reached the device: ask it.
			m.log.Warn("add timed out, checking the device", "grant", g.ID, "err", err)
		}
	}
	deadline := time.NewTimer(m.cfg.AddTimeout)
	defer deadline.Stop()
	// A fresh add waits for the host's answer first; a resumed one asks
	// the device first, because the host may have answered while no
	// Fabric Manager was listening.
	check := resumed
	for {
		if check {
			st, exts, err := m.addStatus(ctx, g.Host, c.Tag)
			if err != nil {
				m.log.Warn("reading add status", "grant", g.ID, "err", err)
			} else if st != addPending {
				if st == addAccepted {
					m.completeGrant(ctx, g, exts)
				} else {
					m.failGrant(ctx, g, fmt.Errorf("%w: accepted none of the offered capacity", ErrHostRejected))
				}
				return
			}
		}
		check = true
		select {
		case ev := <-events:
			// The Add Capacity Response records name exactly the extents
			// the host accepted; only an answer that says nothing about
			// this tag needs the device's lists to interpret.
			if exts := withTag(ev.Extents, c.Tag); ev.Kind == fabric.EventAddResponse && len(exts) > 0 {
				m.completeGrant(ctx, g, exts)
				return
			}
		case <-time.After(250 * time.Millisecond):
		case <-deadline.C:
			m.withdrawAdd(ctx, g, c)
			return
		}
	}
}

func withTag(es []cci.Extent, tag cci.Tag) []cci.Extent {
	var out []cci.Extent
	for _, e := range es {
		if e.Tag == tag && e.Length > 0 {
			out = append(out, e)
		}
	}
	return out
}

type addState int

const (
	addNone addState = iota
	addPending
	addAccepted
)

// addStatus asks the device how far an add of tag to host got: still
// pending, accepted (with exactly which extents), or nothing.
func (m *Manager) addStatus(ctx context.Context, host HostID, tag cci.Tag) (addState, []cci.Extent, error) {
	tags, err := m.cfg.Device.Tags(ctx)
	if err != nil {
		return addNone, nil, err
	}
	if t, ok := tags.Find(tag); ok && t.HasPending(uint16(host)) {
		return addPending, nil, nil
	}
	list, err := m.cfg.Device.Extents(ctx, uint16(host))
	if err != nil {
		return addNone, nil, err
	}
	var exts []cci.Extent
	for _, e := range list.Extents {
		if e.Tag == tag {
			exts = append(exts, e)
		}
	}
	if len(exts) > 0 {
		return addAccepted, exts, nil
	}
	return addNone, nil, nil
}

// sharedWith reports whether another host already holds g's chunk, so the
// add must enable shared access to its extents rather than place new ones.
// The chunk lock is held, so no other flow of this chunk is half done.
func (m *Manager) sharedWith(ctx context.Context, g Grant) (bool, error) {
	others, err := m.cfg.Ledger.Grants(ctx, GrantFilter{Chunk: g.Chunk, Active: true})
	if err != nil {
		return false, err
	}
	for _, o := range others {
		if o.ID != g.ID && (o.State == GrantGranted || o.State == GrantReleasing) {
			return true, nil
		}
	}
	return false, nil
}

// withdrawAdd forces back an offer the host never answered. Whatever the
// host may have accepted in the meantime is removed too, so the outcome is
// all-or-nothing: the grant fails and the capacity returns to the device.
func (m *Manager) withdrawAdd(ctx context.Context, g Grant, c Chunk) {
	req := fabric.ReleaseRequest{Host: uint16(g.Host), Policy: fabric.ReleaseTagBased, Forced: true, Sanitize: true, Length: c.Size, Tag: c.Tag}
	err := m.retryBusy(ctx, func() error { return m.cfg.Device.Release(ctx, req) })
	st, _, serr := m.addStatus(ctx, g.Host, c.Tag)
	if serr == nil && st == addNone {
		m.failGrant(ctx, g, fmt.Errorf("%w: no answer within %s", ErrHostTimeout, m.cfg.AddTimeout))
		return
	}
	// The device still shows the tag: leave the grant adding; reconcile
	// finishes it once the device answers again.
	m.log.Error("could not withdraw an unanswered add", "grant", g.ID, "err", errors.Join(err, serr))
	m.requestReconcile()
}

func (m *Manager) completeGrant(ctx context.Context, g Grant, exts []cci.Extent) {
	ng, err := m.cfg.Ledger.CompleteGrant(ctx, g.ID, exts)
	if err != nil {
		m.log.Error("recording granted capacity", "grant", g.ID, "err", err)
		return
	}
	m.log.Info("capacity granted", "grant", g.ID, "chunk", g.Chunk, "host", g.Host, "bytes", ng.Size(), "extents", len(exts))
	m.publish(Change{Kind: ChangeGrant, Chunk: g.Chunk, Host: g.Host, Grant: &ng, Message: "granted"})
}

func (m *Manager) failGrant(ctx context.Context, g Grant, why error) {
	ng, err := m.cfg.Ledger.FailGrant(ctx, g.ID, why.Error())
	if err != nil {
		m.log.Error("recording failed grant", "grant", g.ID, "err", err)
		return
	}
	m.log.Warn("grant failed", "grant", g.ID, "chunk", g.Chunk, "host", g.Host, "reason", why)
	m.publish(Change{Kind: ChangeGrant, Chunk: g.Chunk, Host: g.Host, Grant: &ng, Message: "failed"})
}

// runRelease drives one grant from releasing to released, forcing the
// release when the host does not answer in time.
func (m *Manager) runRelease(ctx context.Context, g Grant) {
	defer m.lockChunk(g.Chunk)()
	defer m.lockHost(g.Host)()
	c, err := m.cfg.Ledger.Chunk(ctx, g.Chunk)
	if err != nil {
		m.log.Error("release: chunk lookup", "grant", g.ID, "err", err)
		return
	}
	events := m.watch(g.Host)
	defer m.unwatch(g.Host, events)
	forced := false
	send := func() error {
		req := fabric.ReleaseRequest{Host: uint16(g.Host), Policy: fabric.ReleaseTagBased, Forced: forced,
			Sanitize: true, Length: g.Size(), Tag: c.Tag}
		return m.retryBusy(ctx, func() error { return m.cfg.Device.Release(ctx, req) })
	}
	if err := send(); err != nil && !errors.Is(err, cci.InvalidInput) && !errors.Is(err, fabric.ErrTimeout) {
		m.log.Warn("release refused by device", "grant", g.ID, "err", err)
	}
	deadline := time.NewTimer(m.cfg.ReleaseTimeout)
	defer deadline.Stop()
	for {
		held, err := m.holds(ctx, g.Host, c.Tag)
		if err == nil && !held {
			ng, err := m.cfg.Ledger.CompleteRelease(ctx, g.ID)
			if err != nil {
				m.log.Error("recording release", "grant", g.ID, "err", err)
				return
			}
			m.log.Info("capacity released", "grant", g.ID, "chunk", g.Chunk, "host", g.Host, "forced", forced)
			m.publish(Change{Kind: ChangeGrant, Chunk: g.Chunk, Host: g.Host, Grant: &ng, Message: "released"})
			return
		}
		select {
		case <-events:
		case <-time.After(250 * time.Millisecond):
		case <-deadline.C:
			if forced {
				m.log.Error("forced release did not take effect; will reconcile", "grant", g.ID)
				m.requestReconcile()
				return
			}
			forced = true
			m.log.Warn("host did not release in time, forcing", "grant", g.ID, "host", g.Host)
			if err := send(); err != nil {
				m.log.Warn("forced release", "grant", g.ID, "err", err)
			}
			deadline.Reset(m.cfg.ReleaseTimeout)
		}
	}
}

// holds reports whether host still holds (or is still being offered)
// capacity tagged tag.
func (m *Manager) holds(ctx context.Context, host HostID, tag cci.Tag) (bool, error) {
	st, _, err := m.addStatus(ctx, host, tag)
	return st != addNone, err
}

// retryBusy repeats fn while the device answers Busy or Retry Required.
func (m *Manager) retryBusy(ctx context.Context, fn func() error) error {
	backoff := 2 * time.Millisecond
	for i := 0; ; i++ {
		err := fn()
		if err == nil || i >= m.cfg.BusyRetries || !(errors.Is(err, cci.Busy) || errors.Is(err, cci.RetryRequired)) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		if backoff < 200*time.Millisecond {
			backoff *= 2
		}
	}
}

// deviceErr maps a device or transport failure to a domain error.
func deviceErr(err error) error {
	switch {
	case errors.Is(err, cci.Busy), errors.Is(err, cci.RetryRequired):
		return fmt.Errorf("%w: %v", ErrDeviceBusy, err)
	case errors.Is(err, cci.ResourcesExhausted):
		return fmt.Errorf("%w: %v", ErrNoCapacity, err)
	}
	return fmt.Errorf("%w: %v", ErrDevice, err)
}

func (m *Manager) watch(h HostID) chan fabric.Event {
	ch := make(chan fabric.Event, 8)
	m.mu.Lock()
	if m.waiters[h] == nil {
		m.waiters[h] = make(map[chan fabric.Event]struct{})
	}
	m.waiters[h][ch] = struct{}{}
	m.mu.Unlock()
	return ch
}

func (m *Manager) unwatch(h HostID, ch chan fabric.Event) {
	m.mu.Lock()
	delete(m.waiters[h], ch)
	m.mu.Unlock()
}

func (m *Manager) requestReconcile() {
	select {
	case m.reconc <- struct{}{}:
	default:
	}
}

// eventLoop follows the device: host answers wake the flows waiting on
// that host, link changes update the model, and resets or lost events
// trigger a reconcile.
func (m *Manager) eventLoop(ctx context.Context) {
	events := m.cfg.Device.Events()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.reconc:
			if _, err := m.Reconcile(ctx); err != nil {
				m.log.Error("reconcile", "err", err)
			}
		case ev, ok := <-events:
			if !ok {
				return
			}
			m.handleEvent(ctx, ev)
		}
	}
}

func (m *Manager) handleEvent(ctx context.Context, ev fabric.Event) {
	switch ev.Kind {
	case fabric.EventAddResponse, fabric.EventCapacityReleased:
		m.mu.Lock()
		for ch := range m.waiters[HostID(ev.Host)] {
			select {
			case ch <- ev:
			default:
			}
		}
		m.mu.Unlock()
	case fabric.EventLinkChange:
		m.mu.Lock()
		// Copy on write: Box() hands out the slice to readers.
		heads := append([]fabric.Head(nil), m.box.Heads...)
		for i := range heads {
			if heads[i].LD == ev.Host {
				heads[i].LinkUp = ev.LinkUp
			}
		}
		m.box.Heads = heads
		box := m.box
		m.mu.Unlock()
		m.log.Info("host link changed", "host", ev.Host, "up", ev.LinkUp)
		if err := m.adoptBox(ctx, box); err != nil {
			m.log.Error("recording link change", "err", err)
		}
		m.publish(Change{Kind: ChangeHost, Host: HostID(ev.Host), Message: linkWord(ev.LinkUp)})
	case fabric.EventDeviceReset, fabric.EventOverflow:
		m.log.Warn("device state may have changed behind our back; reconciling", "event", ev.Kind)
		m.publish(Change{Kind: ChangeDevice, Message: ev.Kind.String()})
		box, err := m.cfg.Device.Discover(ctx)
		if err == nil {
			err = m.adoptBox(ctx, box)
		}
		if err != nil {
			m.log.Error("rediscover after reset", "err", err)
		}
		if _, err := m.Reconcile(ctx); err != nil {
			m.log.Error("reconcile", "err", err)
		}
	}
}

func linkWord(up bool) string {
	if up {
		return "link up"
	}
	return "link down"
}
