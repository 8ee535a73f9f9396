package kv

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"cxlpool/dcd"
	"cxlpool/fabric/cci"
	"cxlpool/rdma"
)

// Exporter is what the Service asks of the box's export service to let a
// remote rack reach a namespace's chunks; *rdma.Service satisfies it.
type Exporter interface {
	Create(ctx context.Context, r rdma.CreateRequest) (rdma.Export, error)
	Revoke(ctx context.Context, id rdma.ExportID) error
	RevokeChunk(ctx context.Context, chunk dcd.ChunkID) (int, error)
	List() []rdma.Export
}

// ChunkExport is the export through which a rack reaches one chunk of a
// namespace.
type ChunkExport struct {
	Chunk  dcd.ChunkID
	Tag    cci.Tag
	Export rdma.ExportID
	Length uint64
}

// RemoteAccess is what a rack needs to use a namespace: its token (the
// same secret for the index, as host RackHost, and for every chunk's
// export; shown only by Export) and the exports of the chunks.
type RemoteAccess struct {
	Namespace string
	Rack      string
	Token     Token
	Exports   []ChunkExport
}

// ErrNoExporter: the box runs without an export service (no memory to
// export from), so no namespace can be exported.
var ErrNoExporter = fmt.Errorf("kv: the box has no export service (no DAX device or memory file for exports): %w", ErrConflict)

// Export exports every chunk of the namespace to rack, read-write, with
// one new per-namespace token, and makes the token the rack's key to the
// index. Chunks added later are exported with the same token; chunks that
// leave are revoked before their capacity is released. Exporting again
// (to the same or another rack) replaces the token and the exports: the
// old ones are revoked. On failure nothing new is left and the old
// export stands.
func (s *Service) Export(ctx context.Context, name, rack string) (RemoteAccess, error) {
	if s.cfg.Exporter == nil {
		return RemoteAccess{}, ErrNoExporter
	}
	defer s.lock(name)()
	ns, err := s.Ix.Namespace(name)
	if err != nil {
		return RemoteAccess{}, err
	}
	old := s.exportsOf(ns)
	tok, err := s.token()
	if err != nil {
		return RemoteAccess{}, err
	}
	ra := RemoteAccess{Namespace: name, Rack: rack, Token: tok}
	undo := func() {
		for _, e := range ra.Exports {
			if err := s.cfg.Exporter.Revoke(context.WithoutCancel(ctx), e.Export); err != nil {
				s.log.Warn("kv: undo export", "export", e.Export, "err", err)
			}
		}
	}
	for _, c := range ns.Chunks {
		e, err := s.exportChunk(ctx, name, c, rack, TokenHash(tok))
		if err != nil {
			undo()
			return RemoteAccess{}, err
		}
		ra.Exports = append(ra.Exports, e)
	}
	if err := s.Ix.SetRack(name, rack, tok); err != nil {
		undo()
		return RemoteAccess{}, err
	}
	var errs []error
	for _, e := range old {
		errs = append(errs, s.revoke(ctx, e.Export))
	}
	s.log.Info("kv namespace exported", "namespace", name, "rack", rack, "chunks", len(ra.Exports))
	return ra, errors.Join(errs...)
}

func (s *Service) exportChunk(ctx context.Context, name string, c ChunkInfo, rack string, hash [32]byte) (ChunkExport, error) {
	exp, err := s.cfg.Exporter.Create(ctx, rdma.CreateRequest{Chunk: c.ID, Client: rack, Perms: rdma.PermReadWrite,
		Hash: rdma.TokenHash(hash)})
	if err != nil {
		return ChunkExport{}, fmt.Errorf("kv: namespace %s: export chunk %d to %q: %w", name, c.ID, rack, err)
	}
	return ChunkExport{Chunk: c.ID, Tag: c.Tag, Export: exp.ID, Length: exp.Length}, nil
}

func (s *Service) revoke(ctx context.Context, id rdma.ExportID) error {
	if err := s.cfg.Exporter.Revoke(ctx, id); err != nil && !errors.Is(err, rdma.ErrNotFound) {
		return fmt.Errorf("kv: revoke export %s: %w", id, err)
	}
	return nil
}

// exportsOf are the exports of the namespace's chunks to its rack, in
// chunk order.
func (s *Service) exportsOf(ns Namespace) []ChunkExport {
	if s.cfg.Exporter == nil || ns.Rack == "" {
		return nil
	}
	tags := map[dcd.ChunkID]cci.Tag{}
	for _, c := range ns.Chunks {
		tags[c.ID] = c.Tag
	}
	var out []ChunkExport
	for _, e := range s.cfg.Exporter.List() {
		if tag, ok := tags[e.Chunk]; ok && e.Client == ns.Rack {
			out = append(out, ChunkExport{Chunk: e.Chunk, Tag: tag, Export: e.ID, Length: e.Length})
		}
	}
	slices.SortFunc(out, func(a, b ChunkExport) int { return int(a.Chunk) - int(b.Chunk) })
	return out
}

// Exports is the namespace's remote access without its token (the rack
// refetches it when the namespace grows); Rack "" if it is not exported.
func (s *Service) Exports(name string) (RemoteAccess, error) {
	ns, err := s.Ix.Namespace(name)
	if err != nil {
		return RemoteAccess{}, err
	}
	return RemoteAccess{Namespace: name, Rack: ns.Rack, Exports: s.exportsOf(ns)}, nil
}

// Unexport ends the rack's access: its index sessions end, then every
// export of the namespace's chunks to it is revoked (in-flight accesses
// drained).
func (s *Service) Unexport(ctx context.Context, name string) error {
	defer s.lock(name)()
	ns, err := s.Ix.Namespace(name)
	if err != nil {
		return err
	}
	if ns.Rack == "" {
		return fmt.Errorf("kv: namespace %s is not exported: %w", name, ErrConflict)
	}
	exps := s.exportsOf(ns)
	if err := s.Ix.RemoveMember(name, RackHost); err != nil {
		return err
	}
	var errs []error
	for _, e := range exps {
		errs = append(errs, s.revoke(ctx, e.Export))
	}
	s.log.Info("kv namespace unexported", "namespace", name, "rack", ns.Rack)
	return errors.Join(errs...)
}

// exportNew exports a chunk just granted to the members to the
// namespace's rack, if it has one (addChunk, before the index holds it).
func (s *Service) exportNew(ctx context.Context, name string, c ChunkInfo) (rdma.ExportID, error) {
	if s.cfg.Exporter == nil {
		return "", nil
	}
	hash, rack, ok, err := s.Ix.RackToken(name)
	if err != nil || !ok {
		return "", err
	}
	e, err := s.exportChunk(ctx, name, c, rack, hash)
	return e.Export, err
}

// unexportChunk revokes every export of a chunk that leaves its
// namespace, before its capacity is released.
func (s *Service) unexportChunk(ctx context.Context, id dcd.ChunkID) error {
	if s.cfg.Exporter == nil {
		return nil
	}
	if _, err := s.cfg.Exporter.RevokeChunk(ctx, id); err != nil {
		return fmt.Errorf("kv: revoke the exports of chunk %d: %w", id, err)
	}
	return nil
}

// ExportMissing exports again, with the namespace's token, every chunk of
// an exported namespace that has no export to its rack: the export
// service restores its exports at start only where the capacity under
// them is unchanged, and an export lost so would leave the rack without
// that chunk. Run after the export service's Restore.
func (s *Service) ExportMissing(ctx context.Context) error {
	if s.cfg.Exporter == nil {
		return nil
	}
	var errs []error
	for _, ns := range s.Ix.Namespaces() {
		if ns.Rack == "" {
			continue
		}
		errs = append(errs, s.exportMissing(ctx, ns.Name))
	}
	return errors.Join(errs...)
}

func (s *Service) exportMissing(ctx context.Context, name string) error {
	defer s.lock(name)()
	ns, err := s.Ix.Namespace(name)
	if err != nil || ns.Rack == "" {
		return nil // deleted or unexported meanwhile
	}
	have := map[dcd.ChunkID]bool{}
	for _, e := range s.exportsOf(ns) {
		have[e.Chunk] = true
	}
	var errs []error
	for _, c := range ns.Chunks {
		if have[c.ID] {
			continue
		}
		id, err := s.exportNew(ctx, name, c)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.log.Warn("kv: exported a chunk again whose export was lost", "namespace", name, "chunk", c.ID, "export", id)
	}
	return errors.Join(errs...)
}
