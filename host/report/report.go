// Package report is the box's side of what host agents (cmd/cxlhost) say
// about the capacity their host holds: per tag, whether the host accepted
// it, whether it is usable (surfaced as memory an application maps), in
// which mode, whether a program has it mapped, and where. An agent
// reports on every change and at least every heartbeat; a report older
// than the store's TTL is stale: the host is shown as no longer reporting
// ("agent silent"), and its in-use claims stop holding releases back
// (a host that vanished must not pin the pool's memory forever).
//
// The store is in memory: after a restart of the daemon the agents'
// next heartbeat fills it again. It does not check what a report says
// against the ledger; the API shows reports only beside the grants the
// ledger has, and the release flow (dcd.Config.InUse) asks only about
// tags it is releasing.
package report

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Modes an agent reports a tag's memory in.
const (
	ModeDevDAX    = "devdax"     // a /dev/daxX.Y character device
	ModeSystemRAM = "system-ram" // onlined as a CPU-less NUMA node
	ModeSimFile   = "simfile"    // the virtual box's memory file
)

// States of a tag on its host, as the agent sees it.
const (
	// StateAccepted: the host accepted the capacity but has not (yet)
	// surfaced it as usable memory.
	StateAccepted = "accepted"
	// StateOnline: usable, no program maps it.
	StateOnline = "online"
	// StateInUse: usable and mapped by a program.
	StateInUse = "in use"
	// StateReleaseRefused: a release was asked for and refused because a
	// program still maps the memory; the release waits for it.
	StateReleaseRefused = "release refused: in use"
	// StateReleasing: being given back.
	StateReleasing = "releasing"
)

// Tag is one tag's state on the host.
type Tag struct {
	Tag       string `json:"Tag"` // the DC tag, UUID form, lower case
	Accepted  bool   `json:"Accepted"`
	Usable    bool   `json:"Usable"`
	Mode      string `json:"Mode,omitempty"`
	InUse     bool   `json:"InUse"`
	State     string `json:"State"`
	Path      string `json:"Path,omitempty"`
	SizeBytes uint64 `json:"SizeBytes"`
}

// Report is what an agent says at one time.
type Report struct {
	Tags []Tag `json:"Tags"`
	// HeartbeatSeconds is how often the agent promises to report; the
	// store's TTL is the longer of its own and three heartbeats.
	HeartbeatSeconds int `json:"HeartbeatSeconds,omitempty"`
	// Agent names the reporting program and version.
	Agent string `json:"Agent,omitempty"`
}

// Config configures a Store.
type Config struct {
	Clock func() time.Time
	// TTL is how long a report stays fresh (default 30 s).
	TTL time.Duration
}

// Store keeps the last report of each host.
type Store struct {
	clock func() time.Time
	ttl   time.Duration

	mu     sync.Mutex
	byHost map[uint16]entry
}

type entry struct {
	r  Report
	at time.Time
}

// New creates an empty Store.
func New(cfg Config) *Store {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &Store{clock: cfg.Clock, ttl: cmp.Or(cfg.TTL, 30*time.Second), byHost: map[uint16]entry{}}
}

// Limits of a report, so that a host account cannot grow the store.
const (
	MaxTags      = 1024
	maxFieldLen  = 256
	maxHeartbeat = 3600
)

// ErrInvalid is a report the store refuses.
type ErrInvalid struct{ Prop, Why string }

func (e *ErrInvalid) Error() string { return "report: " + e.Prop + ": " + e.Why }

// Put records host's report as of now. Tags are normalised to lower
// case; a report with too many tags, overlong fields, duplicate tags or
// an unknown mode or state is refused whole.
func (s *Store) Put(host uint16, r Report) error {
	if len(r.Tags) > MaxTags {
		return &ErrInvalid{"Tags", "more than " + strconv.Itoa(MaxTags) + " tags"}
	}
	if r.HeartbeatSeconds < 0 || r.HeartbeatSeconds > maxHeartbeat {
		return &ErrInvalid{"HeartbeatSeconds", "want 0.." + strconv.Itoa(maxHeartbeat)}
	}
	if len(r.Agent) > maxFieldLen {
		return &ErrInvalid{"Agent", "longer than " + strconv.Itoa(maxFieldLen)}
	}
	tags := make([]Tag, len(r.Tags))
	seen := map[string]bool{}
	for i, t := range r.Tags {
		prop := "Tags/" + strconv.Itoa(i)
		t.Tag = strings.ToLower(t.Tag)
		switch {
		case t.Tag == "" || len(t.Tag) > maxFieldLen:
			return &ErrInvalid{prop + "/Tag", "want the tag's UUID"}
		case seen[t.Tag]:
			return &ErrInvalid{prop + "/Tag", "tag " + t.Tag + " reported twice"}
		case len(t.Path) > maxFieldLen:
			return &ErrInvalid{prop + "/Path", "longer than " + strconv.Itoa(maxFieldLen)}
		case !slices.Contains([]string{"", ModeDevDAX, ModeSystemRAM, ModeSimFile}, t.Mode):
			return &ErrInvalid{prop + "/Mode", "want devdax, system-ram or simfile"}
		case !slices.Contains([]string{StateAccepted, StateOnline, StateInUse, StateReleaseRefused, StateReleasing}, t.State):
			return &ErrInvalid{prop + "/State", "want accepted, online, in use, release refused: in use or releasing"}
		}
		seen[t.Tag] = true
		tags[i] = t
	}
	r.Tags = tags
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byHost[host] = entry{r: r, at: s.clock()}
	return nil
}

// Snapshot is a host's last report and whether it is still fresh.
type Snapshot struct {
	Report
	At    time.Time
	Fresh bool
}

// Get is host's last report; ok is false when it never reported.
func (s *Store) Get(host uint16) (Snapshot, bool) {
	s.mu.Lock()
	e, ok := s.byHost[host]
	s.mu.Unlock()
	if !ok {
		return Snapshot{}, false
	}
	return Snapshot{Report: e.r, At: e.at, Fresh: s.fresh(e)}, true
}

// Tag is host's last report of tag; ok is false when the host never
// reported it.
func (s *Store) Tag(host uint16, tag string) (t Tag, snap Snapshot, ok bool) {
	snap, ok = s.Get(host)
	if !ok {
		return Tag{}, snap, false
	}
	i := slices.IndexFunc(snap.Tags, func(t Tag) bool { return strings.EqualFold(t.Tag, tag) })
	if i < 0 {
		return Tag{}, snap, false
	}
	return snap.Tags[i], snap, true
}

// InUse reports whether host's fresh report says a program maps tag:
// the release flow then waits instead of forcing.
func (s *Store) InUse(host uint16, tag string) bool {
	t, snap, ok := s.Tag(host, tag)
	return ok && snap.Fresh && t.InUse
}

// Forget drops host's report (its account or link is gone).
func (s *Store) Forget(host uint16) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byHost, host)
}

func (s *Store) fresh(e entry) bool {
	ttl := max(s.ttl, 3*time.Duration(e.r.HeartbeatSeconds)*time.Second)
	return s.clock().Sub(e.at) <= ttl
}
