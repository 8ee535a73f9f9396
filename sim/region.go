package sim

import (
	"math/bits"

	"cxlpool/fabric/cci"
)

// region is one DC region and its block allocator: a bitmap of used blocks.
// A bitmap keeps every operation O(blocks) (4096 blocks for the reference
// box) and makes correctness obvious; the allocator never needs more.
type region struct {
	index           int
	base, length    uint64
	blockSize       uint64
	sharable        bool
	sor             bool
	sorConfigurable bool
	used            []bool
	nused           int
}

func newRegion(index int, base, length, blockSize uint64, sharable, sor, sorConf bool) *region {
	r := &region{index: index, base: base, length: length, sharable: sharable, sor: sor, sorConfigurable: sorConf}
	r.setBlockSize(blockSize)
	return r
}

// setBlockSize changes the block size; only valid while nothing is used.
func (r *region) setBlockSize(bs uint64) {
	r.blockSize = bs
	r.used = make([]bool, r.length/bs)
	r.nused = 0
}

// blockMask is the 5600h Supported Block Size Mask: every power of two in
// 2 MiB…1 GiB that divides the region length.
func (r *region) blockMask() uint64 {
	var m uint64
	for s := minBlockShift; s <= maxBlockShift; s++ {
		if r.length%(1<<s) == 0 {
			m |= 1 << s
		}
	}
	return m
}

func (r *region) supportsBlockSize(bs uint64) bool {
	return bits.OnesCount64(bs) == 1 && r.blockMask()&bs != 0
}

func (r *region) end() uint64 { return r.base + r.length }

// contains reports whether [dpa, dpa+n) lies inside the region.
func (r *region) contains(dpa, n uint64) bool {
	return dpa >= r.base && n <= r.length && dpa-r.base <= r.length-n
}

// aligned reports whether [dpa, dpa+n) is a non-empty whole-block range of
// the region.
func (r *region) aligned(dpa, n uint64) bool {
	return n > 0 && r.contains(dpa, n) && (dpa-r.base)%r.blockSize == 0 && n%r.blockSize == 0
}

func (r *region) blocks(dpa, n uint64) (first, count int) {
	return int((dpa - r.base) / r.blockSize), int(n / r.blockSize)
}

// isFree reports whether every block of an aligned range is free.
func (r *region) isFree(dpa, n uint64) bool {
	f, c := r.blocks(dpa, n)
	for i := f; i < f+c; i++ {
		if r.used[i] {
			return false
		}
	}
	return true
}

// mark sets the used state of every block of an aligned range.
func (r *region) mark(dpa, n uint64, used bool) {
	f, c := r.blocks(dpa, n)
	for i := f; i < f+c; i++ {
		if r.used[i] != used {
			r.used[i] = used
			if used {
				r.nused++
			} else {
				r.nused--
			}
		}
	}
}

// findFree picks n bytes from the lowest free blocks, one extent per run of
// free blocks. It marks nothing.
func (r *region) findFree(n uint64) ([]cci.Extent, bool) {
	need := int(n / r.blockSize)
	if need == 0 || need > len(r.used)-r.nused {
		return nil, false
	}
	var out []cci.Extent
	for i := 0; i < len(r.used) && need > 0; {
		if r.used[i] {
			i++
			continue
		}
		j := i
		for j < len(r.used) && !r.used[j] && j-i < need {
			j++
		}
		out = append(out, cci.Extent{DPA: r.base + uint64(i)*r.blockSize, Length: uint64(j-i) * r.blockSize})
		need -= j - i
		i = j
	}
	return out, need == 0
}

// findContiguous picks the lowest run of free blocks holding n bytes.
func (r *region) findContiguous(n uint64) (cci.Extent, bool) {
	need := int(n / r.blockSize)
	if need == 0 {
		return cci.Extent{}, false
	}
	run := 0
	for i, u := range r.used {
		if u {
			run = 0
			continue
		}
		run++
		if run == need {
			start := i - need + 1
			return cci.Extent{DPA: r.base + uint64(start)*r.blockSize, Length: n}, true
		}
	}
	return cci.Extent{}, false
}
