package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"
)

// Message is a Redfish Message, as found in error bodies, tasks and
// events.
type Message struct {
	MessageID         string   `json:"MessageId"`
	Message           string   `json:"Message"`
	MessageArgs       []string `json:"MessageArgs,omitempty"`
	MessageSeverity   string   `json:"MessageSeverity,omitempty"`
	Resolution        string   `json:"Resolution,omitempty"`
	RelatedProperties []string `json:"RelatedProperties,omitempty"`
}

// Key is the MessageId without the registry version:
// "Base.1.19.0.ResourceNotFound" → "Base.ResourceNotFound".
func (m Message) Key() string { return MessageKey(m.MessageID) }

// MessageKey strips the registry version from a MessageId.
func MessageKey(id string) string {
	parts := strings.Split(id, ".")
	if len(parts) < 2 {
		return id
	}
	return parts[0] + "." + parts[len(parts)-1]
}

// Error is a failed request: the HTTP status and what the Redfish error
// body said. Its text carries each message with its Resolution and its
// MessageId, which is what an operator needs to act or look the failure
// up.
type Error struct {
	Method, Path string
	Status       int
	// Code and Text are the body's error.code and error.message.
	Code, Text string
	// Messages are the error's @Message.ExtendedInfo.
	Messages []Message
	// RetryAfter is the Retry-After of a 503 (0 if none).
	RetryAfter time.Duration
	// Raw is the start of a body that is not a Redfish error.
	Raw string
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %d %s", e.Method, e.Path, e.Status, http.StatusText(e.Status))
	msgs := e.Messages
	if len(msgs) == 0 && (e.Code != "" || e.Text != "") {
		msgs = []Message{{MessageID: e.Code, Message: e.Text}}
	}
	for i, m := range msgs {
		sep := ": "
		if i > 0 {
			sep = "; "
		}
		b.WriteString(sep)
		// Messages carry request values (ids from the path): keep the
		// terminal safe from them.
		b.WriteString(printable(m.Message, 1000))
		// The Resolution is where the service names the rule that
		// refused and what would work (registry messages are generic:
		// "reached the limit" without saying which limit).
		if m.Resolution != "" && !strings.Contains(m.Message, m.Resolution) {
			b.WriteString(" " + printable(m.Resolution, 1000))
		}
		if m.MessageID != "" {
			fmt.Fprintf(&b, " (%s)", printable(m.MessageID, 100))
		}
	}
	if len(msgs) == 0 && e.Raw != "" {
		b.WriteString(": " + e.Raw)
	}
	return b.String()
}

// Has reports whether one of the error's messages is key
// ("Base.ResourceNotFound"), whatever the registry version.
func (e *Error) Has(key string) bool {
	if MessageKey(e.Code) == key {
		return true
	}
	for _, m := range e.Messages {
		if m.Key() == key {
			return true
		}
	}
	return false
}

// StatusOf returns the HTTP status of a *Error in err's chain (0 if none).
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// errorBody is the Redfish error response (DSP0266 9.6.5).
type errorBody struct {
	Error struct {
		Code     string    `json:"code"`
		Message  string    `json:"message"`
		Extended []Message `json:"@Message.ExtendedInfo"`
	} `json:"error"`
}

// parseError turns an error response into *Error. Bodies that are not
// Redfish errors (a proxy's HTML page) are kept, shortened and made
// printable.
func parseError(method, path string, r *Response) *Error {
	e := &Error{Method: method, Path: path, Status: r.Status, RetryAfter: retryAfter(r.Header)}
	var body errorBody
	if err := json.Unmarshal(r.Body, &body); err == nil && (body.Error.Code != "" || body.Error.Message != "" || len(body.Error.Extended) > 0) {
		e.Code, e.Text, e.Messages = body.Error.Code, body.Error.Message, body.Error.Extended
		return e
	}
	e.Raw = printable(string(r.Body), 200)
	return e
}

// printable keeps at most n runes of s with control characters replaced,
// so that a hostile body cannot drive the terminal.
func printable(s string, n int) string {
	var b strings.Builder
	i := 0
	for _, r := range strings.TrimSpace(s) {
		if i == n {
			b.WriteString("…")
			break
		}
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			r = ' '
		}
		b.WriteRune(r)
		i++
	}
	return b.String()
}
