// Package manager serves the management computer's own resources under
// /redfish/v1/Managers/FM. So far: its network, ManagerNetworkProtocol
// (networkprotocol.go: host name, NTP, time zone, the served protocols)
// and EthernetInterfaces (ethernet.go). The Manager itself, its clock,
// reset, certificates, firmware update, logs and support bundle are still
// served by package api.
package manager

import (
	"log/slog"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
)

// Config is the management computer resources' own dependencies.
type Config struct {
	// Network is the box's own network and time settings, given by the
	// daemon on the image. Nil: the host's operating system owns them and
	// PATCH refuses changes.
	Network NetworkConfig
	// NetInterfaces lists the management computer's network interfaces.
	// Nil: SystemInterfaces.
	NetInterfaces func() ([]NetInterface, error)
}

// Server serves the management computer's resources on the shared
// Service.
type Server struct {
	*redfish.Service
	cfg Config
	log *slog.Logger
}

// New returns the management computer's resources; Routes registers them.
func New(d pool.Deps, cfg Config) *Server {
	return &Server{Service: d.Service, cfg: cfg, log: d.Logger}
}

// Routes registers ManagerNetworkProtocol and EthernetInterfaces.
func (s *Server) Routes() { s.networkRoutes() }

// NetworkLinks adds the Manager's links to its network resources, for the
// principals that may read them.
func (s *Server) NetworkLinks(o redfish.Obj, p *redfish.Principal) { s.managerNetworkLinks(o, p) }
