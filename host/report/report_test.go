package report_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/host/report"
)

// clock is a settable fake clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

const tagA = "0123456789abcdef0123456789abcdef"

func TestFreshnessAndInUse(t *testing.T) {
	c := &clock{t: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	s := report.New(report.Config{Clock: c.now, TTL: 30 * time.Second})
	if _, ok := s.Get(3); ok {
		t.Fatal("Get of a host that never reported: ok")
	}
	in := report.Report{Agent: "cxlhost", HeartbeatSeconds: 5, Tags: []report.Tag{
		{Tag: strings.ToUpper(tagA), Accepted: true, Usable: true, InUse: true, Mode: report.ModeSimFile, State: report.StateInUse, SizeBytes: 1 << 28},
	}}
	if err := s.Put(3, in); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		after     time.Duration
		wantFresh bool
	}{
		{0, true},
		{30 * time.Second, true},
		{31 * time.Second, false},
	}
	start := c.t
	for _, tt := range tests {
		c.t = start.Add(tt.after)
		snap, ok := s.Get(3)
		if !ok || snap.Fresh != tt.wantFresh {
			t.Errorf("after %s: Get() fresh = %v, %v; want %v", tt.after, snap.Fresh, ok, tt.wantFresh)
		}
		if got := s.InUse(3, tagA); got != tt.wantFresh {
			t.Errorf("after %s: InUse() = %v, want %v (a stale report holds nothing back)", tt.after, got, tt.wantFresh)
		}
		if got := s.InUse(4, tagA); got {
			t.Errorf("after %s: InUse(another host) = true", tt.after)
		}
	}
	got, _, ok := s.Tag(3, tagA)
	want := in.Tags[0]
	want.Tag = tagA
	if diff := cmp.Diff(want, got); !ok || diff != "" {
		t.Errorf("Tag() ok=%v (-want +got):\n%s", ok, diff)
	}
	// A slow heartbeat stretches the TTL to three of them.
	in.HeartbeatSeconds = 60
	c.t = start
	if err := s.Put(3, in); err != nil {
		t.Fatal(err)
	}
	c.t = start.Add(179 * time.Second)
	if snap, _ := s.Get(3); !snap.Fresh {
		t.Error("a report within three 60 s heartbeats is stale")
	}
	s.Forget(3)
	if _, ok := s.Get(3); ok {
		t.Error("Get after Forget: ok")
	}
}

func TestPutRefusals(t *testing.T) {
	ok := report.Tag{Tag: tagA, State: report.StateOnline}
	many := make([]report.Tag, report.MaxTags+1)
	tests := []struct {
		name     string
		r        report.Report
		wantProp string
	}{
		{"too many tags", report.Report{Tags: many}, "Tags"},
		{"no tag", report.Report{Tags: []report.Tag{{State: report.StateOnline}}}, "Tags/0/Tag"},
		{"twice", report.Report{Tags: []report.Tag{ok, ok}}, "Tags/1/Tag"},
		{"mode", report.Report{Tags: []report.Tag{{Tag: tagA, State: report.StateOnline, Mode: "tape"}}}, "Tags/0/Mode"},
		{"state", report.Report{Tags: []report.Tag{{Tag: tagA, State: "happy"}}}, "Tags/0/State"},
		{"heartbeat", report.Report{HeartbeatSeconds: -1}, "HeartbeatSeconds"},
		{"path", report.Report{Tags: []report.Tag{{Tag: tagA, State: report.StateOnline, Path: strings.Repeat("x", 300)}}}, "Tags/0/Path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := report.New(report.Config{})
			err := s.Put(1, tt.r)
			var inv *report.ErrInvalid
			if !errors.As(err, &inv) || inv.Prop != tt.wantProp {
				t.Fatalf("Put() = %v, want refused at %s", err, tt.wantProp)
			}
			if _, ok := s.Get(1); ok {
				t.Error("a refused report was kept")
			}
		})
	}
}
