// Package accounts serves the AccountService: its policy (lockout,
// password rules), the Roles and the ManagerAccounts, with the pool's
// addition of binding a HostUser account to one System. The account
// store, sessions and authentication themselves are protocol and live in
// package redfish; this package is the resource view of them.
package accounts

import (
	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
)

// Config is the AccountService's own dependencies.
type Config struct {
	// BcryptCost is the password hashing cost.
	BcryptCost int
}

// Server serves the AccountService on the shared Service.
type Server struct {
	*redfish.Service
	cfg Config
	mgr *dcd.Manager // the hosts an account may be bound to
}

// New returns the AccountService; Routes registers it.
func New(d pool.Deps, cfg Config) *Server {
	return &Server{Service: d.Service, cfg: cfg, mgr: d.Manager}
}

// Routes registers the AccountService, its Roles and Accounts, each with
// its privilege.
func (s *Server) Routes() { s.accountRoutes() }
