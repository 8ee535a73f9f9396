package fm

import (
	"context"
	"errors"
	"fmt"
	"math"

	"cxlpool/fabric"
	"cxlpool/fabric/cci"
)

// maxRestarts bounds how often a paged list read starts over because the
// device's generation number moved between pages.
const maxRestarts = 16

// listHdr sizes of the paged responses.
const (
	extentListHdrLen = 0x18 // 5603h
	tagListHdrLen    = 0x10 // 5608h
)

// Add sends Initiate Dynamic Capacity Add (5604h). Success means the device
// started the add; the host's answer arrives later as an EventAddResponse.
// A timeout is not retried: the add may have happened.
func (c *Client) Add(ctx context.Context, r fabric.AddRequest) error {
	req := &cci.InitiateDCAddReq{
		HostID: r.Host, Policy: uint8(r.Policy), Region: r.Region,
		Length: r.Length, Tag: r.Tag, Extents: r.Extents,
	}
	return c.Do(ctx, cci.OpInitiateDCAdd, req, nil)
}

var _ fabric.AddStarter = (*Client)(nil)

// StartAdd sends Initiate Dynamic Capacity Add (5604h) without waiting
// for the device's answer, which wait returns as Add would
// (fabric.AddStarter). With no MCTP tag free at once it sends nothing and
// fails with fabric.ErrNotSent.
func (c *Client) StartAdd(r fabric.AddRequest) (wait func(context.Context) error, err error) {
	req := &cci.InitiateDCAddReq{
		HostID: r.Host, Policy: uint8(r.Policy), Region: r.Region,
		Length: r.Length, Tag: r.Tag, Extents: r.Extents,
	}
	w, err := c.start(cci.OpInitiateDCAdd, req)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return w(ctx, nil) }, nil
}

// Release sends Initiate Dynamic Capacity Release (5605h). Success means
// the device asked the host; the outcome arrives as EventCapacityReleased
// (except for a forced release of capacity the host never accepted).
func (c *Client) Release(ctx context.Context, r fabric.ReleaseRequest) error {
	req := &cci.InitiateDCReleaseReq{
		HostID: r.Host, Policy: uint8(r.Policy), Forced: r.Forced, Sanitize: r.Sanitize,
		Length: r.Length, Tag: r.Tag, Extents: r.Extents,
	}
	return c.Do(ctx, cci.OpInitiateDCRelease, req, nil)
}

// Extents reads host's whole extent list with 5603h, in pages that fit the
// response limit. If the generation number changes between pages the read
// starts over, so the result is one consistent snapshot.
func (c *Client) Extents(ctx context.Context, host uint16) (fabric.ExtentList, error) {
	per := uint32(c.perPage(extentListHdrLen, cci.ExtentLen, math.MaxInt32))
	for range maxRestarts {
		list := fabric.ExtentList{Host: host}
		consistent := true
		for start := uint32(0); ; {
			req := &cci.GetDCRegionExtentListsReq{HostID: host, Count: per, Start: start}
			var resp cci.GetDCRegionExtentListsResp
			err := c.Do(ctx, cci.OpGetDCRegionExtentLists, req, &resp)
			if start > 0 && errors.Is(err, cci.InvalidInput) {
				consistent = false // shrank below start: read it again
				break
			}
			if err != nil {
				return fabric.ExtentList{}, fmt.Errorf("fm: extents of host %d: %w", host, err)
			}
			if start == 0 {
				list.Generation = resp.Generation
			} else if resp.Generation != list.Generation {
				consistent = false
				break
			}
			if resp.Start != start || uint32(len(resp.Extents)) > per {
				return fabric.ExtentList{}, fmt.Errorf("fm: extents of host %d: page of %d at %d, asked %d at %d",
					host, len(resp.Extents), resp.Start, per, start)
			}
			list.Extents = append(list.Extents, resp.Extents...)
			start += uint32(len(resp.Extents))
			if start == resp.Total {
				break
			}
			if start > resp.Total || len(resp.Extents) == 0 {
				// The list changed under an unchanged generation number;
				// read it again rather than return a torn list.
				consistent = false
				break
			}
		}
		if consistent {
			return list, nil
		}
		c.log.Debug("fm: extent list changed while paging; restarting", "host", host)
	}
	return fabric.ExtentList{}, fmt.Errorf("fm: extents of host %d: list kept changing over %d reads", host, maxRestarts)
}

// Tags reads the device's whole tag list with 5608h, paging and restarting
// on a generation change like Extents.
func (c *Client) Tags(ctx context.Context) (fabric.TagList, error) {
	per := uint32(c.perPage(tagListHdrLen, cci.TagEntryLen, math.MaxInt32))
	for range maxRestarts {
		var list fabric.TagList
		consistent := true
		for start := uint32(0); ; {
			var resp cci.ListTagsResp
			err := c.Do(ctx, cci.OpDCListTags, &cci.ListTagsReq{Start: start, Max: per}, &resp)
			if start > 0 && errors.Is(err, cci.InvalidInput) {
				// The list shrank below start since the last page:
				// it changed, so read it again from the top.
				consistent = false
				break
			}
			if err != nil {
				return fabric.TagList{}, fmt.Errorf("fm: tags: %w", err)
			}
			if start == 0 {
				list.Generation = resp.Generation
			} else if resp.Generation != list.Generation {
				consistent = false
				break
			}
			if uint32(len(resp.Tags)) > per {
				return fabric.TagList{}, fmt.Errorf("fm: tags: page of %d, asked %d", len(resp.Tags), per)
			}
			for _, t := range resp.Tags {
				list.Tags = append(list.Tags, fabric.TagInfo{
					Tag: t.Tag, FMReference: t.FMReference, Accepted: t.Accepted, Pending: t.Pending,
				})
			}
			start += uint32(len(resp.Tags))
			if start == resp.Total {
				break
			}
			if start > resp.Total || len(resp.Tags) == 0 {
				consistent = false
				break
			}
		}
		if consistent {
			return list, nil
		}
		c.log.Debug("fm: tag list changed while paging; restarting")
	}
	return fabric.TagList{}, fmt.Errorf("fm: tags: list kept changing over %d reads", maxRestarts)
}
