// Package telemetry serves the TelemetryService (/redfish/v1/TelemetryService):
// the hot pages of the box's CXL Hotness Monitoring Unit as metric
// definitions, report definitions and reports (telemetry.go,
// telemetryreports.go), the CHMU configuration (telemetrypatch.go) and the
// WebSocket stream of heatmap and top-K frames.
package telemetry

import (
	"context"
	"log/slog"
	"time"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
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
}

// Server serves the TelemetryService on the shared Service.
type Server struct {
	*redfish.Service
	cfg   Config
	log   *slog.Logger
	clock func() time.Time
}

// New returns the TelemetryService; Routes registers it.
func New(d pool.Deps, cfg Config) *Server {
	return &Server{Service: d.Service, cfg: cfg, log: d.Logger, clock: d.Clock}
}

// Routes registers the TelemetryService's routes.
func (s *Server) Routes() { s.telemetryRoutes() }

func (s *Server) now() time.Time { return s.clock().UTC() }
