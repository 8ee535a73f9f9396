package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"cxlpool/api"
	"cxlpool/appliance"
	"cxlpool/fleet"
)

// fleetFlags are the fleet plane's flags.
type fleetFlags struct {
	servers, creds, ca, clientListen, clusterListen, routes, secret *string
	ttl                                                             *time.Duration
	replicas                                                        *int
}

func addFleetFlags(fs *flag.FlagSet) fleetFlags {
	return fleetFlags{
		servers: fs.String("fleet", "", "fleet plane: empty runs an embedded NATS server with JetStream in the data directory; nats://a,nats://b (or tls://) joins that cluster (needs --fleet-creds); off: no fleet plane"),
		creds:   fs.String("fleet-creds", "", "credentials for an external fleet cluster: a NATS .creds file, an nkey seed or USER:PASSWORD (mode 0600)"),
		ca:      fs.String("fleet-ca", "", "CA bundle verifying the fleet servers' TLS certificates (tls:// URLs)"),
		clientListen: fs.String("fleet-client-listen", "127.0.0.1:4222",
			"embedded fleet server: client address (loopback unless you mean others to connect; port 0 picks one)"),
		clusterListen: fs.String("fleet-listen", "", "embedded fleet server: form a NATS cluster among boxes, routes listening on this address (needs --fleet-cluster-secret)"),
		routes:        fs.String("fleet-routes", "", "embedded fleet server: the other boxes' route addresses, nats-route://HOST:PORT, comma separated"),
		secret:        fs.String("fleet-cluster-secret", "", "file with the secret every box of the cluster shares (routes authenticate with it; mode 0600)"),
		ttl:           fs.Duration("fleet-ttl", 30*time.Second, "how long the box's inventory record outlives its last heartbeat (heartbeats every third of it)"),
		replicas:      fs.Int("fleet-replicas", 1, "replicas of the fleet's bucket and streams (3 on a three-node cluster)"),
	}
}

func (f fleetFlags) config(apiURL string) (appliance.FleetConfig, error) {
	if *f.servers == "off" {
		return appliance.FleetConfig{}, nil
	}
	c := appliance.FleetConfig{Enabled: true, CredsFile: *f.creds, CAFile: *f.ca, Listen: *f.clientListen,
		ClusterListen: *f.clusterListen, ClusterSecretFile: *f.secret, API: apiURL, TTL: *f.ttl, Replicas: *f.replicas}
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
		if *f.clusterListen != "" {
			return c, errors.New("--fleet-listen forms a cluster of embedded servers; it does not go with --fleet URLs")
		}
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

func (f *fleetEvents) publish(ev api.Event) {
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
