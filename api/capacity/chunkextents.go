package capacity

import (
	"cmp"
	"slices"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"cxlpool/fabric/cci"
)

// extentsBody is a chunk's Oem.CxlPool.Extents: the DPA ranges its
// holders' grants cover, sorted, each range once. A chunk placed first fit
// may lie in several ranges, so AddressRangeOffsetMiB (the lowest) and
// MemoryChunkSizeMiB do not say where all of it is; the console maps heat
// to chunks with these.
func extentsBody(es []cci.Extent) []redfish.Obj {
	es = slices.Clone(es)
	slices.SortFunc(es, func(a, b cci.Extent) int { return cmp.Compare(a.DPA, b.DPA) })
	var merged []cci.Extent
	for _, e := range es {
		if n := len(merged); n > 0 && e.DPA <= merged[n-1].End() {
			// The same range granted to another holder of a shared chunk,
			// or the next one adjacent to it.
			merged[n-1].Length = max(merged[n-1].End(), e.End()) - merged[n-1].DPA
			continue
		}
		merged = append(merged, cci.Extent{DPA: e.DPA, Length: e.Length})
	}
	out := make([]redfish.Obj, 0, len(merged))
	for _, e := range merged {
		out = append(out, redfish.Obj{"OffsetMiB": pool.MiB(e.DPA), "SizeMiB": pool.MiB(e.Length)})
	}
	return out
}
