package agent_test

import (
	"context"
	"slices"
	"testing"

	"cxlpool/api/apitest"
	"cxlpool/host/agent"
)

// BenchmarkAttach measures, per attach of 256 MiB on the virtual box
// through the agent's local API: the grant alone (the box's part: reserve,
// connect, the host's answer) and attach→usable (the grant plus finding the
// tag and surfacing it on the host), p50 and p99 of each from the same
// run; and per detach the box's release alone (its task: the device asks
// the host, the host answers, sanitize) beside detach→gone (the host's
// release check, the box's release and the host dropping the tag).
// usable/grant and gone/release are the host side's overhead as ratios of
// the box's part.
func BenchmarkAttach(b *testing.B) {
	r := newRig(b)
	a := r.agentAt(b, 0, apitest.UserHost0)
	var grant, usable, release, gone []float64
	ctx := context.Background()
	for b.Loop() {
		at, err := a.Attach(ctx, agent.AttachRequest{SizeBytes: 256 << 20})
		if err != nil {
			b.Fatal(err)
		}
		grant = append(grant, at.GrantSeconds)
		usable = append(usable, at.UsableSeconds)
		d, err := a.Detach(ctx, at.Tag, agent.DetachOptions{})
		if err != nil {
			b.Fatal(err)
		}
		release = append(release, d.ReleaseSeconds)
		gone = append(gone, d.GoneSeconds)
	}
	pct := func(v []float64, p float64) float64 {
		s := slices.Clone(v)
		slices.Sort(s)
		return s[min(len(s)-1, int(p*float64(len(s))))] * 1e3
	}
	b.ReportMetric(pct(grant, 0.5), "grant-p50-ms")
	b.ReportMetric(pct(grant, 0.99), "grant-p99-ms")
	b.ReportMetric(pct(usable, 0.5), "usable-p50-ms")
	b.ReportMetric(pct(usable, 0.99), "usable-p99-ms")
	b.ReportMetric(pct(release, 0.5), "release-p50-ms")
	b.ReportMetric(pct(release, 0.99), "release-p99-ms")
	b.ReportMetric(pct(gone, 0.5), "gone-p50-ms")
	b.ReportMetric(pct(gone, 0.99), "gone-p99-ms")
	b.ReportMetric(pct(usable, 0.5)/pct(grant, 0.5), "usable/grant-p50")
	b.ReportMetric(pct(gone, 0.5)/pct(release, 0.5), "gone/release-p50")
}
