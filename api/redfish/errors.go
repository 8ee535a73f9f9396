package redfish

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
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

// Target names the resource a domain operation was about, for the
// messages that carry it.
type Target struct {
	Type string // schema name: "MemoryChunks", "Connection"
	ID   string // the resource's Id
	URI  string // its @odata.id
}

// mapError is err as the *Error it is, or through Config.MapError
// (with the resource it was about), or 500.
func (s *Service) mapError(err error, t Target) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if s.cfg.MapError != nil {
		return s.cfg.MapError(err, t)
	}
	return ErrInternal(err)
}
