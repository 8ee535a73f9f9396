package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"cxlpool/api"
	"cxlpool/api/redfish"
	"cxlpool/appliance"
	"cxlpool/fleet"
)

// fleetFlags are the fleet plane's flags.
type fleetFlags struct {
	servers, creds, ca, clientListen, clusterListen, routes, secret *string
	cert, key                                                       *string
	ttl, retryMax                                                   *time.Duration
	replicas                                                        *int
}

func addFleetFlags(fs *flag.FlagSet) fleetFlags {
	return fleetFlags{
		servers: fs.String("fleet", "", "fleet plane: empty runs an embedded NATS server with JetStream in the data directory; nats://a,nats://b (or tls://) joins that cluster (needs --fleet-creds); off: no fleet plane"),
		creds:   fs.String("fleet-creds", "", "credentials for an external fleet cluster: a NATS .creds file, an nkey seed or USER:PASSWORD (mode 0600)"),
		ca:      fs.String("fleet-ca", "", "CA bundle verifying the fleet servers' TLS certificates (tls:// URLs)"),
		cert:    fs.String("fleet-cert", "", "the box's client certificate (PEM) for fleet servers that verify clients (with --fleet-key)"),
		key:     fs.String("fleet-key", "", "the key of --fleet-cert (PEM, mode 0600)"),
		clientListen: fs.String("fleet-client-listen", "127.0.0.1:4222",
			"embedded fleet server: client address (loopback unless you mean others to connect; port 0 picks one)"),
		clusterListen: fs.String("fleet-listen", "", "embedded fleet server: form a NATS cluster among boxes, routes listening on this address (needs --fleet-cluster-secret)"),
		routes:        fs.String("fleet-routes", "", "embedded fleet server: the other boxes' route addresses, nats-route://HOST:PORT, comma separated"),
		secret:        fs.String("fleet-cluster-secret", "", "file with the secret every box of the cluster shares (routes authenticate with it; mode 0600)"),
		ttl:           fs.Duration("fleet-ttl", 30*time.Second, "how long the box's inventory record outlives its last heartbeat (heartbeats every third of it)"),
		replicas:      fs.Int("fleet-replicas", 1, "replicas of the fleet's bucket and streams (3 on a three-node cluster)"),
		retryMax:      fs.Duration("fleet-retry-max", 30*time.Second, "the box joins the fleet in the background, retrying with backoff up to this interval"),
	}
}

func (f fleetFlags) config(apiURL string) (appliance.FleetConfig, error) {
	if *f.servers == "off" {
		return appliance.FleetConfig{}, nil
	}
	c := appliance.FleetConfig{Enabled: true, CredsFile: *f.creds, CAFile: *f.ca, CertFile: *f.cert, KeyFile: *f.key, Listen: *f.clientListen,
		ClusterListen: *f.clusterListen, ClusterSecretFile: *f.secret, API: apiURL, TTL: *f.ttl, Replicas: *f.replicas, RetryMax: *f.retryMax}
	if *f.retryMax <= 0 {
		return c, errors.New("--fleet-retry-max: above zero")
	}
	if *f.ttl < 3*time.Second {
		return c, errors.New("--fleet-ttl: at least 3s (the heartbeat is a third of it)")
	}
	if *f.servers != "" {
		for _, u := range strings.Split(*f.servers, ",") {
			if !strings.HasPrefix(u, "nats://") && !strings.HasPrefix(u, "tls://") {
				return c, fmt.Errorf("--fleet: %q: want nats://HOST:PORT or tls://HOST:PORT, comma separated, or off", u)
			}
			c.URLs = append(c.URLs, u)
		}
		if *f.creds == "" {
			return c, errors.New("--fleet: an external cluster needs --fleet-creds (the fleet plane takes no anonymous client)")
		}
		if (*f.cert == "") != (*f.key == "") {
			return c, errors.New("--fleet-cert and --fleet-key go together")
		}
		if *f.key != "" {
			if st, err := os.Stat(*f.key); err != nil {
				return c, fmt.Errorf("--fleet-key: %w", err)
			} else if st.Mode().Perm()&0o077 != 0 {
				return c, fmt.Errorf("--fleet-key: %s is readable by others (mode %#o): chmod 600 it", *f.key, st.Mode().Perm())
			}
		}
		if *f.clusterListen != "" {
			return c, errors.New("--fleet-listen forms a cluster of embedded servers; it does not go with --fleet URLs")
		}
	}
	if *f.servers == "" && (*f.cert != "" || *f.ca != "") {
		return c, errors.New("--fleet-ca, --fleet-cert and --fleet-key are for an external cluster (--fleet tls://...)")
	}
	if *f.routes != "" {
		c.Routes = strings.Split(*f.routes, ",")
	}
	if *f.clusterListen != "" && *f.secret == "" {
		return c, errors.New("--fleet-listen: needs --fleet-cluster-secret (routes are never anonymous)")
	}
	return c, nil
}

// fleetEvents forwards the API's events to the fleet plane once the
// appliance's Start has joined it (the API is built while Start runs; the
// events before are in the EventLog only).
type fleetEvents struct{ svc atomic.Pointer[fleet.Service] }

func (f *fleetEvents) started(app *appliance.Appliance) {
	if app.Fleet != nil {
		f.svc.Store(app.Fleet.Service)
	}
}

func (f *fleetEvents) publish(ev redfish.Event) {
	svc := f.svc.Load()
	if svc == nil {
		return
	}
	var host *uint16
	if ev.Host != nil {
		h := uint16(*ev.Host)
		host = &h
	}
	svc.PublishRedfish(fleet.RedfishEvent{MessageID: ev.MessageKey, Args: ev.Args, Origin: ev.Origin,
		Host: host, Resolution: ev.Resolution, Time: ev.Time})
}

// fleetView is the API's view of the appliance's plane (api.FleetView).
// It reads app.Fleet when asked: the API serves only after Start, which
// sets it.
type fleetView struct{ app *appliance.Appliance }

func (v fleetView) FleetStatus() api.FleetStatus {
	f := v.app.Fleet
	if f == nil { // a build without the embedded server: the plane is off
		return api.FleetStatus{State: api.FleetOff}
	}
	st := f.State()
	return api.FleetStatus{State: st.State, Box: string(st.Box), Servers: st.Servers, Embedded: st.Embedded,
		LastError: st.LastError, Attempts: st.Attempts, Since: st.Since, Next: st.Next, Queued: st.Queued, Dropped: st.Dropped}
}

func (v fleetView) FleetBoxes(ctx context.Context) ([]fleet.Inventory, error) {
	f := v.app.Fleet
	if f == nil || f.Plane() == nil {
		return nil, api.ErrFleetNotJoined
	}
	return f.Plane().Boxes(ctx)
}

// aggregatorFlags register the box with a Redfish aggregator.
type aggregatorFlags struct{ url, creds, boxURL *string }

func addAggregatorFlags(fs *flag.FlagSet) aggregatorFlags {
	return aggregatorFlags{
		url:    fs.String("aggregator", "", "register with this OFMF/Sunfish-style Redfish aggregator (its service root URL; empty: none)"),
		creds:  fs.String("aggregator-creds", "", "file (mode 0600): line 1 USER:PASSWORD for the aggregator, line 2 USER:PASSWORD of the box account the aggregator uses"),
		boxURL: fs.String("aggregator-box-url", "", "this box's service root as the aggregator reaches it (default: from --listen)"),
	}
}

// config reads the flags; nil when no aggregator is named.
func (f aggregatorFlags) config(boxURL string) (*fleet.AggregatorConfig, error) {
	if *f.url == "" {
		return nil, nil
	}
	if *f.creds == "" {
		return nil, errors.New("--aggregator: needs --aggregator-creds")
	}
	st, err := os.Stat(*f.creds)
	if err != nil {
		return nil, fmt.Errorf("--aggregator-creds: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("--aggregator-creds: %s is readable by others (mode %#o): chmod 600 it", *f.creds, st.Mode().Perm())
	}
	b, err := os.ReadFile(*f.creds)
	if err != nil {
		return nil, fmt.Errorf("--aggregator-creds: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var pairs [2][2]string
	for i := range pairs {
		if i >= len(lines) {
			return nil, errors.New("--aggregator-creds: want two lines USER:PASSWORD (the aggregator's, then the box account's)")
		}
		u, p, ok := strings.Cut(strings.TrimSpace(lines[i]), ":")
		if !ok || u == "" || p == "" {
			return nil, fmt.Errorf("--aggregator-creds: line %d: want USER:PASSWORD", i+1)
		}
		pairs[i] = [2]string{u, p}
	}
	if *f.boxURL != "" {
		boxURL = *f.boxURL
	}
	return &fleet.AggregatorConfig{URL: *f.url, User: pairs[0][0], Password: pairs[0][1], BoxURL: boxURL,
		BoxUser: pairs[1][0], BoxPassword: pairs[1][1], Client: &http.Client{Timeout: 30 * time.Second}}, nil
}

// registerAggregator registers in the background, retrying with backoff
// until it succeeds or ctx ends (the aggregator may start after the box).
func registerAggregator(ctx context.Context, cfg *fleet.AggregatorConfig, log *slog.Logger) {
	if cfg == nil {
		return
	}
	go func() {
		wait := time.Second
		for {
			id, err := fleet.Register(ctx, *cfg)
			if err == nil {
				log.Info("registered with the Redfish aggregator", "aggregator", cfg.URL, "source", id)
				return
			}
			log.Warn("registering with the Redfish aggregator; will retry", "aggregator", cfg.URL, "err", err, "retry", wait)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			wait = min(2*wait, 5*time.Minute)
		}
	}()
}
