package dcd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"cxlpool/fabric"
	"cxlpool/fabric/cci"
)

// The invariant checker compares the ledger, the device and the exports
// of pool memory to remote racks in one snapshot and lists every way they
// disagree. It is what the tests, the daemon's start and the
// CxlPool.CheckConsistency action use to say "the ledger gives these
// guarantees right now":
//
//   - every granted grant: the device holds exactly its extents, under its
//     chunk's tag, for its host;
//   - everything the device holds (or offers) is explained: by an active
//     grant of that host for the tag's chunk, or by a recorded orphan;
//   - no two holders share a DPA byte, in the ledger or on the device,
//     unless both are grants of the same sharable chunk;
//   - recorded orphans are on the device and overlap no grant;
//   - every live export reaches only bytes that a granted grant of its
//     chunk holds, and that the device holds under the chunk's tag.
//
// It is a snapshot check: valid only when no flow is in flight, so call
// Manager.Settle first (Manager.CheckInvariants does). The ledger is read
// before and after the device and the exports; if it changed meanwhile the
// check returns ErrConflict instead of judging a moving target. Grants in
// adding or releasing are in flight by definition: they are counted as
// Unsettled and their capacity is taken as explained, not judged.

// Invariant rules, the Rule of each Violation.
const (
	RuleGrantOnDevice    = "grant-held-on-device"   // a granted grant's extents are what the device holds
	RuleDeviceExplained  = "device-explained"       // device capacity belongs to a grant or an orphan
	RuleNoOverlap        = "no-dpa-overlap"         // one holder per DPA byte unless shared
	RuleOrphan           = "orphan-on-device"       // an orphan is on the device and overlaps no grant
	RuleExportBacked     = "export-backed-by-grant" // an export's bytes are held by a granted grant
	RuleGrantHasChunk    = "grant-has-chunk"        // an active grant names a chunk the ledger has
	RuleExportChunkKnown = "export-chunk-known"     // an export names a chunk the ledger has
)

// DPARange is a range of device physical addresses.
type DPARange struct {
	DPA, Length uint64
}

// End is the first DPA after the range.
func (r DPARange) End() uint64 { return r.DPA + r.Length }

// ExportRange is the device capacity one live export reaches.
type ExportRange struct {
	Export string // the export's ID
	Chunk  ChunkID
	Ranges []DPARange
}

// ExportView lists the live exports for the checker. rdma.Service
// implements it (rdma/invariants.go); nil means no exports.
type ExportView interface {
	ExportRanges() []ExportRange
}

// Violation is one broken invariant, in words that name the grant, host,
// chunk, tag, export and DPA range concerned.
type Violation struct {
	Rule    string
	Message string
}

// InvariantReport is what a check looked at and what it found.
type InvariantReport struct {
	Hosts, Chunks, Grants, Orphans, Exports int
	// Unsettled counts active grants in adding or releasing: flows in
	// flight (or abandoned until the next reconcile), not judged.
	Unsettled  int
	Violations []Violation
}

// OK reports whether the check found no violation.
func (r InvariantReport) OK() bool { return len(r.Violations) == 0 }

// Err is nil for a clean report, else an error listing every violation.
func (r InvariantReport) Err() error {
	if r.OK() {
		return nil
	}
	msgs := make([]string, len(r.Violations))
	for i, v := range r.Violations {
		msgs[i] = v.Rule + ": " + v.Message
	}
	return fmt.Errorf("%d invariant violations:\n%s", len(r.Violations), strings.Join(msgs, "\n"))
}

// invariantAttempts is how often Manager.CheckInvariants settles and
// checks again when the ledger moved under a check.
const invariantAttempts = 3

// CheckInvariants waits for the flows in flight to finish (Settle) and
// checks the ledger, the device and exports (nil: none) against each
// other. A check the ledger changed under is retried a few times, then
// returned as ErrConflict.
func (m *Manager) CheckInvariants(ctx context.Context, exports ExportView) (InvariantReport, error) {
	var err error
	for range invariantAttempts {
		if err = m.Settle(ctx); err != nil {
			return InvariantReport{}, fmt.Errorf("check invariants: %w", err)
		}
		var rep InvariantReport
		rep, err = CheckInvariants(ctx, m.cfg.Ledger, m.cfg.Device, exports)
		if !errors.Is(err, ErrConflict) {
			return rep, err
		}
	}
	return InvariantReport{}, err
}

// ledgerSnapshot is the part of the ledger the checker judges.
type ledgerSnapshot struct {
	hosts   []Host
	chunks  []Chunk
	grants  []Grant
	orphans []Orphan
}

func readLedger(ctx context.Context, l Ledger) (ledgerSnapshot, error) {
	var s ledgerSnapshot
	var err error
	if s.hosts, err = l.Hosts(ctx); err != nil {
		return s, fmt.Errorf("check invariants: hosts: %w", err)
	}
	if s.chunks, err = l.Chunks(ctx); err != nil {
		return s, fmt.Errorf("check invariants: chunks: %w", err)
	}
	if s.grants, err = l.Grants(ctx, GrantFilter{Active: true}); err != nil {
		return s, fmt.Errorf("check invariants: grants: %w", err)
	}
	if s.orphans, err = l.Orphans(ctx); err != nil {
		return s, fmt.Errorf("check invariants: orphans: %w", err)
	}
	slices.SortFunc(s.hosts, func(a, b Host) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(s.chunks, func(a, b Chunk) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(s.grants, func(a, b Grant) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(s.orphans, func(a, b Orphan) int {
		return cmp.Or(cmp.Compare(a.Host, b.Host), strings.Compare(a.Tag.String(), b.Tag.String()))
	})
	return s, nil
}

// same reports whether nothing the checker judges changed between a and b.
func (a ledgerSnapshot) same(b ledgerSnapshot) bool {
	sameGrant := func(x, y Grant) bool {
		return x.ID == y.ID && x.State == y.State && x.Updated.Equal(y.Updated) && slices.Equal(x.Extents, y.Extents)
	}
	sameOrphan := func(x, y Orphan) bool {
		return x.Host == y.Host && x.Tag == y.Tag && slices.Equal(x.Extents, y.Extents)
	}
	sameChunk := func(x, y Chunk) bool { return x.ID == y.ID && x.Tag == y.Tag }
	return slices.EqualFunc(a.grants, b.grants, sameGrant) && slices.EqualFunc(a.orphans, b.orphans, sameOrphan) &&
		slices.EqualFunc(a.chunks, b.chunks, sameChunk)
}

// CheckInvariants checks the ledger, the device and exports (nil: none)
// against each other; see the package's invariant list above. It reads
// the ledger, every host's extent list and the tag list, the exports, and
// the ledger again; an error is returned only if one of those reads fails
// or the ledger changed meanwhile (ErrConflict: a flow is in flight).
func CheckInvariants(ctx context.Context, ledger Ledger, device fabric.Device, exports ExportView) (InvariantReport, error) {
	var rep InvariantReport
	before, err := readLedger(ctx, ledger)
	if err != nil {
		return rep, err
	}
	tags, err := device.Tags(ctx)
	if err != nil {
		return rep, fmt.Errorf("check invariants: tag list: %w", err)
	}
	held := make(map[HostID][]cci.Extent, len(before.hosts))
	for _, h := range before.hosts {
		l, err := device.Extents(ctx, uint16(h.ID))
		if err != nil {
			return rep, fmt.Errorf("check invariants: extent list of host %d: %w", h.ID, err)
		}
		held[h.ID] = l.Extents
	}
	var ex []ExportRange
	if exports != nil {
		ex = exports.ExportRanges()
	}
	after, err := readLedger(ctx, ledger)
	if err != nil {
		return rep, err
	}
	if !before.same(after) {
		return rep, fmt.Errorf("check invariants: the ledger changed during the check (a flow is in flight; settle first): %w", ErrConflict)
	}
	c := checker{snap: before, tags: tags, held: held, exports: ex}
	return c.run(), nil
}

// checker holds one snapshot and the violations found in it.
type checker struct {
	snap    ledgerSnapshot
	tags    fabric.TagList
	held    map[HostID][]cci.Extent
	exports []ExportRange

	byID  map[ChunkID]Chunk
	byTag map[cci.Tag]Chunk
	rep   InvariantReport
}

func (c *checker) add(rule, format string, args ...any) {
	c.rep.Violations = append(c.rep.Violations, Violation{Rule: rule, Message: fmt.Sprintf(format, args...)})
}

func (c *checker) run() InvariantReport {
	c.rep.Hosts, c.rep.Chunks, c.rep.Grants = len(c.snap.hosts), len(c.snap.chunks), len(c.snap.grants)
	c.rep.Orphans, c.rep.Exports = len(c.snap.orphans), len(c.exports)
	c.byID = make(map[ChunkID]Chunk, len(c.snap.chunks))
	c.byTag = make(map[cci.Tag]Chunk, len(c.snap.chunks))
	for _, ch := range c.snap.chunks {
		c.byID[ch.ID] = ch
		c.byTag[ch.Tag] = ch
	}
	c.grantsOnDevice()
	c.deviceExplained()
	c.overlaps()
	c.orphans()
	c.exportsBacked()
	return c.rep
}

// grantsOnDevice: a granted grant's extents are exactly what its host
// holds under its chunk's tag.
func (c *checker) grantsOnDevice() {
	for _, g := range c.snap.grants {
		ch, ok := c.byID[g.Chunk]
		if !ok {
			c.add(RuleGrantHasChunk, "grant %d (host %d, %s) names chunk %d, which the ledger does not have", g.ID, g.Host, g.State, g.Chunk)
			continue
		}
		if g.State != GrantGranted {
			c.rep.Unsettled++
			continue
		}
		dev := tagged(c.held[g.Host], ch.Tag)
		if !sameExtents(dev, g.Extents) {
			c.add(RuleGrantOnDevice, "grant %d (chunk %d, host %d) is granted with %s in the ledger, but the device holds %s for host %d under the chunk's tag %s",
				g.ID, g.Chunk, g.Host, fmtExtents(g.Extents), fmtExtents(dev), g.Host, ch.Tag)
		}
	}
}

// deviceExplained: what each host holds or is offered on the device is an
// active grant of that host for the tag's chunk, or a recorded orphan.
func (c *checker) deviceExplained() {
	type key struct {
		host HostID
		tag  cci.Tag
	}
	active := make(map[key]GrantState)
	for _, g := range c.snap.grants {
		if ch, ok := c.byID[g.Chunk]; ok {
			active[key{g.Host, ch.Tag}] = g.State
		}
	}
	orphan := make(map[key]bool)
	for _, o := range c.snap.orphans {
		orphan[key{o.Host, o.Tag}] = true
	}
	for _, h := range c.snap.hosts {
		byTag := make(map[cci.Tag][]cci.Extent)
		var order []cci.Tag
		for _, e := range c.held[h.ID] {
			if _, seen := byTag[e.Tag]; !seen {
				order = append(order, e.Tag)
			}
			byTag[e.Tag] = append(byTag[e.Tag], e)
		}
		for _, tag := range order {
			k := key{h.ID, tag}
			if _, ok := active[k]; ok || orphan[k] {
				continue
			}
			if ch, ok := c.byTag[tag]; ok {
				c.add(RuleDeviceExplained, "host %d holds %s under chunk %d's tag %s, but the ledger has no active grant of chunk %d to host %d",
					h.ID, fmtExtents(byTag[tag]), ch.ID, tag, ch.ID, h.ID)
			} else {
				c.add(RuleDeviceExplained, "host %d holds %s under tag %s, which no chunk has and no orphan records",
					h.ID, fmtExtents(byTag[tag]), tag)
			}
		}
		for _, t := range c.tags.Tags {
			if !t.HasPending(uint16(h.ID)) {
				continue
			}
			if st, ok := active[key{h.ID, t.Tag}]; ok && st == GrantAdding {
				continue
			}
			c.add(RuleDeviceExplained, "host %d has a pending offer under tag %s, but the ledger has no grant being added for it", h.ID, t.Tag)
		}
	}
}

// holder is one claim on a DPA range, for the overlap sweep.
type holder struct {
	DPARange
	what    string // for messages: "grant 3 (chunk 1, host 2)"
	ofChunk bool   // a chunk's capacity (not an orphan or an unknown tag)
	chunk   ChunkID
	host    HostID
	shared  bool // the chunk is sharable
}

// mayShare reports whether a and b may hold the same bytes: grants of the
// same sharable chunk to different hosts.
func mayShare(a, b holder) bool {
	return a.ofChunk && b.ofChunk && a.chunk == b.chunk && a.shared && a.host != b.host
}

// overlaps: no DPA byte has two holders, in the ledger (grants with
// extents, orphans) or on the device (every host's extents), unless both
// are grants of the same sharable chunk.
func (c *checker) overlaps() {
	var ledger []holder
	for _, g := range c.snap.grants {
		ch := c.byID[g.Chunk]
		for _, e := range g.Extents {
			ledger = append(ledger, holder{DPARange: DPARange{e.DPA, e.Length},
				what: fmt.Sprintf("grant %d (chunk %d, host %d)", g.ID, g.Chunk, g.Host), ofChunk: true, chunk: g.Chunk, host: g.Host, shared: ch.Sharable})
		}
	}
	for _, o := range c.snap.orphans {
		for _, e := range o.Extents {
			ledger = append(ledger, holder{DPARange: DPARange{e.DPA, e.Length},
				what: fmt.Sprintf("the orphan of host %d under tag %s", o.Host, o.Tag), host: o.Host})
		}
	}
	sweep(ledger, func(a, b holder, r DPARange) {
		rule := RuleNoOverlap
		if !a.ofChunk || !b.ofChunk {
			rule = RuleOrphan
		}
		c.add(rule, "in the ledger, %s and %s both hold %s", a.what, b.what, fmtRange(r))
	})
	var device []holder
	for _, h := range c.snap.hosts {
		for _, e := range c.held[h.ID] {
			d := holder{DPARange: DPARange{e.DPA, e.Length}, host: h.ID,
				what: fmt.Sprintf("host %d (tag %s)", h.ID, e.Tag)}
			if ch, ok := c.byTag[e.Tag]; ok {
				d.ofChunk, d.chunk, d.shared = true, ch.ID, ch.Sharable
				d.what = fmt.Sprintf("host %d (chunk %d's tag %s)", h.ID, ch.ID, e.Tag)
			}
			device = append(device, d)
		}
	}
	sweep(device, func(a, b holder, r DPARange) {
		c.add(RuleNoOverlap, "on the device, %s and %s both hold %s", a.what, b.what, fmtRange(r))
	})
}

// sweep calls bad for every pair of holders that overlap and may not
// share, with the overlapping range.
func sweep(hs []holder, bad func(a, b holder, r DPARange)) {
	slices.SortStableFunc(hs, func(a, b holder) int { return cmp.Compare(a.DPA, b.DPA) })
	var open []holder // holders whose range reaches past the current start
	for _, h := range hs {
		open = slices.DeleteFunc(open, func(o holder) bool { return o.End() <= h.DPA })
		for _, o := range open {
			if !mayShare(o, h) {
				bad(o, h, DPARange{h.DPA, min(o.End(), h.End()) - h.DPA})
			}
		}
		if h.Length > 0 {
			open = append(open, h)
		}
	}
}

// orphans: a recorded orphan is still what its host holds under its tag.
// (Overlaps with grants are found by the sweep.)
func (c *checker) orphans() {
	for _, o := range c.snap.orphans {
		dev := tagged(c.held[o.Host], o.Tag)
		if len(dev) == 0 {
			c.add(RuleOrphan, "the orphan of host %d under tag %s (%s) is no longer on the device", o.Host, o.Tag, fmtExtents(o.Extents))
		}
	}
}

// exportsBacked: every byte a live export reaches is held by a granted
// grant of its chunk in the ledger, and by some host under the chunk's tag
// on the device.
func (c *checker) exportsBacked() {
	granted := make(map[ChunkID][]Grant)
	for _, g := range c.snap.grants {
		if g.State == GrantGranted {
			granted[g.Chunk] = append(granted[g.Chunk], g)
		}
	}
	for _, x := range c.exports {
		ch, ok := c.byID[x.Chunk]
		if !ok {
			c.add(RuleExportChunkKnown, "export %s names chunk %d, which the ledger does not have", x.Export, x.Chunk)
			continue
		}
		var onDevice []cci.Extent
		for _, h := range c.snap.hosts {
			onDevice = append(onDevice, tagged(c.held[h.ID], ch.Tag)...)
		}
		for _, r := range x.Ranges {
			backed := false
			for _, g := range granted[x.Chunk] {
				if covers(g.Extents, r) {
					backed = true
					break
				}
			}
			if !backed {
				c.add(RuleExportBacked, "export %s (chunk %d) reaches %s, which no granted grant of chunk %d holds in the ledger",
					x.Export, x.Chunk, fmtRange(r), x.Chunk)
			}
			if !covers(onDevice, r) {
				c.add(RuleExportBacked, "export %s (chunk %d) reaches %s, which no host holds on the device under the chunk's tag %s",
					x.Export, x.Chunk, fmtRange(r), ch.Tag)
			}
		}
	}
}

// tagged returns the extents in es that carry tag.
func tagged(es []cci.Extent, tag cci.Tag) []cci.Extent {
	var out []cci.Extent
	for _, e := range es {
		if e.Tag == tag {
			out = append(out, e)
		}
	}
	return out
}

// covers reports whether the union of es contains every byte of r.
func covers(es []cci.Extent, r DPARange) bool {
	s := slices.Clone(es)
	slices.SortFunc(s, func(a, b cci.Extent) int { return cmp.Compare(a.DPA, b.DPA) })
	at := r.DPA
	for _, e := range s {
		if at >= r.End() {
			break
		}
		if e.DPA > at {
			return false
		}
		at = max(at, e.End())
	}
	return at >= r.End()
}

func fmtRange(r DPARange) string {
	return fmt.Sprintf("DPA %#x–%#x (%d bytes)", r.DPA, r.End(), r.Length)
}

func fmtExtents(es []cci.Extent) string {
	if len(es) == 0 {
		return "no extents"
	}
	s := slices.Clone(es)
	slices.SortFunc(s, func(a, b cci.Extent) int { return cmp.Compare(a.DPA, b.DPA) })
	parts := make([]string, len(s))
	for i, e := range s {
		parts[i] = fmt.Sprintf("%#x+%#x", e.DPA, e.Length)
	}
	return fmt.Sprintf("%d extents [%s]", len(s), strings.Join(parts, " "))
}
