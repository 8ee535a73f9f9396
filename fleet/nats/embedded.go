package nats

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// DefaultListen is the embedded server's client address: loopback only,
// so a single box's plane is reachable from nothing but itself.
const DefaultListen = "127.0.0.1:4222"

// EmbeddedConfig configures the NATS server a box runs in its daemon.
type EmbeddedConfig struct {
	// Dir holds JetStream's files (created 0700), on the data partition
	// so the stream and the bucket survive a restart.
	Dir string
	// Listen is the client address; empty: DefaultListen. Port 0 picks a
	// free one (Embedded.URL says which).
	Listen string
	// Name is the server's name in a cluster (the box id).
	Name string
	// CredsFile holds the credentials clients must give, one line
	// cxlpool:PASSWORD (the USER:PASSWORD form Config.CredsFile reads, so
	// poolctl fleet --creds takes it); generated, mode 0600, on first
	// start. The server accepts no anonymous client even on loopback:
	// other local accounts of the box must not write the fleet's records.
	CredsFile string
	// ClusterListen, when set, lets boxes form a NATS cluster among
	// themselves: the route address others dial (nats-route://), with
	// Routes the peers to dial. Routes authenticate with ClusterSecret.
	ClusterListen string
	Routes        []string
	ClusterSecret string
	Logger        *slog.Logger
	// MaxMemory and MaxStore bound JetStream (bytes); 0: 8 MiB and 1 GiB,
	// so that the embedded server fits an idle box's memory budget.
	MaxMemory, MaxStore int64
}

// Embedded is a running embedded server.
type Embedded struct {
	URL      string
	User     string
	Password string
	stop     func()
}

// ErrNoEmbedded: this build has no embedded server (-tags nofleetserver,
// for an image that must stay small); the box joins an external cluster
// with --fleet or runs without the plane.
var ErrNoEmbedded = errors.New("this build has no embedded fleet server (built with -tags nofleetserver)")

// HaveEmbedded says whether this build has the embedded server.
const HaveEmbedded = haveServer

// EmbeddedUser is the account the daemon's own client uses.
const EmbeddedUser = "cxlpool"

// StartEmbedded starts the server and waits until it takes connections.
func StartEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	if !haveServer {
		return nil, fmt.Errorf("fleet/nats: %w", ErrNoEmbedded)
	}
	if cfg.Dir == "" || cfg.CredsFile == "" {
		return nil, errors.New("fleet/nats: the embedded server needs a directory and a credentials file")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.MaxMemory == 0 {
		cfg.MaxMemory = 8 << 20
	}
	if cfg.MaxStore == 0 {
		cfg.MaxStore = 1 << 30
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("fleet/nats: %w", err)
	}
	pw, err := loadOrCreateCreds(cfg.CredsFile)
	if err != nil {
		return nil, err
	}
	host, port, err := hostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("fleet/nats: listen %q: %w", cfg.Listen, err)
	}
	// The server only logs a client port it cannot open and then never
	// becomes ready: try the port first so that a second daemon on the
	// same machine fails at once, saying why.
	if port > 0 {
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return nil, fmt.Errorf("fleet/nats: embedded server: %w (another daemon's? give --fleet-client-listen another port)", err)
		}
		l.Close()
	}
	return startServer(cfg, host, port, pw)
}

// Close stops the server.
func (e *Embedded) Close() error {
	e.stop()
	return nil
}

// hostPort splits a listen address; port 0 becomes NATS's random port.
func hostPort(addr string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 0 || n > 65535 {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	if n == 0 {
		n = -1 // the server's RANDOM_PORT
	}
	return h, n, nil
}

// loadOrCreateCreds reads the credentials file's password or creates
// the file with 32 random bytes (hex) as EmbeddedUser's password, mode 0600.
func loadOrCreateCreds(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		user, pw, ok := strings.Cut(strings.TrimSpace(string(b)), ":")
		if !ok || user != EmbeddedUser || pw == "" {
			return "", fmt.Errorf("fleet/nats: %s: want one line %s:PASSWORD", path, EmbeddedUser)
		}
		return pw, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("fleet/nats: %w", err)
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("fleet/nats: %w", err)
	}
	s := hex.EncodeToString(raw[:])
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("fleet/nats: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(EmbeddedUser+":"+s+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("fleet/nats: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("fleet/nats: %w", err)
	}
	return s, nil
}
