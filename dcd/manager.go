package dcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	// Guard, if set, is asked before the ledger records that a grant's
	// capacity leaves its host, so that other users of the capacity
	// (exports to remote racks) let go of it in the same step.
	Guard CapacityGuard
	// InUse, if set, reports whether host says a program still maps the
	// memory of tag (host/report: its agent's fresh report). A release
	// the host has not answered when ReleaseTimeout passes is then not
	// forced: it waits for the host, announced once as a ChangeGrant
	// with Message ReleaseWaitsMessage, until the host answers, its
	// report goes stale or an administrator forces it (ForceRelease).
	InUse func(host HostID, tag cci.Tag) bool
}

// ReleaseWaitsMessage is the Change.Message of a release that waits for a
// host whose agent says the memory is in use.
const ReleaseWaitsMessage = "release waits: the host says the memory is in use"

// CapacityGuard is what else reaches a chunk's capacity besides the hosts
// that hold it (rdma.Service: exports to remote racks). The Manager calls
// Leaving when grant g's capacity is about to leave its host: before it
// records a release it starts (gone false: the device still holds the
// capacity and sanitizes it on release), and before it records a grant
// lost because the device no longer holds it (gone true: the host gave it
// back on its own, or the device dropped it). Leaving must call record
// exactly once, and make sure that from then on nothing reaches the
// capacity through the guard unless another granted grant of the chunk
// keeps it on the device; nothing new may start using the chunk between
// its decision and record's return (one step per chunk). An error from
// Leaving, or from record passed back by it, stops the transition.
type CapacityGuard interface {
	Leaving(ctx context.Context, g Grant, gone bool, record func() error) error
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

	mu  sync.Mutex
	box fabric.Box
	// regions is the ledger's regions as of the last inventory this
	// Manager recorded (only that changes them), so a reservation does
	// not read them again; nil until then.
	regions     []Region
	hostMu      map[HostID]*sync.Mutex
	chunkMu     map[ChunkID]*sync.Mutex
	waiters     map[HostID]map[chan fabric.Event]struct{}
	subs        map[chan Change]struct{}
	flights     map[GrantID]*flight
	flows       map[hostTag]*flight // the same flights by host and tag
	rechecks    map[hostTag]bool    // (host, tag) pairs an event named, to settle
	released    map[hostTag]bool    // pairs a release flow recorded released, until their event comes
	startReport ReconcileReport
	reconcileMu sync.Mutex
	resets      atomic.Uint64 // device resets seen, so flows can tell why an offer vanished
	reconc      chan struct{}
	// admit is held shared by BeginGrant from its fence check until its
	// flow is registered, so Fence (which takes it exclusively to raise a
	// fence) knows every grant that got past the check. fenced is under mu.
	admit  sync.RWMutex
	fenced map[HostID]string // host → why its grants are refused (fence.go)
	// forceNow is the releasing grants an administrator asked to force
	// (ForceRelease); their flow forces at its next step. Under mu.
	forceNow map[GrantID]bool

	bg sync.WaitGroup

	// hookAfterSnapshot, if set (tests only), runs between Reconcile's
	// device and ledger reads, where a flow finishing would make the
	// snapshot stale.
	hookAfterSnapshot func()
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
		flights:  make(map[GrantID]*flight),
		flows:    make(map[hostTag]*flight),
		rechecks: make(map[hostTag]bool),
		released: make(map[hostTag]bool),
		reconc:   make(chan struct{}, 1),
		fenced:   make(map[HostID]string),
		forceNow: make(map[GrantID]bool),
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
	m.bg.Add(2)
	go func() {
		defer m.bg.Done()
		m.eventLoop(ctx)
	}()
	go func() {
		defer m.bg.Done()
		m.reconcileLoop(ctx)
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
		n := len(m.flights)
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
	regions, err := m.cfg.Ledger.Regions(ctx)
	if err != nil {
		return fmt.Errorf("dcd: read the recorded regions: %w", err)
	}
	m.mu.Lock()
	m.box, m.regions = box, regions
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

// tryLockFlow takes chunk c's and host h's locks (as a flow holds them)
// if both are free now, and returns their unlock.
func (m *Manager) tryLockFlow(c ChunkID, h HostID) (unlock func(), ok bool) {
	m.mu.Lock()
	cl, ok := m.chunkMu[c]
	if !ok {
		cl = new(sync.Mutex)
		m.chunkMu[c] = cl
	}
	hl, ok := m.hostMu[h]
	if !ok {
		hl = new(sync.Mutex)
		m.hostMu[h] = hl
	}
	m.mu.Unlock()
	if !cl.TryLock() {
		return nil, false
	}
	if !hl.TryLock() {
		cl.Unlock()
		return nil, false
	}
	return func() { hl.Unlock(); cl.Unlock() }, true
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
	m.mu.Lock()
	regions := m.regions
	m.mu.Unlock()
	if regions == nil {
		var err error
		if regions, err = m.cfg.Ledger.Regions(ctx); err != nil {
			return Chunk{}, fmt.Errorf("reserve: %w", err)
		}
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
		if err := regionRefusal(reg); err != nil {
			lastErr = err
			continue
		}
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
	g, f, err := m.beginGrant(ctx, chunk, host)
	if err != nil {
		return g, err
	}
	if f != nil {
		// The flow's own outcome: it has usually ended already (the
		// intent's durability finished it), and then it is no longer
		// registered for AwaitGrant to find.
		return m.awaitFlight(ctx, g.ID, GrantAdding, f)
	}
	return m.AwaitGrant(ctx, g.ID)
}

// BeginGrant validates and records the intent to grant, then runs the
// device side in the background; AwaitGrant (or the ledger) tells the
// outcome. The API uses it to answer 202 with a task.
func (m *Manager) BeginGrant(ctx context.Context, chunk ChunkID, host HostID) (Grant, error) {
	g, _, err := m.beginGrant(ctx, chunk, host)
	return g, err
}

// beginGrant is BeginGrant; it also returns the grant's flow, if one was
// started.
func (m *Manager) beginGrant(ctx context.Context, chunk ChunkID, host HostID) (Grant, *flight, error) {
	box := m.Box()
	h, ok := box.Head(uint16(host))
	if !ok {
		return Grant{}, nil, fmt.Errorf("grant chunk %d: host %d: %w", chunk, host, ErrNotFound)
	}
	m.admit.RLock()
	defer m.admit.RUnlock()
	if why := m.fenceReason(host); why != "" {
		return Grant{}, nil, fmt.Errorf("grant chunk %d to host %d: %s: %w", chunk, host, why, ErrFenced)
	}
	if !h.LinkUp {
		return Grant{}, nil, fmt.Errorf("grant chunk %d to host %d: %w", chunk, host, ErrLinkDown)
	}
	// The add goes to the device as soon as the admission checks pass,
	// while the intent's commit is made durable: tags make the device's
	// state self-describing, so a crash in that window is recovered by
	// reconcile (it adopts what a host accepted under a chunk's tag and
	// withdraws what is still only offered). This takes the fsync off the
	// grant's critical path; the flow records nothing until the commit
	// is known, and tells nobody until the intent is durable. With a
	// StagedGranter the host's answer is recorded while the intent's
	// fsync runs, which takes that transaction off the path too.
	ic := &intentCommit{committed: make(chan error, 1)}
	started := false
	var flow *flight
	checked := func(in GrantIntent) {
		started = true
		g := in.Grant
		f, ok := m.addFlight(g, in.Chunk.Tag, flowAdd)
		if !ok {
			return
		}
		flow = f
		ic.tell = f.tell
		// Registered before the add goes out, so reconcile leaves the
		// offer to this flow (settle's flowOn).
		early := m.startAdd(g, in.Chunk, in.Others)
		m.runFlightDone(ctx, g, in.Chunk.Tag, f, func(ctx context.Context, done func(Grant)) {
			m.runAdd(ctx, g, in.Chunk, in.Others, false, ic, early, done)
		})
	}
	var in GrantIntent
	var err error
	if sg, ok := m.cfg.Ledger.(StagedGranter); ok {
		var durable func() error
		in, durable, err = sg.BeginGrantStaged(ctx, chunk, host, checked)
		if started {
			ic.committed <- err
		}
		if err == nil {
			err = durable()
		}
	} else {
		in, err = m.cfg.Ledger.BeginGrant(ctx, chunk, host, checked)
		if started {
			ic.committed <- err
		}
	}
	g := in.Grant
	if err == nil {
		// Before the flow may announce the outcome.
		m.publish(Change{Kind: ChangeGrant, Chunk: chunk, Host: host, Grant: &g, Message: "adding"})
	}
	if started {
		// A flow parked on the intent's durability continues here, in
		// this goroutine: waking it to do so cost a goroutine hand-off
		// (on this two-core box ~0.08 ms, a tenth of the grant) before a
		// second one back to the caller waiting for it. Its answer to
		// the caller runs here; the rest of a flow that answered runs
		// aside (thenAside), so the caller returns at once.
		ic.report(err)
	}
	if err != nil {
		return Grant{}, nil, fmt.Errorf("grant chunk %d to host %d: %w", chunk, host, err)
	}
	return g, flow, nil
}

// intentCommit tells a grant's flow how its intent's write went: first
// whether it committed (the flow may record an outcome after it), then
// whether it is durable (the flow may tell anyone).
type intentCommit struct {
	committed chan error
	// tell answers the grant's caller before the flow ends (flight.tell);
	// nil when nobody waits on a flight.
	tell func(Grant)

	mu     sync.Mutex
	known  bool         // durability is known: err says how it went
	err    error        // why the intent is not durable
	parked []parkedRest // the flow's rests, waiting for durability, in order
}

// parkedRest is a rest of a grant's flow waiting for its intent's
// durability. An aside rest is one nobody waits for (the caller has been
// told already): the reporter runs it in a goroutine of its own, after
// the others, instead of making the caller wait for it.
type parkedRest struct {
	fn    func(error)
	aside bool
}

// report says whether the intent is durable. A flow parked waiting for it
// (then) continues in the reporting goroutine, unless the intent is not
// durable: undoing the add talks to the device, which the reporter (the
// grant's caller, about to be told of the failure) must not wait for.
func (ic *intentCommit) report(err error) {
	ic.mu.Lock()
	ic.known, ic.err = true, err
	rests := ic.parked
	ic.parked = nil
	ic.mu.Unlock()
	if err != nil {
		go func() {
			for _, rest := range rests {
				rest.fn(err)
			}
		}()
		return
	}
	var aside []func(error)
	for _, rest := range rests {
		if rest.aside {
			aside = append(aside, rest.fn)
			continue
		}
		rest.fn(nil)
	}
	if len(aside) > 0 {
		go func() {
			for _, fn := range aside {
				fn(nil)
			}
		}()
	}
}

// then runs rest with the intent's durability: now if it is known, else
// in the goroutine that reports it. It reports whether rest ran now.
func (ic *intentCommit) then(rest func(error)) (now bool) { return ic.park(parkedRest{fn: rest}) }

// thenAside is then for a rest nobody waits for (parkedRest).
func (ic *intentCommit) thenAside(rest func(error)) { ic.park(parkedRest{fn: rest, aside: true}) }

// park is then and thenAside.
func (ic *intentCommit) park(rest parkedRest) (now bool) {
	ic.mu.Lock()
	if !ic.known {
		ic.parked = append(ic.parked, rest)
		ic.mu.Unlock()
		return false
	}
	err := ic.err
	ic.mu.Unlock()
	rest.fn(err)
	return true
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
	return m.beginRelease(ctx, id, false, "")
}

// beginRelease is BeginRelease; forced skips asking the host (the release
// is forced from the first command) and reason, when the ledger can keep
// one (ReasonedReleaser), records why the release was started.
func (m *Manager) beginRelease(ctx context.Context, id GrantID, forced bool, reason string) (Grant, error) {
	g, c, err := m.grantAndChunk(ctx, id)
	if err != nil {
		return g, fmt.Errorf("release grant %d: %w", id, err)
	}
	// Under the chunk's lock from the record to the flow's start, so a
	// reconcile never finds the grant releasing with no flow driving it.
	unlock := m.lockChunk(g.Chunk)
	defer unlock()
	record := func() error {
		var err error
		if rr, ok := m.cfg.Ledger.(ReasonedReleaser); ok && reason != "" {
			g, err = rr.BeginReleaseReason(ctx, id, reason)
		} else {
			g, err = m.cfg.Ledger.BeginRelease(ctx, id)
		}
		return err
	}
	if m.cfg.Guard != nil {
		err = m.cfg.Guard.Leaving(ctx, g, false, record)
	} else {
		err = record()
	}
	if err != nil {
		return g, fmt.Errorf("release grant %d: %w", id, err)
	}
	m.publish(Change{Kind: ChangeGrant, Chunk: g.Chunk, Host: g.Host, Grant: &g, Message: "releasing"})
	m.spawnFlow(ctx, g, c.Tag, flowRelease, func(ctx context.Context) Grant { return m.runRelease(ctx, g, c, false, forced) })
	return g, nil
}

// grantAndChunk reads grant id and its chunk, in one read transaction when
// the ledger can (GrantChunkReader).
func (m *Manager) grantAndChunk(ctx context.Context, id GrantID) (Grant, Chunk, error) {
	if r, ok := m.cfg.Ledger.(GrantChunkReader); ok {
		return r.GrantAndChunk(ctx, id)
	}
	g, err := m.cfg.Ledger.Grant(ctx, id)
	if err != nil {
		return g, Chunk{}, err
	}
	c, err := m.cfg.Ledger.Chunk(ctx, g.Chunk)
	return g, c, err
}

// ForceRelease is an administrator's forced release of grant id: a
// granted grant is released forced from the first command (the host is
// not asked), and a release already waiting for its host is forced at
// once, whatever the host's agent says about its memory being in use.
// The host loses the memory under its programs: only administrators and
// operators may ask for it (the API's rule), never a host account.
func (m *Manager) ForceRelease(ctx context.Context, id GrantID) (Grant, error) {
	g, err := m.cfg.Ledger.Grant(ctx, id)
	if err != nil {
		return g, fmt.Errorf("force release of grant %d: %w", id, err)
	}
	if g.State == GrantReleasing {
		m.mu.Lock()
		_, running := m.flights[id]
		if running {
			m.forceNow[id] = true
		}
		m.mu.Unlock()
		if running {
			return g, nil
		}
		// No flow drives it here (it is being reconciled): start one.
	}
	return m.beginRelease(ctx, id, true, "forced by an administrator")
}

// takeForce reports (once) whether an administrator asked to force id.
func (m *Manager) takeForce(id GrantID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.forceNow[id]
	delete(m.forceNow, id)
	return f
}

// flight is a grant or release flow running in this process. Waiters in
// this process take its outcome from here instead of polling the ledger.
type flight struct {
	kind  flowKind
	done  chan struct{}
	final Grant // the grant as the flow left it; valid once done is closed
	// told is closed when the flow answered its caller before it ended
	// (a grant whose outcome is queued, recordCompleteQueued); answer is
	// valid once it is.
	told   chan struct{}
	answer Grant
}

// tell answers the flow's waiters with g before the flow ends.
func (f *flight) tell(g Grant) {
	f.answer = g
	close(f.told)
}

// flowKind says what a flow drives a grant towards.
type flowKind int

const (
	flowAdd flowKind = iota
	flowRelease
)

// spawnFlow runs fn in the background for grant g, whose chunk has tag,
// unless a flow for it is already running (reconcile must not drive a
// grant twice). The work outlives the caller's request: it must finish or
// be picked up by reconcile, never be abandoned halfway.
func (m *Manager) spawnFlow(ctx context.Context, g Grant, tag cci.Tag, kind flowKind, fn func(context.Context) Grant) {
	if f, ok := m.addFlight(g, tag, kind); ok {
		m.runFlight(ctx, g, tag, f, fn)
	}
}

// addFlight registers a flow for grant g, or reports that one runs.
// runFlight must follow a registration.
func (m *Manager) addFlight(g Grant, tag cci.Tag, kind flowKind) (*flight, bool) {
	key := hostTag{g.Host, tag}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.flights[g.ID]; ok {
		return nil, false
	}
	f := &flight{kind: kind, done: make(chan struct{}), told: make(chan struct{})}
	m.flights[g.ID] = f
	m.flows[key] = f
	if kind == flowAdd {
		delete(m.released, key) // a release event from now on is news
	}
	return f, true
}

// runFlight runs the registered flow f in the background.
func (m *Manager) runFlight(ctx context.Context, g Grant, tag cci.Tag, f *flight, fn func(context.Context) Grant) {
	m.runFlightDone(ctx, g, tag, f, func(ctx context.Context, done func(Grant)) { done(fn(ctx)) })
}

// runFlightDone is runFlight for a flow that ends when it calls done with
// the grant as it left it (once), which may be after fn returned and from
// another goroutine (runAdd's rest, which the intent's durability runs).
func (m *Manager) runFlightDone(ctx context.Context, g Grant, tag cci.Tag, f *flight, fn func(ctx context.Context, done func(Grant))) {
	key := hostTag{g.Host, tag}
	m.bg.Add(1)
	done := func(final Grant) {
		defer m.bg.Done()
		f.final = final
		m.mu.Lock()
		delete(m.flights, g.ID)
		delete(m.forceNow, g.ID)
		if m.flows[key] == f {
			delete(m.flows, key)
		}
		m.mu.Unlock()
		close(f.done)
	}
	go fn(context.WithoutCancel(ctx), done)
}

// flowOn reports whether a flow of this process drives host's grant of
// the chunk tagged tag.
func (m *Manager) flowOn(host HostID, tag cci.Tag) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.flows[hostTag{host, tag}] != nil
}

// await returns grant id once it has left state from: straight from the
// flow when it runs in this process, otherwise by following the ledger.
func (m *Manager) await(ctx context.Context, id GrantID, from GrantState) (Grant, error) {
	m.mu.Lock()
	f := m.flights[id]
	m.mu.Unlock()
	if f != nil {
		return m.awaitFlight(ctx, id, from, f)
	}
	return m.awaitLedger(ctx, id, from)
}

// awaitFlight is await for grant id driven by flow f of this process.
func (m *Manager) awaitFlight(ctx context.Context, id GrantID, from GrantState, f *flight) (Grant, error) {
	select {
	case <-ctx.Done():
		return Grant{ID: id, State: from}, ctx.Err()
	case <-f.done:
	case <-f.told:
	}
	select {
	case <-f.told:
		// What the flow told is what the device did, even if recording it
		// failed afterwards (reconcile records it then).
		return f.answer, grantErr(f.answer)
	default:
	}
	if f.final.State != from {
		return f.final, grantErr(f.final)
	}
	// The flow gave up without an outcome (reconcile will finish it):
	// follow the ledger like any other waiter.
	return m.awaitLedger(ctx, id, from)
}

// awaitLedger is await by following the ledger.
func (m *Manager) awaitLedger(ctx context.Context, id GrantID, from GrantState) (Grant, error) {
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
		for _, e := range []error{ErrHostRejected, ErrHostTimeout, ErrLinkDown, ErrDeviceBusy, ErrNoCapacity, ErrFenced, ErrDeviceUnreachable, ErrDevice} {
			if strings.HasPrefix(g.Reason, e.Error()) {
				return fmt.Errorf("grant %d: %s: %w", g.ID, g.Reason, e)
			}
		}
		return fmt.Errorf("grant %d %s: %s: %w", g.ID, g.State, g.Reason, ErrDevice)
	}
	return nil
}

// runAdd drives one grant from adding to granted or failed and returns it
// as it left it. others says whether other hosts had active grants of the
// chunk when the intent was written; resumed is set when reconcile found
// the add pending on the device after a restart, so the command must not
// be sent again. intent, when not nil, tells how the intent's write went,
// which may still be in progress when runAdd starts. runAdd ends by
// calling done with the grant as it left it: with an intent, possibly
// after it returned, in the goroutine that reports the intent durable.
func (m *Manager) runAdd(ctx context.Context, g Grant, c Chunk, others, resumed bool, intent *intentCommit, early *earlyAdd, done func(Grant)) {
	// The locks are held until the outcome is in the ledger and told: the
	// next grant of this chunk must see whether this one placed the
	// capacity. An early add took them before it was sent.
	var unlock func()
	if early != nil {
		unlock = early.unlock
	} else {
		unlockChunk, unlockHost := m.lockChunk(g.Chunk), m.lockHost(g.Host)
		unlock = func() { unlockHost(); unlockChunk() }
	}
	finish := func(out Grant, announce func()) {
		announce()
		// Ended before the locks go: whoever takes them next (a release
		// asked for as soon as the caller was told, waiting for the chunk
		// lock) must find no flight of this grant, or it would start no
		// flow of its own (one a grant), leave the grant releasing with
		// nothing driving it, and answer its caller with this add's
		// answer.
		done(out)
		unlock()
	}
	accepted, why, ok := m.runAddDevice(ctx, g, c, others, resumed, early)
	if intent != nil {
		if err := <-intent.committed; err != nil {
			// The ledger never took the intent: undo whatever the device
			// did, so nothing is granted that the ledger does not know.
			m.log.Error("grant intent not recorded; withdrawing the add", "chunk", c.ID, "host", g.Host, "err", err)
			req := fabric.ReleaseRequest{Host: uint16(g.Host), Policy: fabric.ReleaseTagBased, Forced: true, Sanitize: true, Length: c.Size, Tag: c.Tag}
			if rerr := m.retryBusy(ctx, func() error { return m.cfg.Device.Release(ctx, req) }); rerr != nil {
				m.log.Error("withdrawing an unrecorded add", "err", rerr)
				m.requestReconcile()
			}
			g.State, g.Reason = GrantFailed, fmt.Sprintf("%v: the intent was not recorded: %v", ErrDevice, err)
			finish(g, func() {})
			return
		}
	}
	out, announce := g, func() {}
	told := false // the caller is told from the queued outcome
	switch {
	case !ok:
	case why != nil:
		out, announce = m.recordFail(ctx, g, why)
	default:
		if qc, ok := m.cfg.Ledger.(QueuedCompleter); ok && intent != nil && intent.tell != nil {
			out, announce, told = m.recordCompleteQueued(ctx, qc, g, accepted, intent)
			break
		}
		out, announce = m.recordComplete(ctx, g, accepted)
	}
	if intent == nil {
		finish(out, announce)
		return
	}
	rest := func(err error) {
		if err != nil {
			finish(m.undurableIntent(ctx, g, c, out, err), func() {})
			return
		}
		finish(out, announce)
	}
	if told {
		// The caller has its answer once the intent is durable; the
		// flow's end (the announcement, the locks, the flight) must not
		// keep it waiting in the goroutine that reports durability.
		intent.thenAside(rest)
		return
	}
	intent.then(rest)
}

// undurableIntent undoes a grant whose intent committed but could not be
// made durable (the disk failed its fsync), after its outcome out was
// recorded: nothing may stay granted that a power loss could erase from
// the ledger, so the add is withdrawn and the grant marked lost.
func (m *Manager) undurableIntent(ctx context.Context, g Grant, c Chunk, out Grant, err error) Grant {
	reason := fmt.Sprintf("%v: the intent was not made durable: %v", ErrDevice, err)
	m.log.Error("grant intent not durable; withdrawing the add", "chunk", c.ID, "host", g.Host, "err", err)
	if out.State != GrantFailed {
		req := fabric.ReleaseRequest{Host: uint16(g.Host), Policy: fabric.ReleaseTagBased, Forced: true, Sanitize: true, Length: c.Size, Tag: c.Tag}
		if rerr := m.retryBusy(ctx, func() error { return m.cfg.Device.Release(ctx, req) }); rerr != nil {
			m.log.Error("withdrawing an add whose intent is not durable", "err", rerr)
			m.requestReconcile()
		}
		if lost, lerr := m.cfg.Ledger.MarkLost(ctx, g.ID, reason); lerr == nil {
			m.publish(Change{Kind: ChangeGrant, Chunk: g.Chunk, Host: g.Host, Grant: &lost, Message: "lost"})
			return lost
		}
	}
	out.State, out.Reason = GrantFailed, reason
	return out
}

// runAddDevice does the device side of an add: it returns exactly what
// the host accepted, or why nothing was granted. ok is false when the
// outcome is unknown (the device could not be asked) and is left to
// reconcile.
func (m *Manager) runAddDevice(ctx context.Context, g Grant, c Chunk, others, resumed bool, early *earlyAdd) (accepted []cci.Extent, why error, ok bool) {
	var events chan fabric.Event
	var resets uint64
	if early != nil {
		events, resets = early.events, early.resets
	} else {
		events, resets = m.watch(g.Host), m.resets.Load()
	}
	defer m.unwatch(g.Host, events)

	if !resumed {
		// Under the chunk lock no other flow of this chunk is half done,
		// so the ledger says whether its tag already lives on the device.
		// Only a chunk that had other grants at intent time can be shared
		// (an early add is never shared: it had none).
		shared := false
		if others && early == nil {
			var err error
			if shared, err = m.sharedWith(ctx, g); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrDevice, err), true
			}
		}
		var err error
		if early != nil {
			err = early.answer(ctx, m, g, c)
		} else {
			err = m.sendAdd(ctx, g, c, shared)
		}
		if !shared && (errors.Is(err, cci.InvalidInput) || errors.Is(err, cci.InvalidExtentList)) {
			// A later grant of the same chunk may have won the lock and
			// placed the capacity first: share it instead. The device
			// refuses the tag again as Invalid Input (a free-policy add)
			// and the ledger's placement, already allocated, as Invalid
			// Extent List (a prescriptive one).
			if now, serr := m.sharedWith(ctx, g); serr == nil && now {
				err = m.sendAdd(ctx, g, c, true)
			}
		}
		if err != nil {
			if !errors.Is(err, fabric.ErrTimeout) {
				return nil, deviceErr(err), true
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
	// A resumed flow may have missed the host's answer while no Fabric
	// Manager was listening; a fresh one hears it as an event.
	answered := resumed
	for {
		if check {
			st, exts, err := m.addStatus(ctx, g.Host, c.Tag)
			if err != nil {
				m.log.Warn("reading add status", "grant", g.ID, "err", err)
			} else if st != addPending {
				if st == addAccepted {
					return exts, nil, true
				}
				if !answered && m.resets.Load() != resets {
					return nil, fmt.Errorf("%w: the device reset and dropped the offer", ErrDevice), true
				}
				if !answered {
					// Only the host's answer takes an offer off the device
					// without a reset; devices that log no Add Capacity
					// Response when the host accepted nothing are common.
					return nil, fmt.Errorf("%w: accepted none of the offered capacity (the device reported no answer record)", ErrHostRejected), true
				}
				return nil, fmt.Errorf("%w: accepted none of the offered capacity", ErrHostRejected), true
			}
		}
		check = true
		select {
		case ev := <-events:
			answered = answered || ev.Kind == fabric.EventAddResponse
			// The Add Capacity Response records name exactly the extents
			// the host accepted; only an answer that says nothing about
			// this tag needs the device's lists to interpret.
			if exts := withTag(ev.Extents, c.Tag); ev.Kind == fabric.EventAddResponse && len(exts) > 0 {
				return exts, nil, true
			}
		case <-time.After(250 * time.Millisecond):
		case <-deadline.C:
			why, ok := m.withdrawAdd(ctx, g, c)
			return nil, why, ok
		}
	}
}

// sendAdd sends the Initiate Dynamic Capacity Add for g: fresh capacity
// with the chunk's tag, or shared access to the capacity the tag names.
func (m *Manager) sendAdd(ctx context.Context, g Grant, c Chunk, shared bool) error {
	req := addRequest(g, c, shared)
	return m.retryBusy(ctx, func() error { return m.cfg.Device.Add(ctx, req) })
}

// addRequest is the Initiate Dynamic Capacity Add that gives g its chunk.
func addRequest(g Grant, c Chunk, shared bool) fabric.AddRequest {
	if shared {
		return fabric.AddRequest{Host: uint16(g.Host), Region: uint8(c.Region), Tag: c.Tag, Policy: fabric.AddSharedAccess}
	}
	req := fabric.AddRequest{Host: uint16(g.Host), Region: uint8(c.Region), Length: c.Size, Tag: c.Tag, Policy: fabric.AddFree}
	if len(c.Extents) > 0 {
		// Where the ledger placed the chunk, and nowhere else: blocks
		// the ledger still counts as another chunk's are never offered.
		req.Policy, req.Extents = fabric.AddPrescriptive, c.Extents
	}
	return req
}

// earlyAdd is an add sent while the grant's intent was still being
// written (startAdd); its flow takes the device's answer instead of
// sending the command itself.
type earlyAdd struct {
	unlock func()                      // the chunk's and the host's locks, held for the flow
	events chan fabric.Event           // watching the host since before the send
	resets uint64                      // m.resets before the send
	wait   func(context.Context) error // the device's answer; nil if sending failed
	err    error                       // why sending failed
}

// startAdd sends g's add from inside the intent's transaction, the moment
// the admission checks pass, when that cannot block: the device then
// works on it while the intent commits, instead of after the flow's
// goroutine is first scheduled, which on a busy two-core box comes only
// once the ledger's writer has committed (a tenth of a millisecond and
// more of every grant). It applies only to a grant that cannot be shared
// (no other grant of the chunk: the add is the chunk's first), whose
// chunk and host locks are free now (the flow holds them as a flow that
// sends its own add does; a lock someone holds is never waited for here,
// since its holder may be waiting for the ledger's writer), on a device
// that can send without waiting (fabric.AddStarter). Otherwise it returns
// nil and the flow sends the add itself.
func (m *Manager) startAdd(g Grant, c Chunk, others bool) *earlyAdd {
	s, ok := m.cfg.Device.(fabric.AddStarter)
	if others || !ok {
		return nil
	}
	unlock, ok := m.tryLockFlow(g.Chunk, g.Host)
	if !ok {
		return nil
	}
	e := &earlyAdd{unlock: unlock, events: m.watch(g.Host), resets: m.resets.Load()}
	e.wait, e.err = s.StartAdd(addRequest(g, c, false))
	if errors.Is(e.err, fabric.ErrNotSent) {
		m.unwatch(g.Host, e.events)
		unlock()
		return nil
	}
	return e
}

// answer is the early add's outcome as sendAdd would return it: a device
// that answers Busy is asked again the same way.
func (e *earlyAdd) answer(ctx context.Context, m *Manager, g Grant, c Chunk) error {
	first := true
	req := addRequest(g, c, false)
	return m.retryBusy(ctx, func() error {
		if !first {
			return m.cfg.Device.Add(ctx, req)
		}
		first = false
		if e.wait == nil {
			return e.err
		}
		return e.wait(ctx)
	})
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
func (m *Manager) withdrawAdd(ctx context.Context, g Grant, c Chunk) (why error, ok bool) {
	req := fabric.ReleaseRequest{Host: uint16(g.Host), Policy: fabric.ReleaseTagBased, Forced: true, Sanitize: true, Length: c.Size, Tag: c.Tag}
	err := m.retryBusy(ctx, func() error { return m.cfg.Device.Release(ctx, req) })
	st, _, serr := m.addStatus(ctx, g.Host, c.Tag)
	if serr == nil && st == addNone {
		return fmt.Errorf("%w: no answer within %s", ErrHostTimeout, m.cfg.AddTimeout), true
	}
	// The device still shows the tag: leave the grant adding; reconcile
	// finishes it once the device answers again.
	m.log.Error("could not withdraw an unanswered add", "grant", g.ID, "err", errors.Join(err, serr))
	m.requestReconcile()
	return nil, false
}

// completeGrant records what the host accepted and returns the grant (as
// it was, if the ledger write failed: reconcile completes it later).
func (m *Manager) completeGrant(ctx context.Context, g Grant, exts []cci.Extent) Grant {
	ng, announce := m.recordComplete(ctx, g, exts)
	announce()
	return ng
}

// recordComplete is completeGrant without telling anyone: announce logs
// and publishes the outcome.
func (m *Manager) recordComplete(ctx context.Context, g Grant, exts []cci.Extent) (ng Grant, announce func()) {
	ng, err := m.cfg.Ledger.CompleteGrant(ctx, g.ID, exts)
	if err != nil {
		m.log.Error("recording granted capacity", "grant", g.ID, "err", err)
		return g, func() {}
	}
	return ng, func() {
		m.log.Info("capacity granted", "grant", g.ID, "chunk", g.Chunk, "host", g.Host, "bytes", ng.Size(), "extents", len(exts))
		m.publish(Change{Kind: ChangeGrant, Chunk: g.Chunk, Host: g.Host, Grant: &ng, Message: "granted"})
	}
}

// recordCompleteQueued is recordComplete telling the grant's caller as
// soon as the outcome is queued for the ledger's writer and the intent is
// durable, instead of after the outcome's commit: that transaction is off
// the grant's latency (a fifth of it on two cores). What a crash may lose
// is unchanged (the outcome was never made durable before the answer:
// reconcile rebuilds it from the device), and nobody sees the grant still
// adding after the answer: writes queue behind the outcome, reads wait for
// it (QueuedCompleter), and the flow holds the chunk's and host's locks
// until it is recorded. If recording fails the caller has still been told
// what the host accepted, which is the device's state, and reconcile
// records it. told says whether the outcome was queued, so the caller is
// (or will be, once the intent is durable) told by it.
func (m *Manager) recordCompleteQueued(ctx context.Context, qc QueuedCompleter, g Grant, exts []cci.Extent, intent *intentCommit) (_ Grant, announce func(), told bool) {
	queued := false
	ng, err := qc.CompleteGrantQueued(ctx, g.ID, exts, func(updated time.Time) {
		queued = true
		answer := g
		answer.State, answer.Extents, answer.Updated = GrantGranted, slices.Clone(exts), updated
		if intent.then(func(err error) {
			if err == nil {
				intent.tell(answer)
			}
		}) {
			// Told from the flow's goroutine, which would go on to
			// commit the outcome while the caller it just woke waits
			// for a CPU (on two cores, the other is often busy with
			// the device): let the caller run first.
			runtime.Gosched()
		}
	})
	if err != nil {
		m.log.Error("recording granted capacity", "grant", g.ID, "err", err)
		m.requestReconcile()
		return g, func() {}, queued
	}
	return ng, func() {
		m.log.Info("capacity granted", "grant", g.ID, "chunk", g.Chunk, "host", g.Host, "bytes", ng.Size(), "extents", len(exts))
		m.publish(Change{Kind: ChangeGrant, Chunk: g.Chunk, Host: g.Host, Grant: &ng, Message: "granted"})
	}, queued
}

// failGrant records why a grant failed and returns it.
func (m *Manager) failGrant(ctx context.Context, g Grant, why error) Grant {
	ng, announce := m.recordFail(ctx, g, why)
	announce()
	return ng
}

// recordFail is failGrant without telling anyone (see recordComplete).
func (m *Manager) recordFail(ctx context.Context, g Grant, why error) (ng Grant, announce func()) {
	ng, err := m.cfg.Ledger.FailGrant(ctx, g.ID, why.Error())
	if err != nil {
		m.log.Error("recording failed grant", "grant", g.ID, "err", err)
		return g, func() {}
	}
	return ng, func() {
		m.log.Warn("grant failed", "grant", g.ID, "chunk", g.Chunk, "host", g.Host, "reason", why)
		m.publish(Change{Kind: ChangeGrant, Chunk: g.Chunk, Host: g.Host, Grant: &ng, Message: "failed"})
	}
}

// runRelease drives one grant from releasing to released, forcing the
// release when the host does not answer in time, and returns the grant as
// it left it. resumed is set when reconcile picked up a release a crash
// interrupted: the host may have answered already, so the device is asked
// before anything is waited for. force forces the release from the start
// (a head about to lose power cannot answer).
func (m *Manager) runRelease(ctx context.Context, g Grant, c Chunk, resumed, force bool) Grant {
	defer m.lockChunk(g.Chunk)()
	defer m.lockHost(g.Host)()
	events := m.watch(g.Host)
	defer m.unwatch(g.Host, events)
	forced := force
	waiting := false // announced that the release waits for a host in use
	send := func() error {
		req := fabric.ReleaseRequest{Host: uint16(g.Host), Policy: fabric.ReleaseTagBased, Forced: forced,
			Sanitize: true, Length: g.Size(), Tag: c.Tag}
		return m.retryBusy(ctx, func() error { return m.cfg.Device.Release(ctx, req) })
	}
	// Sending a tag-based release again is safe: a host that no longer
	// holds the tag makes the device answer Invalid Input.
	if err := send(); err != nil && !errors.Is(err, cci.InvalidInput) && !errors.Is(err, fabric.ErrTimeout) {
		m.log.Warn("release refused by device", "grant", g.ID, "err", err)
	}
	deadline := time.NewTimer(m.cfg.ReleaseTimeout)
	defer deadline.Stop()
	// A forced release takes effect at once: look before waiting.
	check := resumed || force
	for {
		if check {
			held, err := m.holds(ctx, g.Host, c.Tag)
			if err == nil && !held {
				ng, err := m.cfg.Ledger.CompleteRelease(ctx, g.ID)
				if err != nil {
					m.log.Error("recording release", "grant", g.ID, "err", err)
					return g
				}
				m.log.Info("capacity released", "grant", g.ID, "chunk", g.Chunk, "host", g.Host, "forced", forced)
				m.mu.Lock()
				if len(m.released) > 4096 {
					clear(m.released) // events lost: a settle costs a few reads
				}
				m.released[hostTag{g.Host, c.Tag}] = true
				m.mu.Unlock()
				m.publish(Change{Kind: ChangeGrant, Chunk: g.Chunk, Host: g.Host, Grant: &ng, Message: "released"})
				return ng
			}
		}
		check = true
		if m.takeForce(g.ID) && !forced {
			forced = true
			m.log.Warn("release forced by an administrator", "grant", g.ID, "host", g.Host)
			if err := send(); err != nil {
				m.log.Warn("forced release", "grant", g.ID, "err", err)
			}
			deadline.Reset(m.cfg.ReleaseTimeout)
			continue
		}
		select {
		case <-events:
		case <-time.After(250 * time.Millisecond):
		case <-deadline.C:
			if forced {
				m.log.Error("forced release did not take effect; will reconcile", "grant", g.ID)
				m.requestReconcile()
				return g
			}
			// A program on the host still maps the memory: forcing
			// would take it from under the program. Wait for the host.
			if m.cfg.InUse != nil && m.cfg.InUse(g.Host, c.Tag) {
				if !waiting {
					waiting = true
					m.log.Warn("release waits: the host's agent says the memory is in use", "grant", g.ID, "host", g.Host)
					m.publish(Change{Kind: ChangeGrant, Chunk: g.Chunk, Host: g.Host, Grant: &g, Message: ReleaseWaitsMessage})
				}
				deadline.Reset(m.cfg.ReleaseTimeout)
				continue
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

// holds reports whether host still holds capacity tagged tag, for a
// release flow: its extent list says, and the device's tag list (where
// addStatus looks for pending offers) need not be read, because no offer
// of the tag to the host can be pending while its grant is releasing (the
// ledger allows one active grant per host and chunk, and that grant's add
// was answered before it was granted). One exchange fewer per release.
func (m *Manager) holds(ctx context.Context, host HostID, tag cci.Tag) (bool, error) {
	list, err := m.cfg.Device.Extents(ctx, uint16(host))
	if err != nil {
		return true, err
	}
	for _, e := range list.Extents {
		if e.Tag == tag && e.Length > 0 {
			return true, nil
		}
	}
	return false, nil
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
	case errors.Is(err, fabric.ErrClosed), errors.Is(err, fabric.ErrTimeout):
		return fmt.Errorf("%w: %v", ErrDeviceUnreachable, err)
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
		case ev, ok := <-events:
			if !ok {
				return
			}
			m.handleEvent(ctx, ev)
		}
	}
}

// reconcileLoop runs the reconciles and settles that events and flows ask
// for. It is not the event loop: a settle waits for the locks of flows
// that are themselves waiting for the event loop to hear from their host.
func (m *Manager) reconcileLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.reconc:
			if _, err := m.Reconcile(ctx); err != nil && ctx.Err() == nil {
				m.log.Error("reconcile", "err", err)
			}
		}
	}
}

// recheck settles what host holds under each of tags in the background,
// once per pair however many events name it meanwhile: a device event
// that changes what a host holds is judged against the ledger whatever
// else is waiting.
func (m *Manager) recheck(ctx context.Context, host HostID, tags []cci.Tag) {
	for _, tag := range tags {
		k := hostTag{host, tag}
		m.mu.Lock()
		done := m.released[k]
		delete(m.released, k)
		if f := m.flows[k]; (f != nil && f.kind == flowRelease) || done || m.rechecks[k] {
			// A release flow of this very grant checks the device
			// itself before it records anything, or has just seen
			// the device give the capacity back and recorded it.
			m.mu.Unlock()
			continue
		}
		m.rechecks[k] = true
		m.mu.Unlock()
		m.bg.Add(1)
		go func() {
			defer m.bg.Done()
			err := m.settleTag(ctx, k)
			m.mu.Lock()
			delete(m.rechecks, k)
			m.mu.Unlock()
			if err != nil && ctx.Err() == nil {
				m.log.Warn("settling after a device event; reconciling everything", "host", host, "tag", tag, "err", err)
				m.requestReconcile()
			}
		}()
	}
}

// settleTag settles one (host, tag) pair: the chunk the tag names, if a
// live one does, is found first.
func (m *Manager) settleTag(ctx context.Context, k hostTag) error {
	var c *Chunk
	switch x, err := m.cfg.Ledger.ChunkByTag(ctx, k.tag); {
	case err == nil:
		c = &x
	case !errors.Is(err, ErrNotFound):
		return err
	}
	var rep ReconcileReport
	return m.settle(ctx, k.host, k.tag, c, &rep)
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
		if ev.Kind != fabric.EventCapacityReleased {
			return
		}
		// Whatever flows are waiting on this host, the tags the event
		// names are settled against the ledger: a flow of another grant
		// ignores them, and nothing else would notice that the host gave
		// capacity back on its own.
		var tags []cci.Tag
		seen := make(map[cci.Tag]bool)
		for _, e := range ev.Extents {
			if !seen[e.Tag] {
				seen[e.Tag] = true
				tags = append(tags, e.Tag)
			}
		}
		if len(tags) == 0 {
			m.requestReconcile()
			return
		}
		m.recheck(ctx, HostID(ev.Host), tags)
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
		if ev.Kind == fabric.EventDeviceReset {
			m.resets.Add(1)
		}
		m.log.Warn("device state may have changed behind our back; reconciling", "event", ev.Kind)
		m.publish(Change{Kind: ChangeDevice, Message: ev.Kind.String()})
		box, err := m.cfg.Device.Discover(ctx)
		if err == nil {
			err = m.adoptBox(ctx, box)
		}
		if err != nil {
			m.log.Error("rediscover after reset", "err", err)
		}
		m.requestReconcile()
	}
}

func linkWord(up bool) string {
	if up {
		return "link up"
	}
	return "link down"
}
