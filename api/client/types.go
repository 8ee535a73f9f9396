package client

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// URIs of cxlpool's resource model (shared/specs/redfish-model.md). They
// are fixed by the model, so the client needs no discovery walk to find
// them; ServiceRoot links lead to the same places.
const (
	ServiceRootURI  = "/redfish/v1"
	SessionsURI     = ServiceRootURI + "/SessionService/Sessions"
	AccountsURI     = ServiceRootURI + "/AccountService/Accounts"
	RolesURI        = ServiceRootURI + "/AccountService/Roles"
	EventServiceURI = ServiceRootURI + "/EventService"
	ChassisURI      = ServiceRootURI + "/Chassis/Pool"
	DCDURI          = ChassisURI + "/PCIeDevices/DCD"
	MemoryDomainURI = ChassisURI + "/MemoryDomains/Pool"
	ChunksURI       = MemoryDomainURI + "/MemoryChunks"
	FabricURI       = ServiceRootURI + "/Fabrics/CXL"
	EndpointsURI    = FabricURI + "/Endpoints"
	ZonesURI        = FabricURI + "/Zones"
	ConnectionsURI  = FabricURI + "/Connections"
	SystemsURI      = ServiceRootURI + "/Systems"
)

// Link is a navigation property.
type Link struct {
	ODataID string `json:"@odata.id"`
}

// Links builds navigation properties.
func Links(uris ...string) []Link {
	out := make([]Link, len(uris))
	for i, u := range uris {
		out[i] = Link{ODataID: u}
	}
	return out
}

// Status is the common Resource.Status.
type Status struct {
	State  string `json:"State,omitempty"`
	Health string `json:"Health,omitempty"`
}

// Resource holds the properties every resource has.
type Resource struct {
	ODataID   string `json:"@odata.id,omitempty"`
	ODataType string `json:"@odata.type,omitempty"`
	ID        string `json:"Id,omitempty"`
	Name      string `json:"Name,omitempty"`
}

// Session is a Redfish login session.
type Session struct {
	Resource
	UserName    string `json:"UserName"`
	CreatedTime string `json:"CreatedTime"`
}

// Account is a ManagerAccount. Host accounts name their ComputerSystem in
// Oem.CxlPool.SystemId.
type Account struct {
	Resource
	UserName string     `json:"UserName"`
	RoleID   string     `json:"RoleId"`
	Enabled  bool       `json:"Enabled"`
	Locked   bool       `json:"Locked"`
	Oem      AccountOem `json:"Oem"`
}

// AccountOem is ManagerAccount.Oem.
type AccountOem struct {
	CxlPool *struct {
		SystemID string `json:"SystemId"`
	} `json:"CxlPool,omitempty"`
}

// SystemID is the ComputerSystem Id a host account is bound to ("" for
// other accounts).
func (a Account) SystemID() string {
	if a.Oem.CxlPool == nil {
		return ""
	}
	return a.Oem.CxlPool.SystemID
}

// Task is a TaskService Task.
type Task struct {
	Resource
	TaskState       string    `json:"TaskState"`
	TaskStatus      string    `json:"TaskStatus"`
	PercentComplete int       `json:"PercentComplete"`
	TaskMonitor     string    `json:"TaskMonitor"`
	StartTime       string    `json:"StartTime"`
	EndTime         string    `json:"EndTime"`
	Messages        []Message `json:"Messages"`
}

// Event is one Redfish Event as an SSE stream or a push delivers it.
type Event struct {
	Resource
	Context string        `json:"Context,omitempty"`
	Events  []EventRecord `json:"Events"`
}

// EventRecord is one record of an Event.
type EventRecord struct {
	EventID         string   `json:"EventId"`
	EventType       string   `json:"EventType"`
	EventTimestamp  string   `json:"EventTimestamp"`
	MessageID       string   `json:"MessageId"`
	Message         string   `json:"Message"`
	MessageArgs     []string `json:"MessageArgs"`
	MessageSeverity string   `json:"MessageSeverity"`
	// Resolution is what to do about the event, where the service says
	// (lost capacity, exports not restored).
	Resolution        string `json:"Resolution,omitempty"`
	OriginOfCondition *Link  `json:"OriginOfCondition,omitempty"`
}

// Origin is the record's OriginOfCondition URI ("" if none).
func (r EventRecord) Origin() string {
	if r.OriginOfCondition == nil {
		return ""
	}
	return r.OriginOfCondition.ODataID
}

// MemoryDomain is the pool's MemoryDomain.
type MemoryDomain struct {
	Resource
	MemorySizeMiB             uint64 `json:"MemorySizeMiB"`
	AllowsMemoryChunkCreation bool   `json:"AllowsMemoryChunkCreation"`
	MinMemoryChunkSizeMiB     uint64 `json:"MinMemoryChunkSizeMiB"`
	MemoryChunkIncrementMiB   uint64 `json:"MemoryChunkIncrementMiB"`
	Status                    Status `json:"Status"`
	Oem                       struct {
		CxlPool *PoolOem `json:"CxlPool,omitempty"`
	} `json:"Oem"`
}

// PoolOem is MemoryDomain.Oem.CxlPool: how the pool is used. The
// pool-wide split is shown to appliance accounts, the quota to host
// accounts; absent values are nil.
type PoolOem struct {
	FreeMiB     uint64  `json:"FreeMiB"`
	ReservedMiB *uint64 `json:"ReservedMiB,omitempty"`
	GrantedMiB  *uint64 `json:"GrantedMiB,omitempty"`
	SharedMiB   *uint64 `json:"SharedMiB,omitempty"`
	OrphanedMiB *uint64 `json:"OrphanedMiB,omitempty"`
	QuotaMiB    *uint64 `json:"QuotaMiB,omitempty"`
	HeldMiB     *uint64 `json:"HeldMiB,omitempty"`
	// StrandedChunks and StrandedMiB are the chunks lost grants left
	// reserved with no host holding them (absent: none).
	StrandedChunks int    `json:"StrandedChunks,omitempty"`
	StrandedMiB    uint64 `json:"StrandedMiB,omitempty"`
	Regions        []struct {
		Region       int    `json:"Region"`
		Sharable     bool   `json:"Sharable"`
		SizeMiB      uint64 `json:"SizeMiB"`
		FreeMiB      uint64 `json:"FreeMiB"`
		BlockSizeMiB uint64 `json:"BlockSizeMiB"`
	} `json:"Regions"`
}

// MemoryChunk is a MemoryChunks resource: a reservation of pool capacity.
type MemoryChunk struct {
	Resource
	DisplayName           string  `json:"DisplayName,omitempty"`
	MemoryChunkSizeMiB    uint64  `json:"MemoryChunkSizeMiB"`
	AddressRangeType      string  `json:"AddressRangeType"`
	AddressRangeOffsetMiB *uint64 `json:"AddressRangeOffsetMiB,omitempty"`
	Status                Status  `json:"Status"`
	Links                 struct {
		Endpoints         []Link `json:"Endpoints"`
		CXLLogicalDevices []Link `json:"CXLLogicalDevices"`
		MemoryRegions     []Link `json:"MemoryRegions"`
	} `json:"Links"`
	Oem struct {
		CxlPool *ChunkOem `json:"CxlPool,omitempty"`
	} `json:"Oem"`
}

// ChunkOem is MemoryChunks.Oem.CxlPool: what the DMTF model has no
// property for.
type ChunkOem struct {
	Sharable bool   `json:"Sharable"`
	Region   *int   `json:"Region,omitempty"`
	Name     string `json:"Name,omitempty"`
	Tag      string `json:"Tag,omitempty"`
	Created  string `json:"Created,omitempty"`
	// Owner is the system of the host account that reserved the chunk.
	Owner  string       `json:"Owner,omitempty"`
	Grants []ChunkGrant `json:"Grants,omitempty"`
	// Stranded: the chunk's grants were lost and no host holds it, so
	// its capacity is neither used nor free; LostGrants says whose.
	Stranded   bool        `json:"Stranded,omitempty"`
	LostGrants []LostGrant `json:"LostGrants,omitempty"`
}

// LostGrant is a grant of a stranded chunk that the device no longer
// holds.
type LostGrant struct {
	Connection string `json:"Connection"`
	SystemID   string `json:"SystemId"`
	Reason     string `json:"Reason"`
	Lost       string `json:"Lost"`
}

// ChunkGrant is one host's grant of a chunk.
type ChunkGrant struct {
	Connection Link   `json:"Connection"`
	SystemID   string `json:"SystemId"`
	State      string `json:"State"`
}

// Connection is a Fabric Connection: a grant of chunks to initiators.
type Connection struct {
	Resource
	ConnectionType  string            `json:"ConnectionType"`
	Status          Status            `json:"Status"`
	MemoryChunkInfo []MemoryChunkInfo `json:"MemoryChunkInfo"`
	Links           struct {
		InitiatorEndpoints []Link `json:"InitiatorEndpoints"`
		TargetEndpoints    []Link `json:"TargetEndpoints"`
	} `json:"Links"`
	Oem struct {
		CxlPool *ConnectionOem `json:"CxlPool,omitempty"`
	} `json:"Oem"`
}

// ConnectionOem is Connection.Oem.CxlPool: the grant behind it.
type ConnectionOem struct {
	GrantState  string `json:"GrantState"`
	GrantedMiB  uint64 `json:"GrantedMiB"`
	ExtentCount int    `json:"ExtentCount"`
	Created     string `json:"Created"`
	// Memory is the host's Memory for the chunk, once granted.
	Memory *Link `json:"Memory,omitempty"`
}

// Chunks are the URIs of the connection's chunks.
func (c Connection) Chunks() []string {
	out := make([]string, 0, len(c.MemoryChunkInfo))
	for _, m := range c.MemoryChunkInfo {
		out = append(out, m.MemoryChunk.ODataID)
	}
	return out
}

// MemoryChunkInfo is one chunk of a Connection.
type MemoryChunkInfo struct {
	AccessCapabilities []string `json:"AccessCapabilities,omitempty"`
	AccessState        string   `json:"AccessState,omitempty"`
	MemoryChunk        Link     `json:"MemoryChunk"`
}

// Endpoint is a Fabric Endpoint: a host's initiator or an LD's target.
type Endpoint struct {
	Resource
	EndpointProtocol  string            `json:"EndpointProtocol"`
	ConnectedEntities []ConnectedEntity `json:"ConnectedEntities"`
	Status            Status            `json:"Status"`
	Links             struct {
		ConnectedPorts []Link `json:"ConnectedPorts"`
		Zones          []Link `json:"Zones"`
		Connections    []Link `json:"Connections"`
	} `json:"Links"`
}

// ConnectedEntity is what an Endpoint stands for.
type ConnectedEntity struct {
	EntityType string `json:"EntityType"`
	EntityRole string `json:"EntityRole"`
	EntityLink *Link  `json:"EntityLink,omitempty"`
}

// System is a ComputerSystem: one attached host.
type System struct {
	Resource
	HostName      string `json:"HostName,omitempty"`
	SystemType    string `json:"SystemType"`
	Status        Status `json:"Status"`
	MemorySummary struct {
		TotalSystemMemoryGiB *float64 `json:"TotalSystemMemoryGiB"`
	} `json:"MemorySummary"`
	Memory *Link `json:"Memory,omitempty"`
	Links  struct {
		Endpoints []Link `json:"Endpoints"`
	} `json:"Links"`
	Oem struct {
		CxlPool *SystemOem `json:"CxlPool,omitempty"`
	} `json:"Oem"`
}

// SystemOem is ComputerSystem.Oem.CxlPool: the host's head and share of
// the pool. QuotaMiB 0 means no limit.
type SystemOem struct {
	LinkUp        bool   `json:"LinkUp"`
	Port          int    `json:"Port"`
	QuotaMiB      uint64 `json:"QuotaMiB"`
	GrantedMiB    uint64 `json:"GrantedMiB"`
	LogicalDevice *Link  `json:"LogicalDevice,omitempty"`
	// HostAgent is the host's agent as the box last heard from it;
	// Shares the shares the host may create or join (hosts.go).
	HostAgent *HostAgent `json:"HostAgent,omitempty"`
	Shares    []string   `json:"Shares,omitempty"`
}

// Memory is a ComputerSystem's Memory: a logical device backed by chunks.
type Memory struct {
	Resource
	MemoryDeviceType string `json:"MemoryDeviceType"`
	CapacityMiB      uint64 `json:"CapacityMiB"`
	Status           Status `json:"Status"`
	Links            struct {
		MemoryMediaSources       []Link `json:"MemoryMediaSources"`
		MemoryRegionMediaSources []Link `json:"MemoryRegionMediaSources"`
	} `json:"Links"`
	Oem struct {
		CxlPool *MemoryOem `json:"CxlPool,omitempty"`
	} `json:"Oem"`
}

// MemoryRegion is a DC region as one LD sees it, with its extents.
type MemoryRegion struct {
	Resource
	RegionNumber        int            `json:"RegionNumber"`
	RegionBaseOffsetMiB uint64         `json:"RegionBaseOffsetMiB"`
	RegionSizeMiB       uint64         `json:"RegionSizeMiB"`
	BlockSizeMiB        uint64         `json:"BlockSizeMiB"`
	ShareableRegion     bool           `json:"ShareableRegion"`
	MemoryExtents       []MemoryExtent `json:"MemoryExtents"`
}

// MemoryExtent is one extent of a MemoryRegion, its offset relative to
// the region's base.
type MemoryExtent struct {
	ExtentOffsetMiB uint64 `json:"ExtentOffsetMiB"`
	ExtentSizeMiB   uint64 `json:"ExtentSizeMiB"`
	Tag             string `json:"Tag,omitempty"`
	SequenceNumber  int    `json:"SequenceNumber,omitempty"`
}

// PCIeDevice is the DCD.
type PCIeDevice struct {
	Resource
	Manufacturer    string `json:"Manufacturer"`
	Model           string `json:"Model"`
	SerialNumber    string `json:"SerialNumber"`
	FirmwareVersion string `json:"FirmwareVersion"`
	Status          Status `json:"Status"`
	CXLDevice       *struct {
		DeviceType string `json:"DeviceType"`
	} `json:"CXLDevice,omitempty"`
}

// collectionPage is one page of a resource collection.
type collectionPage struct {
	Members  []json.RawMessage `json:"Members"`
	Count    int               `json:"Members@odata.count"`
	NextLink string            `json:"Members@odata.nextLink"`
}

// maxPages bounds how many nextLinks List follows, against a service
// that links a page to itself.
const maxPages = 1000

// List returns every member of the collection at uri as T: it follows
// Members@odata.nextLink and fetches members the collection gives only as
// links (it asks for $expand when the service advertises it).
func List[T any](ctx context.Context, c *Client, uri string) ([]T, error) {
	var out []T
	next := uri
	if c.canExpand(ctx) {
		next = withQuery(uri, "$expand=.")
	}
	for pages := 0; next != ""; pages++ {
		if pages == maxPages {
			return nil, fmt.Errorf("client: collection %s: more than %d pages", uri, maxPages)
		}
		var page collectionPage
		if err := c.Get(ctx, next, &page); err != nil {
			return nil, err
		}
		for _, raw := range page.Members {
			var link map[string]json.RawMessage
			if err := json.Unmarshal(raw, &link); err != nil {
				return nil, fmt.Errorf("client: collection %s: member: %w", uri, err)
			}
			var v T
			if id, ok := link["@odata.id"]; ok && len(link) == 1 {
				var member string
				if err := json.Unmarshal(id, &member); err != nil {
					return nil, fmt.Errorf("client: collection %s: member link: %w", uri, err)
				}
				if err := c.Get(ctx, member, &v); err != nil {
					return nil, err
				}
			} else if err := json.Unmarshal(raw, &v); err != nil {
				return nil, fmt.Errorf("client: collection %s: member: %w", uri, err)
			}
			out = append(out, v)
		}
		next = page.NextLink
	}
	return out, nil
}

func withQuery(uri, q string) string {
	if strings.Contains(uri, "?") {
		return uri + "&" + q
	}
	return uri + "?" + q
}

// canExpand reports (and remembers) whether the ServiceRoot advertises
// $expand=. (ExpandQuery.NoLinks).
func (c *Client) canExpand(ctx context.Context) bool {
	c.mu.Lock()
	known, ok := c.expand, c.expandKnown
	c.mu.Unlock()
	if known {
		return ok
	}
	var root struct {
		ProtocolFeaturesSupported struct {
			ExpandQuery struct {
				NoLinks bool `json:"NoLinks"`
			} `json:"ExpandQuery"`
		} `json:"ProtocolFeaturesSupported"`
	}
	if err := c.Get(ctx, ServiceRootURI, &root); err != nil {
		return false // not remembered: a later call may succeed
	}
	ok = root.ProtocolFeaturesSupported.ExpandQuery.NoLinks
	c.mu.Lock()
	c.expand, c.expandKnown = ok, true
	c.mu.Unlock()
	return ok
}
