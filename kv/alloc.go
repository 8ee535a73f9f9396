package kv

import (
	"fmt"
	"os"
	"slices"
	"sort"
)

// span is [off, off+len) of a chunk.
type span struct{ off, len uint64 }

// space is one chunk's allocator: a sorted list of free spans, first fit,
// coalesced on free. Offsets and lengths are multiples of align.
type space struct {
	size  uint64
	align uint64
	free  []span
	used  uint64
}

func newSpace(size, align uint64) *space {
	return &space{size: size, align: align, free: []span{{0, size}}}
}

func (s *space) round(n uint64) uint64 { return (n + s.align - 1) / s.align * s.align }

// alloc takes n bytes (rounded up to align), or reports false.
func (s *space) alloc(n uint64) (uint64, bool) {
	n = s.round(n)
	for i, f := range s.free {
		if f.len < n {
			continue
		}
		off := f.off
		if f.len == n {
			s.free = slices.Delete(s.free, i, i+1)
		} else {
			s.free[i] = span{f.off + n, f.len - n}
		}
		s.used += n
		return off, true
	}
	return 0, false
}

// take removes exactly [off, off+n) from the free list (log replay); it
// reports false if any of it is not free.
func (s *space) take(off, n uint64) bool {
	n = s.round(n)
	i := sort.Search(len(s.free), func(i int) bool { return s.free[i].off+s.free[i].len > off })
	if i == len(s.free) || s.free[i].off > off || s.free[i].off+s.free[i].len < off+n {
		return false
	}
	f := s.free[i]
	var repl []span
	if f.off < off {
		repl = append(repl, span{f.off, off - f.off})
	}
	if end := off + n; end < f.off+f.len {
		repl = append(repl, span{end, f.off + f.len - end})
	}
	s.free = slices.Replace(s.free, i, i+1, repl...)
	s.used += n
	return true
}

// release gives [off, off+n) back.
func (s *space) release(off, n uint64) {
	n = s.round(n)
	i := sort.Search(len(s.free), func(i int) bool { return s.free[i].off > off })
	s.free = slices.Insert(s.free, i, span{off, n})
	// Coalesce with the next, then the previous.
	if i+1 < len(s.free) && s.free[i].off+s.free[i].len == s.free[i+1].off {
		s.free[i].len += s.free[i+1].len
		s.free = slices.Delete(s.free, i+1, i+2)
	}
	if i > 0 && s.free[i-1].off+s.free[i-1].len == s.free[i].off {
		s.free[i-1].len += s.free[i].len
		s.free = slices.Delete(s.free, i, i+1)
	}
	s.used -= n
}

func mkdir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("kv: index directory: %w", err)
	}
	return nil
}
