package manager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"slices"
	"sync/atomic"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"cxlpool/image/manifest"
	"cxlpool/image/update"
)

// The multipart push update (DSP0266 "Multipart HTTP push updates"): a
// signed image bundle is streamed from the request straight into the
// inactive A/B slot (image/update), never spooled: the box's data
// partition is far smaller than an image. The request is answered 202
// with a task once the file part has been read; the task reports the
// bytes written as PercentComplete and ends with the verification's
// verdict.

// UpdateUploadURI is the MultipartHttpPushUri.
const UpdateUploadURI = pool.UpdateServiceURI + "/Upload"

// Updater is the image side of the box (an *update.Service on the image):
// it writes a pushed bundle into the inactive slot, lists both slots and
// schedules one for a trial boot at the next reset (Activate: the
// running slot cancels a pending trial; errors as update.Disk.Activate).
type Updater interface {
	Apply(ctx context.Context, r io.Reader, progress func(written int64)) (*manifest.Manifest, error)
	Slots() ([]update.SlotStatus, error)
	Activate(slot string) error
}

// Operation apply times a push may ask for in
// UpdateParameters.@Redfish.OperationApplyTime.
const (
	applyImmediate = "Immediate" // reboot into the new image at once
	applyOnReset   = "OnReset"   // the new image is tried at the next reset
)

// maxUpdateParams bounds the UpdateParameters part.
const maxUpdateParams = 64 << 10

// updateParams is the UpdateParameters part. Targets, when given, may
// only name this service's own firmware: the image always goes to the
// inactive slot.
type updateParams struct {
	Targets        []string `json:"Targets"`
	ApplyTime      *string  `json:"@Redfish.OperationApplyTime" enum:"Immediate|OnReset"`
	ForceUpdate    *bool    `json:"ForceUpdate"`
	ExcludeTargets []string `json:"ExcludeTargets"`
}

// applyTimes are the apply times this box can honour: Immediate needs
// the appliance's reboot hook.
func (s *Server) applyTimes() []string {
	if s.cfg.Reboot != nil {
		return []string{applyImmediate, applyOnReset}
	}
	return []string{applyOnReset}
}

// uploadLimit bounds a push request: the image plus room for the
// UpdateParameters part and the multipart framing.
func (s *Server) uploadLimit() int64 { return s.cfg.MaxImageBytes + 1<<20 }

// errApplyEnded tells the request's copy loop that Apply stopped reading
// (it refused the image or failed), so the rest of the upload is moot.
var errApplyEnded = errors.New("api: update: the image was no longer read")

func (s *Server) updatePushRoutes() {
	if s.cfg.Update == nil {
		return
	}
	// Only administrators: ConfigureManager (the box's own firmware) is
	// the route's privilege and ConfigureComponents is checked too.
	s.HandleUpload(UpdateUploadURI, redfish.PrivConfigureManager, s.uploadLimit(), s.pushUpdate)
}

func (s *Server) pushUpdate(c echo.Context) error {
	if !redfish.PrincipalOf(c).Has(redfish.PrivConfigureComponents) {
		return redfish.ErrInsufficientPrivilege()
	}
	r := c.Request()
	mt, mp, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" || mp["boundary"] == "" {
		return redfish.ErrUnsupportedMediaType()
	}
	mr := multipart.NewReader(r.Body, mp["boundary"])
	params, err := s.readUpdateParams(mr)
	if err != nil {
		return err
	}
	file, err := nextPart(mr, "UpdateFile")
	if err != nil {
		return err
	}
	if !s.updating.CompareAndSwap(false, true) {
		return redfish.NewError(http.StatusConflict, redfish.M("Update.UpdateInProgress"), redfish.M("Base.ResourceInUse"))
	}
	slots, err := s.cfg.Update.Slots()
	if err != nil {
		s.updating.Store(false)
		return redfish.ErrInternal(fmt.Errorf("update: slots: %w", err))
	}
	target := imageSlotID(inactiveSlot(slots))
	image := file.FileName()
	if image == "" {
		image = "UpdateFile"
	}
	applyTime := applyOnReset
	if params.ApplyTime != nil {
		applyTime = *params.ApplyTime
	}

	// The request's copy loop and the task's Apply meet at a pipe. A
	// failed upload (the client went away, the body is too large) is
	// recorded before the pipe is closed with it, so the task can tell a
	// transfer failure from a bad image.
	pr, pw := io.Pipe()
	var transferErr atomic.Pointer[error]
	total := r.ContentLength
	t := s.StartTask(c, redfish.TaskOptions{Name: "Firmware update", Target: redfish.Target{Type: "SoftwareInventory", ID: target,
		URI: pool.FirmwareInventoryURI + "/" + target}}, func(ctx context.Context, t *redfish.Task) (redfish.TaskResult, error) {
		defer s.updating.Store(false)
		m, err := s.cfg.Update.Apply(ctx, pr, func(written int64) {
			if total > 0 {
				// Writing is most of the work; the read-back
				// verification is the last tenth.
				t.SetPercent(int(min(written*90/total, 90)))
			}
		})
		pr.CloseWithError(errApplyEnded)
		if err != nil {
			return redfish.TaskResult{}, s.updateError(err, transferErr.Load(), image, target)
		}
		if m.Version != "" {
			image = m.Version
		}
		msgs := []redfish.Msg{redfish.M("Update.UpdateSuccessful", target, image)}
		if applyTime == applyOnReset {
			msgs = append(msgs, redfish.M("Update.AwaitToActivate", image, target))
		}
		inv := s.slotInventory()
		var body any
		for _, o := range inv {
			if o["Id"] == target {
				body = o
			}
		}
		return redfish.TaskResult{Status: http.StatusOK, Body: body, Messages: msgs}, nil
	})
	_, err = io.Copy(pw, file)
	if err != nil && !errors.Is(err, errApplyEnded) {
		transferErr.Store(&err)
		pw.CloseWithError(err)
	} else {
		pw.Close()
	}
	if applyTime == applyImmediate {
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			select {
			case <-t.Done():
			case <-s.ctx.Done():
				return
			}
			if t.State() != redfish.TaskCompleted {
				return
			}
			s.log.Warn("rebooting into the updated image", "slot", target)
			if err := s.cfg.Reboot(s.ctx); err != nil {
				s.log.Error("reboot after the update failed; the image is tried at the next reset", "err", err)
			}
		}()
	}
	return s.Accepted(c, t)
}

// readUpdateParams reads the first part, which must be UpdateParameters.
func (s *Server) readUpdateParams(mr *multipart.Reader) (updateParams, error) {
	var p updateParams
	part, err := nextPart(mr, "UpdateParameters")
	if err != nil {
		return p, err
	}
	raw, err := io.ReadAll(io.LimitReader(part, maxUpdateParams+1))
	if err != nil {
		return p, s.multipartError(err)
	}
	if len(raw) > maxUpdateParams {
		return p, redfish.ErrPayloadTooLarge()
	}
	if err := redfish.DecodeJSON(raw, &p); err != nil {
		return p, err
	}
	if p.ApplyTime != nil && !slices.Contains(s.applyTimes(), *p.ApplyTime) {
		return p, redfish.ErrPropertyValueNotInList(*p.ApplyTime, "@Redfish.OperationApplyTime")
	}
	for _, tg := range p.Targets {
		if !slices.Contains(s.updateTargets(), tg) {
			return p, redfish.ErrPropertyValueNotInList(tg, "Targets")
		}
	}
	return p, nil
}

// updateTargets are the URIs a push may name in Targets: the box's
// firmware as a whole, either slot (the inactive one is written anyway).
func (s *Server) updateTargets() []string {
	return []string{pool.ManagerURI, pool.FirmwareInventoryURI + "/FM",
		pool.FirmwareInventoryURI + "/" + imageSlotID(update.SlotA), pool.FirmwareInventoryURI + "/" + imageSlotID(update.SlotB)}
}

// nextPart returns the next part, which must be the form field name.
func nextPart(mr *multipart.Reader, name string) (*multipart.Part, error) {
	part, err := mr.NextPart()
	if errors.Is(err, io.EOF) {
		return nil, redfish.ErrPropertyMissing(name)
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, redfish.ErrPayloadTooLarge()
		}
		return nil, redfish.NewError(http.StatusBadRequest, redfish.M("Base.UnrecognizedRequestBody")).WithCause(err)
	}
	if part.FormName() != name {
		return nil, redfish.ErrPropertyMissing(name)
	}
	return part, nil
}

func (s *Server) multipartError(err error) *redfish.Error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return redfish.ErrPayloadTooLarge()
	}
	return redfish.NewError(http.StatusBadRequest, redfish.M("Base.UnrecognizedRequestBody")).WithCause(err)
}

// updateError maps Apply's failure to the task's final answer: the
// upload's own failure first (413 for too large, else the transfer
// failed), then the image's fault (400 VerificationFailed with the
// reason), a pending trial (409), anything else the box's fault (500).
func (s *Server) updateError(err error, transfer *error, image, target string) *redfish.Error {
	reason := func(e error) redfish.Msg {
		return redfish.Msg{Key: "Update.VerificationFailed", Args: []string{image, target}, Resolution: e.Error()}
	}
	if transfer != nil {
		var mbe *http.MaxBytesError
		if errors.As(*transfer, &mbe) {
			return redfish.NewError(http.StatusRequestEntityTooLarge, redfish.M("Update.TransferFailed", image, target), redfish.M("Base.PayloadTooLarge")).WithCause(err)
		}
		return redfish.NewError(http.StatusBadRequest, redfish.Msg{Key: "Update.TransferFailed", Args: []string{image, target},
			Resolution: "The upload did not complete (" + (*transfer).Error() + "); push the image again."}).WithCause(err)
	}
	switch {
	case update.IsRefusal(err):
		return redfish.NewError(http.StatusBadRequest, reason(err)).WithCause(err)
	case errors.Is(err, update.ErrTrialPending):
		return redfish.NewError(http.StatusConflict, redfish.Msg{Key: "Update.ApplyFailed", Args: []string{image, target},
			Resolution: "The running image is on trial; it is committed once the service reports healthy. Push the image again after that."}).WithCause(err)
	}
	return redfish.NewError(http.StatusInternalServerError, redfish.Msg{Key: "Update.ApplyFailed", Args: []string{image, target},
		Resolution: err.Error()}).WithCause(err)
}
