package kv

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"time"

	"cxlpool/dcd"
)

// Session is one client's view of one namespace: the reservations and
// pins it holds, kept while its lease runs (each call renews it) and
// dropped when it is closed or the reaper finds the lease expired.
type Session struct {
	ix    *Index
	ns    *nsState
	ID    uint64
	Host  dcd.HostID
	Lease time.Duration

	// under ix.mu
	until    time.Time
	reserved map[uint64]*block
	pins     map[uint64]int
	npins    int
	closed   bool
	expired  bool
}

// PutResult is one Put item's outcome.
type PutResult struct {
	Block Block
	Err   error // ErrExists, ErrNoSpace, ErrInvalid, ErrBusy
}

// GetResult is one Get item's outcome.
type GetResult struct {
	Block Block
	Err   error // ErrNotFound, ErrBusy
}

// TokenHash is what the index keeps of a member's token.
func TokenHash(tok [TokenSize]byte) [sha256.Size]byte { return sha256.Sum256(tok[:]) }

// decoy is compared against when the namespace or member does not exist,
// so a refusal costs the same either way.
var decoy = sha256.Sum256([]byte("cxlpool kv decoy"))

// Open authenticates host with its token for namespace name and opens a
// session with the given lease (0: the default; clamped to 1 s – MaxLease).
// A refusal is ErrDenied whatever the reason (no such namespace, host not
// a member, wrong token), so a host learns nothing of namespaces it is not
// a member of.
func (ix *Index) Open(name string, host dcd.HostID, tok [TokenSize]byte, lease time.Duration) (*Session, error) {
	h := TokenHash(tok)
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.closed {
		return nil, fmt.Errorf("kv: index closed: %w", ErrUnavailable)
	}
	ns := ix.ns[name]
	want, member := decoy, false
	if ns != nil && !ns.deleting {
		want, member = ns.members[host]
	}
	if subtle.ConstantTimeCompare(h[:], want[:]) != 1 || !member {
		return nil, fmt.Errorf("kv: namespace %q for host %d: %w", name, host, ErrDenied)
	}
	switch {
	case lease <= 0:
		lease = ix.cfg.DefaultLease
	case lease < time.Second:
		lease = time.Second
	case lease > ix.cfg.MaxLease:
		lease = ix.cfg.MaxLease
	}
	ix.nextSess++
	s := &Session{ix: ix, ns: ns, ID: ix.nextSess, Host: host, Lease: lease, until: ix.cfg.Clock().Add(lease),
		reserved: map[uint64]*block{}, pins: map[uint64]int{}}
	ix.sessions[s.ID] = s
	return s, nil
}

// live checks the session under ix.mu and renews its lease.
func (s *Session) live() error {
	switch {
	case s.expired:
		return fmt.Errorf("kv: session %d: %w", s.ID, ErrExpired)
	case s.closed || s.ns.deleting:
		return fmt.Errorf("kv: session %d is closed: %w", s.ID, ErrUnavailable)
	}
	s.until = s.ix.cfg.Clock().Add(s.Lease)
	return nil
}

// Renew extends the session's lease.
func (s *Session) Renew() error {
	s.ix.mu.Lock()
	defer s.ix.mu.Unlock()
	return s.live()
}

// Namespace is the session's namespace name.
func (s *Session) Namespace() string { return s.ns.name }

// Chunks is the namespace's chunks now.
func (s *Session) Chunks() []ChunkInfo {
	s.ix.mu.Lock()
	defer s.ix.mu.Unlock()
	return s.ns.chunkInfos()
}

func (ns *nsState) chunkInfos() []ChunkInfo {
	out := make([]ChunkInfo, 0, len(ns.chunks))
	for _, c := range ns.chunks {
		out = append(out, c.info)
	}
	return out
}

// Stats is the namespace's numbers.
func (s *Session) Stats() (Stats, uint64) {
	s.ix.mu.Lock()
	defer s.ix.mu.Unlock()
	return s.ix.statsLocked(s.ns), s.ns.quota
}

func (ix *Index) statsLocked(ns *nsState) Stats {
	st := Stats{Blocks: uint64(len(ns.keys)), Used: ns.used, Reserved: ns.reserved, Capacity: ns.capacity(), Evictions: ns.evictions}
	for _, c := range ns.chunks {
		st.Free += c.space.size - c.space.used
	}
	for _, s := range ix.sessions {
		if s.ns == ns {
			st.Sessions++
		}
	}
	return st
}

func (b *block) loc() Block {
	return Block{ID: b.id, Gen: b.gen, Chunk: b.chunk.info.ID, Tag: b.chunk.info.Tag, Offset: b.off, Length: b.length}
}

// PutItem asks for Length bytes under Key; Seq is the block's place in
// its token sequence, if the client told it.
type PutItem struct {
	Key    []byte
	Length uint64
	Seq    Seq
}

// Seq is a block's place in the token sequence it caches, as a client
// tells it (wire FlagMeta) for a KV-aware router: the block hash of the
// block it continues and its token count. The index keeps it with the
// block and sends it in events; it never interprets it.
type Seq struct {
	HasParent bool   // Parent is set (false: a sequence's first block, or not told)
	Parent    uint64 // the previous block's 64-bit block hash
	Tokens    uint32 // tokens the block holds (0: not told)
}

func (q Seq) told() bool { return q.HasParent || q.Tokens != 0 }

// Put reserves space for each item. A key already committed or being put
// is ErrExists (the other writer wins). When the namespace is full it
// grows (up to its quota) or evicts cold unpinned blocks first.
func (s *Session) Put(ctx context.Context, items []PutItem) ([]PutResult, error) {
	ix := s.ix
	out := make([]PutResult, len(items))
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err := s.live(); err != nil {
		return nil, err
	}
	ns := s.ns
	var ids []byte
	var short []int // items that found no space
	for i, it := range items {
		switch {
		case len(it.Key) == 0 || len(it.Key) > MaxKey:
			out[i].Err = fmt.Errorf("kv: key of %d bytes (1–%d): %w", len(it.Key), MaxKey, ErrInvalid)
			continue
		case it.Length == 0 || it.Length > ns.chunkSize:
			out[i].Err = fmt.Errorf("kv: block of %d bytes (1–%d, the namespace's chunk size): %w", it.Length, ns.chunkSize, ErrInvalid)
			continue
		}
		if ns.keys[string(it.Key)] != nil || ns.pending[string(it.Key)] != nil {
			out[i].Err = fmt.Errorf("kv: key %x: %w", it.Key, ErrExists)
			continue
		}
		if len(s.reserved)+s.npins >= ix.cfg.MaxPerSession {
			out[i].Err = fmt.Errorf("kv: session holds %d reservations and pins, the limit: %w", ix.cfg.MaxPerSession, ErrBusy)
			continue
		}
		b, rec := ix.reserveLocked(s, string(it.Key), it.Length)
		ids = append(ids, rec...)
		if b == nil {
			short = append(short, i)
			continue
		}
		b.seq = it.Seq
		out[i].Block = b.loc()
	}
	for round := 0; len(short) > 0 && round < 4; round++ {
		var need uint64
		for _, i := range short {
			need += items[i].Length
		}
		if err := ix.makeRoomLocked(ctx, ns, need, &ids); err != nil || s.closed || ns.deleting {
			break
		}
		left := short[:0]
		for _, i := range short {
			if ns.keys[string(items[i].Key)] != nil || ns.pending[string(items[i].Key)] != nil {
				out[i].Err = fmt.Errorf("kv: key %x: %w", items[i].Key, ErrExists)
				continue
			}
			b, rec := ix.reserveLocked(s, string(items[i].Key), items[i].Length)
			ids = append(ids, rec...)
			if b == nil {
				left = append(left, i)
				continue
			}
			b.seq = items[i].Seq
			out[i].Block = b.loc()
		}
		short = left
	}
	for _, i := range short {
		out[i].Err = fmt.Errorf("kv: namespace %s has no room for %d bytes (capacity %d of quota %d, the rest pinned or reserved): %w",
			ns.name, items[i].Length, ns.capacity(), ns.quota, ErrNoSpace)
	}
	if len(ids) > 0 {
		// Not waited for: it only has to precede, in the log, any record
		// naming the ids, and every such record is appended later.
		if _, err := ix.wal.append(ids); err != nil {
			ix.log.Warn("kv: id record", "err", err)
		}
	}
	return out, nil
}

// reserveLocked allocates in the first chunk with room.
func (ix *Index) reserveLocked(s *Session, key string, n uint64) (*block, []byte) {
	ns := s.ns
	for _, c := range ns.chunks {
		if c.draining {
			continue
		}
		off, ok := c.space.alloc(n)
		if !ok {
			continue
		}
		id, rec := ns.newID()
		b := &block{id: id, gen: id, key: key, chunk: c, off: off, length: n, state: stReserved, owner: s}
		ns.blocks[id] = b
		ns.pending[key] = b
		ns.reserved += c.space.round(n)
		s.reserved[id] = b
		return b, rec
	}
	return nil, nil
}

// makeRoomLocked grows ns by a chunk if it may, else evicts at least
// need bytes of cold unpinned blocks; it drops ix.mu while it waits (the
// grant, the log). An error says neither was possible.
func (ix *Index) makeRoomLocked(ctx context.Context, ns *nsState, need uint64, ids *[]byte) error {
	if ix.cfg.Grow != nil && ns.capacity()+ns.chunkSize <= ns.quota && ix.cfg.Clock().Sub(ns.growFailed) >= growBackoff {
		err := ix.growLocked(ctx, ns)
		if err == nil {
			return nil
		}
		ns.growFailed = ix.cfg.Clock()
		ix.log.Warn("kv: namespace could not grow; evicting", "namespace", ns.name, "err", err)
	}
	victims := ns.ev.Victims(need, func(id uint64) bool {
		b := ns.blocks[id]
		return b == nil || b.state != stCommitted || b.pins > 0 || b.chunk.draining
	})
	if len(victims) == 0 {
		return ErrNoSpace
	}
	bs := make([]*block, 0, len(victims))
	for _, id := range victims {
		b := ns.blocks[id]
		if b == nil || b.state != stCommitted || b.pins > 0 {
			continue // a policy that ignored skip
		}
		ns.forget(b)
		b.state = stFreeing
		bs = append(bs, b)
	}
	if err := ix.freeLocked(ns, bs, ids); err != nil {
		return err
	}
	ix.emitLocked(EventRemoved, ns, ReasonEvict, bs)
	ns.evictions += uint64(len(bs))
	return nil
}

// freeLocked logs the freeing of bs (already forgotten, state stFreeing)
// and, once durable, gives their space back (or keeps it for pinned
// ones). It drops ix.mu while it waits. On a log failure the blocks come
// back as they were.
func (ix *Index) freeLocked(ns *nsState, bs []*block, pre *[]byte) error {
	if len(bs) == 0 {
		return nil
	}
	ids := make([]uint64, len(bs))
	for i, b := range bs {
		ids[i] = b.id
	}
	var rec []byte
	if pre != nil {
		rec, *pre = *pre, nil
	}
	rec = freeRecord(rec, ns.name, ids)
	bt, err := ix.wal.append(rec)
	if err == nil {
		ix.mu.Unlock()
		err = bt.wait()
		ix.mu.Lock()
	}
	for _, b := range bs {
		if err != nil {
			// Not durable: it never happened.
			b.state = stCommitted
			if ns.keys[b.key] == nil {
				ns.keys[b.key] = b
				ns.used += b.chunk.space.round(b.length)
				ns.ev.Add(b.id, b.length, ns.ranges(b))
			}
			continue
		}
		if b.pins > 0 {
			b.state = stZombie
			continue
		}
		ns.release(b)
	}
	return err
}

// growLocked adds a chunk through cfg.Grow, one at a time per namespace.
func (ix *Index) growLocked(ctx context.Context, ns *nsState) error {
	if f := ns.grow; f != nil {
		ix.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
		}
		ix.mu.Lock()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return f.err
	}
	f := &growFlight{done: make(chan struct{})}
	ns.grow = f
	ix.mu.Unlock()
	f.err = ix.cfg.Grow(ctx, ns.name)
	ix.mu.Lock()
	ns.grow = nil
	close(f.done)
	return f.err
}

// Commit makes reservations visible, each atomically, once durable.
func (s *Session) Commit(ids []uint64) ([]error, error) {
	ix := s.ix
	out := make([]error, len(ids))
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err := s.live(); err != nil {
		if s.expired {
			for i := range out {
				out[i] = err
			}
			return out, nil
		}
		return nil, err
	}
	ns := s.ns
	var rec []byte
	var bs []*block
	for i, id := range ids {
		b := s.reserved[id]
		if b == nil || b.state != stReserved {
			out[i] = fmt.Errorf("kv: block %d is no reservation of this session: %w", id, ErrNotFound)
			continue
		}
		b.state = stCommitting
		delete(s.reserved, id)
		rec = commitRecord(rec, ns.name, b)
		bs = append(bs, b)
	}
	if len(bs) == 0 {
		return out, nil
	}
	bt, err := ix.wal.append(rec)
	if err == nil {
		ix.mu.Unlock()
		err = bt.wait()
		ix.mu.Lock()
	}
	j := 0
	stored := bs[:0:0]
	for i := range ids {
		if out[i] != nil {
			continue
		}
		b := bs[j]
		j++
		if ns.blocks[b.id] != b {
			// Its chunk was lost meanwhile (LoseChunks): the bytes are gone.
			out[i] = fmt.Errorf("kv: block %d: its chunk's capacity was lost: %w", b.id, ErrStale)
			continue
		}
		size := b.chunk.space.round(b.length)
		if err != nil {
			// Not durable: still a reservation, unless the session went.
			out[i] = err
			b.state = stReserved
			if s.closed {
				ns.forget(b)
				ns.release(b)
				ns.reserved -= size
			} else {
				s.reserved[b.id] = b
			}
			continue
		}
		b.state = stCommitted
		b.owner = nil
		delete(ns.pending, b.key)
		ns.keys[b.key] = b
		ns.reserved -= size
		ns.used += size
		ns.ev.Add(b.id, b.length, ns.ranges(b))
		stored = append(stored, b)
	}
	ix.emitLocked(EventStored, ns, "", stored)
	return out, nil
}

// Abort gives reservations back.
func (s *Session) Abort(ids []uint64) ([]error, error) {
	ix := s.ix
	out := make([]error, len(ids))
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err := s.live(); err != nil {
		return nil, err
	}
	for i, id := range ids {
		b := s.reserved[id]
		if b == nil || b.state != stReserved {
			out[i] = fmt.Errorf("kv: block %d is no reservation of this session: %w", id, ErrNotFound)
			continue
		}
		delete(s.reserved, id)
		s.ns.dropReservation(b)
	}
	return out, nil
}

// dropReservation frees an uncommitted block at once: it was never
// logged, so nothing durable names its space.
func (ns *nsState) dropReservation(b *block) {
	ns.forget(b)
	ns.reserved -= b.chunk.space.round(b.length)
	ns.release(b)
}

// Get locates committed blocks; pin pins each found one for the session.
func (s *Session) Get(keys [][]byte, pin bool) ([]GetResult, error) {
	ix := s.ix
	out := make([]GetResult, len(keys))
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err := s.live(); err != nil {
		return nil, err
	}
	ns := s.ns
	for i, k := range keys {
		b := ns.keys[string(k)]
		if b == nil || b.state != stCommitted {
			ns.misses++ // Hotness (hotness.go)
			out[i].Err = fmt.Errorf("kv: key %x: %w", k, ErrNotFound)
			continue
		}
		ns.hits++
		if pin {
			if len(s.reserved)+s.npins >= ix.cfg.MaxPerSession {
				out[i].Err = fmt.Errorf("kv: session holds %d reservations and pins, the limit: %w", ix.cfg.MaxPerSession, ErrBusy)
				continue
			}
			b.pins++
			s.pins[b.id]++
			s.npins++
		}
		ns.ev.Touch(b.id)
		out[i].Block = b.loc()
	}
	return out, nil
}

// Exists reports, per key, nil or ErrNotFound.
func (s *Session) Exists(keys [][]byte) ([]error, error) {
	ix := s.ix
	out := make([]error, len(keys))
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err := s.live(); err != nil {
		return nil, err
	}
	for i, k := range keys {
		b := s.ns.keys[string(k)]
		if b == nil || b.state != stCommitted {
			out[i] = fmt.Errorf("kv: key %x: %w", k, ErrNotFound)
			continue
		}
		s.ns.ev.Touch(b.id)
	}
	return out, nil
}

// Delete removes committed keys, durably. A pinned block's space is kept
// until its last pin goes.
func (s *Session) Delete(keys [][]byte) ([]error, error) {
	ix := s.ix
	out := make([]error, len(keys))
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err := s.live(); err != nil {
		return nil, err
	}
	ns := s.ns
	var bs []*block
	var at []int
	for i, k := range keys {
		b := ns.keys[string(k)]
		if b == nil || b.state != stCommitted {
			out[i] = fmt.Errorf("kv: key %x: %w", k, ErrNotFound)
			continue
		}
		ns.forget(b)
		b.state = stFreeing
		bs = append(bs, b)
		at = append(at, i)
	}
	if err := ix.freeLocked(ns, bs, nil); err != nil {
		for _, i := range at {
			out[i] = err
		}
	} else {
		ix.emitLocked(EventRemoved, ns, ReasonDelete, bs)
	}
	return out, nil
}

// Unpin drops one pin of each block.
func (s *Session) Unpin(ids []uint64) ([]error, error) {
	ix := s.ix
	out := make([]error, len(ids))
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err := s.live(); err != nil {
		return nil, err
	}
	for i, id := range ids {
		if s.pins[id] == 0 {
			out[i] = fmt.Errorf("kv: block %d is not pinned by this session: %w", id, ErrNotFound)
			continue
		}
		s.unpinLocked(id)
	}
	return out, nil
}

func (s *Session) unpinLocked(id uint64) {
	if s.pins[id]--; s.pins[id] == 0 {
		delete(s.pins, id)
	}
	s.npins--
	ns := s.ns
	b := ns.blocks[id]
	if b == nil {
		return
	}
	if b.pins--; b.pins == 0 && b.state == stZombie {
		ns.release(b)
	}
}

// BlockGen names a located block.
type BlockGen struct{ ID, Gen uint64 }

// Check reports, per block, nil if it is still the committed block it was
// when located, else ErrStale.
func (s *Session) Check(items []BlockGen) ([]error, error) {
	ix := s.ix
	out := make([]error, len(items))
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err := s.live(); err != nil {
		return nil, err
	}
	for i, it := range items {
		b := s.ns.blocks[it.ID]
		if b == nil || b.gen != it.Gen || (b.state != stCommitted && !(b.state == stZombie && s.pins[b.id] > 0)) {
			out[i] = fmt.Errorf("kv: block %d generation %d: %w", it.ID, it.Gen, ErrStale)
		}
	}
	return out, nil
}

// Close ends the session: its pins are dropped and its uncommitted
// reservations freed.
func (s *Session) Close() {
	s.ix.mu.Lock()
	defer s.ix.mu.Unlock()
	s.ix.closeLocked(s, false)
}

func (ix *Index) closeLocked(s *Session, expired bool) {
	if s.closed {
		return
	}
	s.closed, s.expired = true, expired
	delete(ix.sessions, s.ID)
	for id, b := range s.reserved {
		if b.state == stReserved {
			s.ns.dropReservation(b)
		}
		delete(s.reserved, id)
	}
	for id, n := range s.pins {
		for range n {
			s.unpinLocked(id)
		}
	}
}

// Reap closes every session whose lease ran out by now and returns how
// many it closed. The daemon calls it periodically (RunReaper).
func (ix *Index) Reap(now time.Time) int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	n := 0
	for _, s := range ix.sessions {
		if now.After(s.until) {
			ix.log.Info("kv: session lease expired", "namespace", s.ns.name, "host", s.Host, "session", s.ID,
				"reservations", len(s.reserved), "pins", s.npins)
			ix.closeLocked(s, true)
			n++
		}
	}
	return n
}

// RunReaper reaps every interval until ctx ends, and compacts the log
// when it has grown.
func (ix *Index) RunReaper(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			ix.Reap(ix.cfg.Clock())
			ix.maybeCompact()
		}
	}
}
