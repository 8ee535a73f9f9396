package client

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
)

func readAll(t testing.TB, r io.Reader) []SSEMessage {
	t.Helper()
	s := NewSSEReader(r)
	var out []SSEMessage
	for {
		m, err := s.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		out = append(out, m)
	}
}

func TestSSEReader(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []SSEMessage
	}{
		{"service stream", ": cxlpool event stream\n\nid: 1\ndata: {\"Id\":\"1\"}\n\n",
			[]SSEMessage{{ID: "1", Data: `{"Id":"1"}`}}},
		{"multi-line data", "data: a\ndata:b\ndata\n\n", []SSEMessage{{Data: "a\nb\n"}}},
		{"crlf and cr", "id: 7\r\ndata: x\r\n\r\ndata: y\r\rdata: z\n\n",
			[]SSEMessage{{ID: "7", Data: "x"}, {ID: "7", Data: "y"}, {ID: "7", Data: "z"}}},
		{"event type resets", "event: ping\ndata: 1\n\nevent: ping\n\ndata: 2\n\n",
			[]SSEMessage{{Event: "ping", Data: "1"}, {Data: "2"}}},
		{"no data no message", "id: 3\n\n: keepalive\n\nretry: 10\n\n", nil},
		{"id with NUL ignored", "id: a\x00b\ndata: d\n\n", []SSEMessage{{Data: "d"}}},
		{"cut off at the end", "data: whole\n\ndata: cut", []SSEMessage{{Data: "whole"}}},
		{"colon in value", "data: a: b\n\n", []SSEMessage{{Data: "a: b"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := readAll(t, strings.NewReader(tc.in))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("messages (-want +got):\n%s", diff)
			}
			// The same, one byte per read: line splitting must not
			// depend on how the stream arrives.
			got = readAll(t, iotest.OneByteReader(strings.NewReader(tc.in)))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("one byte at a time (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSSELineLimit(t *testing.T) {
	s := NewSSEReader(strings.NewReader("data: " + strings.Repeat("x", maxSSELine) + "\n\n"))
	if _, err := s.Next(); err == nil || errors.Is(err, io.EOF) {
		t.Errorf("Next on an over-long line: got %v, want an error", err)
	}
}

// encodeSSE writes messages the way a service does, for the round trip.
func encodeSSE(ms []SSEMessage) string {
	var b strings.Builder
	for _, m := range ms {
		if m.ID != "" {
			b.WriteString("id: " + m.ID + "\n")
		}
		if m.Event != "" {
			b.WriteString("event: " + m.Event + "\n")
		}
		for _, l := range strings.Split(m.Data, "\n") {
			b.WriteString("data: " + l + "\n")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// FuzzSSEReader: any input parses without panicking, and messages the
// reader produced round-trip through an encoder.
func FuzzSSEReader(f *testing.F) {
	f.Add(": cxlpool event stream\n\nid: 1\ndata: {\"Id\":\"1\"}\n\n")
	f.Add("data: a\r\ndata: b\r\rid: 2\nevent: e\n\n")
	f.Add("retry: 5\n:\n\n\n\ndata\n\n")
	f.Fuzz(func(t *testing.T, in string) {
		s := NewSSEReader(strings.NewReader(in))
		var ms []SSEMessage
		for {
			m, err := s.Next()
			if err != nil {
				break
			}
			ms = append(ms, m)
		}
		got := readAll(t, strings.NewReader(encodeSSE(ms)))
		if len(got) != len(ms) {
			t.Fatalf("round trip: got %d messages, want %d", len(got), len(ms))
		}
		for i := range ms {
			g, w := got[i], ms[i]
			if w.ID == "" {
				g.ID = "" // an id reset to empty is not written by the encoder
			}
			if g != w {
				t.Fatalf("round trip message %d: got %+v, want %+v", i, g, w)
			}
		}
	})
}
