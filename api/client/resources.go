package client

import (
	"context"
	"fmt"
	"net/http"
	"strings"
)

// --- accounts ---

// Accounts lists the accounts the caller may see (all of them for user
// administrators, its own for everyone else).
func (c *Client) Accounts(ctx context.Context) ([]Account, error) {
	return List[Account](ctx, c, AccountsURI)
}

// NewAccount describes an account to create. SystemID binds a host role's
// account to its ComputerSystem ("Host3").
type NewAccount struct {
	UserName, Password, RoleID string
	SystemID                   string
	// PasswordChangeRequired makes Password temporary: the account must
	// set its own before it may do anything else.
	PasswordChangeRequired bool
}

// CreateAccount creates an account.
func (c *Client) CreateAccount(ctx context.Context, a NewAccount) (Account, error) {
	body := map[string]any{"UserName": a.UserName, "Password": a.Password, "RoleId": a.RoleID}
	if a.SystemID != "" {
		body["Oem"] = map[string]any{"CxlPool": map[string]any{"SystemId": a.SystemID}}
	}
	if a.PasswordChangeRequired {
		body["PasswordChangeRequired"] = true
	}
	r, err := c.Post(ctx, AccountsURI, body)
	if err != nil {
		return Account{}, err
	}
	return created[Account](ctx, c, r)
}

// Me returns the caller's own account: the visible account whose
// UserName is the configured user, or the session's.
func (c *Client) Me(ctx context.Context) (Account, error) {
	user := c.cfg.User
	if tok, sess := c.Token(); user == "" && tok != "" {
		var s Session
		if err := c.Get(ctx, sess, &s); err != nil {
			return Account{}, err
		}
		user = s.UserName
	}
	if user == "" {
		return Account{}, fmt.Errorf("client: no user: log in first")
	}
	accts, err := c.Accounts(ctx)
	if err != nil {
		return Account{}, err
	}
	for _, a := range accts {
		if a.UserName == user {
			return a, nil
		}
	}
	return Account{}, fmt.Errorf("client: account %q is not visible to itself", user)
}

// created returns the resource a 201 answered with: its body, or what
// Location points at when the body is empty.
func created[T any](ctx context.Context, c *Client, r *Response) (T, error) {
	var v T
	if len(r.Body) > 0 {
		return v, r.Decode(&v)
	}
	if r.Location() == "" {
		return v, fmt.Errorf("client: %d answer with neither a body nor a Location", r.Status)
	}
	return v, c.Get(ctx, r.Location(), &v)
}

// DeleteAndWait deletes the resource at uri and, if the service answers
// 202, waits for the deletion's task.
func (c *Client) DeleteAndWait(ctx context.Context, uri string, progress func(Task)) error {
	r, err := c.Delete(ctx, uri)
	if err != nil {
		return err
	}
	_, err = c.Settle(ctx, r, progress)
	return err
}

// --- capacity ---

// Pool is the pool's MemoryDomain.
func (c *Client) Pool(ctx context.Context) (MemoryDomain, error) {
	var d MemoryDomain
	return d, c.Get(ctx, MemoryDomainURI, &d)
}

// Chunks lists the chunks the caller may see.
func (c *Client) Chunks(ctx context.Context) ([]MemoryChunk, error) {
	return List[MemoryChunk](ctx, c, ChunksURI)
}

// ChunkRequest describes a chunk to reserve.
type ChunkRequest struct {
	SizeMiB uint64
	// Sharable asks for capacity in a sharable region, so that the chunk
	// can later be connected to several hosts.
	Sharable bool
	// Region asks for one DC region by number (nil: the service picks).
	Region *int
	Name   string
}

// ReserveChunk reserves capacity: POST to the MemoryChunks collection.
func (c *Client) ReserveChunk(ctx context.Context, req ChunkRequest) (MemoryChunk, error) {
	body := map[string]any{"MemoryChunkSizeMiB": req.SizeMiB, "AddressRangeType": "Volatile"}
	oem := map[string]any{}
	if req.Sharable {
		oem["Sharable"] = true
	}
	if req.Region != nil {
		oem["Region"] = *req.Region
	}
	if req.Name != "" {
		oem["Name"] = req.Name
	}
	if len(oem) > 0 {
		body["Oem"] = map[string]any{"CxlPool": oem}
	}
	r, err := c.Post(ctx, ChunksURI, body)
	if err != nil {
		return MemoryChunk{}, err
	}
	r, err = c.Settle(ctx, r, nil)
	if err != nil {
		return MemoryChunk{}, err
	}
	return created[MemoryChunk](ctx, c, r)
}

// Connections lists the connections (grants) the caller may see.
func (c *Client) Connections(ctx context.Context) ([]Connection, error) {
	return List[Connection](ctx, c, ConnectionsURI)
}

// StartConnect asks for chunk to be connected to the initiator endpoints.
// The answer is 201 (granted at once) or 202 with a task monitor in
// Location (the hosts have not answered yet); Settle or Connect finish it.
func (c *Client) StartConnect(ctx context.Context, chunk string, initiators ...string) (*Response, error) {
	body := map[string]any{
		"ConnectionType": "Memory",
		"MemoryChunkInfo": []map[string]any{{
			"MemoryChunk":        Link{ODataID: chunk},
			"AccessCapabilities": []string{"Read", "Write"},
		}},
		"Links": map[string]any{"InitiatorEndpoints": Links(initiators...)},
	}
	return c.Post(ctx, ConnectionsURI, body)
}

// Connect connects chunk to the initiator endpoints and waits until the
// hosts have accepted (or refused: the task's error is returned).
func (c *Client) Connect(ctx context.Context, chunk string, initiators []string, progress func(Task)) (Connection, error) {
	r, err := c.StartConnect(ctx, chunk, initiators...)
	if err != nil {
		return Connection{}, err
	}
	if r, err = c.Settle(ctx, r, progress); err != nil {
		return Connection{}, err
	}
	return created[Connection](ctx, c, r)
}

// Endpoints lists the CXL fabric's endpoints.
func (c *Client) Endpoints(ctx context.Context) ([]Endpoint, error) {
	return List[Endpoint](ctx, c, EndpointsURI)
}

// Initiator finds the initiator endpoint of the ComputerSystem with the
// given Id ("Host0"): an Endpoint whose ConnectedEntities name that system
// (or something under it) in the Initiator role.
func (c *Client) Initiator(ctx context.Context, systemID string) (Endpoint, error) {
	eps, err := c.Endpoints(ctx)
	if err != nil {
		return Endpoint{}, err
	}
	sys := SystemsURI + "/" + systemID
	for _, ep := range eps {
		for _, ce := range ep.ConnectedEntities {
			if ce.EntityRole != "Initiator" && ce.EntityRole != "Both" || ce.EntityLink == nil {
				continue
			}
			if l := ce.EntityLink.ODataID; l == sys || strings.HasPrefix(l, sys+"/") {
				return ep, nil
			}
		}
	}
	return Endpoint{}, fmt.Errorf("client: no initiator endpoint for system %s", systemID)
}

// Systems lists the ComputerSystems (attached hosts) the caller may see.
func (c *Client) Systems(ctx context.Context) ([]System, error) {
	return List[System](ctx, c, SystemsURI)
}

// SystemMemory lists a system's Memory resources.
func (c *Client) SystemMemory(ctx context.Context, sys System) ([]Memory, error) {
	uri := sys.ODataID + "/Memory"
	if sys.Memory != nil && sys.Memory.ODataID != "" {
		uri = sys.Memory.ODataID
	}
	return List[Memory](ctx, c, uri)
}

// DCD is the pool's multi-headed device.
func (c *Client) DCD(ctx context.Context) (PCIeDevice, error) {
	var d PCIeDevice
	return d, c.Get(ctx, DCDURI, &d)
}

// IsNotFound reports whether err is a 404.
func IsNotFound(err error) bool { return StatusOf(err) == http.StatusNotFound }

// FreeStrandedURI is the pool's #CxlPool.FreeStrandedChunks action.
const FreeStrandedURI = MemoryDomainURI + "/Actions/Oem/CxlPool.FreeStrandedChunks"

// FreeStranded frees every chunk that lost grants left stranded, in one
// request, and returns the URIs of the chunks freed.
func (c *Client) FreeStranded(ctx context.Context) ([]string, uint64, error) {
	r, err := c.Post(ctx, FreeStrandedURI, map[string]any{})
	if err != nil {
		return nil, 0, err
	}
	var out struct {
		Oem struct {
			CxlPool struct {
				FreedChunks []Link `json:"FreedChunks"`
				FreedMiB    uint64 `json:"FreedMiB"`
			} `json:"CxlPool"`
		} `json:"Oem"`
	}
	if err := r.Decode(&out); err != nil {
		return nil, 0, err
	}
	uris := make([]string, 0, len(out.Oem.CxlPool.FreedChunks))
	for _, l := range out.Oem.CxlPool.FreedChunks {
		uris = append(uris, l.ODataID)
	}
	return uris, out.Oem.CxlPool.FreedMiB, nil
}
