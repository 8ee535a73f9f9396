// Package manager serves the management computer's own resources under
// /redfish/v1/Managers/FM and the CertificateService. So far: its network,
// ManagerNetworkProtocol (networkprotocol.go: host name, NTP, time zone,
// the served protocols) and EthernetInterfaces (ethernet.go); the
// CertificateService with the HTTPS certificate, its replacement and CSRs
// (certificates.go, certcsr.go, certfiles.go); and the TLS listener that
// serves that certificate (tls.go: Serve). The Manager itself, its clock,
// reset, firmware update, logs and support bundle are still served by
// package api.
package manager

import (
	"io"
	"log/slog"
	"os"
	"time"

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
	// DataDir holds tls/, the served certificate and key.
	DataDir string
	// Clock dates certificates and their renewal.
	Clock func() time.Time
	// Transport bounds the listener's timeouts and connections
	// (redfish/limits.go) and sets the certificate check's interval.
	Transport redfish.Transport
}

// Server serves the management computer's resources on the shared
// Service.
type Server struct {
	*redfish.Service
	cfg   Config
	log   *slog.Logger
	certs certState // the served TLS certificate (certfiles.go)
}

// New returns the management computer's resources; Routes registers them.
func New(d pool.Deps, cfg Config) *Server {
	return &Server{Service: d.Service, cfg: cfg, log: d.Logger}
}

// Routes registers ManagerNetworkProtocol, EthernetInterfaces and the
// CertificateService.
func (s *Server) Routes() {
	s.networkRoutes()
	s.certificateRoutes()
}

// NetworkLinks adds the Manager's links to its network resources, for the
// principals that may read them.
func (s *Server) NetworkLinks(o redfish.Obj, p *redfish.Principal) { s.managerNetworkLinks(o, p) }

func (s *Server) now() time.Time { return s.cfg.Clock().UTC() }

// What the support bundle (api's supportbundle.go) reads of the
// certificate files.
const (
	// CertificateServiceURI is the CertificateService.
	CertificateServiceURI = certificateServiceURI
	// CertFile is the served certificate's file in DataDir/tls.
	CertFile = certFile
)

// TLSPath is a file of DataDir/tls.
func (s *Server) TLSPath(name string) string { return s.tlsPath(name) }

// ColonHex is b as "ab:cd:...", as certificate tools show serial numbers
// and fingerprints.
func ColonHex(b []byte) string { return colonHex(b) }

// ActionError is a 400 for an action's parameter, with the registry
// message key and its arguments.
func ActionError(key string, args ...any) *redfish.Error { return actionErr(key, args...) }

// WriteFileAtomic replaces path with what write writes so that a power
// cut leaves either the old file or the new one, never a torn one.
func WriteFileAtomic(path string, perm os.FileMode, write func(io.Writer) error) error {
	return writeFileAtomicFunc(path, perm, write)
}
