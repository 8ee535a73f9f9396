//go:build !verbs || !cgo || !linux

package verbs

import (
	"context"

	"cxlpool/rdma"
	"cxlpool/rdma/client"
)

// Devices lists the RDMA devices.
func Devices() ([]string, error) { return nil, ErrNotBuilt }

// Server serves OpConnect on the TCP control channel.
type Server struct{}

// NewServer opens the device.
func NewServer(Config) (*Server, error) { return nil, ErrNotBuilt }

// Request implements tcp.Extension.
func (*Server) Request(context.Context, *rdma.Handle, []byte) ([]byte, error) {
	return nil, ErrNotBuilt
}

// Registered is the number of exports registered with the device.
func (*Server) Registered() int { return 0 }

// Device is the name of the device the server opened.
func (*Server) Device() string { return "" }

// Close releases the device.
func (*Server) Close() error { return nil }

// Client reaches an export with one-sided verbs.
type Client struct{}

// Dial opens the control channel and connects a queue pair.
func Dial(context.Context, client.Config, Config) (*Client, error) { return nil, ErrNotBuilt }

// Size is the export's length.
func (*Client) Size() uint64 { return 0 }

// Read fills p from export offset off.
func (*Client) Read(context.Context, []byte, uint64) error { return ErrNotBuilt }

// Write stores p at export offset off.
func (*Client) Write(context.Context, []byte, uint64) error { return ErrNotBuilt }

// CompareAndSwap is an RDMA compare-and-swap of the word at off.
func (*Client) CompareAndSwap(context.Context, uint64, uint64, uint64) (uint64, error) {
	return 0, ErrNotBuilt
}

// FetchAdd is an RDMA fetch-and-add of the word at off.
func (*Client) FetchAdd(context.Context, uint64, uint64) (uint64, error) { return 0, ErrNotBuilt }

// Close tears down the queue pair and the control channel.
func (*Client) Close() error { return nil }
