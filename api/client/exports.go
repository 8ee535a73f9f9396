package client

import (
	"context"
	"fmt"
	"strings"
)

// URIs of the RDMA fabric, through which remote racks reach exported pool
// memory (present only when the box can export memory).
const (
	RDMAFabricURI      = ServiceRootURI + "/Fabrics/RDMA"
	RDMAEndpointsURI   = RDMAFabricURI + "/Endpoints"
	RDMAConnectionsURI = RDMAFabricURI + "/Connections"
)

// RDMAFabric is the fabric of exports.
type RDMAFabric struct {
	Resource
	FabricType string `json:"FabricType"`
	Status     Status `json:"Status"`
	Oem        struct {
		CxlPool *struct {
			// Address is the export server's host:port, if one listens.
			Address   string `json:"Address"`
			Transport string `json:"Transport"`
		} `json:"CxlPool,omitempty"`
	} `json:"Oem"`
}

// Address is the export server's address ("" if none listens).
func (f RDMAFabric) Address() string {
	if f.Oem.CxlPool == nil {
		return ""
	}
	return f.Oem.CxlPool.Address
}

// Export is a Connection of the RDMA fabric: a remote client's access to
// a chunk.
type Export struct {
	Resource
	Description     string            `json:"Description"`
	Status          Status            `json:"Status"`
	MemoryChunkInfo []MemoryChunkInfo `json:"MemoryChunkInfo"`
	Links           struct {
		InitiatorEndpoints []Link `json:"InitiatorEndpoints"`
		TargetEndpoints    []Link `json:"TargetEndpoints"`
	} `json:"Links"`
	Oem struct {
		CxlPool *ExportOem `json:"CxlPool,omitempty"`
	} `json:"Oem"`
}

// ExportOem is Export.Oem.CxlPool.
type ExportOem struct {
	Client string `json:"Client"`
	Offset uint64 `json:"Offset"`
	Length uint64 `json:"Length"`
	// Expiry is empty for an export that does not expire.
	Expiry  string `json:"Expiry,omitempty"`
	Created string `json:"Created"`
	// Token is set only in the answer to CreateExport.
	Token   string         `json:"Token,omitempty"`
	Traffic *ExportTraffic `json:"Traffic,omitempty"`
}

// ExportTraffic counts what the export's client did.
type ExportTraffic struct {
	Reads        uint64 `json:"Reads"`
	Writes       uint64 `json:"Writes"`
	Atomics      uint64 `json:"Atomics"`
	BytesRead    uint64 `json:"BytesRead"`
	BytesWritten uint64 `json:"BytesWritten"`
}

// Chunk is the URI of the exported chunk.
func (x Export) Chunk() string {
	if len(x.MemoryChunkInfo) == 0 {
		return ""
	}
	return x.MemoryChunkInfo[0].MemoryChunk.ODataID
}

// Access is "rw", "r" or "w".
func (x Export) Access() string {
	var b strings.Builder
	if len(x.MemoryChunkInfo) > 0 {
		for _, want := range []string{"Read", "Write"} {
			for _, c := range x.MemoryChunkInfo[0].AccessCapabilities {
				if c == want {
					b.WriteByte(strings.ToLower(want)[0])
				}
			}
		}
	}
	return b.String()
}

// ExportRequest describes an export to create.
type ExportRequest struct {
	// Chunk is the chunk's URI; Client names the remote client.
	Chunk, Client string
	ReadOnly      bool
	// Offset and Length select part of the chunk (Length 0: to its end).
	Offset, Length uint64
	// Expiry is an ISO 8601 duration ("PT1H") or a date-time; empty:
	// never.
	Expiry string
}

// RDMA returns the fabric of exports; a 404 (IsNotFound) means the box
// exports no memory.
func (c *Client) RDMA(ctx context.Context) (RDMAFabric, error) {
	var f RDMAFabric
	return f, c.Get(ctx, RDMAFabricURI, &f)
}

// Exports lists the exports.
func (c *Client) Exports(ctx context.Context) ([]Export, error) {
	return List[Export](ctx, c, RDMAConnectionsURI)
}

// CreateExport creates an export. The answer's Oem.CxlPool.Token is the
// export's secret, which the service shows this once.
func (c *Client) CreateExport(ctx context.Context, req ExportRequest) (Export, error) {
	access := []string{"Read", "Write"}
	if req.ReadOnly {
		access = access[:1]
	}
	oem := map[string]any{"Client": req.Client}
	if req.Offset != 0 {
		oem["Offset"] = req.Offset
	}
	if req.Length != 0 {
		oem["Length"] = req.Length
	}
	if req.Expiry != "" {
		oem["Expiry"] = req.Expiry
	}
	body := map[string]any{
		"ConnectionType": "Memory",
		"MemoryChunkInfo": []map[string]any{{
			"MemoryChunk":        Link{ODataID: req.Chunk},
			"AccessCapabilities": access,
		}},
		"Oem": map[string]any{"CxlPool": oem},
	}
	r, err := c.Post(ctx, RDMAConnectionsURI, body)
	if err != nil {
		return Export{}, err
	}
	var x Export
	if err := r.Decode(&x); err != nil {
		return Export{}, err
	}
	if x.Oem.CxlPool == nil || x.Oem.CxlPool.Token == "" {
		return x, fmt.Errorf("client: the service answered the export without its token")
	}
	return x, nil
}

// RevokeExport revokes the export at uri.
func (c *Client) RevokeExport(ctx context.Context, uri string) error {
	_, err := c.Delete(ctx, uri)
	return err
}
