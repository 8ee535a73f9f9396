package accounts

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/crypto/bcrypt"

	"cxlpool/api/internal/pool"
	"cxlpool/api/oemschema"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
)

const rolesURI = redfish.AccountServiceURI + "/Roles"

var userNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$`)

// accountOem is ManagerAccount.Oem.CxlPool: the host binding.
type accountOem struct {
	CxlPool *struct {
		SystemID *string `json:"SystemId"` // "" unbinds
		System   any     `json:"System" rf:"readonly"`
	} `json:"CxlPool"`
}

type accountCreate struct {
	UserName    string      `json:"UserName" rf:"required"`
	Password    string      `json:"Password" rf:"required"`
	RoleID      string      `json:"RoleId" rf:"required" enum:"Administrator|Operator|ReadOnly|HostUser"`
	Enabled     *bool       `json:"Enabled"`
	AccountType []string    `json:"AccountTypes" enum:"Redfish"`
	Oem         *accountOem `json:"Oem"`
	// PasswordChangeRequired true makes the account choose its own
	// password before it may do anything else (passwordGate).
	PasswordChangeRequired *bool `json:"PasswordChangeRequired"`
}

type accountPatch struct {
	UserName               *string     `json:"UserName"`
	Password               *string     `json:"Password"`
	RoleID                 *string     `json:"RoleId" enum:"Administrator|Operator|ReadOnly|HostUser"`
	Enabled                *bool       `json:"Enabled"`
	Locked                 *bool       `json:"Locked"`
	AccountTypes           []string    `json:"AccountTypes" enum:"Redfish"`
	Oem                    *accountOem `json:"Oem"`
	ID                     string      `json:"Id" rf:"readonly"`
	Name                   string      `json:"Name" rf:"readonly"`
	PasswordChangeRequired *bool       `json:"PasswordChangeRequired"`
	Links                  any         `json:"Links" rf:"readonly"`
}

type accountServicePatch struct {
	AccountLockoutThreshold *int   `json:"AccountLockoutThreshold"`
	AccountLockoutDuration  *int   `json:"AccountLockoutDuration"`
	ID                      string `json:"Id" rf:"readonly"`
	Name                    string `json:"Name" rf:"readonly"`
	MinPasswordLength       *int   `json:"MinPasswordLength"`
	MaxPasswordLength       *int   `json:"MaxPasswordLength"`
}

func (s *Server) accountRoutes() {
	s.Handle(http.MethodGet, redfish.AccountServiceURI, redfish.PrivLogin, func(c echo.Context) error {
		return s.WriteResource(c, http.StatusOK, s.accountService())
	})
	s.Handle(http.MethodPatch, redfish.AccountServiceURI, redfish.PrivConfigureUsers, s.patchAccountService)
	s.Handle(http.MethodGet, redfish.AccountsURI, redfish.PrivLogin, func(c echo.Context) error {
		p := redfish.PrincipalOf(c)
		var uris []string
		byURI := map[string]redfish.Account{}
		for _, a := range s.Store().Accounts() {
			if canSeeAccount(p, a) {
				u := redfish.AccountURI(a.ID)
				uris = append(uris, u)
				byURI[u] = a
			}
		}
		return s.WriteCollection(c, redfish.Collection{ODataID: redfish.AccountsURI,
			ODataType: "#ManagerAccountCollection.ManagerAccountCollection", Name: "Accounts", Members: uris,
			Expand: func(uri string) (any, error) { return s.accountBody(byURI[uri]), nil }})
	})
	s.Handle(http.MethodPost, redfish.AccountsURI, redfish.PrivConfigureUsers, s.createAccount)
	s.Handle(http.MethodGet, redfish.AccountsURI+"/:id", redfish.PrivLogin, func(c echo.Context) error {
		a, err := s.findAccount(c)
		if err != nil {
			return err
		}
		return s.WriteResource(c, http.StatusOK, s.accountBody(a))
	})
	s.Handle(http.MethodPatch, redfish.AccountsURI+"/:id", redfish.PrivConfigureUsers|redfish.PrivConfigureSelf, s.patchAccount)
	s.Handle(http.MethodDelete, redfish.AccountsURI+"/:id", redfish.PrivConfigureUsers, s.deleteAccount)
	s.Handle(http.MethodGet, rolesURI, redfish.PrivLogin, func(c echo.Context) error {
		uris := make([]string, len(redfish.Roles))
		for i, r := range redfish.Roles {
			uris[i] = rolesURI + "/" + r.ID
		}
		return s.WriteCollection(c, redfish.Collection{ODataID: rolesURI, ODataType: "#RoleCollection.RoleCollection",
			Name: "Roles", Members: uris, Expand: func(uri string) (any, error) {
				r, _ := redfish.LookupRole(uri[len(rolesURI)+1:])
				return roleBody(r), nil
			}})
	})
	s.Handle(http.MethodGet, rolesURI+"/:id", redfish.PrivLogin, func(c echo.Context) error {
		r, ok := redfish.LookupRole(c.Param("id"))
		if !ok {
			return redfish.ErrResourceNotFound("Role", c.Param("id"))
		}
		return s.WriteResource(c, http.StatusOK, roleBody(r))
	})
}

// canSeeAccount: user administrators see every account, others only
// their own.
func canSeeAccount(p *redfish.Principal, a redfish.Account) bool {
	return p.Has(redfish.PrivConfigureUsers) || a.UID == p.AccountUID
}

func (s *Server) findAccount(c echo.Context) (redfish.Account, error) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil {
		return redfish.Account{}, redfish.ErrResourceNotFound("ManagerAccount", c.Param("id"))
	}
	a, ok := s.Store().Account(id)
	if !ok || !canSeeAccount(redfish.PrincipalOf(c), a) {
		return redfish.Account{}, redfish.ErrResourceNotFound("ManagerAccount", c.Param("id"))
	}
	return a, nil
}

func roleBody(r redfish.Role) redfish.Obj {
	return redfish.Obj{
		"@odata.id":          rolesURI + "/" + r.ID,
		"@odata.type":        "#Role.v1_3_3.Role",
		"Id":                 r.ID,
		"Name":               r.ID + " Role",
		"Description":        r.Description,
		"RoleId":             r.ID,
		"IsPredefined":       true,
		"Restricted":         r.HostBound,
		"AssignedPrivileges": r.Privileges.Assigned(),
		"OemPrivileges":      r.Privileges.Oem(),
	}
}

func (s *Server) accountBody(a redfish.Account) redfish.Obj {
	o := redfish.Obj{
		"@odata.id":              redfish.AccountURI(a.ID),
		"@odata.type":            "#ManagerAccount.v1_14_1.ManagerAccount",
		"Id":                     strconv.FormatInt(a.ID, 10),
		"Name":                   "User Account",
		"UserName":               a.UserName,
		"Password":               nil,
		"RoleId":                 a.Role,
		"Enabled":                a.Enabled,
		"Locked":                 s.Auth().Locked(a.UserName),
		"AccountTypes":           []string{"Redfish"},
		"PasswordChangeRequired": a.PasswordChangeRequired,
		"Links":                  redfish.Obj{"Role": redfish.Link(rolesURI + "/" + a.Role)},
	}
	if a.HostID != nil {
		oem := redfish.Obj{"SystemId": pool.SystemID(dcd.HostID(*a.HostID))}
		if s.HasRoute(pool.SystemsURI) {
			oem["System"] = redfish.Link(pool.SystemURI(dcd.HostID(*a.HostID)))
		}
		o["Oem"] = oemschema.Oem("ManagerAccount", oem)
	}
	return o
}

func (s *Server) accountService() redfish.Obj {
	_, threshold, lockFor := s.Auth().Policy()
	pw := s.Auth().PasswordPolicy()
	return redfish.Obj{
		"@odata.id":                         redfish.AccountServiceURI,
		"@odata.type":                       "#AccountService.v1_18_1.AccountService",
		"Id":                                "AccountService",
		"Name":                              "Account Service",
		"Description":                       "Local accounts and roles",
		"ServiceEnabled":                    true,
		"Status":                            redfish.Obj{"State": "Enabled", "Health": "OK"},
		"LocalAccountAuth":                  "Enabled",
		"HTTPBasicAuth":                     "Enabled",
		"MinPasswordLength":                 pw.Min,
		"MaxPasswordLength":                 pw.Max,
		"PasswordGuidanceMessage":           pw.Guidance(),
		"AccountLockoutThreshold":           threshold,
		"AccountLockoutDuration":            int(lockFor / time.Second),
		"AccountLockoutCounterResetAfter":   int(lockFor / time.Second),
		"AccountLockoutCounterResetEnabled": true,
		"SupportedAccountTypes":             []string{"Redfish"},
		"Accounts":                          redfish.Link(redfish.AccountsURI),
		"Roles":                             redfish.Link(rolesURI),
	}
}

func (s *Server) patchAccountService(c echo.Context) error {
	var req accountServicePatch
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	if err := s.IfMatch(c, s.accountService()); err != nil {
		return err
	}
	set := map[string]string{}
	var threshold *int
	var lockFor *time.Duration
	if v := req.AccountLockoutThreshold; v != nil {
		if *v < 0 || *v > 1000 {
			return redfish.ErrPropertyValueOutOfRange(strconv.Itoa(*v), "AccountLockoutThreshold")
		}
		threshold = v
		set[redfish.SettingLockoutThreshold] = strconv.Itoa(*v)
	}
	if v := req.AccountLockoutDuration; v != nil {
		if *v < 1 || *v > 86400 {
			return redfish.ErrPropertyValueOutOfRange(strconv.Itoa(*v), "AccountLockoutDuration")
		}
		d := time.Duration(*v) * time.Second
		lockFor = &d
		set[redfish.SettingLockoutDuration] = strconv.Itoa(*v)
	}
	pw := s.Auth().PasswordPolicy()
	if v := req.MinPasswordLength; v != nil {
		pw.Min = *v
		set[redfish.SettingMinPasswordLength] = strconv.Itoa(*v)
	}
	if v := req.MaxPasswordLength; v != nil {
		pw.Max = *v
		set[redfish.SettingMaxPasswordLength] = strconv.Itoa(*v)
	}
	if err := pw.Valid(); err != nil {
		prop, v := "MinPasswordLength", pw.Min
		if req.MaxPasswordLength != nil && (pw.Max > redfish.BcryptMaxPassword || req.MinPasswordLength == nil) {
			prop, v = "MaxPasswordLength", pw.Max
		}
		e := redfish.ErrPropertyValueOutOfRange(strconv.Itoa(v), prop)
		e.Messages[0].Resolution = fmt.Sprintf("MinPasswordLength must be at least %d and MaxPasswordLength at most %d "+
			"(bcrypt reads no further), with the minimum not above the maximum.", redfish.LowestMinPasswordLength, redfish.BcryptMaxPassword)
		return e
	}
	if len(set) > 0 {
		if err := s.Store().SetSettings(c.Request().Context(), set); err != nil {
			return redfish.ErrInternal(err)
		}
		s.Auth().SetPolicy(nil, threshold, lockFor)
		s.Auth().SetPasswordPolicy(pw)
		s.Publish(redfish.Event{MessageKey: redfish.MsgResourceChanged, Origin: redfish.AccountServiceURI})
	}
	return s.WriteResource(c, http.StatusOK, s.accountService())
}

// hostBinding validates Oem.CxlPool.SystemId against the role: host roles
// need an existing host, other roles must not name one.
func (s *Server) hostBinding(role string, oem *accountOem, current *redfish.HostID) (*redfish.HostID, error) {
	host := current
	if oem != nil && oem.CxlPool != nil && oem.CxlPool.SystemID != nil {
		id := *oem.CxlPool.SystemID
		if id == "" {
			host = nil
		} else {
			h, err := pool.ParseSystemID(id)
			if err != nil || !s.hostExists(h) {
				return nil, redfish.ErrPropertyValueNotInList(id, "Oem/CxlPool/SystemId")
			}
			host = pool.HostRef(h)
		}
	}
	r, _ := redfish.LookupRole(role)
	switch {
	case r.HostBound && host == nil:
		return nil, redfish.ErrPropertyMissing("Oem/CxlPool/SystemId")
	case !r.HostBound && host != nil:
		return nil, redfish.ErrPropertyValueConflict("Oem/CxlPool/SystemId", "RoleId")
	}
	return host, nil
}

func (s *Server) hostExists(h dcd.HostID) bool {
	if s.mgr == nil {
		return false
	}
	_, ok := s.mgr.Box().Head(uint16(h))
	return ok
}

func (s *Server) hashPassword(user, pw string) (string, error) {
	if err := s.Auth().PasswordPolicy().Check(user, pw); err != nil {
		return "", redfish.ErrPassword(err)
	}
	h, err := bcrypt.GenerateFromPassword([]byte(pw), s.cfg.BcryptCost)
	if err != nil {
		return "", redfish.ErrInternal(err)
	}
	return string(h), nil
}

func (s *Server) createAccount(c echo.Context) error {
	var req accountCreate
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	if !userNamePattern.MatchString(req.UserName) {
		return redfish.ErrPropertyValueFormat(req.UserName, "UserName")
	}
	host, err := s.hostBinding(req.RoleID, req.Oem, nil)
	if err != nil {
		return err
	}
	hash, err := s.hashPassword(req.UserName, req.Password)
	if err != nil {
		return err
	}
	enabled := req.Enabled == nil || *req.Enabled
	a, err := s.Store().CreateAccount(c.Request().Context(), redfish.Account{UserName: req.UserName, PasswordHash: hash,
		Role: req.RoleID, Enabled: enabled, HostID: host,
		PasswordChangeRequired: req.PasswordChangeRequired != nil && *req.PasswordChangeRequired})
	if errors.Is(err, redfish.ErrDuplicate) {
		return redfish.ErrResourceAlreadyExists("ManagerAccount", "UserName", req.UserName)
	}
	if err != nil {
		return redfish.ErrInternal(err)
	}
	s.Publish(redfish.Event{MessageKey: redfish.MsgResourceCreated, Origin: redfish.AccountURI(a.ID)})
	return s.WriteCreated(c, redfish.AccountURI(a.ID), s.accountBody(a))
}

// patchAccount: user administrators change anything; everyone else may
// change only their own password (ConfigureSelf).
func (s *Server) patchAccount(c echo.Context) error {
	a, err := s.findAccount(c)
	if err != nil {
		return err
	}
	var req accountPatch
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	p := redfish.PrincipalOf(c)
	others := req.UserName != nil || req.RoleID != nil || req.Enabled != nil || req.Locked != nil ||
		req.AccountTypes != nil || req.Oem != nil || req.PasswordChangeRequired != nil
	if p.PasswordChange && others {
		// Until it has a new password the account may set only that.
		return redfish.ErrPasswordChangeRequired(redfish.AccountURI(a.ID))
	}
	if !p.Has(redfish.PrivConfigureUsers) && others {
		return redfish.ErrInsufficientPrivilege()
	}
	if err := s.IfMatch(c, s.accountBody(a)); err != nil {
		return err
	}
	n := a
	if req.UserName != nil {
		if !userNamePattern.MatchString(*req.UserName) {
			return redfish.ErrPropertyValueFormat(*req.UserName, "UserName")
		}
		n.UserName = *req.UserName
	}
	if req.RoleID != nil {
		n.Role = *req.RoleID
	}
	if req.Enabled != nil {
		n.Enabled = *req.Enabled
	}
	if req.Locked != nil && *req.Locked {
		// Only the service locks accounts; clients may only unlock.
		return redfish.ErrPropertyValueNotInList("true", "Locked")
	}
	if n.HostID, err = s.hostBinding(n.Role, req.Oem, a.HostID); err != nil {
		return err
	}
	if req.Password != nil {
		if n.PasswordHash, err = s.hashPassword(n.UserName, *req.Password); err != nil {
			return err
		}
		n.PasswordChangeRequired = false
	}
	if req.PasswordChangeRequired != nil {
		// Given with a password, an administrator's explicit true wins:
		// a temporary password the user must replace.
		n.PasswordChangeRequired = *req.PasswordChangeRequired
	}
	if s.wouldRemoveLastAdmin(a, n.Role == redfish.RoleAdministrator && n.Enabled) {
		return redfish.ErrResourceInUse()
	}
	n, err = s.Store().UpdateAccount(c.Request().Context(), n)
	if errors.Is(err, redfish.ErrDuplicate) {
		return redfish.ErrResourceAlreadyExists("ManagerAccount", "UserName", *req.UserName)
	}
	if err != nil {
		return redfish.ErrInternal(err)
	}
	if req.Locked != nil {
		s.Auth().Unlock(a.UserName)
		if n.UserName != a.UserName {
			s.Auth().Unlock(n.UserName)
		}
	}
	if req.Password != nil || !n.Enabled || n.UserName != a.UserName {
		keep := p.SessionID
		if !n.Enabled || p.AccountUID != a.UID {
			keep = "" // only the account's own password change keeps its session
		}
		s.Auth().DropAccountSessions(a.UID, keep)
	}
	// Streams of the account re-check it (role, host binding, name).
	s.Auth().AccountsChanged()
	s.Publish(redfish.Event{MessageKey: redfish.MsgResourceChanged, Origin: redfish.AccountURI(a.ID)})
	return s.WriteResource(c, http.StatusOK, s.accountBody(n))
}

// wouldRemoveLastAdmin reports whether changing a so that it is (or is
// not) still an enabled Administrator leaves the service without one.
func (s *Server) wouldRemoveLastAdmin(a redfish.Account, stillAdmin bool) bool {
	if stillAdmin || a.Role != redfish.RoleAdministrator || !a.Enabled {
		return false
	}
	for _, o := range s.Store().Accounts() {
		if o.ID != a.ID && o.Role == redfish.RoleAdministrator && o.Enabled {
			return false
		}
	}
	return true
}

func (s *Server) deleteAccount(c echo.Context) error {
	a, err := s.findAccount(c)
	if err != nil {
		return err
	}
	if err := s.IfMatch(c, s.accountBody(a)); err != nil {
		return err
	}
	if s.wouldRemoveLastAdmin(a, false) {
		return redfish.ErrResourceCannotBeDeleted()
	}
	if err := s.Store().DeleteAccount(c.Request().Context(), a.ID); err != nil {
		return redfish.ErrInternal(err)
	}
	// Nothing the account owned outlives it: sessions and streams end,
	// its push subscriptions go, its tasks are bound to its UID, which
	// no other account will have.
	s.Auth().DropAccountSessions(a.UID, "")
	s.Auth().Unlock(a.UserName)
	s.DeleteOwnedSubscriptions(context.WithoutCancel(c.Request().Context()), a.UID)
	s.Publish(redfish.Event{MessageKey: redfish.MsgResourceRemoved, Origin: redfish.AccountURI(a.ID)})
	return s.NoContent(c)
}
