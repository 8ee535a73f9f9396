package appliance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"cxlpool/fleet"
	fleetnats "cxlpool/fleet/nats"
)

// FleetConfig says how the box joins the fleet plane (fleet, fleet/nats).
type FleetConfig struct {
	// Enabled turns the plane on. With no URLs the daemon runs an
	// embedded NATS server with JetStream in DATA/fleet (loopback only
	// unless Listen says otherwise); with URLs it joins that cluster.
	Enabled bool
	URLs    []string
	// CredsFile and CAFile authenticate to an external cluster
	// (fleet/nats.Config); no anonymous access.
	CredsFile, CAFile string
	// Listen is the embedded server's client address (default
	// 127.0.0.1:4222); ClusterListen and Routes form a cluster among
	// boxes' embedded servers, authenticated by ClusterSecretFile.
	Listen, ClusterListen string
	Routes                []string
	ClusterSecretFile     string
	// API is the box's Redfish root URL in its record.
	API string
	// TTL is the record's life after the box's last write (default 30 s);
	// the heartbeat rewrites it every TTL/3.
	TTL      time.Duration
	Replicas int
}

// FleetCredsFile, in the data directory, holds the embedded server's
// credentials (USER:PASSWORD, mode 0600): poolctl fleet --creds reads it.
const FleetCredsFile = "fleet.creds"

// Fleet is the running plane: the connection, the publisher, and the
// embedded server when the box runs one.
type Fleet struct {
	Plane    *fleetnats.Plane
	Service  *fleet.Service
	Embedded *fleetnats.Embedded
}

// startFleet starts the plane once the Manager knows the device (the
// box's identity is its serial). A plane that cannot start fails Start:
// a box asked to be in a fleet must not silently stay out of it.
func (a *Appliance) startFleet(ctx context.Context) error {
	fc := a.cfg.Fleet
	if !fc.Enabled {
		return nil
	}
	log := a.cfg.Logger.With("component", "fleet")
	box := fleet.BoxIDFromSerial(a.Manager.Box().Identity.Serial)
	f := &Fleet{}
	pcfg := fleetnats.Config{URLs: fc.URLs, CredsFile: fc.CredsFile, CAFile: fc.CAFile, Name: string(box),
		TTL: fc.TTL, Replicas: fc.Replicas, Logger: log}
	if len(fc.URLs) == 0 {
		ecfg := fleetnats.EmbeddedConfig{Dir: filepath.Join(a.cfg.DataDir, "fleet"), Listen: fc.Listen, Name: string(box),
			CredsFile:     filepath.Join(a.cfg.DataDir, FleetCredsFile),
			ClusterListen: fc.ClusterListen, Routes: fc.Routes, Logger: log}
		if fc.ClusterListen != "" {
			if fc.ClusterSecretFile == "" {
				return fmt.Errorf("appliance: fleet: a cluster among boxes needs a shared secret file")
			}
			s, err := readSecret(fc.ClusterSecretFile)
			if err != nil {
				return fmt.Errorf("appliance: fleet: %w", err)
			}
			ecfg.ClusterSecret = s
		}
		emb, err := fleetnats.StartEmbedded(ecfg)
		if errors.Is(err, fleetnats.ErrNoEmbedded) {
			// A build for a small image: it has no server to run, so
			// the box stays out of the fleet unless --fleet names one.
			log.Warn("fleet plane off: this build has no embedded server; join a cluster with --fleet", "err", err)
			return nil
		}
		if err != nil {
			return fmt.Errorf("appliance: fleet: %w", err)
		}
		f.Embedded = emb
		a.closers = append(a.closers, emb.Close)
		pcfg.URLs, pcfg.User, pcfg.Password = []string{emb.URL}, emb.User, emb.Password
	}
	p, err := fleetnats.Connect(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("appliance: fleet: %w", err)
	}
	f.Plane = p
	a.closers = append(a.closers, p.Close)
	ttl := fc.TTL
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	svc, err := fleet.NewService(fleet.Config{Manager: a.Manager, Plane: p, Logger: log, Clock: a.cfg.Clock,
		API: fc.API, Heartbeat: ttl / 3, Export: func() string {
			if a.ExportAddr == nil {
				return ""
			}
			return "tcp://" + a.ExportAddr.String()
		}})
	if err != nil {
		return fmt.Errorf("appliance: fleet: %w", err)
	}
	f.Service = svc
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); svc.Run(rctx) }()
	a.closers = append(a.closers, func() error { cancel(); <-done; return nil })
	a.Fleet = f
	// The KV store's block events go on the plane from now on (kv.go),
	// after the state the index holds (Cleared, then Stored: a router
	// that followed this box before learns what is there now). Closers
	// run in reverse: publishing stops before the plane closes.
	a.kvEv.setPublisher(p.NewKVEvents(a.Manager.Box().Identity.Serial))
	a.closers = append(a.closers, func() error { a.kvEv.setPublisher(nil); return nil })
	a.KV.Ix.Resync()
	log.Info("fleet plane up", "box", box, "servers", pcfg.URLs, "embedded", f.Embedded != nil)
	return nil
}

// readSecret reads a shared secret file that only its owner may read.
func readSecret(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s is readable by others (mode %#o): chmod 600 it", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}

// URLs says where the plane is, for people: the servers, and whether
// the box runs them.
func (f *Fleet) URLs() string {
	s := f.Plane.Conn().ConnectedUrlRedacted()
	if f.Embedded != nil {
		s += " (embedded)"
	}
	return s
}
