package redfish

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/crypto/bcrypt"
)

// Config holds the protocol's dependencies and policy knobs. Zero
// values mean the documented defaults.
type Config struct {
	// DataDir holds accounts.db.
	DataDir string
	Logger  *slog.Logger
	Clock   func() time.Time
	// AdminPassword is the first start's password for "admin". Empty:
	// one is generated, printed once to Out and written to
	// DataDir/initial-admin-password (0600).
	AdminPassword string
	// Out receives the generated initial password (nil: not printed).
	Out io.Writer
	// SessionTimeout is the initial SessionService.SessionTimeout
	// (30 min); administrators can change it.
	SessionTimeout time.Duration
	// MaxBodyBytes bounds request bodies (1 MiB) but for upload routes
	// (HandleUpload).
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
	// OnEvent, when set, sees every published event, numbered and timed
	// (the fleet plane forwards them); it must not block.
	OnEvent func(Event)
	// MapError turns the errors handlers and tasks return that are not
	// *Error (the device's domain errors) into Redfish errors, naming the
	// resource t a task was about. Nil: they are 500.
	MapError func(err error, t Target) *Error
	// Transport bounds the listener's timeouts and connections
	// (limits.go).
	Transport Transport
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
	c.Transport.Defaults()
}

// InitialPasswordFile is where a generated admin password is written.
const InitialPasswordFile = "initial-admin-password"

// Service is the Redfish protocol: routes with their privileges,
// authentication, sessions and accounts, errors, tasks, events and the
// transport's limits. Create it with New, register the resources'
// routes with Handle, then Start it; serve Handler and Close it when done.
type Service struct {
	cfg   Config
	log   *slog.Logger
	reg   *Registries
	store *Store
	echo  *echo.Echo
	// handler is echo behind the transport's guards (limits.go).
	handler http.Handler
	conns   *connTracker          // the listeners' connection caps (limits.go)
	paths   map[string]*pathEntry // by route pattern
	// uploads are the upload routes' body bounds (HandleUpload).
	uploads map[string]int64
	// routeErrs collects registration mistakes for Start to report.
	routeErrs []error

	auth    *Authenticator
	tasks   *taskEngine
	bus     *bus
	metrics *metrics

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

// New opens the accounts database (creating the admin account on
// first start) and builds the router, ready for the resources' routes.
func New(cfg Config) (*Service, error) {
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
	s := &Service{
		cfg: cfg, log: cfg.Logger, reg: reg,
		paths: map[string]*pathEntry{}, uploads: map[string]int64{}, ctx: ctx, cancel: cancel,
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
	s.buildRouter()
	for _, register := range []func(){s.sessionRoutes, s.taskRoutes, s.eventRoutes, s.metricsRoutes} {
		register()
	}
	ok = true
	return s, nil
}

// Start reports the routes' registration mistakes, puts the transport's
// guards in front of the router and starts the event pushers. On error
// the caller Closes the service.
func (s *Service) Start() error {
	if len(s.routeErrs) > 0 {
		return errors.Join(s.routeErrs...)
	}
	if err := s.metrics.registerServerGauges(s); err != nil {
		return err
	}
	s.handler = s.transport(s.echo)
	s.conns = newConnTracker(s.cfg.Transport, s.log)
	for _, c := range s.conns.collectors() {
		if err := s.metrics.reg.Register(c); err != nil {
			return err
		}
	}
	s.startFeeders()
	return nil
}

// RouteError records a resource's registration failure for Start to
// report.
func (s *Service) RouteError(err error) { s.routeErrs = append(s.routeErrs, err) }

// Store is the accounts database: accounts, settings, logs and
// subscriptions.
func (s *Service) Store() *Store { return s.store }

// Auth is the service's authenticator: sessions, lockout and the
// password policy.
func (s *Service) Auth() *Authenticator { return s.auth }

// UUID is the service's stable UUID (ServiceRoot.UUID).
func (s *Service) UUID() string { return s.uuid }

// Context ends when the service closes: background work uses it.
func (s *Service) Context() context.Context { return s.ctx }

// Go runs f in the background; Close waits for it after ending Context.
func (s *Service) Go(f func()) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		f()
	}()
}

// Handler is the service as an http.Handler, with the transport's
// deadlines and HSTS but without the connection caps of ServeListener.
func (s *Service) Handler() http.Handler { return s.handler }

// Registries returns the message registries the service resolves with.
func (s *Service) Registries() *Registries { return s.reg }

// CredentialsNote says where the admin credentials come from, for the
// daemon's start-up lines.
func (s *Service) CredentialsNote() string { return s.credNote }

// Close stops background work and event streams and closes the accounts
// database. In-flight tasks are cancelled.
func (s *Service) Close() error {
	s.closeOnce.Do(func() {
		s.StopStreams()
		s.cancel()
		s.bg.Wait()
		s.closeErr = s.store.close()
	})
	return s.closeErr
}

// stop ends event streams and the background work's context; Close
// does it too, and then waits for that work.
func (s *Service) Stop() {
	s.StopStreams()
	s.cancel()
}

func (s *Service) StopStreams() { s.stopOnce.Do(func() { close(s.streams) }) }

func (s *Service) now() time.Time { return s.cfg.Clock().UTC() }

// Settings keys in the accounts database.
const (
	settingUUID             = "service_uuid"
	SettingSessionTimeout   = "session_timeout_seconds"
	SettingLockoutThreshold = "lockout_threshold"
	SettingLockoutDuration  = "lockout_duration_seconds"
	// The password length policy (password.go).
	SettingMinPasswordLength = "min_password_length"
	SettingMaxPasswordLength = "max_password_length"
)

// initSettings gives the service a stable UUID and seeds the PATCHable
// policies from Config on first start.
func (s *Service) initSettings(ctx context.Context) error {
	u, err := s.store.Setting(ctx, settingUUID, "")
	if err != nil {
		return fmt.Errorf("api: %w", err)
	}
	seed := map[string]string{}
	if u == "" {
		u = newUUID()
		seed[settingUUID] = u
		seed[SettingSessionTimeout] = strconv.Itoa(int(s.cfg.SessionTimeout / time.Second))
		seed[SettingLockoutThreshold] = strconv.Itoa(max(s.cfg.Lockout.Threshold, 0))
		seed[SettingLockoutDuration] = strconv.Itoa(int(s.cfg.Lockout.Duration / time.Second))
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
func (s *Service) ensureAdmin(ctx context.Context) error {
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
	} else if err := defaultPasswordPolicy().Check("admin", pw); err != nil {
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
