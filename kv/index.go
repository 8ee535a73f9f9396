package kv

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"cxlpool/dcd"
	"cxlpool/fabric/cci"
)

// IndexConfig holds the index's dependencies and limits.
type IndexConfig struct {
	Dir    string // holds kv.wal; created 0700
	Logger *slog.Logger
	Clock  func() time.Time
	// NoSync skips fsync (benchmarks of the index alone; never in the
	// daemon).
	NoSync bool
	// Align is the allocation unit in bytes (default 4096: the CHMU's
	// tracking unit and every host's page).
	Align uint64
	// NewEvictor returns a namespace's eviction policy (default NewLRU).
	NewEvictor func(ns string) Evictor
	// Grow, if set, is asked to add a chunk to a full namespace that is
	// under its quota (Service.grow); it returns once the chunk is in the
	// index (AddChunk) or with why not.
	Grow func(ctx context.Context, ns string) error
	// MaxPerSession bounds a session's reservations plus pins (65536).
	MaxPerSession int
	// DefaultLease and MaxLease bound sessions' leases (30 s, 300 s).
	DefaultLease, MaxLease time.Duration
	// CompactAt is the log size from which the reaper's pass rewrites
	// it as a snapshot of the state (64 MiB), once it is also twice the
	// last snapshot's size.
	CompactAt int64
	// Events, if set, receives BlockStored/BlockRemoved/Cleared events
	// (events.go) once each change is durable, through a queue of
	// EventQueue (DefaultEventQueue) that drops when full.
	Events     EventSink
	EventQueue int
	// ResyncLater: OpenIndex does not send the state (Cleared, Stored);
	// the owner calls Resync once it has checked it (the daemon: after
	// dropping chunks whose capacity is lost, so a router never hears of
	// blocks whose memory is gone).
	ResyncLater bool
}

// Index is the KV index of every namespace. Methods are safe for
// concurrent use.
type Index struct {
	cfg IndexConfig
	log *slog.Logger
	wal *wal

	mu       sync.Mutex
	ns       map[string]*nsState
	sessions map[uint64]*Session
	nextSess uint64
	closed   bool
	lastSnap int64 // size of the last snapshot written
	ev       *events
}

type blockState uint8

const (
	stReserved   blockState = iota // space taken, not visible
	stCommitting                   // commit record appended, not durable yet
	stCommitted                    // visible under its key
	stFreeing                      // deleted or evicted: free record appended, not durable yet
	stZombie                       // freed in the log, pinned: space kept until the last unpin
)

type block struct {
	id, gen uint64
	key     string
	chunk   *chunkState
	off     uint64
	length  uint64
	state   blockState
	pins    int
	owner   *Session // while reserved
	seq     Seq      // what the client told of its token sequence
}

type chunkState struct {
	info     ChunkInfo
	space    *space
	draining bool // being emptied for removal: no new allocations
}

type nsState struct {
	name      string
	chunkSize uint64
	quota     uint64
	created   time.Time
	members   map[dcd.HostID][sha256.Size]byte // host → hash of its token (RackHost: the rack's)
	rack      string                           // the rack RackHost's token belongs to
	chunks    []*chunkState
	keys      map[string]*block // committed (and committing: not visible)
	pending   map[string]*block // reserved or committing, by key
	blocks    map[uint64]*block // every live block by id
	next      uint64            // next block id (and generation)
	idsUpto   uint64            // ids below this are covered by a durable recIDs
	ev        Evictor
	used      uint64 // bytes of committed blocks (rounded)
	reserved  uint64
	evictions uint64
	deleting  bool
	grow      *growFlight
	// growFailed is when the last growth failed: puts evict instead of
	// asking again for growBackoff, so a pool out of capacity or a host
	// that does not answer does not stall every put.
	growFailed time.Time

	// hits and misses count Get lookups (Hotness, hotness.go).
	hits, misses uint64
}

// growBackoff is how long after a failed growth puts only evict.
const growBackoff = 10 * time.Second

type growFlight struct {
	done chan struct{}
	err  error
}

// idStep is how far each recIDs moves a namespace's id counter, so a
// restart never hands out an id a client may have seen.
const idStep = 1 << 16

// OpenIndex opens (or creates) the index in cfg.Dir and replays its log.
func OpenIndex(cfg IndexConfig) (*Index, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("kv: index needs a directory: %w", ErrInvalid)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Align == 0 {
		cfg.Align = DefaultAlign
	}
	if cfg.NewEvictor == nil {
		cfg.NewEvictor = func(string) Evictor { return NewLRU() }
	}
	if cfg.MaxPerSession <= 0 {
		cfg.MaxPerSession = 65536
	}
	if cfg.DefaultLease <= 0 {
		cfg.DefaultLease = 30 * time.Second
	}
	if cfg.MaxLease <= 0 {
		cfg.MaxLease = 300 * time.Second
	}
	if cfg.CompactAt <= 0 {
		cfg.CompactAt = 64 << 20
	}
	if err := mkdir(cfg.Dir); err != nil {
		return nil, err
	}
	ix := &Index{cfg: cfg, log: cfg.Logger, ns: map[string]*nsState{}, sessions: map[uint64]*Session{}}
	w, err := openWAL(cfg.Dir, cfg.NoSync, ix.apply)
	if err != nil {
		return nil, err
	}
	ix.wal = w
	// Compact: the log becomes the state it describes, so it does not
	// grow across restarts, and every namespace's id counter moves past
	// anything handed out before.
	var snap []byte
	for _, ns := range ix.ns {
		ns.next = max(ns.next, ns.idsUpto)
		ns.idsUpto = ns.next + idStep
		snap = ix.snapshot(snap, ns)
	}
	if err := w.rewrite(snap); err != nil {
		w.close()
		return nil, err
	}
	ix.lastSnap = int64(len(snap))
	for _, ns := range ix.ns {
		ix.log.Info("kv namespace restored", "namespace", ns.name, "blocks", len(ns.keys), "chunks", len(ns.chunks), "used", ns.used)
	}
	ix.ev = newEvents(cfg.Events, cfg.EventQueue, ix.Resync)
	if !cfg.ResyncLater {
		ix.emitState()
	}
	return ix, nil
}

// Close closes every session and the log.
func (ix *Index) Close() error {
	ix.mu.Lock()
	if ix.closed {
		ix.mu.Unlock()
		return nil
	}
	ix.closed = true
	for _, s := range ix.sessions {
		ix.closeLocked(s, false)
	}
	ix.ev.stop()
	ix.mu.Unlock()
	ix.ev.wait()
	return ix.wal.close()
}

// Compact rewrites the log as a snapshot of the state, atomically (a
// crash leaves the old log or the new one). The index is held still
// meanwhile: every appended record is written first.
func (ix *Index) Compact() error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.closed {
		return fmt.Errorf("kv: index closed: %w", ErrUnavailable)
	}
	return ix.compactLocked()
}

func (ix *Index) compactLocked() error {
	if err := ix.wal.quiesce(); err != nil {
		return err
	}
	var snap []byte
	for _, ns := range ix.ns {
		snap = ix.snapshot(snap, ns)
	}
	before := ix.wal.Size()
	if err := ix.wal.rewrite(snap); err != nil {
		return err
	}
	ix.lastSnap = int64(len(snap))
	ix.log.Info("kv: log compacted", "from", before, "to", len(snap))
	return nil
}

// maybeCompact compacts once the log is over CompactAt and twice the last
// snapshot.
func (ix *Index) maybeCompact() {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.closed {
		return
	}
	if n := ix.wal.Size(); n < ix.cfg.CompactAt || n < 2*ix.lastSnap {
		return
	}
	if err := ix.compactLocked(); err != nil {
		ix.log.Warn("kv: log compaction", "err", err)
	}
}

// Records.

type nsRecord struct {
	Name      string    `json:"name"`
	ChunkSize uint64    `json:"chunk_size"`
	Quota     uint64    `json:"quota"`
	Created   time.Time `json:"created"`
}

type chunkRecord struct {
	NS      string       `json:"ns"`
	ID      dcd.ChunkID  `json:"id"`
	Tag     cci.Tag      `json:"tag"`
	Size    uint64       `json:"size,omitempty"`
	Extents []cci.Extent `json:"extents,omitempty"`
}

type memberRecord struct {
	NS   string     `json:"ns"`
	Host dcd.HostID `json:"host"`
	Hash []byte     `json:"hash,omitempty"`
	// Client names the rack of a RackHost member.
	Client string `json:"client,omitempty"`
}

func jsonRecord(b []byte, typ byte, v any) []byte {
	p, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own plain structs
	}
	return frameRecord(b, typ, p)
}

func commitRecord(b []byte, ns string, bl *block) []byte {
	p := make([]byte, 0, 64+len(bl.key))
	p = append(p, byte(len(ns)))
	p = append(p, ns...)
	p = binary.LittleEndian.AppendUint64(p, bl.id)
	p = binary.LittleEndian.AppendUint64(p, bl.gen)
	p = binary.LittleEndian.AppendUint64(p, uint64(bl.chunk.info.ID))
	p = binary.LittleEndian.AppendUint64(p, bl.off)
	p = binary.LittleEndian.AppendUint64(p, bl.length)
	p = binary.LittleEndian.AppendUint16(p, uint16(len(bl.key)))
	p = append(p, bl.key...)
	if bl.seq.told() {
		// Optional tail (records before it end at the key): u8 flags
		// (bit 0: parent set), u64 parent, u32 tokens.
		var f byte
		if bl.seq.HasParent {
			f = 1
		}
		p = append(p, f)
		p = binary.LittleEndian.AppendUint64(p, bl.seq.Parent)
		p = binary.LittleEndian.AppendUint32(p, bl.seq.Tokens)
	}
	return frameRecord(b, recCommit, p)
}

func freeRecord(b []byte, ns string, ids []uint64) []byte {
	p := make([]byte, 0, 3+len(ns)+8*len(ids))
	p = append(p, byte(len(ns)))
	p = append(p, ns...)
	p = binary.LittleEndian.AppendUint32(p, uint32(len(ids)))
	for _, id := range ids {
		p = binary.LittleEndian.AppendUint64(p, id)
	}
	return frameRecord(b, recFree, p)
}

func idsRecord(b []byte, ns string, upto uint64) []byte {
	p := append([]byte{byte(len(ns))}, ns...)
	p = binary.LittleEndian.AppendUint64(p, upto)
	return frameRecord(b, recIDs, p)
}

// snapshot appends the records that rebuild ns.
func (ix *Index) snapshot(b []byte, ns *nsState) []byte {
	b = jsonRecord(b, recNamespace, nsRecord{Name: ns.name, ChunkSize: ns.chunkSize, Quota: ns.quota, Created: ns.created})
	for h, hash := range ns.members {
		r := memberRecord{NS: ns.name, Host: h, Hash: hash[:]}
		if h == RackHost {
			r.Client = ns.rack
		}
		b = jsonRecord(b, recMember, r)
	}
	for _, c := range ns.chunks {
		b = jsonRecord(b, recChunkAdd, chunkRecord{NS: ns.name, ID: c.info.ID, Tag: c.info.Tag, Size: c.info.Size, Extents: c.info.Extents})
	}
	b = idsRecord(b, ns.name, ns.idsUpto)
	// What the log holds committed: committed blocks, and committing
	// ones (their record is durable once the log is quiet; their waiter
	// marks them committed after). Blocks being freed are freed in it.
	ids := make([]uint64, 0, len(ns.keys))
	for _, bl := range ns.blocks {
		if bl.state == stCommitted || bl.state == stCommitting {
			ids = append(ids, bl.id)
		}
	}
	slices.Sort(ids) // commit order approximates recency for the policy
	for _, id := range ids {
		b = commitRecord(b, ns.name, ns.blocks[id])
	}
	return b
}

// apply replays one record (OpenIndex, single-threaded).
func (ix *Index) apply(typ byte, p []byte) error {
	switch typ {
	case recNamespace:
		var r nsRecord
		if err := json.Unmarshal(p, &r); err != nil {
			return err
		}
		if ns := ix.ns[r.Name]; ns != nil {
			ns.quota, ns.chunkSize = r.Quota, r.ChunkSize
			return nil
		}
		ix.ns[r.Name] = ix.newNS(r)
	case recNSDelete:
		var r nsRecord
		if err := json.Unmarshal(p, &r); err != nil {
			return err
		}
		delete(ix.ns, r.Name)
	case recChunkAdd, recChunkRemove:
		var r chunkRecord
		if err := json.Unmarshal(p, &r); err != nil {
			return err
		}
		ns := ix.ns[r.NS]
		if ns == nil {
			return fmt.Errorf("chunk of unknown namespace %q", r.NS)
		}
		if typ == recChunkAdd {
			ns.chunks = append(ns.chunks, &chunkState{info: ChunkInfo{ID: r.ID, Tag: r.Tag, Size: r.Size, Extents: r.Extents},
				space: newSpace(r.Size, ix.cfg.Align)})
		} else {
			ns.chunks = slices.DeleteFunc(ns.chunks, func(c *chunkState) bool { return c.info.ID == r.ID })
		}
	case recMember, recMemberGone:
		var r memberRecord
		if err := json.Unmarshal(p, &r); err != nil {
			return err
		}
		ns := ix.ns[r.NS]
		if ns == nil {
			return fmt.Errorf("member of unknown namespace %q", r.NS)
		}
		if typ == recMember {
			var h [sha256.Size]byte
			copy(h[:], r.Hash)
			ns.members[r.Host] = h
			if r.Host == RackHost {
				ns.rack = r.Client
			}
		} else {
			delete(ns.members, r.Host)
			if r.Host == RackHost {
				ns.rack = ""
			}
		}
	case recIDs:
		rd := &recReader{b: p}
		name := rd.str8()
		upto := rd.u64()
		if rd.bad {
			return fmt.Errorf("short ids record")
		}
		if ns := ix.ns[name]; ns != nil {
			ns.idsUpto = max(ns.idsUpto, upto)
		}
	case recCommit:
		rd := &recReader{b: p}
		name := rd.str8()
		id, gen, chunk, off, length := rd.u64(), rd.u64(), dcd.ChunkID(rd.u64()), rd.u64(), rd.u64()
		key := string(rd.bytes(int(rd.u16())))
		var seq Seq
		if len(rd.b) > 0 { // the tail a client's sequence adds
			f := rd.bytes(1)
			seq = Seq{Parent: rd.u64(), Tokens: rd.u32()}
			seq.HasParent = len(f) == 1 && f[0]&1 != 0
		}
		if rd.bad {
			return fmt.Errorf("short commit record")
		}
		ns := ix.ns[name]
		if ns == nil {
			return fmt.Errorf("commit in unknown namespace %q", name)
		}
		c := ns.chunk(chunk)
		if c == nil || !c.space.take(off, length) {
			return fmt.Errorf("commit of block %d at %#x+%#x outside the free space of chunk %d", id, off, length, chunk)
		}
		if old := ns.keys[key]; old != nil {
			return fmt.Errorf("commit of block %d over key of block %d", id, old.id)
		}
		b := &block{id: id, gen: gen, key: key, chunk: c, off: off, length: length, state: stCommitted, seq: seq}
		ns.keys[key] = b
		ns.blocks[id] = b
		ns.used += c.space.round(length)
		ns.next = max(ns.next, id+1)
		ns.ev.Add(id, length, ns.ranges(b))
	case recFree:
		rd := &recReader{b: p}
		name := rd.str8()
		n := rd.u32()
		if rd.bad || uint64(n)*8 > uint64(len(rd.b)) {
			return fmt.Errorf("short free record")
		}
		ns := ix.ns[name]
		if ns == nil {
			return fmt.Errorf("free in unknown namespace %q", name)
		}
		for range n {
			if b := ns.blocks[rd.u64()]; b != nil {
				ns.forget(b)
				ns.release(b)
			}
		}
	default:
		return fmt.Errorf("unknown record type %d", typ)
	}
	return nil
}

type recReader struct {
	b   []byte
	bad bool
}

func (r *recReader) bytes(n int) []byte {
	if r.bad || len(r.b) < n {
		r.bad = true
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}
func (r *recReader) str8() string {
	n := r.bytes(1)
	if n == nil {
		return ""
	}
	return string(r.bytes(int(n[0])))
}
func (r *recReader) u16() uint16 {
	if b := r.bytes(2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}
func (r *recReader) u32() uint32 {
	if b := r.bytes(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}
func (r *recReader) u64() uint64 {
	if b := r.bytes(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (ix *Index) newNS(r nsRecord) *nsState {
	return &nsState{name: r.Name, chunkSize: r.ChunkSize, quota: r.Quota, created: r.Created,
		members: map[dcd.HostID][sha256.Size]byte{}, keys: map[string]*block{}, pending: map[string]*block{},
		blocks: map[uint64]*block{}, next: 1, ev: ix.cfg.NewEvictor(r.Name)}
}

func (ns *nsState) chunk(id dcd.ChunkID) *chunkState {
	for _, c := range ns.chunks {
		if c.info.ID == id {
			return c
		}
	}
	return nil
}

func (ns *nsState) capacity() uint64 {
	var n uint64
	for _, c := range ns.chunks {
		n += c.info.Size
	}
	return n
}

// ranges is where a block is in device physical address space: its
// chunk offsets mapped through the chunk's extents.
func (ns *nsState) ranges(b *block) []Range {
	var out []Range
	off, left := b.off, b.length
	var base uint64
	for _, e := range b.chunk.info.Extents {
		if left == 0 {
			break
		}
		if off < base+e.Length {
			in := off - base
			n := min(left, e.Length-in)
			out = append(out, Range{DPA: e.DPA + in, Len: n})
			off += n
			left -= n
		}
		base += e.Length
	}
	return out
}

// forget takes b out of the key maps and the policy (not its space).
func (ns *nsState) forget(b *block) {
	if ns.keys[b.key] == b {
		delete(ns.keys, b.key)
		ns.used -= b.chunk.space.round(b.length)
	}
	if ns.pending[b.key] == b {
		delete(ns.pending, b.key)
	}
	ns.ev.Remove(b.id)
}

// release gives b's space back and drops it.
func (ns *nsState) release(b *block) {
	b.chunk.space.release(b.off, b.length)
	delete(ns.blocks, b.id)
}

// newID hands out the next id; the returned bytes (a recIDs) must be
// appended to the log before any record naming the id.
func (ns *nsState) newID() (uint64, []byte) {
	id := ns.next
	ns.next++
	var rec []byte
	if ns.next >= ns.idsUpto {
		ns.idsUpto = ns.next + idStep
		rec = idsRecord(nil, ns.name, ns.idsUpto)
	}
	return id, rec
}
