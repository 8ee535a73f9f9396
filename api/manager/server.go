// Package manager serves the management computer's own resources: the
// Manager /redfish/v1/Managers/FM (managers.go), its clock and settings
// (managerpatch.go), its Reset (managerreset.go) and the pool's
// consistency check (consistency.go); its network, ManagerNetworkProtocol
// (networkprotocol.go: host name, NTP, time zone, the served protocols)
// and EthernetInterfaces (ethernet.go); its LogServices (logs.go) and the
// support bundle (supportbundle.go); the UpdateService with the running
// firmware (updateservice.go) and the A/B image push (updatepush.go); the
// CertificateService with the HTTPS certificate, its replacement and CSRs
// (certificates.go, certcsr.go, certfiles.go); and the TLS listener that
// serves that certificate (tls.go: Serve).
package manager

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
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
	// FirmwareVersion is the build's version, shown by the Manager.
	FirmwareVersion string
	// LogLimit bounds each log service's entries.
	LogLimit int
	// Update is the box's A/B image slots (updatepush.go): with it the
	// UpdateService takes multipart pushes and FirmwareInventory lists
	// both slots. Nil (not running from the image): neither.
	Update Updater
	// Reboot syncs and reboots the box, for pushes that ask for
	// OperationApplyTime Immediate and for the Manager's Reset. Nil:
	// only OnReset is offered and there is no Reset.
	Reboot func(context.Context) error
	// SetTime sets the box's clock, for PATCH DateTime (managerpatch.go).
	// Nil (the clock belongs to the host's operating system): DateTime is
	// not writable.
	SetTime func(ctx context.Context, t time.Time) error
	// MaxImageBytes bounds a pushed image.
	MaxImageBytes int64
	// StartCheck waits for the daemon's consistency check after its first
	// reconcile (consistency.go); violations become an event. Nil: none.
	StartCheck func(context.Context) (dcd.InvariantReport, error)
	// Pool is what the Manager's resources read of the capacity ones
	// (api/capacity), registered before them.
	Pool Pool
	// FleetStatus adds the fleet plane's Condition to the Manager
	// (api/fleetview). Nil: none.
	FleetStatus func(o redfish.Obj)
	// BundleSettings is the assembly's policy and the features it was
	// given, as the support bundle's config.json shows them (limits,
	// lockout, push policy, which dependencies are set).
	BundleSettings redfish.Obj
}

// Pool is what the Manager's resources need of the capacity resources:
// whether the pool is served (the UpdateService lists its device's
// firmware) and the export service the consistency check reads.
type Pool interface {
	Serving() bool
	ExportView() dcd.ExportView
}

// Server serves the management computer's resources on the shared
// Service.
type Server struct {
	*redfish.Service
	cfg      Config
	log      *slog.Logger
	mgr      *dcd.Manager
	pool     Pool
	certs    certState   // the served TLS certificate (certfiles.go)
	bundles  bundleState // support bundle collection (supportbundle.go)
	updating atomic.Bool // a pushed image is being applied (updatepush.go)

	ctx context.Context // the Service's: ends at Close
	bg  *sync.WaitGroup // the assembly's: Close waits for it
}

// New returns the management computer's resources; Routes registers them.
func New(d pool.Deps, cfg Config) *Server {
	return &Server{Service: d.Service, cfg: cfg, log: d.Logger, mgr: d.Manager, pool: cfg.Pool, ctx: d.Ctx, bg: d.BG}
}

// Routes registers the Manager and everything under it, the
// UpdateService and the CertificateService, each with its privilege.
// Config.Pool must have registered its routes before.
func (s *Server) Routes() {
	s.managerRoutes()
	s.logRoutes()
	s.updateServiceRoutes()
	s.updatePushRoutes()
	s.managerPatchRoutes()
	s.managerResetRoutes()
	s.networkRoutes()
	s.certificateRoutes()
	s.supportBundleRoutes()
	s.consistencyRoutes()
}

func (s *Server) now() time.Time { return s.cfg.Clock().UTC() }

// CertificateServiceURI is the CertificateService, which the service root
// links.
const CertificateServiceURI = certificateServiceURI
