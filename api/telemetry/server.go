// Package telemetry serves the TelemetryService (/redfish/v1/TelemetryService):
// the hot pages of the box's CXL Hotness Monitoring Unit as metric
// definitions, report definitions and reports (telemetry.go,
// telemetryreports.go), the CHMU configuration (telemetrypatch.go), the
// WebSocket stream of heatmap and top-K frames, and the box's history as
// MetricReports (metrichistory.go) with its alerts as Triggers
// (triggers.go).
package telemetry

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
	"cxlpool/history"
)

// Config is the TelemetryService's own dependencies.
type Config struct {
	// Telemetry is the CHMU pipeline. Nil: the service shows itself
	// disabled.
	Telemetry Telemetry
	// Grants are the pool's active grants, which say what memory
	// resource holds a hot unit. Nil (no capacity view): reports link the
	// MemoryDomain.
	Grants func(ctx context.Context) ([]dcd.Grant, error)
	// History is the box's downsampled history and alerts
	// (metrichistory.go, triggers.go). Nil: neither is served.
	History *history.Service
}

// Server serves the TelemetryService on the shared Service.
type Server struct {
	*redfish.Service
	cfg   Config
	log   *slog.Logger
	clock func() time.Time
	ctx   context.Context // ends when the service stops: the alert feed's
	bg    *sync.WaitGroup // the assembly's Close waits for the feed
}

// New returns the TelemetryService; Routes registers it.
func New(d pool.Deps, cfg Config) *Server {
	return &Server{Service: d.Service, cfg: cfg, log: d.Logger, clock: d.Clock, ctx: d.Ctx, bg: d.BG}
}

// Routes registers the TelemetryService's routes.
func (s *Server) Routes() {
	s.telemetryRoutes()
	s.triggerRoutes() // triggers.go
}

func (s *Server) now() time.Time { return s.clock().UTC() }
