package pool

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"cxlpool/api/redfish"
	"cxlpool/bmc"
	"cxlpool/dcd"
	"cxlpool/fabric"
)

// ErrQuota is 409 for capacity a host's quota has no room for, naming the
// quota and what would still fit.
func ErrQuota(h dcd.HostID, quota, used, need uint64) *redfish.Error {
	room := quota - min(used, quota)
	fits := fmt.Sprintf("at most %d MiB would", MiB(room))
	if room == 0 {
		fits = "nothing more does"
	}
	return redfish.NewError(http.StatusConflict, redfish.Msg{Key: "Base.CreateLimitReachedForResource", Resolution: fmt.Sprintf(
		"%s's quota (Oem.CxlPool.QuotaMiB of %s) is %d MiB and it holds or has reserved %d MiB, so %d MiB more does not fit "+
			"(%s): release capacity from %s, or have an administrator or operator raise its quota "+
			"(where that is 0, the default Oem.CxlPool.DefaultHostQuotaMiB of %s applies).",
		SystemID(h), SystemURI(h), MiB(quota), MiB(used), MiB(need), fits, SystemID(h), MemoryDomainURI)})
}

// Retry-After values for the transient device conditions.
const (
	RetryBusySeconds   = 2
	RetryDeviceSeconds = 10
)

// FromDomain maps an error from the capacity domain (dcd) or the device
// link (fabric) to its Redfish error. It is the ONLY place where domain
// sentinels meet HTTP: every sentinel has a row here, and TestFromDomain
// checks that none is forgotten. An error that is already an *Error passes
// through; anything else is a 500 (a bug) with the cause logged.
func FromDomain(err error, t redfish.Target) *redfish.Error {
	if err == nil {
		return nil
	}
	var e *redfish.Error
	if errors.As(err, &e) {
		return e
	}
	general := func(status int, resolution string) *redfish.Error {
		return redfish.NewError(status, redfish.Msg{Key: "Base.GeneralError", Resolution: resolution}).WithCause(err)
	}
	switch {
	case errors.Is(err, dcd.ErrNotFound):
		return redfish.ErrResourceNotFound(t.Type, t.ID).WithCause(err)
	case errors.Is(err, dcd.ErrNoCapacity):
		return redfish.NewError(http.StatusConflict, redfish.M("Base.ResourceExhaustion", t.URI)).WithCause(err)
	case errors.Is(err, dcd.ErrQuotaExceeded):
		// The registry's resolution speaks of deleting resources; say
		// which limit it is (the host's Oem.CxlPool.QuotaMiB).
		return redfish.NewError(http.StatusConflict, redfish.Msg{Key: "Base.CreateLimitReachedForResource",
			Resolution: "The host's quota (Oem.CxlPool.QuotaMiB of its ComputerSystem or, where that is 0, the pool's " +
				"default Oem.CxlPool.DefaultHostQuotaMiB on MemoryDomains/Pool) leaves no room for this capacity: " +
				"release capacity from the host, or have an administrator raise its quota."}).WithCause(err)
	case errors.Is(err, dcd.ErrNotSharable): // before ErrConflict, which the ledger wraps it with
		m := redfish.M("Base.PropertyValueResourceConflict", "MemoryChunkInfo", t.ID, t.URI)
		m.Resolution = "The chunk is in a DC region that is not sharable, so it is connected to one host at a time: " +
			"release it first, or share a chunk reserved in a sharable region (Oem.CxlPool.Sharable)."
		return redfish.NewError(http.StatusConflict, m).WithCause(err)
	case errors.Is(err, dcd.ErrConflict):
		return redfish.ErrResourceInUse().WithCause(err)
	case errors.Is(err, dcd.ErrInvalid):
		return general(http.StatusBadRequest, "The request is not valid for this resource: "+
			domainReason(err)+". Correct the request and resubmit it.")
	case errors.Is(err, dcd.ErrHostRejected):
		return general(http.StatusConflict, "The host did not accept the offered capacity, so nothing "+
			"was granted. Check the host's CXL driver and dynamic capacity support, then retry.")
	case errors.Is(err, dcd.ErrHostTimeout):
		return general(http.StatusConflict, "The host did not answer the capacity offer in time and the "+
			"offer was withdrawn. Check that the host is running and retry.")
	case errors.Is(err, dcd.ErrLinkDown):
		return general(http.StatusConflict, "The host's CXL link is down. Retry when the link is up.")
	case errors.Is(err, dcd.ErrFenced):
		return general(http.StatusConflict, "The host's head is being power-cycled or is powered off, and its "+
			"capacity is fenced. Retry after the head is powered on again.")
	case errors.Is(err, bmc.ErrNotFound):
		return redfish.ErrResourceNotFound(t.Type, t.ID).WithCause(err)
	case errors.Is(err, bmc.ErrUnavailable):
		e := redfish.ErrServiceUnavailable(RetryDeviceSeconds).WithCause(err)
		e.Messages[0].Resolution = "The board controller does not answer on the device link, or the sensor, fan, " +
			"power supply or head cannot be read or driven now. Board readings and controls are unavailable " +
			"until it answers; retry later."
		return e
	case errors.Is(err, bmc.ErrInvalid):
		return general(http.StatusBadRequest, "The board refused the value: "+domainReason(err)+
			". Correct the request and resubmit it.")
	case errors.Is(err, bmc.ErrUnsupported):
		return general(http.StatusBadRequest, "The board does not support this operation: "+domainReason(err)+".")
	case errors.Is(err, bmc.ErrBusy):
		return redfish.ErrResourceInUse().WithCause(err)
	case errors.Is(err, dcd.ErrDeviceBusy):
		return redfish.ErrServiceUnavailable(RetryBusySeconds).WithCause(err)
	case errors.Is(err, dcd.ErrDeviceUnreachable), errors.Is(err, fabric.ErrTimeout), errors.Is(err, fabric.ErrClosed):
		e := redfish.ErrServiceUnavailable(RetryDeviceSeconds).WithCause(err)
		e.Messages[0].Resolution = "The memory device does not answer on its link (the link is down or being " +
			"re-established). Retry after the time in Retry-After."
		return e
	case errors.Is(err, dcd.ErrDevice):
		return redfish.NewError(http.StatusInternalServerError, redfish.M("Base.UndeterminedFault", "DCD")).WithCause(err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return redfish.ErrServiceUnavailable(RetryDeviceSeconds).WithCause(err)
	}
	return redfish.ErrInternal(err)
}

// domainReason is the innermost text of a wrapped domain error, which says
// what was wrong without the call chain ("size must be positive").
func domainReason(err error) string {
	s := err.Error()
	for _, sentinel := range []error{dcd.ErrInvalid, bmc.ErrInvalid, bmc.ErrUnsupported} {
		s = strings.TrimSuffix(s, ": "+sentinel.Error())
	}
	if i := strings.LastIndex(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	return s
}
