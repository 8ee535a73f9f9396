package telemetry

import (
	"cmp"
	"context"
	"slices"
	"time"

	"cxlpool/fabric/cci"
	"cxlpool/hmu/agg"
	"cxlpool/hmu/stream"
)

// pump renders frames at FrameInterval for every hub with clients: the
// appliance hub gets the heatmap and the top-K of every host, shared
// capacity and the pool; a host's hub gets the heatmap masked to the
// cells its extents cover and the top-K of its own and of the shared
// capacity it holds. Hubs without clients are skipped (a new client
// first gets the hub's retained frames, then fresh ones).
func (t *Service) pump(ctx context.Context) {
	tick := time.NewTicker(t.cfg.FrameInterval)
	defer tick.Stop()
	scopes := make([]int, 0, t.hosts+2)
	for h := range t.hosts {
		scopes = append(scopes, h)
	}
	scopes = append(scopes, agg.Shared, agg.Pool)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		if t.all.Stats().Clients > 0 {
			for _, f := range t.all.Render(t.coll, now, scopes, t.cfg.TopN) {
				t.all.Publish(f)
			}
		}
		for h, hub := range t.perHost {
			if hub.Stats().Clients > 0 {
				for _, f := range t.hostFrames(hub, h, now) {
					hub.Publish(f)
				}
			}
		}
	}
}

// hostFrames renders one round of host h's frames with hub's sequence
// numbers: the masked heatmap, the host's top-K, and the top-K of the
// shared capacity it holds.
func (t *Service) hostFrames(hub *stream.Hub, h int, now time.Time) [][]byte {
	mine := t.layout.Extents(h)
	hm := t.coll.Heatmap()
	f := stream.HeatmapFrame(hub.NextSeq(), now, hm)
	mask := coveredCells(mine, hm.CellSize, len(f.Cells))
	for i := range f.Cells {
		if !mask[i] {
			f.Cells[i] = 0
		}
	}
	out := [][]byte{stream.AppendHeatmap(nil, f)}
	rep := t.coll.Report()
	bound := map[int]uint64{}
	for _, s := range rep.Scopes {
		bound[s.Scope] = s.ErrorBound
	}
	own := stream.TopKFrame(hub.NextSeq(), now, h, rep.UnitSize, bound[h], t.coll.Top(h, t.cfg.TopN))
	out = append(out, stream.AppendTopK(nil, own))
	shared := heldOnly(t.coll.Top(agg.Shared, 4*t.cfg.TopN), mine)
	sf := stream.TopKFrame(hub.NextSeq(), now, agg.Shared, rep.UnitSize, bound[agg.Shared], shared[:min(len(shared), t.cfg.TopN)])
	return append(out, stream.AppendTopK(nil, sf))
}

// heldOnly keeps the hot units that lie in extents: a host's view of
// the shared scope, which also holds capacity other hosts share without it.
func heldOnly(hot []agg.Hot, extents []cci.Extent) []agg.Hot {
	var out []agg.Hot
	for _, u := range hot {
		if slices.ContainsFunc(extents, func(e cci.Extent) bool { return u.DPA >= e.DPA && u.DPA < e.End() }) {
			out = append(out, u)
		}
	}
	return out
}

// coveredCells marks the heatmap cells wholly inside the union of
// extents: a partly covered cell would show other hosts' heat.
func coveredCells(extents []cci.Extent, cell uint64, n int) []bool {
	mask := make([]bool, n)
	es := slices.Clone(extents)
	slices.SortFunc(es, func(a, b cci.Extent) int { return cmp.Compare(a.DPA, b.DPA) })
	mark := func(start, end uint64) {
		for c := (start + cell - 1) / cell; (c+1)*cell <= end && c < uint64(n); c++ {
			mask[c] = true
		}
	}
	var start, end uint64
	open := false
	for _, e := range es {
		if open && e.DPA <= end {
			end = max(end, e.End())
			continue
		}
		if open {
			mark(start, end)
		}
		start, end, open = e.DPA, e.End(), true
	}
	if open {
		mark(start, end)
	}
	return mask
}
