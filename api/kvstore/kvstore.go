// Package kvstore serves the box's KV-cache store (package kv) on the
// Redfish service: the OEM KVNamespaces collection and its actions
// (kvnamespaces.go, /redfish/v1/Oem/CxlPool/KVNamespaces) and the store's
// block events on the event service (kvevents.go).
package kvstore

import (
	"context"
	"log/slog"
	"sync"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
	"cxlpool/kv"
)

// Config is the KV resources' own dependencies.
type Config struct {
	// KV is the store's namespaces. Nil: not served.
	KV *kv.Service
	// KVEvents, if set, delivers the store's block events
	// (appliance.SubscribeKVEvents).
	KVEvents func(buf int) (<-chan kv.Event, func())
}

// Server serves the KV resources on the shared Service.
type Server struct {
	*redfish.Service
	cfg Config
	log *slog.Logger
	mgr *dcd.Manager
	ctx context.Context
	bg  *sync.WaitGroup
}

// New returns the KV resources; Routes registers them.
func New(d pool.Deps, cfg Config) *Server {
	return &Server{Service: d.Service, cfg: cfg, log: d.Logger, mgr: d.Manager, ctx: d.Ctx, bg: d.BG}
}

// Routes registers the KV namespaces' routes and starts the event feeder.
func (s *Server) Routes() { s.kvNamespaceRoutes() }
