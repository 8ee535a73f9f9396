package kv

import "container/list"

// lru is the plain least-recently-used Evictor the index uses until the
// daemon gives it kv/evict's hotness-aware one.
type lru struct {
	l  *list.List
	at map[uint64]*list.Element
}

type lruEntry struct{ id, size uint64 }

// NewLRU returns a least-recently-used Evictor.
func NewLRU() Evictor { return &lru{l: list.New(), at: map[uint64]*list.Element{}} }

func (p *lru) Add(id, size uint64, _ []Range) {
	if e, ok := p.at[id]; ok {
		p.l.MoveToBack(e)
		return
	}
	p.at[id] = p.l.PushBack(lruEntry{id, size})
}

func (p *lru) Touch(id uint64) {
	if e, ok := p.at[id]; ok {
		p.l.MoveToBack(e)
	}
}

func (p *lru) Remove(id uint64) {
	if e, ok := p.at[id]; ok {
		p.l.Remove(e)
		delete(p.at, id)
	}
}

func (p *lru) Victims(need uint64, skip func(uint64) bool) []uint64 {
	var out []uint64
	var got uint64
	for e := p.l.Front(); e != nil && got < need; e = e.Next() {
		en := e.Value.(lruEntry)
		if skip != nil && skip(en.id) {
			continue
		}
		out = append(out, en.id)
		got += en.size
	}
	return out
}

func (p *lru) Len() int { return p.l.Len() }

// RangePolicy is an eviction policy whose range type is R: kv/evict's
// Policy, with R = evict.Range, which is declared there without an
// import of this package.
type RangePolicy[R any] interface {
	Add(id uint64, size uint64, where []R)
	Touch(id uint64)
	Remove(id uint64)
	Victims(need uint64, skip func(id uint64) bool) []uint64
	Len() int
}

// Adapt makes a policy of another package's Range type an Evictor:
// kv.Adapt[evict.Range](evict.NewHot(heat, now)).
func Adapt[R ~struct{ DPA, Len uint64 }](p RangePolicy[R]) Evictor { return adapted[R]{p} }

type adapted[R ~struct{ DPA, Len uint64 }] struct{ RangePolicy[R] }

func (a adapted[R]) Add(id, size uint64, where []Range) {
	rs := make([]R, len(where))
	for i, r := range where {
		rs[i] = R(r)
	}
	a.RangePolicy.Add(id, size, rs)
}
