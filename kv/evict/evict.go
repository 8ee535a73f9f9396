// Package evict orders the committed blocks of a KV namespace for eviction.
//
// Two policies implement Policy: NewLRU, plain least-recently-used by the
// index's own view of use (commits, get/exists hits, pins), and NewHot,
// which combines that recency with the CHMU's hot-page counts for the
// block's device physical addresses. The difference matters because the
// index does not see most reads: a host that already holds a block's
// location re-reads it straight from its DAX mapping without asking the
// index, so a block every host reads all the time can look, to the index,
// as if nobody had used it since its commit. The CHMU counts every access
// in the device, so its heat is the only evidence of those reads.
//
// Both policies keep one node per block in an intrusive doubly linked list
// (most recently used at the front) and a map from id to node: Add, Touch
// and Remove are O(1); Victims walks from the cold end and is O(victims)
// for LRU and O(victims + window) heat look-ups for Hot, amortised O(1)
// per block it returns (see Hot). Memory is one node per block plus a copy
// of the block's ranges.
//
// Policies are not safe for concurrent use: the kv index calls them under
// its own lock. The package does not import package kv.
package evict

import "time"

// Range is a piece of a block in device physical address space (DPA).
type Range struct{ DPA, Len uint64 }

// Heat is the CHMU's view: the decayed access count of the 4 KiB units
// covering [dpa, dpa+length), summed; 0 where nothing is tracked.
// hmu's service implements it as HeatOf.
type Heat interface {
	HeatOf(dpa, length uint64) float64
}

// HeatFunc adapts a function to Heat.
type HeatFunc func(dpa, length uint64) float64

// HeatOf calls f.
func (f HeatFunc) HeatOf(dpa, length uint64) float64 { return f(dpa, length) }

// Policy orders committed blocks for eviction. Not safe for concurrent
// use: the kv index calls it under its own lock.
type Policy interface {
	Add(id uint64, size uint64, where []Range) // a block became visible (commit)
	Touch(id uint64)                           // a get/exists hit, or a pin
	Remove(id uint64)                          // deleted or evicted
	// Victims returns coldest-first block ids whose sizes sum to at least
	// need (or all it has), never one for which skip(id) is true (pinned,
	// leased); it does not remove them.
	Victims(need uint64, skip func(id uint64) bool) []uint64
	Len() int
}

// unit is the CHMU granule Heat's counts are per: heat divided by the
// number of units a block covers is its density, the decayed number of
// times each of its bytes was read.
const unit = 4096

// node is one block. The list is circular through the sentinel.
type node struct {
	prev, next *node
	id, size   uint64
	where      []Range
	used       time.Time // last use the policy knows of (Hot only)
	heat       float64   // scratch for Victims: density at the last look
}

// list is the recency order shared by both policies.
type list struct {
	root  node // sentinel: root.next is the most recent, root.prev the coldest
	nodes map[uint64]*node
}

func (l *list) init() {
	l.root.next, l.root.prev = &l.root, &l.root
	l.nodes = make(map[uint64]*node)
}

func (l *list) pushFront(n *node) {
	n.prev, n.next = &l.root, l.root.next
	l.root.next.prev = n
	l.root.next = n
}

func (l *list) unlink(n *node) {
	n.prev.next, n.next.prev = n.next, n.prev
	n.prev, n.next = nil, nil
}

func (l *list) moveFront(n *node) {
	if l.root.next == n {
		return
	}
	l.unlink(n)
	l.pushFront(n)
}

// add inserts or, for an id already present (a re-commit of the same id,
// which the index never does), replaces in place and counts as a use.
func (l *list) add(id, size uint64, where []Range) *node {
	if n, ok := l.nodes[id]; ok {
		n.size, n.where = size, cloneRanges(where)
		l.moveFront(n)
		return n
	}
	n := &node{id: id, size: size, where: cloneRanges(where)}
	l.nodes[id] = n
	l.pushFront(n)
	return n
}

func (l *list) remove(id uint64) {
	if n, ok := l.nodes[id]; ok {
		l.unlink(n)
		delete(l.nodes, id)
	}
}

// cloneRanges copies where so the caller may reuse its slice; an empty
// input keeps no allocation.
func cloneRanges(where []Range) []Range {
	if len(where) == 0 {
		return nil
	}
	return append(make([]Range, 0, len(where)), where...)
}

// LRU evicts the block the index used least recently.
type LRU struct{ l list }

// NewLRU returns an empty LRU policy.
func NewLRU() Policy {
	p := &LRU{}
	p.l.init()
	return p
}

// Add records a committed block as just used.
func (p *LRU) Add(id, size uint64, where []Range) { p.l.add(id, size, where) }

// Touch moves the block to the most recent end; unknown ids are ignored.
func (p *LRU) Touch(id uint64) {
	if n, ok := p.l.nodes[id]; ok {
		p.l.moveFront(n)
	}
}

// Remove forgets the block; unknown ids are ignored.
func (p *LRU) Remove(id uint64) { p.l.remove(id) }

// Len is the number of blocks.
func (p *LRU) Len() int { return len(p.l.nodes) }

// Victims walks from the least recently used end.
func (p *LRU) Victims(need uint64, skip func(uint64) bool) []uint64 {
	var out []uint64
	var got uint64
	for n := p.l.root.prev; n != &p.l.root && got < need; n = n.prev {
		if skip != nil && skip(n.id) {
			continue
		}
		out = append(out, n.id)
		got += n.size
	}
	return out
}
