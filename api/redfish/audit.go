package redfish

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"
)

// The logs the service writes: events and the audit trail of changes.
const (
	LogEvent = "EventLog"
	LogAudit = "AuditLog"
)

// auditUserKey lets a handler name the user of an unauthenticated change
// request (a login attempt) for the audit log.
const auditUserKey = "redfish.auditUser"

// auditMiddleware records every change request (anything but GET, HEAD,
// OPTIONS): who, method and URI, when, and the status it got. The response
// is held back until the entry is written, so a client that reads the
// audit log after its request returned always finds the entry.
func (s *Service) auditMiddleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			return next(c)
		}
		res := c.Response()
		orig := res.Writer
		buf := &heldResponse{ResponseWriter: orig, status: http.StatusOK}
		res.Writer = buf
		if err := next(c); err != nil {
			c.Error(err)
		}
		res.Writer = orig
		user := "anonymous"
		var host *HostID
		if p := PrincipalOf(c); p != nil {
			user, host = p.User, p.HostID
		} else if u, ok := c.Get(auditUserKey).(string); ok && u != "" {
			user = u
		}
		e := LogEntry{
			Log: LogAudit, Created: s.now(), Severity: "OK",
			Message:  fmt.Sprintf("%s %s %s: %d %s", user, r.Method, r.URL.RequestURI(), buf.status, http.StatusText(buf.status)),
			UserName: user, Method: r.Method, URI: r.URL.RequestURI(), Status: buf.status, Client: c.RealIP(),
			HostID: host,
		}
		e.MessageID, e.Args = s.AuditMessage(buf.status, buf.body.Bytes())
		if buf.status >= 400 {
			e.Severity = "Warning"
		}
		// A request whose body never arrived whole (it stopped: a
		// timeout, a closed connection) changed nothing; a flood of them
		// must cost no durable write each, nor push real entries out.
		if !bodyIncomplete(r) {
			if _, err := s.store.AppendLog(context.WithoutCancel(r.Context()), e, s.cfg.LogLimit); err != nil {
				s.log.Error("writing audit log", "err", err)
			}
		}
		if buf.wrote {
			orig.WriteHeader(buf.status)
		}
		// An empty write would be refused for a 204 or 304 over HTTP/2
		// (ErrBodyNotAllowed), and logged as a failed request.
		if buf.body.Len() == 0 {
			return nil
		}
		_, err := orig.Write(buf.body.Bytes())
		return err
	}
}

// auditMessage is the MessageId (and its MessageArgs) an audit entry
// carries (the OCP baseline asks every log entry for one): the answer's
// own message for a refusal, Base Created or Success for the rest.
func (s *Service) AuditMessage(status int, body []byte) (string, []string) {
	key := "Base.Success"
	switch {
	case status >= 400:
		var e struct {
			Error struct {
				Code string    `json:"code"`
				Info []Message `json:"@Message.ExtendedInfo"`
			} `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error.Code != "" {
			if len(e.Error.Info) == 1 && e.Error.Info[0].MessageID == e.Error.Code {
				return e.Error.Code, e.Error.Info[0].MessageArgs
			}
			return e.Error.Code, nil
		}
		key = "Base.GeneralError"
	case status == http.StatusCreated:
		key = "Base.Created"
	}
	return s.reg.Resolve(M(key)).MessageID, nil
}

// heldResponse buffers a response until the audit entry is written.
type heldResponse struct {
	http.ResponseWriter
	status int
	wrote  bool
	body   bytes.Buffer
}

func (h *heldResponse) WriteHeader(code int) { h.status, h.wrote = code, true }
func (h *heldResponse) Write(b []byte) (int, error) {
	h.wrote = true
	return h.body.Write(b)
}

// appendEvent writes an event to the EventLog.
func (s *Service) appendEvent(ev Event) {
	m := s.reg.Resolve(Msg{Key: ev.MessageKey, Args: ev.Args})
	e := LogEntry{
		Log: LogEvent, Created: ev.Time, Severity: m.MessageSeverity, MessageID: m.MessageID,
		Message: m.Message, Args: m.MessageArgs, Origin: ev.Origin, HostID: ev.Host,
	}
	if _, err := s.store.AppendLog(s.ctx, e, s.cfg.LogLimit); err != nil && s.ctx.Err() == nil {
		s.log.Error("writing event log", "err", err)
	}
}
