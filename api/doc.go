// Package api is cxlpool's management API: the pool's Redfish resources,
// served on the protocol core of package redfish (routes and privileges,
// errors, decoding, queries, ETags, sessions and accounts, tasks, events,
// transport limits), which knows nothing of CXL.
//
// The resources are being split into packages by the part of the model
// they serve, bmcweb-style (redfish is its include/, the resource packages
// its lib/). Each has a Config of its own dependencies, takes the shared
// pool.Deps (the Service, the capacity Manager, logger, clock, and the
// context and WaitGroup of its feeders) in New, and registers its routes,
// each with its privilege, in Routes. Where each URI is served:
//
//	/redfish/v1/TelemetryService/...                      api/telemetry
//	/redfish/v1/Oem/CxlPool/KVNamespaces/...              api/kvstore
//	/redfish/v1/Oem/CxlPool/Fleet/... (and the Manager's fleet Condition)
//	                                                      api/fleetview
//	/redfish/v1/Chassis/Pool/{ThermalSubsystem,PowerSubsystem,Sensors}/...
//	                                                      api/board
//	/redfish/v1/Chassis, Chassis/Pool (its LED), PCIeDevices,
//	CXLLogicalDevices, MemoryRegions, FabricAdapters, MemoryDomains,
//	MemoryChunks, Fabrics/CXL (Endpoints, Zones, Connections),
//	Fabrics/RDMA (the exports), Systems (their memory, patch, host
//	reports, shares and head power Reset)                  api/capacity
//	/redfish/v1/Managers/FM/... (the Manager, its clock, Reset,
//	network, LogServices, support bundle, consistency check),
//	/redfish/v1/UpdateService/..., /redfish/v1/CertificateService/...,
//	the TLS listener                                      api/manager
//	/redfish/v1/AccountService/...                        api/accounts
//	still here, the assembly's own: the service root, registries and
//	JSON schemas (serviceroot.go, schemas.go) and the web console
//	(console.go).
//
// Shared by the resource packages and not CXL-free, hence not in redfish,
// is api/internal/pool: the model's URIs (uris.go), the one mapping of the
// domain's errors to Redfish errors, FromDomain (domainerrors.go), and the
// Id and Status helpers. This package is the assembly: Config, Server and
// New (server.go) list every package's registration, in order; aliases.go
// re-exports what the service's clients name (the URIs, FromDomain, the
// dependency interfaces).
//
// A new resource goes into the package of its part of the model and
// registers its routes from that package's Routes, each with its
// privilege:
//
//	func (s *Server) Routes() {
//		s.Handle(http.MethodGet, pool.ChunksURI+"/:id", redfish.PrivLogin, s.getChunk)
//	}
package api
