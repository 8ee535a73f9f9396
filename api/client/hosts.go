package client

import (
	"context"
	"strings"
)

// What host agents (cxlhost) report and the share verbs of host accounts
// (the box's api/hostreports.go).

// HostAgent is ComputerSystem.Oem.CxlPool.HostAgent.
type HostAgent struct {
	State    string `json:"State"` // Reporting, Silent or None
	TagCount int    `json:"TagCount,omitempty"`
	Agent    string `json:"Agent,omitempty"`
}

// MemoryOem is Memory.Oem.CxlPool: the grant and what the host did with it.
type MemoryOem struct {
	Connection  *Link       `json:"Connection,omitempty"`
	ExtentCount int         `json:"ExtentCount"`
	Host        *HostMemory `json:"Host,omitempty"`
}

// HostMemory is Memory.Oem.CxlPool.Host.
type HostMemory struct {
	State    string `json:"State"`
	Accepted bool   `json:"Accepted"`
	Usable   *bool  `json:"Usable,omitempty"`
	InUse    bool   `json:"InUse"`
	Mode     string `json:"Mode,omitempty"`
	Path     string `json:"Path,omitempty"`
	Reported string `json:"Reported,omitempty"`
}

func systemAction(systemID, action string) string {
	return SystemsURI + "/" + systemID + "/Actions/Oem/CxlPool." + action
}

// ReportHost posts a host agent's report (a host/report.Report as JSON)
// for systemID, as that system's HostUser account.
func (c *Client) ReportHost(ctx context.Context, systemID string, report any) error {
	_, err := c.Post(ctx, systemAction(systemID, "HostReport"), report)
	return err
}

// StartAttachShare asks the box to create or join share name for
// systemID; the answer is a task (Settle it) whose result is the
// Connection.
func (c *Client) StartAttachShare(ctx context.Context, systemID, name string, sizeMiB uint64) (*Response, error) {
	return c.Post(ctx, systemAction(systemID, "AttachShare"), map[string]any{"Share": name, "SizeMiB": sizeMiB})
}

// LeaveShare frees share name's chunk once no host holds it (409 while
// one does).
func (c *Client) LeaveShare(ctx context.Context, systemID, name string) error {
	_, err := c.Post(ctx, systemAction(systemID, "LeaveShare"), map[string]any{"Share": name})
	return err
}

// AllowShare allows (or stops allowing) systemID share name
// (administrators and operators).
func (c *Client) AllowShare(ctx context.Context, systemID, name string, allow bool) error {
	_, err := c.Post(ctx, systemAction(systemID, "AllowShare"), map[string]any{"Share": name, "Allow": allow})
	return err
}

// StartForceRelease forces the release of a Connection (administrators
// and operators): the host loses the memory even if a program maps it.
// The answer is a task.
func (c *Client) StartForceRelease(ctx context.Context, connection string) (*Response, error) {
	return c.Post(ctx, strings.TrimSuffix(connection, "/")+"/Actions/Oem/CxlPool.ForceRelease", map[string]any{})
}
