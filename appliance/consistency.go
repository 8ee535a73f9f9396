package appliance

import (
	"context"
	"sync"
	"time"

	"cxlpool/dcd"
)

// startCheckSettle bounds how long the check at start waits for the flows
// the first reconcile resumed; each of them ends within the add or release
// timeout, so only a pool that is never quiet runs past it.
const startCheckSettle = 2 * time.Minute

// startCheck is the consistency check the daemon runs once after its first
// reconcile (see dcd.CheckInvariants): the proof, at every start, that the
// ledger, the device and the exports agree. Open makes it, so StartCheck
// may wait for it while Start still runs; done closes when it ends.
type startCheck struct {
	once sync.Once // Start runs it once
	done chan struct{}
	rep  dcd.InvariantReport
	err  error
}

// checkAtStart runs the check in the background: it waits for the flows
// in flight (Manager.Settle), so it must not hold up the start. Violations
// are logged as errors, one line each; StartCheck returns the report
// (the API turns violations into a Redfish event).
func (a *Appliance) checkAtStart(ctx context.Context) {
	sc := a.check
	started := false
	sc.once.Do(func() { started = true })
	if !started {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	a.closers = append(a.closers, func() error { cancel(); <-sc.done; return nil })
	var exports dcd.ExportView
	if a.Exports != nil { // a nil *rdma.Service must stay a nil interface
		exports = a.Exports
	}
	log := a.cfg.Logger.With("component", "consistency")
	go func() {
		defer close(sc.done)
		sctx, stop := context.WithTimeout(ctx, startCheckSettle)
		defer stop()
		sc.rep, sc.err = a.Manager.CheckInvariants(sctx, exports)
		switch {
		case sc.err != nil:
			if ctx.Err() == nil {
				log.Warn("consistency check after reconcile not done", "err", sc.err)
			}
		case !sc.rep.OK():
			for _, v := range sc.rep.Violations {
				log.Error("ledger, device and exports disagree after reconcile", "rule", v.Rule, "violation", v.Message)
			}
		default:
			log.Info("ledger, device and exports agree after reconcile", "hosts", sc.rep.Hosts, "grants", sc.rep.Grants,
				"orphans", sc.rep.Orphans, "exports", sc.rep.Exports)
		}
	}()
}

// StartCheck waits for the consistency check that Start runs after the
// first reconcile and returns its report. It may be called before Start
// returns; if Start fails, it waits for ctx.
func (a *Appliance) StartCheck(ctx context.Context) (dcd.InvariantReport, error) {
	select {
	case <-a.check.done:
		return a.check.rep, a.check.err
	case <-ctx.Done():
		return dcd.InvariantReport{}, ctx.Err()
	}
}
