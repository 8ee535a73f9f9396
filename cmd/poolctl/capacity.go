package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"cxlpool/api/client"
	"cxlpool/internal/bytesize"
)

const mebibyte = 1 << 20

func mibBytes(n uint64) uint64 { return n * mebibyte }

// lastSegment is a URI's last path segment (a resource's Id).
func lastSegment(uri string) string { return path.Base(strings.TrimSuffix(uri, "/")) }

// memberURI turns a command-line reference to a member of collection (its
// Id or its URI) into the URI.
func memberURI(collection, what, arg string) (string, error) {
	if strings.HasPrefix(arg, "/") {
		if id, ok := strings.CutPrefix(strings.TrimSuffix(arg, "/"), collection+"/"); ok && id != "" && !strings.Contains(id, "/") {
			return collection + "/" + id, nil
		}
		return "", usagef("%q is not a %s URI (%s/ID)", arg, what, collection)
	}
	if arg == "" || strings.ContainsAny(arg, "/?#%") {
		return "", usagef("%q is not a %s Id", arg, what)
	}
	return collection + "/" + arg, nil
}

// systemArg reads a host as given on the command line: "Host3", "3", the
// system's URI, or the name in any case ("host3", "HOST3"), always
// answering the Redfish Id's spelling ("Host3").
func systemArg(arg string) (string, error) {
	s := strings.TrimPrefix(strings.TrimSuffix(arg, "/"), client.SystemsURI+"/")
	num := s
	if len(s) > 4 && strings.EqualFold(s[:4], "host") {
		num = s[4:]
	}
	if n, err := strconv.ParseUint(num, 10, 16); err == nil && num != "" && num[0] != '+' {
		s = "Host" + strconv.FormatUint(n, 10)
	}
	if s == "" || strings.ContainsAny(s, "/?#%") {
		return "", usagef("%q is not a host (HostN)", arg)
	}
	return s, nil
}

// sizeArg reads a capacity request: binary units, whole MiB. The block
// size rule is the box's, checked with it (sizeCheck) where it is known.
func sizeArg(arg string) (uint64, error) {
	n, err := bytesize.Parse(arg)
	if err != nil {
		return 0, usagef("%v", err)
	}
	if n == 0 || n%mebibyte != 0 {
		return 0, usagef("size %q: want a positive whole number of MiB", arg)
	}
	return n, nil
}

// sizeCheck refuses a size that is not a multiple of the pool's chunk
// increment (the device's block size) before anything is reserved, and
// says which sizes would work.
func sizeCheck(n, increment uint64, arg string) error {
	if increment == 0 || n%increment == 0 {
		return nil
	}
	down, up := n/increment*increment, (n/increment+1)*increment
	if down == 0 {
		return usagef("size %s: chunk sizes are multiples of %s (the device's block size): use %s", arg, size(increment), size(up))
	}
	return usagef("size %s: chunk sizes are multiples of %s (the device's block size): use %s or %s", arg, size(increment), size(down), size(up))
}

// --- status ---

type regionOut struct {
	Region     int    `json:"region"`
	Sharable   bool   `json:"sharable"`
	SizeBytes  uint64 `json:"size_bytes"`
	FreeBytes  uint64 `json:"free_bytes"`
	BlockBytes uint64 `json:"block_bytes"`
}

type deviceOut struct {
	URI      string `json:"uri"`
	State    string `json:"state"`
	Health   string `json:"health"`
	Model    string `json:"model,omitempty"`
	Serial   string `json:"serial,omitempty"`
	Firmware string `json:"firmware,omitempty"`
}

type statusOut struct {
	Server        string  `json:"server"`
	TotalBytes    uint64  `json:"total_bytes"`
	FreeBytes     uint64  `json:"free_bytes"`
	ReservedBytes *uint64 `json:"reserved_bytes,omitempty"` // in chunks no host holds
	GrantedBytes  *uint64 `json:"granted_bytes,omitempty"`  // held by one host
	SharedBytes   *uint64 `json:"shared_bytes,omitempty"`   // held by several
	OrphanedBytes *uint64 `json:"orphaned_bytes,omitempty"`
	// QuotaBytes and HeldBytes are shown to host accounts (quota 0: the default host quota applies).
	QuotaBytes     *uint64 `json:"quota_bytes,omitempty"`
	HeldBytes      *uint64 `json:"held_bytes,omitempty"`
	IncrementBytes uint64  `json:"increment_bytes"`
	Health         string  `json:"health,omitempty"` // the pool's
	// StrandedChunks and StrandedBytes: chunks lost grants left reserved
	// with no host holding them (poolctl free --stranded frees them).
	StrandedChunks int         `json:"stranded_chunks,omitempty"`
	StrandedBytes  uint64      `json:"stranded_bytes,omitempty"`
	Chunks         int         `json:"chunks"`
	Connections    int         `json:"connections"`
	Regions        []regionOut `json:"regions"`
	Device         *deviceOut  `json:"device,omitempty"`

	// Fleet is the box's fleet plane (fleetstatus.go); nil: none.
	Fleet *fleetStatusOut `json:"fleet,omitempty"`
}

func optBytes(mib *uint64) *uint64 {
	if mib == nil {
		return nil
	}
	b := mibBytes(*mib)
	return &b
}

func cmdStatus(ctx context.Context, a *app, args []string) error {
	fs := a.flags("status", "")
	if _, err := parse(fs, args, 0, 0); err != nil {
		return err
	}
	ctx, cancel := a.deadline(ctx, false)
	defer cancel()
	c, err := a.client()
	if err != nil {
		return err
	}
	pool, err := c.Pool(ctx)
	if err != nil {
		return explain(err)
	}
	chunks, err := c.Chunks(ctx)
	if err != nil {
		return explain(err)
	}
	conns, err := c.Connections(ctx)
	if err != nil {
		return explain(err)
	}
	out := statusOut{Server: c.Server(), TotalBytes: mibBytes(pool.MemorySizeMiB),
		IncrementBytes: mibBytes(pool.MemoryChunkIncrementMiB), Chunks: len(chunks), Connections: len(conns),
		Regions: []regionOut{}, Health: pool.Status.Health}
	if o := pool.Oem.CxlPool; o != nil {
		out.FreeBytes = mibBytes(o.FreeMiB)
		out.StrandedChunks, out.StrandedBytes = o.StrandedChunks, mibBytes(o.StrandedMiB)
		out.ReservedBytes, out.GrantedBytes = optBytes(o.ReservedMiB), optBytes(o.GrantedMiB)
		out.SharedBytes, out.OrphanedBytes = optBytes(o.SharedMiB), optBytes(o.OrphanedMiB)
		out.QuotaBytes, out.HeldBytes = optBytes(o.QuotaMiB), optBytes(o.HeldMiB)
		for _, r := range o.Regions {
			out.Regions = append(out.Regions, regionOut{Region: r.Region, Sharable: r.Sharable, SizeBytes: mibBytes(r.SizeMiB),
				FreeBytes: mibBytes(r.FreeMiB), BlockBytes: mibBytes(r.BlockSizeMiB)})
		}
	} else {
		// A service without the Oem figures: what the visible chunks
		// leave.
		var used uint64
		for _, ch := range chunks {
			used += mibBytes(ch.MemoryChunkSizeMiB)
		}
		out.FreeBytes = out.TotalBytes - min(used, out.TotalBytes)
	}
	// The device's health is for appliance accounts; a host that may not
	// see it gets the rest.
	if d, err := c.DCD(ctx); err == nil {
		out.Device = &deviceOut{URI: d.ODataID, State: d.Status.State, Health: d.Status.Health, Model: d.Model,
			Serial: d.SerialNumber, Firmware: d.FirmwareVersion}
	} else if s := client.StatusOf(err); s != http.StatusNotFound && s != http.StatusForbidden {
		return explain(err)
	}
	if out.Fleet, err = boxFleet(ctx, c); err != nil {
		return explain(err)
	}
	if a.g.json {
		return a.printJSON(out)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "Pool:\t%s\n", out.Server)
	fmt.Fprintf(tw, "Total:\t%s\n", size(out.TotalBytes))
	fmt.Fprintf(tw, "Free:\t%s\n", size(out.FreeBytes))
	for _, kv := range []struct {
		k string
		v *uint64
	}{{"Reserved", out.ReservedBytes}, {"Granted", out.GrantedBytes}, {"Shared", out.SharedBytes}, {"Orphaned", out.OrphanedBytes}, {"Held", out.HeldBytes}} {
		if kv.v != nil {
			fmt.Fprintf(tw, "%s:\t%s\n", kv.k, size(*kv.v))
		}
	}
	if out.QuotaBytes != nil {
		q := "default" // its own quota unset: the pool's default host quota applies
		if *out.QuotaBytes > 0 {
			q = size(*out.QuotaBytes)
		}
		fmt.Fprintf(tw, "Quota:\t%s\n", q)
	}
	fmt.Fprintf(tw, "Chunks:\t%d (sizes in multiples of %s)\n", out.Chunks, size(out.IncrementBytes))
	fmt.Fprintf(tw, "Connections:\t%d\n", out.Connections)
	if out.StrandedChunks > 0 {
		fmt.Fprintf(tw, "Stranded:\t%d chunks (%s) whose grants were lost, held by no host: `poolctl free --stranded` frees them\n",
			out.StrandedChunks, size(out.StrandedBytes))
	}
	if out.Health != "" && out.Health != "OK" {
		fmt.Fprintf(tw, "Pool health:\t%s\n", out.Health)
	}
	if d := out.Device; d != nil {
		fmt.Fprintf(tw, "Device:\t%s %s, health %s (model %s, serial %s, firmware %s)\n", lastSegment(d.URI),
			orDash(d.State), orDash(d.Health), orDash(d.Model), orDash(d.Serial), orDash(d.Firmware))
	}
	if out.Fleet != nil {
		fmt.Fprintf(tw, "Fleet:\t%s\n", out.Fleet)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(out.Regions) == 0 {
		return nil
	}
	fmt.Fprintln(a.stdout)
	rows := make([][]string, 0, len(out.Regions))
	for _, r := range out.Regions {
		rows = append(rows, []string{strconv.Itoa(r.Region), yesNo(r.Sharable), size(r.SizeBytes), size(r.FreeBytes), size(r.BlockBytes)})
	}
	return a.table([]string{"REGION", "SHARABLE", "SIZE", "FREE", "BLOCK"}, rows)
}

// --- hosts ---

type hostOut struct {
	System       string `json:"system"`
	URI          string `json:"uri"`
	Name         string `json:"name"`
	Head         *int   `json:"head,omitempty"` // the LD-ID
	Port         *int   `json:"port,omitempty"`
	LinkUp       bool   `json:"link_up"`
	State        string `json:"state"`
	GrantedBytes uint64 `json:"granted_bytes"`
	QuotaBytes   uint64 `json:"quota_bytes"` // 0: the default host quota applies
}

func toHostOut(s client.System) hostOut {
	h := hostOut{System: s.ID, URI: s.ODataID, Name: s.Name, State: s.Status.State,
		LinkUp: s.Status.State == "Enabled"}
	if o := s.Oem.CxlPool; o != nil {
		port := o.Port
		h.Port, h.LinkUp = &port, o.LinkUp
		h.GrantedBytes, h.QuotaBytes = mibBytes(o.GrantedMiB), mibBytes(o.QuotaMiB)
		if o.LogicalDevice != nil {
			if ld, err := strconv.Atoi(lastSegment(o.LogicalDevice.ODataID)); err == nil {
				h.Head = &ld
			}
		}
	} else if s.MemorySummary.TotalSystemMemoryGiB != nil {
		h.GrantedBytes = uint64(*s.MemorySummary.TotalSystemMemoryGiB * (1 << 30))
	}
	return h
}

func optInt(p *int) string {
	if p == nil {
		return "-"
	}
	return strconv.Itoa(*p)
}

// --- chunks ---

type chunkOut struct {
	ID          string   `json:"id"`
	URI         string   `json:"uri"`
	Name        string   `json:"name,omitempty"`
	SizeBytes   uint64   `json:"size_bytes"`
	Region      *int     `json:"region,omitempty"`
	Sharable    bool     `json:"sharable"`
	State       string   `json:"state"`
	Owner       string   `json:"owner,omitempty"`
	Hosts       []string `json:"hosts"`
	Connections []string `json:"connections"`
	Health      string   `json:"health,omitempty"`
	// Stranded: the chunk's grants were lost and no host holds it.
	Stranded bool `json:"stranded,omitempty"`
}

func toChunkOut(ch client.MemoryChunk) chunkOut {
	o := chunkOut{ID: ch.ID, URI: ch.ODataID, Name: ch.DisplayName, SizeBytes: mibBytes(ch.MemoryChunkSizeMiB),
		State: ch.Status.State, Health: ch.Status.Health, Hosts: []string{}, Connections: []string{}}
	if x := ch.Oem.CxlPool; x != nil {
		o.Region, o.Sharable, o.Owner, o.Stranded = x.Region, x.Sharable, x.Owner, x.Stranded
		if o.Name == "" {
			o.Name = x.Name
		}
		for _, g := range x.Grants {
			if !slices.Contains(o.Hosts, g.SystemID) {
				o.Hosts = append(o.Hosts, g.SystemID)
			}
			o.Connections = append(o.Connections, g.Connection.ODataID)
		}
	}
	return o
}

func cmdChunks(ctx context.Context, a *app, args []string) error {
	return list(ctx, a, "chunks", args,
		func(ctx context.Context, c *client.Client) ([]chunkOut, error) {
			return convert(toChunkOut)(c.Chunks(ctx))
		},
		[]string{"ID", "NAME", "SIZE", "REGION", "SHARABLE", "STATE", "HOSTS"},
		func(o chunkOut) []string {
			state := orDash(o.State)
			if o.Stranded {
				state += " (stranded: grant lost)"
			}
			return []string{o.ID, orDash(o.Name), size(o.SizeBytes), optInt(o.Region), yesNo(o.Sharable),
				state, orDash(strings.Join(o.Hosts, ","))}
		})
}

// --- connections ---

type connectionOut struct {
	ID           string   `json:"id"`
	URI          string   `json:"uri"`
	Chunks       []string `json:"chunks"`
	Hosts        []string `json:"hosts"`
	State        string   `json:"state"`
	GrantState   string   `json:"grant_state,omitempty"`
	GrantedBytes uint64   `json:"granted_bytes"`
	Extents      int      `json:"extents"`
	Memory       string   `json:"memory,omitempty"`
}

// endpointSystems maps initiator endpoint URIs to the ComputerSystem Ids
// they stand for.
func endpointSystems(ctx context.Context, c *client.Client) (map[string]string, error) {
	eps, err := c.Endpoints(ctx)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, ep := range eps {
		for _, ce := range ep.ConnectedEntities {
			if ce.EntityLink != nil && strings.HasPrefix(ce.EntityLink.ODataID, client.SystemsURI+"/") {
				m[ep.ODataID] = lastSegment(ce.EntityLink.ODataID)
			}
		}
	}
	return m, nil
}

func toConnectionOut(cn client.Connection, systems map[string]string) connectionOut {
	o := connectionOut{ID: cn.ID, URI: cn.ODataID, State: cn.Status.State, Hosts: []string{}, Chunks: []string{}}
	for _, u := range cn.Chunks() {
		o.Chunks = append(o.Chunks, lastSegment(u))
	}
	for _, l := range cn.Links.InitiatorEndpoints {
		h, ok := systems[l.ODataID]
		if !ok {
			h = lastSegment(l.ODataID)
		}
		o.Hosts = append(o.Hosts, h)
	}
	if x := cn.Oem.CxlPool; x != nil {
		o.GrantState, o.GrantedBytes, o.Extents = x.GrantState, mibBytes(x.GrantedMiB), x.ExtentCount
		if x.Memory != nil {
			o.Memory = x.Memory.ODataID
		}
	}
	return o
}

func cmdConnections(ctx context.Context, a *app, args []string) error {
	return list(ctx, a, "connections", args,
		func(ctx context.Context, c *client.Client) ([]connectionOut, error) {
			conns, err := c.Connections(ctx)
			if err != nil {
				return nil, err
			}
			systems, err := endpointSystems(ctx, c)
			if err != nil {
				return nil, err
			}
			return convert(func(cn client.Connection) connectionOut { return toConnectionOut(cn, systems) })(conns, nil)
		},
		[]string{"ID", "CHUNK", "HOST", "STATE", "GRANT", "GRANTED", "EXTENTS"},
		func(o connectionOut) []string {
			return []string{o.ID, strings.Join(o.Chunks, ","), strings.Join(o.Hosts, ","), orDash(o.State),
				orDash(o.GrantState), size(o.GrantedBytes), strconv.Itoa(o.Extents)}
		})
}

// --- request, share ---

type extentOut struct {
	Region      int    `json:"region"`
	OffsetBytes uint64 `json:"offset_bytes"` // from the region's base
	SizeBytes   uint64 `json:"size_bytes"`
}

// grantOut is the answer of request and share.
type grantOut struct {
	State         string      `json:"state"` // "granted", or "pending" without --wait
	System        string      `json:"system"`
	Chunk         string      `json:"chunk"`
	ChunkURI      string      `json:"chunk_uri"`
	SizeBytes     uint64      `json:"size_bytes"`
	Connection    string      `json:"connection,omitempty"`
	ConnectionURI string      `json:"connection_uri,omitempty"`
	GrantedBytes  uint64      `json:"granted_bytes"`
	Memory        string      `json:"memory,omitempty"`
	Extents       []extentOut `json:"extents"`
	Task          string      `json:"task,omitempty"`
}

// targetSystem is the host a request is for: --host, else the caller's
// own (a host account's Oem.CxlPool.SystemId).
func targetSystem(ctx context.Context, c *client.Client, host string) (string, error) {
	if host != "" {
		return systemArg(host)
	}
	me, err := c.Me(ctx)
	if err != nil {
		return "", err
	}
	if me.SystemID() == "" {
		return "", usagef("--host is required: account %s is not bound to a host", me.UserName)
	}
	return me.SystemID(), nil
}

func cmdRequest(ctx context.Context, a *app, args []string) error {
	fs := a.flags("request", "SIZE [--host HostN] [--shared] [--name N] [--region R] [--wait=false]")
	host := fs.String("host", "", "the host (`HostN`) to connect the capacity to (default: your account's host)")
	shared := fs.Bool("shared", false, "reserve in a sharable region, so that 'poolctl share' can give the chunk to other hosts")
	name := fs.String("name", "", "a `name` for the chunk")
	region := fs.Int("region", -1, "reserve in DC region `R` (default: the service picks)")
	wait := fs.Bool("wait", true, "wait until the host has accepted the capacity (--wait=false returns once it is offered)")
	pos, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	n, err := sizeArg(pos[0])
	if err != nil {
		return err
	}
	ctx, cancel := a.deadline(ctx, false)
	defer cancel()
	c, err := a.client()
	if err != nil {
		return err
	}
	if pool, err := c.Pool(ctx); err == nil {
		if err := sizeCheck(n, blockFor(pool, *region), pos[0]); err != nil {
			return err
		}
	}
	sys, err := targetSystem(ctx, c, *host)
	if err != nil {
		return explain(err)
	}
	ep, err := c.Initiator(ctx, sys)
	if err != nil {
		return explain(err)
	}
	req := client.ChunkRequest{SizeMiB: n / mebibyte, Sharable: *shared, Name: *name}
	if *region >= 0 {
		req.Region = region
	}
	chunk, err := c.ReserveChunk(ctx, req)
	if err != nil {
		return explain(err)
	}
	fmt.Fprintf(a.stderr, "Reserved chunk %s (%s); connecting it to %s...\n", chunk.ID, size(n), sys)
	out, err := a.connect(ctx, c, chunk, sys, ep.ODataID, *wait)
	if err != nil {
		return a.undoReserve(ctx, c, chunk, err)
	}
	return a.printGrant(out)
}

// blockFor is the chunk size increment for a request in region (-1: any):
// that region's block size, else the pool's increment.
func blockFor(pool client.MemoryDomain, region int) uint64 {
	if o := pool.Oem.CxlPool; o != nil && region >= 0 {
		for _, r := range o.Regions {
			if r.Region == region {
				return mibBytes(r.BlockSizeMiB)
			}
		}
	}
	return mibBytes(pool.MemoryChunkIncrementMiB)
}

// undoReserve frees the chunk a failed request reserved, so that nothing
// is left behind; an interrupted request leaves it, since the grant may
// still complete.
func (a *app) undoReserve(ctx context.Context, c *client.Client, chunk client.MemoryChunk, cause error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w\nthe grant may still complete: see `poolctl connections`; `poolctl free %s` frees the chunk if it did not", explain(cause), chunk.ID)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := deleteChunk(cctx, c, chunk.ODataID); err != nil {
		return fmt.Errorf("%w\nfreeing the reserved chunk %s failed too: %v", explain(cause), chunk.ID, err)
	}
	return fmt.Errorf("%w\n(the reserved chunk %s was freed again)", explain(cause), chunk.ID)
}

// deleteChunk frees a chunk, retrying briefly while a grant that just
// failed is still being wound down (409).
func deleteChunk(ctx context.Context, c *client.Client, uri string) error {
	wait := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := c.DeleteAndWait(ctx, uri, nil)
		if client.StatusOf(err) != http.StatusConflict || attempt == 6 {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait *= 2
	}
}

// connect connects chunk to the initiator endpoint of sys and describes
// the result.
func (a *app) connect(ctx context.Context, c *client.Client, chunk client.MemoryChunk, sys, initiator string, wait bool) (grantOut, error) {
	out := grantOut{State: "pending", System: sys, Chunk: chunk.ID, ChunkURI: chunk.ODataID,
		SizeBytes: mibBytes(chunk.MemoryChunkSizeMiB), Extents: []extentOut{}}
	r, err := c.StartConnect(ctx, chunk.ODataID, initiator)
	if err != nil {
		return out, err
	}
	if r.Status == http.StatusAccepted && !wait {
		out.Task = r.Location()
		return out, nil
	}
	if r, err = c.Settle(ctx, r, nil); err != nil {
		return out, err
	}
	var cn client.Connection
	if len(r.Body) > 0 {
		err = r.Decode(&cn)
	} else {
		err = c.Get(ctx, r.Location(), &cn)
	}
	if err != nil {
		return out, err
	}
	out.State, out.Connection, out.ConnectionURI = "granted", cn.ID, cn.ODataID
	if x := cn.Oem.CxlPool; x != nil {
		out.GrantedBytes = mibBytes(x.GrantedMiB)
		if x.Memory != nil {
			out.Memory = x.Memory.ODataID
		}
	}
	// The extents are a detail: without them the grant still stands.
	if err := a.addExtents(ctx, c, chunk.ODataID, &out); err != nil {
		fmt.Fprintf(a.stderr, "poolctl: note: could not list the granted extents: %v\n", err)
	}
	return out, nil
}

// addExtents finds the host's Memory for the chunk and, through the
// memory region it lies in, the extents carrying the chunk's tag.
func (a *app) addExtents(ctx context.Context, c *client.Client, chunkURI string, out *grantOut) error {
	var mem client.Memory
	if out.Memory != "" {
		if err := c.Get(ctx, out.Memory, &mem); err != nil {
			return err
		}
	} else {
		var sys client.System
		if err := c.Get(ctx, client.SystemsURI+"/"+out.System, &sys); err != nil {
			return err
		}
		mems, err := c.SystemMemory(ctx, sys)
		if err != nil {
			return err
		}
		for _, m := range mems {
			if slices.ContainsFunc(m.Links.MemoryMediaSources, func(l client.Link) bool { return l.ODataID == chunkURI }) {
				mem = m
			}
		}
		if mem.ODataID == "" {
			return fmt.Errorf("%s shows no Memory backed by %s", out.System, chunkURI)
		}
		out.Memory = mem.ODataID
	}
	if out.GrantedBytes == 0 {
		out.GrantedBytes = mibBytes(mem.CapacityMiB)
	}
	var chunk client.MemoryChunk
	if err := c.Get(ctx, chunkURI, &chunk); err != nil {
		return err
	}
	if chunk.Oem.CxlPool == nil || chunk.Oem.CxlPool.Tag == "" {
		return nil // nothing names the chunk's extents
	}
	tag := chunk.Oem.CxlPool.Tag
	for _, l := range mem.Links.MemoryRegionMediaSources {
		var r client.MemoryRegion
		if err := c.Get(ctx, l.ODataID, &r); err != nil {
			return err
		}
		for _, e := range r.MemoryExtents {
			if e.Tag == tag {
				out.Extents = append(out.Extents, extentOut{Region: r.RegionNumber, OffsetBytes: mibBytes(e.ExtentOffsetMiB),
					SizeBytes: mibBytes(e.ExtentSizeMiB)})
			}
		}
	}
	return nil
}

func (a *app) printGrant(out grantOut) error {
	if a.g.json {
		return a.printJSON(out)
	}
	w := a.stdout
	if out.State == "pending" {
		fmt.Fprintf(w, "Offered %s to %s; the host has not answered yet.\n", size(out.SizeBytes), out.System)
		tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintf(tw, "  Chunk:\t%s\n  Task:\t%s\n", out.ChunkURI, out.Task)
		return tw.Flush()
	}
	fmt.Fprintf(w, "Granted %s to %s.\n", size(out.GrantedBytes), out.System)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "  Connection:\t%s\n", out.ConnectionURI)
	fmt.Fprintf(tw, "  Chunk:\t%s (%s)\n", out.ChunkURI, size(out.SizeBytes))
	if out.Memory != "" {
		fmt.Fprintf(tw, "  Memory:\t%s\n", out.Memory)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(out.Extents) == 0 {
		return nil
	}
	rows := make([][]string, 0, len(out.Extents))
	for i, e := range out.Extents {
		rows = append(rows, []string{strconv.Itoa(i), strconv.Itoa(e.Region), size(e.OffsetBytes), size(e.SizeBytes)})
	}
	return a.table([]string{"EXTENT", "REGION", "OFFSET", "SIZE"}, rows)
}

func cmdShare(ctx context.Context, a *app, args []string) error {
	fs := a.flags("share", "CHUNK --host HostN [--wait=false]")
	host := fs.String("host", "", "the host (`HostN`) to share the chunk with")
	wait := fs.Bool("wait", true, "wait until the host has accepted the capacity")
	pos, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *host == "" {
		return usagef("share: --host is required")
	}
	uri, err := memberURI(client.ChunksURI, "chunk", pos[0])
	if err != nil {
		return err
	}
	sys, err := systemArg(*host)
	if err != nil {
		return err
	}
	ctx, cancel := a.deadline(ctx, false)
	defer cancel()
	c, err := a.client()
	if err != nil {
		return err
	}
	var chunk client.MemoryChunk
	if err := c.Get(ctx, uri, &chunk); err != nil {
		return explain(err)
	}
	ep, err := c.Initiator(ctx, sys)
	if err != nil {
		return explain(err)
	}
	out, err := a.connect(ctx, c, chunk, sys, ep.ODataID, *wait)
	if err != nil {
		return explain(err)
	}
	return a.printGrant(out)
}

// --- release, free ---

type releaseOut struct {
	Released []connectionOut `json:"released"`
	Freed    *chunkOut       `json:"freed,omitempty"`
}

func cmdRelease(ctx context.Context, a *app, args []string) error {
	fs := a.flags("release", "CONNECTION | --chunk CHUNK [--free] [--force]")
	chunkArg := fs.String("chunk", "", "release every connection of `CHUNK` (that you may see)")
	free := fs.Bool("free", false, "then free the chunk too")
	force := fs.Bool("force", false, "force the release even if the host's agent says a program maps the memory "+
		"(administrators and operators; the program loses it)")
	pos, err := parse(fs, args, 0, 1)
	if err != nil {
		return err
	}
	if (len(pos) == 1) == (*chunkArg != "") {
		return usagef("release: name a CONNECTION or --chunk CHUNK (one of them)")
	}
	ctx, cancel := a.deadline(ctx, false)
	defer cancel()
	c, err := a.client()
	if err != nil {
		return err
	}
	var conns []client.Connection
	var chunkURI string
	if len(pos) == 1 {
		uri, err := memberURI(client.ConnectionsURI, "connection", pos[0])
		if err != nil {
			return err
		}
		var cn client.Connection
		if err := c.Get(ctx, uri, &cn); err != nil {
			return explain(err)
		}
		conns = append(conns, cn)
		if *free {
			if chs := cn.Chunks(); len(chs) == 1 {
				chunkURI = chs[0]
			} else {
				return fmt.Errorf("release --free: connection %s has %d chunks; free them with `poolctl free`", cn.ID, len(chs))
			}
		}
	} else {
		if chunkURI, err = memberURI(client.ChunksURI, "chunk", *chunkArg); err != nil {
			return err
		}
		if err := c.Get(ctx, chunkURI, nil); err != nil {
			return explain(err)
		}
		all, err := c.Connections(ctx)
		if err != nil {
			return explain(err)
		}
		for _, cn := range all {
			if slices.Contains(cn.Chunks(), chunkURI) {
				conns = append(conns, cn)
			}
		}
	}
	systems, err := endpointSystems(ctx, c)
	if err != nil {
		return explain(err)
	}
	out := releaseOut{Released: []connectionOut{}}
	for _, cn := range conns {
		if err := releaseConnection(ctx, c, cn.ODataID, *force); err != nil {
			return a.releaseFailed(out, explain(err))
		}
		o := toConnectionOut(cn, systems)
		out.Released = append(out.Released, o)
		if !a.g.json {
			fmt.Fprintf(a.stdout, "Released connection %s (chunk %s from %s).\n", o.ID, strings.Join(o.Chunks, ","), strings.Join(o.Hosts, ","))
		}
	}
	if len(conns) == 0 && !a.g.json {
		fmt.Fprintf(a.stdout, "Chunk %s has no connections.\n", lastSegment(chunkURI))
	}
	if *free && chunkURI != "" {
		fo, err := freeChunk(ctx, c, chunkURI)
		if err != nil {
			return a.releaseFailed(out, err)
		}
		out.Freed = &fo
		if !a.g.json {
			fmt.Fprintf(a.stdout, "Freed chunk %s (%s).\n", fo.ID, size(fo.SizeBytes))
		}
	}
	if a.g.json {
		return a.printJSON(out)
	}
	return nil
}

// releaseConnection releases one connection, forced if asked
// (CxlPool.ForceRelease), and waits for the release.
func releaseConnection(ctx context.Context, c *client.Client, uri string, force bool) error {
	if !force {
		return c.DeleteAndWait(ctx, uri, nil)
	}
	r, err := c.StartForceRelease(ctx, uri)
	if err == nil {
		_, err = c.Settle(ctx, r, nil)
	}
	return err
}

// releaseFailed still reports what was released before the failure.
func (a *app) releaseFailed(out releaseOut, err error) error {
	if a.g.json && len(out.Released) > 0 {
		_ = a.printJSON(out)
	}
	return err
}

// freeChunk deletes a chunk and describes it.
func freeChunk(ctx context.Context, c *client.Client, uri string) (chunkOut, error) {
	var ch client.MemoryChunk
	if err := c.Get(ctx, uri, &ch); err != nil {
		return chunkOut{}, explain(err)
	}
	if err := c.DeleteAndWait(ctx, uri, nil); err != nil {
		if client.StatusOf(err) == http.StatusConflict {
			return chunkOut{}, fmt.Errorf("%w\n(hosts still hold it: `poolctl release --chunk %s --free` takes it back first)", err, ch.ID)
		}
		return chunkOut{}, explain(err)
	}
	return toChunkOut(ch), nil
}

func cmdFree(ctx context.Context, a *app, args []string) error {
	fs := a.flags("free", "CHUNK... | --stranded")
	stranded := fs.Bool("stranded", false, "free every chunk whose grants were lost and that no host holds (one request)")
	pos, err := parse(fs, args, 0, -1)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0 && !*stranded:
		return usagef("free: missing argument: name one or more CHUNKs, or --stranded (see poolctl free -h)")
	case len(pos) > 0 && *stranded:
		return usagef("free: name CHUNKs or --stranded, not both")
	}
	var uris []string
	for _, p := range pos {
		uri, err := memberURI(client.ChunksURI, "chunk", p)
		if err != nil {
			return err
		}
		uris = append(uris, uri)
	}
	ctx, cancel := a.deadline(ctx, false)
	defer cancel()
	c, err := a.client()
	if err != nil {
		return err
	}
	if *stranded {
		freed, mib, err := c.FreeStranded(ctx)
		if err != nil {
			return explain(err)
		}
		ids := make([]string, 0, len(freed))
		for _, u := range freed {
			ids = append(ids, lastSegment(u))
		}
		if a.g.json {
			return a.printJSON(struct {
				Freed      []string `json:"freed"`
				FreedBytes uint64   `json:"freed_bytes"`
			}{ids, mibBytes(mib)})
		}
		if len(ids) == 0 {
			fmt.Fprintln(a.stdout, "No stranded chunks.")
			return nil
		}
		fmt.Fprintf(a.stdout, "Freed %d stranded chunks (%s): %s.\n", len(ids), size(mibBytes(mib)), strings.Join(ids, ", "))
		return nil
	}
	// Each chunk is freed on its own: one that cannot be does not keep
	// the others; the failures are reported together at the end.
	out := []chunkOut{}
	var errs []error
	for _, uri := range uris {
		fo, err := freeChunk(ctx, c, uri)
		if err != nil {
			errs = append(errs, fmt.Errorf("chunk %s: %w", lastSegment(uri), err))
			continue
		}
		out = append(out, fo)
		if !a.g.json {
			fmt.Fprintf(a.stdout, "Freed chunk %s (%s).\n", fo.ID, size(fo.SizeBytes))
		}
	}
	if a.g.json && (len(out) > 0 || len(errs) == 0) {
		if err := a.printJSON(out); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}
