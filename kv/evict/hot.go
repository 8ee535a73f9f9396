package evict

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// HotConfig tunes NewHotConfig. Zero fields take the defaults noted.
type HotConfig struct {
	// HotAt is the heat density (decayed reads per 4 KiB unit, i.e. how
	// many times, decayed, the CHMU saw the whole block read) at or above
	// which a block counts as used now: Victims moves it to the recent end
	// instead of evicting it, as if the index had seen the reads the hosts
	// made through their DAX mappings. Default 0.01: any full read the
	// CHMU still remembers (at its decay of 0.5 per epoch, one read falls
	// below 0.01 after about 7 epochs), so the heat acts as a use detector
	// for reads the index never saw. Partial reads count pro rata: a
	// 4 KiB read of a 256 KiB block is 0.016, of an 80 MiB one 0.00005.
	HotAt float64
	// Window is how many candidates below HotAt Victims compares before it
	// picks (default 32): within them the coldest by score go first, so a
	// block the CHMU saw read a little outlives an older one nobody read.
	Window int
	// HalfLife is the decay of the recency term of the score (default 1 s,
	// the CHMU aggregator's default epoch with decay 0.5, so that heat and
	// recency are in the same unit: decayed uses).
	HalfLife time.Duration
	// MaxScan bounds the blocks one Victims call asks the CHMU about
	// (default 256); past it the walk continues in recency order without
	// asking, so a namespace where every block is hot costs O(MaxScan),
	// not O(blocks), per call, and a call that needs more blocks than
	// MaxScan takes the rest in LRU order.
	MaxScan int
}

func (c *HotConfig) defaults() {
	if c.HotAt <= 0 {
		c.HotAt = 0.01
	}
	if c.Window <= 0 {
		c.Window = 32
	}
	if c.HalfLife <= 0 {
		c.HalfLife = time.Second
	}
	if c.MaxScan <= 0 {
		c.MaxScan = 256
	}
}

// HotStats counts what a Hot policy did.
type HotStats struct {
	Lookups  uint64 // Heat.HeatOf calls
	Promoted uint64 // blocks moved to the recent end because the CHMU saw them hot
}

// Hot evicts the coldest block where cold combines the index's recency
// with the CHMU's heat.
//
// The recency order is the LRU list of the index's own uses. Victims walks
// it from the cold end and asks the CHMU about each block it passes: a
// block with heat density ≥ HotAt was read recently by somebody the index
// did not see, so it is moved to the recent end (promoted) and the walk
// goes on. Blocks below HotAt are candidates; once the candidates cover
// need and at least Window of them were seen, they are ordered by
//
//	score = density + 2^(−age/HalfLife)
//
// (decayed CHMU reads plus the decayed last use the index saw) and the
// lowest go first. Each call costs the blocks it returns plus at most
// Window more, and at most MaxScan heat look-ups; a promoted block is not
// looked at again until the whole list has passed it, so promotions are
// amortised O(1).
// Victims removes nothing, but its promotions do reorder the list: they
// record uses the index could not see.
type Hot struct {
	l     list
	heat  Heat
	now   func() time.Time
	cfg   HotConfig
	stats HotStats
	cands []*node // Victims' scratch, reused
}

// NewHot returns a hotness-aware policy with the default HotConfig. A nil
// h means no heat (the policy then orders by recency alone); a nil now
// means time.Now.
func NewHot(h Heat, now func() time.Time) Policy { return NewHotConfig(h, now, HotConfig{}) }

// NewHotConfig is NewHot with a configuration.
func NewHotConfig(h Heat, now func() time.Time, cfg HotConfig) *Hot {
	cfg.defaults()
	if now == nil {
		now = time.Now
	}
	p := &Hot{heat: h, now: now, cfg: cfg}
	p.l.init()
	return p
}

// Add records a committed block as just used.
func (p *Hot) Add(id, size uint64, where []Range) { p.l.add(id, size, where).used = p.now() }

// Touch records a use; unknown ids are ignored.
func (p *Hot) Touch(id uint64) {
	if n, ok := p.l.nodes[id]; ok {
		n.used = p.now()
		p.l.moveFront(n)
	}
}

// Remove forgets the block; unknown ids are ignored.
func (p *Hot) Remove(id uint64) { p.l.remove(id) }

// Len is the number of blocks.
func (p *Hot) Len() int { return len(p.l.nodes) }

// Stats returns the counters.
func (p *Hot) Stats() HotStats { return p.stats }

// density is the block's heat per 4 KiB unit it covers.
func (p *Hot) density(n *node) float64 {
	if p.heat == nil || len(n.where) == 0 {
		return 0
	}
	var h float64
	var units uint64
	for _, r := range n.where {
		if r.Len == 0 {
			continue
		}
		p.stats.Lookups++
		h += p.heat.HeatOf(r.DPA, r.Len)
		// Units covering the range, counting partial ones at either end,
		// as the CHMU does.
		units += (r.DPA+r.Len-1)/unit - r.DPA/unit + 1
	}
	if units == 0 {
		return 0
	}
	return h / float64(units)
}

// Victims returns the coldest blocks covering need; see Hot.
func (p *Hot) Victims(need uint64, skip func(uint64) bool) []uint64 {
	if need == 0 || len(p.l.nodes) == 0 {
		return nil
	}
	now := p.now()
	half := p.cfg.HalfLife.Seconds()
	cands := p.cands[:0]
	var promoted []*node
	var got uint64
	looked := 0
	// steps bounds the walk to one visit per block: promoted blocks move
	// to the front, behind every block not yet visited.
	steps := len(p.l.nodes)
	for n := p.l.root.prev; n != &p.l.root && steps > 0; steps-- {
		prev := n.prev
		if skip != nil && skip(n.id) {
			n = prev
			continue
		}
		if got >= need && len(cands) >= p.cfg.Window {
			break
		}
		// Ask the CHMU while within budget; past it, recency alone decides.
		n.heat = 0
		if looked < p.cfg.MaxScan {
			looked++
			d := p.density(n)
			if d >= p.cfg.HotAt {
				p.stats.Promoted++
				n.used = now
				p.l.moveFront(n)
				n.heat = d
				promoted = append(promoted, n)
				n = prev
				continue
			}
			n.heat = d
		}
		age := now.Sub(n.used).Seconds()
		n.heat += math.Exp2(-max(age, 0) / half)
		cands = append(cands, n)
		got += n.size
		n = prev
	}
	// Coldest first; ties keep recency order (older first), so without heat
	// this is exactly LRU.
	slices.SortStableFunc(cands, func(a, b *node) int { return cmp.Compare(a.heat, b.heat) })
	var out []uint64
	var sum uint64
	for _, n := range cands {
		if sum >= need {
			break
		}
		out = append(out, n.id)
		sum += n.size
	}
	// Not enough cold blocks: the hot ones go too, the least hot first.
	if sum < need {
		slices.SortStableFunc(promoted, func(a, b *node) int { return cmp.Compare(a.heat, b.heat) })
		for _, n := range promoted {
			if sum >= need {
				break
			}
			out = append(out, n.id)
			sum += n.size
		}
	}
	clear(cands)
	p.cands = cands[:0]
	return out
}
