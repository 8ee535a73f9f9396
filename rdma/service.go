package rdma

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"cxlpool/dcd"
	"cxlpool/fabric/cci"
)

// Ledger is what the Service reads from the capacity ledger: a chunk and
// its grants. dcd.Ledger satisfies it.
type Ledger interface {
	Chunk(ctx context.Context, id dcd.ChunkID) (dcd.Chunk, error)
	Grant(ctx context.Context, id dcd.GrantID) (dcd.Grant, error)
	Grants(ctx context.Context, f dcd.GrantFilter) ([]dcd.Grant, error)
}

// Authenticator opens exports for transports.
type Authenticator interface {
	// Authenticate returns the live export id if tok is its token. It
	// answers ErrDenied, after the same work, whether the export does not
	// exist, the token is wrong, or the export is revoked or expired.
	Authenticate(id ExportID, tok Token) (*Handle, error)
}

// Config holds the Service's dependencies.
type Config struct {
	Ledger Ledger
	Memory Memory
	Logger *slog.Logger
	Clock  func() time.Time
	// Rand is the source of export IDs and tokens (crypto/rand if nil).
	Rand io.Reader
	// SweepInterval is how often Run re-checks every export against the
	// ledger and revokes expired ones; change notifications do most of
	// the work, the sweep covers notifications a busy subscriber lost.
	SweepInterval time.Duration
	// MaxExports bounds the live exports (default 4096).
	MaxExports int
	// DrainTimeout bounds how long a revocation driven by the ledger
	// waits for in-flight accesses (default 10 s); the export refuses new
	// ones at once either way.
	DrainTimeout time.Duration
	// Store, if set, keeps exports across restarts (see Restore): Create
	// saves each one before returning it, Revoke deletes its record
	// before revoking, and revocations the service decides itself
	// (release, expiry, capacity change) delete it after. Close keeps the
	// records.
	Store Store
	// CountAccess, if set, hears every READ and WRITE the transports
	// serve through the CPU (the TCP transport; atomics count as 8-byte
	// writes) as device address ranges, once per range an access
	// touches: the virtual box feeds its CHMU with it, so that hot-page
	// telemetry sees remote racks as it sees hosts. One-sided verbs
	// accesses never reach it (the HCA moves those bytes); on hardware
	// the device's CHMU counts both itself. It must be cheap and safe
	// for concurrent use.
	CountAccess func(dpa, n uint64, write bool)
}

// Service is the registry of exports. It creates them against the ledger,
// authenticates transports, and revokes exports whose chunk no longer
// holds the same capacity on the device. Methods are safe for concurrent
// use.
type Service struct {
	cfg Config
	log *slog.Logger

	// decoy is the hash compared against when a presented export does
	// not exist, so refusals cost the same whether or not it does.
	decoy TokenHash

	mu      sync.RWMutex
	exports map[ExportID]*Handle
	byChunk map[dcd.ChunkID]map[ExportID]*Handle
	closed  bool

	// restored is closed when the first Restore has finished; unrestored
	// (under mu) is what it did not bring back, for whoever reports it.
	restored    chan struct{}
	restoreOnce sync.Once
	unrestored  []Unrestored

	// chunkMu serialises, per chunk, creating an export (read the grants,
	// register) with a host's capacity leaving (decide, revoke, record),
	// so neither acts on what the other is about to change.
	chunkMu sync.Mutex
	chunkL  map[dcd.ChunkID]*chunkLock
}

// chunkLock is one chunk's lock, with a count of its users so the map
// does not grow with every chunk ever exported.
type chunkLock struct {
	sync.Mutex
	users int
}

func (s *Service) lockChunk(c dcd.ChunkID) func() {
	s.chunkMu.Lock()
	l := s.chunkL[c]
	if l == nil {
		l = &chunkLock{}
		s.chunkL[c] = l
	}
	l.users++
	s.chunkMu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		s.chunkMu.Lock()
		if l.users--; l.users == 0 {
			delete(s.chunkL, c)
		}
		s.chunkMu.Unlock()
	}
}

// NewService returns a Service; call Run to keep it consistent with the
// ledger.
func NewService(cfg Config) (*Service, error) {
	if cfg.Ledger == nil || cfg.Memory == nil {
		return nil, errors.New("rdma: service needs a ledger and a memory")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Reader
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = time.Second
	}
	if cfg.MaxExports <= 0 {
		cfg.MaxExports = 4096
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 10 * time.Second
	}
	s := &Service{cfg: cfg, log: cfg.Logger, exports: map[ExportID]*Handle{}, byChunk: map[dcd.ChunkID]map[ExportID]*Handle{},
		chunkL: map[dcd.ChunkID]*chunkLock{}, restored: make(chan struct{})}
	if _, err := io.ReadFull(cfg.Rand, s.decoy[:]); err != nil {
		return nil, fmt.Errorf("rdma: random: %w", err)
	}
	return s, nil
}

// Create exports part of a chunk to a client and returns the export with
// its token (the only time the token is shown). The chunk must hold
// capacity on the device, that is be granted to at least one host.
func (s *Service) Create(ctx context.Context, r CreateRequest) (Export, error) {
	now := s.cfg.Clock()
	if err := validClient(r.Client); err != nil {
		return Export{}, err
	}
	if !r.Perms.Valid() {
		return Export{}, fmt.Errorf("rdma: permissions %s: %w", r.Perms, ErrInvalid)
	}
	switch {
	case r.TTL < 0, r.TTL > 0 && !r.Expiry.IsZero():
		return Export{}, fmt.Errorf("rdma: TTL %s with expiry %s: %w", r.TTL, r.Expiry.Format(time.RFC3339), ErrInvalid)
	case r.TTL > 0:
		r.Expiry = now.Add(r.TTL)
	}
	if !r.Expiry.IsZero() && !r.Expiry.After(now) {
		return Export{}, fmt.Errorf("rdma: expiry %s is not in the future: %w", r.Expiry.Format(time.RFC3339), ErrInvalid)
	}
	// From reading the grants to registering, no host's capacity of the
	// chunk leaves (Leaving waits), so the export never starts on
	// capacity whose release is already recorded.
	defer s.lockChunk(r.Chunk)()
	extents, granted, err := s.chunkExtents(ctx, r.Chunk)
	if err != nil {
		return Export{}, err
	}
	var total uint64
	for _, e := range extents {
		total += e.Length
	}
	if r.Offset >= total || r.Length > total-r.Offset {
		return Export{}, fmt.Errorf("rdma: %#x bytes at %#x outside chunk %d's %#x bytes: %w", r.Length, r.Offset, r.Chunk, total, ErrInvalid)
	}
	if r.Length == 0 {
		r.Length = total - r.Offset
	}
	exp := Export{Chunk: r.Chunk, Client: r.Client, Perms: r.Perms, Offset: r.Offset, Length: r.Length,
		Expiry: r.Expiry, Created: now}
	var id [8]byte
	if _, err := io.ReadFull(s.cfg.Rand, id[:]); err != nil {
		return Export{}, fmt.Errorf("rdma: random: %w", err)
	}
	hash := r.Hash
	if hash == (TokenHash{}) {
		if _, err := io.ReadFull(s.cfg.Rand, exp.Token[:]); err != nil {
			return Export{}, fmt.Errorf("rdma: random: %w", err)
		}
		hash = HashToken(exp.Token)
	}
	exp.ID = ExportID(hex.EncodeToString(id[:]))
	h, err := newHandle(exp, hash, extents, s.cfg.Memory, s.cfg.Clock)
	if err != nil {
		return Export{}, err
	}
	h.observe = s.cfg.CountAccess
	for _, g := range granted {
		h.grants = append(h.grants, g.ID)
	}
	if err := s.register(h); err != nil {
		return Export{}, err
	}
	if s.cfg.Store != nil {
		// Saved only now that it passed the check; if the service
		// revoked it meanwhile (its drop may have deleted the record
		// before this save), delete the record again: revocation
		// cancels the handle before deleting, so one of the two sees
		// the other.
		err := s.cfg.Store.Save(ctx, h.record())
		if err == nil && h.Revoked() {
			err = ErrNoExtents
		}
		if err != nil {
			_ = s.drop(context.WithoutCancel(ctx), exp.ID)
			return Export{}, fmt.Errorf("rdma: export chunk %d: save: %w", exp.Chunk, err)
		}
	}
	s.log.Info("export created", "export", exp.ID, "chunk", exp.Chunk, "client", exp.Client,
		"perms", exp.Perms.String(), "offset", exp.Offset, "bytes", exp.Length)
	return exp, nil
}

// register makes h a live export.
func (s *Service) register(h *Handle) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, chunk := h.exp.ID, h.exp.Chunk
	switch {
	case s.closed:
		return fmt.Errorf("rdma: service closed: %w", ErrInvalid)
	case len(s.exports) >= s.cfg.MaxExports:
		return ErrTooMany
	case s.exports[id] != nil:
		return fmt.Errorf("rdma: export ID collision, retry: %w", dcd.ErrConflict)
	}
	s.exports[id] = h
	if s.byChunk[chunk] == nil {
		s.byChunk[chunk] = map[ExportID]*Handle{}
	}
	s.byChunk[chunk][id] = h
	return nil
}

func validClient(c string) error {
	if c == "" || len(c) > 128 || strings.IndexFunc(c, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return fmt.Errorf("rdma: client name must be 1–128 printable characters: %w", ErrInvalid)
	}
	return nil
}

// chunkExtents is the chunk's capacity on the device as the ledger knows
// it: the extents of its granted grants (shared grants name the same
// extents), ordered by shared sequence, then DPA, and those grants.
func (s *Service) chunkExtents(ctx context.Context, id dcd.ChunkID) ([]cci.Extent, []dcd.Grant, error) {
	if _, err := s.cfg.Ledger.Chunk(ctx, id); err != nil {
		return nil, nil, fmt.Errorf("rdma: chunk %d: %w", id, err)
	}
	grants, err := s.cfg.Ledger.Grants(ctx, dcd.GrantFilter{Chunk: id, Active: true})
	if err != nil {
		return nil, nil, fmt.Errorf("rdma: chunk %d grants: %w", id, err)
	}
	seen := map[uint64]bool{}
	var out []cci.Extent
	var granted []dcd.Grant
	for _, g := range grants {
		if g.State != dcd.GrantGranted {
			continue
		}
		granted = append(granted, g)
		for _, e := range g.Extents {
			if e.Length > 0 && !seen[e.DPA] {
				seen[e.DPA] = true
				out = append(out, e)
			}
		}
	}
	if len(out) == 0 {
		return nil, nil, fmt.Errorf("rdma: chunk %d: %w", id, ErrNoExtents)
	}
	slices.SortFunc(out, func(a, b cci.Extent) int {
		return cmp.Or(cmp.Compare(a.SharedSeq, b.SharedSeq), cmp.Compare(a.DPA, b.DPA))
	})
	return out, granted, nil
}

// Authenticate implements Authenticator.
func (s *Service) Authenticate(id ExportID, tok Token) (*Handle, error) {
	s.mu.RLock()
	h := s.exports[id]
	s.mu.RUnlock()
	want := &s.decoy
	if h != nil {
		want = &h.tokenHash
	}
	got := sha256.Sum256(tok[:])
	ok := subtle.ConstantTimeCompare(want[:], got[:]) == 1
	if h == nil || !ok || h.Revoked() || (h.expiry != 0 && s.cfg.Clock().UnixNano() >= h.expiry) {
		return nil, ErrDenied
	}
	return h, nil
}

// Get returns one export, token zeroed.
func (s *Service) Get(id ExportID) (Export, error) {
	s.mu.RLock()
	h := s.exports[id]
	s.mu.RUnlock()
	if h == nil {
		return Export{}, fmt.Errorf("rdma: %s: %w", id, ErrNotFound)
	}
	return h.Export(), nil
}

// Traffic returns an export's traffic counters.
func (s *Service) Traffic(id ExportID) (Traffic, error) {
	s.mu.RLock()
	h := s.exports[id]
	s.mu.RUnlock()
	if h == nil {
		return Traffic{}, fmt.Errorf("rdma: %s: %w", id, ErrNotFound)
	}
	return h.Traffic(), nil
}

// List returns the live exports, tokens zeroed, oldest first.
func (s *Service) List() []Export {
	s.mu.RLock()
	out := make([]Export, 0, len(s.exports))
	for _, h := range s.exports {
		out = append(out, h.Export())
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b Export) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.ID, b.ID))
	})
	return out
}

// Revoke ends an export: new operations fail at once (ErrDenied for a new
// session, ErrRevoked for an open one), and Revoke returns once the
// operations in flight have drained (or ctx ends; the export is revoked
// either way). After a nil return nothing reads or writes its memory.
//
// With a Store, the record goes first: if deleting it fails, Revoke
// returns the error and the export stays as it was, so that an export
// revoked by request can never come back after a restart.
func (s *Service) Revoke(ctx context.Context, id ExportID) error {
	if s.cfg.Store != nil {
		s.mu.RLock()
		h := s.exports[id]
		s.mu.RUnlock()
		if h == nil {
			return fmt.Errorf("rdma: %s: %w", id, ErrNotFound)
		}
		if err := s.cfg.Store.Delete(ctx, id); err != nil {
			return fmt.Errorf("rdma: revoke %s: delete its record: %w", id, err)
		}
	}
	return s.revokeLive(ctx, id)
}

// drop is a revocation the service decides itself (release, expiry,
// capacity change): the export goes at once, its record after (a failure
// is logged; Restore refuses such a record anyway).
func (s *Service) drop(ctx context.Context, id ExportID) error {
	err := s.revokeLive(ctx, id)
	if errors.Is(err, ErrNotFound) || s.cfg.Store == nil {
		return err
	}
	if derr := s.cfg.Store.Delete(context.WithoutCancel(ctx), id); derr != nil {
		s.log.Warn("deleting a revoked export's record", "export", id, "err", derr)
	}
	return err
}

// revokeLive revokes a live export without touching the Store.
func (s *Service) revokeLive(ctx context.Context, id ExportID) error {
	h := s.remove(id)
	if h == nil {
		return fmt.Errorf("rdma: %s: %w", id, ErrNotFound)
	}
	s.log.Info("export revoked", "export", id, "chunk", h.exp.Chunk)
	return h.revoke(ctx)
}

func (s *Service) remove(id ExportID) *Handle {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.exports[id]
	if h == nil {
		return nil
	}
	delete(s.exports, id)
	if m := s.byChunk[h.exp.Chunk]; m != nil {
		delete(m, id)
		if len(m) == 0 {
			delete(s.byChunk, h.exp.Chunk)
		}
	}
	return h
}

// RevokeChunk revokes every export of a chunk, as Revoke does, and
// returns how many there were.
func (s *Service) RevokeChunk(ctx context.Context, chunk dcd.ChunkID) (int, error) {
	return s.revokeChunk(ctx, chunk, s.Revoke)
}

func (s *Service) revokeChunk(ctx context.Context, chunk dcd.ChunkID, revoke func(context.Context, ExportID) error) (int, error) {
	s.mu.RLock()
	var ids []ExportID
	for id := range s.byChunk[chunk] {
		ids = append(ids, id)
	}
	s.mu.RUnlock()
	var errs []error
	n := 0
	for _, id := range ids {
		err := revoke(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue // revoked concurrently
		}
		n++
		errs = append(errs, err)
	}
	return n, errors.Join(errs...)
}

// Leaving implements dcd.CapacityGuard: grant g's capacity is about to
// leave its host. Unless another granted grant of the chunk keeps the
// capacity on the device, every export of the chunk is revoked (in-flight
// accesses drained) before record runs; gone says the device has already
// given the capacity back, so what a writable export may have written
// since is zeroed too. The decision, the revocation and record are one
// step per chunk: Create waits for it, and two holders leaving at once
// each see the other's record (the second revokes).
func (s *Service) Leaving(ctx context.Context, g dcd.Grant, gone bool, record func() error) error {
	defer s.lockChunk(g.Chunk)()
	s.mu.RLock()
	var hs []*Handle
	for _, h := range s.byChunk[g.Chunk] {
		hs = append(hs, h)
	}
	s.mu.RUnlock()
	if len(hs) > 0 {
		others, err := s.cfg.Ledger.Grants(ctx, dcd.GrantFilter{Chunk: g.Chunk, Active: true})
		if err != nil {
			return fmt.Errorf("rdma: chunk %d grants: %w", g.Chunk, err)
		}
		kept := false
		for _, o := range others {
			kept = kept || (o.ID != g.ID && o.State == dcd.GrantGranted)
		}
		if !kept {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.DrainTimeout)
			defer cancel()
			var errs []error
			for _, h := range hs {
				err := s.drop(dctx, h.exp.ID)
				if errors.Is(err, ErrNotFound) {
					err = h.revoke(dctx) // revoked meanwhile: wait for its drain all the same
				}
				if err == nil && gone {
					err = h.scrub(s.cfg.Memory)
				}
				errs = append(errs, err)
			}
			if err := errors.Join(errs...); err != nil {
				return fmt.Errorf("rdma: cutting the exports of chunk %d: %w", g.Chunk, err)
			}
			s.log.Info("exports revoked: their capacity leaves the device", "chunk", g.Chunk, "grant", g.ID, "exports", len(hs), "gone", gone)
		}
	}
	return record()
}

// check revokes the chunk's exports whose device extents changed or went
// away. A ledger error other than not-found keeps them: it says nothing
// about the device.
func (s *Service) check(ctx context.Context, chunk dcd.ChunkID) error {
	s.mu.RLock()
	var hs []*Handle
	for _, h := range s.byChunk[chunk] {
		hs = append(hs, h)
	}
	s.mu.RUnlock()
	if len(hs) == 0 {
		return nil
	}
	extents, _, err := s.chunkExtents(ctx, chunk)
	gone := errors.Is(err, dcd.ErrNotFound) || errors.Is(err, ErrNoExtents)
	if err != nil && !gone {
		return err
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.DrainTimeout)
	defer cancel()
	var errs []error
	for _, h := range hs {
		if gone || !sameExtents(h.extents, extents) {
			s.log.Info("chunk capacity changed on the device; revoking export", "export", h.exp.ID, "chunk", chunk)
			if err := s.drop(dctx, h.exp.ID); err != nil && !errors.Is(err, ErrNotFound) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func sameExtents(a, b []cci.Extent) bool {
	return slices.EqualFunc(a, b, func(x, y cci.Extent) bool { return x.DPA == y.DPA && x.Length == y.Length })
}

// Sweep re-checks every export against the ledger and revokes expired
// ones.
func (s *Service) Sweep(ctx context.Context) error {
	now := s.cfg.Clock().UnixNano()
	s.mu.RLock()
	var chunks []dcd.ChunkID
	for c := range s.byChunk {
		chunks = append(chunks, c)
	}
	var expired []ExportID
	for id, h := range s.exports {
		if h.expiry != 0 && now >= h.expiry {
			expired = append(expired, id)
		}
	}
	s.mu.RUnlock()
	var errs []error
	for _, id := range expired {
		s.log.Info("export expired", "export", id)
		if err := s.drop(ctx, id); err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, err)
		}
	}
	for _, c := range chunks {
		errs = append(errs, s.check(ctx, c))
	}
	return errors.Join(errs...)
}

// Run keeps the exports consistent with the ledger until ctx ends or
// changes is closed: each chunk or grant change re-checks that chunk's
// exports (so releasing or deleting a chunk revokes them), a device change
// re-checks all, and a periodic sweep catches lost notifications and
// expiries. Pass a subscription: ch, cancel := manager.Subscribe(256).
func (s *Service) Run(ctx context.Context, changes <-chan dcd.Change) {
	t := time.NewTicker(s.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case c, ok := <-changes:
			if !ok {
				return
			}
			var err error
			switch c.Kind {
			case dcd.ChangeChunk, dcd.ChangeGrant:
				err = s.check(ctx, c.Chunk)
			case dcd.ChangeDevice:
				err = s.Sweep(ctx)
			}
			if err != nil && ctx.Err() == nil {
				s.log.Warn("checking exports after a change", "kind", c.Kind, "chunk", c.Chunk, "err", err)
			}
		case <-t.C:
			if err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("sweeping exports", "err", err)
			}
		}
	}
}

// Close revokes every export and refuses new ones; call it before closing
// the Memory. The Store keeps their records, for Restore after a restart.
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	var ids []ExportID
	for id := range s.exports {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	var errs []error
	for _, id := range ids {
		if err := s.revokeLive(ctx, id); err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
