package fleet_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/fleet"
)

func TestSubjects(t *testing.T) {
	h := uint16(3)
	tests := []struct {
		e    fleet.Envelope
		want string
	}{
		{fleet.Envelope{Box: "box-1", Kind: fleet.KindCapacity, Host: &h}, "cxlpool.box.box-1.host.3.capacity"},
		{fleet.Envelope{Box: "box-1", Kind: fleet.KindRedfish}, "cxlpool.box.box-1.box.-.redfish"},
	}
	for _, tt := range tests {
		if got := fleet.EventSubject(tt.e); got != tt.want {
			t.Errorf("EventSubject(%+v) = %q, want %q", tt.e, got, tt.want)
		}
	}
	if got, err := fleet.KVEventSubject("llama-70b", "box-1"); err != nil || got != "cxlpool.kv.llama-70b.box-1.events" {
		t.Errorf("KVEventSubject = %q, %v", got, err)
	}
	for _, bad := range []string{"", "a.b", "a*", "a>", "a b", "a/b"} {
		if fleet.BoxID(bad).Valid() {
			t.Errorf("BoxID(%q).Valid() = true", bad)
		}
		if _, err := fleet.KVEventSubject(bad, "box-1"); err == nil {
			t.Errorf("KVEventSubject(%q) accepted", bad)
		}
	}
	if got, want := fleet.BoxIDFromSerial(0x0123456789abcdef), fleet.BoxID("box-0123456789abcdef"); got != want {
		t.Errorf("BoxIDFromSerial = %q, want %q", got, want)
	}
}

// TestKVEventShape pins the JSON to Dynamo's RouterEvent as its router
// decodes it (serde's externally tagged enum, snake_case variants).
func TestKVEventShape(t *testing.T) {
	parent := uint64(99)
	tests := []struct {
		name string
		data fleet.KVEventData
		want string
	}{
		{"stored", fleet.KVEventData{Stored: &fleet.KVStored{ParentHash: &parent, Blocks: []fleet.StoredBlock{{BlockHash: 1, TokensHash: 2}}}},
			`{"worker_id":7,"storage_tier":"external","event":{"event_id":12,"data":{"stored":{"parent_hash":99,"blocks":[{"block_hash":1,"tokens_hash":2}]}},"dp_rank":0}}`},
		{"stored first", fleet.KVEventData{Stored: &fleet.KVStored{Blocks: []fleet.StoredBlock{{BlockHash: 1, TokensHash: 2}}}},
			`{"worker_id":7,"storage_tier":"external","event":{"event_id":12,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":1,"tokens_hash":2}]}},"dp_rank":0}}`},
		{"removed", fleet.KVEventData{Removed: &fleet.KVRemoved{BlockHashes: []uint64{1, 5}}},
			`{"worker_id":7,"storage_tier":"external","event":{"event_id":12,"data":{"removed":{"block_hashes":[1,5]}},"dp_rank":0}}`},
		{"cleared", fleet.KVEventData{Cleared: true},
			`{"worker_id":7,"storage_tier":"external","event":{"event_id":12,"data":"cleared","dp_rank":0}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := fleet.RouterEvent{WorkerID: 7, StorageTier: "external", Event: fleet.KVCacheEvent{EventID: 12, Data: tt.data}}
			b, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(b); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			var back fleet.RouterEvent
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(ev, back); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := json.Marshal(fleet.KVEventData{Cleared: true, Removed: &fleet.KVRemoved{}}); err == nil {
		t.Error("an event that is both cleared and removed marshals")
	}
	for _, bad := range []string{`"stored"`, `{}`, `{"stored":{"blocks":[]},"removed":{"block_hashes":[]}}`} {
		var d fleet.KVEventData
		if err := json.Unmarshal([]byte(bad), &d); err == nil {
			t.Errorf("Unmarshal(%s) accepted", bad)
		}
	}
	if got, want := fleet.WorkerID(1<<63|5), int64(5); got != want {
		t.Errorf("WorkerID = %d, want %d", got, want)
	}
}

func TestChanged(t *testing.T) {
	a := fleet.Inventory{Box: "b", Revision: 1, Updated: time.Unix(1, 0), Regions: []fleet.RegionCapacity{{Free: 1}}}
	b := a
	b.Revision, b.Updated = 2, time.Unix(2, 0)
	if b.Changed(a) {
		t.Error("a heartbeat (time and revision only) counts as a change")
	}
	b.Regions = []fleet.RegionCapacity{{Free: 2}}
	if !b.Changed(a) {
		t.Error("a change of free capacity does not count")
	}
}

func TestPlace(t *testing.T) {
	const gib = 1 << 30
	boxes := []fleet.Inventory{
		{Box: "a", Export: "tcp://a:1", Heads: []fleet.Head{{LD: 2, Host: "Host2", LinkUp: true, Granted: gib, Quota: 4 * gib}},
			Regions: []fleet.RegionCapacity{{Index: 0, BlockSize: gib, Free: 2 * gib}, {Index: 1, BlockSize: gib, Free: 3 * gib}}},
		{Box: "b", Export: "tcp://b:1", Heads: []fleet.Head{{LD: 0, Host: "Host9", LinkUp: true}},
			Regions: []fleet.RegionCapacity{{Index: 0, BlockSize: gib, Free: 6 * gib}}},
		{Box: "c", Heads: []fleet.Head{{LD: 0, Host: "down", LinkUp: false}}, Regions: []fleet.RegionCapacity{{Index: 0, BlockSize: gib, Free: 9 * gib}}},
	}
	type offer struct {
		Box    fleet.BoxID
		Via    fleet.Via
		Region int
	}
	tests := []struct {
		host     string
		size     uint64
		want     []offer
		remote   bool
		refusals int
	}{
		{"host2", 2 * gib, []offer{{"a", fleet.ViaHead, 1}}, false, 0},                             // the region with most free
		{"Host2", 3*gib + 1, nil, false, 1},                                                        // quota: 1 GiB held of 4
		{"Host2", gib + 1, []offer{{"a", fleet.ViaHead, 1}}, false, 0},                             // rounds to 2 blocks: fits region 1
		{"a/Host2", gib, []offer{{"a", fleet.ViaHead, 1}}, false, 0},                               // box-qualified
		{"down", gib, nil, false, 1},                                                               // link down
		{"rack7", 3 * gib, []offer{{"b", fleet.ViaExport, 0}, {"a", fleet.ViaExport, 1}}, true, 1}, // c has no export server
		{"rack7", 7 * gib, nil, true, 3},
	}
	for _, tt := range tests {
		ans, err := fleet.Place(boxes, tt.host, tt.size)
		if err != nil {
			t.Fatalf("Place(%s, %d): %v", tt.host, tt.size, err)
		}
		var got []offer
		for _, o := range ans.Offers {
			got = append(got, offer{o.Box, o.Via, o.Region})
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("Place(%s, %d) offers (-want +got):\n%s", tt.host, tt.size, diff)
		}
		if ans.Remote != tt.remote || len(ans.Refusals) != tt.refusals {
			t.Errorf("Place(%s, %d): remote %v, refusals %q; want %v, %d", tt.host, tt.size, ans.Remote, ans.Refusals, tt.remote, tt.refusals)
		}
	}
	for _, bad := range []struct {
		host string
		size uint64
	}{{"Host2", 0}, {"", 1}, {"z/Host2", 1}, {"a/nobody", 1}} {
		if _, err := fleet.Place(boxes, bad.host, bad.size); err == nil {
			t.Errorf("Place(%q, %d) succeeded", bad.host, bad.size)
		}
	}
}
