package client

import (
	"net/http"
	"strings"
	"testing"
	"unicode"
)

func TestMessageKey(t *testing.T) {
	for in, want := range map[string]string{
		"Base.1.19.0.ResourceNotFound":      "Base.ResourceNotFound",
		"ResourceEvent.1.3.ResourceCreated": "ResourceEvent.ResourceCreated",
		"Base.ResourceNotFound":             "Base.ResourceNotFound",
		"plain":                             "plain",
	} {
		if got := MessageKey(in); got != want {
			t.Errorf("MessageKey(%q): got %q, want %q", in, got, want)
		}
	}
}

func TestErrorText(t *testing.T) {
	body := `{"error":{"code":"Base.1.19.0.GeneralError","message":"A general error has occurred. See Resolution for details.",
		"@Message.ExtendedInfo":[{"MessageId":"Base.1.19.0.GeneralError","Message":"A general error has occurred. See Resolution for details.",
		"Resolution":"The host did not accept the offered capacity."}]}}`
	e := parseError(http.MethodGet, "/m/1", &Response{Status: 409, Header: http.Header{}, Body: []byte(body)})
	want := "GET /m/1: 409 Conflict: A general error has occurred. See Resolution for details. " +
		"The host did not accept the offered capacity. (Base.1.19.0.GeneralError)"
	if got := e.Error(); got != want {
		t.Errorf("Error():\ngot  %q\nwant %q", got, want)
	}
	if !e.Has("Base.GeneralError") || e.Has("Base.ResourceNotFound") {
		t.Errorf("Has: wrong answer for %+v", e.Messages)
	}

	// A registry message that does not mention its Resolution: the
	// resolution still names the rule.
	body = `{"error":{"code":"Base.1.22.1.CreateLimitReachedForResource","message":"m",
		"@Message.ExtendedInfo":[{"MessageId":"Base.1.22.1.CreateLimitReachedForResource",
		"Message":"The create operation failed because the resource has reached the limit of possible resources.",
		"Resolution":"The host's quota (64 GiB) leaves no room."}]}}`
	e = parseError(http.MethodPost, "/c", &Response{Status: 409, Header: http.Header{}, Body: []byte(body)})
	want = "POST /c: 409 Conflict: The create operation failed because the resource has reached the limit of possible resources. " +
		"The host's quota (64 GiB) leaves no room. (Base.1.22.1.CreateLimitReachedForResource)"
	if got := e.Error(); got != want {
		t.Errorf("Error():\ngot  %q\nwant %q", got, want)
	}
}

// FuzzParseError: any error body parses without panicking into an error
// whose text is one printable line.
func FuzzParseError(f *testing.F) {
	f.Add(503, `{"error":{"code":"Base.1.19.0.ServiceTemporarilyUnavailable","message":"m","@Message.ExtendedInfo":[{"MessageId":"x","Message":"m\u001b[2J"}]}}`)
	f.Add(502, "<html>bad gateway</html>")
	f.Add(400, `{"error":{"@Message.ExtendedInfo":[{},{"Resolution":"See Resolution"}]}}`)
	f.Add(404, `{"error":"not an object"}`)
	f.Fuzz(func(t *testing.T, status int, body string) {
		e := parseError(http.MethodGet, "/x", &Response{Status: status, Header: http.Header{"Retry-After": {body}}, Body: []byte(body)})
		s := e.Error()
		if strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) }) {
			t.Fatalf("Error() has control characters: %q", s)
		}
	})
}
