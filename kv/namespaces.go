package kv

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"slices"

	"cxlpool/dcd"
)

// The index's namespace operations, used by Service: each is one durable
// log record (or none, on refusal).

// logWait appends rec and waits for it; the caller holds ix.mu and keeps
// it (namespace changes are rare: holding the lock orders them simply).
func (ix *Index) logWait(rec []byte) error {
	bt, err := ix.wal.append(rec)
	if err != nil {
		return err
	}
	return bt.wait()
}

func (ix *Index) nsLocked(name string) (*nsState, error) {
	ns := ix.ns[name]
	if ns == nil {
		return nil, fmt.Errorf("kv: namespace %q: %w", name, ErrNotFound)
	}
	return ns, nil
}

// CreateNamespace records a new, empty namespace.
func (ix *Index) CreateNamespace(name string, chunkSize, quota uint64) error {
	if !validName(name) {
		return fmt.Errorf("kv: namespace name %q: 1–%d of a-z, 0-9, and -_. after the first: %w", name, MaxNameLen, ErrInvalid)
	}
	if chunkSize == 0 || quota < chunkSize {
		return fmt.Errorf("kv: chunk size %d and quota %d: the quota must hold at least one chunk: %w", chunkSize, quota, ErrInvalid)
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.ns[name] != nil {
		return fmt.Errorf("kv: namespace %q exists: %w", name, ErrConflict)
	}
	r := nsRecord{Name: name, ChunkSize: chunkSize, Quota: quota, Created: ix.cfg.Clock().UTC()}
	ns := ix.newNS(r)
	ns.idsUpto = ns.next + idStep
	if err := ix.logWait(idsRecord(jsonRecord(nil, recNamespace, r), name, ns.idsUpto)); err != nil {
		return err
	}
	ix.ns[name] = ns
	return nil
}

// SetQuota changes a namespace's quota (Service shrinks it to fit first).
func (ix *Index) SetQuota(name string, quota uint64) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ns, err := ix.nsLocked(name)
	if err != nil {
		return err
	}
	if quota < ns.chunkSize {
		return fmt.Errorf("kv: quota %d under one chunk of %d: %w", quota, ns.chunkSize, ErrInvalid)
	}
	if err := ix.logWait(jsonRecord(nil, recNamespace, nsRecord{Name: name, ChunkSize: ns.chunkSize, Quota: quota, Created: ns.created})); err != nil {
		return err
	}
	ns.quota = quota
	return nil
}

// SetMember records host as a member with its token (replacing an older
// token).
func (ix *Index) SetMember(name string, host dcd.HostID, tok [TokenSize]byte) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ns, err := ix.nsLocked(name)
	if err != nil {
		return err
	}
	h := TokenHash(tok)
	if err := ix.logWait(jsonRecord(nil, recMember, memberRecord{NS: name, Host: host, Hash: h[:]})); err != nil {
		return err
	}
	ns.members[host] = h
	return nil
}

// SetRack records the rack the namespace is exported to, with its token
// (replacing an older rack and token): it authenticates as RackHost.
func (ix *Index) SetRack(name, rack string, tok [TokenSize]byte) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ns, err := ix.nsLocked(name)
	if err != nil {
		return err
	}
	h := TokenHash(tok)
	if err := ix.logWait(jsonRecord(nil, recMember, memberRecord{NS: name, Host: RackHost, Hash: h[:], Client: rack})); err != nil {
		return err
	}
	ns.members[RackHost], ns.rack = h, rack
	// A new token ends the old one's sessions.
	for _, s := range ix.sessions {
		if s.ns == ns && s.Host == RackHost {
			ix.closeLocked(s, false)
		}
	}
	return nil
}

// RackToken is the hash of the rack's token and the rack's name
// (ok false: the namespace is not exported).
func (ix *Index) RackToken(name string) (hash [sha256.Size]byte, rack string, ok bool, err error) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ns, err := ix.nsLocked(name)
	if err != nil {
		return hash, "", false, err
	}
	hash, ok = ns.members[RackHost]
	return hash, ns.rack, ok, nil
}

// RemoveMember forgets host and closes its sessions.
func (ix *Index) RemoveMember(name string, host dcd.HostID) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ns, err := ix.nsLocked(name)
	if err != nil {
		return err
	}
	if _, ok := ns.members[host]; !ok {
		return nil
	}
	if err := ix.logWait(jsonRecord(nil, recMemberGone, memberRecord{NS: name, Host: host})); err != nil {
		return err
	}
	delete(ns.members, host)
	for _, s := range ix.sessions {
		if s.ns == ns && s.Host == host {
			ix.closeLocked(s, false)
		}
	}
	return nil
}

// AddChunk records a chunk every member holds.
func (ix *Index) AddChunk(name string, c ChunkInfo) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ns, err := ix.nsLocked(name)
	if err != nil {
		return err
	}
	if ns.chunk(c.ID) != nil {
		return nil
	}
	if c.Size == 0 || c.Size%ix.cfg.Align != 0 {
		return fmt.Errorf("kv: chunk %d of %d bytes, not a multiple of %d: %w", c.ID, c.Size, ix.cfg.Align, ErrInvalid)
	}
	if err := ix.logWait(jsonRecord(nil, recChunkAdd, chunkRecord{NS: name, ID: c.ID, Tag: c.Tag, Size: c.Size, Extents: c.Extents})); err != nil {
		return err
	}
	ns.chunks = append(ns.chunks, &chunkState{info: c, space: newSpace(c.Size, ix.cfg.Align)})
	return nil
}

// DrainChunk empties a chunk for removal: no new reservation goes there,
// its committed unpinned blocks are evicted (durably). It fails with
// ErrPinned while pinned or reserved blocks remain in it (the chunk stays
// draining; Undrain takes it back).
func (ix *Index) DrainChunk(name string, id dcd.ChunkID) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ns, err := ix.nsLocked(name)
	if err != nil {
		return err
	}
	c := ns.chunk(id)
	if c == nil {
		return fmt.Errorf("kv: chunk %d of namespace %s: %w", id, name, ErrNotFound)
	}
	c.draining = true
	var bs []*block
	busy := 0
	for _, b := range ns.blocks {
		if b.chunk != c {
			continue
		}
		if b.state == stCommitted && b.pins == 0 {
			ns.forget(b)
			b.state = stFreeing
			bs = append(bs, b)
			continue
		}
		busy++
	}
	if err := ix.freeLocked(ns, bs, nil); err != nil {
		return err
	}
	if !ns.deleting { // a namespace being deleted said Cleared already
		ix.emitLocked(EventRemoved, ns, ReasonShrink, bs)
	}
	ns.evictions += uint64(len(bs))
	if busy > 0 || c.space.used > 0 {
		return fmt.Errorf("kv: chunk %d still holds %d pinned, reserved or committing blocks: %w", id, busy, ErrPinned)
	}
	return nil
}

// Undrain lets a draining chunk take reservations again.
func (ix *Index) Undrain(name string, id dcd.ChunkID) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ns := ix.ns[name]; ns != nil {
		if c := ns.chunk(id); c != nil {
			c.draining = false
		}
	}
}

// RemoveChunk forgets a drained, empty chunk.
func (ix *Index) RemoveChunk(name string, id dcd.ChunkID) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ns, err := ix.nsLocked(name)
	if err != nil {
		return err
	}
	c := ns.chunk(id)
	if c == nil {
		return nil
	}
	if c.space.used > 0 || !c.draining {
		return fmt.Errorf("kv: chunk %d is not drained: %w", id, ErrConflict)
	}
	if err := ix.logWait(jsonRecord(nil, recChunkRemove, chunkRecord{NS: name, ID: id})); err != nil {
		return err
	}
	ns.chunks = slices.DeleteFunc(ns.chunks, func(x *chunkState) bool { return x == c })
	return nil
}

// ColdestChunks orders a namespace's chunks coldest first: empty ones,
// then by the mean eviction rank of their blocks (the policy's order).
func (ix *Index) ColdestChunks(name string) ([]dcd.ChunkID, error) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ns, err := ix.nsLocked(name)
	if err != nil {
		return nil, err
	}
	order := ns.ev.Victims(^uint64(0), nil)
	rank := map[*chunkState]float64{}
	count := map[*chunkState]float64{}
	for i, id := range order {
		if b := ns.blocks[id]; b != nil {
			rank[b.chunk] += float64(i)
			count[b.chunk]++
		}
	}
	score := func(c *chunkState) float64 {
		if count[c] == 0 {
			return -1
		}
		return rank[c] / count[c]
	}
	cs := slices.Clone(ns.chunks)
	slices.SortStableFunc(cs, func(a, b *chunkState) int {
		switch sa, sb := score(a), score(b); {
		case sa < sb:
			return -1
		case sa > sb:
			return 1
		}
		return 0
	})
	out := make([]dcd.ChunkID, len(cs))
	for i, c := range cs {
		out[i] = c.info.ID
	}
	return out, nil
}

// BeginDelete stops a namespace taking sessions and closes its sessions;
// DeleteNamespace then forgets it once its chunks are removed.
func (ix *Index) BeginDelete(name string) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ns, err := ix.nsLocked(name)
	if err != nil {
		return err
	}
	if !ns.deleting && ix.ev != nil && !ix.closed {
		// From here no session can reach any of its blocks: a router
		// forgets them all at once, not chunk by chunk as they drain.
		ix.ev.emit(Event{Kind: EventCleared, Namespace: name})
	}
	ns.deleting = true
	for _, s := range ix.sessions {
		if s.ns == ns {
			ix.closeLocked(s, false)
		}
	}
	return nil
}

// DeleteNamespace forgets a namespace with no chunks left.
func (ix *Index) DeleteNamespace(name string) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ns, err := ix.nsLocked(name)
	if err != nil {
		return err
	}
	if len(ns.chunks) > 0 {
		return fmt.Errorf("kv: namespace %s still has %d chunks: %w", name, len(ns.chunks), ErrConflict)
	}
	if err := ix.logWait(jsonRecord(nil, recNSDelete, nsRecord{Name: name})); err != nil {
		return err
	}
	delete(ix.ns, name)
	return nil
}

// Namespace is a snapshot of one namespace.
func (ix *Index) Namespace(name string) (Namespace, error) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ns, err := ix.nsLocked(name)
	if err != nil {
		return Namespace{}, err
	}
	return ix.viewLocked(ns), nil
}

// Namespaces is a snapshot of every namespace, by name.
func (ix *Index) Namespaces() []Namespace {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	out := make([]Namespace, 0, len(ix.ns))
	for _, ns := range ix.ns {
		out = append(out, ix.viewLocked(ns))
	}
	slices.SortFunc(out, func(a, b Namespace) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

func (ix *Index) viewLocked(ns *nsState) Namespace {
	v := Namespace{Name: ns.name, ChunkSize: ns.chunkSize, Quota: ns.quota, Created: ns.created, Chunks: ns.chunkInfos(),
		Stats: ix.statsLocked(ns)}
	for h := range ns.members {
		if h != RackHost {
			v.Members = append(v.Members, h)
		}
	}
	if _, ok := ns.members[RackHost]; ok {
		v.Rack = ns.rack
	}
	slices.Sort(v.Members)
	return v
}

// Verify checks the index's invariants (tests, and the daemon's
// consistency check): in every chunk the live blocks do not overlap, and
// they and the free spans add up to the chunk; the namespace's used and
// reserved bytes are its committed and uncommitted blocks'.
func (ix *Index) Verify() error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for _, ns := range ix.ns {
		per := map[*chunkState][]span{}
		var used, reserved uint64
		for _, b := range ns.blocks {
			r := b.chunk.space.round(b.length)
			per[b.chunk] = append(per[b.chunk], span{b.off, r})
			switch b.state {
			case stCommitted:
				used += r
			case stReserved, stCommitting:
				reserved += r
			}
		}
		if used != ns.used || reserved != ns.reserved {
			return fmt.Errorf("kv: namespace %s counts %d used and %d reserved, its blocks %d and %d", ns.name, ns.used, ns.reserved, used, reserved)
		}
		for _, c := range ns.chunks {
			spans := append(per[c], c.space.free...)
			slices.SortFunc(spans, func(a, b span) int {
				switch {
				case a.off < b.off:
					return -1
				case a.off > b.off:
					return 1
				}
				return 0
			})
			var at uint64
			for _, s := range spans {
				if s.off != at {
					return fmt.Errorf("kv: chunk %d of %s: span at %#x where %#x was expected (overlap or leak)", c.info.ID, ns.name, s.off, at)
				}
				at += s.len
			}
			if at != c.space.size {
				return fmt.Errorf("kv: chunk %d of %s: blocks and free space cover %#x of %#x", c.info.ID, ns.name, at, c.space.size)
			}
		}
	}
	return nil
}

// ReasonLost: the pool memory behind the blocks is gone (the device no
// longer holds their chunk's capacity: the in-process virtual box died
// with the daemon, or a device lost it), so their locations would point
// at memory that is not theirs.
const ReasonLost = "lost"

// LoseChunks forgets chunks whose capacity the device no longer holds,
// with every block in them, durably (one free record and the chunk
// removals, in one batch), and announces it: Cleared (reason lost) when
// nothing of the namespace is left, else Removed of those blocks. Pins and
// reservations in them end with the blocks (their bytes are gone either
// way); a session's later CHECK of such a block answers stale.
func (ix *Index) LoseChunks(name string, ids []dcd.ChunkID) (blocks int, err error) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ns, err := ix.nsLocked(name)
	if err != nil {
		return 0, err
	}
	lost := map[*chunkState]bool{}
	for _, id := range ids {
		if c := ns.chunk(id); c != nil {
			lost[c] = true
		}
	}
	if len(lost) == 0 {
		return 0, nil
	}
	var gone, visible []*block
	var freed []uint64
	for _, b := range ns.blocks {
		if !lost[b.chunk] {
			continue
		}
		gone = append(gone, b)
		if b.state == stCommitted || b.state == stCommitting {
			visible = append(visible, b)
		}
		if b.state != stReserved {
			freed = append(freed, b.id) // the log may name it committed
		}
	}
	slices.SortFunc(visible, func(a, b *block) int { return cmp.Compare(a.id, b.id) })
	var rec []byte
	if len(freed) > 0 {
		rec = freeRecord(rec, ns.name, freed)
	}
	for c := range lost {
		rec = jsonRecord(rec, recChunkRemove, chunkRecord{NS: name, ID: c.info.ID})
	}
	if err := ix.logWait(rec); err != nil {
		return 0, err
	}
	for _, b := range gone {
		if b.state == stReserved || b.state == stCommitting {
			ns.reserved -= b.chunk.space.round(b.length)
		}
		ns.forget(b)
		delete(ns.blocks, b.id)
		if b.owner != nil {
			delete(b.owner.reserved, b.id)
		}
		b.state = stZombie // a commit waiting on the log finds it gone
	}
	for _, s := range ix.sessions {
		if s.ns != ns {
			continue
		}
		for id, n := range s.pins {
			if ns.blocks[id] == nil {
				delete(s.pins, id)
				s.npins -= n
			}
		}
	}
	ns.chunks = slices.DeleteFunc(ns.chunks, func(c *chunkState) bool { return lost[c] })
	ns.evictions += uint64(len(visible))
	if len(ns.keys) == 0 && !ns.deleting {
		if ix.ev != nil && !ix.closed {
			ix.ev.emit(Event{Kind: EventCleared, Namespace: name, Reason: ReasonLost})
		}
	} else {
		ix.emitLocked(EventRemoved, ns, ReasonLost, visible)
	}
	return len(visible), nil
}
