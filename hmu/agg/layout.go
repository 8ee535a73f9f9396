package agg

import (
	"cmp"
	"math/bits"
	"slices"
	"sync/atomic"

	"cxlpool/dcd"
	"cxlpool/fabric/cci"
)

// Shared is the host HostOf reports for DPA held by more than one host
// (sharable capacity, e.g. a KV-cache prefix every host reads): its heat
// belongs to all of them, so the collector tracks it as its own scope.
const Shared = -1

// Layout answers "who holds this DPA": an immutable snapshot of the
// extents each host holds. Build a new one when grants change and swap it
// in with LiveLayout.
type Layout struct {
	segs    []segment // disjoint, sorted
	extents map[int][]cci.Extent
	// Direct table over grain-sized blocks when every segment boundary is
	// grain aligned and the table is small (the DCD hands out whole blocks
	// of ≥ 2 MiB): one load instead of a binary search.
	table      []int8 // host+2: 0 = nobody, 1 = shared
	grainShift uint
}

type segment struct {
	start, end uint64
	host       int
}

// tableMax bounds the direct table (entries, one byte each).
const tableMax = 1 << 20

// NewLayout builds a layout from the extents each host holds.
func NewLayout(perHost map[int][]cci.Extent) *Layout {
	l := &Layout{extents: make(map[int][]cci.Extent, len(perHost))}
	type edge struct {
		at    uint64
		host  int
		delta int
	}
	n := 0
	for _, es := range perHost {
		n += len(es)
	}
	edges := make([]edge, 0, 2*n)
	l.segs = make([]segment, 0, n)
	for h, es := range perHost {
		cp := slices.Clone(es)
		slices.SortFunc(cp, func(a, b cci.Extent) int { return cmp.Compare(a.DPA, b.DPA) })
		l.extents[h] = cp
		for _, e := range es {
			if e.Length == 0 {
				continue
			}
			edges = append(edges, edge{e.DPA, h, 1}, edge{e.End(), h, -1})
		}
	}
	slices.SortFunc(edges, func(a, b edge) int { return cmp.Compare(a.at, b.at) })
	// Sweep: the holders of each elementary interval decide its owner. A
	// point is held by one host, or a few where capacity is shared: a
	// short list beats a map (this runs on every change of the layout).
	var holders []holding
	for i := 0; i < len(edges); {
		at := edges[i].at
		for ; i < len(edges) && edges[i].at == at; i++ {
			holders = hold(holders, edges[i].host, edges[i].delta)
		}
		if len(holders) == 0 || i == len(edges) {
			continue
		}
		owner := Shared
		if len(holders) == 1 {
			owner = holders[0].host
		}
		end := edges[i].at
		if n := len(l.segs); n > 0 && l.segs[n-1].end == at && l.segs[n-1].host == owner {
			l.segs[n-1].end = end
		} else {
			l.segs = append(l.segs, segment{at, end, owner})
		}
	}
	// Shared capacity is a scope of its own: list its segments as extents,
	// with the tag of the capacity they belong to.
	for _, sg := range l.segs {
		if sg.host != Shared {
			continue
		}
		e := cci.Extent{DPA: sg.start, Length: sg.end - sg.start}
	find:
		for _, es := range perHost {
			for _, x := range es {
				if x.DPA <= sg.start && sg.start < x.End() {
					e.Tag = x.Tag
					break find
				}
			}
		}
		l.extents[Shared] = append(l.extents[Shared], e)
	}
	l.buildTable()
	return l
}

// holding is how many of a host's extents cover a point of the sweep.
type holding struct{ host, n int }

// hold adds delta to host's count in hs, dropping it at zero.
func hold(hs []holding, host, delta int) []holding {
	for i := range hs {
		if hs[i].host == host {
			if hs[i].n += delta; hs[i].n == 0 {
				hs = slices.Delete(hs, i, i+1)
			}
			return hs
		}
	}
	return append(hs, holding{host, delta})
}

func (l *Layout) buildTable() {
	if len(l.segs) == 0 {
		return
	}
	var align uint64
	for _, s := range l.segs {
		align |= s.start | s.end
	}
	shift := uint(bits.TrailingZeros64(align))
	if shift > 40 || shift < 12 {
		return
	}
	n := (l.segs[len(l.segs)-1].end + 1<<shift - 1) >> shift
	if n > tableMax {
		return
	}
	for _, s := range l.segs {
		if s.host < Shared || s.host > 125 {
			return // the table holds int8 hosts
		}
	}
	t := make([]int8, n)
	for _, s := range l.segs {
		for b := s.start >> shift; b < s.end>>shift; b++ {
			t[b] = int8(s.host + 2)
		}
	}
	l.table, l.grainShift = t, shift
}

// LayoutFromGrants builds a layout from the ledger's grants: every active
// grant's extents belong to its host.
func LayoutFromGrants(grants []dcd.Grant) *Layout {
	per := map[int][]cci.Extent{}
	for _, g := range grants {
		if g.State.Active() {
			per[int(g.Host)] = append(per[int(g.Host)], g.Extents...)
		}
	}
	return NewLayout(per)
}

// Without returns the layout with host's extents es taken out, as
// NewLayout would build it from what is left, without sweeping every
// extent again: the telemetry drops a grant that ended this way, one per
// release on a busy box. It reports false, and returns nil, when it cannot
// do that exactly (an extent the layout does not list for host, shared
// capacity under one of them, or host holding part of one twice): the
// caller builds the layout anew.
func (l *Layout) Without(host int, es []cci.Extent) (*Layout, bool) {
	if host < 0 {
		return nil, false
	}
	var cut []cci.Extent
	for _, e := range es {
		if e.Length > 0 {
			cut = append(cut, e)
		}
	}
	slices.SortFunc(cut, func(a, b cci.Extent) int { return cmp.Compare(a.DPA, b.DPA) })
	left := slices.Clone(l.extents[host])
	for _, e := range cut {
		i := slices.Index(left, e)
		if i < 0 {
			return nil, false
		}
		left = slices.Delete(left, i, i+1)
	}
	for _, x := range left {
		for _, e := range cut {
			if x.Length > 0 && x.DPA < e.End() && e.DPA < x.End() {
				return nil, false
			}
		}
	}
	n := &Layout{extents: make(map[int][]cci.Extent, len(l.extents)), segs: make([]segment, 0, len(l.segs)+len(cut))}
	for h, xs := range l.extents {
		if h != host {
			n.extents[h] = xs // never modified: shared with l
		}
	}
	if len(left) > 0 {
		n.extents[host] = left
	}
	j := 0
	for _, sg := range l.segs {
		for j < len(cut) && cut[j].End() <= sg.start {
			j++
		}
		start := sg.start
		for k := j; k < len(cut) && cut[k].DPA < sg.end; k++ {
			if sg.host != host {
				return nil, false
			}
			if cut[k].DPA > start {
				n.segs = append(n.segs, segment{start, cut[k].DPA, sg.host})
			}
			start = max(start, cut[k].End())
		}
		if start < sg.end {
			n.segs = append(n.segs, segment{start, sg.end, sg.host})
		}
	}
	if l.table != nil {
		// The cut extents' ends were edges of l, so they lie on its grain.
		n.table, n.grainShift = slices.Clone(l.table), l.grainShift
		for _, e := range cut {
			for b := e.DPA >> n.grainShift; b < e.End()>>n.grainShift && b < uint64(len(n.table)); b++ {
				n.table[b] = 0
			}
		}
	}
	return n, true
}

// HostOf returns the host holding dpa, Shared for DPA held by several
// hosts, and ok=false for DPA nobody holds.
func (l *Layout) HostOf(dpa uint64) (int, bool) {
	if l.table != nil {
		b := dpa >> l.grainShift
		if b >= uint64(len(l.table)) || l.table[b] == 0 {
			return 0, false
		}
		return int(l.table[b]) - 2, true
	}
	i, found := slices.BinarySearchFunc(l.segs, dpa, func(s segment, d uint64) int {
		switch {
		case s.end <= d:
			return -1
		case s.start > d:
			return 1
		}
		return 0
	})
	if !found {
		return 0, false
	}
	return l.segs[i].host, true
}

// Extents returns the extents host holds, sorted by DPA; for Shared, the
// ranges several hosts hold. The slice is shared: do not modify it.
func (l *Layout) Extents(host int) []cci.Extent { return l.extents[host] }

// Hosts lists the hosts holding any extent, ascending (Shared excluded).
func (l *Layout) Hosts() []int {
	var hs []int
	for h := range l.extents {
		if h >= 0 {
			hs = append(hs, h)
		}
	}
	slices.Sort(hs)
	return hs
}

// LiveLayout is a Layout that can be replaced while collectors read it.
type LiveLayout struct{ p atomic.Pointer[Layout] }

// NewLiveLayout starts with l (nil means an empty layout).
func NewLiveLayout(l *Layout) *LiveLayout {
	if l == nil {
		l = NewLayout(nil)
	}
	v := &LiveLayout{}
	v.p.Store(l)
	return v
}

// Store replaces the layout.
func (v *LiveLayout) Store(l *Layout) { v.p.Store(l) }

// Load returns the current layout.
func (v *LiveLayout) Load() *Layout { return v.p.Load() }

// HostOf is Layout.HostOf on the current layout.
func (v *LiveLayout) HostOf(dpa uint64) (int, bool) { return v.p.Load().HostOf(dpa) }

// Extents is Layout.Extents on the current layout.
func (v *LiveLayout) Extents(host int) []cci.Extent { return v.p.Load().Extents(host) }
