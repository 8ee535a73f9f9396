package api

import (
	"context"
	"net"

	"cxlpool/api/board"
	"cxlpool/api/internal/pool"
	"cxlpool/api/kvstore"
	"cxlpool/api/manager"
	"cxlpool/api/redfish"
	"cxlpool/api/telemetry"
	"cxlpool/dcd"
	"cxlpool/rdma"
)

// The URIs of the model's resources and the domain errors' mapping live in
// api/internal/pool, which every resource package imports; they are named
// here too for the service's clients (appliance, cmd, webui, tests).
const (
	RDMAFabricURI        = pool.RDMAFabricURI
	RDMAEndpointsURI     = pool.RDMAEndpointsURI
	RDMAConnectionsURI   = pool.RDMAConnectionsURI
	PoolTargetID         = pool.PoolTargetID
	PoolTargetURI        = pool.PoolTargetURI
	ChassisURI           = pool.ChassisURI
	DCDURI               = pool.DCDURI
	MemoryDomainURI      = pool.MemoryDomainURI
	FabricURI            = pool.FabricURI
	SystemsURI           = pool.SystemsURI
	ChassisCollectionURI = pool.ChassisCollectionURI
	PCIeDevicesURI       = pool.PCIeDevicesURI
	LogicalDevicesURI    = pool.LogicalDevicesURI
	MemoryDomainsURI     = pool.MemoryDomainsURI
	ChunksURI            = pool.ChunksURI
	FabricAdaptersURI    = pool.FabricAdaptersURI
	FabricAdapterURI     = pool.FabricAdapterURI
	PortsURI             = pool.PortsURI
	FabricsURI           = pool.FabricsURI
	EndpointsURI         = pool.EndpointsURI
	ZonesURI             = pool.ZonesURI
	ConnectionsURI       = pool.ConnectionsURI
	UpdateServiceURI     = pool.UpdateServiceURI
	FirmwareInventoryURI = pool.FirmwareInventoryURI
)

// ChunkURI is pool.ChunkURI.
func ChunkURI(id dcd.ChunkID) string { return pool.ChunkURI(id) }

// ConnectionURI is pool.ConnectionURI.
func ConnectionURI(id dcd.GrantID) string { return pool.ConnectionURI(id) }

// SystemURI is pool.SystemURI.
func SystemURI(h dcd.HostID) string { return pool.SystemURI(h) }

// SystemMemoryURI is pool.SystemMemoryURI.
func SystemMemoryURI(h dcd.HostID, c dcd.ChunkID) string { return pool.SystemMemoryURI(h, c) }

// LogicalDeviceURI is pool.LogicalDeviceURI.
func LogicalDeviceURI(h dcd.HostID) string { return pool.LogicalDeviceURI(h) }

// MemoryRegionURI is pool.MemoryRegionURI.
func MemoryRegionURI(h dcd.HostID, n int) string { return pool.MemoryRegionURI(h, n) }

// InitiatorURI is pool.InitiatorURI.
func InitiatorURI(h dcd.HostID) string { return pool.InitiatorURI(h) }

// TargetURI is pool.TargetURI.
func TargetURI(h dcd.HostID) string { return pool.TargetURI(h) }

// ZoneURI is pool.ZoneURI.
func ZoneURI(h dcd.HostID) string { return pool.ZoneURI(h) }

// PortURI is pool.PortURI.
func PortURI(port uint8) string { return pool.PortURI(port) }

// SystemID is pool.SystemID.
func SystemID(h dcd.HostID) string { return pool.SystemID(h) }

// ParseSystemID is pool.ParseSystemID.
func ParseSystemID(id string) (dcd.HostID, error) { return pool.ParseSystemID(id) }

// Board is what the service needs of board management (api/board).
type Board = board.Board

// The management computer's network settings and interfaces
// (api/manager).
type (
	NetworkConfig   = manager.NetworkConfig
	NetworkSettings = manager.NetworkSettings
	NetInterface    = manager.NetInterface
)

// SystemInterfaces lists the management computer's network interfaces
// (manager.SystemInterfaces).
func SystemInterfaces() ([]NetInterface, error) { return manager.SystemInterfaces() }

// Telemetry is what the TelemetryService is a view of (api/telemetry).
type Telemetry = telemetry.Telemetry

// The TelemetryService's stream and its tickets (api/telemetry).
const (
	TelemetryStreamURI = telemetry.TelemetryStreamURI
	TelemetryTicketURI = telemetry.TelemetryTicketURI
)

// KVNamespacesURI is the KV namespaces' collection (kvstore).
const KVNamespacesURI = kvstore.KVNamespacesURI

// KVNamespaceURI is one KV namespace.
func KVNamespaceURI(name string) string { return kvstore.KVNamespaceURI(name) }

// ExportURI is pool.ExportURI.
func ExportURI(id rdma.ExportID) string { return pool.ExportURI(id) }

// FromDomain maps an error from the capacity domain (dcd), the board
// (bmc) or the device link (fabric) to its Redfish error: pool.FromDomain,
// the one place where domain sentinels meet HTTP.
func FromDomain(err error, t redfish.Target) *redfish.Error { return pool.FromDomain(err, t) }

// Updater is the box's A/B image slots (api/manager).
type Updater = manager.Updater

// UpdateUploadURI takes multipart image pushes (api/manager).
const UpdateUploadURI = manager.UpdateUploadURI

// Serve serves the API on addr until ctx ends, then shuts down gracefully
// (in-flight requests finish, event streams end). It serves TLS with the
// certificate in DataDir/tls, generating a self-signed ECDSA one on first
// start, unless plainHTTP is set (development and tests). The listener is
// the management computer's (api/manager's tls.go).
func (s *Server) Serve(ctx context.Context, addr string, plainHTTP bool) error {
	return s.mc.Serve(ctx, addr, plainHTTP)
}

// ServeListener is Serve on a listener it takes over (and closes). The
// connections it accepts are held to Config.Transport (redfish/limits.go).
func (s *Server) ServeListener(ctx context.Context, ln net.Listener, plainHTTP bool) error {
	return s.mc.ServeListener(ctx, ln, plainHTTP)
}

// CertPath is the served certificate's file (DataDir/tls/cert.pem).
func (s *Server) CertPath() string { return s.mc.CertPath() }
