package client

import (
	"sync"

	"cxlpool/kv/wire"
)

// Reading ahead of the index. A get waits for the index's answer (GET
// with PIN) before it can read a block's bytes: for a remote rack that
// is a round trip to the box before the READ's own, for a host one
// before its copy. A client that remembers where a key's block was can
// start the read at that place together with the GET and keep what it
// read if the GET answers the same (block, gen):
//
//   - the remembered location was live when the index returned it (T0);
//   - the GET found it live again and pinned it (T1); a block id is never
//     reused, and a block that left the index never comes back, so the
//     block was live for all of [T0, T1], and the pin keeps it live from
//     T1 until the UNPIN, which is sent only after the read ended;
//   - so the block was live for the whole read, whenever the read ran
//     against T1, and a live block's bytes never change.
//
// Any other answer (another block for the key, not found, a failed or
// short read) discards the bytes and reads again at the pinned location,
// so a stale memory costs one wasted read, never wrong bytes.

// DefaultLocations is Config.Locations' default.
const DefaultLocations = 4096

// locs remembers the last location the index answered for keys, up to
// max entries (an arbitrary one is forgotten to make room).
type locs struct {
	mu  sync.Mutex
	max int
	m   map[string]wire.Loc
	// hits and misses count reads ahead whose bytes were kept and those
	// read again.
	hits, misses int
}

func newLocs(n int) *locs {
	if n == 0 {
		n = DefaultLocations
	}
	if n < 0 {
		return nil
	}
	return &locs{max: n, m: make(map[string]wire.Loc, min(n, 1024))}
}

// lookup returns key's remembered location.
func (l *locs) lookup(key []byte) (wire.Loc, bool) {
	if l == nil {
		return wire.Loc{}, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	loc, ok := l.m[string(key)]
	return loc, ok
}

// remember stores key's location as the index answered it.
func (l *locs) remember(key []byte, loc wire.Loc) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if old, ok := l.m[string(key)]; ok && old == loc {
		return
	}
	if _, ok := l.m[string(key)]; !ok && len(l.m) >= l.max {
		for k := range l.m {
			delete(l.m, k)
			break
		}
	}
	l.m[string(key)] = loc
}

// forget drops key's location (the index no longer has the key).
func (l *locs) forget(key []byte) {
	if l == nil {
		return
	}
	l.mu.Lock()
	delete(l.m, string(key))
	l.mu.Unlock()
}

// count adds to the read-ahead counters.
func (l *locs) count(hits, misses int) {
	if l == nil || hits+misses == 0 {
		return
	}
	l.mu.Lock()
	l.hits += hits
	l.misses += misses
	l.mu.Unlock()
}

// ReadAhead reports how many reads ahead of the index's answer
// GetBatchInto kept (the block had not moved) and how many it read again.
func (c *Client) ReadAhead() (kept, reread int) {
	if c.locs == nil {
		return 0, 0
	}
	c.locs.mu.Lock()
	defer c.locs.mu.Unlock()
	return c.locs.hits, c.locs.misses
}
