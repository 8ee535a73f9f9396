package pool

import (
	"fmt"
	"strconv"
	"strings"

	"cxlpool/api/redfish"
	"cxlpool/dcd"
	"cxlpool/rdma"
)

// URIs of the capacity resources, shared by their handlers and by the
// events that point at them, so that an event's OriginOfCondition is the
// resource a client can GET.
const (
	ChassisURI      = "/redfish/v1/Chassis/Pool"
	DCDURI          = ChassisURI + "/PCIeDevices/DCD"
	MemoryDomainURI = ChassisURI + "/MemoryDomains/Pool"
	FabricURI       = "/redfish/v1/Fabrics/CXL"
	SystemsURI      = "/redfish/v1/Systems"

	ChassisCollectionURI = "/redfish/v1/Chassis"
	PCIeDevicesURI       = ChassisURI + "/PCIeDevices"
	LogicalDevicesURI    = DCDURI + "/CXLLogicalDevices"
	MemoryDomainsURI     = ChassisURI + "/MemoryDomains"
	ChunksURI            = MemoryDomainURI + "/MemoryChunks"
	FabricAdaptersURI    = ChassisURI + "/FabricAdapters"
	FabricAdapterURI     = FabricAdaptersURI + "/DCD"
	PortsURI             = FabricAdapterURI + "/Ports"
	FabricsURI           = "/redfish/v1/Fabrics"
	EndpointsURI         = FabricURI + "/Endpoints"
	ZonesURI             = FabricURI + "/Zones"
	ConnectionsURI       = FabricURI + "/Connections"
	UpdateServiceURI     = "/redfish/v1/UpdateService"
	FirmwareInventoryURI = UpdateServiceURI + "/FirmwareInventory"
)

// TargetPrefix starts the Id of an LD's target endpoint ("DCD-LD3").
const TargetPrefix = "DCD-LD"

// ChunkURI is the MemoryChunks resource of a chunk.
func ChunkURI(id dcd.ChunkID) string {
	return ChunksURI + "/" + strconv.FormatInt(int64(id), 10)
}

// ConnectionURI is the Connection resource of a grant.
func ConnectionURI(id dcd.GrantID) string {
	return ConnectionsURI + "/" + strconv.FormatInt(int64(id), 10)
}

// SystemURI is the ComputerSystem of a host.
func SystemURI(h dcd.HostID) string { return SystemsURI + "/" + SystemID(h) }

// SystemMemoryURI is the Memory a host sees for a chunk granted to it.
func SystemMemoryURI(h dcd.HostID, c dcd.ChunkID) string {
	return SystemURI(h) + "/Memory/" + strconv.FormatInt(int64(c), 10)
}

// LogicalDeviceURI is the CXLLogicalDevice of a host's LD (Id: the LD-ID).
func LogicalDeviceURI(h dcd.HostID) string {
	return LogicalDevicesURI + "/" + strconv.Itoa(int(h))
}

// MemoryRegionURI is DC region n as seen through a host's LD.
func MemoryRegionURI(h dcd.HostID, n int) string {
	return LogicalDeviceURI(h) + "/MemoryRegions/" + strconv.Itoa(n)
}

// InitiatorURI is a host's initiator Endpoint (Id: its SystemID).
func InitiatorURI(h dcd.HostID) string { return EndpointsURI + "/" + SystemID(h) }

// TargetURI is the target Endpoint of a host's LD ("DCD-LD<LD>").
func TargetURI(h dcd.HostID) string { return EndpointsURI + "/" + TargetPrefix + strconv.Itoa(int(h)) }

// ZoneURI is the zone of a host's initiator and its LD's target.
func ZoneURI(h dcd.HostID) string { return ZonesURI + "/" + SystemID(h) }

// PortURI is the device's host-facing port with the given port number.
func PortURI(port uint8) string { return PortsURI + "/" + strconv.Itoa(int(port)) }

// HostRef is h as the protocol's host of a principal, task or event.
func HostRef(h dcd.HostID) *redfish.HostID {
	r := redfish.HostID(h)
	return &r
}

// SystemID is the ComputerSystem Id of host h (/redfish/v1/Systems/{id}).
// Host-bound accounts name their host by it.
func SystemID(h dcd.HostID) string { return "Host" + strconv.Itoa(int(h)) }

// ParseSystemID is the inverse of SystemID.
func ParseSystemID(id string) (dcd.HostID, error) {
	n, ok := strings.CutPrefix(id, "Host")
	if !ok || n == "" || (len(n) > 1 && n[0] == '0') {
		return 0, fmt.Errorf("system id %q: want Host<LD-ID>", id)
	}
	v, err := strconv.ParseUint(n, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("system id %q: %w", id, err)
	}
	return dcd.HostID(v), nil
}

// URIs of the management computer, which many resources link to.
const (
	ManagersURI = "/redfish/v1/Managers"
	ManagerURI  = ManagersURI + "/FM"
)

// URIs of the RDMA fabric.
const (
	RDMAFabricURI      = "/redfish/v1/Fabrics/RDMA"
	RDMAEndpointsURI   = RDMAFabricURI + "/Endpoints"
	RDMAConnectionsURI = RDMAFabricURI + "/Connections"
	// PoolTargetID is the Id of the fabric's one target endpoint, the
	// box's export server; no remote client may take that name.
	PoolTargetID  = "Pool"
	PoolTargetURI = RDMAEndpointsURI + "/" + PoolTargetID
)

// ExportURI is the Connection of an export.
func ExportURI(id rdma.ExportID) string { return RDMAConnectionsURI + "/" + string(id) }
