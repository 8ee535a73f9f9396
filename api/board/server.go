// Package board serves board management on the Redfish service: the
// Chassis's ThermalSubsystem (thermal.go), PowerSubsystem (power.go) and
// Sensors (sensors.go) under /redfish/v1/Chassis/Pool, the management
// computer's own sensors, and the policy loop's alarms as events
// (board.go). The identify LED on the Chassis and the head power of each
// ComputerSystem are served with those resources (api/capacity's headpower.go),
// with HTTPContext for their reads.
package board

import (
	"context"
	"log/slog"
	"sync"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
)

// Config is board management's own dependencies.
type Config struct {
	// Board is the board controller's view (appliance.Board); required.
	Board Board
}

// Server serves the board resources on the shared Service.
type Server struct {
	*redfish.Service
	cfg Config
	log *slog.Logger
	ctx context.Context
	bg  *sync.WaitGroup
}

// New returns the board resources; Routes registers them and FeedAlarms
// starts publishing the alarms.
func New(d pool.Deps, cfg Config) *Server {
	return &Server{Service: d.Service, cfg: cfg, log: d.Logger, ctx: d.Ctx, bg: d.BG}
}

// Routes registers the thermal, power and sensor resources.
func (s *Server) Routes() { s.boardRoutes() }
