package fm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"cxlpool/fabric"
	"cxlpool/fabric/cci"
)

// Identify readiness: a device that is still starting answers Retry
// Required (CXL 3.2 §7.6.6.1); Discover keeps asking with a doubling pause
// for about this long.
const (
	readyBudget     = 5 * time.Second
	readyBackoff    = 20 * time.Millisecond
	readyBackoffMax = 500 * time.Millisecond
)

// Discover runs the discovery sequence of cxl-wire.md §1.5 and §3.7–§3.8:
// Identify (waiting out Retry Required), Set Response Message Limit, the
// Command Effects Log, Identify Memory Device, the LD map and heads, DCD
// info and the region configuration (turning Sanitize on Release on where
// it is off and may be changed: configureRegions), and finally it enables
// event notifications and drains the event logs once, which re-arms them.
func (c *Client) Discover(ctx context.Context) (fabric.Box, error) {
	var box fabric.Box
	id, err := c.identify(ctx)
	if err != nil {
		return box, err
	}
	if id.MaxMessageSizeExp < 8 || id.MaxMessageSizeExp > 10 {
		return box, fmt.Errorf("fm: discover: device message size exponent %d not in 8…10", id.MaxMessageSizeExp)
	}
	if id.ComponentType != cci.ComponentType3 {
		c.log.Warn("fm: device is not a Type-3 component", "type", id.ComponentType)
	}
	box.Identity = fabric.Identity{
		VendorID: id.VendorID, DeviceID: id.DeviceID,
		SubsystemVendorID: id.SubsystemVendorID, SubsysID: id.SubsystemID,
		Serial:        id.Serial,
		MaxPayload:    1 << id.MaxMessageSizeExp,
		ComponentType: id.ComponentType,
	}
	c.mu.Lock()
	c.maxRequest = box.Identity.MaxPayload
	c.mu.Unlock()

	if err := c.setResponseLimit(ctx, min(c.cfg.ResponseLimitExp, id.MaxMessageSizeExp)); err != nil {
		return box, err
	}
	if box.Supported, err = c.readCEL(ctx); err != nil {
		return box, err
	}

	var md cci.IdentifyMemoryDeviceResp
	if err := c.Do(ctx, cci.OpIdentifyMemoryDevice, nil, &md); err != nil {
		return box, fmt.Errorf("fm: discover: %w", err)
	}
	box.Identity.FirmwareRevision = md.FWRevision
	if box.Identity.TotalCapacity, err = units(md.TotalCapacity); err != nil {
		return box, fmt.Errorf("fm: discover: total capacity: %w", err)
	}

	if box.Heads, err = c.Heads(ctx); err != nil {
		return box, err
	}

	var info cci.GetDCDInfoResp
	if err := c.Do(ctx, cci.OpGetDCDInfo, nil, &info); err != nil {
		return box, fmt.Errorf("fm: discover: %w", err)
	}
	box.AddPolicies, box.ReleasePolicies = info.AddPolicies, info.ReleasePolicies
	if box.TotalDynamic, err = units(info.TotalCapacity); err != nil {
		return box, fmt.Errorf("fm: discover: dynamic capacity: %w", err)
	}
	if err := c.readRegions(ctx, info, &box); err != nil {
		return box, err
	}
	if err := c.configureRegions(ctx, info, &box); err != nil {
		return box, err
	}

	if err := c.enableEvents(ctx); err != nil {
		return box, err
	}
	box.DiscoveredAt = c.cfg.Clock()
	return box, nil
}

// units converts a count of 256 MB units to bytes.
func units(n uint64) (uint64, error) {
	if n > math.MaxUint64/cci.CapacityUnit {
		return 0, fmt.Errorf("%d × 256 MB overflows 64 bits", n)
	}
	return n * cci.CapacityUnit, nil
}

// identify sends Identify until the device stops answering Retry Required
// or the readiness budget runs out.
func (c *Client) identify(ctx context.Context) (cci.IdentifyResp, error) {
	var id cci.IdentifyResp
	deadline := time.Now().Add(readyBudget)
	pause := readyBackoff
	for {
		err := c.Do(ctx, cci.OpIdentify, nil, &id)
		if err == nil {
			return id, nil
		}
		if !errors.Is(err, cci.RetryRequired) || time.Now().Add(pause).After(deadline) {
			return id, fmt.Errorf("fm: discover: %w", err)
		}
		c.log.Debug("fm: device not ready", "pause", pause)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return id, fmt.Errorf("fm: discover: %w", ctx.Err())
		case <-t.C:
		}
		pause = min(2*pause, readyBackoffMax)
	}
}

// setResponseLimit asks the device to cap responses at 2^exp bytes and
// pages every later variable-size read by what the device actually set.
func (c *Client) setResponseLimit(ctx context.Context, exp uint8) error {
	var got cci.ResponseMessageLimit
	if err := c.Do(ctx, cci.OpSetResponseMessageLimit, &cci.ResponseMessageLimit{Exp: exp}, &got); err != nil {
		return fmt.Errorf("fm: discover: %w", err)
	}
	if got.Exp < 8 || got.Exp > 10 {
		return fmt.Errorf("fm: discover: device set response limit exponent %d, not in 8…10", got.Exp)
	}
	// A device that set more than asked still gets paged by our own
	// limit, so no response outgrows the FM's buffers.
	c.mu.Lock()
	c.respLimit = 1 << min(got.Exp, exp)
	c.mu.Unlock()
	return nil
}

// readCEL returns the opcodes listed in the Command Effects Log. Both log
// commands are optional on a Type-3 MCTP CCI, so a device that does not
// implement them yields an empty list rather than an error.
func (c *Client) readCEL(ctx context.Context) ([]cci.Opcode, error) {
	var logs cci.GetSupportedLogsResp
	if err := c.Do(ctx, cci.OpGetSupportedLogs, nil, &logs); err != nil {
		if errors.Is(err, cci.Unsupported) {
			c.log.Warn("fm: device has no supported-logs command; CEL unknown")
			return nil, nil
		}
		return nil, fmt.Errorf("fm: discover: %w", err)
	}
	var size uint32
	found := false
	for _, e := range logs.Entries {
		if e.UUID == cci.CELUUID {
			size, found = e.Size, true
			break
		}
	}
	if !found {
		c.log.Warn("fm: device lists no command effects log")
		return nil, nil
	}
	raw := make([]byte, 0, size)
	chunk := uint32(c.limit()) &^ (cci.CELEntryLen - 1)
	for off := uint32(0); off < size; {
		n := min(chunk, size-off)
		req := &cci.GetLogReq{UUID: cci.CELUUID, Offset: off, Length: n}
		var page rawPayload
		if err := c.Do(ctx, cci.OpGetLog, req, &page); err != nil {
			return nil, fmt.Errorf("fm: discover: command effects log at %d: %w", off, err)
		}
		if len(page) == 0 || uint32(len(page)) > n {
			return nil, fmt.Errorf("fm: discover: command effects log at %d: %d bytes for %d requested", off, len(page), n)
		}
		raw = append(raw, page...)
		off += uint32(len(page))
	}
	cel, err := cci.ParseCEL(raw)
	if err != nil {
		return nil, fmt.Errorf("fm: discover: %w", err)
	}
	ops := make([]cci.Opcode, len(cel))
	for i, e := range cel {
		ops[i] = e.Opcode
	}
	return ops, nil
}

// rawPayload keeps a response payload as bytes (Get Log output).
type rawPayload []byte

func (p *rawPayload) UnmarshalBinary(b []byte) error {
	*p = append((*p)[:0], b...)
	return nil
}

// Heads reads the LD map (5500h) and every head's link state (5501h),
// paging both by the response limit, and refreshes the port → LD map the
// event pump uses for link events.
func (c *Client) Heads(ctx context.Context) ([]fabric.Head, error) {
	var ldMap []uint8
	var numLDs, numHeads int
	for start := 0; ; {
		req := &cci.GetMultiHeadedInfoReq{StartLD: uint8(start), Limit: uint8(c.perPage(8, 1, math.MaxUint8))}
		var resp cci.GetMultiHeadedInfoResp
		if err := c.Do(ctx, cci.OpGetMultiHeadedInfo, req, &resp); err != nil {
			return nil, fmt.Errorf("fm: heads: %w", err)
		}
		if start == 0 {
			numLDs, numHeads = int(resp.NumLDs), int(resp.NumHeads)
		}
		if int(resp.StartLD) != start {
			return nil, fmt.Errorf("fm: heads: LD map page starts at %d, asked %d", resp.StartLD, start)
		}
		ldMap = append(ldMap, resp.LDMap...)
		start += len(resp.LDMap)
		if start >= numLDs {
			break
		}
		if len(resp.LDMap) == 0 {
			return nil, fmt.Errorf("fm: heads: empty LD map page at %d of %d", start, numLDs)
		}
	}
	portLD := make(map[uint8]uint16, numHeads)
	for ld, port := range ldMap[:min(len(ldMap), numLDs)] {
		if _, dup := portLD[port]; port != cci.LDUnassigned && !dup {
			portLD[port] = uint16(ld)
		}
	}

	heads := make([]fabric.Head, 0, numHeads)
	for start := 0; start < numHeads; {
		n := min(c.perPage(4, cci.HeadInfoLen, math.MaxUint8), numHeads-start)
		var resp cci.GetHeadInfoResp
		if err := c.Do(ctx, cci.OpGetHeadInfo, &cci.GetHeadInfoReq{StartHead: uint8(start), Count: uint8(n)}, &resp); err != nil {
			return nil, fmt.Errorf("fm: heads: %w", err)
		}
		if len(resp.Heads) == 0 || len(resp.Heads) > n {
			return nil, fmt.Errorf("fm: heads: %d head blocks for %d requested at %d", len(resp.Heads), n, start)
		}
		for _, h := range resp.Heads {
			ld, ok := portLD[h.Port]
			if !ok {
				ld = 0xffff
			}
			heads = append(heads, fabric.Head{
				Port: h.Port, LD: ld,
				MaxWidth: h.MaxWidth, NegotiatedWidth: h.NegotiatedWidth,
				MaxSpeed: h.MaxSpeed, CurrentSpeed: h.CurrentSpeed,
				LTSSM: h.LTSSM, LinkUp: h.LTSSM == cci.LTSSML0,
			})
		}
		start += len(resp.Heads)
	}
	c.mu.Lock()
	c.portLD = portLD
	c.mu.Unlock()
	return heads, nil
}

// ldOfPort maps a head's port to its LD-ID. Before discovery, or for a
// port the LD map does not know, the port number stands in: in this box
// port n owns LD n.
func (c *Client) ldOfPort(port uint8) uint16 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ld, ok := c.portLD[port]; ok {
		return ld
	}
	return uint16(port)
}

// readRegions fills box.Regions and the per-host tracking limits from Get
// Host DC Region Configuration for host 0, paging by the response limit.
// Every LD sees the same regions on this device.
func (c *Client) readRegions(ctx context.Context, info cci.GetDCDInfoResp, box *fabric.Box) error {
	const hdr, trailer = 4, 16
	avail := cci.MaxDCRegions
	for start := 0; start < avail; {
		n := min(c.perPage(hdr+trailer, cci.RegionConfigLen, math.MaxUint8), avail-start)
		req := &cci.GetHostDCRegionConfigReq{HostID: 0, RegionCount: uint8(n), StartRegion: uint8(start)}
		var resp cci.GetHostDCRegionConfigResp
		if err := c.Do(ctx, cci.OpGetHostDCRegionConfig, req, &resp); err != nil {
			return fmt.Errorf("fm: discover: %w", err)
		}
		if start == 0 {
			avail = min(int(resp.AvailableRegions), cci.MaxDCRegions)
			box.ExtentsPerHost, box.TagsPerHost = resp.SupportedExtents, resp.SupportedTags
		}
		if len(resp.Regions) == 0 {
			if start < avail {
				return fmt.Errorf("fm: discover: no region entries at %d of %d", start, avail)
			}
			break
		}
		for i, r := range resp.Regions {
			idx := start + i
			box.Regions = append(box.Regions, fabric.Region{
				Index:             idx,
				Base:              r.Base,
				DecodeLength:      r.DecodeLength,
				Length:            r.Length,
				BlockSize:         r.BlockSize,
				Sharable:          r.Attributes1&cci.AttrSharable != 0,
				SanitizeOnRelease: r.SanitizeOnRelease,
				SoRConfigurable:   idx < 8 && info.SoRConfigurable&(1<<idx) != 0,
			})
		}
		start += len(resp.Regions)
	}
	return nil
}

// configureRegions turns Sanitize on Release on (Set DC Region
// Configuration, 5602h) in every region where it is off and the device lets
// it be changed. The FM asks for sanitize in each release it sends, but a
// host that gives capacity back on its own (4803h) is sanitized only by the
// region's setting: with it off, the next host given those blocks reads the
// previous one's data. 5602h also sets the block size, so the current one
// is sent back unchanged. The device refuses while a region holds capacity
// on any LD (Unsupported, cxl-wire.md §3.8); such a region, like one whose
// setting is fixed, keeps SoR off, is logged as a warning and is refused
// for new chunks by the capacity manager (dcd's allocation rule). The
// regions are read again after a change, so box.Regions is what the device
// says, never what the FM asked for.
func (c *Client) configureRegions(ctx context.Context, info cci.GetDCDInfoResp, box *fabric.Box) error {
	why := make(map[int]string)
	changed := false
	for _, r := range box.Regions {
		if r.SanitizeOnRelease {
			continue
		}
		if !r.SoRConfigurable {
			why[r.Index] = "the device does not let it be changed"
			continue
		}
		req := &cci.SetDCRegionConfigReq{Region: uint8(r.Index), BlockSize: r.BlockSize, SanitizeOnRelease: true}
		if err := c.Do(ctx, cci.OpSetDCRegionConfig, req, &cci.SetDCRegionConfigResp{}); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("fm: discover: region %d: %w", r.Index, err)
			}
			why[r.Index] = "the device refused to turn it on: " + err.Error()
			continue
		}
		changed = true
	}
	if changed {
		box.Regions = box.Regions[:0:0] // a fresh slice: readers may hold the old one
		if err := c.readRegions(ctx, info, box); err != nil {
			return err
		}
	}
	for _, r := range box.Regions {
		if r.SanitizeOnRelease {
			continue
		}
		reason, ok := why[r.Index]
		if !ok {
			reason = "the device accepted the change but still reports it off"
		}
		c.log.Warn("fm: region does not sanitize capacity a host releases itself (Sanitize on Release is off); no new chunks will be placed in it",
			"region", r.Index, "why", reason)
	}
	return nil
}
