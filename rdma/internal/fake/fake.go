// Package fake provides the rdma tests with an in-memory ledger and a
// memfd-backed Memory, so that the export packages can be tested without
// a whole appliance (the end-to-end tests in rdma use one).
package fake

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"cxlpool/dcd"
	"cxlpool/fabric/cci"
	"cxlpool/rdma"
)

// Ledger is an in-memory rdma.Ledger whose chunks and grants tests set.
type Ledger struct {
	mu     sync.Mutex
	chunks map[dcd.ChunkID]dcd.Chunk
	grants map[dcd.GrantID]dcd.Grant
	next   int64
	// Err, when set, is returned by every read (a ledger outage).
	Err error
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{chunks: map[dcd.ChunkID]dcd.Chunk{}, grants: map[dcd.GrantID]dcd.Grant{}}
}

// AddChunk records a chunk of size bytes.
func (l *Ledger) AddChunk(size uint64, sharable bool) dcd.Chunk {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	c := dcd.Chunk{ID: dcd.ChunkID(l.next), Size: size, Sharable: sharable, Tag: cci.NewTag()}
	l.chunks[c.ID] = c
	return c
}

// AddGrant records a grant of chunk to host in state with extents.
func (l *Ledger) AddGrant(chunk dcd.ChunkID, host dcd.HostID, state dcd.GrantState, extents ...cci.Extent) dcd.Grant {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	g := dcd.Grant{ID: dcd.GrantID(l.next), Chunk: chunk, Host: host, State: state, Extents: extents}
	l.grants[g.ID] = g
	return g
}

// SetState moves a grant to state.
func (l *Ledger) SetState(id dcd.GrantID, state dcd.GrantState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.grants[id]
	g.State = state
	l.grants[id] = g
}

// DeleteChunk forgets a chunk.
func (l *Ledger) DeleteChunk(id dcd.ChunkID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.chunks, id)
}

// Chunk implements rdma.Ledger.
func (l *Ledger) Chunk(_ context.Context, id dcd.ChunkID) (dcd.Chunk, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Err != nil {
		return dcd.Chunk{}, l.Err
	}
	c, ok := l.chunks[id]
	if !ok {
		return c, fmt.Errorf("chunk %d: %w", id, dcd.ErrNotFound)
	}
	return c, nil
}

// Grant implements rdma.Ledger.
func (l *Ledger) Grant(_ context.Context, id dcd.GrantID) (dcd.Grant, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Err != nil {
		return dcd.Grant{}, l.Err
	}
	g, ok := l.grants[id]
	if !ok {
		return g, fmt.Errorf("grant %d: %w", id, dcd.ErrNotFound)
	}
	return g, nil
}

// Grants implements rdma.Ledger.
func (l *Ledger) Grants(_ context.Context, f dcd.GrantFilter) ([]dcd.Grant, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Err != nil {
		return nil, l.Err
	}
	var out []dcd.Grant
	for _, g := range l.grants {
		if (f.Chunk == 0 || g.Chunk == f.Chunk) && (f.Host == nil || *f.Host == g.Host) && (!f.Active || g.State.Active()) {
			out = append(out, g)
		}
	}
	slices.SortFunc(out, func(a, b dcd.Grant) int { return int(a.ID - b.ID) })
	return out, nil
}

// Memory returns size bytes of sparse memfd, mapped as DPA 0…size, and
// the file (for tests that look at the bytes the way a host would).
func Memory(t testing.TB, size uint64) (*rdma.Mapping, *os.File) {
	t.Helper()
	fd, err := unix.MemfdCreate("rdma-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "rdma-test")
	if err := f.Truncate(int64(size)); err != nil {
		t.Fatal(err)
	}
	m, err := rdma.MapFile(f, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); f.Close() })
	return m, f
}

// Env is a Service over a fake ledger and memory, with one chunk of
// ChunkSize bytes granted as two extents (at DPA 4 MiB and 1 MiB, given
// in that order to check the export orders them by DPA).
type Env struct {
	Ledger  *Ledger
	Mem     *rdma.Mapping
	File    *os.File
	Service *rdma.Service
	Chunk   dcd.Chunk
	Grant   dcd.Grant
}

// ChunkSize is the size of Env's chunk.
const ChunkSize = 2 << 20

// NewEnv builds an Env whose service is closed at cleanup.
func NewEnv(t testing.TB, cfg rdma.Config) *Env {
	t.Helper()
	e := &Env{Ledger: NewLedger()}
	e.Mem, e.File = Memory(t, 8<<20)
	e.Chunk = e.Ledger.AddChunk(ChunkSize, false)
	e.Grant = e.Ledger.AddGrant(e.Chunk.ID, 0, dcd.GrantGranted,
		cci.Extent{DPA: 4 << 20, Length: 1 << 20, Tag: e.Chunk.Tag},
		cci.Extent{DPA: 1 << 20, Length: 1 << 20, Tag: e.Chunk.Tag})
	cfg.Ledger, cfg.Memory = e.Ledger, e.Mem
	s, err := rdma.NewService(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	e.Service = s
	return e
}

// Export creates an export of the whole chunk with perms.
func (e *Env) Export(t testing.TB, perms rdma.Perm) rdma.Export {
	t.Helper()
	x, err := e.Service.Create(context.Background(), rdma.CreateRequest{Chunk: e.Chunk.ID, Client: "rack-7", Perms: perms})
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// DPA translates an offset of Env's whole-chunk export to the device
// address a host would use.
func DPA(off uint64) uint64 {
	if off < 1<<20 {
		return 1<<20 + off
	}
	return 4<<20 + off - 1<<20
}
