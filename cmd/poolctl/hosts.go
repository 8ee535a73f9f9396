package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"cxlpool/api/client"
)

// hostDetailOut is `hosts HostN --json`: the host as `hosts` lists it,
// and the connections it has.
type hostDetailOut struct {
	hostOut
	Connections []connectionOut `json:"connections"`
	// Agent is the host's agent as the box last heard from it; OnHost
	// what the host did with each connection's memory, by connection Id.
	Agent  *client.HostAgent             `json:"agent,omitempty"`
	OnHost map[string]*client.HostMemory `json:"on_host,omitempty"`
	Shares []string                      `json:"shares,omitempty"`
}

func cmdHosts(ctx context.Context, a *app, args []string) error {
	fs := a.flags("hosts", "[HostN [--allow-share NAME | --disallow-share NAME]]")
	allow := fs.String("allow-share", "", "allow HostN to create or join share `NAME` (poolctl host attach SIZE --shared NAME)")
	disallow := fs.String("disallow-share", "", "stop allowing HostN share `NAME` (hosts attached keep their memory)")
	pos, err := parse(fs, args, 0, 1)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		if *allow != "" || *disallow != "" {
			return usagef("hosts: --allow-share and --disallow-share need a HostN")
		}
		return listHosts(ctx, a)
	}
	sys, err := systemArg(pos[0])
	if err != nil {
		return err
	}
	ctx, cancel := a.deadline(ctx, false)
	defer cancel()
	c, err := a.client()
	if err != nil {
		return err
	}
	for _, ch := range []struct {
		name  string
		allow bool
	}{{*allow, true}, {*disallow, false}} {
		if ch.name == "" {
			continue
		}
		if err := c.AllowShare(ctx, sys, ch.name, ch.allow); err != nil {
			return explain(err)
		}
	}
	var s client.System
	if err := c.Get(ctx, client.SystemsURI+"/"+sys, &s); err != nil {
		return explain(err)
	}
	conns, err := hostConnections(ctx, c, sys)
	if err != nil {
		return explain(err)
	}
	out := hostDetailOut{hostOut: toHostOut(s), Connections: conns, OnHost: map[string]*client.HostMemory{}}
	if x := s.Oem.CxlPool; x != nil {
		out.Agent, out.Shares = x.HostAgent, x.Shares
	}
	mems, err := c.SystemMemory(ctx, s)
	if err != nil {
		return explain(err)
	}
	for _, m := range mems {
		if x := m.Oem.CxlPool; x != nil && x.Connection != nil && x.Host != nil {
			out.OnHost[lastSegment(x.Connection.ODataID)] = x.Host
		}
	}
	if a.g.json {
		return a.printJSON(out)
	}
	h := out.hostOut
	tw := tabwriter.NewWriter(a.stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "System:\t%s (%s)\n", h.System, h.URI)
	if h.Name != "" && h.Name != h.System {
		fmt.Fprintf(tw, "Name:\t%s\n", h.Name)
	}
	fmt.Fprintf(tw, "Head:\tLD %s, port %s\n", optInt(h.Head), optInt(h.Port))
	fmt.Fprintf(tw, "Link:\t%s (%s)\n", map[bool]string{true: "up", false: "down"}[h.LinkUp], orDash(h.State))
	fmt.Fprintf(tw, "Granted:\t%s in %s\n", size(h.GrantedBytes), plural(len(conns), "connection"))
	quota := "default" // no quota of its own: the pool's default applies
	if h.QuotaBytes > 0 {
		quota = size(h.QuotaBytes)
	}
	fmt.Fprintf(tw, "Quota:\t%s\n", quota)
	fmt.Fprintf(tw, "Agent:\t%s\n", agentLine(out.Agent))
	if len(out.Shares) > 0 {
		fmt.Fprintf(tw, "Shares:\t%s (allowed)\n", strings.Join(out.Shares, ", "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(conns) == 0 {
		return nil
	}
	fmt.Fprintln(a.stdout)
	rows := make([][]string, 0, len(conns))
	for _, o := range conns {
		rows = append(rows, []string{o.ID, strings.Join(o.Chunks, ","), orDash(o.GrantState), size(o.GrantedBytes),
			onHostText(out.OnHost[o.ID]), orDash(o.Memory)})
	}
	return a.table([]string{"CONNECTION", "CHUNK", "GRANT", "GRANTED", "ON HOST", "MEMORY"}, rows)
}

// agentLine says whether the host's agent reports.
func agentLine(ag *client.HostAgent) string {
	switch {
	case ag == nil || ag.State == "None":
		return "none reports (no cxlhost runs for this host)"
	case ag.State == "Silent":
		return "silent (no report within its time to live: the host or its agent is gone)"
	}
	return fmt.Sprintf("reporting (%s, %d tags)", orDash(ag.Agent), ag.TagCount)
}

// onHostText is a grant's state on its host: "accepted" by the host is
// not "usable" on it until the agent says so.
func onHostText(h *client.HostMemory) string {
	if h == nil {
		return "-"
	}
	return map[string]string{
		"NotReported": "accepted (not reported)", "AgentSilent": "accepted (agent silent)",
		"NotSurfaced": "accepted, not usable", "Usable": "usable", "InUse": "in use",
		"ReleaseRefusedInUse": "release refused: in use", "Releasing": "releasing",
	}[h.State]
}

func listHosts(ctx context.Context, a *app) error {
	return list(ctx, a, "hosts", nil,
		func(ctx context.Context, c *client.Client) ([]hostOut, error) {
			return convert(toHostOut)(c.Systems(ctx))
		},
		[]string{"SYSTEM", "HEAD", "PORT", "LINK", "GRANTED", "QUOTA"},
		func(h hostOut) []string {
			link := "down"
			if h.LinkUp {
				link = "up"
			}
			quota := "default"
			if h.QuotaBytes > 0 {
				quota = size(h.QuotaBytes)
			}
			return []string{h.System, optInt(h.Head), optInt(h.Port), link, size(h.GrantedBytes), quota}
		})
}

// hostConnections are the connections of system sys, by Id.
func hostConnections(ctx context.Context, c *client.Client, sys string) ([]connectionOut, error) {
	all, err := c.Connections(ctx)
	if err != nil {
		return nil, err
	}
	systems, err := endpointSystems(ctx, c)
	if err != nil {
		return nil, err
	}
	out := []connectionOut{}
	for _, cn := range all {
		o := toConnectionOut(cn, systems)
		if slices.Contains(o.Hosts, sys) {
			out = append(out, o)
		}
	}
	sort.Slice(out, func(i, j int) bool { return idLess(out[i].ID, out[j].ID) })
	return out, nil
}

// idLess orders numeric Ids numerically.
func idLess(a, b string) bool {
	x, errA := strconv.Atoi(a)
	y, errB := strconv.Atoi(b)
	if errA == nil && errB == nil {
		return x < y
	}
	return a < b
}

// --- resize ---

// resizeOut is the answer of resize.
type resizeOut struct {
	System      string          `json:"system"`
	FromBytes   uint64          `json:"from_bytes"`
	ToBytes     uint64          `json:"to_bytes"`
	TargetBytes uint64          `json:"target_bytes"`
	Granted     *grantOut       `json:"granted,omitempty"`  // the new chunk, when growing
	Released    []connectionOut `json:"released,omitempty"` // when shrinking
	Freed       []string        `json:"freed,omitempty"`    // chunks returned to the pool
	DryRun      bool            `json:"dry_run,omitempty"`
}

// heldChunk is one granted connection of the host being resized.
type heldChunk struct {
	conn   connectionOut
	uri    string // the connection's
	chunk  string // the chunk's URI
	bytes  uint64
	shared bool // other hosts hold the chunk too (they keep it)
}

// cmdResize brings a host to a target size as the console's Resize dialog
// does: growing grants one new chunk of the difference (a multiple of the
// chunk increment); shrinking releases whole chunks, as few bytes more
// than needed as possible, so that the host ends at or below the target,
// and frees the released chunks no other host holds.
func cmdResize(ctx context.Context, a *app, args []string) error {
	fs := a.flags("resize", "HostN SIZE [--dry-run] [--wait=false]")
	dry := fs.Bool("dry-run", false, "say what would be granted or released, and do nothing")
	wait := fs.Bool("wait", true, "when growing, wait until the host has accepted the capacity")
	pos, err := parse(fs, args, 2, 2)
	if err != nil {
		return err
	}
	sys, err := systemArg(pos[0])
	if err != nil {
		return err
	}
	target, err := quotaArg(pos[1]) // a size, 0 allowed
	if err != nil {
		return err
	}
	ctx, cancel := a.deadline(ctx, false)
	defer cancel()
	c, err := a.client()
	if err != nil {
		return err
	}
	var s client.System
	if err := c.Get(ctx, client.SystemsURI+"/"+sys, &s); err != nil {
		return explain(err)
	}
	from := toHostOut(s).GrantedBytes
	out := resizeOut{System: sys, FromBytes: from, ToBytes: from, TargetBytes: target, DryRun: *dry}
	switch {
	case target == from:
		if a.g.json {
			return a.printJSON(out)
		}
		fmt.Fprintf(a.stdout, "%s already holds %s.\n", sys, size(from))
		return nil
	case target > from:
		return a.grow(ctx, c, sys, out, *wait)
	}
	return a.shrink(ctx, c, sys, out)
}

func (a *app) grow(ctx context.Context, c *client.Client, sys string, out resizeOut, wait bool) error {
	diff := out.TargetBytes - out.FromBytes
	pool, err := c.Pool(ctx)
	if err != nil {
		return explain(err)
	}
	inc := mibBytes(pool.MemoryChunkIncrementMiB)
	if inc > 0 && diff%inc != 0 {
		down, up := out.FromBytes+diff/inc*inc, out.FromBytes+(diff/inc+1)*inc
		alt := size(up)
		if down > out.FromBytes {
			alt = size(down) + " or " + size(up)
		}
		return usagef("resize: growing grants one new chunk of the difference, and chunk sizes are multiples of %s: "+
			"%s holds %s, so %s is %s more; use %s", size(inc), sys, size(out.FromBytes), size(out.TargetBytes), size(diff), alt)
	}
	if out.DryRun {
		out.ToBytes = out.TargetBytes
		if a.g.json {
			return a.printJSON(out)
		}
		fmt.Fprintf(a.stdout, "Would grant one new chunk of %s to %s (%s → %s).\n", size(diff), sys, size(out.FromBytes), size(out.TargetBytes))
		return nil
	}
	ep, err := c.Initiator(ctx, sys)
	if err != nil {
		return explain(err)
	}
	chunk, err := c.ReserveChunk(ctx, client.ChunkRequest{SizeMiB: diff / mebibyte})
	if err != nil {
		return explain(err)
	}
	fmt.Fprintf(a.stderr, "Reserved chunk %s (%s); connecting it to %s...\n", chunk.ID, size(diff), sys)
	g, err := a.connect(ctx, c, chunk, sys, ep.ODataID, wait)
	if err != nil {
		return a.undoReserve(ctx, c, chunk, err)
	}
	out.Granted = &g
	if g.State == "granted" {
		out.ToBytes = out.FromBytes + g.GrantedBytes
	}
	if a.g.json {
		return a.printJSON(out)
	}
	if g.State != "granted" {
		fmt.Fprintf(a.stdout, "Offered chunk %s (%s) to %s; the host has not answered yet (task %s).\n", g.Chunk, size(diff), sys, g.Task)
		return nil
	}
	fmt.Fprintf(a.stdout, "Granted chunk %s (%s) to %s: %s → %s.\n", g.Chunk, size(g.GrantedBytes), sys, size(out.FromBytes), size(out.ToBytes))
	return nil
}

func (a *app) shrink(ctx context.Context, c *client.Client, sys string, out resizeOut) error {
	conns, err := c.Connections(ctx)
	if err != nil {
		return explain(err)
	}
	systems, err := endpointSystems(ctx, c)
	if err != nil {
		return explain(err)
	}
	holders := map[string]int{} // chunk URI → hosts holding it
	var held []heldChunk
	for _, cn := range conns {
		o := toConnectionOut(cn, systems)
		chs := cn.Chunks()
		if len(chs) != 1 || o.GrantState != "granted" {
			continue
		}
		holders[chs[0]]++
		if slices.Contains(o.Hosts, sys) {
			held = append(held, heldChunk{conn: o, uri: cn.ODataID, chunk: chs[0], bytes: o.GrantedBytes})
		}
	}
	for i := range held {
		held[i].shared = holders[held[i].chunk] > 1
	}
	sort.Slice(held, func(i, j int) bool { return idLess(held[i].conn.ID, held[j].conn.ID) })
	pick := planShrink(held, out.FromBytes-out.TargetBytes)
	var release uint64
	for _, h := range pick {
		release += h.bytes
	}
	out.ToBytes = out.FromBytes - release
	if out.DryRun {
		for _, h := range pick {
			out.Released = append(out.Released, h.conn)
		}
		if a.g.json {
			return a.printJSON(out)
		}
		for _, h := range pick {
			fmt.Fprintf(a.stdout, "Would release connection %s (chunk %s, %s) from %s.\n", h.conn.ID, lastSegment(h.chunk), size(h.bytes), sys)
		}
		fmt.Fprintf(a.stdout, "%s would go from %s to %s (target %s; chunks are released whole).\n", sys, size(out.FromBytes), size(out.ToBytes), size(out.TargetBytes))
		return nil
	}
	for _, h := range pick {
		if err := c.DeleteAndWait(ctx, h.uri, nil); err != nil {
			out.ToBytes = out.FromBytes - releasedBytes(out.Released)
			return a.resizeFailed(out, explain(err))
		}
		out.Released = append(out.Released, h.conn)
		if !a.g.json {
			fmt.Fprintf(a.stdout, "Released connection %s (chunk %s, %s) from %s.\n", h.conn.ID, lastSegment(h.chunk), size(h.bytes), sys)
		}
		if h.shared {
			continue // the other hosts keep it
		}
		// The chunk goes back to the pool, as the console's dialog does;
		// a host account may free only the chunks it reserved, and a
		// refusal leaves the chunk reserved, not the host bigger.
		if err := deleteChunk(ctx, c, h.chunk); err != nil {
			fmt.Fprintf(a.stderr, "poolctl: note: chunk %s stays reserved: %v\n", lastSegment(h.chunk), explain(err))
			continue
		}
		out.Freed = append(out.Freed, lastSegment(h.chunk))
	}
	if a.g.json {
		return a.printJSON(out)
	}
	fmt.Fprintf(a.stdout, "%s went from %s to %s (target %s; chunks are released whole).\n", sys, size(out.FromBytes), size(out.ToBytes), size(out.TargetBytes))
	return nil
}

func releasedBytes(cs []connectionOut) uint64 {
	var n uint64
	for _, c := range cs {
		n += c.GrantedBytes
	}
	return n
}

// resizeFailed still reports what was released before the failure.
func (a *app) resizeFailed(out resizeOut, err error) error {
	if a.g.json && len(out.Released) > 0 {
		_ = a.printJSON(out)
	}
	return err
}

// planShrink picks the chunks to release so that at least need bytes go
// back, giving back as little more as possible (a subset sum over the
// sizes in their greatest common unit, as the console's Resize dialog
// does); all of them if they do not reach need.
func planShrink(items []heldChunk, need uint64) []heldChunk {
	if need == 0 || len(items) == 0 {
		return nil
	}
	gcd := func(a, b uint64) uint64 {
		for b != 0 {
			a, b = b, a%b
		}
		return a
	}
	var unit, total uint64
	for _, it := range items {
		unit = gcd(unit, it.bytes)
		total += it.bytes
	}
	if unit == 0 || need >= total {
		return items
	}
	n := int(total / unit)
	want := int((need + unit - 1) / unit)
	// by[s] is the item that first reached sum s (-1: unreachable).
	by := make([]int, n+1)
	for i := range by {
		by[i] = -1
	}
	by[0] = len(items)
	for i, it := range items {
		sz := int(it.bytes / unit)
		for s := n; s >= sz; s-- {
			if by[s] == -1 && by[s-sz] != -1 {
				by[s] = i
			}
		}
	}
	s := want
	for by[s] == -1 {
		s++
	}
	var out []heldChunk
	for s > 0 {
		i := by[s]
		out = append(out, items[i])
		s -= int(items[i].bytes / unit)
	}
	sort.Slice(out, func(i, j int) bool { return idLess(out[i].conn.ID, out[j].conn.ID) })
	return out
}

// plural is "1 connection", "2 connections".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
