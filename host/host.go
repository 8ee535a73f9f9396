// Package host is the host side of the pool: the domain of the agent
// (cmd/cxlhost) that runs on a host cabled to one head of the box and
// turns granted capacity into memory an application maps.
//
// A Backend plays the part the host's kernel plays: it knows which CXL
// memory device and logical device the host sees (Identity), answers the
// device's capacity offers, surfaces each tag's accepted capacity as
// memory (Wait, List, Map) and gives a whole tag back (Release, WaitGone),
// refusing while the memory is in use unless forced — as the Linux DCD
// series does (one tag = one DAX device, whole-tag release).
//
// Backends: host/vbox (the virtual box's external host link, see
// sim/external.go) and host/linux (sysfs, /dev/daxX.Y: static capacity
// for real; Dynamic Capacity only on kernels with the unmerged DCD
// series). Every backend must pass the contract suite in host/hosttest.
//
// The agent reports each tag's state to the box (host/report is the box's
// store of those reports); a host whose agent stops reporting shows as
// silent there after the store's TTL.
//
// Not done yet: system-ram mode on the virtual box.
package host

import (
	"context"
	"errors"
	"fmt"
)

// Errors of every Backend.
var (
	// ErrBusy: the tag's memory is mapped by a user; release refused
	// (the kernel's EBUSY for a DAX device still mapped).
	ErrBusy = errors.New("host: memory in use")
	// ErrUnknownTag: the host holds no capacity with that tag.
	ErrUnknownTag = errors.New("host: no capacity with that tag")
	// ErrReleasing: the tag is being released; it cannot be mapped again.
	ErrReleasing = errors.New("host: capacity is being released")
)

// Mode is how the host uses a tag's memory.
type Mode string

const (
	// ModeDevDAX: a DAX device an application maps (the default).
	ModeDevDAX Mode = "devdax"
	// ModeSystemRAM: onlined as the kernel's memory, a CPU-less NUMA node
	// (Linux: the kmem driver).
	ModeSystemRAM Mode = "system-ram"
)

// ModeSetter is a Backend that can hand a tag's memory to the kernel as
// system RAM and back (host/linux). The virtual box's hosts are processes,
// not kernels, so host/vbox is not one.
type ModeSetter interface {
	SetMode(ctx context.Context, tag string, mode Mode) error
}

// NodeReporter is a Backend that says which NUMA node a tag in system-ram
// mode is.
type NodeReporter interface {
	Node(tag string) (int, error)
}

// ErrNoSystemRAM: the backend cannot online memory as system RAM.
var ErrNoSystemRAM = errors.New("host: this backend cannot online memory as system RAM (only a Linux host can: cxlhost --device linux)")

// Identity is which device and head the host sees: what the box's Redfish
// shows for the head's logical device (its GCXLID DurableName).
type Identity struct {
	Serial uint64 // the device's PCIe Device Serial Number
	LD     uint16 // the logical device (= Host ID = head) behind this host's link
}

// GCXLID is the identity as the box's CXLLogicalDevice shows it in
// Identifiers[].DurableName (format GCXLID): the serial as 8 dash-separated
// hex bytes, a colon and the LD-ID as 4 hex digits.
func (id Identity) GCXLID() string {
	b := make([]byte, 0, 28)
	for i := 7; i >= 0; i-- {
		b = fmt.Appendf(b, "%02X", byte(id.Serial>>(8*i)))
		if i > 0 {
			b = append(b, '-')
		}
	}
	return fmt.Sprintf("%s:%04X", b, id.LD)
}

// Extent is one piece of a tag's capacity and where an application finds
// it: DPA on the device, Offset in the memory file or device Path of the
// Capacity.
type Extent struct {
	DPA    uint64 `json:"dpa"`
	Offset uint64 `json:"offset"`
	Length uint64 `json:"length"`
}

// Capacity is one tag's capacity as the host surfaces it.
type Capacity struct {
	Tag     string   `json:"tag"` // the DC tag in the box's UUID form
	Size    uint64   `json:"size"`
	Extents []Extent `json:"extents"`
	// Path is what an application opens and maps: /dev/daxX.Y on Linux;
	// on the virtual box, the memory file (the whole device), where each
	// extent sits at its Offset.
	Path string `json:"path"`
	// Kind says how to read Path: "devdax" (one contiguous device, offset
	// 0) or "simfile" (the virtual box's memory file; map each extent).
	Kind      string `json:"kind"`
	InUse     bool   `json:"in_use"`
	Releasing bool   `json:"releasing"`
	// ReleasePending: the device asked for the tag back and the host
	// has not answered yet (it waits for the last mapping to close).
	ReleasePending bool `json:"release_pending,omitempty"`
}

// Notifier is a Backend that says when its tags change (accepted,
// mapped, unmapped, released), so that the agent reports at once instead
// of at its next heartbeat. Changed's channel is closed at the next
// change; ask again after it.
type Notifier interface {
	Changed() <-chan struct{}
}

// Mapping is capacity mapped into this process, contiguous in the order
// of the tag's extents.
type Mapping interface {
	Bytes() []byte
	// Close unmaps the memory; Bytes must not be used afterwards.
	Close() error
}

// Backend is the host kernel's part, behind one interface.
type Backend interface {
	// Identity is the device and head the host is cabled to.
	Identity(ctx context.Context) (Identity, error)
	// Wait blocks until the capacity with tag is accepted and surfaced,
	// or ctx ends.
	Wait(ctx context.Context, tag string) (Capacity, error)
	// List is every tag the host holds, in no particular order.
	List(ctx context.Context) ([]Capacity, error)
	// Map maps the tag's capacity into this process; it is in use until
	// the Mapping is closed.
	Map(ctx context.Context, tag string) (Mapping, error)
	// Release prepares the whole tag for release: ErrBusy while it is in
	// use unless force (which unmaps every Mapping of it first). After it
	// the tag cannot be mapped again and the device's release request is
	// answered; WaitGone waits for that.
	Release(ctx context.Context, tag string, force bool) error
	// Keep undoes a Release the box did not follow (its release failed):
	// the tag can be mapped again, unless the device has already asked
	// for it back (ErrReleasing).
	Keep(ctx context.Context, tag string) error
	// WaitGone blocks until the host no longer holds tag.
	WaitGone(ctx context.Context, tag string) error
	Close() error
}
