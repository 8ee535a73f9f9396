package capacity

import (
	"context"
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"

	"cxlpool/api/board"
	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"cxlpool/bmc"
	"cxlpool/dcd"
)

// Head power and the identify LED.
//
// POST Systems/Host<n>/Actions/ComputerSystem.Reset switches the host's
// head on (On), off (ForceOff) or through a cycle (PowerCycle,
// ForceRestart) through the policy loop, which first fences the host's
// capacity: grants to it are refused, its grants are taken back with a
// forced, sanitizing release, and only then is the power cut; after
// power-on the ledger is reconciled and grants are accepted again. The
// request answers 202 with a task (it takes seconds); the task ends
// Completed with 204, or Exception with the reason (409 while another
// reset of the head runs, 503 without a board controller). Systems show
// their head's PowerState and the action with its allowable values.
//
// Who may: Administrators and Operators (ConfigureComponents). Cutting a
// head's power is an appliance operation, not a capacity one, so host
// accounts get 403 for every system's reset, their own included, the
// same answer whether or not the system is theirs; reading a system
// stays as before (404 for other hosts').
//
// Chassis/Pool shows the identify LED as LocationIndicatorActive; PATCH
// sets it (Administrators and Operators).

// resetTypes are the ResetType values the head power action accepts.
var resetTypes = []string{string(bmc.ResetOn), string(bmc.ResetForceOff), string(bmc.ResetPowerCycle), string(bmc.ResetForceRestart)}

const resetAction = "ComputerSystem.Reset"

type chassisPatch struct {
	LocationIndicatorActive *bool `json:"LocationIndicatorActive"`
	ID                      any   `json:"Id" rf:"readonly"`
	Name                    any   `json:"Name" rf:"readonly"`
	ChassisType             any   `json:"ChassisType" rf:"readonly"`
	PowerState              any   `json:"PowerState" rf:"readonly"`
	Status                  any   `json:"Status" rf:"readonly"`
	SerialNumber            any   `json:"SerialNumber" rf:"readonly"`
	Model                   any   `json:"Model" rf:"readonly"`
}

// boardRoutes serves board management (api/board) and, on the Chassis
// and the Systems, the identify LED and head power, when there is a board
// and a pool.
func (s *Server) boardRoutes() {
	b := s.cfg.Board
	if b == nil || s.capacity == nil {
		return
	}
	brd := board.New(s.deps, board.Config{Board: b})
	brd.Routes()
	s.headPowerRoutes(b)
	brd.FeedAlarms()
}

func resetTarget(h dcd.HostID) string { return pool.SystemURI(h) + "/Actions/" + resetAction }

func (s *Server) headPowerRoutes(b board.Board) {
	s.Handle(http.MethodPost, pool.SystemsURI+"/:id/Actions/"+resetAction, redfish.PrivConfigureComponents, func(c echo.Context) error {
		_, h, err := s.lookupSystem(c)
		if err != nil {
			return err
		}
		var req pool.ResetRequest
		if err := s.Decode(c, &req); err != nil {
			return err
		}
		if req.ResetType == nil {
			return redfish.NewError(http.StatusBadRequest, redfish.M("Base.ActionParameterMissing", resetAction, "ResetType"))
		}
		rt := *req.ResetType
		if !slices.Contains(resetTypes, rt) {
			return redfish.NewError(http.StatusBadRequest, redfish.M("Base.ActionParameterValueNotInList", rt, "ResetType", resetAction).WithRelated("ResetType"))
		}
		target := redfish.Target{Type: "ComputerSystem", ID: pool.SystemID(h), URI: pool.SystemURI(h)}
		// What can be known at once is answered at once: no board
		// controller, no power control for this head.
		heads, err := b.HeadPower(c.Request().Context())
		if err != nil {
			return pool.FromDomain(err, target)
		}
		if int(h) >= len(heads) {
			return redfish.NewError(http.StatusBadRequest, redfish.M("Base.ActionNotSupported", resetAction))
		}
		t := s.StartTask(c, redfish.TaskOptions{Name: rt + " " + pool.SystemID(h), Host: pool.HostRef(h), Target: target},
			func(ctx context.Context, _ *redfish.Task) (redfish.TaskResult, error) {
				if err := b.ResetHead(ctx, int(h), bmc.ResetType(rt)); err != nil {
					return redfish.TaskResult{}, err
				}
				return redfish.TaskResult{Status: http.StatusNoContent, Messages: []redfish.Msg{redfish.M("Base.Success")}}, nil
			})
		return s.Accepted(c, t)
	})
	s.Handle(http.MethodPatch, pool.ChassisURI, redfish.PrivConfigureComponents, func(c echo.Context) error {
		var req chassisPatch
		if err := s.Decode(c, &req); err != nil {
			return err
		}
		if err := s.IfMatch(c, s.chassis()); err != nil {
			return err
		}
		if req.LocationIndicatorActive != nil {
			if err := b.SetIdentify(c.Request().Context(), *req.LocationIndicatorActive); err != nil {
				return pool.FromDomain(err, redfish.Target{Type: "Chassis", ID: "Pool", URI: pool.ChassisURI})
			}
			s.Publish(redfish.Event{MessageKey: redfish.MsgResourceChanged, Origin: pool.ChassisURI})
		}
		return s.WriteResource(c, http.StatusOK, s.chassis())
	})
}

// chassisBoard adds the board's view to the Chassis: the identify LED,
// when the board controller answers.
func (s *Server) chassisBoard(o redfish.Obj) {
	b := s.cfg.Board
	if b == nil {
		return
	}
	ctx, cancel := board.HTTPContext()
	defer cancel()
	if on, err := b.Identify(ctx); err == nil {
		o["LocationIndicatorActive"] = on
	}
}

// systemBoard adds the head's power to a ComputerSystem: its PowerState
// (when the board controller answers) and the reset action.
func (s *Server) systemBoard(ctx context.Context, o redfish.Obj, h dcd.HostID) {
	b := s.cfg.Board
	if b == nil || !s.Routed(pool.SystemsURI+"/:id/Actions/"+resetAction) {
		return
	}
	o["Actions"] = redfish.Obj{"#" + resetAction: redfish.Obj{
		"target":                            resetTarget(h),
		"ResetType@Redfish.AllowableValues": resetTypes,
	}}
	if heads, err := b.HeadPower(ctx); err == nil && int(h) < len(heads) {
		o["PowerState"] = string(heads[h].State)
	}
}
