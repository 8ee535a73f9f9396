package kv

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"cxlpool/dcd"
)

// Capacity is what the Service asks of the capacity Manager;
// *dcd.Manager satisfies it.
type Capacity interface {
	Reserve(ctx context.Context, r dcd.ReserveRequest) (dcd.Chunk, error)
	Grant(ctx context.Context, chunk dcd.ChunkID, host dcd.HostID) (dcd.Grant, error)
	Release(ctx context.Context, id dcd.GrantID) (dcd.Grant, error)
	DeleteChunk(ctx context.Context, id dcd.ChunkID) error
	Ledger() dcd.Ledger
}

// ChunkPrefix starts the ledger name of every chunk a namespace holds:
// "kv:" and the namespace's name.
const ChunkPrefix = "kv:"

// ServiceConfig holds the Service's dependencies.
type ServiceConfig struct {
	Capacity Capacity
	Index    IndexConfig // Grow is set by the Service
	Logger   *slog.Logger
	Rand     io.Reader // tokens (crypto/rand if nil)
	// Region is the sharable region chunks come from (-1: the first).
	Region int
	// Exporter lets remote racks reach namespaces (Export); nil: none.
	Exporter Exporter
}

// Service runs namespaces on shared Dynamic Capacity: each namespace's
// chunks are sharable chunks of the ledger, granted to every member host.
// It owns the Index. Methods are safe for concurrent use; changes to one
// namespace are serialised.
type Service struct {
	cfg ServiceConfig
	log *slog.Logger
	Ix  *Index

	mu   sync.Mutex
	nsMu map[string]*sync.Mutex
}

// CreateRequest asks for a namespace.
type CreateRequest struct {
	Name      string
	ChunkSize uint64 // bytes of each chunk (a multiple of the region's block size)
	Quota     uint64 // bytes it may grow to (≥ ChunkSize; 0: one chunk)
	Hosts     []dcd.HostID
}

// Token is a member host's secret for a namespace, shown once.
type Token [TokenSize]byte

// NewService opens the index and returns the Service.
func NewService(cfg ServiceConfig) (*Service, error) {
	if cfg.Capacity == nil {
		return nil, errors.New("kv: service needs the capacity manager")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Reader
	}
	if cfg.Index.Logger == nil {
		cfg.Index.Logger = cfg.Logger
	}
	s := &Service{cfg: cfg, log: cfg.Logger, nsMu: map[string]*sync.Mutex{}}
	cfg.Index.Grow = s.grow
	ix, err := OpenIndex(cfg.Index)
	if err != nil {
		return nil, err
	}
	s.Ix = ix
	return s, nil
}

// Close closes the index.
func (s *Service) Close() error { return s.Ix.Close() }

func (s *Service) lock(name string) func() {
	s.mu.Lock()
	l := s.nsMu[name]
	if l == nil {
		l = &sync.Mutex{}
		s.nsMu[name] = l
	}
	s.mu.Unlock()
	l.Lock()
	return l.Unlock
}

func (s *Service) token() (Token, error) {
	var t Token
	if _, err := io.ReadFull(s.cfg.Rand, t[:]); err != nil {
		return t, fmt.Errorf("kv: random: %w", err)
	}
	return t, nil
}

// Create makes a namespace with one chunk granted to every host and
// returns each host's token. On failure nothing is left: no namespace,
// no chunk, no grant.
func (s *Service) Create(ctx context.Context, r CreateRequest) (Namespace, map[dcd.HostID]Token, error) {
	if r.Quota == 0 {
		r.Quota = r.ChunkSize
	}
	if len(r.Hosts) == 0 {
		return Namespace{}, nil, fmt.Errorf("kv: namespace %q needs at least one member host: %w", r.Name, ErrInvalid)
	}
	hosts := slices.Clone(r.Hosts)
	slices.Sort(hosts)
	if len(slices.Compact(hosts)) != len(r.Hosts) {
		return Namespace{}, nil, fmt.Errorf("kv: hosts %v repeat: %w", r.Hosts, ErrInvalid)
	}
	if slices.Contains(hosts, RackHost) {
		return Namespace{}, nil, fmt.Errorf("kv: host %d is the remote racks' ID, not a head: %w", RackHost, ErrInvalid)
	}
	defer s.lock(r.Name)()
	if err := s.Ix.CreateNamespace(r.Name, r.ChunkSize, r.Quota); err != nil {
		return Namespace{}, nil, err
	}
	undo := func() {
		if err := s.Ix.DeleteNamespace(r.Name); err != nil {
			s.log.Warn("kv: undo namespace", "namespace", r.Name, "err", err)
		}
	}
	tokens := map[dcd.HostID]Token{}
	for _, h := range hosts {
		t, err := s.token()
		if err != nil {
			undo()
			return Namespace{}, nil, err
		}
		tokens[h] = t
	}
	if err := s.addChunk(ctx, r.Name, hosts); err != nil {
		undo()
		return Namespace{}, nil, err
	}
	for _, h := range hosts {
		if err := s.Ix.SetMember(r.Name, h, tokens[h]); err != nil {
			// The log failed: take everything back.
			_ = s.deleteLocked(context.WithoutCancel(ctx), r.Name)
			return Namespace{}, nil, err
		}
	}
	ns, err := s.Ix.Namespace(r.Name)
	s.log.Info("kv namespace created", "namespace", r.Name, "chunk", r.ChunkSize, "quota", r.Quota, "hosts", hosts)
	return ns, tokens, err
}

// addChunk reserves a sharable chunk, grants it to every host and records
// it; on failure it releases what it granted and deletes the chunk.
func (s *Service) addChunk(ctx context.Context, name string, hosts []dcd.HostID) error {
	ns, err := s.Ix.Namespace(name)
	if err != nil {
		return err
	}
	if ns.Stats.Capacity+ns.ChunkSize > ns.Quota {
		return fmt.Errorf("kv: namespace %s holds %d bytes, another chunk of %d would pass its quota %d: %w",
			name, ns.Stats.Capacity, ns.ChunkSize, ns.Quota, ErrNoSpace)
	}
	capa := s.cfg.Capacity
	c, err := capa.Reserve(ctx, dcd.ReserveRequest{Name: ChunkPrefix + name, Size: ns.ChunkSize, Region: s.region(), Sharable: true})
	if err != nil {
		return fmt.Errorf("kv: namespace %s: a chunk of %d bytes: %w", name, ns.ChunkSize, err)
	}
	var granted []dcd.Grant
	fail := func(err error) error {
		bg := context.WithoutCancel(ctx)
		for _, g := range granted {
			if _, rerr := capa.Release(bg, g.ID); rerr != nil {
				s.log.Warn("kv: undo grant", "grant", g.ID, "err", rerr)
			}
		}
		if derr := capa.DeleteChunk(bg, c.ID); derr != nil {
			s.log.Warn("kv: undo chunk", "chunk", c.ID, "err", derr)
		}
		return err
	}
	for _, h := range hosts {
		g, err := capa.Grant(ctx, c.ID, h)
		if err != nil {
			return fail(fmt.Errorf("kv: namespace %s: grant chunk %d to host %d: %w", name, c.ID, h, err))
		}
		granted = append(granted, g)
	}
	full, err := capa.Ledger().Chunk(ctx, c.ID)
	if err != nil {
		return fail(err)
	}
	info := ChunkInfo{ID: c.ID, Tag: full.Tag, Size: full.Size, Extents: full.Extents}
	// An exported namespace's rack reaches the chunk as soon as the index
	// hands out blocks in it.
	exp, err := s.exportNew(ctx, name, info)
	if err != nil {
		return fail(err)
	}
	if err := s.Ix.AddChunk(name, info); err != nil {
		if exp != "" {
			_ = s.revoke(context.WithoutCancel(ctx), exp)
		}
		return fail(err)
	}
	s.log.Info("kv namespace grew", "namespace", name, "chunk", c.ID, "tag", full.Tag, "bytes", full.Size)
	return nil
}

func (s *Service) region() int {
	if s.cfg.Region == 0 {
		return -1
	}
	return s.cfg.Region
}

// grow is the Index's Grow: a full namespace under its quota gets a chunk.
func (s *Service) grow(ctx context.Context, name string) error {
	defer s.lock(name)()
	ns, err := s.Ix.Namespace(name)
	if err != nil {
		return err
	}
	return s.addChunk(ctx, name, ns.Members)
}

// Join grants every chunk of the namespace to host and returns its token
// (a new one if it was a member already).
func (s *Service) Join(ctx context.Context, name string, host dcd.HostID) (Token, error) {
	if host == RackHost {
		return Token{}, fmt.Errorf("kv: host %d is the remote racks' ID, not a head (export the namespace instead): %w", RackHost, ErrInvalid)
	}
	defer s.lock(name)()
	ns, err := s.Ix.Namespace(name)
	if err != nil {
		return Token{}, err
	}
	tok, err := s.token()
	if err != nil {
		return Token{}, err
	}
	capa := s.cfg.Capacity
	var granted []dcd.Grant
	for _, c := range ns.Chunks {
		if held, err := s.holds(ctx, c.ID, host); err != nil {
			return Token{}, err
		} else if held {
			continue
		}
		g, err := capa.Grant(ctx, c.ID, host)
		if err != nil {
			for _, g := range granted {
				_, _ = capa.Release(context.WithoutCancel(ctx), g.ID)
			}
			return Token{}, fmt.Errorf("kv: namespace %s: grant chunk %d to host %d: %w", name, c.ID, host, err)
		}
		granted = append(granted, g)
	}
	if err := s.Ix.SetMember(name, host, tok); err != nil {
		return Token{}, err
	}
	s.log.Info("kv host joined", "namespace", name, "host", host)
	return tok, nil
}

func (s *Service) holds(ctx context.Context, c dcd.ChunkID, h dcd.HostID) (bool, error) {
	gs, err := s.cfg.Capacity.Ledger().Grants(ctx, dcd.GrantFilter{Chunk: c, Host: &h, Active: true})
	return len(gs) > 0, err
}

// Leave removes host from the namespace (its sessions end) and releases
// its grants of the namespace's chunks.
func (s *Service) Leave(ctx context.Context, name string, host dcd.HostID) error {
	defer s.lock(name)()
	ns, err := s.Ix.Namespace(name)
	if err != nil {
		return err
	}
	if !slices.Contains(ns.Members, host) {
		return fmt.Errorf("kv: host %d is not a member of %s: %w", host, name, ErrNotFound)
	}
	if len(ns.Members) == 1 {
		return fmt.Errorf("kv: host %d is the last member of %s (delete the namespace instead): %w", host, name, ErrConflict)
	}
	if err := s.Ix.RemoveMember(name, host); err != nil {
		return err
	}
	var errs []error
	for _, c := range ns.Chunks {
		errs = append(errs, s.releaseHost(ctx, c.ID, host))
	}
	s.log.Info("kv host left", "namespace", name, "host", host)
	return errors.Join(errs...)
}

func (s *Service) releaseHost(ctx context.Context, c dcd.ChunkID, h dcd.HostID) error {
	gs, err := s.cfg.Capacity.Ledger().Grants(ctx, dcd.GrantFilter{Chunk: c, Host: &h, Active: true})
	if err != nil {
		return err
	}
	var errs []error
	for _, g := range gs {
		if _, err := s.cfg.Capacity.Release(ctx, g.ID); err != nil {
			errs = append(errs, fmt.Errorf("kv: release chunk %d from host %d: %w", c, h, err))
		}
	}
	return errors.Join(errs...)
}

// freeChunk releases every grant of a chunk and deletes it from the ledger.
func (s *Service) freeChunk(ctx context.Context, c dcd.ChunkID) error {
	gs, err := s.cfg.Capacity.Ledger().Grants(ctx, dcd.GrantFilter{Chunk: c, Active: true})
	if err != nil {
		return err
	}
	for _, g := range gs {
		if _, err := s.cfg.Capacity.Release(ctx, g.ID); err != nil {
			return fmt.Errorf("kv: release chunk %d from host %d: %w", c, g.Host, err)
		}
	}
	if err := s.cfg.Capacity.DeleteChunk(ctx, c); err != nil && !errors.Is(err, dcd.ErrNotFound) {
		return err
	}
	return nil
}

// Resize sets the quota. Under what the namespace holds it shrinks first:
// coldest chunks go (their blocks evicted, durably), and a chunk with
// pinned or reserved blocks stops the shrink (ErrPinned) with the quota
// unchanged and the namespace as it was less the chunks already freed.
func (s *Service) Resize(ctx context.Context, name string, quota uint64) (Namespace, error) {
	defer s.lock(name)()
	ns, err := s.Ix.Namespace(name)
	if err != nil {
		return Namespace{}, err
	}
	if quota < ns.ChunkSize {
		return Namespace{}, fmt.Errorf("kv: quota %d under one chunk of %d: %w", quota, ns.ChunkSize, ErrInvalid)
	}
	capacity := ns.Stats.Capacity
	if capacity > quota {
		order, err := s.Ix.ColdestChunks(name)
		if err != nil {
			return Namespace{}, err
		}
		for _, id := range order {
			if capacity <= quota {
				break
			}
			if err := s.removeChunk(ctx, name, id); err != nil {
				v, _ := s.Ix.Namespace(name)
				return v, err
			}
			capacity -= ns.ChunkSize
		}
	}
	if err := s.Ix.SetQuota(name, quota); err != nil {
		return Namespace{}, err
	}
	return s.Ix.Namespace(name)
}

// removeChunk drains a chunk, forgets it in the index, then gives its
// capacity back. A crash between the two leaves a "kv:" chunk the index
// does not know; Sweep frees it at the next start.
func (s *Service) removeChunk(ctx context.Context, name string, id dcd.ChunkID) error {
	if err := s.Ix.DrainChunk(name, id); err != nil {
		s.Ix.Undrain(name, id)
		return err
	}
	if err := s.Ix.RemoveChunk(name, id); err != nil {
		s.Ix.Undrain(name, id)
		return err
	}
	// Revocation before release: once the capacity leaves, no rack may
	// touch it.
	if err := s.unexportChunk(ctx, id); err != nil {
		return err
	}
	if err := s.freeChunk(ctx, id); err != nil {
		return fmt.Errorf("kv: chunk %d left the namespace but not the ledger: %w", id, err)
	}
	return nil
}

// Delete removes a namespace: its sessions end, its blocks go, its
// chunks are released and deleted.
func (s *Service) Delete(ctx context.Context, name string) error {
	defer s.lock(name)()
	return s.deleteLocked(ctx, name)
}

func (s *Service) deleteLocked(ctx context.Context, name string) error {
	if err := s.Ix.BeginDelete(name); err != nil {
		return err
	}
	ns, err := s.Ix.Namespace(name)
	if err != nil {
		return err
	}
	for _, c := range ns.Chunks {
		if err := s.removeChunk(ctx, name, c.ID); err != nil {
			return err
		}
	}
	if err := s.Ix.DeleteNamespace(name); err != nil {
		return err
	}
	s.log.Info("kv namespace deleted", "namespace", name)
	return nil
}

// Sweep frees ledger chunks named for a namespace that the index does
// not hold (a crash between the two): run at start, after reconcile.
func (s *Service) Sweep(ctx context.Context) error {
	chunks, err := s.cfg.Capacity.Ledger().Chunks(ctx)
	if err != nil {
		return err
	}
	known := map[dcd.ChunkID]bool{}
	for _, ns := range s.Ix.Namespaces() {
		for _, c := range ns.Chunks {
			known[c.ID] = true
		}
	}
	var errs []error
	for _, c := range chunks {
		if !strings.HasPrefix(c.Name, ChunkPrefix) || known[c.ID] {
			continue
		}
		s.log.Warn("kv: freeing a namespace chunk the index does not hold", "chunk", c.ID, "name", c.Name)
		errs = append(errs, s.freeChunk(ctx, c.ID))
	}
	return errors.Join(errs...)
}

// Namespaces lists every namespace.
func (s *Service) Namespaces() []Namespace { return s.Ix.Namespaces() }

// Namespace is one namespace.
func (s *Service) Namespace(name string) (Namespace, error) { return s.Ix.Namespace(name) }

// RunReaper reaps expired sessions every interval until ctx ends.
func (s *Service) RunReaper(ctx context.Context, every time.Duration) { s.Ix.RunReaper(ctx, every) }

// DropLost forgets, in every namespace, the chunks whose capacity no
// host holds any more (the ledger has no active grant of them: reconcile
// found the device without it, e.g. the in-process virtual box that died
// with the daemon), with their blocks: their locations would point at
// memory that is not theirs. Each is logged with why, announced (Cleared
// when nothing of the namespace is left, else Removed, reason lost) and
// then deleted from the ledger. Run at start after reconcile, before the
// protocol servers; a namespace left without chunks grows again on its
// next put.
func (s *Service) DropLost(ctx context.Context) error {
	var errs []error
	for _, ns := range s.Ix.Namespaces() {
		unlock := s.lock(ns.Name)
		errs = append(errs, s.dropLostLocked(ctx, ns.Name))
		unlock()
	}
	return errors.Join(errs...)
}

func (s *Service) dropLostLocked(ctx context.Context, name string) error {
	ns, err := s.Ix.Namespace(name)
	if err != nil {
		return err
	}
	var lost []dcd.ChunkID
	why := map[dcd.ChunkID]string{}
	for _, c := range ns.Chunks {
		gs, err := s.cfg.Capacity.Ledger().Grants(ctx, dcd.GrantFilter{Chunk: c.ID})
		if err != nil {
			return fmt.Errorf("kv: namespace %s: grants of chunk %d: %w", name, c.ID, err)
		}
		reason := "no host holds it"
		held := false
		for _, g := range gs {
			held = held || g.State.Active()
			if g.State == dcd.GrantLost && g.Reason != "" {
				reason = g.Reason
			}
		}
		if !held {
			lost = append(lost, c.ID)
			why[c.ID] = reason
		}
	}
	if len(lost) == 0 {
		return nil
	}
	n, err := s.Ix.LoseChunks(name, lost)
	if err != nil {
		return fmt.Errorf("kv: namespace %s: forgetting lost chunks: %w", name, err)
	}
	for _, id := range lost {
		s.log.Error("kv: namespace chunk lost with its blocks: the device no longer holds its capacity",
			"namespace", name, "chunk", id, "reason", why[id], "chunks_left", len(ns.Chunks)-len(lost))
	}
	s.log.Warn("kv: blocks dropped: the pool memory behind them is gone", "namespace", name, "blocks", n, "chunks", len(lost))
	var errs []error
	for _, id := range lost {
		if err := s.unexportChunk(ctx, id); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := s.freeChunk(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("kv: lost chunk %d left the namespace but not the ledger: %w", id, err))
		}
	}
	return errors.Join(errs...)
}
