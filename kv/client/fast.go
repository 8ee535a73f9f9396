package client

import (
	"context"
	"fmt"
	"slices"
	"time"

	"cxlpool/kv/wire"
)

// The fast paths: a get that waits for one index round trip per batch
// instead of two, into the caller's buffers, and a locate-only lookup.
//
// A get must not return bytes that another key's block overwrote while
// they were copied. GetBatch proves that afterwards with a CHECK, a second
// round trip the copy has to wait for. GetBatchInto pins instead (GET with
// PIN): a pinned block is never evicted and its space never reused, so
// the bytes are valid for the whole copy without asking again, and the
// UNPIN is posted: it goes out with the client's next request, in the
// same write, or alone after unpinDelay, and its answer is read before
// the next request's (the protocol answers a connection's requests in
// order), so nobody waits for it. The pins live up to unpinDelay longer
// than the copy; the session's lease, and closing the connection, bound
// them as any pin. With a remembered location the copy does not even
// wait for the GET (locs.go).

// ErrShortBuffer: a destination buffer is smaller than its block.
var ErrShortBuffer = fmt.Errorf("kv client: destination buffer shorter than the block")

// post sends req without reading its answer; the next request reads it
// first (drainLocked). Called with c.mu held.
func (c *Client) postLocked(ctx context.Context, req *wire.Request) error {
	if err := c.sendLocked(ctx, req); err != nil {
		return err
	}
	c.owed = append(c.owed, owedReply{id: req.ID, op: req.Op})
	return nil
}

// sendLocked frames req (frameLocked) and writes it. Called with c.mu
// held.
func (c *Client) sendLocked(ctx context.Context, req *wire.Request) error {
	sent, err := c.frameLocked(req)
	if err != nil {
		return err
	}
	c.setDeadlineLocked(ctx)
	if _, err := c.w.Write(c.out); err != nil {
		return fmt.Errorf("kv client: send %s: %w", req.Op, err)
	}
	if err := c.w.Flush(); err != nil {
		return fmt.Errorf("kv client: send %s: %w", req.Op, err)
	}
	sent()
	return nil
}

// frameLocked encodes req into c.out with the next request id, after
// the UNPIN of the pins finished gets left (unpinLocked), which then goes
// out in the same write. sent must be called once c.out is written: the
// UNPIN's answer is then owed (read first), and its pins are no longer
// waiting; a request not sent leaves them waiting for the next one.
// Called with c.mu held.
func (c *Client) frameLocked(req *wire.Request) (sent func(), err error) {
	out, id := c.out[:0], c.nextID
	var unpin uint32 // the UNPIN's id; 0: none
	if len(c.unpins) > 0 {
		id++
		unpin = id
		if out, err = wire.AppendRequest(out, &wire.Request{Op: wire.OpUnpin, ID: unpin, Blocks: c.unpins}); err != nil {
			return nil, fmt.Errorf("kv client: %w", err)
		}
	}
	id++
	req.ID = id
	if out, err = wire.AppendRequest(out, req); err != nil {
		return nil, fmt.Errorf("kv client: %w", err)
	}
	c.out, c.nextID = out, id
	return func() {
		if unpin != 0 {
			c.owed = append(c.owed, owedReply{id: unpin, op: wire.OpUnpin})
			c.unpins = c.unpins[:0]
		}
	}, nil
}

// unpinDelay bounds how long a finished get's pins wait for the next
// request to carry their UNPIN before it is sent alone.
const unpinDelay = time.Millisecond

// unpinLocked leaves the UNPIN of blocks to the next request: a get's
// caller does not wait for sending it, and a client that gets in a loop
// sends it in the same write as its next GET (the server answers in
// order, so the pins end before the next ones begin). If no request
// comes within unpinDelay it goes alone. Called with c.mu held.
func (c *Client) unpinLocked(blocks []uint64) error {
	limit := c.maxB
	if limit <= 0 {
		limit = wire.DefaultMaxBatch
	}
	if len(c.unpins)+len(blocks) > limit {
		// Another get's pins are still waiting: one UNPIN holds a batch.
		pending := slices.Clone(c.unpins)
		c.unpins = c.unpins[:0]
		if err := c.postLocked(context.Background(), &wire.Request{Op: wire.OpUnpin, Blocks: pending}); err != nil {
			return err
		}
	}
	c.unpins = append(c.unpins, blocks...)
	if c.unpinTimer == nil {
		c.unpinTimer = time.AfterFunc(unpinDelay, c.flushUnpins)
	} else {
		c.unpinTimer.Reset(unpinDelay)
	}
	return nil
}

// flushUnpins sends the UNPIN no request carried in time.
func (c *Client) flushUnpins() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.unpins) == 0 {
		return
	}
	pending := slices.Clone(c.unpins)
	c.unpins = c.unpins[:0]
	// A failure is the connection's: the next request reports it, and
	// the session's end drops the pins.
	_ = c.postLocked(context.Background(), &wire.Request{Op: wire.OpUnpin, Blocks: pending})
}

// owedReply is a posted request whose answer is not read yet.
type owedReply struct {
	id uint32
	op wire.Op
}

func (c *Client) setDeadlineLocked(ctx context.Context) {
	dl := time.Now().Add(c.cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	_ = c.nc.SetDeadline(dl)
}

// drainLocked reads the answers of posted requests. A posted UNPIN that
// was refused (NOT_FOUND: the session lost the pin, e.g. to an expired
// lease) leaves nothing to undo: the index dropped the pin itself; it is
// counted (PostedRefusals) rather than reported to an unrelated caller.
func (c *Client) drainLocked() error {
	for len(c.owed) > 0 {
		o := c.owed[0]
		var h wire.Header
		var body []byte
		var err error
		h, body, c.buf, err = wire.ReadFrame(c.r, c.buf, wire.DefaultMaxBody+64)
		if err != nil {
			return fmt.Errorf("kv client: answer to posted %s: %w", o.op, err)
		}
		resp, err := wire.DecodeResponse(h, body)
		if err != nil {
			return fmt.Errorf("kv client: answer to posted %s: %w", o.op, err)
		}
		if resp.ID != o.id {
			return fmt.Errorf("kv client: answer %d to posted request %d", resp.ID, o.id)
		}
		c.owed = c.owed[1:]
		if resp.Status != wire.OK {
			c.refused++
			continue
		}
		for _, it := range resp.Items {
			if it.Status != wire.OK {
				c.refused++
			}
		}
	}
	c.owed = c.owed[:0]
	return nil
}

// PostedRefusals counts items of posted requests (UNPINs) the server
// refused: 0 unless a lease ran out under a get.
func (c *Client) PostedRefusals() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refused
}

// GetBatchInto copies the blocks of keys into dsts (dsts[i] must hold
// key i's block: ErrShortBuffer otherwise) and returns each block's
// length, in one index round trip per batch the caller waits for (GET
// with PIN; the UNPIN is posted). A block whose location the client
// remembers (Config.Locations) is read there while the GET is on its
// way, and those bytes are kept when the GET answers the same block
// (locs.go): its read then costs no round trip of its own. It allocates
// nothing per block: the serving framework's buffers (LMCache's or
// HiCache's host buffers) are the destination. A block that is not
// stored is ErrNotFound in its slot.
func (c *Client) GetBatchInto(ctx context.Context, keys, dsts [][]byte) ([]int, []error, error) {
	if len(keys) != len(dsts) {
		return nil, nil, fmt.Errorf("kv client: %d keys and %d buffers", len(keys), len(dsts))
	}
	lens := make([]int, len(keys))
	errs := make([]error, len(keys))
	err := c.batches(len(keys), func(lo, hi int) error {
		// The reads ahead: the keys of this batch with a remembered
		// location that fits their buffer.
		type ahead struct {
			j   int
			loc wire.Loc
			err error
		}
		var guesses []ahead
		for j, key := range keys[lo:hi] {
			if l, ok := c.locs.lookup(key); ok && l.Length <= uint64(len(dsts[lo+j])) {
				guesses = append(guesses, ahead{j: j, loc: l})
			}
		}
		var meanwhile func()
		if len(guesses) > 0 {
			meanwhile = func() {
				c.readAll(len(guesses), func(k int) {
					g := &guesses[k]
					g.err = c.readInto(ctx, g.loc, dsts[lo+g.j][:g.loc.Length])
				})
			}
		}
		resp, err := c.doWhile(ctx, &wire.Request{Op: wire.OpGet, Flags: wire.FlagPin, Keys: keys[lo:hi]}, meanwhile)
		if err != nil {
			return err
		}
		pinned := make([]uint64, 0, len(resp.Items))
		found := make([]int, 0, len(resp.Items))
		kept, reread := 0, 0
		for j, it := range resp.Items {
			i := lo + j
			var guess *ahead
			if len(guesses) > 0 && guesses[0].j == j {
				guess, guesses = &guesses[0], guesses[1:]
			}
			if errs[i] = itemErr(wire.OpGet, it.Status); errs[i] != nil {
				c.locs.forget(keys[i])
				continue
			}
			pinned = append(pinned, it.Loc.Block)
			if uint64(len(dsts[i])) < it.Loc.Length {
				errs[i] = fmt.Errorf("kv client: block of %d bytes into %d: %w", it.Loc.Length, len(dsts[i]), ErrShortBuffer)
				continue
			}
			if guess != nil {
				if guess.err == nil && guess.loc == it.Loc {
					lens[i] = int(it.Loc.Length)
					kept++
					continue
				}
				reread++
			}
			c.locs.remember(keys[i], it.Loc)
			found = append(found, j)
		}
		c.locs.count(kept, reread)
		c.readAll(len(found), func(k int) {
			j := found[k]
			i := lo + j
			l := resp.Items[j].Loc
			if errs[i] = c.readInto(ctx, l, dsts[i][:l.Length]); errs[i] == nil {
				lens[i] = int(l.Length)
			}
		})
		if len(pinned) == 0 {
			return nil
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.unpinLocked(pinned)
	})
	return lens, errs, err
}

// readInto copies the block's bytes into p (len(p) = the block's length):
// from this host's mapping, or by a rack's READ through the export.
func (c *Client) readInto(ctx context.Context, l wire.Loc, p []byte) error {
	if c.rem != nil {
		return c.rem.io(ctx, l, p, false)
	}
	c.useMu.RLock()
	defer c.useMu.RUnlock()
	src, err := c.bytes(ctx, l)
	if err != nil {
		return err
	}
	copy(p, src)
	return nil
}

// Locate returns where keys' blocks are, without their bytes and without
// pinning (a lookup: what a router or a prefix match asks). A location is
// only a hint until read and checked (GetBatch) or pinned (Pin).
func (c *Client) Locate(ctx context.Context, keys [][]byte) ([]wire.Loc, []error, error) {
	locs := make([]wire.Loc, len(keys))
	errs := make([]error, len(keys))
	err := c.batches(len(keys), func(lo, hi int) error {
		resp, err := c.do(ctx, &wire.Request{Op: wire.OpGet, Keys: keys[lo:hi]})
		if err != nil {
			return err
		}
		for j, it := range resp.Items {
			if errs[lo+j] = itemErr(wire.OpGet, it.Status); errs[lo+j] == nil {
				locs[lo+j] = it.Loc
				c.locs.remember(keys[lo+j], it.Loc)
			} else {
				c.locs.forget(keys[lo+j])
			}
		}
		return nil
	})
	return locs, errs, err
}
