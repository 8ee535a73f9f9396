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
//	/redfish/v1/Chassis/Pool/{ThermalSubsystem,PowerSubsystem,Sensors}/...
//	                                                      api/board
//	/redfish/v1/Managers/FM/{NetworkProtocol,EthernetInterfaces}/...,
//	/redfish/v1/CertificateService/..., the TLS listener  api/manager
//	everything else (still here):
//	  /redfish/v1/Chassis, Chassis/Pool (its LED: headpower.go), PCIeDevices,
//	  CXLLogicalDevices, MemoryRegions, FabricAdapters, MemoryDomains,
//	  MemoryChunks (with stranded.go, defaultquota.go, chunkowners.go),
//	  Fabrics/CXL (endpoints, zones, connections), Fabrics/RDMA (exports.go),
//	  Systems (systems.go, systempatch.go, systemmemory.go, hostreports.go,
//	  the head power Reset: headpower.go), Managers/FM itself (managers.go,
//	  managerpatch.go, managerreset.go, consistency.go), its LogServices
//	  (logs.go) and support bundle (supportbundle.go), UpdateService
//	  (updateservice.go, updatepush.go), AccountService (accounts.go), the
//	  service root, registries and JSON schemas (serviceroot.go,
//	  schemas.go) and the web console (console.go).
//
// Shared by the resource packages and not CXL-free, hence not in redfish,
// is api/internal/pool: the model's URIs (uris.go), the one mapping of the
// domain's errors to Redfish errors, FromDomain (domainerrors.go), and the
// Id and Status helpers. This package is the assembly: Config, Server and
// New (server.go) list every package's registration, in order; aliases.go
// re-exports what the service's clients name (the URIs, FromDomain, the
// dependency interfaces) and forwards, for the files not yet moved, to
// the helpers that now live in the resource packages.
//
// A resource still here registers its routes with Handle from a function
// listed in Server.routes:
//
//	func (s *Server) chunkRoutes() {
//		s.Handle(http.MethodGet, MemoryDomainURI+"/MemoryChunks/:id", redfish.PrivLogin, s.getChunk)
//		s.Handle(http.MethodDelete, MemoryDomainURI+"/MemoryChunks/:id",
//			redfish.PrivConfigureComponents|redfish.PrivHostCapacity, s.deleteChunk)
//	}
//
// The Manager's changes become events in poolevents.go, and the pool's
// hosts become the protocol's hosts with pool.HostRef.
package api
