package capacity

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"cxlpool/api/internal/pool"
	"cxlpool/dcd"
)

// Pool gauges, read from the pool view at scrape time.

var (
	poolBytesDesc = prometheus.NewDesc("cxlpool_pool_bytes",
		"Pool capacity by state: free, reserved (chunks no host holds), granted (held by one host), "+
			"shared (held by several), orphaned (on the device under no ledger tag).", []string{"state"}, nil)
	poolTotalDesc = prometheus.NewDesc("cxlpool_pool_total_bytes",
		"The device's dynamic capacity.", nil, nil)
	grantsDesc = prometheus.NewDesc("cxlpool_grants",
		"Grants (Connections and their history) by state.", []string{"state"}, nil)
	hostGrantedDesc = prometheus.NewDesc("cxlpool_host_granted_bytes",
		"Capacity each host holds in granted grants.", []string{"host"}, nil)
)

// grantStates are every state a grant can be in, so that each gauge
// exists (at 0) before anything reaches that state.
var grantStates = []dcd.GrantState{dcd.GrantAdding, dcd.GrantGranted, dcd.GrantReleasing,
	dcd.GrantReleased, dcd.GrantFailed, dcd.GrantLost}

// scrapeTimeout bounds the ledger reads of one scrape.
const scrapeTimeout = 5 * time.Second

type poolCollector struct{ s *Server }

func (pc *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- poolBytesDesc
	ch <- poolTotalDesc
	ch <- grantsDesc
	ch <- hostGrantedDesc
}

func (pc *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := pc.s
	ctx, cancel := context.WithTimeout(s.ctx, scrapeTimeout)
	defer cancel()
	v, err := s.capacity.snapshot(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(poolBytesDesc, err)
		return
	}
	u := v.usage()
	for _, x := range []struct {
		state string
		n     uint64
	}{{"free", u.free}, {"reserved", u.reserved}, {"granted", u.granted}, {"shared", u.shared}, {"orphaned", u.orphaned}} {
		ch <- prometheus.MustNewConstMetric(poolBytesDesc, prometheus.GaugeValue, float64(x.n), x.state)
	}
	ch <- prometheus.MustNewConstMetric(poolTotalDesc, prometheus.GaugeValue, float64(u.total))
	for _, h := range v.heads {
		ld := dcd.HostID(h.LD)
		ch <- prometheus.MustNewConstMetric(hostGrantedDesc, prometheus.GaugeValue, float64(v.hostGrantedBytes(ld)), pool.SystemID(ld))
	}
	all, err := s.mgr.Ledger().Grants(ctx, dcd.GrantFilter{})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(grantsDesc, err)
		return
	}
	counts := map[dcd.GrantState]int{}
	for _, g := range all {
		counts[g.State]++
	}
	for _, st := range grantStates {
		ch <- prometheus.MustNewConstMetric(grantsDesc, prometheus.GaugeValue, float64(counts[st]), string(st))
	}
}
