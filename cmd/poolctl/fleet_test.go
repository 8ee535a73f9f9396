package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/fleet"
	fleetnats "cxlpool/fleet/nats"
)

// TestFleet runs poolctl fleet against an embedded plane holding two
// boxes' records: the lists, and placement for a cabled host, a remote
// rack, and a host whose quota refuses.
func TestFleet(t *testing.T) {
	dir := t.TempDir()
	creds := filepath.Join(dir, "fleet.creds")
	emb, err := fleetnats.StartEmbedded(fleetnats.EmbeddedConfig{Dir: filepath.Join(dir, "js"), Listen: "127.0.0.1:0", CredsFile: creds})
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	ctx := context.Background()
	p, err := fleetnats.Connect(ctx, fleetnats.Config{URLs: []string{emb.URL}, CredsFile: creds})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	boxes := []fleet.Inventory{
		{Box: "box-a", Serial: "0x000000000000000a", Firmware: "1.0", Health: fleet.HealthOK, API: "https://a:8443/redfish/v1", Export: "tcp://a:7700", Updated: at,
			Heads:   []fleet.Head{{LD: 0, Host: "Host0", LinkUp: true, Granted: 1 << 30, Quota: 2 << 30}, {LD: 1, Host: "gpu7", LinkUp: true}},
			Regions: []fleet.RegionCapacity{{Index: 0, Length: 8 << 30, BlockSize: 1 << 28, Free: 7 << 30, Reserved: 1 << 30, Granted: 1 << 30}}},
		{Box: "box-b", Serial: "0x000000000000000b", Firmware: "1.0", Health: fleet.HealthOK, API: "https://b:8443/redfish/v1", Updated: at,
			Heads:   []fleet.Head{{LD: 0, Host: "Host0", LinkUp: false}},
			Regions: []fleet.RegionCapacity{{Index: 0, Length: 8 << 30, BlockSize: 1 << 28, Free: 8 << 30}}},
	}
	for _, b := range boxes {
		if err := p.PutInventory(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	pc := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, append(args, "--nats", emb.URL, "--creds", creds), &out, &out)
		return out.String(), err
	}

	out, err := pc("fleet", "boxes")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"box-a", "box-b", "https://a:8443/redfish/v1", "2/2", "0/1"} {
		if !strings.Contains(out, want) {
			t.Errorf("fleet boxes: no %q in\n%s", want, out)
		}
	}
	out, err = pc("fleet", "hosts", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var hosts []struct {
		Box  string `json:"box"`
		Host string `json:"host"`
	}
	if err := json.Unmarshal([]byte(out), &hosts); err != nil {
		t.Fatalf("fleet hosts --json: %v\n%s", err, out)
	}
	if got, want := len(hosts), 3; got != want {
		t.Errorf("fleet hosts: %d hosts, want %d", got, want)
	}

	tests := []struct {
		name    string
		args    []string
		wantBox []fleet.BoxID
		wantVia fleet.Via
		wantErr string
	}{
		// gpu7 is cabled to box-a: only box-a, through its head.
		{"cabled", []string{"gpu7", "4GiB"}, []fleet.BoxID{"box-a"}, fleet.ViaHead, ""},
		// Host0 exists on both; box-b's link is down, box-a's quota allows 1 GiB more.
		{"cabled on two boxes", []string{"Host0", "1GiB"}, []fleet.BoxID{"box-a"}, fleet.ViaHead, ""},
		{"quota", []string{"box-a/Host0", "2GiB"}, nil, "", "quota"},
		// rack9 is cabled to no box: any box's export, box-b has none.
		{"remote rack", []string{"rack9", "1GiB"}, []fleet.BoxID{"box-a"}, fleet.ViaExport, ""},
		{"too big", []string{"gpu7", "9GiB"}, nil, "", "no region has"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := pc(append([]string{"fleet", "place", "--json"}, tt.args...)...)
			if tt.wantErr != "" {
				if err == nil {
					// --json prints the answer; an empty offer list is the refusal.
					var ans fleet.Answer
					if json.Unmarshal([]byte(out), &ans) != nil || len(ans.Offers) != 0 || !strings.Contains(strings.Join(ans.Refusals, ";"), tt.wantErr) {
						t.Fatalf("place %v: %s, want no offer and a refusal naming %q", tt.args, out, tt.wantErr)
					}
				}
				// Without --json the refusal is an error naming the rule.
				_, err := pc(append([]string{"fleet", "place"}, tt.args...)...)
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("place %v: %v, want an error naming %q", tt.args, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ans fleet.Answer
			if err := json.Unmarshal([]byte(out), &ans); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			var got []fleet.BoxID
			for _, o := range ans.Offers {
				got = append(got, o.Box)
				if o.Via != tt.wantVia {
					t.Errorf("offer %s via %s, want %s", o.Box, o.Via, tt.wantVia)
				}
			}
			if diff := cmp.Diff(tt.wantBox, got); diff != "" {
				t.Errorf("offers (-want +got):\n%s", diff)
			}
		})
	}

	if _, err := pc("fleet", "place", "nobody"); err == nil {
		t.Error("fleet place without a size succeeded")
	}
	var out2 bytes.Buffer
	if err := run(ctx, []string{"fleet", "boxes", "--nats", emb.URL}, &out2, &out2); err == nil || !strings.Contains(err.Error(), "anonymous") {
		t.Errorf("fleet boxes without --creds: %v, want a refusal naming anonymous access", err)
	}
}
