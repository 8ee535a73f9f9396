package fleet

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Via says how a box would serve a host.
type Via string

const (
	// ViaHead: the host is cabled to one of the box's heads and gets
	// the capacity as Dynamic Capacity on its link.
	ViaHead Via = "head"
	// ViaExport: the host is in a remote rack and reaches the capacity
	// through the box's export server.
	ViaExport Via = "export"
)

// Offer is a box that can give the capacity asked for.
type Offer struct {
	Box    BoxID  `json:"box"`
	API    string `json:"api,omitempty"`
	Export string `json:"export,omitempty"`
	Via    Via    `json:"via"`
	Host   string `json:"host,omitempty"` // the host's name on that box (ViaHead)
	LD     uint16 `json:"ld,omitempty"`
	Region int    `json:"region"`
	Free   uint64 `json:"free"` // the region's free bytes now
}

// Answer is what the fleet says to "which box can give host X N bytes".
// Offers are best first (most free capacity); Refusals say, box by box,
// which rule excluded a box that might otherwise have served.
type Answer struct {
	Host     string   `json:"host"`
	Size     uint64   `json:"size"`
	Remote   bool     `json:"remote"` // the host is cabled to no box: exports only
	Offers   []Offer  `json:"offers"`
	Refusals []string `json:"refusals,omitempty"`
}

// Place answers which boxes can give host (a HostRef) size bytes. A host
// cabled to a box can only be served by that box, through its head, within
// the host's quota and a region's free capacity (a chunk lives in one
// region, in whole blocks). A host cabled to none is in a remote rack and
// can be served by any box that runs an export server. Place only reads
// the records: the request itself goes to the offering box's API.
func Place(invs []Inventory, host string, size uint64) (Answer, error) {
	if size == 0 {
		return Answer{}, fmt.Errorf("fleet: placement needs a size above zero")
	}
	wantBox, name := HostRef(host)
	if name == "" {
		return Answer{}, fmt.Errorf("fleet: placement needs a host name (HOST or BOX/HOST)")
	}
	ans := Answer{Host: host, Size: size, Offers: []Offer{}}
	cabled := false
	for _, inv := range invs {
		if wantBox != "" && inv.Box != wantBox {
			continue
		}
		for _, h := range inv.Heads {
			if !strings.EqualFold(h.Host, name) {
				continue
			}
			cabled = true
			switch {
			case !h.LinkUp:
				ans.Refusals = append(ans.Refusals, fmt.Sprintf("%s: %s's link is down (a host is served only through its own head)", inv.Box, h.Host))
			case h.Quota != 0 && h.Granted+size > h.Quota:
				ans.Refusals = append(ans.Refusals, fmt.Sprintf("%s: %s holds %d of its quota %d bytes; %d more would exceed it", inv.Box, h.Host, h.Granted, h.Quota, size))
			default:
				if r, ok := bestRegion(inv, size); ok {
					ans.Offers = append(ans.Offers, Offer{Box: inv.Box, API: inv.API, Via: ViaHead, Host: h.Host, LD: h.LD, Region: r.Index, Free: r.Free})
				} else {
					ans.Refusals = append(ans.Refusals, fmt.Sprintf("%s: no region has %d bytes free", inv.Box, size))
				}
			}
		}
	}
	if !cabled {
		if wantBox != "" {
			return Answer{}, fmt.Errorf("fleet: box %s has no host %q", wantBox, name)
		}
		ans.Remote = true
		for _, inv := range invs {
			if inv.Export == "" {
				ans.Refusals = append(ans.Refusals, fmt.Sprintf("%s: no export server for remote racks", inv.Box))
				continue
			}
			if r, ok := bestRegion(inv, size); ok {
				ans.Offers = append(ans.Offers, Offer{Box: inv.Box, API: inv.API, Export: inv.Export, Via: ViaExport, Region: r.Index, Free: r.Free})
			} else {
				ans.Refusals = append(ans.Refusals, fmt.Sprintf("%s: no region has %d bytes free", inv.Box, size))
			}
		}
	}
	slices.SortStableFunc(ans.Offers, func(a, b Offer) int {
		return cmp.Or(cmp.Compare(b.Free, a.Free), cmp.Compare(a.Box, b.Box))
	})
	return ans, nil
}

// bestRegion is the region with the most free capacity that holds size
// rounded up to its block size.
func bestRegion(inv Inventory, size uint64) (RegionCapacity, bool) {
	var best RegionCapacity
	found := false
	for _, r := range inv.Regions {
		need := size
		if r.BlockSize > 0 {
			need = (size + r.BlockSize - 1) / r.BlockSize * r.BlockSize
		}
		if r.Free >= need && (!found || r.Free > best.Free) {
			best, found = r, true
		}
	}
	return best, found
}
