package trace

import (
	"time"

	"cxlpool/hmu/topk"
)

// CHMU models what the box's hotness monitor and hmu's aggregator know:
// every access the device serves, counted per unit of device physical
// address space in a Space-Saving top-K (hmu/topk, as hmu/agg keeps per
// scope) that is multiplied by Decay at every Epoch boundary. It sees
// reads through DAX mappings that never reach the index, and it forgets
// what is not among its K heaviest units: HeatOf is 0 there.
//
// Counts are kept in 4 KiB-unit accesses whatever the tracking unit, so
// HeatOf has the meaning evict.Heat gives it (the decayed access count of
// the 4 KiB units covering the range, summed): one full read of an 80 MiB
// block adds 20,480, spread over its tracking units. The tracking unit is
// 2 MiB by default, one the CHMU capability offers (4 KiB … 2 MiB), so an
// 80 MiB block is 40 counters, not 20,480.
type CHMU struct {
	sum      *topk.Summary
	estimate bool
	unitLog  uint
	epoch    time.Duration
	decay    float64
	next     time.Duration // end of the current epoch
	Accesses uint64        // weight counted
}

// CHMUConfig sizes the model. Zero fields take the defaults noted.
type CHMUConfig struct {
	K        int           // counters (default 8192, hmu/agg's pool scope)
	UnitLog  uint          // log2 of the tracking unit (default 21: 2 MiB)
	Epoch    time.Duration // default 1 s, hmu/agg's default
	Decay    float64       // per epoch (default 0.5, hmu/agg's default)
	Disabled bool          // no CHMU: HeatOf is always 0
	// Estimate makes HeatOf sum the Space-Saving estimates (Count, an
	// upper bound, as hmu/agg's Collector.HeatOf does) instead of the
	// guaranteed lower bounds.
	Estimate bool
}

func newCHMU(c CHMUConfig) *CHMU {
	if c.K <= 0 {
		c.K = 8192
	}
	if c.UnitLog < 12 {
		c.UnitLog = 21
	}
	if c.Epoch <= 0 {
		c.Epoch = time.Second
	}
	if c.Decay <= 0 || c.Decay > 1 {
		c.Decay = 0.5
	}
	if c.Disabled {
		return nil
	}
	return &CHMU{sum: topk.New(c.K), estimate: c.Estimate, unitLog: c.UnitLog, epoch: c.Epoch, decay: c.Decay, next: c.Epoch}
}

// advance closes every epoch that ended by t.
func (c *CHMU) advance(t time.Duration) {
	if c == nil {
		return
	}
	for t >= c.next {
		c.sum.Decay(c.decay)
		c.next += c.epoch
	}
}

// access counts a read (or write) of [dpa, dpa+length).
func (c *CHMU) access(dpa, length uint64) {
	if c == nil || length == 0 {
		return
	}
	end := dpa + length
	for u := dpa >> c.unitLog; u<<c.unitLog < end; u++ {
		lo, hi := max(dpa, u<<c.unitLog), min(end, (u+1)<<c.unitLog)
		w := (hi - lo + 4095) / 4096
		c.sum.Add(u, w)
		c.Accesses += w
	}
}

// HeatOf sums the guaranteed (lower-bound) decayed counts of the tracking
// units the range covers, pro rata for partial units. The lower bound,
// not the estimate (unless CHMUConfig.Estimate): a unit that just took
// over a counter inherits the evicted minimum as its error, and that is
// not evidence of use.
func (c *CHMU) HeatOf(dpa, length uint64) float64 {
	if c == nil || length == 0 {
		return 0
	}
	var h float64
	end := dpa + length
	us := uint64(1) << c.unitLog
	for u := dpa >> c.unitLog; u<<c.unitLog < end; u++ {
		it, ok := c.sum.Get(u)
		if !ok {
			continue
		}
		lo, hi := max(dpa, u<<c.unitLog), min(end, (u+1)<<c.unitLog)
		n := it.Guaranteed()
		if c.estimate {
			n = it.Count
		}
		h += float64(n) * float64(hi-lo) / float64(us)
	}
	return h
}
