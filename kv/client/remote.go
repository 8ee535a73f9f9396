package client

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"cxlpool/fabric/cci"
	"cxlpool/kv/wire"
	"cxlpool/rdma"
	rdmaclient "cxlpool/rdma/client"
)

// RackHost is the host ID a remote rack's client says HELLO with (the
// index's kv.RackHost): a rack is not a head, it has no grant.
const RackHost = 0xFFFF

// Remote makes a Client a remote rack's: the index ops go over the kv
// protocol as for a host (authenticated with the namespace's remote
// token, Config.Token), the bytes through the export of each chunk with
// one-sided READ and WRITE at the block's offset (rdma/client) instead of
// a DAX mapping.
type Remote struct {
	// Addr is the box's export (rdma/tcp) server.
	Addr string
	// Resolve returns the export of every chunk of the namespace, by tag
	// (the admin's Export answer, or its refetch: a namespace that grew
	// has exports the rack has not seen). It is asked when a block lies
	// in a chunk the client knows no export of.
	Resolve func(ctx context.Context) (map[[16]byte]rdma.ExportID, error)
	// Conns is the connections per export (rdma/client's default if 0).
	Conns int
}

// remote holds one rdma client per chunk, dialled on first use.
type remote struct {
	cfg   Remote
	token rdma.Token

	mu    sync.Mutex
	ids   map[[16]byte]rdma.ExportID
	conns map[[16]byte]*rdmaclient.Client
}

func newRemote(cfg Remote, tok [wire.TokenSize]byte) *remote {
	return &remote{cfg: cfg, token: rdma.Token(tok), ids: map[[16]byte]rdma.ExportID{}, conns: map[[16]byte]*rdmaclient.Client{}}
}

// ErrNoExport: no export reaches the block's chunk (the namespace is not
// exported, or not any more).
var ErrNoExport = errors.New("kv client: no export of the block's chunk")

// conn is the client of the chunk's export.
func (r *remote) conn(ctx context.Context, tag [16]byte) (*rdmaclient.Client, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.conns[tag]; c != nil {
		return c, nil
	}
	id, ok := r.ids[tag]
	if !ok {
		if r.cfg.Resolve == nil {
			return nil, fmt.Errorf("kv client: chunk %s: %w", cci.Tag(tag), ErrNoExport)
		}
		ids, err := r.cfg.Resolve(ctx)
		if err != nil {
			return nil, fmt.Errorf("kv client: resolve exports: %w", err)
		}
		r.ids = ids
		if id, ok = ids[tag]; !ok {
			return nil, fmt.Errorf("kv client: chunk %s: %w", cci.Tag(tag), ErrNoExport)
		}
	}
	c, err := rdmaclient.Dial(ctx, rdmaclient.Config{Addr: r.cfg.Addr, Export: id, Token: r.token, Conns: r.cfg.Conns})
	if err != nil {
		return nil, fmt.Errorf("kv client: export %s of chunk %s: %w", id, cci.Tag(tag), err)
	}
	r.conns[tag] = c
	return c, nil
}

// drop forgets a chunk's connection after its export failed (revoked:
// the next use resolves again).
func (r *remote) drop(tag [16]byte, c *rdmaclient.Client) {
	r.mu.Lock()
	if r.conns[tag] == c {
		delete(r.conns, tag)
		delete(r.ids, tag)
	}
	r.mu.Unlock()
	_ = c.Close()
}

func (r *remote) io(ctx context.Context, l wire.Loc, p []byte, write bool) error {
	c, err := r.conn(ctx, l.Tag)
	if err != nil {
		return err
	}
	if write {
		err = c.Write(ctx, p, l.Offset)
	} else {
		err = c.Read(ctx, p, l.Offset)
	}
	if err != nil {
		if errors.Is(err, rdma.ErrRevoked) || errors.Is(err, rdma.ErrDenied) || errors.Is(err, rdmaclient.ErrConnection) {
			r.drop(l.Tag, c)
		}
		return fmt.Errorf("kv client: block %d of chunk %s through the export: %w", l.Block, cci.Tag(l.Tag), err)
	}
	return nil
}

// keep closes the connections of chunks not in live (the namespace
// shrank).
func (r *remote) keep(live map[[16]byte]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for t, c := range r.conns {
		if !live[t] {
			_ = c.Close()
			delete(r.conns, t)
			delete(r.ids, t)
		}
	}
}

func (r *remote) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for t, c := range r.conns {
		_ = c.Close()
		delete(r.conns, t)
	}
}
