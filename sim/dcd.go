package sim

import (
	"cmp"
	"slices"

	"cxlpool/fabric/cci"
)

// This file holds the Dynamic Capacity state machine (cxl-wire.md §3.8,
// §4.4–§4.6, §7). Every function expects b.mu held and returns
// cci.ReturnCode errors; a function that fails changes nothing.

// Selection and removal policies (5604h/5605h byte 2).
const (
	policyFree         = 0
	policyContiguous   = 1
	policyPrescriptive = 2
	policyShared       = 3

	removeTag          = 0
	removePrescriptive = 1
)

type addReq struct {
	host    uint16
	policy  uint8
	region  uint8
	length  uint64
	tag     cci.Tag
	extents []cci.Extent
}

type releaseReq struct {
	host     uint16
	policy   uint8
	forced   bool
	sanitize bool
	length   uint64
	tag      cci.Tag
	extents  []cci.Extent
}

func overlaps(a, b cci.Extent) bool { return a.DPA < b.End() && b.DPA < a.End() }

// anyOverlap reports whether two ranges of es overlap.
func anyOverlap(es []cci.Extent) bool {
	s := slices.Clone(es)
	slices.SortFunc(s, func(a, b cci.Extent) int { return cmp.Compare(a.DPA, b.DPA) })
	for i := 1; i < len(s); i++ {
		if s[i].DPA < s[i-1].End() {
			return true
		}
	}
	return false
}

// covered reports whether ranges (non-overlapping) cover [dpa, dpa+n).
func covered(ranges []cci.Extent, dpa, n uint64) bool {
	s := slices.Clone(ranges)
	slices.SortFunc(s, func(a, b cci.Extent) int { return cmp.Compare(a.DPA, b.DPA) })
	pos, end := dpa, dpa+n
	for _, r := range s {
		if pos >= end {
			break
		}
		if r.End() <= pos {
			continue
		}
		if r.DPA > pos {
			return false
		}
		pos = r.End()
	}
	return pos >= end
}

func (l *ld) heldRanges() []cci.Extent {
	out := make([]cci.Extent, len(l.held))
	for i, h := range l.held {
		out[i] = h.Extent
	}
	return out
}

// liveOffers lists the offers of every pending group still alive.
func (l *ld) liveOffers() []offer {
	var out []offer
	for _, g := range l.pending {
		if !g.dead {
			out = append(out, g.offers...)
		}
	}
	return out
}

func (l *ld) extentsInUse() int { return len(l.held) + len(l.liveOffers()) }

// tagsInUse is the set of non-zero tags the LD holds or is offered. The
// map is the LD's own, valid until the next call (the box's lock is held).
func (l *ld) tagsInUse() map[cci.Tag]bool {
	if l.tags == nil {
		l.tags = make(map[cci.Tag]bool)
	}
	m := l.tags
	clear(m)
	for _, h := range l.held {
		if !h.Tag.IsZero() {
			m[h.Tag] = true
		}
	}
	for _, o := range l.liveOffers() {
		if !o.Tag.IsZero() {
			m[o.Tag] = true
		}
	}
	return m
}

func (b *Box) availExtents(l *ld) uint32 {
	return uint32(max(0, b.cfg.MaxExtentsPerLD-l.extentsInUse()))
}

func (b *Box) availTags(l *ld) uint32 {
	return uint32(max(0, b.cfg.MaxTagsPerLD-len(l.tagsInUse())))
}

// accessible reports whether any byte of e is held by or offered to l.
func (l *ld) accessible(e cci.Extent) bool {
	for _, h := range l.held {
		if overlaps(h.Extent, e) {
			return true
		}
	}
	for _, o := range l.liveOffers() {
		if overlaps(o.Extent, e) {
			return true
		}
	}
	return false
}

// holds reports whether l holds or is offered any capacity of a.
func (l *ld) holds(a *allocation) (accepted, pending bool) {
	for _, h := range l.held {
		if h.alloc == a {
			accepted = true
			break
		}
	}
	for _, o := range l.liveOffers() {
		if o.alloc == a {
			pending = true
			break
		}
	}
	return accepted, pending
}

// carve splits held extents at dpa and dpa+n and returns those inside.
func (l *ld) carve(dpa, n uint64) []*held {
	end := dpa + n
	var out []*held
	var next []*held
	for _, h := range l.held {
		if !overlaps(h.Extent, cci.Extent{DPA: dpa, Length: n}) {
			next = append(next, h)
			continue
		}
		if h.DPA < dpa || h.End() > end {
			l.gen++ // the list's shape changes
		}
		if h.DPA < dpa {
			lo := *h
			lo.Length = dpa - h.DPA
			next = append(next, &lo)
		}
		mid := *h
		mid.DPA = max(h.DPA, dpa)
		mid.Length = min(h.End(), end) - mid.DPA
		next = append(next, &mid)
		out = append(out, &mid)
		if h.End() > end {
			hi := *h
			hi.DPA = end
			hi.Length = h.End() - end
			next = append(next, &hi)
		}
	}
	l.held = next
	return out
}

// removeHeld drops the given entries from l.held.
func (l *ld) removeHeld(rm []*held) {
	l.held = slices.DeleteFunc(l.held, func(h *held) bool { return slices.Contains(rm, h) })
	l.gen++
}

// referenced reports whether anything still keeps a's capacity allocated.
func (b *Box) referenced(a *allocation) bool {
	if a.fmRef {
		return true
	}
	for _, l := range b.lds {
		if acc, pend := l.holds(a); acc || pend {
			return true
		}
	}
	return false
}

// retire frees a's remaining capacity and its tag once nothing references
// it. Non-sharable capacity has already been freed piece by piece.
func (b *Box) retire(a *allocation) {
	if b.referenced(a) {
		return
	}
	if a.sharable {
		for _, e := range a.extents {
			b.freeRange(a.region, e.DPA, e.Length, a.sanitize || a.region.sor)
		}
		a.extents = nil
	}
	if !a.tag.IsZero() && b.tags[a.tag] == a {
		delete(b.tags, a.tag)
	}
	b.tagGen++
}

// freeRange returns blocks to the free pool, zeroing them first when
// sanitize is set so that no later owner can read the old data.
func (b *Box) freeRange(r *region, dpa, n uint64, sanitize bool) {
	if sanitize {
		if err := b.mem.Zero(dpa, n); err != nil {
			// The memfd cannot refuse a hole punch inside its size; keep
			// the blocks out of circulation rather than leak data.
			b.log.Error("sanitize failed; blocks stay allocated", "dpa", dpa, "len", n, "err", err)
			return
		}
	}
	r.mark(dpa, n, false)
}

// killGroup marks a pending add dead and returns its capacity.
func (b *Box) killGroup(g *addGroup, sanitize bool) {
	g.dead = true
	seen := map[*allocation]bool{}
	for _, o := range g.offers {
		if !g.sharedAccess && !o.alloc.sharable {
			b.freeRange(o.alloc.region, o.DPA, o.Length, sanitize)
		}
		if sanitize {
			o.alloc.sanitize = true
		}
		seen[o.alloc] = true
	}
	for a := range seen {
		b.retire(a)
	}
	b.tagGen++
}

// queueHost logs a More chain of DC records of type typ to l's host log.
func (b *Box) queueHost(l *ld, typ uint8, exts []cci.Extent) {
	for i, e := range exts {
		ev := cci.DCEvent{
			Type:             typ,
			Validity:         cci.DCEventValidAvailable,
			More:             i < len(exts)-1,
			Extent:           e,
			AvailableExtents: b.availExtents(l),
			AvailableTags:    b.availTags(l),
		}
		l.logs[cci.EventLogDC].add(ev.Record(0, 0), b.now())
	}
	if len(exts) > 0 {
		b.hosts[l.id].wake()
	}
}

// queueFM logs a More chain of DC records for the FM (04h/05h).
func (b *Box) queueFM(typ uint8, l *ld, exts []cci.Extent) {
	for i, e := range exts {
		ev := cci.DCEvent{
			Type:             typ,
			Validity:         cci.DCEventValidAvailable,
			HostID:           uint16(l.id),
			More:             i < len(exts)-1,
			Extent:           e,
			AvailableExtents: b.availExtents(l),
			AvailableTags:    b.availTags(l),
		}
		r := ev.Record(0, 0)
		r.Flags |= cci.EventFlagLDIDValid
		r.LDID = uint16(l.id)
		b.addFMRecord(cci.EventLogDC, r)
	}
}

// initiateAdd is 5604h.
func (b *Box) initiateAdd(q addReq) error {
	if int(q.host) >= len(b.lds) {
		return cci.InvalidInput
	}
	l := b.lds[q.host]
	g := &addGroup{}
	var newAllocs []*allocation
	switch q.policy {
	case policyFree, policyContiguous:
		if int(q.region) >= len(b.regions) {
			return cci.InvalidInput
		}
		r := b.regions[q.region]
		if q.length == 0 || q.length%r.blockSize != 0 {
			return cci.InvalidInput
		}
		if r.sharable && q.tag.IsZero() {
			return cci.InvalidInput // sharable capacity is identified by its tag
		}
		if !q.tag.IsZero() && b.tags[q.tag] != nil {
			return cci.InvalidInput
		}
		if q.length > r.length {
			return cci.ResourcesExhausted
		}
		var exts []cci.Extent
		if q.policy == policyFree {
			var ok bool
			if exts, ok = r.findFree(q.length); !ok {
				return cci.ResourcesExhausted
			}
		} else {
			e, ok := r.findContiguous(q.length)
			if !ok {
				return cci.ResourcesExhausted
			}
			exts = []cci.Extent{e}
		}
		a := &allocation{tag: q.tag, region: r, sharable: r.sharable}
		for i := range exts {
			exts[i].Tag = q.tag
			if r.sharable {
				exts[i].SharedSeq = uint16(i)
			}
			g.offers = append(g.offers, offer{exts[i], a})
		}
		if a.sharable {
			a.extents = exts
		}
		newAllocs = append(newAllocs, a)
	case policyPrescriptive:
		if len(q.extents) == 0 {
			return cci.InvalidExtentList
		}
		type key struct {
			tag    cci.Tag
			region int
		}
		byKey := map[key]*allocation{}
		tagRegion := map[cci.Tag]int{}
		for _, e := range q.extents {
			r := b.regionOf(e.DPA)
			if r == nil || !r.aligned(e.DPA, e.Length) {
				return cci.InvalidExtentList
			}
			if l.accessible(e) || !r.isFree(e.DPA, e.Length) {
				return cci.InvalidExtentList
			}
			if r.sharable && e.Tag.IsZero() {
				return cci.InvalidInput
			}
			if !e.Tag.IsZero() {
				if b.tags[e.Tag] != nil {
					return cci.InvalidInput
				}
				if ri, ok := tagRegion[e.Tag]; ok && ri != r.index {
					return cci.InvalidExtentList
				}
				tagRegion[e.Tag] = r.index
			}
			k := key{e.Tag, r.index}
			a := byKey[k]
			if a == nil {
				a = &allocation{tag: e.Tag, region: r, sharable: r.sharable}
				byKey[k] = a
				newAllocs = append(newAllocs, a)
			}
			e.SharedSeq = 0
			if a.sharable {
				e.SharedSeq = uint16(len(a.extents))
				a.extents = append(a.extents, e)
			}
			g.offers = append(g.offers, offer{e, a})
		}
		if anyOverlap(q.extents) {
			return cci.InvalidExtentList
		}
	case policyShared:
		if int(q.region) >= len(b.regions) || !b.regions[q.region].sharable {
			return cci.InvalidInput
		}
		a := b.tags[q.tag]
		if q.tag.IsZero() || a == nil || !a.sharable || a.region != b.regions[q.region] {
			return cci.InvalidInput
		}
		if acc, pend := l.holds(a); acc || pend {
			return cci.InvalidInput
		}
		g.sharedAccess = true
		for _, e := range a.extents {
			g.offers = append(g.offers, offer{e, a})
		}
	default:
		return cci.InvalidInput
	}

	if l.extentsInUse()+len(g.offers) > b.cfg.MaxExtentsPerLD {
		return cci.ResourcesExhausted
	}
	tags := l.tagsInUse()
	for _, o := range g.offers {
		if !o.Tag.IsZero() {
			tags[o.Tag] = true
		}
	}
	if len(tags) > b.cfg.MaxTagsPerLD {
		return cci.ResourcesExhausted
	}
	if l.logs[cci.EventLogDC].free() < len(g.offers) {
		return cci.RetryRequired
	}

	for _, a := range newAllocs {
		if !a.tag.IsZero() {
			b.tags[a.tag] = a
		}
	}
	exts := make([]cci.Extent, len(g.offers))
	for i, o := range g.offers {
		if !g.sharedAccess {
			o.alloc.region.mark(o.DPA, o.Length, true)
		}
		exts[i] = o.Extent
	}
	l.pending = append(l.pending, g)
	b.tagGen++
	b.queueHost(l, cci.DCEventAdd, exts)
	return nil
}

// checkRanges validates a host-supplied extent list: whole blocks of one
// region each, no overlap with each other.
func (b *Box) checkRanges(list []cci.Extent) error {
	for _, e := range list {
		r := b.regionOf(e.DPA)
		if r == nil || !r.aligned(e.DPA, e.Length) {
			return cci.InvalidExtentList
		}
	}
	if anyOverlap(list) {
		return cci.InvalidExtentList
	}
	return nil
}

// addResponse is 4802h from host l.
func (b *Box) addResponse(l *ld, more bool, list []cci.Extent) error {
	if len(l.pending) == 0 {
		l.ackAcc = nil
		return cci.InvalidInput // no Add event to acknowledge
	}
	g := l.pending[0]
	fail := func(rc cci.ReturnCode) error { l.ackAcc = nil; return rc }
	if err := b.checkRanges(list); err != nil {
		return fail(err.(cci.ReturnCode))
	}
	for _, e := range list {
		// Already accepted by an earlier 4802h of this chain.
		if slices.ContainsFunc(l.ackAcc, func(a cci.Extent) bool { return overlaps(a, e) }) {
			return fail(cci.InvalidPhysicalAddress)
		}
	}
	acc := append(slices.Clone(l.ackAcc), list...)
	if !g.dead {
		for _, e := range list {
			in := slices.ContainsFunc(g.offers, func(o offer) bool { return e.DPA >= o.DPA && e.End() <= o.End() })
			if !in {
				return fail(cci.InvalidPhysicalAddress)
			}
			if slices.ContainsFunc(l.held, func(h *held) bool { return overlaps(h.Extent, e) }) {
				return fail(cci.InvalidPhysicalAddress)
			}
		}
		if len(l.held)+len(acc) > b.cfg.MaxExtentsPerLD {
			return fail(cci.ResourcesExhausted)
		}
	}
	if more {
		l.ackAcc = acc
		return nil
	}
	l.ackAcc = nil
	if g.dead {
		l.pending = l.pending[1:]
		return nil
	}
	// Sharable capacity: all or none of each offered extent (and of the
	// allocation), never a part.
	for _, a := range allocsOf(g) {
		if !a.sharable {
			continue
		}
		full, none := true, true
		for _, o := range g.offers {
			if o.alloc != a {
				continue
			}
			exact := slices.ContainsFunc(acc, func(e cci.Extent) bool { return e.DPA == o.DPA && e.Length == o.Length })
			part := slices.ContainsFunc(acc, func(e cci.Extent) bool { return overlaps(e, o.Extent) })
			full = full && exact
			none = none && !part
		}
		if !full && !none {
			return cci.InvalidExtentList
		}
	}

	l.pending = l.pending[1:]
	var accepted []cci.Extent
	for _, o := range g.offers {
		var mine []cci.Extent
		for _, e := range acc {
			if e.DPA >= o.DPA && e.End() <= o.End() {
				mine = append(mine, e)
			}
		}
		slices.SortFunc(mine, func(a, b cci.Extent) int { return cmp.Compare(a.DPA, b.DPA) })
		pos := o.DPA
		for _, e := range mine {
			x := cci.Extent{DPA: e.DPA, Length: e.Length, Tag: o.Tag, SharedSeq: o.SharedSeq}
			l.held = append(l.held, &held{Extent: x, alloc: o.alloc})
			accepted = append(accepted, x)
			if e.DPA > pos && !g.sharedAccess && !o.alloc.sharable {
				b.freeRange(o.alloc.region, pos, e.DPA-pos, false)
			}
			pos = e.End()
		}
		if pos < o.End() && !g.sharedAccess && !o.alloc.sharable {
			b.freeRange(o.alloc.region, pos, o.End()-pos, false)
		}
	}
	if len(accepted) > 0 {
		l.gen++
		b.queueFM(cci.DCEventAddResponse, l, accepted)
	} else {
		// Convention: a host that accepted nothing is reported as one 04h
		// record with a zero-length extent carrying the offered tag.
		b.queueFM(cci.DCEventAddResponse, l, []cci.Extent{{Tag: g.offers[0].Tag}})
	}
	for _, a := range allocsOf(g) {
		b.retire(a)
	}
	b.tagGen++
	return nil
}

func allocsOf(g *addGroup) []*allocation {
	var out []*allocation
	for _, o := range g.offers {
		if !slices.Contains(out, o.alloc) {
			out = append(out, o.alloc)
		}
	}
	return out
}

// partialSharable reports whether targets cover some but not all of a
// sharable allocation they touch.
func partialSharable(l *ld, targets []cci.Extent) bool {
	for _, h := range l.held {
		if !h.alloc.sharable || !slices.ContainsFunc(targets, func(t cci.Extent) bool { return overlaps(t, h.Extent) }) {
			continue
		}
		for _, e := range h.alloc.extents {
			if !covered(targets, e.DPA, e.Length) {
				return true
			}
		}
	}
	return false
}

// initiateRelease is 5605h.
func (b *Box) initiateRelease(q releaseReq) error {
	if int(q.host) >= len(b.lds) {
		return cci.InvalidInput
	}
	l := b.lds[q.host]
	if q.sanitize && b.cfg.NoRequestSanitize {
		return cci.InvalidInput
	}
	var targets []cci.Extent
	var kill []*addGroup
	switch q.policy {
	case removeTag:
		var mine []*held
		for _, h := range l.held {
			if h.Tag == q.tag {
				mine = append(mine, h)
			}
		}
		for _, g := range l.pending {
			if !g.dead && slices.ContainsFunc(g.offers, func(o offer) bool { return o.Tag == q.tag }) {
				kill = append(kill, g)
			}
		}
		if len(mine) == 0 && len(kill) == 0 {
			return cci.InvalidInput // unknown tag
		}
		if len(mine) == 0 {
			if !q.forced {
				return cci.InvalidPhysicalAddress // still pending
			}
			for _, g := range kill {
				b.killGroup(g, q.sanitize)
			}
			return nil
		}
		if !q.forced {
			kill = nil
		}
		r := mine[0].alloc.region
		if q.length == 0 || q.length%r.blockSize != 0 {
			return cci.InvalidInput
		}
		var total uint64
		for _, h := range mine {
			total += h.Length
		}
		if q.length > total {
			return cci.ResourcesExhausted
		}
		if mine[0].alloc.sharable && q.length != total {
			return cci.InvalidInput
		}
		left := q.length
		for _, h := range mine {
			n := min(left, h.Length)
			targets = append(targets, cci.Extent{DPA: h.DPA, Length: n})
			if left -= n; left == 0 {
				break
			}
		}
	case removePrescriptive:
		if len(q.extents) == 0 {
			return cci.InvalidExtentList
		}
		if err := b.checkRanges(q.extents); err != nil {
			return err
		}
		hr := l.heldRanges()
		for _, e := range q.extents {
			if covered(hr, e.DPA, e.Length) {
				continue
			}
			var hit []*addGroup
			for _, g := range l.pending {
				if !g.dead && slices.ContainsFunc(g.offers, func(o offer) bool { return overlaps(o.Extent, e) }) {
					hit = append(hit, g)
				}
			}
			if len(hit) == 0 || !q.forced {
				return cci.InvalidPhysicalAddress
			}
			kill = append(kill, hit...)
		}
		for _, e := range q.extents {
			if covered(hr, e.DPA, e.Length) {
				targets = append(targets, cci.Extent{DPA: e.DPA, Length: e.Length})
			}
		}
		if partialSharable(l, targets) {
			return cci.InvalidInput
		}
	default:
		return cci.InvalidInput
	}

	if !q.forced && l.logs[cci.EventLogDC].free() < len(targets) {
		return cci.RetryRequired
	}
	// Releasing from the middle of an extent splits it; the pieces that
	// stay must still fit the LD's extent tracking.
	oldHeld, oldGen := l.held, l.gen
	var pieces []*held
	for _, t := range targets {
		pieces = append(pieces, l.carve(t.DPA, t.Length)...)
	}
	after := len(l.held)
	if q.forced {
		after -= len(pieces)
	}
	if after > b.cfg.MaxExtentsPerLD {
		l.held, l.gen = oldHeld, oldGen
		return cci.ResourcesExhausted
	}
	for _, g := range kill {
		if !g.dead {
			b.killGroup(g, q.sanitize)
		}
	}
	exts := make([]cci.Extent, len(pieces))
	for i, h := range pieces {
		exts[i] = h.Extent
	}
	if !q.forced {
		// Extents already waiting for the host are asked for again: an FM
		// retrying a release re-sends the 01h records.
		for _, h := range pieces {
			h.releasing = true
			h.sanitize = h.sanitize || q.sanitize
		}
		b.queueHost(l, cci.DCEventRelease, exts)
		return nil
	}
	for _, h := range pieces {
		h.sanitize = h.sanitize || q.sanitize
	}
	b.queueHost(l, cci.DCEventForcedRelease, exts)
	b.dropHeld(l, pieces)
	return nil
}

// hostRelease is 4803h from host l, solicited or not.
func (b *Box) hostRelease(l *ld, more bool, list []cci.Extent) error {
	acc := append(slices.Clone(l.relAcc), list...)
	fail := func(rc cci.ReturnCode) error { l.relAcc = nil; return rc }
	if len(list) == 0 {
		return fail(cci.InvalidInput)
	}
	if err := b.checkRanges(acc); err != nil {
		return fail(err.(cci.ReturnCode))
	}
	hr := l.heldRanges()
	for _, e := range list {
		if !covered(hr, e.DPA, e.Length) {
			return fail(cci.InvalidPhysicalAddress)
		}
	}
	if more {
		l.relAcc = acc
		return nil
	}
	l.relAcc = nil
	if partialSharable(l, acc) {
		return cci.InvalidExtentList
	}
	var pieces []*held
	for _, t := range acc {
		pieces = append(pieces, l.carve(t.DPA, t.Length)...)
	}
	b.dropHeld(l, pieces)
	return nil
}

// dropHeld ends l's access to pieces: the FM gets 05h records, the
// capacity is sanitized if required and freed, tags retire.
func (b *Box) dropHeld(l *ld, pieces []*held) {
	l.removeHeld(pieces)
	exts := make([]cci.Extent, len(pieces))
	var touched []*allocation
	for i, h := range pieces {
		exts[i] = h.Extent
		a := h.alloc
		if a.sharable {
			a.sanitize = a.sanitize || h.sanitize
		} else {
			b.freeRange(a.region, h.DPA, h.Length, h.sanitize || a.region.sor)
		}
		if !slices.Contains(touched, a) {
			touched = append(touched, a)
		}
	}
	b.queueFM(cci.DCEventCapacityReleased, l, exts)
	for _, a := range touched {
		b.retire(a)
	}
	b.tagGen++
}
