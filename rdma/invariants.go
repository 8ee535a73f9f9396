package rdma

import (
	"cmp"
	"slices"

	"cxlpool/dcd"
)

// ExportRanges lists the device capacity every live export reaches, for
// dcd.CheckInvariants (Service implements dcd.ExportView). An export whose
// revocation has started is left out: it refuses new accesses, and the
// ones in flight drain before its grant's release goes to the device.
// A nil Service (a daemon whose pool memory cannot be mapped) has none.
func (s *Service) ExportRanges() []dcd.ExportRange {
	if s == nil {
		return nil
	}
	s.mu.RLock()
	out := make([]dcd.ExportRange, 0, len(s.exports))
	for _, h := range s.exports {
		if h.Revoked() {
			continue
		}
		ranges, _ := layout(h.extents, h.exp.Offset, h.exp.Length)
		out = append(out, dcd.ExportRange{Export: string(h.exp.ID), Chunk: h.exp.Chunk, Ranges: ranges})
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b dcd.ExportRange) int { return cmp.Compare(a.Export, b.Export) })
	return out
}
