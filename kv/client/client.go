// Package client is the Go client of the box's KV-cache store: it speaks
// the index protocol (kv/wire) to the daemon and reads and writes blocks'
// bytes itself, through this host's mapping of the namespace's chunks
// (host.Backend.Map: the agent's DAX device, or the virtual box's memory
// file). The box never copies a block.
//
// A Client is one session: safe for concurrent use, one request on the
// wire at a time. Use one Client per worker for parallelism.
package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"cxlpool/fabric/cci"
	"cxlpool/host"
	"cxlpool/kv/wire"
)

// Mapper maps a chunk's capacity (by tag, in the box's UUID form) into
// this process. host.Backend satisfies it.
type Mapper interface {
	Map(ctx context.Context, tag string) (host.Mapping, error)
}

// Config says where the index is and who this client is.
type Config struct {
	// Network is "tcp" or "unix"; Addr the address or socket path.
	Network, Addr string
	Namespace     string
	Host          uint16 // this host's LD-ID (its head)
	Token         [wire.TokenSize]byte
	Lease         time.Duration // 0: the server's default
	Mapper        Mapper
	// Timeout bounds each request's round trip (10 s).
	Timeout time.Duration
	// Locations is how many keys' block locations the client remembers,
	// so that GetBatchInto can start reading a block where it was while
	// the index's answer is on its way, and keep the bytes when the
	// answer names the same block (locs.go) [DefaultLocations; negative:
	// none, every get waits for the answer before it reads].
	Locations int
	// Remote, if set, makes this a remote rack's client: Host is
	// RackHost, Token the namespace's remote token, Mapper unused, the
	// bytes go through the chunks' exports.
	Remote *Remote
}

// Error is a refusal from the server: the op, the status and, for a whole
// request, the server's message naming the rule.
type Error struct {
	Op      wire.Op
	Status  wire.Status
	Message string
}

func (e *Error) Error() string {
	if e.Message != "" {
		return fmt.Sprintf("kv client: %s: %s: %s", e.Op, e.Status, e.Message)
	}
	return fmt.Sprintf("kv client: %s: %s", e.Op, e.Status)
}

// Is matches by status: errors.Is(err, client.ErrNotFound).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Op == 0 && t.Status == e.Status
}

// Sentinels to match with errors.Is.
var (
	ErrNotFound = &Error{Status: wire.NotFound}
	ErrExists   = &Error{Status: wire.Exists}
	ErrNoSpace  = &Error{Status: wire.NoSpace}
	ErrStale    = &Error{Status: wire.Stale}
	ErrDenied   = &Error{Status: wire.Denied}
	ErrBusy     = &Error{Status: wire.Busy}
	ErrExpired  = &Error{Status: wire.Expired}
)

// ErrUnmapped: a block lies outside this host's mapping of its chunk.
var ErrUnmapped = errors.New("kv client: block outside the host's mapping of its chunk")

// Client is one session with the index.
type Client struct {
	cfg Config

	mu      sync.Mutex
	nc      net.Conn
	r       *bufio.Reader
	w       *bufio.Writer
	nextID  uint32
	out     []byte
	buf     []byte
	session uint64
	lease   time.Duration
	maxB    int
	owed    []owedReply // posted requests whose answers are unread (fast.go)
	// unpins are the pins of finished gets whose UNPIN goes out with the
	// next request, or alone when unpinTimer fires first (fast.go).
	unpins     []uint64
	unpinTimer *time.Timer
	refused    int // items of posted requests the server refused

	mapMu sync.Mutex
	maps  map[[16]byte]host.Mapping
	// useMu is held shared while bytes of a mapping are copied, and
	// exclusively to unmap: a mapping never goes away under a copy.
	useMu sync.RWMutex

	rem  *remote // remote mode
	locs *locs   // remembered block locations; nil: none
}

// Dial connects and says HELLO.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Network == "" {
		cfg.Network = "tcp"
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, cfg.Network, cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("kv client: %w", err)
	}
	c := &Client{cfg: cfg, nc: nc, r: bufio.NewReaderSize(nc, 64<<10), w: bufio.NewWriterSize(nc, 64<<10), maps: map[[16]byte]host.Mapping{},
		locs: newLocs(cfg.Locations)}
	if cfg.Remote != nil {
		cfg.Host, c.cfg.Host = RackHost, RackHost
		c.rem = newRemote(*cfg.Remote, cfg.Token)
	}
	resp, err := c.do(ctx, &wire.Request{Op: wire.OpHello, Namespace: cfg.Namespace, Host: cfg.Host, Token: cfg.Token,
		LeaseMS: uint32(cfg.Lease / time.Millisecond)})
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.session, c.lease, c.maxB = resp.Session, time.Duration(resp.LeaseMS)*time.Millisecond, int(resp.MaxBatch)
	return c, nil
}

// Session is the server's id of this session; Lease its lease.
func (c *Client) Session() uint64      { return c.session }
func (c *Client) Lease() time.Duration { return c.lease }

// Close ends the session (the server drops its pins and reservations) and
// unmaps the chunks.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.unpinTimer != nil {
		c.unpinTimer.Stop() // the session's end drops its pins
	}
	err := c.nc.Close()
	c.mu.Unlock()
	c.useMu.Lock()
	defer c.useMu.Unlock()
	c.mapMu.Lock()
	for t, m := range c.maps {
		_ = m.Close()
		delete(c.maps, t)
	}
	c.mapMu.Unlock()
	if c.rem != nil {
		c.rem.close()
	}
	return err
}

// write puts v into the block's bytes: a copy into this host's mapping,
// or a remote rack's WRITE through the chunk's export.
func (c *Client) write(ctx context.Context, l wire.Loc, v []byte) error {
	if c.rem != nil {
		return c.rem.io(ctx, l, v[:min(uint64(len(v)), l.Length)], true)
	}
	c.useMu.RLock()
	defer c.useMu.RUnlock()
	dst, err := c.bytes(ctx, l)
	if err == nil {
		copy(dst, v)
	}
	return err
}

// remoteReads bounds a remote rack's READs in flight for one batch.
const remoteReads = 8

// readAll runs read(0..n-1): in turn for a host (memcpy from the
// mapping), up to remoteReads at once for a rack, whose READs are round
// trips that overlap on the export's connections.
func (c *Client) readAll(n int, read func(k int)) {
	if c.rem == nil || n <= 1 {
		for k := range n {
			read(k)
		}
		return
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(n, remoteReads) {
		wg.Go(func() {
			for k := range next {
				read(k)
			}
		})
	}
	for k := range n {
		next <- k
	}
	close(next)
	wg.Wait()
}

// read is a copy of the block's bytes (mapping or export READ).
func (c *Client) read(ctx context.Context, l wire.Loc) ([]byte, error) {
	if c.rem != nil {
		p := make([]byte, l.Length)
		if err := c.rem.io(ctx, l, p, false); err != nil {
			return nil, err
		}
		return p, nil
	}
	c.useMu.RLock()
	defer c.useMu.RUnlock()
	src, err := c.bytes(ctx, l)
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), src...), nil
}

// do sends one request and reads its answer; a refusal of the whole
// request is an *Error.
func (c *Client) do(ctx context.Context, req *wire.Request) (wire.Response, error) {
	return c.doWhile(ctx, req, nil)
}

// doWhile is do running meanwhile, if not nil, once the request is sent
// and before its answer is read: work that overlaps the round trip (the
// reads ahead of GetBatchInto). meanwhile runs with the connection held,
// so it must not make requests of its own.
func (c *Client) doWhile(ctx context.Context, req *wire.Request, meanwhile func()) (wire.Response, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.sendLocked(ctx, req); err != nil {
		return wire.Response{}, err
	}
	if meanwhile != nil {
		meanwhile()
	}
	if err := c.drainLocked(); err != nil {
		return wire.Response{}, err
	}
	var h wire.Header
	var body []byte
	var err error
	h, body, c.buf, err = wire.ReadFrame(c.r, c.buf, wire.DefaultMaxBody+64)
	if err != nil {
		return wire.Response{}, fmt.Errorf("kv client: answer to %s: %w", req.Op, err)
	}
	resp, err := wire.DecodeResponse(h, body)
	if err != nil {
		return resp, fmt.Errorf("kv client: answer to %s: %w", req.Op, err)
	}
	if resp.ID != req.ID {
		return resp, fmt.Errorf("kv client: answer %d to request %d", resp.ID, req.ID)
	}
	if resp.Status != wire.OK {
		return resp, &Error{Op: req.Op, Status: resp.Status, Message: resp.Message}
	}
	if n := req.Count(); (req.Op != wire.OpHello && n > 0) && len(resp.Items) != n {
		return resp, fmt.Errorf("kv client: %s answered %d items for %d", req.Op, len(resp.Items), n)
	}
	return resp, nil
}

func itemErr(op wire.Op, st wire.Status) error {
	if st == wire.OK {
		return nil
	}
	return &Error{Op: op, Status: st}
}

// bytes is the block's bytes in this host's mapping of its chunk.
func (c *Client) bytes(ctx context.Context, l wire.Loc) ([]byte, error) {
	c.mapMu.Lock()
	defer c.mapMu.Unlock()
	m := c.maps[l.Tag]
	if m == nil {
		if c.cfg.Mapper == nil {
			return nil, fmt.Errorf("kv client: no mapper for chunk %s: %w", cci.Tag(l.Tag), ErrUnmapped)
		}
		var err error
		if m, err = c.cfg.Mapper.Map(ctx, cci.Tag(l.Tag).String()); err != nil {
			return nil, fmt.Errorf("kv client: map chunk %s: %w", cci.Tag(l.Tag), err)
		}
		c.maps[l.Tag] = m
	}
	b := m.Bytes()
	if l.Offset > uint64(len(b)) || l.Length > uint64(len(b))-l.Offset {
		return nil, fmt.Errorf("kv client: block %d at %#x+%#x of chunk %s, mapped %#x: %w", l.Block, l.Offset, l.Length,
			cci.Tag(l.Tag), len(b), ErrUnmapped)
	}
	return b[l.Offset : l.Offset+l.Length : l.Offset+l.Length], nil
}

// batches splits n items into the server's batch size.
func (c *Client) batches(n int, fn func(lo, hi int) error) error {
	step := c.maxB
	if step <= 0 {
		step = wire.DefaultMaxBatch
	}
	for lo := 0; lo < n; lo += step {
		if err := fn(lo, min(lo+step, n)); err != nil {
			return err
		}
	}
	return nil
}

// Put stores value under key: reserve, write the bytes into the pool,
// commit. ErrExists if the key is stored (or being stored) already.
func (c *Client) Put(ctx context.Context, key, value []byte) error {
	errs, err := c.PutBatch(ctx, [][]byte{key}, [][]byte{value})
	if err != nil {
		return err
	}
	return errs[0]
}

// Seq is a block's place in the token sequence it caches, for a
// KV-aware router following the box's events: the block hash of the
// block it continues (HasParent false: the sequence's first) and how many
// tokens it holds. The box keeps it with the block and sends it in the
// block's BlockStored event (parent_hash; PROTOCOL.md, PUT META).
type Seq struct {
	HasParent bool
	Parent    uint64
	Tokens    uint32
}

// PutBatch stores values under keys in three round trips per batch
// (PUT, the writes, COMMIT); per-item errors in order.
func (c *Client) PutBatch(ctx context.Context, keys, values [][]byte) ([]error, error) {
	return c.PutBatchSeq(ctx, keys, values, nil)
}

// PutBatchSeq is PutBatch telling each block's sequence (seqs[i] for
// keys[i]; nil: none told).
func (c *Client) PutBatchSeq(ctx context.Context, keys, values [][]byte, seqs []Seq) ([]error, error) {
	if len(keys) != len(values) {
		return nil, fmt.Errorf("kv client: %d keys and %d values", len(keys), len(values))
	}
	if seqs != nil && len(seqs) != len(keys) {
		return nil, fmt.Errorf("kv client: %d keys and %d sequences", len(keys), len(seqs))
	}
	out := make([]error, len(keys))
	err := c.batches(len(keys), func(lo, hi int) error {
		req := &wire.Request{Op: wire.OpPut, Puts: make([]wire.PutItem, 0, hi-lo)}
		for i := lo; i < hi; i++ {
			p := wire.PutItem{Key: keys[i], Length: uint64(len(values[i]))}
			if seqs != nil {
				p.HasParent, p.Parent, p.Tokens = seqs[i].HasParent, seqs[i].Parent, seqs[i].Tokens
			}
			req.Puts = append(req.Puts, p)
		}
		resp, err := c.do(ctx, req)
		if err != nil {
			return err
		}
		var commit, abort []uint64
		var at []int
		for j, it := range resp.Items {
			i := lo + j
			if out[i] = itemErr(wire.OpPut, it.Status); out[i] != nil {
				continue
			}
			if err := c.write(ctx, it.Loc, values[i]); err != nil {
				out[i] = err
				abort = append(abort, it.Loc.Block)
				continue
			}
			commit = append(commit, it.Loc.Block)
			at = append(at, i)
		}
		if len(abort) > 0 {
			if _, err := c.do(ctx, &wire.Request{Op: wire.OpAbort, Blocks: abort}); err != nil {
				return err
			}
		}
		if len(commit) == 0 {
			return nil
		}
		resp, err = c.do(ctx, &wire.Request{Op: wire.OpCommit, Blocks: commit})
		if err != nil {
			return err
		}
		for j, it := range resp.Items {
			out[at[j]] = itemErr(wire.OpCommit, it.Status)
		}
		return nil
	})
	return out, err
}

// Get returns a copy of key's block: locate, copy from the pool, then a
// generation check (a block evicted during the copy is ErrNotFound,
// never another key's bytes).
func (c *Client) Get(ctx context.Context, key []byte) ([]byte, error) {
	vals, errs, err := c.GetBatch(ctx, [][]byte{key})
	if err != nil {
		return nil, err
	}
	return vals[0], errs[0]
}

// GetBatch is Get of many keys in two round trips per batch.
func (c *Client) GetBatch(ctx context.Context, keys [][]byte) ([][]byte, []error, error) {
	vals := make([][]byte, len(keys))
	errs := make([]error, len(keys))
	err := c.batches(len(keys), func(lo, hi int) error {
		resp, err := c.do(ctx, &wire.Request{Op: wire.OpGet, Keys: keys[lo:hi]})
		if err != nil {
			return err
		}
		found := make([]int, 0, len(resp.Items))
		for j, it := range resp.Items {
			if errs[lo+j] = itemErr(wire.OpGet, it.Status); errs[lo+j] == nil {
				found = append(found, j)
			}
		}
		c.readAll(len(found), func(k int) {
			j := found[k]
			vals[lo+j], errs[lo+j] = c.read(ctx, resp.Items[j].Loc)
		})
		var checks []wire.BlockGen
		var at []int
		for _, j := range found {
			if i := lo + j; errs[i] == nil {
				checks = append(checks, wire.BlockGen{Block: resp.Items[j].Loc.Block, Gen: resp.Items[j].Loc.Gen})
				at = append(at, i)
			}
		}
		if len(checks) == 0 {
			return nil
		}
		resp, err = c.do(ctx, &wire.Request{Op: wire.OpCheck, Checks: checks})
		if err != nil {
			return err
		}
		for j, it := range resp.Items {
			if it.Status != wire.OK {
				i := at[j]
				vals[i] = nil
				errs[i] = &Error{Op: wire.OpGet, Status: wire.NotFound, Message: "evicted while being read (generation check)"}
			}
		}
		return nil
	})
	return vals, errs, err
}

// Pinned is a pinned block: Bytes are valid (in pool memory, not a copy;
// for a remote rack a copy) until Unpin or Close. (A chunk with pinned blocks never leaves the
// namespace, so Chunks never unmaps them.)
type Pinned struct {
	Loc   wire.Loc
	Bytes []byte
}

// Pin locates and pins keys' blocks for zero-copy use.
func (c *Client) Pin(ctx context.Context, keys [][]byte) ([]Pinned, []error, error) {
	out := make([]Pinned, len(keys))
	errs := make([]error, len(keys))
	err := c.batches(len(keys), func(lo, hi int) error {
		resp, err := c.do(ctx, &wire.Request{Op: wire.OpGet, Flags: wire.FlagPin, Keys: keys[lo:hi]})
		if err != nil {
			return err
		}
		for j, it := range resp.Items {
			i := lo + j
			if errs[i] = itemErr(wire.OpGet, it.Status); errs[i] != nil {
				continue
			}
			out[i].Loc = it.Loc
			if c.rem != nil {
				// A rack has no mapping: a pinned block's bytes are a
				// copy, which the pin keeps valid.
				out[i].Bytes, errs[i] = c.read(ctx, it.Loc)
			} else {
				out[i].Bytes, errs[i] = c.bytes(ctx, it.Loc)
			}
			if errs[i] != nil {
				_, _ = c.do(ctx, &wire.Request{Op: wire.OpUnpin, Blocks: []uint64{it.Loc.Block}})
			}
		}
		return nil
	})
	return out, errs, err
}

// Unpin drops pins taken by Pin.
func (c *Client) Unpin(ctx context.Context, ps []Pinned) ([]error, error) {
	ids := make([]uint64, 0, len(ps))
	for _, p := range ps {
		ids = append(ids, p.Loc.Block)
	}
	return c.blocks(ctx, wire.OpUnpin, ids)
}

func (c *Client) blocks(ctx context.Context, op wire.Op, ids []uint64) ([]error, error) {
	errs := make([]error, len(ids))
	err := c.batches(len(ids), func(lo, hi int) error {
		resp, err := c.do(ctx, &wire.Request{Op: op, Blocks: ids[lo:hi]})
		if err != nil {
			return err
		}
		for j, it := range resp.Items {
			errs[lo+j] = itemErr(op, it.Status)
		}
		return nil
	})
	return errs, err
}

func (c *Client) keyOp(ctx context.Context, op wire.Op, keys [][]byte) ([]error, error) {
	errs := make([]error, len(keys))
	err := c.batches(len(keys), func(lo, hi int) error {
		resp, err := c.do(ctx, &wire.Request{Op: op, Keys: keys[lo:hi]})
		if err != nil {
			return err
		}
		for j, it := range resp.Items {
			errs[lo+j] = itemErr(op, it.Status)
		}
		return nil
	})
	return errs, err
}

// Exists reports whether each key is stored.
func (c *Client) Exists(ctx context.Context, keys [][]byte) ([]bool, error) {
	errs, err := c.keyOp(ctx, wire.OpExists, keys)
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(keys))
	for i, e := range errs {
		out[i] = e == nil
	}
	return out, nil
}

// Delete removes keys; per-key ErrNotFound.
func (c *Client) Delete(ctx context.Context, keys [][]byte) ([]error, error) {
	for _, k := range keys {
		c.locs.forget(k)
	}
	return c.keyOp(ctx, wire.OpDelete, keys)
}

// Renew keeps the session's leases.
func (c *Client) Renew(ctx context.Context) error {
	_, err := c.do(ctx, &wire.Request{Op: wire.OpRenew})
	return err
}

// Chunks lists the namespace's chunks and unmaps those this client
// mapped that are no longer among them (the namespace shrank), so that
// the host can give their capacity back: a host refuses to release memory
// that is still mapped, and the box then waits for its release timeout.
func (c *Client) Chunks(ctx context.Context) ([]wire.Chunk, error) {
	resp, err := c.do(ctx, &wire.Request{Op: wire.OpChunks})
	if err != nil {
		return nil, err
	}
	live := map[[16]byte]bool{}
	for _, ch := range resp.Chunks {
		live[ch.Tag] = true
	}
	c.useMu.Lock()
	defer c.useMu.Unlock()
	c.mapMu.Lock()
	for t, m := range c.maps {
		if !live[t] {
			_ = m.Close()
			delete(c.maps, t)
		}
	}
	c.mapMu.Unlock()
	if c.rem != nil {
		c.rem.keep(live)
	}
	return resp.Chunks, nil
}

// Stat returns the namespace's numbers.
func (c *Client) Stat(ctx context.Context) (wire.Stat, error) {
	resp, err := c.do(ctx, &wire.Request{Op: wire.OpStat})
	return resp.Stat, err
}
