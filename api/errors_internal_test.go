package api

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"cxlpool/api/redfish"
	"cxlpool/bmc"
	"cxlpool/dcd"
	"cxlpool/fabric"
)

// TestFromDomain checks that every dcd, bmc and fabric sentinel maps to a
// registry message and a status, wrapped or not, and that only device
// trouble is a 5xx.
func TestFromDomain(t *testing.T) {
	reg, err := redfish.LoadRegistries()
	if err != nil {
		t.Fatal(err)
	}
	tgt := redfish.Target{Type: "MemoryChunks", ID: "3", URI: "/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks/3"}
	for _, tc := range []struct {
		err        error
		status     int
		msg        string
		retryAfter bool
	}{
		{dcd.ErrNotFound, http.StatusNotFound, "Base.ResourceNotFound", false},
		{dcd.ErrNoCapacity, http.StatusConflict, "Base.ResourceExhaustion", false},
		{dcd.ErrQuotaExceeded, http.StatusConflict, "Base.CreateLimitReachedForResource", false},
		{dcd.ErrConflict, http.StatusConflict, "Base.ResourceInUse", false},
		{dcd.ErrInvalid, http.StatusBadRequest, "Base.GeneralError", false},
		{dcd.ErrNotSharable, http.StatusConflict, "Base.PropertyValueResourceConflict", false},
		{dcd.ErrHostRejected, http.StatusConflict, "Base.GeneralError", false},
		{dcd.ErrHostTimeout, http.StatusConflict, "Base.GeneralError", false},
		{dcd.ErrLinkDown, http.StatusConflict, "Base.GeneralError", false},
		{dcd.ErrFenced, http.StatusConflict, "Base.GeneralError", false},
		{bmc.ErrNotFound, http.StatusNotFound, "Base.ResourceNotFound", false},
		{bmc.ErrUnavailable, http.StatusServiceUnavailable, "Base.ServiceTemporarilyUnavailable", true},
		{bmc.ErrInvalid, http.StatusBadRequest, "Base.GeneralError", false},
		{bmc.ErrUnsupported, http.StatusBadRequest, "Base.GeneralError", false},
		{bmc.ErrBusy, http.StatusConflict, "Base.ResourceInUse", false},
		{dcd.ErrDeviceBusy, http.StatusServiceUnavailable, "Base.ServiceTemporarilyUnavailable", true},
		{dcd.ErrDeviceUnreachable, http.StatusServiceUnavailable, "Base.ServiceTemporarilyUnavailable", true},
		{dcd.ErrDevice, http.StatusInternalServerError, "Base.UndeterminedFault", false},
		{fabric.ErrTimeout, http.StatusServiceUnavailable, "Base.ServiceTemporarilyUnavailable", true},
		{fabric.ErrClosed, http.StatusServiceUnavailable, "Base.ServiceTemporarilyUnavailable", true},
		{errors.New("surprise"), http.StatusInternalServerError, "Base.InternalError", false},
	} {
		for _, err := range []error{tc.err, fmt.Errorf("grant chunk 3 to host 1: %w", tc.err)} {
			e := FromDomain(err, tgt)
			if e.Status != tc.status || len(e.Messages) != 1 || e.Messages[0].Key != tc.msg {
				t.Errorf("FromDomain(%v): got %d %v, want %d %s", err, e.Status, e.Messages, tc.status, tc.msg)
				continue
			}
			if got := e.Header.Get("Retry-After") != ""; got != tc.retryAfter {
				t.Errorf("FromDomain(%v): Retry-After present %v, want %v", err, got, tc.retryAfter)
			}
			if !errors.Is(e, tc.err) {
				t.Errorf("FromDomain(%v) lost its cause", err)
			}
			m := e.Messages[0]
			if n := reg.NumberOfArgs(m.Key); n != len(m.Args) {
				t.Errorf("FromDomain(%v): %s has %d args, registry wants %d", err, m.Key, len(m.Args), n)
			}
		}
	}
	pre := redfish.ErrPreconditionFailed()
	if FromDomain(fmt.Errorf("wrapped: %w", pre), tgt) != pre {
		t.Error("an *Error does not pass through FromDomain")
	}
}

// TestMessageKeysExist checks every registry key written in the package's
// code against the embedded registries, so a typo cannot reach a client as
// a GeneralError.
func TestMessageKeysExist(t *testing.T) {
	reg, err := redfish.LoadRegistries()
	if err != nil {
		t.Fatal(err)
	}
	// The assembly's files, the resource packages' and the protocol's
	// (redfish/, internal/pool/).
	files, _ := filepath.Glob("*.go")
	for _, dir := range []string{"*", filepath.Join("internal", "*")} {
		more, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		files = append(files, more...)
	}
	files = slices.DeleteFunc(files, func(f string) bool { return strings.HasSuffix(f, "_test.go") })
	key := regexp.MustCompile(`"((?:Base|TaskEvent|ResourceEvent)\.[A-Za-z]+)"`)
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range key.FindAllStringSubmatch(string(b), -1) {
			n++
			if !reg.Has(m[1]) {
				t.Errorf("%s: %s is not in the registries", f, m[1])
			}
		}
	}
	if n < 40 {
		t.Errorf("found %d message keys, want the ~40 the service uses", n)
	}
}

func TestSystemID(t *testing.T) {
	for h := dcd.HostID(0); h < 300; h += 7 {
		got, err := ParseSystemID(SystemID(h))
		if err != nil || got != h {
			t.Errorf("ParseSystemID(SystemID(%d)) = %d, %v", h, got, err)
		}
	}
	for _, bad := range []string{"", "Host", "host1", "Host01", "Host-1", "Host70000", "1"} {
		if _, err := ParseSystemID(bad); err == nil {
			t.Errorf("ParseSystemID(%q) succeeded", bad)
		}
	}
}
