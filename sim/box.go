// Package sim is the virtual memory box: a multi-headed Dynamic Capacity
// Device (MH-SLD style, one LD per head, Host ID = LD-ID) that speaks the
// same wire protocol as the real box — DSP0253 serial framing, MCTP, CCI
// (cxl-wire.md §1–§4, §7) — together with simulated hosts that answer
// capacity events through their own mailboxes with encoded 48xxh commands.
//
// The box keeps every piece of device state behind one mutex; each host runs
// one goroutine that reads its DC event log and answers per its Policy. The
// device memory is a sparse memfd (sim/dram), so released capacity can be
// sanitized for real and a test can prove that one host's data never
// reaches another.
//
// Conventions where cxl-wire.md leaves a choice:
//   - A host that accepts nothing of an add is reported to the FM as one
//     Add Capacity Response (04h) record with a zero-length extent that
//     carries the offered tag; otherwise one 04h record per accepted extent,
//     linked by More.
//   - The FM's DC event log (log 04h on the MCTP CCI) holds only 04h/05h
//     records; 00h–03h go to the hosts' own logs. Head link changes are
//     Physical Switch records in the FM's Informational log.
//   - A host may accept any block-aligned sub-range of an offered extent of
//     non-sharable capacity; sharable capacity is all or none.
//   - 5602h answers with an empty payload, as libcxlmi and QEMU expect.
//   - Prescriptive adds may name extents of several regions; each tag must
//     stay within one region.
//
// Device reset (Faults.Reset) models a controller restart that keeps the
// media and the committed allocation state: event logs are emptied,
// pending adds are dropped (their capacity returns to the free pool),
// extents awaiting a host release go back to plain accepted extents, the
// event interrupt policy, notification target and response limit return to
// their defaults, and the next Config.BootRetries MCTP requests answer
// Retry Required. Accepted extents, tags, FM references and data survive,
// because an FM must be able to reconcile from 5603h/5608h after a reset.
package sim

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"cxlpool/bmc/pldm"
	"cxlpool/fabric/cci"
	"cxlpool/sim/board"
	"cxlpool/sim/chmu"
	"cxlpool/sim/dram"
)

// Box is one virtual multi-headed DCD.
type Box struct {
	cfg    Config
	log    *slog.Logger
	mem    *dram.DRAM
	faults *Faults
	hosts  []*Host
	board  *board.Board // the board controller, at its own EID on every link

	// The hotness monitoring unit and its workloads (hotness.go).
	chmu       *chmu.Device
	chmuGrain  uint64 // smallest CHMU unit: host accesses are split at it
	chmuNotify atomic.Pointer[func(int)]
	stepMu     sync.Mutex // one workload step at a time; owns wl's generator
	wlMu       sync.Mutex // guards wl.hosts and wl.gen
	wl         workloads

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	notifyKick chan struct{}

	mu            sync.Mutex
	regions       []*region
	lds           []*ld
	tags          map[cci.Tag]*allocation
	tagGen        uint32
	fmLogs        [5]*eventLog
	policy        uint16 // MCTP event interrupt policy mask
	notifyTo      *notifyTarget
	notifyPending uint16
	notifyTag     uint8
	respExp       uint8
	bootLeft      int
	epoch         uint64 // bumped by device reset; hosts drop buffered events
	closed        bool
}

// ld is the per-LD (per-host) device state.
type ld struct {
	id      int
	linkUp  bool
	held    []*held // accepted extents, including those pending release
	gen     uint32  // extent list generation (4801h, 5603h)
	pending []*addGroup
	ackAcc  []cci.Extent // 4802h entries collected across a More chain
	relAcc  []cci.Extent // 4803h entries collected across a More chain
	logs    [5]*eventLog // host-facing event logs; only 04h is ever written
	// tags is tagsInUse's map, reused: every extent list answer counts
	// the LD's tags, and a fresh map each time was a sixth of what a
	// populated box's grant and release rounds allocated.
	tags map[cci.Tag]bool
}

// held is one extent an LD has accepted.
type held struct {
	cci.Extent
	alloc     *allocation
	releasing bool // 01h sent, waiting for the host's 4803h
	sanitize  bool // the release asked for sanitize (5605h b5)
}

// allocation is the capacity behind one tag (or one untagged add in one
// region). Non-sharable capacity is freed block by block as the owning LD
// gives it back; sharable capacity is freed as a whole once no LD holds or
// is offered it and the FM holds no reference.
type allocation struct {
	tag      cci.Tag
	region   *region
	sharable bool
	extents  []cci.Extent // sharable: the full list with sequences
	fmRef    bool
	sanitize bool // sticky: some release asked for sanitize
}

// addGroup is one Add Capacity event chain waiting for the host's answer.
type addGroup struct {
	offers       []offer
	sharedAccess bool // 5604h policy 3: the capacity belongs to the tag
	dead         bool // killed by a forced release; the answer is ignored
}

type offer struct {
	cci.Extent
	alloc *allocation
}

// New builds a box and starts its hosts.
func New(cfg Config) (*Box, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	mem, err := dram.New(cfg.Capacity)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Box{
		cfg:        cfg,
		log:        cfg.Logger,
		mem:        mem,
		ctx:        ctx,
		cancel:     cancel,
		notifyKick: make(chan struct{}, 1),
		tags:       make(map[cci.Tag]*allocation),
		respExp:    cfg.MaxPayloadExp,
	}
	b.faults = &Faults{box: b}
	bcfg := cfg.Board
	if bcfg.Heads == 0 {
		bcfg.Heads = min(cfg.Heads, pldm.MaxComposite)
	}
	if bcfg.Clock == nil {
		bcfg.Clock = cfg.Clock
	}
	if bcfg.Logger == nil {
		bcfg.Logger = cfg.Logger.With("component", "board")
	}
	// Cutting a head's power takes its link down, as on the real box.
	bcfg.OnHeadPower = func(head int, on bool) { go b.SetLink(head, on) }
	if b.board, err = board.New(bcfg); err != nil {
		mem.Close()
		cancel()
		return nil, fmt.Errorf("sim: board: %w", err)
	}
	if err := b.newCHMU(); err != nil {
		mem.Close()
		cancel()
		return nil, err
	}
	rl := cfg.regionLength()
	for i := range cfg.Regions {
		b.regions = append(b.regions, newRegion(i, uint64(i)*rl, rl, cfg.BlockSize,
			perRegion(cfg.SharableRegions, i, i > 0),
			perRegion(cfg.SanitizeOnRelease, i, true),
			perRegion(cfg.SoRConfigurable, i, true)))
	}
	for i := range b.fmLogs {
		b.fmLogs[i] = newEventLog(cfg.EventLogSize)
	}
	for i := range cfg.Heads {
		l := &ld{id: i, linkUp: true}
		for j := range l.logs {
			l.logs[j] = newEventLog(cfg.EventLogSize)
		}
		b.lds = append(b.lds, l)
		b.hosts = append(b.hosts, newHost(b, i))
	}
	for _, h := range b.hosts {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			h.run(ctx)
		}()
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.notifier(ctx)
	}()
	if cfg.WorkloadTick >= 0 {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.runWorkloads(ctx, cmp.Or(cfg.WorkloadTick, defaultWorkloadTick))
		}()
	}
	return b, nil
}

// Close stops the hosts and the Serve loops (without waiting for the
// latter) and releases the memory.
func (b *Box) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
	return b.mem.Close()
}

// Config returns the configuration the box runs with.
func (b *Box) Config() Config { return b.cfg }

// Faults returns the fault injector.
func (b *Box) Faults() *Faults { return b.faults }

// Host returns the simulated host on LD ld, or nil if there is none.
func (b *Box) Host(ld int) *Host {
	if ld < 0 || ld >= len(b.hosts) {
		return nil
	}
	return b.hosts[ld]
}

// Board returns the simulated board controller (sensors, fans, PSUs, head
// power, identify LED), for tests and workloads that drive its model.
func (b *Box) Board() *board.Board { return b.board }

// DRAM returns the device memory, for a component that maps it.
func (b *Box) DRAM() *dram.DRAM { return b.mem }

// SetLink brings head ld's link up or down. A down host stops processing
// events until the link comes back. Each change logs a Physical Switch
// link-state record to the FM's Informational log.
func (b *Box) SetLink(ld int, up bool) {
	b.mu.Lock()
	if ld < 0 || ld >= len(b.lds) || b.lds[ld].linkUp == up {
		b.mu.Unlock()
		return
	}
	b.lds[ld].linkUp = up
	ev := cci.LinkEvent{Port: uint8(ld), Type: cci.LinkEventLinkStateChange, LinkUp: up}
	b.addFMRecord(cci.EventLogInfo, ev.Record(0, 0))
	b.mu.Unlock()
	b.log.Info("link change", "ld", ld, "up", up)
	if up {
		b.hosts[ld].wake()
	}
}

// now is the device timestamp in ns since the epoch.
func (b *Box) now() uint64 { return uint64(b.cfg.Clock().UnixNano()) }

// addFMRecord appends r to an FM-facing log and schedules an Event
// Notification on an enabled empty→non-empty transition. Caller holds mu.
func (b *Box) addFMRecord(log uint8, r cci.EventRecord) {
	l := b.fmLogs[log]
	if l.add(r, b.now()) && l.armed && b.notifyTo != nil && b.policy&(1<<log) != 0 {
		l.armed = false
		b.notifyPending |= 1 << log
		select {
		case b.notifyKick <- struct{}{}:
		default:
		}
	}
}

// regionOf returns the region whose range holds dpa.
func (b *Box) regionOf(dpa uint64) *region {
	for _, r := range b.regions {
		if dpa >= r.base && dpa < r.end() {
			return r
		}
	}
	return nil
}

// reset is the device reset described in the package comment.
func (b *Box) reset() {
	b.mu.Lock()
	for _, l := range b.fmLogs {
		l.reset()
	}
	for _, l := range b.lds {
		for _, g := range l.pending {
			if !g.dead {
				b.killGroup(g, false)
			}
		}
		l.pending = nil
		l.ackAcc, l.relAcc = nil, nil
		for _, h := range l.held {
			h.releasing, h.sanitize = false, false
		}
		for _, lg := range l.logs {
			lg.reset()
		}
	}
	b.tagGen++
	b.policy = 0
	b.notifyTo = nil
	b.notifyPending = 0
	b.respExp = b.cfg.MaxPayloadExp
	b.bootLeft = b.cfg.BootRetries
	b.epoch++
	b.mu.Unlock()
	b.log.Info("device reset")
}
