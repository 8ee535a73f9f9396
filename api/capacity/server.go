// Package capacity serves the pool's capacity and its fabric: the Chassis
// (chassis.go, its LED and the heads' power: headpower.go), PCIeDevices,
// CXLLogicalDevices, MemoryRegions, FabricAdapters, MemoryDomains and
// MemoryChunks (with stranded.go, defaultquota.go, chunkowners.go),
// Fabrics/CXL (fabrics.go, endpoints.go, zones.go, connections.go),
// Fabrics/RDMA (exports.go), the management computer's own CXL devices
// (localcxl.go) and the Systems (systems.go, systempatch.go,
// systemmemory.go, hostreports.go). They are views of one cached snapshot
// of the pool (capacity.go); the Manager's changes become events
// (poolevents.go) and the pool's gauges are scraped from it
// (poolmetrics.go). Board management itself is api/board, wired here
// because the LED and head power hang on the pool's resources.
package capacity

import (
	"context"
	"log/slog"
	"net"
	"sync"

	"cxlpool/api/board"
	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
	"cxlpool/fabric"
	"cxlpool/fabric/linuxcxl"
	"cxlpool/host/report"
	"cxlpool/host/share"
	"cxlpool/rdma"
)

// Config is the capacity resources' own dependencies (the Manager comes
// in pool.Deps).
type Config struct {
	// Device is the link to the device the Manager drives, for the reads
	// the Manager does not offer (per-LD extent lists, shown by
	// MemoryRegion). Optional: without it MemoryExtents come from the
	// ledger's record of what each host accepted.
	Device fabric.Device
	// DataDir holds shares.json.
	DataDir string
	// Exports serves pool memory to remote racks: the Fabrics/RDMA
	// resources (exports.go). Nil: no exports and no RDMA fabric.
	Exports *rdma.Service
	// ExportAddr is the export server's address, shown to clients (nil:
	// no export server listens).
	ExportAddr net.Addr
	// ExportVerbs says the RDMA verbs transport serves the exports too:
	// the fabric is then RoCEv2 rather than TCP.
	ExportVerbs bool
	// Board is board management (api/board, headpower.go). Nil: neither
	// it nor the LED and head power are served.
	Board board.Board
	// LocalCXL lists the CXL memory devices the Linux driver bound on the
	// management computer (localcxl.go). Nil: none are shown.
	LocalCXL func() ([]linuxcxl.MemDev, error)
	// HostReports and Shares are the host agents' reports and the share
	// allowances (hostreports.go). Nil: a store of the package's own, and
	// DataDir/shares.json.
	HostReports *report.Store
	Shares      *share.Policy
}

// Server serves the capacity resources on the shared Service.
type Server struct {
	*redfish.Service
	cfg      Config
	log      *slog.Logger
	mgr      *dcd.Manager
	capacity *capacity       // the resources' shared state (capacity.go)
	owners   chunkOwnerTable // who reserved which chunk (chunkowners.go)

	ctx  context.Context // the Service's: ends at Close
	bg   *sync.WaitGroup // the assembly's: Close waits for it
	deps pool.Deps
}

// New returns the capacity resources; Routes registers them and
// StartFeeders starts their events once the Service has started.
func New(d pool.Deps, cfg Config) *Server {
	return &Server{Service: d.Service, cfg: cfg, log: d.Logger, mgr: d.Manager, ctx: d.Ctx, bg: d.BG, deps: d,
		owners: chunkOwnerTable{db: d.Service.Store().DB(), clock: d.Clock}}
}

// Routes prepares the shared state and registers every capacity resource,
// each with its privilege. Without a Manager there is no pool and none is
// served.
func (s *Server) Routes() {
	for _, register := range []func(){
		s.capacitySetup,
		s.chassisRoutes,
		s.pcieDeviceRoutes,
		s.localCXLRoutes,
		s.logicalDeviceRoutes,
		s.memoryRegionRoutes,
		s.fabricAdapterRoutes,
		s.memoryDomainRoutes,
		s.defaultQuotaRoutes,
		s.memoryChunkRoutes,
		s.fabricRoutes,
		s.endpointRoutes,
		s.zoneRoutes,
		s.connectionRoutes,
		s.exportRoutes,
		s.systemRoutes,
		s.systemPatchRoutes,
		s.systemMemoryRoutes,
		s.boardRoutes,
	} {
		register()
	}
}

// Serving says the pool's resources are served (there is a Manager and
// its state could be read), for the resources that hang on them
// (UpdateService).
func (s *Server) Serving() bool { return s.capacity != nil }

// StartFeeders announces the grants lost before the start and turns the
// Manager's changes into events until the Service stops.
func (s *Server) StartFeeders() { s.startFeeders() }

// ActiveGrants are the pool's active grants (the TelemetryService's
// layout).
func (s *Server) ActiveGrants(ctx context.Context) ([]dcd.Grant, error) { return s.activeGrants(ctx) }

// ExportView is the export service as the consistency checker sees it; a
// nil *rdma.Service stays a nil interface.
func (s *Server) ExportView() dcd.ExportView {
	if s.cfg.Exports == nil {
		return nil
	}
	return s.cfg.Exports
}
