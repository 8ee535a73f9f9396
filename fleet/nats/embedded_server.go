//go:build !nofleetserver

package nats

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

const haveServer = true

// startServer runs nats-server in the daemon.
func startServer(cfg EmbeddedConfig, host string, port int, pw string) (*Embedded, error) {
	name := cfg.Name
	if name == "" {
		name = "cxlpool"
	}
	opts := &server.Options{
		ServerName: name, Host: host, Port: port,
		JetStream: true, StoreDir: cfg.Dir, JetStreamMaxMemory: cfg.MaxMemory, JetStreamMaxStore: cfg.MaxStore,
		Username: EmbeddedUser, Password: pw,
		NoSigs: true, MaxPayload: 1 << 20,
		// No HTTP monitoring port, no system account exports beyond the defaults.
		HTTPPort: 0,
	}
	if cfg.ClusterListen != "" {
		if cfg.ClusterSecret == "" {
			return nil, errors.New("fleet/nats: a cluster among boxes needs a shared secret (routes are never anonymous)")
		}
		ch, cp, err := hostPort(cfg.ClusterListen)
		if err != nil {
			return nil, fmt.Errorf("fleet/nats: cluster listen %q: %w", cfg.ClusterListen, err)
		}
		opts.Cluster = server.ClusterOpts{Name: "cxlpool", Host: ch, Port: cp, Username: EmbeddedUser, Password: cfg.ClusterSecret}
		for _, r := range cfg.Routes {
			u, err := url.Parse(r)
			if err != nil || u.Scheme != "nats-route" {
				return nil, fmt.Errorf("fleet/nats: route %q: want nats-route://HOST:PORT", r)
			}
			u.User = url.UserPassword(EmbeddedUser, cfg.ClusterSecret)
			opts.Routes = append(opts.Routes, u)
		}
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("fleet/nats: embedded server: %w", err)
	}
	srv.SetLoggerV2(slogAdapter{cfg.Logger}, false, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("fleet/nats: embedded server on %s did not start within 30s", cfg.Listen)
	}
	return &Embedded{URL: srv.ClientURL(), User: EmbeddedUser, Password: pw, stop: func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}}, nil
}

// slogAdapter routes the server's log lines to slog (notices at debug:
// the server is chatty at start; warnings and errors as they are).
type slogAdapter struct{ log *slog.Logger }

func (a slogAdapter) Noticef(f string, v ...any) {
	a.log.Debug(fmt.Sprintf(f, v...), "component", "nats")
}
func (a slogAdapter) Warnf(f string, v ...any) { a.log.Warn(fmt.Sprintf(f, v...), "component", "nats") }
func (a slogAdapter) Fatalf(f string, v ...any) {
	a.log.Error(fmt.Sprintf(f, v...), "component", "nats")
}
func (a slogAdapter) Errorf(f string, v ...any) {
	a.log.Error(fmt.Sprintf(f, v...), "component", "nats")
}
func (a slogAdapter) Debugf(f string, v ...any) {}
func (a slogAdapter) Tracef(f string, v ...any) {}
