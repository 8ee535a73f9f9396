package verbs

import (
	"context"
	"errors"
	"fmt"

	"cxlpool/rdma/client"
	"cxlpool/rdma/wire"
)

// Conn is an open export, whichever transport carries it: *Client (verbs)
// and *client.Client (TCP) both are.
type Conn interface {
	Size() uint64
	Read(ctx context.Context, p []byte, off uint64) error
	Write(ctx context.Context, p []byte, off uint64) error
	CompareAndSwap(ctx context.Context, off, compare, swap uint64) (uint64, error)
	FetchAdd(ctx context.Context, off, delta uint64) (uint64, error)
	Close() error
}

// Open reaches an export over verbs when both ends can: this binary is
// built with the verbs tag, this machine has the RDMA device cfg names (or
// any), and the server serves OpConnect. Otherwise it opens the TCP
// transport, and why is the second result ("" for verbs). Refusals of
// the export itself (a bad token: rdma.ErrDenied) are errors either way:
// they are not retried over TCP.
func Open(ctx context.Context, ccfg client.Config, cfg Config) (Conn, string, error) {
	vc, err := Dial(ctx, ccfg, cfg)
	if err == nil {
		return vc, "", nil
	}
	if !errors.Is(err, ErrNotBuilt) && !errors.Is(err, ErrNoDevice) && !errors.Is(err, wire.ErrUnsupported) {
		return nil, "", err
	}
	tc, terr := client.Dial(ctx, ccfg)
	if terr != nil {
		return nil, "", terr
	}
	return tc, fmt.Sprintf("TCP: %v", err), nil
}
