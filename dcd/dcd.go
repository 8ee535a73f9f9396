// Package dcd allocates the box's dynamic capacity to hosts. It declares the
// capacity domain (hosts, regions, chunks, grants, extents), the Ledger that
// keeps it durable (implemented by dcd/sqlite) and the Manager that runs the
// reserve → grant → share → release → delete flows against a fabric.Device,
// keeping the ledger and the device in agreement across crashes.
package dcd

import (
	"context"
	"errors"
	"time"

	"cxlpool/fabric/cci"
)

// Domain errors. The API maps each to one Redfish message.
var (
	ErrNotFound      = errors.New("not found")
	ErrNoCapacity    = errors.New("not enough free capacity")
	ErrQuotaExceeded = errors.New("host quota exceeded")
	ErrConflict      = errors.New("conflicts with the current state")
	ErrInvalid       = errors.New("invalid request")
	ErrNotSharable   = errors.New("chunk is not sharable")
	ErrHostRejected  = errors.New("host rejected the capacity")
	ErrHostTimeout   = errors.New("host did not answer in time")
	ErrLinkDown      = errors.New("host link is down")
	ErrDeviceBusy    = errors.New("device is busy")
	// ErrDeviceUnreachable: the link to the device is down or the device
	// does not answer on it (fabric.ErrClosed, fabric.ErrTimeout); the
	// command may be retried once it is back. ErrDevice is a device that
	// answered with an error.
	ErrDeviceUnreachable = errors.New("device cannot be reached")
	ErrDevice            = errors.New("device error")
	// ErrFenced: the host's head is being power-cycled (or is off after
	// a ForceOff); no capacity goes to it until the fence is lifted.
	ErrFenced = errors.New("host is fenced for a head power cycle")
)

// HostID is a host's LD-ID on the multi-headed device (0–7 in this box).
type HostID uint16

// Host is one host attached to a head.
type Host struct {
	ID     HostID
	Port   uint8
	Name   string
	Quota  uint64 // bytes; 0: the default quota (DefaultHostQuota) applies
	LinkUp bool
}

// Region is a DC region as the ledger knows it.
type Region struct {
	Index             int
	Base              uint64
	Length            uint64
	BlockSize         uint64
	Sharable          bool
	SanitizeOnRelease bool
}

// Inventory is what discovery found, written into the ledger at start.
type Inventory struct {
	Serial  uint64
	Hosts   []Host
	Regions []Region
}

// ChunkID identifies a chunk (a reservation of pool capacity).
type ChunkID int64

// Chunk is a reservation of Size bytes in one region. Its Tag names its
// capacity on the device from the first grant on, and is the idempotency
// key of every device command about it.
//
// Extents is where the chunk lives on the device: DPA ranges the ledger
// chose when it reserved the chunk, tagged with Tag, owned by the chunk
// until it is deleted. The Manager adds them prescriptively, so the device
// never places a host's capacity on blocks the ledger still counts as
// another chunk's, even while it has not yet heard that a host gave them
// back. A ledger that does not place chunks leaves Extents empty and the
// device chooses.
type Chunk struct {
	ID       ChunkID
	Name     string
	Region   int
	Size     uint64
	Tag      cci.Tag
	Sharable bool
	Created  time.Time
	Extents  []cci.Extent
}

// GrantState is the life cycle of one host's access to one chunk.
type GrantState string

// Grant states (see shared/specs/ledger-design.md).
const (
	GrantAdding    GrantState = "adding"    // intent written, add sent or about to be
	GrantGranted   GrantState = "granted"   // the host holds Extents
	GrantReleasing GrantState = "releasing" // release intent written
	GrantReleased  GrantState = "released"  // terminal
	GrantFailed    GrantState = "failed"    // terminal: rejected, timed out, link down
	GrantLost      GrantState = "lost"      // terminal: device no longer holds what the ledger said
)

// Active reports whether the grant still holds or may hold capacity.
func (s GrantState) Active() bool {
	return s == GrantAdding || s == GrantGranted || s == GrantReleasing
}

// GrantID identifies a grant.
type GrantID int64

// Grant is one host's access to one chunk.
type Grant struct {
	ID      GrantID
	Chunk   ChunkID
	Host    HostID
	State   GrantState
	Extents []cci.Extent // what the host accepted, exactly
	Reason  string       // why it failed or was lost
	Created time.Time
	Updated time.Time
}

// Size is the capacity the host accepted.
func (g Grant) Size() uint64 {
	var n uint64
	for _, e := range g.Extents {
		n += e.Length
	}
	return n
}

// GrantIntent is a freshly written grant intent with its chunk. Others is
// set when other hosts had active grants of the chunk at that moment, so
// the add will most likely enable shared access rather than place new
// capacity (the Manager confirms under the chunk's lock).
type GrantIntent struct {
	Grant
	Chunk  Chunk
	Others bool
}

// Orphan is capacity the device holds under a tag no ledger row explains.
// It is never handed out until an administrator releases it.
type Orphan struct {
	Host    HostID
	Tag     cci.Tag
	Extents []cci.Extent
	Found   time.Time
}

// GrantFilter selects grants; zero fields match everything.
type GrantFilter struct {
	Host   *HostID
	Chunk  ChunkID
	Active bool // only adding, granted, releasing
}

// Ledger is the durable record of the capacity domain. Every method is one
// transaction: it either happens completely or not at all.
type Ledger interface {
	// SyncInventory records the discovered hosts and regions, keeping
	// administrator settings (host names, quotas).
	SyncInventory(ctx context.Context, inv Inventory) error
	Hosts(ctx context.Context) ([]Host, error)
	Host(ctx context.Context, id HostID) (Host, error)
	SetHostQuota(ctx context.Context, id HostID, quota uint64) error
	// DefaultHostQuota limits hosts with no quota of their own (quota.go);
	// SetDefaultHostQuota sets it (0: no limit).
	DefaultHostQuota(ctx context.Context) (DefaultQuota, error)
	SetDefaultHostQuota(ctx context.Context, quota uint64) error
	Regions(ctx context.Context) ([]Region, error)

	// CreateChunk reserves capacity: it fails with ErrNoCapacity when the
	// region's length minus live chunks and orphans is less than Size, and
	// ErrInvalid for an unknown region, a size that is not a positive block
	// multiple, or Sharable in a region that is not.
	CreateChunk(ctx context.Context, c Chunk) (Chunk, error)
	Chunk(ctx context.Context, id ChunkID) (Chunk, error)
	// ChunkByTag returns the live chunk whose tag is tag, or ErrNotFound.
	ChunkByTag(ctx context.Context, tag cci.Tag) (Chunk, error)
	Chunks(ctx context.Context) ([]Chunk, error)
	// DeleteChunk fails with ErrConflict while the chunk has active grants.
	DeleteChunk(ctx context.Context, id ChunkID) error

	// BeginGrant writes the intent to add chunk capacity to host (state
	// adding). It fails with ErrNotFound (chunk or host), ErrConflict (the
	// host already has an active grant of it, or a non-sharable chunk is
	// already granted to another host), ErrNotSharable, ErrQuotaExceeded.
	// It returns what the Manager needs to act on the intent without
	// reading the ledger again. If checked is not nil it is called, once,
	// after the admission checks passed and before the commit, so the
	// caller can start the device command while the commit is made
	// durable; the intent only holds if BeginGrant then returns no error.
	BeginGrant(ctx context.Context, chunk ChunkID, host HostID, checked func(GrantIntent)) (GrantIntent, error)
	// AdoptGrant records a grant the device already holds but the ledger
	// never committed (a crash between sending an add and the intent
	// becoming durable): state granted with exactly extents. It applies
	// the same rules as BeginGrant except quota, which the lost intent
	// had already passed.
	AdoptGrant(ctx context.Context, chunk ChunkID, host HostID, extents []cci.Extent) (Grant, error)
	// CompleteGrant moves adding → granted with exactly the accepted extents.
	CompleteGrant(ctx context.Context, id GrantID, extents []cci.Extent) (Grant, error)
	// FailGrant moves adding → failed.
	FailGrant(ctx context.Context, id GrantID, reason string) (Grant, error)
	// BeginRelease moves granted → releasing (idempotent on releasing).
	BeginRelease(ctx context.Context, id GrantID) (Grant, error)
	// CompleteRelease moves releasing → released.
	CompleteRelease(ctx context.Context, id GrantID) (Grant, error)
	// MarkLost moves an active grant to lost.
	MarkLost(ctx context.Context, id GrantID, reason string) (Grant, error)
	Grant(ctx context.Context, id GrantID) (Grant, error)
	Grants(ctx context.Context, f GrantFilter) ([]Grant, error)

	// RecordOrphan remembers capacity no ledger row explains (idempotent
	// per host and tag); ClearOrphan forgets it once released.
	RecordOrphan(ctx context.Context, o Orphan) error
	ClearOrphan(ctx context.Context, host HostID, tag cci.Tag) error
	Orphans(ctx context.Context) ([]Orphan, error)

	Close() error
}

// GrantChunkReader is a Ledger that reads a grant and its chunk in one
// read transaction (a release needs both before it starts: one snapshot
// is half the reads).
type GrantChunkReader interface {
	GrantAndChunk(ctx context.Context, id GrantID) (Grant, Chunk, error)
}

// QueuedCompleter is a Ledger that can order a grant's outcome before
// everything that follows it as soon as the outcome is queued, before it
// commits: whatever anyone writes or reads after queued was called sees
// the grant granted. The Manager answers the grant's caller then, so the
// outcome's transaction is not part of the grant's latency.
type QueuedCompleter interface {
	// CompleteGrantQueued is CompleteGrant calling queued, with the
	// grant's new Updated time, once the outcome is ordered before every
	// later write and read of the ledger (it may not have committed yet).
	CompleteGrantQueued(ctx context.Context, id GrantID, extents []cci.Extent, queued func(updated time.Time)) (Grant, error)
}

// StagedGranter is a Ledger that can tell a grant intent's commit (every
// later transaction sees it) from its durability, so the Manager records
// the host's answer while the intent is still being made durable. It
// answers nobody before durable returned nil: a crash in between leaves a
// prefix of the commits (the intent, or the intent and its outcome), which
// reconcile completes from the device like any interrupted grant.
type StagedGranter interface {
	// BeginGrantStaged is BeginGrant returning once the intent is
	// committed; durable, called once, returns once it survives a power
	// loss (or why it may not).
	BeginGrantStaged(ctx context.Context, chunk ChunkID, host HostID, checked func(GrantIntent)) (in GrantIntent, durable func() error, err error)
}
