// Package fabric is the Fabric Manager's view of the memory box: the model
// of a multi-headed Dynamic Capacity Device (heads, LDs, DC regions,
// extents, tags) and the Device interface through which the rest of the
// daemon drives it. Mechanisms live in subpackages: fabric/serial (DSP0253
// byte-stream framing), fabric/mctp (MCTP packets, messages and endpoints),
// fabric/cci (CCI message codecs) and fabric/fm (the FM-API client that
// implements Device over MCTP).
package fabric

import (
	"context"
	"errors"
	"time"

	"cxlpool/fabric/cci"
)

// Transport-level sentinels. Device command failures are returned as
// wrapped cci.ReturnCode values, so callers test them with errors.Is.
var (
	// ErrTimeout: the device did not answer within the retry budget.
	ErrTimeout = errors.New("fabric: device did not respond")
	// ErrClosed: the link to the device is closed or lost.
	ErrClosed = errors.New("fabric: device link closed")
	// ErrNotSent: a command that must not wait (AddStarter) was not sent,
	// because it could not go out at once; sending it the usual way works.
	ErrNotSent = errors.New("fabric: command not sent: the link was busy")
)

// Identity is what Identify (0001h) and Identify Memory Device (4000h) say.
type Identity struct {
	VendorID, DeviceID          uint16
	SubsystemVendorID, SubsysID uint16
	Serial                      uint64
	MaxPayload                  int   // bytes the device accepts in one CCI payload
	ComponentType               uint8 // 03h for a Type-3 device
	FirmwareRevision            string
	TotalCapacity               uint64 // bytes
}

// Head is one host-facing port of the multi-headed device (5501h) together
// with the LD it owns (5500h LD map). In this box every head owns one LD and
// the LD-ID is the Host ID used by the DCD commands.
type Head struct {
	Port            uint8
	LD              uint16
	MaxWidth        uint8
	NegotiatedWidth uint8
	MaxSpeed        uint8
	CurrentSpeed    uint8
	LTSSM           uint8
	LinkUp          bool // LTSSM in L0
}

// Region is one Dynamic Capacity region (5600h/5601h).
type Region struct {
	Index             int
	Base              uint64 // DPA
	DecodeLength      uint64 // bytes
	Length            uint64 // bytes
	BlockSize         uint64 // bytes
	Sharable          bool
	SanitizeOnRelease bool
	SoRConfigurable   bool
}

// Contains reports whether the DPA range lies inside the region.
func (r Region) Contains(dpa, length uint64) bool {
	return dpa >= r.Base && length <= r.Length && dpa-r.Base <= r.Length-length
}

// Box is the discovered model of the device.
type Box struct {
	Identity        Identity
	Heads           []Head
	Regions         []Region
	TotalDynamic    uint64       // bytes (5600h)
	AddPolicies     uint16       // 5600h bitmask: b0 Free, b1 Contiguous, b2 Prescriptive
	ReleasePolicies uint16       // 5600h bitmask: b0 Tag-based, b1 Prescriptive
	Supported       []cci.Opcode // from the Command Effects Log
	ExtentsPerHost  uint32       // total supported extents per LD (5601h trailer)
	TagsPerHost     uint32
	DiscoveredAt    time.Time
}

// Head returns the head whose LD is ld.
func (b Box) Head(ld uint16) (Head, bool) {
	for _, h := range b.Heads {
		if h.LD == ld {
			return h, true
		}
	}
	return Head{}, false
}

// AddPolicy is the 5604h selection policy.
type AddPolicy uint8

// Selection policies (5604h byte 2, bits 3:0).
const (
	AddFree         AddPolicy = 0
	AddContiguous   AddPolicy = 1
	AddPrescriptive AddPolicy = 2
	AddSharedAccess AddPolicy = 3
)

// ReleasePolicy is the 5605h removal policy.
type ReleasePolicy uint8

// Removal policies (5605h byte 2, bits 3:0).
const (
	ReleaseTagBased     ReleasePolicy = 0
	ReleasePrescriptive ReleasePolicy = 1
)

// AddRequest is one Initiate Dynamic Capacity Add.
type AddRequest struct {
	Host    uint16
	Policy  AddPolicy
	Region  uint8
	Length  uint64
	Tag     cci.Tag
	Extents []cci.Extent // Prescriptive only
}

// ReleaseRequest is one Initiate Dynamic Capacity Release.
type ReleaseRequest struct {
	Host     uint16
	Policy   ReleasePolicy
	Forced   bool
	Sanitize bool
	Length   uint64
	Tag      cci.Tag
	Extents  []cci.Extent // Prescriptive only
}

// ExtentList is a host's accepted extents (5603h).
type ExtentList struct {
	Host       uint16
	Generation uint32
	Extents    []cci.Extent
}

// TagInfo is one 5608h entry. Accepted and Pending are the LD bitmaps.
type TagInfo struct {
	Tag         cci.Tag
	FMReference bool
	Accepted    [32]byte
	Pending     [32]byte
}

// HasAccepted reports whether LD ld accepted the tag's capacity.
func (t TagInfo) HasAccepted(ld uint16) bool { return ld < 256 && t.Accepted[ld/8]&(1<<(ld%8)) != 0 }

// HasPending reports whether LD ld has not yet answered an add of the tag.
func (t TagInfo) HasPending(ld uint16) bool { return ld < 256 && t.Pending[ld/8]&(1<<(ld%8)) != 0 }

// TagList is the device's tag list (5608h).
type TagList struct {
	Generation uint32
	Tags       []TagInfo
}

// Find returns the entry for tag.
func (l TagList) Find(tag cci.Tag) (TagInfo, bool) {
	for _, t := range l.Tags {
		if t.Tag == tag {
			return t, true
		}
	}
	return TagInfo{}, false
}

// EventKind says what a device event means for the Fabric Manager.
type EventKind int

// Event kinds.
const (
	// EventAddResponse: a host answered an add (DC event 04h).
	EventAddResponse EventKind = iota + 1
	// EventCapacityReleased: a host released capacity (DC event 05h).
	EventCapacityReleased
	// EventRegionUpdated: a region configuration changed (DC event 03h).
	EventRegionUpdated
	// EventLinkChange: a head's link went up or down.
	EventLinkChange
	// EventDeviceReset: the device lost its volatile state (its event logs
	// restarted); the FM must rediscover and reconcile.
	EventDeviceReset
	// EventOverflow: an event log overflowed; the FM must resynchronise
	// from the extent and tag lists because events were lost.
	EventOverflow
)

func (k EventKind) String() string {
	switch k {
	case EventAddResponse:
		return "add-response"
	case EventCapacityReleased:
		return "capacity-released"
	case EventRegionUpdated:
		return "region-updated"
	case EventLinkChange:
		return "link-change"
	case EventDeviceReset:
		return "device-reset"
	case EventOverflow:
		return "overflow"
	}
	return "unknown"
}

// Event is something the device reported. For add responses and releases,
// Extents holds the extents of one More chain (possibly none: a host that
// accepted nothing).
type Event struct {
	Kind    EventKind
	Host    uint16
	Extents []cci.Extent
	LinkUp  bool
	Time    time.Time
}

// AddStarter is a Device that can send an Initiate Dynamic Capacity Add
// without waiting for the answer: StartAdd writes the command and returns,
// and wait (called exactly once) returns what Device.Add would have. It
// lets a caller that holds something others queue for (the ledger's
// writer, mid-transaction) put the command on the link and leave the
// waiting to another goroutine. StartAdd never waits for the link: when
// the command cannot go out at once it fails with ErrNotSent, having sent
// nothing.
type AddStarter interface {
	StartAdd(r AddRequest) (wait func(context.Context) error, err error)
}

// Device is the Fabric Manager's handle on one multi-headed DCD. Methods
// are safe for concurrent use. Command failures wrap cci.ReturnCode (the
// device said no) or ErrTimeout/ErrClosed (the transport failed).
type Device interface {
	// Discover runs the discovery sequence (Identify first, then limits,
	// CEL, heads, DCD info, region configuration) and returns the model.
	Discover(ctx context.Context) (Box, error)
	// Heads re-reads head and link state (5500h/5501h).
	Heads(ctx context.Context) ([]Head, error)
	Add(ctx context.Context, r AddRequest) error
	Release(ctx context.Context, r ReleaseRequest) error
	// Extents returns every extent host holds, paging 5603h as needed.
	Extents(ctx context.Context, host uint16) (ExtentList, error)
	// Tags returns every tag, paging 5608h as needed.
	Tags(ctx context.Context) (TagList, error)
	// Events delivers device events in order. The channel is closed when
	// the device is closed.
	Events() <-chan Event
	Close() error
}
