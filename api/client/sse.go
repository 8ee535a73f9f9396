package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// SSEMessage is one Server-Sent Events message (WHATWG HTML, "event
// stream interpretation"): its id, event type and data lines joined by
// "\n".
type SSEMessage struct {
	ID    string
	Event string
	Data  string
}

// maxSSELine bounds one line of an event stream; a Redfish Event of a few
// records is a few KiB.
const maxSSELine = 1 << 20

// SSEReader reads messages from an event stream.
type SSEReader struct {
	sc     *bufio.Scanner
	lastID string // the standard's "last event ID buffer": ids carry over
}

// NewSSEReader reads the event stream r.
func NewSSEReader(r io.Reader) *SSEReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxSSELine)
	sc.Split(scanSSELines)
	return &SSEReader{sc: sc}
}

// Next returns the next message with data. Comments, retry fields and
// messages without data are skipped, as the standard says. At the end of
// the stream it returns io.EOF (a message cut off by the end is dropped).
func (s *SSEReader) Next() (SSEMessage, error) {
	m := SSEMessage{ID: s.lastID}
	var data []string
	hasData := false
	for s.sc.Scan() {
		line := s.sc.Text()
		if line == "" {
			if hasData {
				m.Data = strings.Join(data, "\n")
				return m, nil
			}
			m.Event = ""
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, found := strings.Cut(line, ":")
		if found {
			value = strings.TrimPrefix(value, " ")
		}
		switch field {
		case "data":
			data = append(data, value)
			hasData = true
		case "id":
			if !strings.ContainsRune(value, 0) {
				m.ID, s.lastID = value, value
			}
		case "event":
			m.Event = value
		}
	}
	if err := s.sc.Err(); err != nil {
		return SSEMessage{}, fmt.Errorf("client: event stream: %w", err)
	}
	return SSEMessage{}, io.EOF
}

// scanSSELines splits at CRLF, LF or a lone CR, the three line endings an
// event stream may use.
func scanSSELines(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		if data[i] == '\r' {
			if i+1 < len(data) {
				if data[i+1] == '\n' {
					return i + 2, data[:i], nil
				}
				return i + 1, data[:i], nil
			}
			if !atEOF {
				return 0, nil, nil // a LF may follow
			}
		}
		return i + 1, data[:i], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// EventStream is an open SSE connection to the EventService.
type EventStream struct {
	body io.ReadCloser
	r    *SSEReader
}

// Events opens the EventService's Server-Sent Event stream
// (ServerSentEventUri). It lasts until ctx ends or Close; per-request
// timeouts do not apply to it.
func (c *Client) Events(ctx context.Context) (*EventStream, error) {
	return c.EventsAfter(ctx, "")
}

// EventsAfter opens the event stream as Events does and, when lastID is
// not empty, sends it as Last-Event-ID: the service first replays the
// events after that one that it still keeps.
func (c *Client) EventsAfter(ctx context.Context, lastID string) (*EventStream, error) {
	var es struct {
		ServerSentEventURI string `json:"ServerSentEventUri"`
	}
	if err := c.Get(ctx, EventServiceURI, &es); err != nil {
		return nil, err
	}
	uri := es.ServerSentEventURI
	if uri == "" {
		return nil, fmt.Errorf("client: the EventService has no ServerSentEventUri")
	}
	tok, _ := c.Token()
	req, err := c.newRequest(ctx, http.MethodGet, uri, nil, auth{token: tok, basic: true})
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: GET %s: %w", uri, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
		return nil, parseError(http.MethodGet, uri, &Response{Status: resp.StatusCode, Header: resp.Header, Body: b})
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		resp.Body.Close()
		return nil, fmt.Errorf("client: GET %s: got Content-Type %q, want text/event-stream", uri, ct)
	}
	return &EventStream{body: resp.Body, r: NewSSEReader(resp.Body)}, nil
}

// Next waits for the next Redfish Event. It returns io.EOF when the
// service ends the stream, and the context's error (wrapped) once the
// stream's context has ended.
func (s *EventStream) Next() (Event, error) {
	m, err := s.r.Next()
	if err != nil {
		return Event{}, err
	}
	var ev Event
	if err := json.Unmarshal([]byte(m.Data), &ev); err != nil {
		return Event{}, fmt.Errorf("client: event %q: %w", m.ID, err)
	}
	if ev.ID == "" {
		ev.ID = m.ID
	}
	return ev, nil
}

// Close ends the stream.
func (s *EventStream) Close() error { return s.body.Close() }

// IsClosed reports whether err means the stream ended because its
// context was cancelled or it was closed, not because of a fault.
func IsClosed(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, http.ErrBodyReadAfterClose)
}
