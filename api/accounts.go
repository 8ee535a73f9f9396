package api

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

	"cxlpool/api/oemschema"
	"cxlpool/dcd"
)

const rolesURI = accountServiceURI + "/Roles"

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
	s.Handle(http.MethodGet, accountServiceURI, PrivLogin, func(c echo.Context) error {
		return s.WriteResource(c, http.StatusOK, s.accountService())
	})
	s.Handle(http.MethodPatch, accountServiceURI, PrivConfigureUsers, s.patchAccountService)
	s.Handle(http.MethodGet, accountsURI, PrivLogin, func(c echo.Context) error {
		p := PrincipalOf(c)
		var uris []string
		byURI := map[string]Account{}
		for _, a := range s.store.Accounts() {
			if canSeeAccount(p, a) {
				u := accountURI(a.ID)
				uris = append(uris, u)
				byURI[u] = a
			}
		}
		return s.WriteCollection(c, Collection{ODataID: accountsURI,
			ODataType: "#ManagerAccountCollection.ManagerAccountCollection", Name: "Accounts", Members: uris,
			Expand: func(uri string) (any, error) { return s.accountBody(byURI[uri]), nil }})
	})
	s.Handle(http.MethodPost, accountsURI, PrivConfigureUsers, s.createAccount)
	s.Handle(http.MethodGet, accountsURI+"/:id", PrivLogin, func(c echo.Context) error {
		a, err := s.findAccount(c)
		if err != nil {
			return err
		}
		return s.WriteResource(c, http.StatusOK, s.accountBody(a))
	})
	s.Handle(http.MethodPatch, accountsURI+"/:id", PrivConfigureUsers|PrivConfigureSelf, s.patchAccount)
	s.Handle(http.MethodDelete, accountsURI+"/:id", PrivConfigureUsers, s.deleteAccount)
	s.Handle(http.MethodGet, rolesURI, PrivLogin, func(c echo.Context) error {
		uris := make([]string, len(roles))
		for i, r := range roles {
			uris[i] = rolesURI + "/" + r.ID
		}
		return s.WriteCollection(c, Collection{ODataID: rolesURI, ODataType: "#RoleCollection.RoleCollection",
			Name: "Roles", Members: uris, Expand: func(uri string) (any, error) {
				r, _ := LookupRole(uri[len(rolesURI)+1:])
				return roleBody(r), nil
			}})
	})
	s.Handle(http.MethodGet, rolesURI+"/:id", PrivLogin, func(c echo.Context) error {
		r, ok := LookupRole(c.Param("id"))
		if !ok {
			return ErrResourceNotFound("Role", c.Param("id"))
		}
		return s.WriteResource(c, http.StatusOK, roleBody(r))
	})
}

// canSeeAccount: user administrators see every account, others only
// their own.
func canSeeAccount(p *Principal, a Account) bool {
	return p.Has(PrivConfigureUsers) || a.UID == p.AccountUID
}

func (s *Server) findAccount(c echo.Context) (Account, error) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil {
		return Account{}, ErrResourceNotFound("ManagerAccount", c.Param("id"))
	}
	a, ok := s.store.Account(id)
	if !ok || !canSeeAccount(PrincipalOf(c), a) {
		return Account{}, ErrResourceNotFound("ManagerAccount", c.Param("id"))
	}
	return a, nil
}

func roleBody(r Role) Obj {
	return Obj{
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

func (s *Server) accountBody(a Account) Obj {
	o := Obj{
		"@odata.id":              accountURI(a.ID),
		"@odata.type":            "#ManagerAccount.v1_14_1.ManagerAccount",
		"Id":                     strconv.FormatInt(a.ID, 10),
		"Name":                   "User Account",
		"UserName":               a.UserName,
		"Password":               nil,
		"RoleId":                 a.Role,
		"Enabled":                a.Enabled,
		"Locked":                 s.auth.locked(a.UserName),
		"AccountTypes":           []string{"Redfish"},
		"PasswordChangeRequired": a.PasswordChangeRequired,
		"Links":                  Obj{"Role": Link(rolesURI + "/" + a.Role)},
	}
	if a.HostID != nil {
		oem := Obj{"SystemId": SystemID(dcd.HostID(*a.HostID))}
		if s.HasRoute(SystemsURI) {
			oem["System"] = Link(SystemURI(dcd.HostID(*a.HostID)))
		}
		o["Oem"] = oemschema.Oem("ManagerAccount", oem)
	}
	return o
}

func (s *Server) accountService() Obj {
	_, threshold, lockFor := s.auth.policy()
	pw := s.auth.passwordPolicy()
	return Obj{
		"@odata.id":                         accountServiceURI,
		"@odata.type":                       "#AccountService.v1_18_1.AccountService",
		"Id":                                "AccountService",
		"Name":                              "Account Service",
		"Description":                       "Local accounts and roles",
		"ServiceEnabled":                    true,
		"Status":                            Obj{"State": "Enabled", "Health": "OK"},
		"LocalAccountAuth":                  "Enabled",
		"HTTPBasicAuth":                     "Enabled",
		"MinPasswordLength":                 pw.min,
		"MaxPasswordLength":                 pw.max,
		"PasswordGuidanceMessage":           pw.guidance(),
		"AccountLockoutThreshold":           threshold,
		"AccountLockoutDuration":            int(lockFor / time.Second),
		"AccountLockoutCounterResetAfter":   int(lockFor / time.Second),
		"AccountLockoutCounterResetEnabled": true,
		"SupportedAccountTypes":             []string{"Redfish"},
		"Accounts":                          Link(accountsURI),
		"Roles":                             Link(rolesURI),
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
			return ErrPropertyValueOutOfRange(strconv.Itoa(*v), "AccountLockoutThreshold")
		}
		threshold = v
		set[settingLockoutThreshold] = strconv.Itoa(*v)
	}
	if v := req.AccountLockoutDuration; v != nil {
		if *v < 1 || *v > 86400 {
			return ErrPropertyValueOutOfRange(strconv.Itoa(*v), "AccountLockoutDuration")
		}
		d := time.Duration(*v) * time.Second
		lockFor = &d
		set[settingLockoutDuration] = strconv.Itoa(*v)
	}
	pw := s.auth.passwordPolicy()
	if v := req.MinPasswordLength; v != nil {
		pw.min = *v
		set[settingMinPasswordLength] = strconv.Itoa(*v)
	}
	if v := req.MaxPasswordLength; v != nil {
		pw.max = *v
		set[settingMaxPasswordLength] = strconv.Itoa(*v)
	}
	if err := pw.valid(); err != nil {
		prop, v := "MinPasswordLength", pw.min
		if req.MaxPasswordLength != nil && (pw.max > bcryptMaxPassword || req.MinPasswordLength == nil) {
			prop, v = "MaxPasswordLength", pw.max
		}
		e := ErrPropertyValueOutOfRange(strconv.Itoa(v), prop)
		e.Messages[0].Resolution = fmt.Sprintf("MinPasswordLength must be at least %d and MaxPasswordLength at most %d "+
			"(bcrypt reads no further), with the minimum not above the maximum.", lowestMinPasswordLength, bcryptMaxPassword)
		return e
	}
	if len(set) > 0 {
		if err := s.store.SetSettings(c.Request().Context(), set); err != nil {
			return ErrInternal(err)
		}
		s.auth.setPolicy(nil, threshold, lockFor)
		s.auth.setPasswordPolicy(pw)
		s.Publish(Event{MessageKey: MsgResourceChanged, Origin: accountServiceURI})
	}
	return s.WriteResource(c, http.StatusOK, s.accountService())
}

// hostBinding validates Oem.CxlPool.SystemId against the role: host roles
// need an existing host, other roles must not name one.
func (s *Server) hostBinding(role string, oem *accountOem, current *HostID) (*HostID, error) {
	host := current
	if oem != nil && oem.CxlPool != nil && oem.CxlPool.SystemID != nil {
		id := *oem.CxlPool.SystemID
		if id == "" {
			host = nil
		} else {
			h, err := ParseSystemID(id)
			if err != nil || !s.hostExists(h) {
				return nil, ErrPropertyValueNotInList(id, "Oem/CxlPool/SystemId")
			}
			host = hostRef(h)
		}
	}
	r, _ := LookupRole(role)
	switch {
	case r.HostBound && host == nil:
		return nil, ErrPropertyMissing("Oem/CxlPool/SystemId")
	case !r.HostBound && host != nil:
		return nil, ErrPropertyValueConflict("Oem/CxlPool/SystemId", "RoleId")
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
	if err := s.auth.passwordPolicy().check(user, pw); err != nil {
		return "", errPassword(err)
	}
	h, err := bcrypt.GenerateFromPassword([]byte(pw), s.cfg.BcryptCost)
	if err != nil {
		return "", ErrInternal(err)
	}
	return string(h), nil
}

func (s *Server) createAccount(c echo.Context) error {
	var req accountCreate
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	if !userNamePattern.MatchString(req.UserName) {
		return ErrPropertyValueFormat(req.UserName, "UserName")
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
	a, err := s.store.CreateAccount(c.Request().Context(), Account{UserName: req.UserName, PasswordHash: hash,
		Role: req.RoleID, Enabled: enabled, HostID: host,
		PasswordChangeRequired: req.PasswordChangeRequired != nil && *req.PasswordChangeRequired})
	if errors.Is(err, errDuplicate) {
		return ErrResourceAlreadyExists("ManagerAccount", "UserName", req.UserName)
	}
	if err != nil {
		return ErrInternal(err)
	}
	s.Publish(Event{MessageKey: MsgResourceCreated, Origin: accountURI(a.ID)})
	return s.WriteCreated(c, accountURI(a.ID), s.accountBody(a))
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
	p := PrincipalOf(c)
	others := req.UserName != nil || req.RoleID != nil || req.Enabled != nil || req.Locked != nil ||
		req.AccountTypes != nil || req.Oem != nil || req.PasswordChangeRequired != nil
	if p.passwordChange && others {
		// Until it has a new password the account may set only that.
		return errPasswordChangeRequired(accountURI(a.ID))
	}
	if !p.Has(PrivConfigureUsers) && others {
		return ErrInsufficientPrivilege()
	}
	if err := s.IfMatch(c, s.accountBody(a)); err != nil {
		return err
	}
	n := a
	if req.UserName != nil {
		if !userNamePattern.MatchString(*req.UserName) {
			return ErrPropertyValueFormat(*req.UserName, "UserName")
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
		return ErrPropertyValueNotInList("true", "Locked")
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
	if s.wouldRemoveLastAdmin(a, n.Role == RoleAdministrator && n.Enabled) {
		return ErrResourceInUse()
	}
	n, err = s.store.UpdateAccount(c.Request().Context(), n)
	if errors.Is(err, errDuplicate) {
		return ErrResourceAlreadyExists("ManagerAccount", "UserName", *req.UserName)
	}
	if err != nil {
		return ErrInternal(err)
	}
	if req.Locked != nil {
		s.auth.unlock(a.UserName)
		if n.UserName != a.UserName {
			s.auth.unlock(n.UserName)
		}
	}
	if req.Password != nil || !n.Enabled || n.UserName != a.UserName {
		keep := p.SessionID
		if !n.Enabled || p.AccountUID != a.UID {
			keep = "" // only the account's own password change keeps its session
		}
		s.auth.dropAccountSessions(a.UID, keep)
	}
	// Streams of the account re-check it (role, host binding, name).
	s.auth.accountsChanged()
	s.Publish(Event{MessageKey: MsgResourceChanged, Origin: accountURI(a.ID)})
	return s.WriteResource(c, http.StatusOK, s.accountBody(n))
}

// wouldRemoveLastAdmin reports whether changing a so that it is (or is
// not) still an enabled Administrator leaves the service without one.
func (s *Server) wouldRemoveLastAdmin(a Account, stillAdmin bool) bool {
	if stillAdmin || a.Role != RoleAdministrator || !a.Enabled {
		return false
	}
	for _, o := range s.store.Accounts() {
		if o.ID != a.ID && o.Role == RoleAdministrator && o.Enabled {
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
		return ErrResourceCannotBeDeleted()
	}
	if err := s.store.DeleteAccount(c.Request().Context(), a.ID); err != nil {
		return ErrInternal(err)
	}
	// Nothing the account owned outlives it: sessions and streams end,
	// its push subscriptions go, its tasks are bound to its UID, which
	// no other account will have.
	s.auth.dropAccountSessions(a.UID, "")
	s.auth.unlock(a.UserName)
	s.deleteOwnedSubscriptions(context.WithoutCancel(c.Request().Context()), a.UID)
	s.Publish(Event{MessageKey: MsgResourceRemoved, Origin: accountURI(a.ID)})
	return s.NoContent(c)
}
