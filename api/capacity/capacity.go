package capacity

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
	"cxlpool/fabric"
	"cxlpool/fabric/cci"
)

// The capacity resources (Chassis, PCIeDevices, MemoryDomains, Fabrics,
// Systems and what hangs below them) are views of one snapshot of the
// pool: the device model the Manager keeps (Box) and the ledger's hosts,
// chunks, active grants and orphans. This file holds that snapshot, its
// cache, the record of which host reserved which chunk, and the helpers
// the resource files share.

// viewMaxAge bounds how long a snapshot is trusted without a change
// notification: the Manager drops notifications for a subscriber that
// falls behind, so a missed one must not leave a view stale for long.
const viewMaxAge = time.Second

// mebibyte is the unit of every *MiB property.
const mebibyte = 1 << 20

// capacity is the pool resources' shared state.
type capacity struct {
	s *Server

	// gen counts changes: the Manager's notifications, and the service's
	// own writes (which bump it synchronously, so that a client reading
	// after its own change never sees the view from before it).
	gen   atomic.Uint64
	mu    sync.Mutex
	view  *poolView
	vgen  uint64
	built time.Time

	// reserveMu makes a host's quota check and reservation one step.
	reserveMu sync.Mutex

	omu    sync.RWMutex
	owners map[dcd.ChunkID]chunkOwner

	// lost holds each chunk's grants lost since it was last released,
	// announced the lost grants already published (stranded.go).
	lmu       sync.Mutex
	lost      map[dcd.ChunkID][]dcd.Grant
	announced map[dcd.GrantID]bool
}

// chunkOwner records that a host reserved a chunk itself: the host sees
// it (and may connect or delete it) before it holds any of it. The tag
// makes the record specific to that chunk even if a wiped ledger reuses
// its Id.
type chunkOwner struct {
	host dcd.HostID
	tag  cci.Tag
}

// capacitySetup prepares the capacity resources' state: the chunk owner
// records, change notifications that invalidate the cached view, and the
// pool gauges. Without a Manager there is no pool and none of the
// capacity resources is served.
func (s *Server) capacitySetup() {
	if s.mgr == nil {
		return
	}
	owners, err := s.owners.ChunkOwners(s.ctx)
	if err != nil {
		s.RouteError(fmt.Errorf("api: chunk owners: %w", err))
		return
	}
	c := &capacity{s: s, owners: owners, lost: map[dcd.ChunkID][]dcd.Grant{}, announced: map[dcd.GrantID]bool{}}
	s.capacity = c
	ch, cancel := s.mgr.Subscribe(1024)
	// After subscribing, so that a loss is either in the scan or in a
	// notification still to come.
	if err := c.scanLost(s.ctx); err != nil {
		cancel()
		s.RouteError(fmt.Errorf("api: lost grants: %w", err))
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		defer cancel()
		for {
			select {
			case <-s.ctx.Done():
				return
			case chg, ok := <-ch:
				if !ok {
					return
				}
				lost := c.noteChange(chg)
				c.invalidate()
				if lost != nil {
					c.announceLost(*lost)
				}
			}
		}
	}()
	if err := s.Metrics().Register(&poolCollector{s: s}); err != nil {
		s.RouteError(fmt.Errorf("api: pool gauges: %w", err))
	}
}

func (c *capacity) invalidate() { c.gen.Add(1) }

// snapshot returns the current view, rebuilding it when something changed
// since it was built (or it is older than viewMaxAge).
func (c *capacity) snapshot(ctx context.Context) (*poolView, error) {
	g := c.gen.Load()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.view != nil && c.vgen == g && time.Since(c.built) < viewMaxAge {
		return c.view, nil
	}
	v, err := buildView(ctx, c.s.mgr)
	if err != nil {
		return nil, err
	}
	v.stranded = c.strandedOf(v)
	c.view, c.vgen, c.built = v, g, time.Now()
	return v, nil
}

// owner returns the host that reserved chunk ch, if a host did.
func (c *capacity) owner(ch dcd.Chunk) (dcd.HostID, bool) {
	c.omu.RLock()
	defer c.omu.RUnlock()
	o, ok := c.owners[ch.ID]
	if !ok || o.tag != ch.Tag {
		return 0, false
	}
	return o.host, true
}

func (c *capacity) setOwner(ctx context.Context, ch dcd.Chunk, h dcd.HostID) error {
	if err := c.s.owners.AddChunkOwner(ctx, ch.ID, ch.Tag, h); err != nil {
		return err
	}
	c.omu.Lock()
	c.owners[ch.ID] = chunkOwner{host: h, tag: ch.Tag}
	c.omu.Unlock()
	return nil
}

func (c *capacity) dropOwner(ctx context.Context, id dcd.ChunkID) error {
	c.omu.Lock()
	_, ok := c.owners[id]
	delete(c.owners, id)
	c.omu.Unlock()
	if !ok {
		return nil
	}
	return c.s.owners.DeleteChunkOwner(ctx, id)
}

// poolView is one consistent snapshot of the pool.
type poolView struct {
	box     fabric.Box
	heads   []fabric.Head // by LD
	hosts   map[dcd.HostID]dcd.Host
	chunks  []dcd.Chunk // by Id
	chunkAt map[dcd.ChunkID]int
	grants  []dcd.Grant // active (adding, granted, releasing), by Id
	grantAt map[dcd.GrantID]int
	byChunk map[dcd.ChunkID][]int
	byHost  map[dcd.HostID][]int
	orphans []dcd.Orphan
	// stranded are the chunks no host holds whose grants were lost, with
	// those grants (stranded.go).
	stranded map[dcd.ChunkID][]dcd.Grant
	// defaultQuota limits hosts without a quota of their own (defaultquota.go).
	defaultQuota dcd.DefaultQuota

	// renders holds collections encoded from this view (see
	// cachedCollection): a view never changes, so neither do they.
	renders sync.Map // string → renderedCollection
}

type renderedCollection struct {
	members []string
	r       *redfish.Rendered
}

// cachedCollection completes col with its members and, encoded once per
// view and visibility, its default representation: the hot collections
// (chunks, connections) are then served without re-encoding. key names
// the collection; who may see what is added to it here.
func (v *poolView) cachedCollection(p *redfish.Principal, key string, col redfish.Collection, members func() []string) (redfish.Collection, error) {
	if p.IsHost() {
		key += "|" + pool.SystemID(dcd.HostID(*p.HostID))
	}
	if e, ok := v.renders.Load(key); ok {
		rc := e.(renderedCollection)
		col.Members, col.Rendered = rc.members, rc.r
		return col, nil
	}
	col.Members = members()
	r, err := redfish.RenderCollection(col)
	if err != nil {
		return col, redfish.ErrInternal(err)
	}
	col.Rendered = r
	v.renders.Store(key, renderedCollection{members: col.Members, r: r})
	return col, nil
}

func buildView(ctx context.Context, m *dcd.Manager) (*poolView, error) {
	led := m.Ledger()
	v := &poolView{box: m.Box(), hosts: map[dcd.HostID]dcd.Host{}, chunkAt: map[dcd.ChunkID]int{},
		grantAt: map[dcd.GrantID]int{}, byChunk: map[dcd.ChunkID][]int{}, byHost: map[dcd.HostID][]int{}}
	v.heads = sortedHeads(v.box)
	hosts, err := led.Hosts(ctx)
	if err != nil {
		return nil, fmt.Errorf("pool view: %w", err)
	}
	for _, h := range hosts {
		v.hosts[h.ID] = h
	}
	if v.defaultQuota, err = led.DefaultHostQuota(ctx); err != nil {
		return nil, fmt.Errorf("pool view: %w", err)
	}
	if v.chunks, err = led.Chunks(ctx); err != nil {
		return nil, fmt.Errorf("pool view: %w", err)
	}
	slices.SortFunc(v.chunks, func(a, b dcd.Chunk) int { return cmp.Compare(a.ID, b.ID) })
	for i, ch := range v.chunks {
		v.chunkAt[ch.ID] = i
	}
	if v.grants, err = led.Grants(ctx, dcd.GrantFilter{Active: true}); err != nil {
		return nil, fmt.Errorf("pool view: %w", err)
	}
	slices.SortFunc(v.grants, func(a, b dcd.Grant) int { return cmp.Compare(a.ID, b.ID) })
	for i, g := range v.grants {
		v.grantAt[g.ID] = i
		v.byChunk[g.Chunk] = append(v.byChunk[g.Chunk], i)
		v.byHost[g.Host] = append(v.byHost[g.Host], i)
	}
	if v.orphans, err = led.Orphans(ctx); err != nil {
		return nil, fmt.Errorf("pool view: %w", err)
	}
	return v, nil
}

func (v *poolView) chunk(id dcd.ChunkID) (dcd.Chunk, bool) {
	i, ok := v.chunkAt[id]
	if !ok {
		return dcd.Chunk{}, false
	}
	return v.chunks[i], true
}

func (v *poolView) grant(id dcd.GrantID) (dcd.Grant, bool) {
	i, ok := v.grantAt[id]
	if !ok {
		return dcd.Grant{}, false
	}
	return v.grants[i], true
}

func (v *poolView) pick(idx []int) []dcd.Grant {
	out := make([]dcd.Grant, len(idx))
	for i, j := range idx {
		out[i] = v.grants[j]
	}
	return out
}

// chunkGrants are the active grants of a chunk, by Id.
func (v *poolView) chunkGrants(id dcd.ChunkID) []dcd.Grant { return v.pick(v.byChunk[id]) }

// hostGrants are the active grants of a host, by Id.
func (v *poolView) hostGrants(h dcd.HostID) []dcd.Grant { return v.pick(v.byHost[h]) }

func (v *poolView) head(h dcd.HostID) (fabric.Head, bool) { return v.box.Head(uint16(h)) }

func (v *poolView) region(n int) (fabric.Region, bool) {
	for _, r := range v.box.Regions {
		if r.Index == n {
			return r, true
		}
	}
	return fabric.Region{}, false
}

// blockSize is the chunk size granularity valid in every region: the
// largest block size (they are powers of two).
func (v *poolView) blockSize() uint64 {
	var b uint64
	for _, r := range v.box.Regions {
		b = max(b, r.BlockSize)
	}
	return b
}

// holds reports whether a grant's host has (or is giving back) the
// capacity, as opposed to still being offered it.
func holds(g dcd.Grant) bool { return g.State == dcd.GrantGranted || g.State == dcd.GrantReleasing }

// hostGrantedBytes is the capacity a host holds in granted grants.
func (v *poolView) hostGrantedBytes(h dcd.HostID) uint64 {
	var n uint64
	for _, g := range v.hostGrants(h) {
		if g.State == dcd.GrantGranted {
			n += g.Size()
		}
	}
	return n
}

// usage splits the pool into disjoint parts: free, reserved (chunks no
// host holds), granted (held by one host), shared (held by several) and
// orphaned (on the device under a tag the ledger does not know).
type usage struct {
	total, free, reserved, granted, shared, orphaned uint64
}

func (v *poolView) usage() usage {
	var u usage
	for _, r := range v.box.Regions {
		u.total += r.Length
	}
	if v.box.TotalDynamic > u.total {
		u.total = v.box.TotalDynamic
	}
	var used uint64
	for _, ch := range v.chunks {
		n := 0
		for _, g := range v.chunkGrants(ch.ID) {
			if holds(g) {
				n++
			}
		}
		switch {
		case n == 0:
			u.reserved += ch.Size
		case n == 1:
			u.granted += ch.Size
		default:
			u.shared += ch.Size
		}
		used += ch.Size
	}
	for _, o := range v.orphans {
		for _, e := range o.Extents {
			u.orphaned += e.Length
		}
	}
	used += u.orphaned
	if used < u.total {
		u.free = u.total - used
	}
	return u
}

// chunkVisible reports whether p may see chunk ch: everyone but host
// accounts sees every chunk; a host sees the chunks it reserved and those
// it holds or is being given.
func (s *Server) chunkVisible(p *redfish.Principal, v *poolView, ch dcd.Chunk) bool {
	if !p.IsHost() {
		return true
	}
	if h, ok := s.capacity.owner(ch); ok && redfish.HostID(h) == *p.HostID {
		return true
	}
	for _, g := range v.chunkGrants(ch.ID) {
		if redfish.HostID(g.Host) == *p.HostID {
			return true
		}
	}
	return false
}

// hostVisible reports whether a host exists on the device and p may see it.
func hostVisible(p *redfish.Principal, v *poolView, h dcd.HostID) bool {
	_, ok := v.head(h)
	return ok && p.CanSeeHost(redfish.HostID(h))
}

// visibleHosts lists, in head order, the hosts p may see: the members of
// every per-host collection (Systems, Zones, Endpoints).
func (v *poolView) visibleHosts(p *redfish.Principal) []dcd.HostID {
	var out []dcd.HostID
	for _, h := range v.heads {
		if ld := dcd.HostID(h.LD); p.CanSeeHost(redfish.HostID(ld)) {
			out = append(out, ld)
		}
	}
	return out
}

// view is the handlers' way to the snapshot.
func (s *Server) view(ctx context.Context) (*poolView, error) {
	v, err := s.capacity.snapshot(ctx)
	if err != nil {
		return nil, redfish.ErrInternal(err)
	}
	return v, nil
}

// --- small shared helpers ---

// sortedHeads are the box's heads by LD.
func sortedHeads(box fabric.Box) []fabric.Head {
	hs := slices.Clone(box.Heads)
	slices.SortFunc(hs, func(a, b fabric.Head) int { return cmp.Compare(a.LD, b.LD) })
	return hs
}

// linkState is a host-facing head's Status.State: its link up or not.
func linkState(h fabric.Head) string {
	if h.LinkUp {
		return "Enabled"
	}
	return "UnavailableOffline"
}

// parseLD reads an LD-ID Id ("0", "7").
func parseLD(s string) (dcd.HostID, bool) {
	if s == "" || len(s) > 5 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 16)
	return dcd.HostID(n), err == nil
}

// extentsMiB renders extents as MemoryRegion.MemoryExtents, offsets
// relative to the region's base.
func extentsMiB(exts []cci.Extent, base uint64) []redfish.Obj {
	out := make([]redfish.Obj, 0, len(exts))
	for _, e := range exts {
		o := redfish.Obj{
			"ExtentOffsetMiB": pool.MiB(e.DPA - base),
			"ExtentSizeMiB":   pool.MiB(e.Length),
			"Tag":             e.Tag.String(),
		}
		if e.SharedSeq != 0 {
			o["SequenceNumber"] = e.SharedSeq
		}
		out = append(out, o)
	}
	return out
}

// regionFree is what a region has left: its length less its chunks and
// the orphans in it.
func (v *poolView) regionFree(r fabric.Region) uint64 {
	var used uint64
	for _, ch := range v.chunks {
		if ch.Region == r.Index {
			used += ch.Size
		}
	}
	for _, o := range v.orphans {
		for _, e := range o.Extents {
			if r.Contains(e.DPA, e.Length) {
				used += e.Length
			}
		}
	}
	return r.Length - min(used, r.Length)
}

// fitsOneRegion refuses a reservation no candidate region has room for,
// naming the rule: a chunk is one tag's capacity in one DC region (its
// extents carry one tag, its sharability is the region's), so the pool's
// free capacity summed over regions is not what one chunk can get. The
// answer gives the largest chunk that fits now. The ledger checks again
// under its transaction; this is the explanation, not the guard.
func (v *poolView) fitsOneRegion(rr dcd.ReserveRequest) error {
	var best, total uint64
	bestRegion := -1
	var parts []string
	for _, r := range v.box.Regions {
		free := v.regionFree(r)
		total += free
		if rr.Region >= 0 && r.Index != rr.Region || rr.Region < 0 && r.Sharable != rr.Sharable {
			continue
		}
		if free >= rr.Size {
			return nil
		}
		if r.BlockSize > 0 {
			if fit := free / r.BlockSize * r.BlockSize; fit > best || bestRegion < 0 {
				best, bestRegion = fit, r.Index
			}
		}
		kind := "not sharable"
		if r.Sharable {
			kind = "sharable"
		}
		parts = append(parts, fmt.Sprintf("region %d (%s) has %d MiB free", r.Index, kind, pool.MiB(free)))
	}
	if bestRegion < 0 {
		return nil // no candidate: Reserve says why (unknown region, nothing sharable)
	}
	what := "chunk"
	if rr.Sharable {
		what = "sharable chunk"
	}
	res := fmt.Sprintf("A chunk lies in one DC region, and %s: the %d MiB asked for does not fit there, "+
		"although %d MiB are free in the whole pool. ", strings.Join(parts, ", "), pool.MiB(rr.Size), pool.MiB(total))
	if best > 0 {
		res += fmt.Sprintf("The largest %s that fits now is %d MiB (region %d); reserve that, or several chunks.", what, pool.MiB(best), bestRegion)
	} else {
		res += "Free capacity there first (release and delete chunks)."
	}
	return redfish.NewError(http.StatusConflict, redfish.Msg{Key: "Base.ResourceExhaustion", Args: []string{pool.MemoryDomainURI}, Resolution: res}).
		WithCause(dcd.ErrNoCapacity)
}

// activeGrants are the pool's active grants, for the TelemetryService's
// links from a hot unit to the memory holding it (nil without a capacity
// view).
func (s *Server) activeGrants(ctx context.Context) ([]dcd.Grant, error) {
	if s.capacity == nil {
		return nil, nil
	}
	v, err := s.capacity.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return v.grants, nil
}
