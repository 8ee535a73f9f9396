// Package api is cxlpool's management API: a DMTF Redfish service over the
// capacity Manager, built on echo.
//
// The framework (this file, router.go, respond.go, decode.go, errors.go,
// registry.go, auth.go) gives every resource the same protocol habits:
// authentication and a declared privilege per route, errors only from the
// Base message registry, ETags and If-Match, $select/$top/$skip/$expand/$filter,
// strict JSON decoding, audit logging of every change, tasks for long
// operations and an event bus feeding SSE, push subscriptions and the event
// log. Each resource lives in its own file and registers its routes with
// Server.Handle from a function listed in Server.routes:
//
//	func (s *Server) chunkRoutes() {
//		s.Handle(http.MethodGet, MemoryDomainURI+"/MemoryChunks/:id", PrivLogin, s.getChunk)
//		s.Handle(http.MethodDelete, MemoryDomainURI+"/MemoryChunks/:id",
//			PrivConfigureComponents|PrivHostCapacity, s.deleteChunk)
//	}
//
// Handlers read the caller with PrincipalOf (CanSeeHost for host
// isolation: 404 for other hosts' resources), decode bodies with Decode,
// answer with WriteResource/WriteCreated/WriteCollection/NoContent, check
// If-Match with IfMatch, return *Error values (or domain errors through
// FromDomain) and Publish events; long operations StartTask and answer
// Accepted.
package api

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/crypto/bcrypt"

	"cxlpool/dcd"
	"cxlpool/fabric"
	"cxlpool/fabric/linuxcxl"
	"cxlpool/host/report"
	"cxlpool/host/share"
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
	Lockout Lockout
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
	// Exports serves pool memory to remote racks: the Fabrics/RDMA
	// resources (exports.go). Nil: no exports and no RDMA fabric.
	Exports *rdma.Service
	// ExportAddr is the export server's address, shown to clients (nil:
	// no export server listens).
	ExportAddr net.Addr
	// ExportVerbs says the RDMA verbs transport serves the exports too:
	// the fabric is then RoCEv2 rather than TCP.
	ExportVerbs bool
	// Board is board management (board.go): thermal, power, sensors,
	// the identify LED and head power. Nil: none of them is served.
	Board Board
	// Telemetry is the CHMU pipeline behind the TelemetryService
	// (telemetry.go). Nil: the service shows itself disabled.
	Telemetry Telemetry
	// Update is the box's A/B image slots (updatepush.go): with it the
	// UpdateService takes multipart pushes and FirmwareInventory lists
	// both slots. Nil (not running from the image): neither.
	Update Updater
	// Reboot syncs and reboots the box, for pushes that ask for
	// OperationApplyTime Immediate. Nil: only OnReset is offered.
	Reboot func(context.Context) error
	// SetTime sets the box's clock, for PATCH Managers/FM DateTime
	// (managerpatch.go). Nil (the clock belongs to the host's operating
	// system): DateTime is not writable.
	SetTime func(ctx context.Context, t time.Time) error
	// MaxImageBytes bounds a pushed image (512 MiB).
	MaxImageBytes int64
	// LocalCXL lists the CXL memory devices the Linux driver bound on
	// the management computer (localcxl.go). Nil: none are shown.
	LocalCXL func() ([]linuxcxl.MemDev, error)
	// Network is the box's own network and time settings
	// (networkprotocol.go), given by the daemon on the image. Nil: the
	// host's operating system owns them and PATCH refuses changes.
	Network NetworkConfig
	// NetInterfaces lists the management computer's network interfaces
	// (ethernet.go). Nil: SystemInterfaces.
	NetInterfaces func() ([]NetInterface, error)
	// StartCheck waits for the daemon's consistency check after its first
	// reconcile (consistency.go); violations become an event. Nil: none.
	StartCheck func(context.Context) (dcd.InvariantReport, error)
	// Transport bounds the listener's timeouts and connections
	// (limits.go).
	Transport Transport
	// HostReports and Shares are the host agents' reports and the share
	// allowances (hostreports.go). Nil: a store of the API's own, and
	// DataDir/shares.json.
	HostReports *report.Store
	Shares      *share.Policy
}

// Lockout is the account lockout policy: Threshold consecutive failed
// logins lock an account for Duration. A negative Threshold disables it.
type Lockout struct {
	Threshold int
	Duration  time.Duration
}

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
	c.Transport.defaults()
}

// InitialPasswordFile is where a generated admin password is written.
const InitialPasswordFile = "initial-admin-password"

// Server is the Redfish service. Create it with New, serve Handler (or
// call Serve) and Close it when done.
type Server struct {
	cfg   Config
	log   *slog.Logger
	mgr   *dcd.Manager
	reg   *Registries
	store *store
	echo  *echo.Echo
	// handler is echo behind the transport's guards (limits.go).
	handler http.Handler
	conns   *connTracker          // the listeners' connection caps (limits.go)
	paths   map[string]*pathEntry // by route pattern
	// routeErrs collects registration mistakes for New to report.
	routeErrs []error

	auth     *authenticator
	tasks    *taskEngine
	bus      *bus
	metrics  *metrics
	capacity *capacity   // the pool resources' shared state (capacity.go)
	certs    certState   // the served TLS certificate (certificates.go)
	bundles  bundleState // support bundle collection (supportbundle.go)
	updating atomic.Bool // a pushed image is being applied (updatepush.go)

	uuid     string
	credNote string

	ctx       context.Context // ends at Close: background work, streams
	cancel    context.CancelFunc
	bg        sync.WaitGroup
	stopOnce  sync.Once
	closeOnce sync.Once
	closeErr  error
	streams   chan struct{} // closed when event streams must end
}

// New opens the accounts database (creating the admin account on first
// start), builds the routes and starts the background feeders.
func New(cfg Config) (*Server, error) {
	cfg.defaults()
	if cfg.DataDir == "" {
		return nil, errors.New("api: a data directory is required")
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("api: data directory: %w", err)
	}
	reg, err := LoadRegistries()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg: cfg, log: cfg.Logger, mgr: cfg.Manager, reg: reg,
		paths: map[string]*pathEntry{}, ctx: ctx, cancel: cancel,
		streams: make(chan struct{}),
	}
	ok := false
	defer func() {
		if !ok {
			cancel()
			if s.store != nil {
				s.store.close()
			}
		}
	}()
	st, err := openStore(ctx, filepath.Join(cfg.DataDir, AccountsFile), cfg.Clock)
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	s.store = st
	if err := s.initSettings(ctx); err != nil {
		return nil, err
	}
	if err := s.ensureAdmin(ctx); err != nil {
		return nil, err
	}
	s.metrics = newMetrics()
	s.auth = newAuthenticator(s)
	s.bus = newBus(s)
	s.tasks = newTaskEngine(s)
	if err := s.buildRouter(); err != nil {
		return nil, err
	}
	if err := s.metrics.registerServerGauges(s); err != nil {
		return nil, err
	}
	s.handler = s.transport(s.echo)
	s.conns = newConnTracker(cfg.Transport, s.log)
	for _, c := range s.conns.collectors() {
		if err := s.metrics.reg.Register(c); err != nil {
			return nil, err
		}
	}
	s.startFeeders()
	ok = true
	return s, nil
}

// routes lists the functions that register each resource's routes. A new
// resource adds its file and one line here.
func (s *Server) routes() []func() {
	return []func(){
		s.serviceRootRoutes,
		s.registryRoutes,
		s.sessionRoutes,
		s.accountRoutes,
		s.managerRoutes,
		s.logRoutes,
		s.taskRoutes,
		s.eventRoutes,
		s.metricsRoutes,
		s.capacitySetup,
		s.chassisRoutes,
		s.pcieDeviceRoutes,
		s.localCXLRoutes,
		s.logicalDeviceRoutes,
		s.memoryRegionRoutes,
		s.fabricAdapterRoutes,
		s.memoryDomainRoutes,
		s.defaultQuotaRoutes,
		s.memoryChunkRoutes,
		s.fabricRoutes,
		s.endpointRoutes,
		s.zoneRoutes,
		s.connectionRoutes,
		s.exportRoutes,
		s.systemRoutes,
		s.systemPatchRoutes,
		s.systemMemoryRoutes,
		s.boardRoutes,
		s.updateServiceRoutes,
		s.updatePushRoutes,
		s.managerPatchRoutes,
		s.managerResetRoutes,
		s.consoleRoutes,
		s.telemetryRoutes,
		s.networkRoutes,
		s.certificateRoutes,
		s.supportBundleRoutes,
		s.consistencyRoutes,
	}
}

// Handler is the service as an http.Handler, with the transport's
// deadlines and HSTS but without the connection caps of ServeListener.
func (s *Server) Handler() http.Handler { return s.handler }

// Registries returns the message registries the service resolves with.
func (s *Server) Registries() *Registries { return s.reg }

// CredentialsNote says where the admin credentials come from, for the
// daemon's start-up lines.
func (s *Server) CredentialsNote() string { return s.credNote }

// Close stops background work and event streams and closes the accounts
// database. In-flight tasks are cancelled.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.stopStreams()
		s.cancel()
		s.bg.Wait()
		s.closeErr = s.store.close()
	})
	return s.closeErr
}

func (s *Server) stopStreams() { s.stopOnce.Do(func() { close(s.streams) }) }

func (s *Server) now() time.Time { return s.cfg.Clock().UTC() }

// Settings keys in the accounts database.
const (
	settingUUID             = "service_uuid"
	settingSessionTimeout   = "session_timeout_seconds"
	settingLockoutThreshold = "lockout_threshold"
	settingLockoutDuration  = "lockout_duration_seconds"
	// The password length policy (password.go).
	settingMinPasswordLength = "min_password_length"
	settingMaxPasswordLength = "max_password_length"
)

// initSettings gives the service a stable UUID and seeds the PATCHable
// policies from Config on first start.
func (s *Server) initSettings(ctx context.Context) error {
	u, err := s.store.Setting(ctx, settingUUID, "")
	if err != nil {
		return fmt.Errorf("api: %w", err)
	}
	seed := map[string]string{}
	if u == "" {
		u = newUUID()
		seed[settingUUID] = u
		seed[settingSessionTimeout] = strconv.Itoa(int(s.cfg.SessionTimeout / time.Second))
		seed[settingLockoutThreshold] = strconv.Itoa(max(s.cfg.Lockout.Threshold, 0))
		seed[settingLockoutDuration] = strconv.Itoa(int(s.cfg.Lockout.Duration / time.Second))
		if err := s.store.SetSettings(ctx, seed); err != nil {
			return fmt.Errorf("api: %w", err)
		}
	}
	s.uuid = u
	return nil
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// ensureAdmin creates the "admin" Administrator on first start.
func (s *Server) ensureAdmin(ctx context.Context) error {
	if len(s.store.Accounts()) > 0 {
		s.credNote = "accounts from " + filepath.Join(s.cfg.DataDir, AccountsFile)
		if s.cfg.AdminPassword != "" {
			s.log.Info("admin password from the environment ignored: accounts already exist")
		}
		return nil
	}
	pw := s.cfg.AdminPassword
	generated := pw == ""
	if generated {
		pw = randomPassword(20)
	} else if err := defaultPasswordPolicy().check("admin", pw); err != nil {
		return fmt.Errorf("api: admin password (CXLPOOL_ADMIN_PASSWORD): %w", err)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(pw), s.cfg.BcryptCost)
	if err != nil {
		return fmt.Errorf("api: hash admin password: %w", err)
	}
	if generated {
		path := filepath.Join(s.cfg.DataDir, InitialPasswordFile)
		if err := os.WriteFile(path, []byte(pw+"\n"), 0o600); err != nil {
			return fmt.Errorf("api: write initial password: %w", err)
		}
		if s.cfg.Out != nil {
			fmt.Fprintf(s.cfg.Out, "initial Redfish account: user admin, password %s (also in %s; shown once)\n", pw, path)
		}
		s.credNote = "user admin, generated password in " + path
	} else {
		s.credNote = "user admin, password from the environment"
	}
	if _, err := s.store.CreateAccount(ctx, Account{UserName: "admin", PasswordHash: string(hash),
		Role: RoleAdministrator, Enabled: true}); err != nil {
		return fmt.Errorf("api: %w", err)
	}
	return nil
}

// randomPassword returns n characters from an alphabet without look-alikes.
func randomPassword(n int) string {
	return randomString("abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789", n)
}

// randomString draws n characters uniformly from alphabet with crypto/rand.
func randomString(alphabet string, n int) string {
	b := make([]byte, n)
	var r [1]byte
	for i := 0; i < n; {
		_, _ = rand.Read(r[:])
		if int(r[0]) >= 256-256%len(alphabet) { // reject to avoid modulo bias
			continue
		}
		b[i] = alphabet[int(r[0])%len(alphabet)]
		i++
	}
	return string(b)
}
