package api

import (
	"strconv"

	"cxlpool/dcd"
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
)

// ChunkURI is the MemoryChunks resource of a chunk.
func ChunkURI(id dcd.ChunkID) string {
	return MemoryDomainURI + "/MemoryChunks/" + strconv.FormatInt(int64(id), 10)
}

// ConnectionURI is the Connection resource of a grant.
func ConnectionURI(id dcd.GrantID) string {
	return FabricURI + "/Connections/" + strconv.FormatInt(int64(id), 10)
}

// SystemURI is the ComputerSystem of a host.
func SystemURI(h dcd.HostID) string { return SystemsURI + "/" + SystemID(h) }
