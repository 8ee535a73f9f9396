// Package agent is the host agent (cmd/cxlhost): it enrolls with the box
// as the System of the head its Backend is cabled to, and on request asks
// the box for capacity, waits for the grant and for the backend to surface
// it, and says what an application needs to map it; detach gives the whole
// tag back through the box. A local HTTP API on a Unix socket (Serve,
// LocalClient) carries the requests of `poolctl host`.
//
// The agent reports each tag's state to the box (RunReports: on every
// change the backend signals and at least every heartbeat), as the
// host's own HostUser account: accepted, usable, mode, in use, path and
// size, and "release refused: in use" while a detach waits for a program
// that still maps the memory. While the box hears "in use", a release of
// the tag is not forced at its timeout (only an administrator's
// CxlPool.ForceRelease forces it).
//
// A shared attach (AttachRequest.Share) creates or joins a named share
// through the box's CxlPool.AttachShare; an administrator must have
// allowed the host that share name (host/share). The last host to
// detach frees the share's chunk (CxlPool.LeaveShare).
//
// AttachRequest.Mode system-ram onlines the memory as a CPU-less NUMA node
// on a backend that is a host.ModeSetter (host/linux, through kmem); the
// virtual box's backend is not (its hosts are processes), and the attach
// is refused before anything is reserved. If onlining fails the tag is
// given back whole.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"cxlpool/api/client"
	"cxlpool/host"
	"cxlpool/host/report"
	"cxlpool/host/share"
)

// Errors the agent answers with; each names the rule that refused.
var (
	ErrBadMode        = errors.New("agent: want mode devdax or system-ram")
	ErrNotHostAccount = errors.New("agent: the account is not bound to a host system (create it with role HostUser --system HostN)")
	ErrWrongBox       = errors.New("agent: wrong box: the device this host is cabled to is not the box's device")
	ErrWrongHead      = errors.New("agent: wrong head: the account's system is another head of the box than the one this host is cabled to")
	ErrNotAttached    = errors.New("agent: no attachment with that tag on this host")
	// ErrGaveUp: a detach waited for the memory to be unmapped and its
	// caller gave up first; nothing was released, the tag stays attached.
	ErrGaveUp = errors.New("agent: gave up waiting for the memory to be unmapped; nothing was released")
)

// Config configures an Agent.
type Config struct {
	Backend host.Backend
	Box     *client.Client // the box's Redfish API, logged in as the host's account
	Logger  *slog.Logger
	Clock   func() time.Time
	// Heartbeat is how often the agent reports to the box even when
	// nothing changed (default 10 s; the box's TTL is at least three).
	Heartbeat time.Duration
	// Version names the agent in its reports ("cxlhost VERSION").
	Version string
}

// Agent is one enrolled host agent.
type Agent struct {
	cfg    Config
	log    *slog.Logger
	id     host.Identity
	system string // the box's System Id of this host, e.g. Host3
	kick   chan struct{}

	mu      sync.Mutex
	refused map[string]bool // tags whose release was refused: in use
}

// logicalDevice is the part of a CXLLogicalDevice the agent reads.
type logicalDevice struct {
	Identifiers []struct {
		DurableName       string `json:"DurableName"`
		DurableNameFormat string `json:"DurableNameFormat"`
	} `json:"Identifiers"`
}

// New enrolls: it reads the backend's identity and checks that the
// account's System on the box shows the same device serial and LD.
func New(ctx context.Context, cfg Config) (*Agent, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 10 * time.Second
	}
	id, err := cfg.Backend.Identity(ctx)
	if err != nil {
		return nil, fmt.Errorf("agent: device identity: %w", err)
	}
	me, err := cfg.Box.Me(ctx)
	if err != nil {
		return nil, fmt.Errorf("agent: sign in to %s: %w", cfg.Box.Server(), err)
	}
	sysID := me.SystemID()
	if sysID == "" {
		return nil, fmt.Errorf("agent: account %s: %w", me.UserName, ErrNotHostAccount)
	}
	var sys client.System
	if err := cfg.Box.Get(ctx, client.SystemsURI+"/"+sysID, &sys); err != nil {
		return nil, fmt.Errorf("agent: system %s: %w", sysID, err)
	}
	if sys.Oem.CxlPool == nil || sys.Oem.CxlPool.LogicalDevice == nil {
		return nil, fmt.Errorf("agent: system %s shows no logical device (Oem.CxlPool.LogicalDevice)", sysID)
	}
	var ld logicalDevice
	if err := cfg.Box.Get(ctx, sys.Oem.CxlPool.LogicalDevice.ODataID, &ld); err != nil {
		return nil, fmt.Errorf("agent: logical device of %s: %w", sysID, err)
	}
	want := id.GCXLID()
	var got string
	for _, i := range ld.Identifiers {
		if i.DurableNameFormat == "GCXLID" {
			got = i.DurableName
		}
	}
	if !strings.EqualFold(got, want) {
		boxSerial, _, _ := strings.Cut(got, ":")
		hostSerial, _, _ := strings.Cut(want, ":")
		if !strings.EqualFold(boxSerial, hostSerial) {
			return nil, fmt.Errorf("agent: box %s has device %s, this host sees %s: %w", cfg.Box.Server(), boxSerial, hostSerial, ErrWrongBox)
		}
		return nil, fmt.Errorf("agent: account %s is bound to %s (logical device %s), this host is cabled to LD %d (Host%d): %w",
			me.UserName, sysID, got, id.LD, id.LD, ErrWrongHead)
	}
	a := &Agent{cfg: cfg, log: cfg.Logger.With("system", sysID), id: id, system: sysID,
		kick: make(chan struct{}, 1), refused: map[string]bool{}}
	a.log.Info("enrolled", "gcxlid", want)
	return a, nil
}

// System is the box's System Id of this host.
func (a *Agent) System() string { return a.system }

// Identity is the device identity the backend reported.
func (a *Agent) Identity() host.Identity { return a.id }

// AttachRequest asks for capacity.
type AttachRequest struct {
	SizeBytes uint64 `json:"size_bytes"`
	Name      string `json:"name,omitempty"`
	// Shared reserves in a sharable region, so that an administrator can
	// give the same bytes to other hosts (`poolctl share CHUNK --host
	// HostN`); their agents then list the tag like their own.
	Shared bool `json:"shared,omitempty"`
	// Share creates or joins the named share: every host attached to it
	// maps the same bytes. An administrator must allow the host the name
	// first (`poolctl hosts HostN --allow-share NAME`); the size must be
	// the share's.
	Share string `json:"share,omitempty"`
	// Mode is how the host uses the memory: devdax (the default) or
	// system-ram (a CPU-less NUMA node; only backends that are a
	// host.ModeSetter, i.e. Linux, can).
	Mode host.Mode `json:"mode,omitempty"`
}

// Attachment is a tag's capacity on this host and how an app reaches it.
type Attachment struct {
	Tag        string        `json:"tag"`
	Name       string        `json:"name,omitempty"`
	System     string        `json:"system"`
	Chunk      string        `json:"chunk,omitempty"`
	Connection string        `json:"connection,omitempty"`
	Capacity   host.Capacity `json:"capacity"`
	// Mode is how the host uses it: devdax, system-ram, or the virtual
	// box's simfile (Capacity.Kind).
	Mode host.Mode `json:"mode,omitempty"`
	// NUMANode is the node the memory is in system-ram mode (else -1).
	NUMANode int `json:"numa_node,omitempty"`
	// Env are ready-to-use environment lines (see EnvLines).
	Env []string `json:"env"`
	// GrantSeconds is how long the box took to grant; UsableSeconds how
	// long from the request until the backend surfaced the memory.
	GrantSeconds  float64 `json:"grant_seconds,omitempty"`
	UsableSeconds float64 `json:"usable_seconds,omitempty"`
}

// EnvLines are the environment an application is given:
// CXLPOOL_DAX_PATH and CXLPOOL_DAX_SIZE as for a /dev/daxX.Y (LMCache's
// --l1-devdax-path, Mooncake's MC_CXL_DEV_PATH/MC_CXL_DEV_SIZE). On the
// virtual box ("simfile") the path is the whole memory file, so the
// capacity's place in it is added, simulator-specific:
// CXLPOOL_DAX_OFFSET for a single extent, else CXLPOOL_DAX_EXTENTS as
// OFFSET:LENGTH pairs in the tag's order.
func EnvLines(c host.Capacity) []string {
	out := []string{"CXLPOOL_DAX_PATH=" + c.Path, "CXLPOOL_DAX_SIZE=" + strconv.FormatUint(c.Size, 10)}
	if c.Kind != "simfile" {
		return out
	}
	if len(c.Extents) == 1 {
		return append(out, "CXLPOOL_DAX_OFFSET="+strconv.FormatUint(c.Extents[0].Offset, 10))
	}
	parts := make([]string, len(c.Extents))
	for i, e := range c.Extents {
		parts[i] = strconv.FormatUint(e.Offset, 10) + ":" + strconv.FormatUint(e.Length, 10)
	}
	return append(out, "CXLPOOL_DAX_EXTENTS="+strings.Join(parts, ","))
}

// Attach reserves a chunk, connects it to this host, waits for the grant
// and for the backend to surface the capacity. On failure the chunk is
// freed again, so nothing is left behind.
func (a *Agent) Attach(ctx context.Context, req AttachRequest) (Attachment, error) {
	const mib = 1 << 20
	if req.SizeBytes == 0 || req.SizeBytes%mib != 0 {
		return Attachment{}, fmt.Errorf("agent: size %d: want a positive whole number of MiB", req.SizeBytes)
	}
	// Refused before anything is reserved: nothing to undo.
	switch req.Mode {
	case "", host.ModeDevDAX:
	case host.ModeSystemRAM:
		if _, ok := a.cfg.Backend.(host.ModeSetter); !ok {
			return Attachment{}, fmt.Errorf("agent: mode system-ram: %w", host.ErrNoSystemRAM)
		}
	default:
		return Attachment{}, fmt.Errorf("agent: mode %q: %w", req.Mode, ErrBadMode)
	}
	if req.Share != "" {
		if req.Name != "" && req.Name != req.Share {
			return Attachment{}, fmt.Errorf("agent: a share's chunk is named after the share (%q), not %q", req.Share, req.Name)
		}
		if err := share.ValidName(req.Share); err != nil {
			return Attachment{}, fmt.Errorf("agent: %w", err)
		}
		return a.attachShare(ctx, req)
	}
	c := a.cfg.Box
	start := a.cfg.Clock()
	ep, err := c.Initiator(ctx, a.system)
	if err != nil {
		return Attachment{}, fmt.Errorf("agent: %w", err)
	}
	chunk, err := c.ReserveChunk(ctx, client.ChunkRequest{SizeMiB: req.SizeBytes / mib, Name: req.Name, Sharable: req.Shared})
	if err != nil {
		return Attachment{}, fmt.Errorf("agent: reserve %d MiB: %w", req.SizeBytes/mib, err)
	}
	undo := func(cause error) error {
		if ctx.Err() != nil {
			return fmt.Errorf("%w (chunk %s left: the grant may still complete)", cause, chunk.ODataID)
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := c.DeleteAndWait(dctx, chunk.ODataID, nil); err != nil {
			return fmt.Errorf("%w; freeing chunk %s failed too: %v", cause, chunk.ODataID, err)
		}
		return cause
	}
	r, err := c.StartConnect(ctx, chunk.ODataID, ep.ODataID)
	if err == nil {
		r, err = c.Settle(ctx, r, nil)
	}
	if err != nil {
		return Attachment{}, undo(fmt.Errorf("agent: grant: %w", err))
	}
	var cn client.Connection
	if len(r.Body) > 0 {
		err = r.Decode(&cn)
	} else {
		err = c.Get(ctx, r.Location(), &cn)
	}
	if err != nil {
		return Attachment{}, undo(fmt.Errorf("agent: grant: %w", err))
	}
	return a.surface(ctx, start, req.Name, chunk.ODataID, cn.ODataID, req.Mode)
}

// surface waits for the granted chunk's tag to surface on the host and,
// for system-ram, onlines it; if that fails the tag is given back, so a
// refused attach leaves nothing behind.
func (a *Agent) surface(ctx context.Context, start time.Time, name, chunkURI, connURI string, mode host.Mode) (Attachment, error) {
	granted := a.cfg.Clock()
	var chunk client.MemoryChunk
	if err := a.cfg.Box.Get(ctx, chunkURI, &chunk); err != nil {
		return Attachment{}, fmt.Errorf("agent: chunk %s: %w", chunkURI, err)
	}
	if chunk.Oem.CxlPool == nil || chunk.Oem.CxlPool.Tag == "" {
		return Attachment{}, fmt.Errorf("agent: chunk %s shows no tag (Oem.CxlPool.Tag)", chunkURI)
	}
	tag := strings.ToLower(chunk.Oem.CxlPool.Tag)
	capa, err := a.cfg.Backend.Wait(ctx, tag)
	if err != nil {
		return Attachment{}, fmt.Errorf("agent: the grant of tag %s is not surfaced on this host: %w", tag, err)
	}
	out := Attachment{Tag: tag, Name: name, System: a.system, Chunk: chunkURI, Connection: connURI,
		Capacity: capa, Mode: host.Mode(capa.Kind), NUMANode: -1, Env: EnvLines(capa)}
	if mode == host.ModeSystemRAM {
		if err := a.systemRAM(ctx, &out); err != nil {
			if _, derr := a.Detach(context.WithoutCancel(ctx), tag, DetachOptions{}); derr != nil {
				return Attachment{}, fmt.Errorf("agent: tag %s: %w; giving it back failed too: %v", tag, err, derr)
			}
			return Attachment{}, fmt.Errorf("agent: tag %s given back: %w", tag, err)
		}
	}
	usable := a.cfg.Clock()
	a.Kick()
	out.GrantSeconds, out.UsableSeconds = granted.Sub(start).Seconds(), usable.Sub(start).Seconds()
	a.log.Info("attached", "tag", tag, "bytes", capa.Size, "chunk", chunk.ID)
	return out, nil
}

// systemRAM onlines an attachment's memory as a CPU-less NUMA node: no
// DAX path for applications then, the kernel allocates from it.
func (a *Agent) systemRAM(ctx context.Context, at *Attachment) error {
	ms, ok := a.cfg.Backend.(host.ModeSetter)
	if !ok {
		return fmt.Errorf("mode system-ram: %w", host.ErrNoSystemRAM)
	}
	if err := ms.SetMode(ctx, at.Tag, host.ModeSystemRAM); err != nil {
		return fmt.Errorf("mode system-ram: %w", err)
	}
	at.Mode, at.Env = host.ModeSystemRAM, nil
	if nr, ok := a.cfg.Backend.(host.NodeReporter); ok {
		if n, err := nr.Node(at.Tag); err == nil {
			at.NUMANode = n
			at.Env = []string{fmt.Sprintf("CXLPOOL_NUMA_NODE=%d", n)}
		}
	}
	return nil
}

// attachShare creates or joins a named share through the box; the box
// checks the allowance and frees a share it created if the grant fails.
func (a *Agent) attachShare(ctx context.Context, req AttachRequest) (Attachment, error) {
	const mib = 1 << 20
	c := a.cfg.Box
	start := a.cfg.Clock()
	r, err := c.StartAttachShare(ctx, a.system, req.Share, req.SizeBytes/mib)
	if err == nil {
		r, err = c.Settle(ctx, r, nil)
	}
	if err != nil {
		return Attachment{}, fmt.Errorf("agent: attach share %s: %w", req.Share, err)
	}
	var cn client.Connection
	if len(r.Body) > 0 {
		err = r.Decode(&cn)
	} else {
		err = c.Get(ctx, r.Location(), &cn)
	}
	if err != nil {
		return Attachment{}, fmt.Errorf("agent: attach share %s: %w", req.Share, err)
	}
	chunks := cn.Chunks()
	if len(chunks) != 1 {
		return Attachment{}, fmt.Errorf("agent: share %s: connection %s names %d chunks", req.Share, cn.ODataID, len(chunks))
	}
	return a.surface(ctx, start, req.Share, chunks[0], cn.ODataID, req.Mode)
}

// find looks up the box's chunk and this host's connection for tag.
func (a *Agent) find(ctx context.Context, tag string) (client.MemoryChunk, string, error) {
	chunks, err := a.cfg.Box.Chunks(ctx)
	if err != nil {
		return client.MemoryChunk{}, "", err
	}
	for _, ch := range chunks {
		x := ch.Oem.CxlPool
		if x == nil || !strings.EqualFold(x.Tag, tag) {
			continue
		}
		for _, g := range x.Grants {
			if g.SystemID == a.system {
				return ch, g.Connection.ODataID, nil
			}
		}
		return ch, "", nil
	}
	return client.MemoryChunk{}, "", nil
}

// List is what this host holds, with the box's names for it.
func (a *Agent) List(ctx context.Context) ([]Attachment, error) {
	caps, err := a.cfg.Backend.List(ctx)
	if err != nil {
		return nil, err
	}
	chunks, err := a.cfg.Box.Chunks(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Attachment, 0, len(caps))
	for _, c := range caps {
		at := Attachment{Tag: c.Tag, System: a.system, Capacity: c, Env: EnvLines(c)}
		for _, ch := range chunks {
			if x := ch.Oem.CxlPool; x != nil && strings.EqualFold(x.Tag, c.Tag) {
				at.Chunk, at.Name = ch.ODataID, x.Name
				for _, g := range x.Grants {
					if g.SystemID == a.system {
						at.Connection = g.Connection.ODataID
					}
				}
			}
		}
		out = append(out, at)
	}
	return out, nil
}

// DetachOptions says how a detach treats memory still in use.
type DetachOptions struct {
	// Force unmaps the memory from this host's programs (the host's
	// administrator's decision: the agent's socket is 0600). It does not
	// force the box: that is the box administrator's CxlPool.ForceRelease.
	Force bool `json:"force,omitempty"`
	// Wait waits, while a program maps the memory, until it unmaps it
	// (or the caller gives up: ErrGaveUp, nothing released). Without it
	// a detach of memory in use is refused at once (host.ErrBusy).
	Wait bool `json:"wait,omitempty"`
}

// Detach gives the whole tag back: refused while the memory is in use
// (host.ErrBusy; the box hears "release refused: in use") unless Force,
// or waited for with Wait; then the box releases the connection (the
// device asks the host, the backend answers), the agent waits until the
// host no longer holds the tag and frees the chunk unless another host
// still holds it (shared: the box refuses with 409) or it is not this
// host's to free (a chunk shared to it); Detached says which. The last
// host of a named share frees the share's chunk.
func (a *Agent) Detach(ctx context.Context, tag string, opt DetachOptions) (Detached, error) {
	tag = strings.ToLower(tag)
	chunk, conn, err := a.find(ctx, tag)
	out := Detached{Tag: tag, Chunk: chunk.ODataID, Connection: conn}
	if err != nil {
		return out, fmt.Errorf("agent: detach %s: %w", tag, err)
	}
	if conn == "" {
		return out, fmt.Errorf("agent: detach %s: %w", tag, ErrNotAttached)
	}
	start := a.cfg.Clock()
	if err := a.releaseOnHost(ctx, tag, opt); err != nil {
		return out, fmt.Errorf("agent: detach %s: %w", tag, err)
	}
	a.Kick()
	// From here the host has let go of the tag: finish even if the caller
	// gives up, so that nothing is left half released (the box's release,
	// the host dropping the tag, the chunk freed), within a bound.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), detachFinish)
	defer cancel()
	boxStart := a.cfg.Clock()
	if err := a.cfg.Box.DeleteAndWait(ctx, conn, nil); err != nil {
		// The box kept the grant: so does the host, usable as before
		// (unless the device asked for it back meanwhile).
		if kerr := a.cfg.Backend.Keep(context.WithoutCancel(ctx), tag); kerr != nil {
			a.log.Warn("detach failed and the tag stays releasing", "tag", tag, "err", kerr)
		}
		return out, fmt.Errorf("agent: detach %s: release %s: %w", tag, conn, err)
	}
	released := a.cfg.Clock()
	if err := a.cfg.Backend.WaitGone(ctx, tag); err != nil {
		return out, fmt.Errorf("agent: detach %s: %w", tag, err)
	}
	gone := a.cfg.Clock()
	out.ReleaseSeconds, out.GoneSeconds = released.Sub(boxStart).Seconds(), gone.Sub(start).Seconds()
	// A host account sees only its own grant of the chunk, so whether
	// others hold it shows only in the box's answer.
	switch err := a.cfg.Box.DeleteAndWait(ctx, chunk.ODataID, nil); {
	case err == nil:
		out.ChunkFreed = true
	case client.StatusOf(err) == http.StatusConflict:
		out.Kept = "other hosts still hold the chunk"
	case client.StatusOf(err) == http.StatusNotFound, client.StatusOf(err) == http.StatusForbidden:
		out.Kept = "the chunk is another host's to free (poolctl free)"
	default:
		return out, fmt.Errorf("agent: detach %s: released, but freeing chunk %s failed: %w", tag, chunk.ODataID, err)
	}
	if x := chunk.Oem.CxlPool; !out.ChunkFreed && x != nil && chunk.Oem.CxlPool.Sharable && share.ValidName(x.Name) == nil {
		// A named share: the last host to leave frees it.
		switch err := a.cfg.Box.LeaveShare(ctx, a.system, x.Name); {
		case err == nil:
			out.ChunkFreed, out.Kept = true, ""
		case client.StatusOf(err) == http.StatusConflict:
			out.Kept = "other hosts still hold share " + x.Name
		}
	}
	a.log.Info("detached", "tag", tag, "forced", opt.Force, "chunk_freed", out.ChunkFreed)
	return out, nil
}

// releaseOnHost lets the backend give the tag back: refused while in use
// unless forced; with Wait, retried as the backend changes until the
// memory is unmapped or ctx ends. The box hears "release refused: in use"
// meanwhile, and the state is cleared again if the caller gives up.
func (a *Agent) releaseOnHost(ctx context.Context, tag string, opt DetachOptions) error {
	for {
		var changed <-chan struct{}
		if n, ok := a.cfg.Backend.(host.Notifier); ok {
			changed = n.Changed()
		}
		err := a.cfg.Backend.Release(ctx, tag, opt.Force)
		if !errors.Is(err, host.ErrBusy) {
			a.setRefused(tag, false)
			return err
		}
		if a.setRefused(tag, true) {
			a.log.Warn("release refused: the memory is in use", "tag", tag, "waiting", opt.Wait)
		}
		if !opt.Wait {
			return err
		}
		select {
		case <-ctx.Done():
			a.setRefused(tag, false)
			return fmt.Errorf("%w (tag %s: %w)", ErrGaveUp, tag, ctx.Err())
		case <-changed:
		case <-time.After(time.Second): // another process's unmap is not signalled
		}
	}
}

// setRefused records whether tag's release is refused and reports a
// change; it says whether anything changed.
func (a *Agent) setRefused(tag string, refused bool) bool {
	a.mu.Lock()
	was := a.refused[tag]
	if refused {
		a.refused[tag] = true
	} else {
		delete(a.refused, tag)
	}
	a.mu.Unlock()
	if was != refused {
		a.Kick()
	}
	return was != refused
}

// Kick makes RunReports report now.
func (a *Agent) Kick() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// Report is what the agent tells the box now: every tag the backend
// holds with its state.
func (a *Agent) Report(ctx context.Context) (report.Report, error) {
	caps, err := a.cfg.Backend.List(ctx)
	if err != nil {
		return report.Report{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	r := report.Report{Agent: strings.TrimSpace("cxlhost " + a.cfg.Version), HeartbeatSeconds: int(a.cfg.Heartbeat.Round(time.Second) / time.Second),
		Tags: make([]report.Tag, 0, len(caps))}
	held := map[string]bool{}
	for _, c := range caps {
		held[c.Tag] = true
		t := report.Tag{Tag: c.Tag, Accepted: true, Usable: !c.Releasing && c.Size > 0, Mode: c.Kind, InUse: c.InUse,
			Path: c.Path, SizeBytes: c.Size}
		switch {
		case c.Releasing:
			t.State = report.StateReleasing
		case c.InUse && (a.refused[c.Tag] || c.ReleasePending):
			t.State = report.StateReleaseRefused
		case c.InUse:
			t.State = report.StateInUse
		case c.Size == 0:
			t.State = report.StateAccepted
		default:
			t.State = report.StateOnline
		}
		r.Tags = append(r.Tags, t)
	}
	for tag := range a.refused {
		if !held[tag] {
			delete(a.refused, tag)
		}
	}
	return r, nil
}

// RunReports reports to the box on every change and every heartbeat
// until ctx ends. A report the box refuses or cannot take is logged and
// sent again at the next change or heartbeat.
func (a *Agent) RunReports(ctx context.Context) {
	t := time.NewTicker(a.cfg.Heartbeat)
	defer t.Stop()
	for {
		var changed <-chan struct{}
		if n, ok := a.cfg.Backend.(host.Notifier); ok {
			changed = n.Changed()
		}
		if err := a.reportOnce(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("report to the box", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-a.kick:
		case <-changed:
		case <-t.C:
		}
	}
}

func (a *Agent) reportOnce(ctx context.Context) error {
	r, err := a.Report(ctx)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return a.cfg.Box.ReportHost(rctx, a.system, r)
}

// detachFinish bounds the part of a detach that runs on after its caller
// gave up: the box's release (its own timeout forces a host that does
// not answer), the host dropping the tag, freeing the chunk.
const detachFinish = 2 * time.Minute

// Detached is the outcome of a detach: the tag is gone from the host;
// its chunk is freed unless Kept says why not.
type Detached struct {
	Tag        string `json:"tag"`
	Chunk      string `json:"chunk,omitempty"`
	Connection string `json:"connection,omitempty"`
	ChunkFreed bool   `json:"chunk_freed"`
	Kept       string `json:"kept,omitempty"`
	// ReleaseSeconds is the box's part of the release (its task, from
	// the request until the device took the capacity back); GoneSeconds
	// how long from the detach until the host no longer held the tag.
	ReleaseSeconds float64 `json:"release_seconds,omitempty"`
	GoneSeconds    float64 `json:"gone_seconds,omitempty"`
}
