package manager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
)

// POST /redfish/v1/Managers/FM/Actions/Oem/CxlPool.CheckConsistency runs
// the capacity invariant checker (dcd.CheckInvariants): it waits for the
// flows in flight to finish, then compares the ledger, the device's extent
// and tag lists and the live exports in one snapshot, and answers 200 with
// the report:
//
//	{"Consistent": false, "Checked": {"Hosts": 8, "Chunks": 3, "Grants": 4, "Orphans": 0, "Exports": 1},
//	 "Unsettled": 0, "Violations": [{"Rule": "grant-held-on-device", "Message": "grant 7 (chunk 3, host 2) is granted ..."}]}
//
// A report with violations is also published as a
// ResourceEvent.ResourceErrorsDetected event about the DCD. It is a debug
// and support tool: it reads every host's extent list from the device, so
// it takes ConfigureManager (administrators). While flows keep the ledger
// moving past consistencyTimeout it answers 503 with Retry-After.
//
// Config.StartCheck, when set, is the daemon's own check after its first
// reconcile; a report with violations becomes the same event once the
// service runs.

const (
	consistencyAction = "CxlPool.CheckConsistency"
	consistencyTarget = pool.ManagerURI + "/Actions/Oem/" + consistencyAction
	// consistencyTimeout bounds the wait for a quiet ledger.
	consistencyTimeout = 30 * time.Second
	// consistencyProperty names what the event is about.
	consistencyProperty = "Oem/CxlPool/Consistency"
)

func (s *Server) consistencyRoutes() {
	if s.mgr == nil {
		return
	}
	s.Handle(http.MethodPost, consistencyTarget, redfish.PrivConfigureManager, s.checkConsistency)
	if s.cfg.StartCheck == nil {
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		rep, err := s.cfg.StartCheck(s.ctx)
		if err == nil {
			s.publishViolations(rep, "after the daemon's start")
		}
	}()
}

func (s *Server) checkConsistency(c echo.Context) error {
	if c.Request().ContentLength != 0 {
		var none struct{}
		if err := s.Decode(c, &none); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), consistencyTimeout)
	defer cancel()
	rep, err := s.mgr.CheckInvariants(ctx, s.pool.ExportView())
	switch {
	case errors.Is(err, dcd.ErrConflict), errors.Is(err, context.DeadlineExceeded) && c.Request().Context().Err() == nil:
		e := redfish.ErrServiceUnavailable(pool.RetryBusySeconds).WithCause(err)
		e.Messages[0].Resolution = "Capacity flows kept the ledger changing, so no consistent snapshot could be taken " +
			"(the check waits for grants and releases in flight to finish). Retry when the pool is quieter."
		return e
	case err != nil:
		return pool.FromDomain(err, redfish.Target{Type: "Manager", ID: "FM", URI: pool.ManagerURI})
	}
	s.publishViolations(rep, "on request")
	return s.WriteResource(c, http.StatusOK, consistencyBody(rep, s.now()))
}

// publishViolations logs and publishes a report that found violations.
func (s *Server) publishViolations(rep dcd.InvariantReport, when string) {
	if rep.OK() {
		return
	}
	first := rep.Violations[0]
	s.log.Error("consistency check: ledger, device and exports disagree", "when", when,
		"violations", len(rep.Violations), "first_rule", first.Rule, "first", first.Message)
	summary := fmt.Sprintf("%d capacity consistency violations %s; first (%s): %s", len(rep.Violations), when, first.Rule, first.Message)
	s.Publish(redfish.Event{MessageKey: "ResourceEvent.ResourceErrorsDetected", Args: []string{consistencyProperty, summary}, Origin: pool.DCDURI})
}

func consistencyBody(rep dcd.InvariantReport, now time.Time) redfish.Obj {
	vs := make([]redfish.Obj, len(rep.Violations))
	for i, v := range rep.Violations {
		vs[i] = redfish.Obj{"Rule": v.Rule, "Message": v.Message}
	}
	return redfish.Obj{
		"Consistent": rep.OK(),
		"Time":       now.Format(redfish.TimeFormat),
		"Checked": redfish.Obj{"Hosts": rep.Hosts, "Chunks": rep.Chunks, "Grants": rep.Grants,
			"Orphans": rep.Orphans, "Exports": rep.Exports},
		"Unsettled":  rep.Unsettled,
		"Violations": vs,
	}
}

// addConsistencyAction lists the action in the Manager's Actions.Oem for
// those who may run it.
func (s *Server) addConsistencyAction(o redfish.Obj, p *redfish.Principal) {
	if !s.Routed(consistencyTarget) || !p.Has(redfish.PrivConfigureManager) {
		return
	}
	acts, _ := o["Actions"].(redfish.Obj)
	if acts == nil {
		acts = redfish.Obj{}
		o["Actions"] = acts
	}
	oem, _ := acts["Oem"].(redfish.Obj)
	if oem == nil {
		oem = redfish.Obj{}
		acts["Oem"] = oem
	}
	oem["#"+consistencyAction] = redfish.Obj{"target": consistencyTarget}
}
