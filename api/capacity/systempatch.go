package capacity

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
)

// PATCH /redfish/v1/Systems/{id}: a host's quota, the one setting of a
// ComputerSystem an administrator or operator (ConfigureComponents) may
// change:
//
//	{"Oem": {"CxlPool": {"QuotaMiB": 65536}}}
//
// QuotaMiB is whole MiB, 0 for the pool's default (defaultquota.go), at
// most the pool's size. The
// quota limits every grant to the host from then on, whoever asks: a
// host's own requests and an administrator's grants and shares alike (the
// ledger checks it with the grant intent, dcd.Ledger.BeginGrant), and a
// host account's reservations (memorychunks.go). A quota below what the
// host already holds is accepted: the host keeps its capacity, further
// grants are refused until it is under the quota again, and the answer
// says so in @Message.ExtendedInfo (Base.PropertyModified with a
// Resolution naming the figures). Every other property is read-only.
//
// Host accounts may read their own system but not change its quota (403);
// other hosts' systems stay 404 for them, as for GET.

const propQuota = "Oem/CxlPool/QuotaMiB"

type systemPatch struct {
	Oem *struct {
		CxlPool *struct {
			QuotaMiB *int64 `json:"QuotaMiB"`

			LinkUp        any `json:"LinkUp" rf:"readonly"`
			Port          any `json:"Port" rf:"readonly"`
			GrantedMiB    any `json:"GrantedMiB" rf:"readonly"`
			LogicalDevice any `json:"LogicalDevice" rf:"readonly"`
		} `json:"CxlPool"`
	} `json:"Oem"`

	ID            any `json:"Id" rf:"readonly"`
	Name          any `json:"Name" rf:"readonly"`
	Description   any `json:"Description" rf:"readonly"`
	HostName      any `json:"HostName" rf:"readonly"`
	SystemType    any `json:"SystemType" rf:"readonly"`
	Status        any `json:"Status" rf:"readonly"`
	PowerState    any `json:"PowerState" rf:"readonly"`
	Memory        any `json:"Memory" rf:"readonly"`
	MemorySummary any `json:"MemorySummary" rf:"readonly"`
	Links         any `json:"Links" rf:"readonly"`
	Actions       any `json:"Actions" rf:"readonly"`
}

func (s *Server) systemPatchRoutes() {
	if s.capacity == nil {
		return
	}
	// Host accounts pass the route's check so that the handler can answer
	// 404 for other hosts' systems before 403 for their own.
	s.Handle(http.MethodPatch, pool.SystemsURI+"/:id", redfish.PrivConfigureComponents|redfish.PrivHostCapacity, s.patchSystem)
}

func (s *Server) patchSystem(c echo.Context) error {
	v, h, err := s.lookupSystem(c)
	if err != nil {
		return err
	}
	if !redfish.PrincipalOf(c).Has(redfish.PrivConfigureComponents) {
		return redfish.ErrInsufficientPrivilege()
	}
	var req systemPatch
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	ctx := c.Request().Context()
	current := system(v, h)
	s.systemBoard(ctx, current, h)
	s.systemHostAgent(current, h) // hostreports.go
	if err := s.IfMatch(c, current); err != nil {
		return err
	}
	if req.Oem == nil || req.Oem.CxlPool == nil || req.Oem.CxlPool.QuotaMiB == nil {
		return s.WriteResource(c, http.StatusOK, current) // nothing to change
	}
	n := *req.Oem.CxlPool.QuotaMiB
	if n < 0 || uint64(n) > pool.MiB(v.usage().total) {
		return redfish.ErrPropertyValueOutOfRange(strconv.FormatInt(n, 10), propQuota)
	}
	quota := uint64(n) * mebibyte
	err = s.mgr.SetHostQuota(ctx, h, quota)
	s.capacity.invalidate()
	if err != nil {
		return pool.FromDomain(err, redfish.Target{Type: "ComputerSystem", ID: pool.SystemID(h), URI: pool.SystemURI(h)})
	}
	s.log.Info("host quota set", "system", pool.SystemID(h), "quota_mib", n, "user", redfish.PrincipalOf(c).User)
	if v, err = s.view(ctx); err != nil {
		return err
	}
	o := system(v, h)
	s.systemBoard(ctx, o, h)
	s.systemHostAgent(o, h) // hostreports.go
	held := s.hostCommitted(v, h)
	if quota == 0 || held <= quota {
		return s.WriteResource(c, http.StatusOK, o)
	}
	// The ETag is the resource's, as a GET gives it; the note is about
	// this answer only.
	plain, err := redfish.EncodeJSON(o)
	if err != nil {
		return redfish.ErrInternal(err)
	}
	o["@Message.ExtendedInfo"] = []redfish.Message{s.Registries().Resolve(redfish.Msg{Key: "Base.PropertyModified",
		Resolution: fmt.Sprintf("%s holds or has reserved %d MiB, more than its new quota of %d MiB: it keeps that capacity, "+
			"but further grants to it are refused until it is under the quota again. Release capacity from %s to get there.",
			pool.SystemID(h), pool.MiB(held), n, pool.SystemID(h))}.WithRelated(propQuota))}
	body, err := redfish.EncodeJSON(o)
	if err != nil {
		return redfish.ErrInternal(err)
	}
	c.Response().Header().Set("ETag", redfish.ETag(plain))
	return s.WriteJSON(c, http.StatusOK, body)
}
