// Package fleet is the plane many boxes share: each box publishes its
// inventory record (identity, heads and the hosts cabled to them, capacity
// per region, health) and its events, and reads the others' to answer
// questions about the whole fleet ("which box can give host X 8 GiB").
//
// A box stays the source of truth for its own hardware and ledger: the
// fleet carries what others need to see, never commands. Placement only
// names the box whose API to ask; no box changes another's ledger.
//
// This package holds the domain (records, the event envelope, the subject
// scheme, placement) and the Service that feeds the plane from a running
// daemon. The transport is behind Plane; fleet/nats implements it on NATS
// JetStream (a KV bucket for inventory, a stream for events), embedded in
// the daemon by default.
//
// Register (aggregator.go) makes the box an AggregationSource of an
// OFMF/Sunfish-style Redfish aggregator. KVHotness (kvhotness.go) is a
// KV namespace's periodic summary beside its block events.
package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// BoxID names a box across the fleet. It is derived from the device's
// serial number, so a box that restarts (even on a wiped data partition)
// comes back under the same identity, and two boxes never share one.
type BoxID string

// BoxIDFromSerial is the identity of the box whose device reports serial.
func BoxIDFromSerial(serial uint64) BoxID {
	return BoxID(fmt.Sprintf("box-%016x", serial))
}

// Valid reports whether id can be a subject token and a KV key: NATS
// subjects split on dots and treat * and > as wildcards, KV keys allow
// [-_=/.A-Za-z0-9]; the intersection without dots and slashes is used.
func (id BoxID) Valid() bool { return validToken(string(id)) }

func validToken(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
		default:
			return false
		}
	}
	return true
}

// Health is a box's overall state, as Redfish Status.Health says it.
type Health string

// Health values.
const (
	HealthOK       Health = "OK"
	HealthWarning  Health = "Warning"
	HealthCritical Health = "Critical"
)

// Inventory is one box's record in the fleet's KV bucket (key: the box
// id). It is rewritten on every change and at least every heartbeat, and
// expires a TTL after its last write, so a box that died is gone from the
// bucket within the TTL.
type Inventory struct {
	Box      BoxID  `json:"box"`
	Serial   string `json:"serial"` // the device's serial, 0x%016x
	Firmware string `json:"firmware"`
	// API is the box's Redfish service root URL: where requests for its
	// capacity go (placement answers name it).
	API string `json:"api,omitempty"`
	// Export is the box's export server (tcp://HOST:PORT) for remote
	// racks; empty when the box exports nothing.
	Export  string           `json:"export,omitempty"`
	Heads   []Head           `json:"heads"`
	Regions []RegionCapacity `json:"regions"`
	Health  Health           `json:"health"`
	// Updated is when the box wrote the record (its clock); Revision
	// counts the box's writes since it started, so a reader can tell a
	// heartbeat from a change with Changed.
	Updated  time.Time `json:"updated"`
	Revision uint64    `json:"revision"`
	Started  time.Time `json:"started"`
}

// Head is one head of the box's multi-headed device and the host cabled to it.
type Head struct {
	LD     uint16 `json:"ld"`
	Port   uint8  `json:"port"`
	Host   string `json:"host"` // the host's name in the box's ledger (Host3, or what an administrator named it)
	LinkUp bool   `json:"link_up"`
	// Granted is the capacity the host holds now, in bytes.
	Granted uint64 `json:"granted"`
	// Quota is the most the host may hold (its own quota or the box's
	// default host quota); 0: no limit.
	Quota uint64 `json:"quota,omitempty"`
}

// RegionCapacity is one dynamic capacity region's accounting, in bytes:
// Free is what is not reserved by any chunk; Reserved is held by chunks
// (granted or not); Granted is the part of Reserved that hosts hold.
type RegionCapacity struct {
	Index     int    `json:"index"`
	Length    uint64 `json:"length"`
	BlockSize uint64 `json:"block_size"`
	Free      uint64 `json:"free"`
	Reserved  uint64 `json:"reserved"`
	Granted   uint64 `json:"granted"`
	Sharable  bool   `json:"sharable,omitempty"`
}

// Free is the box's free capacity over all regions.
func (inv Inventory) Free() uint64 {
	var n uint64
	for _, r := range inv.Regions {
		n += r.Free
	}
	return n
}

// Changed reports whether the records differ in anything but the
// bookkeeping of the write (time and revision).
func (inv Inventory) Changed(old Inventory) bool {
	a, b := inv, old
	a.Updated, a.Revision, b.Updated, b.Revision = time.Time{}, 0, time.Time{}, 0
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) != string(y)
}

// Event kinds in an Envelope.
const (
	// KindRedfish is an event of the box's Redfish EventService
	// (EventRecord fields: MessageId, MessageArgs, OriginOfCondition).
	KindRedfish = "redfish"
	// KindCapacity is a change of the box's capacity ledger (a chunk, a
	// grant, a host, an orphan).
	KindCapacity = "capacity"
)

// Envelope is one event on the fleet's event stream. ID is unique per
// box and per event and is the stream's de-duplication id
// (Nats-Msg-Id), so a retried publish after a lost acknowledgement is
// stored once.
type Envelope struct {
	ID   string    `json:"id"`
	Box  BoxID     `json:"box"`
	Kind string    `json:"kind"`
	Time time.Time `json:"time"`
	// Host is the host (LD) the event is about; nil for the box itself.
	Host *uint16 `json:"host,omitempty"`

	// Redfish events.
	MessageID  string   `json:"message_id,omitempty"`
	Args       []string `json:"args,omitempty"`
	Origin     string   `json:"origin,omitempty"` // @odata.id of OriginOfCondition
	Resolution string   `json:"resolution,omitempty"`

	// Capacity changes (dcd.Change).
	Change  string `json:"change,omitempty"` // chunk, grant, host, orphan
	Chunk   int64  `json:"chunk,omitempty"`
	Grant   int64  `json:"grant,omitempty"`
	State   string `json:"state,omitempty"` // the grant's state
	Size    uint64 `json:"size,omitempty"`  // the grant's bytes
	Message string `json:"message,omitempty"`
}

// Subjects. Every box's events are under SubjectRoot.<box>, so a
// subscriber picks one box (cxlpool.box.B.>), one host of one box
// (cxlpool.box.B.host.3.>), one kind everywhere (cxlpool.box.*.*.*.capacity)
// or everything (cxlpool.box.>).
const (
	SubjectRoot = "cxlpool.box"
	// KVSubjectRoot carries the KV store's block events, by namespace:
	// cxlpool.kv.<namespace>.<box>.events (see KVEventPublisher).
	KVSubjectRoot = "cxlpool.kv"
)

// EventSubject is the subject of e: cxlpool.box.<box>.host.<ld>.<kind>
// for a host's events and cxlpool.box.<box>.box.-.<kind> for the box's own.
func EventSubject(e Envelope) string {
	if e.Host != nil {
		return fmt.Sprintf("%s.%s.host.%d.%s", SubjectRoot, e.Box, *e.Host, e.Kind)
	}
	return fmt.Sprintf("%s.%s.box.-.%s", SubjectRoot, e.Box, e.Kind)
}

// KVEventSubject is where box publishes the KV events of namespace.
func KVEventSubject(namespace string, box BoxID) (string, error) {
	if !validToken(namespace) {
		return "", fmt.Errorf("fleet: KV namespace %q: %w", namespace, ErrBadName)
	}
	return fmt.Sprintf("%s.%s.%s.events", KVSubjectRoot, namespace, box), nil
}

// ErrBadName is a box id or namespace that cannot be a subject token.
var ErrBadName = errors.New("names are 1-64 letters, digits, '-' or '_'")

// HostRef parses a fleet-wide host reference: BOX/HOST names the host
// HOST (its name, any case) of box BOX; a bare HOST matches that name on
// any box.
func HostRef(s string) (box BoxID, host string) {
	if i := strings.IndexByte(s, '/'); i >= 0 {
		return BoxID(s[:i]), s[i+1:]
	}
	return "", s
}

// EventFilter is the subject filter of the events of box (empty: every
// box), host (empty: any; "-" or "box": the box's own; else an LD
// number) and kind (empty: any; redfish, capacity).
func EventFilter(box BoxID, host, kind string) (string, error) {
	b, h, k := "*", "*.*", "*"
	if box != "" {
		if !box.Valid() {
			return "", fmt.Errorf("fleet: box %q: %w", box, ErrBadName)
		}
		b = string(box)
	}
	switch host {
	case "":
	case "-", "box":
		h = "box.-"
	default:
		var ld uint16
		if _, err := fmt.Sscanf(host, "%d", &ld); err != nil || fmt.Sprint(ld) != host {
			return "", fmt.Errorf("fleet: host %q: want the host's LD number (0-65535), or - for the box's own events", host)
		}
		h = "host." + host
	}
	switch kind {
	case "":
	case KindRedfish, KindCapacity:
		k = kind
	default:
		return "", fmt.Errorf("fleet: kind %q: want %s or %s", kind, KindRedfish, KindCapacity)
	}
	return fmt.Sprintf("%s.%s.%s.%s", SubjectRoot, b, h, k), nil
}
