package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/fleet"
	fleetnats "cxlpool/fleet/nats"
)

// lockedBuffer is written by a following poolctl while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestFleetEvents replays the fleet's event stream with each filter, from
// a sequence and a time, as a table and as JSON, and follows it.
func TestFleetEvents(t *testing.T) {
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
	h1, h2 := uint16(1), uint16(2)
	at := time.Now().UTC()
	evs := []fleet.Envelope{
		{ID: "a-1", Box: "box-a", Kind: fleet.KindCapacity, Time: at, Host: &h1, Change: "grant", Chunk: 3, Grant: 7, State: "granted", Size: 1 << 30},
		{ID: "a-2", Box: "box-a", Kind: fleet.KindRedfish, Time: at, MessageID: "ResourceEvent.ResourceChanged", Origin: "/redfish/v1/Chassis/CXLPool"},
		{ID: "b-1", Box: "box-b", Kind: fleet.KindCapacity, Time: at, Host: &h1, Change: "chunk", Chunk: 9},
		{ID: "a-3", Box: "box-a", Kind: fleet.KindRedfish, Time: at, Host: &h2, MessageID: "ResourceEvent.ResourceCreated", Origin: "/redfish/v1/Systems/Host2"},
	}
	for _, e := range evs {
		if _, err := p.Publish(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	pc := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, append(args, "--nats", emb.URL, "--creds", creds), &out, &out)
		return out.String(), err
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string // envelope ids
	}{
		{"all", nil, []string{"a-1", "a-2", "b-1", "a-3"}},
		{"box", []string{"--box", "box-a"}, []string{"a-1", "a-2", "a-3"}},
		{"host", []string{"--host", "1"}, []string{"a-1", "b-1"}},
		{"box's own", []string{"--host", "-"}, []string{"a-2"}},
		{"kind", []string{"--kind", "redfish"}, []string{"a-2", "a-3"}},
		{"box and kind", []string{"--box", "box-b", "--kind", "redfish"}, []string{}},
		{"from", []string{"--from", "3"}, []string{"b-1", "a-3"}},
		{"since a duration", []string{"--since", "1h"}, []string{"a-1", "a-2", "b-1", "a-3"}},
		{"since later", []string{"--since", at.Add(time.Hour).Format(time.RFC3339)}, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := pc(append([]string{"fleet", "events", "--json"}, tc.args...)...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			var got []fleetnats.Event
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			ids := []string{}
			for _, e := range got {
				ids = append(ids, e.ID)
			}
			if diff := cmp.Diff(tc.want, ids); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
	out, err := pc("fleet", "events", "--host", "1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SEQ", "box-a", "grant 7 of chunk 3: granted 1 GiB", "chunk 9"} {
		if !strings.Contains(out, want) {
			t.Errorf("table: no %q in\n%s", want, out)
		}
	}
	for _, bad := range [][]string{{"--host", "Host1"}, {"--kind", "kv"}, {"--box", "a.b"}, {"--since", "yesterday"}, {"--from", "2", "--since", "1h"}} {
		if out, err := pc(append([]string{"fleet", "events"}, bad...)...); err == nil {
			t.Errorf("fleet events %v: no error\n%s", bad, out)
		}
	}

	// Following: the kept events, then a new one as it comes.
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	buf := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(fctx, []string{"fleet", "events", "--follow", "--json", "--kind", "capacity", "--nats", emb.URL, "--creds", creds}, buf, buf)
	}()
	wait := func(what string, n int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for strings.Count(buf.String(), "\n") < n {
			if time.Now().After(deadline) {
				t.Fatalf("follow: %s not within 30s:\n%s", what, buf)
			}
			time.Sleep(10 * time.Millisecond) // poll interval
		}
	}
	wait("the kept capacity events", 2)
	if _, err := p.Publish(ctx, fleet.Envelope{ID: "b-2", Box: "box-b", Kind: fleet.KindCapacity, Time: at, Host: &h2, Change: "host"}); err != nil {
		t.Fatal(err)
	}
	wait("the new event", 3)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("follow ended with %v", err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var last fleetnats.Event
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.ID != "b-2" || last.Seq != 5 {
		t.Errorf("last followed event %+v (%v), want b-2 at sequence 5", last, err)
	}
}
