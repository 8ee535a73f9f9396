package redfish

import (
	"github.com/labstack/echo/v4"
)

// Privilege is a set of privileges. A route declares the set it accepts:
// the caller needs at least ONE of them (Redfish privilege mappings are
// OR-lists). Handlers that allow more than one refine per object (for
// example ConfigureSelf only for the caller's own account).
type Privilege uint32

// DMTF predefined privileges, the OEM host-capacity privilege and the
// service's internal ones.
const (
	PrivLogin Privilege = 1 << iota
	PrivConfigureManager
	PrivConfigureUsers
	PrivConfigureComponents
	PrivConfigureSelf
	// PrivHostCapacity (OEM "CxlPoolHostCapacity") lets a host-bound
	// account reserve and grant capacity to its own host.
	PrivHostCapacity
	// PrivApplianceView is held by every role that is not bound to a
	// host: it guards what spans all hosts (logs, other accounts,
	// metrics). It is internal and never shown in Role resources.
	PrivApplianceView

	// Public marks routes readable without authentication (ServiceRoot,
	// $metadata, odata, login). It is not a privilege anyone holds.
	Public Privilege = 1 << 31
)

// OemPrivHostCapacity is PrivHostCapacity's name in Role.OemPrivileges.
const OemPrivHostCapacity = "CxlPoolHostCapacity"

var dmtfPrivileges = []struct {
	p    Privilege
	name string
}{
	{PrivLogin, "Login"},
	{PrivConfigureManager, "ConfigureManager"},
	{PrivConfigureUsers, "ConfigureUsers"},
	{PrivConfigureComponents, "ConfigureComponents"},
	{PrivConfigureSelf, "ConfigureSelf"},
}

// Assigned returns the DMTF names of the privileges in p, in DMTF order.
func (p Privilege) Assigned() []string {
	out := []string{}
	for _, d := range dmtfPrivileges {
		if p&d.p != 0 {
			out = append(out, d.name)
		}
	}
	return out
}

// Oem returns the OEM privilege names in p.
func (p Privilege) Oem() []string {
	out := []string{}
	if p&PrivHostCapacity != 0 {
		out = append(out, OemPrivHostCapacity)
	}
	return out
}

// Role names.
const (
	RoleAdministrator = "Administrator"
	RoleOperator      = "Operator"
	RoleReadOnly      = "ReadOnly"
	RoleHostUser      = "HostUser"
)

// Role is a predefined role.
type Role struct {
	ID          string
	Description string
	Privileges  Privilege
	// HostBound roles' accounts are bound to one ComputerSystem.
	HostBound bool
}

// Roles are the predefined roles in display order. They are fixed: the
// service does not create custom roles.
var Roles = []Role{
	{ID: RoleAdministrator, Description: "Administrator User Role",
		Privileges: PrivLogin | PrivConfigureManager | PrivConfigureUsers | PrivConfigureComponents | PrivConfigureSelf | PrivApplianceView},
	{ID: RoleOperator, Description: "Operator User Role",
		Privileges: PrivLogin | PrivConfigureComponents | PrivConfigureSelf | PrivApplianceView},
	{ID: RoleReadOnly, Description: "Read Only User Role",
		Privileges: PrivLogin | PrivConfigureSelf | PrivApplianceView},
	{ID: RoleHostUser, Description: "Host User Role: manages the capacity of the one host its accounts are bound to",
		Privileges: PrivLogin | PrivConfigureSelf | PrivHostCapacity, HostBound: true},
}

// LookupRole returns the predefined role with the given Id.
func LookupRole(id string) (Role, bool) {
	for _, r := range Roles {
		if r.ID == id {
			return r, true
		}
	}
	return Role{}, false
}

// HostID names a host the service's resources belong to. An account
// bound to one (host isolation) sees only that host's resources; tasks and
// events concern a host so that only its accounts and the operators see
// them. The device's own host numbers convert to it.
type HostID uint16

// Principal is the authenticated caller of a request.
type Principal struct {
	// AccountID is the account's Id (shown in URIs); AccountUID its
	// identity, which owned objects (tasks, streams, tickets) are bound
	// to: Ids are never reused, and a UID cannot be inherited at all.
	AccountID  string
	AccountUID string
	User       string
	Role       string
	Privileges Privilege
	// HostID is set for host-bound accounts: they see and change only
	// their own host's resources.
	HostID *HostID
	// SessionID is the Redfish session the request came with; empty for
	// HTTP Basic.
	SessionID string
	// passwordChange: the account must change its password first
	// (ManagerAccount.PasswordChangeRequired); until then it may only
	// read its account and session, set its password and log out.
	PasswordChange bool
	// passwordHash is the account's hash when it authenticated: a Basic
	// principal's stream ends when the password changes.
	PasswordHash string
}

// Has reports whether the principal holds any privilege in p.
func (p *Principal) Has(priv Privilege) bool { return p != nil && p.Privileges&priv != 0 }

// CanSeeHost reports whether resources of host id are visible to the
// principal. A host-bound principal sees only its own host; handlers answer
// 404 ResourceNotFound (never 403) for the others, so that a host cannot
// even learn which other hosts' resources exist.
func (p *Principal) CanSeeHost(id HostID) bool {
	if p == nil {
		return false
	}
	return p.HostID == nil || *p.HostID == id
}

// IsHost reports whether the principal is bound to a host.
func (p *Principal) IsHost() bool { return p != nil && p.HostID != nil }

// principalKey is the echo context key of the request's Principal.
const principalKey = "redfish.principal"

// PrincipalOf returns the request's principal, or nil on public routes
// reached without credentials.
func PrincipalOf(c echo.Context) *Principal {
	p, _ := c.Get(principalKey).(*Principal)
	return p
}
