package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"cxlpool/bmc"
	"cxlpool/dcd"
	"cxlpool/fabric"
)

// Error is a Redfish error response: an HTTP status and the registry
// messages that explain it. Handlers return *Error (or a domain error,
// which the writer maps through FromDomain); nothing else writes errors.
type Error struct {
	Status   int
	Messages []Msg
	// Header is added to the response (Allow, Retry-After,
	// WWW-Authenticate).
	Header http.Header
	// Cause is logged, never shown to the client.
	Cause error
}

func (e *Error) Error() string {
	var keys []string
	for _, m := range e.Messages {
		keys = append(keys, m.Key)
	}
	s := fmt.Sprintf("redfish %d %s", e.Status, strings.Join(keys, ","))
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Cause }

// NewError builds an Error with one or more messages.
func NewError(status int, msgs ...Msg) *Error {
	return &Error{Status: status, Messages: msgs}
}

// WithHeader returns e with a response header added.
func (e *Error) WithHeader(k, v string) *Error {
	if e.Header == nil {
		e.Header = http.Header{}
	}
	e.Header.Add(k, v)
	return e
}

// WithCause returns e remembering the error behind it, for the log.
func (e *Error) WithCause(err error) *Error {
	e.Cause = err
	return e
}

// Constructors for the errors every resource needs. Each names the Base
// message and the status that go together, so handlers cannot pair them
// differently.

// ErrResourceNotFound is 404 for a resource of schema typ with Id id. Host
// principals also get it for other hosts' resources.
func ErrResourceNotFound(typ, id string) *Error {
	return NewError(http.StatusNotFound, M("Base.ResourceNotFound", typ, id))
}

// ErrMalformedJSON is 400 for a body that does not parse.
func ErrMalformedJSON() *Error { return NewError(http.StatusBadRequest, M("Base.MalformedJSON")) }

// ErrPropertyUnknown is 400 for a property the resource does not have.
func ErrPropertyUnknown(prop string) *Error {
	return NewError(http.StatusBadRequest, M("Base.PropertyUnknown", prop).WithRelated(prop))
}

// ErrPropertyNotWritable is 400 for an attempt to set a read-only property.
func ErrPropertyNotWritable(prop string) *Error {
	return NewError(http.StatusBadRequest, M("Base.PropertyNotWritable", prop).WithRelated(prop))
}

// ErrPropertyValueType is 400 for a value of the wrong JSON type.
func ErrPropertyValueType(value, prop string) *Error {
	return NewError(http.StatusBadRequest, M("Base.PropertyValueTypeError", value, prop).WithRelated(prop))
}

// ErrPropertyValueFormat is 400 for a value of the right type in the
// wrong format (a URI that is not one, a malformed name).
func ErrPropertyValueFormat(value, prop string) *Error {
	return NewError(http.StatusBadRequest, M("Base.PropertyValueFormatError", value, prop).WithRelated(prop))
}

// ErrPropertyValueNotInList is 400 for a value outside an enumeration.
func ErrPropertyValueNotInList(value, prop string) *Error {
	return NewError(http.StatusBadRequest, M("Base.PropertyValueNotInList", value, prop).WithRelated(prop))
}

// ErrPropertyValueOutOfRange is 400 for a number outside its bounds.
func ErrPropertyValueOutOfRange(value, prop string) *Error {
	return NewError(http.StatusBadRequest, M("Base.PropertyValueOutOfRange", value, prop).WithRelated(prop))
}

// ErrPropertyValueConflict is 400 for a property whose value contradicts
// another one in the same request.
func ErrPropertyValueConflict(prop, other string) *Error {
	return NewError(http.StatusBadRequest, M("Base.PropertyValueConflict", prop, other).WithRelated(prop))
}

// ErrPropertyMissing is 400 for a required property left out.
func ErrPropertyMissing(prop string) *Error {
	return NewError(http.StatusBadRequest, M("Base.PropertyMissing", prop).WithRelated(prop))
}

// ErrNoValidSession is 401: no or bad credentials.
func ErrNoValidSession() *Error {
	return NewError(http.StatusUnauthorized, M("Base.NoValidSession")).
		WithHeader("WWW-Authenticate", `Basic realm="cxlpool", charset="UTF-8"`)
}

// ErrInsufficientPrivilege is 403.
func ErrInsufficientPrivilege() *Error {
	return NewError(http.StatusForbidden, M("Base.InsufficientPrivilege"))
}

// ErrMethodNotAllowed is 405 with the Allow header listing allow.
func ErrMethodNotAllowed(allow []string) *Error {
	return NewError(http.StatusMethodNotAllowed, M("Base.OperationNotAllowed")).
		WithHeader("Allow", strings.Join(allow, ", "))
}

// ErrResourceInUse is 409 for a change refused because of the resource's
// current state.
func ErrResourceInUse() *Error { return NewError(http.StatusConflict, M("Base.ResourceInUse")) }

// ErrResourceAlreadyExists is 409 for a create that duplicates a unique
// property.
func ErrResourceAlreadyExists(typ, prop, value string) *Error {
	return NewError(http.StatusConflict, M("Base.ResourceAlreadyExists", typ, prop, value).WithRelated(prop))
}

// ErrResourceCannotBeDeleted is 409 for a resource that must stay.
func ErrResourceCannotBeDeleted() *Error {
	return NewError(http.StatusConflict, M("Base.ResourceCannotBeDeleted"))
}

// ErrPreconditionFailed is 412: If-Match did not match.
func ErrPreconditionFailed() *Error {
	return NewError(http.StatusPreconditionFailed, M("Base.PreconditionFailed"))
}

// ErrPayloadTooLarge is 413.
func ErrPayloadTooLarge() *Error {
	return NewError(http.StatusRequestEntityTooLarge, M("Base.PayloadTooLarge"))
}

// ErrUnsupportedMediaType is 415 for a body that is not JSON.
func ErrUnsupportedMediaType() *Error {
	return NewError(http.StatusUnsupportedMediaType, M("Base.HeaderInvalid", "Content-Type"))
}

// ErrQueryValue is 400 for a malformed query parameter value.
func ErrQueryValue(value, param string) *Error {
	return NewError(http.StatusBadRequest, M("Base.QueryParameterValueFormatError", value, param))
}

// ErrQueryUnsupported answers a $-query the service does not implement.
// The Redfish Specification requires 501 here; it is the only 5xx a client
// can cause, and it tells the client the feature is absent, not broken.
func ErrQueryUnsupported(param string) *Error {
	return NewError(http.StatusNotImplemented, M("Base.QueryParameterUnsupported", param))
}

// ErrQueryNotSupportedOnResource is 400 for paging a single resource.
func ErrQueryNotSupportedOnResource() *Error {
	return NewError(http.StatusBadRequest, M("Base.QueryNotSupportedOnResource"))
}

// ErrServiceUnavailable is 503 with Retry-After.
func ErrServiceUnavailable(retryAfterSeconds int) *Error {
	s := strconv.Itoa(retryAfterSeconds)
	return NewError(http.StatusServiceUnavailable, M("Base.ServiceTemporarilyUnavailable", s)).
		WithHeader("Retry-After", s)
}

// ErrInternal is 500: a bug. The cause is logged.
func ErrInternal(cause error) *Error {
	return NewError(http.StatusInternalServerError, M("Base.InternalError")).WithCause(cause)
}

// errQuota is 409 for capacity a host's quota has no room for, naming the
// quota and what would still fit.
func errQuota(h dcd.HostID, quota, used, need uint64) *Error {
	room := quota - min(used, quota)
	fits := fmt.Sprintf("at most %d MiB would", mib(room))
	if room == 0 {
		fits = "nothing more does"
	}
	return NewError(http.StatusConflict, Msg{Key: "Base.CreateLimitReachedForResource", Resolution: fmt.Sprintf(
		"%s's quota (Oem.CxlPool.QuotaMiB of %s) is %d MiB and it holds or has reserved %d MiB, so %d MiB more does not fit "+
			"(%s): release capacity from %s, or have an administrator or operator raise its quota "+
			"(where that is 0, the default Oem.CxlPool.DefaultHostQuotaMiB of %s applies).",
		SystemID(h), SystemURI(h), mib(quota), mib(used), mib(need), fits, SystemID(h), MemoryDomainURI)})
}

// Target names the resource a domain operation was about, for the
// messages that carry it.
type Target struct {
	Type string // schema name: "MemoryChunks", "Connection"
	ID   string // the resource's Id
	URI  string // its @odata.id
}

// Retry-After values for the transient device conditions.
const (
	retryBusySeconds   = 2
	retryDeviceSeconds = 10
)

// FromDomain maps an error from the capacity domain (dcd) or the device
// link (fabric) to its Redfish error. It is the ONLY place where domain
// sentinels meet HTTP: every sentinel has a row here, and TestFromDomain
// checks that none is forgotten. An error that is already an *Error passes
// through; anything else is a 500 (a bug) with the cause logged.
func FromDomain(err error, t Target) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	general := func(status int, resolution string) *Error {
		return NewError(status, Msg{Key: "Base.GeneralError", Resolution: resolution}).WithCause(err)
	}
	switch {
	case errors.Is(err, dcd.ErrNotFound):
		return ErrResourceNotFound(t.Type, t.ID).WithCause(err)
	case errors.Is(err, dcd.ErrNoCapacity):
		return NewError(http.StatusConflict, M("Base.ResourceExhaustion", t.URI)).WithCause(err)
	case errors.Is(err, dcd.ErrQuotaExceeded):
		// The registry's resolution speaks of deleting resources; say
		// which limit it is (the host's Oem.CxlPool.QuotaMiB).
		return NewError(http.StatusConflict, Msg{Key: "Base.CreateLimitReachedForResource",
			Resolution: "The host's quota (Oem.CxlPool.QuotaMiB of its ComputerSystem or, where that is 0, the pool's " +
				"default Oem.CxlPool.DefaultHostQuotaMiB on MemoryDomains/Pool) leaves no room for this capacity: " +
				"release capacity from the host, or have an administrator raise its quota."}).WithCause(err)
	case errors.Is(err, dcd.ErrNotSharable): // before ErrConflict, which the ledger wraps it with
		m := M("Base.PropertyValueResourceConflict", "MemoryChunkInfo", t.ID, t.URI)
		m.Resolution = "The chunk is in a DC region that is not sharable, so it is connected to one host at a time: " +
			"release it first, or share a chunk reserved in a sharable region (Oem.CxlPool.Sharable)."
		return NewError(http.StatusConflict, m).WithCause(err)
	case errors.Is(err, dcd.ErrConflict):
		return ErrResourceInUse().WithCause(err)
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
		return ErrResourceNotFound(t.Type, t.ID).WithCause(err)
	case errors.Is(err, bmc.ErrUnavailable):
		e := ErrServiceUnavailable(retryDeviceSeconds).WithCause(err)
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
		return ErrResourceInUse().WithCause(err)
	case errors.Is(err, dcd.ErrDeviceBusy):
		return ErrServiceUnavailable(retryBusySeconds).WithCause(err)
	case errors.Is(err, dcd.ErrDeviceUnreachable), errors.Is(err, fabric.ErrTimeout), errors.Is(err, fabric.ErrClosed):
		e := ErrServiceUnavailable(retryDeviceSeconds).WithCause(err)
		e.Messages[0].Resolution = "The memory device does not answer on its link (the link is down or being " +
			"re-established). Retry after the time in Retry-After."
		return e
	case errors.Is(err, dcd.ErrDevice):
		return NewError(http.StatusInternalServerError, M("Base.UndeterminedFault", "DCD")).WithCause(err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return ErrServiceUnavailable(retryDeviceSeconds).WithCause(err)
	}
	return ErrInternal(err)
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
