package manager

import (
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
)

// POST /redfish/v1/Managers/FM/Actions/Manager.Reset restarts the box,
// so that an activated image slot (managerpatch.go) or a pushed one is
// tried at once. It exists only where the daemon has a reboot hook
// (Config.Reboot: on the box image). GracefulRestart (the default when
// ResetType is left out) and ForceRestart do the same there: the image's
// init has no services to stop, so both sync the filesystems and restart.
// As the schema asks, the answer (204) goes out before the box goes down.
// A reset while a pushed image is being written is refused (409): the
// push would have to start again.

const (
	managerResetAction = "Manager.Reset"
	managerResetTarget = pool.ManagerURI + "/Actions/" + managerResetAction
)

// managerResetTypes are the ResetType values Manager.Reset accepts.
var managerResetTypes = []string{"GracefulRestart", "ForceRestart"}

func (s *Server) managerResetRoutes() {
	if s.cfg.Reboot == nil {
		return
	}
	s.Handle(http.MethodPost, managerResetTarget, redfish.PrivConfigureManager, s.resetManager)
}

func (s *Server) resetManager(c echo.Context) error {
	var req pool.ResetRequest
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	rt := managerResetTypes[0]
	if req.ResetType != nil {
		rt = *req.ResetType
	}
	if !slices.Contains(managerResetTypes, rt) {
		return redfish.NewError(http.StatusBadRequest, redfish.M("Base.ActionParameterValueNotInList", rt, "ResetType", managerResetAction).WithRelated("ResetType"))
	}
	if s.updating.Load() {
		return redfish.NewError(http.StatusConflict, redfish.M("Update.UpdateInProgress"), redfish.M("Base.ResourceInUse"))
	}
	s.log.Warn("manager reset: rebooting the box", "type", rt, "user", redfish.PrincipalOf(c).User)
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		if err := s.cfg.Reboot(s.ctx); err != nil && s.ctx.Err() == nil {
			s.log.Error("manager reset failed", "err", err)
		}
	}()
	return s.NoContent(c)
}

// addManagerReset adds the Reset action to the Manager where it is
// served.
func (s *Server) addManagerReset(o redfish.Obj) {
	if !s.Routed(managerResetTarget) { // HasRoute is for GET routes
		return
	}
	acts, _ := o["Actions"].(redfish.Obj)
	if acts == nil {
		acts = redfish.Obj{}
		o["Actions"] = acts
	}
	acts["#"+managerResetAction] = redfish.Obj{
		"target":                            managerResetTarget,
		"ResetType@Redfish.AllowableValues": managerResetTypes,
	}
}
