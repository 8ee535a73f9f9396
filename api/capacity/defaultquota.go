package capacity

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
)

// The default host quota limits every host that has no quota of its own
// (Systems/HostN Oem.CxlPool.QuotaMiB 0), so that one host cannot take the
// whole pool by default. It lives on the pool it divides:
//
//	PATCH /redfish/v1/Chassis/Pool/MemoryDomains/Pool
//	{"Oem": {"CxlPool": {"DefaultHostQuotaMiB": 131072}}}
//
// Until an administrator or operator (ConfigureComponents, as for host
// quotas) sets it, it is a fair share: the pool's capacity over the number
// of heads (DefaultHostQuotaIsFairShare true). 0 is no default limit.
// Like a host's own quota it limits every grant and a host account's
// reservations (the ledger checks it with the grant intent); it is kept in
// the capacity ledger.

const propDefaultQuota = "Oem/CxlPool/DefaultHostQuotaMiB"

type memoryDomainPatch struct {
	Oem *struct {
		CxlPool *struct {
			DefaultHostQuotaMiB *int64 `json:"DefaultHostQuotaMiB"`
		} `json:"CxlPool"`
	} `json:"Oem"`
}

func (s *Server) defaultQuotaRoutes() {
	if s.capacity == nil {
		return
	}
	s.Handle(http.MethodPatch, pool.MemoryDomainURI, redfish.PrivConfigureComponents, s.patchMemoryDomain)
}

func (s *Server) patchMemoryDomain(c echo.Context) error {
	ctx := c.Request().Context()
	v, err := s.view(ctx)
	if err != nil {
		return err
	}
	var req memoryDomainPatch
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	if err := s.IfMatch(c, s.memoryDomain(v, redfish.PrincipalOf(c))); err != nil {
		return err
	}
	if req.Oem == nil || req.Oem.CxlPool == nil || req.Oem.CxlPool.DefaultHostQuotaMiB == nil {
		return s.WriteResource(c, http.StatusOK, s.memoryDomain(v, redfish.PrincipalOf(c)))
	}
	n := *req.Oem.CxlPool.DefaultHostQuotaMiB
	if n < 0 || uint64(n) > pool.MiB(v.usage().total) {
		e := redfish.ErrPropertyValueOutOfRange(strconv.FormatInt(n, 10), propDefaultQuota)
		e.Messages[0].Resolution = "DefaultHostQuotaMiB is whole MiB from 0 (no default limit) to the pool's MemorySizeMiB."
		return e
	}
	err = s.mgr.SetDefaultHostQuota(ctx, uint64(n)*mebibyte)
	s.capacity.invalidate()
	if err != nil {
		return pool.FromDomain(err, redfish.Target{Type: "MemoryDomain", ID: "Pool", URI: pool.MemoryDomainURI})
	}
	s.log.Info("default host quota set", "quota_mib", n, "user", redfish.PrincipalOf(c).User)
	s.Publish(redfish.Event{MessageKey: redfish.MsgResourceChanged, Origin: pool.MemoryDomainURI})
	if v, err = s.view(ctx); err != nil {
		return err
	}
	return s.WriteResource(c, http.StatusOK, s.memoryDomain(v, redfish.PrincipalOf(c)))
}

// quota is what limits grants to host h: its own quota, else the default
// (0: no limit).
func (v *poolView) quota(h dcd.HostID) uint64 {
	if q := v.hosts[h].Quota; q > 0 {
		return q
	}
	return v.defaultQuota.Bytes
}
