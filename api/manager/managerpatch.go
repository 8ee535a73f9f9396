package manager

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"cxlpool/image/manifest"
	"cxlpool/image/update"
)

// PATCH /redfish/v1/Managers/FM: what an administrator (ConfigureManager)
// may change on the box's manager itself.
//
//   - Links.ActiveSoftwareImage: the image slot to run, the way OpenBMC's
//     bmcweb switches images. Naming the other slot's SoftwareInventory
//     schedules it for the next reset (Updater.Activate: one trial boot,
//     committed only when the daemon reports healthy, else the box comes
//     back on the slot it runs now), so a rollback to the previous image
//     is a trial too; an image below the box's minimum security version
//     is refused (rollback protection). Naming the running slot cancels a
//     pending trial. GET keeps showing the running slot there; the slots'
//     Oem.CxlPool.Trial says which one boots next. Reboot with the
//     Manager.Reset action (managerreset.go) to try it at once.
//   - DateTime: sets the clock through Config.SetTime, which the daemon
//     wires only on the box image, where the clock is the box's own.
//     Elsewhere the clock belongs to the host's operating system, and the
//     property is refused (PropertyNotWritable) rather than pretended.
//   - DateTimeLocalOffset: the offset DateTime is shown in ("+HH:MM",
//     -12:00 to +14:00), kept in the accounts database; the clock itself,
//     the logs and the events stay in UTC.
//
// Everything in the request is checked before anything changes; then the
// image is activated, the clock set and the offset stored, in that order.
// An activation waits for no push: while an image is being written it is
// refused (409 UpdateInProgress), as a second activation at the same
// moment is.

// settingUTCOffset is DateTimeLocalOffset in the accounts database.
const settingUTCOffset = "manager_datetime_local_offset"

// managerETagWindow: the Manager's representation carries the clock
// (DateTime), so its ETag changes every second. A reading of the clock is
// not a change of the resource: If-Match accepts an ETag taken up to this
// long ago as long as nothing else changed.
const managerETagWindow = time.Minute

// The clock may be set within these bounds: anything else is a mistake
// (and outside what a TLS certificate or a log reader can make sense of).
var (
	minDateTime = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	maxDateTime = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
)

const propActiveImage = "Links/ActiveSoftwareImage"

var utcOffsetPattern = regexp.MustCompile(`^[-+][0-1][0-9]:[0-5][0-9]$`)

type managerPatch struct {
	DateTime            *string            `json:"DateTime"`
	DateTimeLocalOffset *string            `json:"DateTimeLocalOffset"`
	Links               *managerLinksPatch `json:"Links"`

	ID                    any `json:"Id" rf:"readonly"`
	Name                  any `json:"Name" rf:"readonly"`
	Description           any `json:"Description" rf:"readonly"`
	ManagerType           any `json:"ManagerType" rf:"readonly"`
	Manufacturer          any `json:"Manufacturer" rf:"readonly"`
	Model                 any `json:"Model" rf:"readonly"`
	FirmwareVersion       any `json:"FirmwareVersion" rf:"readonly"`
	UUID                  any `json:"UUID" rf:"readonly"`
	ServiceEntryPointUUID any `json:"ServiceEntryPointUUID" rf:"readonly"`
	SerialNumber          any `json:"SerialNumber" rf:"readonly"`
	PowerState            any `json:"PowerState" rf:"readonly"`
	Status                any `json:"Status" rf:"readonly"`
	LogServices           any `json:"LogServices" rf:"readonly"`
	NetworkProtocol       any `json:"NetworkProtocol" rf:"readonly"`
	EthernetInterfaces    any `json:"EthernetInterfaces" rf:"readonly"`
	Actions               any `json:"Actions" rf:"readonly"`
}

type managerLinksPatch struct {
	ActiveSoftwareImage *pool.ODataRef `json:"ActiveSoftwareImage"`

	SoftwareImages    any `json:"SoftwareImages" rf:"readonly"`
	ManagerForFabrics any `json:"ManagerForFabrics" rf:"readonly"`
	ManagerForChassis any `json:"ManagerForChassis" rf:"readonly"`
	ManagerInChassis  any `json:"ManagerInChassis" rf:"readonly"`
}

func (s *Server) managerPatchRoutes() {
	s.Handle(http.MethodPatch, pool.ManagerURI, redfish.PrivConfigureManager, s.patchManager)
}

func (s *Server) patchManager(c echo.Context) error {
	var req managerPatch
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	if err := s.managerIfMatch(c); err != nil {
		return err
	}
	var slot string
	if req.Links != nil && req.Links.ActiveSoftwareImage != nil {
		var err error
		if slot, err = s.imageSlotOf(req.Links.ActiveSoftwareImage.ID); err != nil {
			return err
		}
	}
	var at time.Time
	if req.DateTime != nil {
		var err error
		if at, err = s.parseDateTime(*req.DateTime); err != nil {
			return err
		}
	}
	if req.DateTimeLocalOffset != nil {
		if _, err := parseUTCOffset(*req.DateTimeLocalOffset); err != nil {
			return err
		}
	}

	ctx := c.Request().Context()
	p := redfish.PrincipalOf(c)
	changed := false
	if slot != "" {
		// The boot control record is read, changed and written: one
		// writer at a time, pushes included (updatepush.go).
		if !s.updating.CompareAndSwap(false, true) {
			return redfish.NewError(http.StatusConflict, redfish.M("Update.UpdateInProgress"), redfish.M("Base.ResourceInUse"))
		}
		err := s.cfg.Update.Activate(slot)
		s.updating.Store(false)
		if err != nil {
			return s.activateError(err, slot)
		}
		s.log.Warn("image slot scheduled for the next reset", "slot", slot, "user", p.User)
		changed = true
	}
	if req.DateTime != nil {
		if err := s.cfg.SetTime(ctx, at); err != nil {
			return redfish.ErrInternal(fmt.Errorf("manager: set the clock: %w", err))
		}
		s.log.Warn("clock set", "time", at.UTC().Format(redfish.TimeFormat), "user", p.User)
		changed = true
	}
	if req.DateTimeLocalOffset != nil {
		if err := s.Store().SetSettings(ctx, map[string]string{settingUTCOffset: *req.DateTimeLocalOffset}); err != nil {
			return redfish.ErrInternal(fmt.Errorf("manager: %w", err))
		}
		changed = true
	}
	if changed {
		s.Publish(redfish.Event{MessageKey: redfish.MsgResourceChanged, Origin: pool.ManagerURI})
	}
	return s.WriteResource(c, http.StatusOK, s.manager(p))
}

// managerIfMatch is IfMatch for the Manager, over the clock readings of
// the last managerETagWindow.
func (s *Server) managerIfMatch(c echo.Context) error {
	hdr := c.Request().Header.Get("If-Match")
	if hdr == "" {
		return nil
	}
	o := s.manager(redfish.PrincipalOf(c))
	now := s.now()
	_, loc := s.utcOffset()
	for d := time.Duration(0); d <= managerETagWindow; d += time.Second {
		o["DateTime"] = now.Add(-d).In(loc).Format(redfish.TimeFormat)
		body, err := redfish.EncodeJSON(o)
		if err != nil {
			return redfish.ErrInternal(err)
		}
		if redfish.EtagMatches(hdr, redfish.ETag(body)) {
			return nil
		}
	}
	return redfish.ErrPreconditionFailed()
}

// imageSlotOf maps a Links.ActiveSoftwareImage URI to its slot.
func (s *Server) imageSlotOf(uri string) (string, error) {
	if s.cfg.Update == nil {
		return "", redfish.NewError(http.StatusBadRequest, redfish.Msg{Key: "Base.PropertyNotWritable", Args: []string{propActiveImage},
			Resolution: "This box does not run from its A/B image slots (no image to switch to); remove the property and resubmit the request."}.
			WithRelated(propActiveImage))
	}
	id, ok := pool.RefID(uri, pool.FirmwareInventoryURI)
	if !ok {
		return "", redfish.ErrPropertyValueFormat(uri, propActiveImage)
	}
	for _, slot := range []string{update.SlotA, update.SlotB} {
		if id == imageSlotID(slot) {
			return slot, nil
		}
	}
	for _, o := range s.runningFirmware() {
		if o["Id"] == id {
			// Firmware that exists but is no image slot.
			return "", redfish.ErrPropertyValueNotInList(uri, propActiveImage)
		}
	}
	return "", pool.ErrMissingAtURI(uri, propActiveImage)
}

// activateError maps Activate's refusal: the slot's state (409), the
// image's fault or the rollback floor (400), anything else the box's
// (500).
func (s *Server) activateError(err error, slot string) *redfish.Error {
	id := imageSlotID(slot)
	failed := func(status int, resolution string) *redfish.Error {
		return redfish.NewError(status, redfish.Msg{Key: "Update.ActivateFailed", Args: []string{id, "FM"}, Resolution: resolution}.
			WithRelated(propActiveImage)).WithCause(err)
	}
	switch {
	case errors.Is(err, update.ErrTrialPending):
		return failed(http.StatusConflict, "The running image is on trial; it is committed once the service reports healthy. Try again after that.")
	case errors.Is(err, update.ErrSlotNotReady):
		return failed(http.StatusConflict, "The slot holds no complete image (it is empty, being written or marked bad); push an image to it first.")
	case errors.Is(err, manifest.ErrRollback):
		return failed(http.StatusBadRequest, "The image's security version is below the box's minimum (rollback protection): "+
			"only images at or above it can run. Push a newer image instead.")
	case update.IsRefusal(err):
		return redfish.NewError(http.StatusBadRequest, redfish.Msg{Key: "Update.VerificationFailed", Args: []string{id, "FM"},
			Resolution: "The image in the slot no longer verifies (" + err.Error() + ") and was marked bad; push an image again."}.
			WithRelated(propActiveImage)).WithCause(err)
	}
	return failed(http.StatusInternalServerError, err.Error())
}

// parseDateTime checks a DateTime PATCH: there must be a clock to set,
// and the value must be an RFC 3339 time within reason.
func (s *Server) parseDateTime(v string) (time.Time, error) {
	if s.cfg.SetTime == nil {
		return time.Time{}, redfish.NewError(http.StatusBadRequest, redfish.Msg{Key: "Base.PropertyNotWritable", Args: []string{"DateTime"},
			Resolution: "The clock belongs to the host's operating system here, not to this service: set it there (or with NTP)."}.
			WithRelated("DateTime"))
	}
	at, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, redfish.ErrPropertyValueFormat(v, "DateTime")
	}
	if at.Before(minDateTime) || !at.Before(maxDateTime) {
		return time.Time{}, redfish.ErrPropertyValueOutOfRange(v, "DateTime")
	}
	return at, nil
}

// parseUTCOffset reads "+HH:MM" / "-HH:MM" (-12:00 to +14:00).
func parseUTCOffset(v string) (*time.Location, error) {
	const prop = "DateTimeLocalOffset"
	if !utcOffsetPattern.MatchString(v) {
		return nil, redfish.ErrPropertyValueFormat(v, prop)
	}
	h, _ := strconv.Atoi(v[1:3])
	m, _ := strconv.Atoi(v[4:6])
	secs := (h*60 + m) * 60
	if v[0] == '-' {
		secs = -secs
	}
	if secs < -12*3600 || secs > 14*3600 {
		return nil, redfish.ErrPropertyValueOutOfRange(v, prop)
	}
	return time.FixedZone(v, secs), nil
}

// utcOffset is the stored DateTimeLocalOffset and its zone (UTC if none
// is stored, or if it cannot be read).
func (s *Server) utcOffset() (string, *time.Location) {
	v, err := s.Store().Setting(s.ctx, settingUTCOffset, "+00:00")
	if err != nil {
		s.log.Warn("reading DateTimeLocalOffset", "err", err)
		return "+00:00", time.UTC
	}
	loc, lerr := parseUTCOffset(v)
	if lerr != nil {
		return "+00:00", time.UTC
	}
	return v, loc
}

// managerSettings adds what this file and managerreset.go contribute to
// the Manager: the clock in its offset, the image slots (the running one
// as ActiveSoftwareImage) and the Reset action.
func (s *Server) managerSettings(o redfish.Obj) {
	offset, loc := s.utcOffset()
	o["DateTime"], o["DateTimeLocalOffset"] = s.now().In(loc).Format(redfish.TimeFormat), offset
	if s.cfg.Update != nil {
		if slots, err := s.cfg.Update.Slots(); err != nil {
			s.log.Warn("reading the image slots", "err", err)
		} else if len(slots) > 0 {
			links, _ := o["Links"].(redfish.Obj)
			if links == nil {
				links = redfish.Obj{}
				o["Links"] = links
			}
			uris := make([]string, 0, len(slots))
			for _, st := range slots {
				u := pool.FirmwareInventoryURI + "/" + imageSlotID(st.Slot)
				uris = append(uris, u)
				if st.Running {
					links["ActiveSoftwareImage"] = redfish.Link(u)
				}
			}
			links["SoftwareImages"] = redfish.Links(uris...)
			links["SoftwareImages@odata.count"] = len(uris)
		}
	}
	s.addManagerReset(o)
}
