package rdma

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"time"

	"cxlpool/dcd"
)

// TokenHash is SHA-256 of a token: all the Service keeps of it, in memory
// and in its Store, so that neither a memory dump nor a copy of the
// database lets anyone open an export.
type TokenHash [sha256.Size]byte

// HashToken returns t's TokenHash.
func HashToken(t Token) TokenHash { return sha256.Sum256(t[:]) }

// Record is what a Store keeps of an export so that it can outlive a
// restart of the daemon. It holds the token's hash, never the token.
type Record struct {
	ID             ExportID
	Chunk          dcd.ChunkID
	Client         string
	Perms          Perm
	Offset, Length uint64
	Expiry         time.Time // zero: never
	Created        time.Time
	TokenHash      TokenHash
	// Grants are the chunk's grants that held its capacity (state
	// granted) when the export was made. Restore requires one of them to
	// be granted still: a grant never returns to granted once it left,
	// so that grant has held the memory without a break since.
	Grants []dcd.GrantID
}

// Store keeps export records durably. Save and Delete return once the
// change is durable; Delete of an unknown ID is not an error.
type Store interface {
	Save(ctx context.Context, r Record) error
	Delete(ctx context.Context, id ExportID) error
	Load(ctx context.Context) ([]Record, error)
}

// Restore re-creates the exports the Store kept from before a restart.
// Call it once the ledger agrees with the device (after the Manager's
// reconciliation) and before a transport serves. An export comes back only
// if it has not expired, one of the grants that held its chunk's capacity
// when it was made is granted still (and was created no later than the
// export), and the chunk's capacity still covers the exported bytes: then
// the same grant has held the memory continuously and nobody else's data
// can be behind it. Every other record is deleted and logged. A record
// whose check fails on a ledger error is kept for the next start and its
// error returned. Restore returns how many exports came back.
func (s *Service) Restore(ctx context.Context) (int, error) {
	var lost []Unrestored
	defer func() { s.finishRestore(lost) }()
	if s.cfg.Store == nil {
		return 0, nil
	}
	recs, err := s.cfg.Store.Load(ctx)
	if err != nil {
		return 0, fmt.Errorf("rdma: restore: %w", err)
	}
	now := s.cfg.Clock()
	n := 0
	var errs []error
	for _, r := range recs {
		why, err := s.restore(ctx, r, now)
		if err != nil {
			errs = append(errs, fmt.Errorf("rdma: restore export %s: %w", r.ID, err))
			continue
		}
		if why == "" {
			n++
			s.log.Info("export restored", "export", r.ID, "chunk", r.Chunk, "client", r.Client)
			continue
		}
		s.log.Warn(fmt.Sprintf("export %s not restored: %s", r.ID, why), "export", r.ID, "chunk", r.Chunk)
		lost = append(lost, Unrestored{ID: r.ID, Chunk: r.Chunk, Client: r.Client, Reason: why})
		if err := s.cfg.Store.Delete(ctx, r.ID); err != nil {
			errs = append(errs, fmt.Errorf("rdma: delete unrestored export %s: %w", r.ID, err))
		}
	}
	return n, errors.Join(errs...)
}

// Unrestored is an export from before a restart that Restore did not
// bring back (its record is deleted, its token no longer works), and why.
type Unrestored struct {
	ID     ExportID
	Chunk  dcd.ChunkID
	Client string
	Reason string
}

// Restored is closed once the first Restore has finished; Unrestored then
// lists what it did not bring back. The API turns that into events, since
// Restore runs before anyone could watch its log.
func (s *Service) Restored() <-chan struct{} { return s.restored }

// Unrestored is what the first Restore did not bring back (nil before it
// finished).
func (s *Service) Unrestored() []Unrestored {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.unrestored)
}

func (s *Service) finishRestore(lost []Unrestored) {
	s.restoreOnce.Do(func() {
		s.mu.Lock()
		s.unrestored = lost
		s.mu.Unlock()
		close(s.restored)
	})
}

// restore registers r if the rule Restore states holds, or says why not.
// An error is a ledger failure that decides nothing.
func (s *Service) restore(ctx context.Context, r Record, now time.Time) (string, error) {
	if !r.ID.Valid() || !r.Perms.Valid() || r.Length == 0 || validClient(r.Client) != nil {
		return "invalid record", nil
	}
	if !r.Expiry.IsZero() && !now.Before(r.Expiry) {
		return "expired", nil
	}
	extents, granted, err := s.chunkExtents(ctx, r.Chunk)
	if errors.Is(err, dcd.ErrNotFound) || errors.Is(err, ErrNoExtents) {
		return "its chunk holds no capacity on the device any more", nil
	}
	if err != nil {
		return "", err
	}
	held := slices.ContainsFunc(granted, func(g dcd.Grant) bool {
		return slices.Contains(r.Grants, g.ID) && !g.Created.After(r.Created)
	})
	if !held {
		return "no grant has held its chunk's capacity continuously since it was made", nil
	}
	exp := Export{ID: r.ID, Chunk: r.Chunk, Client: r.Client, Perms: r.Perms, Offset: r.Offset, Length: r.Length,
		Expiry: r.Expiry, Created: r.Created}
	h, err := newHandle(exp, r.TokenHash, extents, s.cfg.Memory, s.cfg.Clock)
	if err != nil {
		return fmt.Sprintf("its bytes are no longer in the chunk's capacity (%v)", err), nil
	}
	h.grants = r.Grants
	h.observe = s.cfg.CountAccess
	return "", s.register(h)
}

// record is what the Store keeps of h.
func (h *Handle) record() Record {
	x := h.exp
	return Record{ID: x.ID, Chunk: x.Chunk, Client: x.Client, Perms: x.Perms, Offset: x.Offset, Length: x.Length,
		Expiry: x.Expiry, Created: x.Created, TokenHash: h.tokenHash, Grants: h.grants}
}
