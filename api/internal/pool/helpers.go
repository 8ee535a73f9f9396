package pool

import (
	"net/http"
	"strconv"
	"strings"

	"cxlpool/api/redfish"
)

// Mebibyte is the unit of every size the resources show (…MiB).
const Mebibyte = 1 << 20

// MiB is b bytes in mebibytes, rounded down.
func MiB(b uint64) uint64 { return b / Mebibyte }

// Status is a resource's Status with the given State and Health OK.
func Status(state string) redfish.Obj { return redfish.Obj{"State": state, "Health": "OK"} }

// ParseID reads a positive decimal resource Id in canonical form (no
// sign, no leading zeros), so that each resource has exactly one URI.
func ParseID(s string) (int64, bool) {
	if s == "" || s[0] == '0' || len(s) > 18 {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n > 0
}

// RefID returns the last segment of uri if uri is collection+"/"+segment
// (a trailing slash is tolerated, as for request paths).
func RefID(uri, collection string) (string, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSuffix(uri, "/"), collection+"/")
	if !ok || rest == "" || strings.Contains(rest, "/") {
		return "", false
	}
	return rest, true
}

// SerialString is n as the 16 hex digits of a SerialNumber.
func SerialString(n uint64) string {
	const hex = "0123456789ABCDEF"
	b := make([]byte, 16)
	for i := 15; i >= 0; i-- {
		b[i] = hex[n&0xf]
		n >>= 4
	}
	return string(b)
}

// ODataRef is a request body's link to a resource.
type ODataRef struct {
	ID string `json:"@odata.id" rf:"required"`
}

// ErrMissingAtURI answers a request naming a resource that does not exist
// or that the caller may not see: 404, like a GET of it would be, so
// that a host cannot probe other hosts' resources through request bodies.
func ErrMissingAtURI(uri, prop string) *redfish.Error {
	return redfish.NewError(http.StatusNotFound, redfish.M("Base.ResourceMissingAtURI", uri).WithRelated(prop))
}

// ErrPropertyValueIncorrect is 400 for a value the property does not take.
func ErrPropertyValueIncorrect(prop, value string) *redfish.Error {
	return redfish.NewError(http.StatusBadRequest, redfish.M("Base.PropertyValueIncorrect", prop, value).WithRelated(prop))
}

// ResetRequest is the body of a Reset action (ComputerSystem.Reset on a
// head, Manager.Reset on the management computer).
type ResetRequest struct {
	ResetType *string `json:"ResetType"`
}

// RedfishVersion is the DSP0266 version the service follows (the service
// root and the support bundle show it).
const RedfishVersion = "1.22.0"
