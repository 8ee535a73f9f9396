package appliance

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"cxlpool/bmc"
	"cxlpool/dcd"
	"cxlpool/history"
	historystore "cxlpool/history/sqlite"
	"cxlpool/hmu/agg"
)

// The box's history and alerts are history.Service; the appliance opens
// its store in the data directory and gives it the sources below, each a
// reading of a room the appliance assembled.

// HistoryFile is the history store's name inside the data directory.
const HistoryFile = "history.db"

// The metrics the history keeps (history.Series.Metric). Subjects: the
// host's system Id ("Host3") for Host*, the sensor's Id for Sensor*, none
// for the others.
const (
	MetricPoolFreeBytes     = "PoolFreeBytes"
	MetricPoolReservedBytes = "PoolReservedBytes"
	MetricPoolGrantedBytes  = "PoolGrantedBytes"
	MetricPoolFreePercent   = "PoolFreePercent"
	MetricStrandedChunks    = "StrandedChunks"
	MetricHostGrantedBytes  = "HostGrantedBytes"
	MetricHostQuotaPercent  = "HostQuotaPercent"
	MetricHostLinkChanges   = "HostLinkChangesPerHour"
	MetricGrantsPerMinute   = "GrantsPerMinute"
	MetricReleasesPerMinute = "ReleasesPerMinute"
	MetricExportReadBps     = "ExportReadBytesPerSecond"
	MetricExportWriteBps    = "ExportWriteBytesPerSecond"
	MetricSensorPrefix      = "Sensor" // + bmc.ReadingType: SensorTemperature, SensorPower…
	MetricCHMURecordsPerSec = "CHMURecordsPerSecond"
	MetricCHMUTopUnit       = "CHMUTopUnitAccesses"
	MetricCertificateDays   = "CertificateDaysLeft"
	linkFlapWindow          = time.Hour
	historyChangeBuffer     = 256
	certificateRelativePath = "tls/cert.pem" // api's certificate (api/tls.go)
	// managerSensorPrefix starts the Sensor Id of a management computer
	// sensor (api/sensors.go), so that the subject is the Sensor's Id.
	managerSensorPrefix      = "Mgmt_"
	defaultTemperatureWarnC  = 75
	defaultTemperatureCritC  = 90
	defaultCertificateWarnD  = 30
	defaultCertificateCritD  = 7
	defaultPoolFreeWarnPct   = 20
	defaultPoolFreeCritPct   = 10
	defaultLinkFlapsWarnHour = 3
	defaultLinkFlapsCritHour = 10
)

// DefaultTriggers are the alerts a new box starts with; administrators
// edit them (TelemetryService/Triggers).
func DefaultTriggers() []history.Trigger {
	f := func(v float64) *float64 { return &v }
	return []history.Trigger{
		{ID: "PoolFreeLow", Name: "Pool free capacity low", Description: "Free pool capacity below a share of the pool",
			Metric: MetricPoolFreePercent, LowerWarning: f(defaultPoolFreeWarnPct), LowerCritical: f(defaultPoolFreeCritPct), Hysteresis: 1, Enabled: true},
		{ID: "HostOverQuota", Name: "Host over its quota", Description: "A host holds more than its quota (its quota was lowered below what it holds) or nears it",
			Metric: MetricHostQuotaPercent, UpperWarning: f(90), UpperCritical: f(100), Hysteresis: 1, Enabled: true},
		{ID: "TemperatureHigh", Name: "Temperature high", Description: "A board or management computer temperature sensor above its limit",
			Metric: MetricSensorPrefix + string(bmc.Temperature), UpperWarning: f(defaultTemperatureWarnC), UpperCritical: f(defaultTemperatureCritC), Hysteresis: 2, Enabled: true},
		{ID: "LinkFlaps", Name: "Host link flapping", Description: "A host head's link went up or down this many times in the last hour",
			Metric: MetricHostLinkChanges, UpperWarning: f(defaultLinkFlapsWarnHour), UpperCritical: f(defaultLinkFlapsCritHour), Enabled: true},
		{ID: "LostGrants", Name: "Capacity stranded by lost grants", Description: "Chunks whose grants were lost (a restart of the box or a host): free them",
			Metric: MetricStrandedChunks, UpperCritical: f(0), Enabled: true},
		{ID: "CertificateExpiry", Name: "HTTPS certificate expiring", Description: "Days until the box's HTTPS certificate expires",
			Metric: MetricCertificateDays, LowerWarning: f(defaultCertificateWarnD), LowerCritical: f(defaultCertificateCritD), Enabled: true},
	}
}

// startHistory opens the history store and samples into it until ctx
// ends (or Close). A store that cannot be opened is logged and the box
// runs without history.
func (a *Appliance) startHistory(ctx context.Context) {
	log := a.cfg.Logger.With("component", "history")
	st, err := historystore.Open(ctx, filepath.Join(a.cfg.DataDir, HistoryFile), historystore.Options{Logger: log})
	if err != nil {
		log.Error("history disabled: opening its store", "err", err)
		return
	}
	changes, unsubscribe := a.Manager.Subscribe(historyChangeBuffer)
	rates := newChangeRates(a.cfg.Clock())
	src := historySources{a: a, rates: rates}
	svc, err := history.New(ctx, history.Config{Store: st, Sources: src.all(), Defaults: DefaultTriggers(),
		Clock: a.cfg.Clock, Logger: log})
	if err != nil {
		unsubscribe()
		_ = st.Close()
		log.Error("history disabled", "err", err)
		return
	}
	hctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-hctx.Done():
				return
			case c, ok := <-changes:
				if !ok {
					return
				}
				rates.observe(c)
			}
		}
	}()
	go func() { defer wg.Done(); svc.Run(hctx) }()
	a.History = svc
	a.closers = append(a.closers, func() error { cancel(); unsubscribe(); wg.Wait(); return svc.Close() })
}

// changeRates counts the Manager's grants, releases and link changes
// between rounds.
type changeRates struct {
	mu               sync.Mutex
	last             time.Time
	grants, releases int
	links            map[dcd.HostID][]time.Time // link changes in the last linkFlapWindow
}

func newChangeRates(now time.Time) *changeRates {
	return &changeRates{last: now, links: map[dcd.HostID][]time.Time{}}
}

func (r *changeRates) observe(c dcd.Change) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case c.Kind == dcd.ChangeGrant && c.Grant != nil && c.Grant.State == dcd.GrantGranted:
		r.grants++
	case c.Kind == dcd.ChangeGrant && c.Grant != nil && c.Grant.State == dcd.GrantReleased:
		r.releases++
	case c.Kind == dcd.ChangeHost && (c.Message == "link up" || c.Message == "link down"):
		r.links[c.Host] = append(r.links[c.Host], c.Time)
	}
}

// read takes the counts since the last round as rates per minute, and
// each host's link changes of the last hour.
func (r *changeRates) read(now time.Time, hosts []dcd.Host) []history.Sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	minutes := now.Sub(r.last).Minutes()
	var out []history.Sample
	if minutes > 0 {
		out = append(out,
			history.Sample{Series: history.Series{Metric: MetricGrantsPerMinute}, Value: float64(r.grants) / minutes},
			history.Sample{Series: history.Series{Metric: MetricReleasesPerMinute}, Value: float64(r.releases) / minutes})
	}
	r.grants, r.releases, r.last = 0, 0, now
	for _, h := range hosts {
		ts := slices.DeleteFunc(r.links[h.ID], func(t time.Time) bool { return now.Sub(t) > linkFlapWindow })
		r.links[h.ID] = ts
		out = append(out, history.Sample{Series: history.Series{Metric: MetricHostLinkChanges, Subject: hostSubject(h.ID)}, Value: float64(len(ts))})
	}
	return out
}

func hostSubject(h dcd.HostID) string { return "Host" + strconv.Itoa(int(h)) }

// historySources reads the appliance's rooms for one round.
type historySources struct {
	a     *Appliance
	rates *changeRates

	mu       sync.Mutex
	exportAt time.Time
	exportRW [2]uint64 // bytes read, written by every export so far
	chmuAt   time.Time
	chmuRecs uint64
}

func (s *historySources) all() []history.Source {
	return []history.Source{
		{Name: "pool", Read: s.pool},
		{Name: "exports", Read: s.exports},
		{Name: "sensors", Read: s.sensors},
		{Name: "chmu", Read: s.chmu},
		{Name: "certificate", Read: s.certificate},
	}
}

// pool reads the ledger: capacity by state, what each host holds and its
// share of its quota, stranded chunks, and the change rates.
func (s *historySources) pool(ctx context.Context, now time.Time) ([]history.Sample, error) {
	m := s.a.Manager
	chunks, err := m.Ledger().Chunks(ctx)
	if err != nil {
		return nil, fmt.Errorf("chunks: %w", err)
	}
	grants, err := m.Ledger().Grants(ctx, dcd.GrantFilter{})
	if err != nil {
		return nil, fmt.Errorf("grants: %w", err)
	}
	hosts, err := m.Ledger().Hosts(ctx)
	if err != nil {
		return nil, fmt.Errorf("hosts: %w", err)
	}
	box := m.Box()
	total := box.TotalDynamic
	var regions uint64
	for _, r := range box.Regions {
		regions += r.Length
	}
	total = max(total, regions)
	held := map[dcd.ChunkID]bool{}
	lost := map[dcd.ChunkID]bool{}
	perHost := map[dcd.HostID]uint64{}
	for _, g := range grants {
		switch g.State {
		case dcd.GrantGranted, dcd.GrantReleasing:
			held[g.Chunk] = true
			if g.State == dcd.GrantGranted {
				perHost[g.Host] += g.Size()
			}
		case dcd.GrantLost:
			lost[g.Chunk] = true
		}
	}
	var used, reserved, granted uint64
	stranded := 0
	for _, c := range chunks {
		used += c.Size
		if held[c.ID] {
			granted += c.Size
		} else {
			reserved += c.Size
			if lost[c.ID] {
				stranded++
			}
		}
	}
	free := total - min(used, total)
	out := []history.Sample{
		{Series: history.Series{Metric: MetricPoolFreeBytes}, Value: float64(free)},
		{Series: history.Series{Metric: MetricPoolReservedBytes}, Value: float64(reserved)},
		{Series: history.Series{Metric: MetricPoolGrantedBytes}, Value: float64(granted)},
		{Series: history.Series{Metric: MetricStrandedChunks}, Value: float64(stranded)},
	}
	if total > 0 {
		out = append(out, history.Sample{Series: history.Series{Metric: MetricPoolFreePercent}, Value: 100 * float64(free) / float64(total)})
	}
	for _, h := range hosts {
		sub := hostSubject(h.ID)
		out = append(out, history.Sample{Series: history.Series{Metric: MetricHostGrantedBytes, Subject: sub}, Value: float64(perHost[h.ID])})
		if q, err := m.EffectiveQuota(ctx, h); err == nil && q > 0 {
			out = append(out, history.Sample{Series: history.Series{Metric: MetricHostQuotaPercent, Subject: sub}, Value: 100 * float64(perHost[h.ID]) / float64(q)})
		}
	}
	return append(out, s.rates.read(now, hosts)...), nil
}

// exports reads the export traffic counters as throughput since the last
// round (exports revoked in between take their last bytes with them).
func (s *historySources) exports(_ context.Context, now time.Time) ([]history.Sample, error) {
	if s.a.Exports == nil {
		return nil, nil
	}
	var rw [2]uint64
	for _, e := range s.a.Exports.List() {
		if t, err := s.a.Exports.Traffic(e.ID); err == nil {
			rw[0] += t.BytesRead
			rw[1] += t.BytesWritten
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	prev, at := s.exportRW, s.exportAt
	s.exportRW, s.exportAt = rw, now
	secs := now.Sub(at).Seconds()
	if at.IsZero() || secs <= 0 {
		return nil, nil
	}
	rate := func(cur, old uint64) float64 {
		if cur < old { // an export went away: count from what is left
			return float64(cur) / secs
		}
		return float64(cur-old) / secs
	}
	return []history.Sample{
		{Series: history.Series{Metric: MetricExportReadBps}, Value: rate(rw[0], prev[0])},
		{Series: history.Series{Metric: MetricExportWriteBps}, Value: rate(rw[1], prev[1])},
	}, nil
}

// sensors reads every valid board and management computer sensor.
func (s *historySources) sensors(ctx context.Context, _ time.Time) ([]history.Sample, error) {
	if s.a.Board == nil || !s.a.Board.Present() {
		return nil, nil
	}
	board, err := s.a.Board.Sensors(ctx)
	mgr, merr := s.a.Board.ManagerSensors(ctx)
	var out []history.Sample
	add := func(prefix string, list []bmc.Sensor) {
		for _, x := range list {
			if x.Valid {
				out = append(out, history.Sample{Series: history.Series{Metric: MetricSensorPrefix + string(x.ReadingType), Subject: prefix + x.ID}, Value: x.Reading})
			}
		}
	}
	add("", board)
	add(managerSensorPrefix, mgr)
	if err != nil {
		return out, err
	}
	return out, merr
}

// chmu reads the hot-page collector: records ingested per second and the
// hottest unit's decayed accesses.
func (s *historySources) chmu(_ context.Context, now time.Time) ([]history.Sample, error) {
	t := s.a.Telemetry
	if t == nil {
		return nil, nil
	}
	recs := t.Report().Stats.Records
	s.mu.Lock()
	prev, at := s.chmuRecs, s.chmuAt
	s.chmuRecs, s.chmuAt = recs, now
	s.mu.Unlock()
	var out []history.Sample
	if secs := now.Sub(at).Seconds(); !at.IsZero() && secs > 0 && recs >= prev {
		out = append(out, history.Sample{Series: history.Series{Metric: MetricCHMURecordsPerSec}, Value: float64(recs-prev) / secs})
	}
	top := 0.0
	if hot := t.Top(agg.Pool, 1); len(hot) > 0 {
		top = float64(hot[0].Count)
	}
	return append(out, history.Sample{Series: history.Series{Metric: MetricCHMUTopUnit}, Value: top}), nil
}

// certificate reads the days left on the API's HTTPS certificate; none
// yet (the API writes it at its first start) reads nothing.
func (s *historySources) certificate(_ context.Context, now time.Time) ([]history.Sample, error) {
	raw, err := os.ReadFile(filepath.Join(s.a.cfg.DataDir, certificateRelativePath))
	if err != nil {
		return nil, nil //nolint:nilerr // no certificate (yet, or --http): nothing to watch
	}
	b, _ := pem.Decode(raw)
	if b == nil {
		return nil, fmt.Errorf("certificate: no PEM block")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certificate: %w", err)
	}
	return []history.Sample{{Series: history.Series{Metric: MetricCertificateDays}, Value: c.NotAfter.Sub(now).Hours() / 24}}, nil
}
