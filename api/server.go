package api

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"

	"cxlpool/api/accounts"
	"cxlpool/api/capacity"
	"cxlpool/api/fleetview"
	"cxlpool/api/internal/pool"
	"cxlpool/api/kvstore"
	"cxlpool/api/manager"
	"cxlpool/api/redfish"
	"cxlpool/api/telemetry"
	"cxlpool/dcd"
	"cxlpool/fabric"
	"cxlpool/fabric/linuxcxl"
	"cxlpool/history"
	"cxlpool/host/report"
	"cxlpool/host/share"
	"cxlpool/kv"
	"cxlpool/rdma"
)

// Config holds the service's dependencies and policy knobs. Zero values
// mean the documented defaults.
type Config struct {
	// Manager is the capacity manager the resources are views of.
	Manager *dcd.Manager
	// Device is the link to the device the Manager drives, for the reads
	// the Manager does not offer (per-LD extent lists, shown by
	// MemoryRegion). Optional: without it MemoryExtents come from the
	// ledger's record of what each host accepted.
	Device fabric.Device
	// DataDir holds accounts.db and tls/.
	DataDir string
	Logger  *slog.Logger
	Clock   func() time.Time
	// AdminPassword is the first start's password for "admin" (the daemon
	// passes CXLPOOL_ADMIN_PASSWORD). Empty: one is generated, printed
	// once to Out and written to DataDir/initial-admin-password (0600).
	AdminPassword string
	// Out receives the generated initial password (nil: not printed).
	Out io.Writer
	// FirmwareVersion is the build's version, shown by Managers/FM.
	FirmwareVersion string
	// SessionTimeout is the initial SessionService.SessionTimeout
	// (30 min); administrators can change it.
	SessionTimeout time.Duration
	// MaxBodyBytes bounds request bodies (1 MiB).
	MaxBodyBytes int64
	// Lockout is the initial account lockout policy.
	Lockout redfish.Lockout
	// MaxSessionsPerAccount bounds one account's sessions (16); its
	// next login ends its least recently used session.
	MaxSessionsPerAccount int
	// MaxStreamsPerAccount and MaxStreams bound open SSE streams (4 per
	// account, 64 in all, of which the last 8 are for Administrators).
	MaxStreamsPerAccount int
	MaxStreams           int
	// BcryptCost is the password hashing cost (bcrypt.DefaultCost); tests
	// lower it.
	BcryptCost int
	// LogLimit bounds each log service's entries (1000).
	LogLimit int
	// TaskLimit bounds the finished tasks kept for their monitors (256).
	TaskLimit int
	// PushRetryAttempts and PushRetryInterval are the push delivery
	// policy (3 attempts, 30 s apart, doubling).
	PushRetryAttempts int
	PushRetryInterval time.Duration
	// PushClient delivers events to subscribers (a client with a 10 s
	// timeout).
	PushClient *http.Client
	// KV is the KV-cache store's namespaces (kvstore/). Nil: not
	// served.
	KV *kv.Service
	// KVEvents, if set, delivers the KV store's block events
	// (appliance.SubscribeKVEvents); they go to the EventLog, SSE and
	// push subscriptions (kvstore/kvevents.go).
	KVEvents func(buf int) (<-chan kv.Event, func())
	// Exports serves pool memory to remote racks: the Fabrics/RDMA
	// resources (api/capacity). Nil: no exports and no RDMA fabric.
	Exports *rdma.Service
	// ExportAddr is the export server's address, shown to clients (nil:
	// no export server listens).
	ExportAddr net.Addr
	// ExportVerbs says the RDMA verbs transport serves the exports too:
	// the fabric is then RoCEv2 rather than TCP.
	ExportVerbs bool
	// Board is board management: thermal, power, sensors (api/board),
	// the identify LED and head power (api/capacity). Nil: none of them
	// is served.
	Board Board
	// Telemetry is the CHMU pipeline behind the TelemetryService
	// (api/telemetry). Nil: the service shows itself disabled.
	Telemetry Telemetry
	// History is the box's downsampled history and alerts
	// (api/telemetry: metrichistory.go, triggers.go). Nil: neither is served.
	History *history.Service
	// Update is the box's A/B image slots (api/manager): with it the
	// UpdateService takes multipart pushes and FirmwareInventory lists
	// both slots. Nil (not running from the image): neither.
	Update Updater
	// Reboot syncs and reboots the box, for pushes that ask for
	// OperationApplyTime Immediate. Nil: only OnReset is offered.
	Reboot func(context.Context) error
	// SetTime sets the box's clock, for PATCH Managers/FM DateTime
	// (api/manager). Nil (the clock belongs to the host's operating
	// system): DateTime is not writable.
	SetTime func(ctx context.Context, t time.Time) error
	// MaxImageBytes bounds a pushed image (512 MiB).
	MaxImageBytes int64
	// LocalCXL lists the CXL memory devices the Linux driver bound on
	// the management computer (api/capacity). Nil: none are shown.
	LocalCXL func() ([]linuxcxl.MemDev, error)
	// Network is the box's own network and time settings
	// (api/manager), given by the daemon on the image. Nil: the
	// host's operating system owns them and PATCH refuses changes.
	Network NetworkConfig
	// NetInterfaces lists the management computer's network interfaces
	// (api/manager). Nil: SystemInterfaces.
	NetInterfaces func() ([]NetInterface, error)
	// StartCheck waits for the daemon's consistency check after its first
	// reconcile (api/manager); violations become an event. Nil: none.
	StartCheck func(context.Context) (dcd.InvariantReport, error)
	// Transport bounds the listener's timeouts and connections
	// (redfish/limits.go).
	Transport redfish.Transport
	// OnEvent, when set, sees every published event, numbered and timed
	// (the fleet plane forwards them); it must not block.
	OnEvent func(redfish.Event)
	// Fleet is the fleet plane's view (api/fleetview); nil: no plane.
	Fleet FleetView
	// HostReports and Shares are the host agents' reports and the share
	// allowances (api/capacity). Nil: a store of the API's own, and
	// DataDir/shares.json.
	HostReports *report.Store
	Shares      *share.Policy
}

// Lockout and Transport are the protocol's policies, set through Config.
type (
	Lockout   = redfish.Lockout
	Transport = redfish.Transport
)

func (c *Config) defaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = 30 * time.Minute
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.MaxImageBytes <= 0 {
		c.MaxImageBytes = 512 << 20
	}
	if c.Lockout.Threshold == 0 {
		c.Lockout.Threshold = 5
	}
	if c.Lockout.Duration <= 0 {
		c.Lockout.Duration = 5 * time.Minute
	}
	if c.MaxSessionsPerAccount <= 0 {
		c.MaxSessionsPerAccount = 16
	}
	if c.MaxStreamsPerAccount <= 0 {
		c.MaxStreamsPerAccount = 4
	}
	if c.MaxStreams <= 0 {
		c.MaxStreams = 64
	}
	if c.BcryptCost == 0 {
		c.BcryptCost = bcrypt.DefaultCost
	}
	if c.LogLimit <= 0 {
		c.LogLimit = 1000
	}
	if c.TaskLimit <= 0 {
		c.TaskLimit = 256
	}
	if c.PushRetryAttempts <= 0 {
		c.PushRetryAttempts = 3
	}
	if c.PushRetryInterval <= 0 {
		c.PushRetryInterval = 30 * time.Second
	}
	if c.PushClient == nil {
		c.PushClient = &http.Client{Timeout: 10 * time.Second}
	}
	if c.FirmwareVersion == "" {
		c.FirmwareVersion = "dev"
	}
	c.Transport.Defaults()
}

// Server is cxlpool's Redfish service: the protocol (Service) serving
// the pool's resources. Create it with New, serve Handler (or call Serve)
// and Close it when done.
type Server struct {
	*redfish.Service
	cfg Config
	log *slog.Logger
	mgr *dcd.Manager

	ctx  context.Context // the Service's: ends at Close
	bg   sync.WaitGroup  // the resources' background work
	deps pool.Deps       // what the resource packages share
	// mc serves the management computer's network, certificates and TLS
	// listener (api/manager).
	mc *manager.Server
	// pool serves the capacity resources and their fabric (api/capacity).
	pool *capacity.Server
	// fv serves the fleet plane's view (api/fleetview).
	fv *fleetview.Server
}

// New opens the accounts database (creating the admin account on first
// start), builds the routes and starts the background feeders.
func New(cfg Config) (*Server, error) {
	cfg.defaults()
	svc, err := redfish.New(redfish.Config{
		DataDir: cfg.DataDir, Logger: cfg.Logger, Clock: cfg.Clock,
		AdminPassword: cfg.AdminPassword, Out: cfg.Out, SessionTimeout: cfg.SessionTimeout,
		MaxBodyBytes: cfg.MaxBodyBytes, Lockout: cfg.Lockout, MaxSessionsPerAccount: cfg.MaxSessionsPerAccount,
		MaxStreamsPerAccount: cfg.MaxStreamsPerAccount, MaxStreams: cfg.MaxStreams, BcryptCost: cfg.BcryptCost,
		LogLimit: cfg.LogLimit, TaskLimit: cfg.TaskLimit, PushRetryAttempts: cfg.PushRetryAttempts,
		PushRetryInterval: cfg.PushRetryInterval, PushClient: cfg.PushClient, Transport: cfg.Transport,
		MapError: FromDomain, OnEvent: cfg.OnEvent,
	})
	if err != nil {
		return nil, err
	}
	s := &Server{Service: svc, cfg: cfg, log: cfg.Logger, mgr: cfg.Manager, ctx: svc.Context()}
	s.deps = pool.Deps{Service: svc, Manager: cfg.Manager, Logger: cfg.Logger, Clock: cfg.Clock, Ctx: s.ctx, BG: &s.bg}
	s.pool = capacity.New(s.deps, capacity.Config{Device: cfg.Device, DataDir: cfg.DataDir,
		Exports: cfg.Exports, ExportAddr: cfg.ExportAddr, ExportVerbs: cfg.ExportVerbs, Board: cfg.Board,
		LocalCXL: cfg.LocalCXL, HostReports: cfg.HostReports, Shares: cfg.Shares})
	s.fv = fleetview.New(s.deps, cfg.Fleet)
	s.mc = manager.New(s.deps, manager.Config{Network: cfg.Network, NetInterfaces: cfg.NetInterfaces,
		DataDir: cfg.DataDir, Clock: cfg.Clock, Transport: cfg.Transport, FirmwareVersion: cfg.FirmwareVersion,
		LogLimit: cfg.LogLimit, Update: cfg.Update, Reboot: cfg.Reboot, SetTime: cfg.SetTime,
		MaxImageBytes: cfg.MaxImageBytes, StartCheck: cfg.StartCheck, Pool: s.pool,
		FleetStatus: s.fv.ManagerStatus, BundleSettings: cfg.bundleSettings()})
	for _, register := range s.routes() {
		register()
	}
	if err := svc.Start(); err != nil {
		svc.Close()
		return nil, err
	}
	s.pool.StartFeeders()
	return s, nil
}

// routes lists the functions that register each resource's routes. A new
// resource adds its file and one line here.
func (s *Server) routes() []func() {
	return []func(){
		s.serviceRootRoutes,
		s.registryRoutes,
		accounts.New(s.deps, accounts.Config{BcryptCost: s.cfg.BcryptCost}).Routes,
		s.pool.Routes, // the pool, its fabric, the Systems, the board
		s.mc.Routes,   // the Manager, its logs, update, network, certificates (after the pool's)
		s.consoleRoutes,
		telemetry.New(s.deps, telemetry.Config{Telemetry: s.cfg.Telemetry, Grants: s.pool.ActiveGrants, History: s.cfg.History}).Routes,
		kvstore.New(s.deps, kvstore.Config{KV: s.cfg.KV, KVEvents: s.cfg.KVEvents}).Routes,
		s.fv.Routes, // the fleet view
	}
}

// bundleSettings is the policy and the features the service was given, as
// the support bundle's config.json shows them.
func (c *Config) bundleSettings() redfish.Obj {
	exportAddr := ""
	if c.ExportAddr != nil {
		exportAddr = c.ExportAddr.String()
	}
	return redfish.Obj{
		"SessionTimeout": c.SessionTimeout.String(), "MaxBodyBytes": c.MaxBodyBytes, "MaxImageBytes": c.MaxImageBytes,
		"Lockout":  redfish.Obj{"Threshold": c.Lockout.Threshold, "Duration": c.Lockout.Duration.String()},
		"LogLimit": c.LogLimit, "TaskLimit": c.TaskLimit,
		"Push": redfish.Obj{"Attempts": c.PushRetryAttempts, "Interval": c.PushRetryInterval.String()},
		"Features": redfish.Obj{
			"Device": c.Device != nil, "Exports": c.Exports != nil, "ExportAddr": exportAddr, "ExportVerbs": c.ExportVerbs,
			"Board": c.Board != nil, "Telemetry": c.Telemetry != nil, "Update": c.Update != nil,
			"Reboot": c.Reboot != nil, "LocalCXL": c.LocalCXL != nil,
		},
	}
}

// Close stops background work and event streams and closes the accounts
// database. In-flight tasks are cancelled.
func (s *Server) Close() error {
	s.Service.Stop()
	s.bg.Wait()
	return s.Service.Close()
}
