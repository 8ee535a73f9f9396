package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"cxlpool/api/oemschema"
	"cxlpool/dcd"
)

// The manager's log services.
const (
	logEvent = "EventLog"
	logAudit = "AuditLog"

	logServicesURI = managerURI + "/LogServices"
)

func logServiceURI(log string) string { return logServicesURI + "/" + log }

func logEntryURI(log string, id int64) string {
	return logServiceURI(log) + "/Entries/" + strconv.FormatInt(id, 10)
}

// auditUserKey lets a handler name the user of an unauthenticated change
// request (a login attempt) for the audit log.
const auditUserKey = "cxlpool.auditUser"

// auditMiddleware records every change request (anything but GET, HEAD,
// OPTIONS): who, method and URI, when, and the status it got. The response
// is held back until the entry is written, so a client that reads the
// audit log after its request returned always finds the entry.
func (s *Server) auditMiddleware(next echo.HandlerFunc) echo.HandlerFunc {
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
		var host *dcd.HostID
		if p := PrincipalOf(c); p != nil {
			user, host = p.User, p.HostID
		} else if u, ok := c.Get(auditUserKey).(string); ok && u != "" {
			user = u
		}
		e := LogEntry{
			Log: logAudit, Created: s.now(), Severity: "OK",
			Message:  fmt.Sprintf("%s %s %s: %d %s", user, r.Method, r.URL.RequestURI(), buf.status, http.StatusText(buf.status)),
			UserName: user, Method: r.Method, URI: r.URL.RequestURI(), Status: buf.status, Client: c.RealIP(),
			HostID: host,
		}
		e.MessageID, e.Args = s.auditMessage(buf.status, buf.body.Bytes())
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
func (s *Server) auditMessage(status int, body []byte) (string, []string) {
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
func (s *Server) appendEvent(ev Event) {
	m := s.reg.Resolve(Msg{Key: ev.MessageKey, Args: ev.Args})
	e := LogEntry{
		Log: logEvent, Created: ev.Time, Severity: m.MessageSeverity, MessageID: m.MessageID,
		Message: m.Message, Args: m.MessageArgs, Origin: ev.Origin, HostID: ev.Host,
	}
	if _, err := s.store.AppendLog(s.ctx, e, s.cfg.LogLimit); err != nil && s.ctx.Err() == nil {
		s.log.Error("writing event log", "err", err)
	}
}

func (s *Server) logRoutes() {
	s.Handle(http.MethodGet, logServicesURI, PrivApplianceView, func(c echo.Context) error {
		return s.WriteCollection(c, Collection{
			ODataID: logServicesURI, ODataType: "#LogServiceCollection.LogServiceCollection",
			Name: "Log Services", Members: s.logServiceMembers(),
			Expand: func(uri string) (any, error) {
				if uri == logServiceURI(logDiagnostic) {
					return s.diagnosticService(), nil
				}
				return s.logService(uri[len(logServicesURI)+1:]), nil
			},
		})
	})
	for _, log := range []string{logEvent, logAudit} {
		s.Handle(http.MethodGet, logServiceURI(log), PrivApplianceView, func(c echo.Context) error {
			return s.WriteResource(c, http.StatusOK, s.logService(log))
		})
		s.Handle(http.MethodGet, logServiceURI(log)+"/Entries", PrivApplianceView, func(c echo.Context) error {
			entries, err := s.store.LogEntries(c.Request().Context(), log, nil)
			if err != nil {
				return ErrInternal(err)
			}
			byURI := map[string]LogEntry{}
			uris := make([]string, len(entries))
			for i, e := range entries {
				uris[i] = logEntryURI(log, e.ID)
				byURI[uris[i]] = e
			}
			return s.WriteCollection(c, Collection{
				ODataID: logServiceURI(log) + "/Entries", ODataType: "#LogEntryCollection.LogEntryCollection",
				Name: log + " Entries", Members: uris,
				Expand:     func(uri string) (any, error) { return s.logEntry(byURI[uri]), nil },
				AutoExpand: true,
			})
		})
		s.Handle(http.MethodGet, logServiceURI(log)+"/Entries/:id", PrivApplianceView, func(c echo.Context) error {
			id, err := strconv.ParseInt(c.Param("id"), 10, 64)
			if err != nil {
				return ErrResourceNotFound("LogEntry", c.Param("id"))
			}
			e, ok, err := s.store.LogEntry(c.Request().Context(), log, id)
			if err != nil {
				return ErrInternal(err)
			}
			if !ok {
				return ErrResourceNotFound("LogEntry", c.Param("id"))
			}
			return s.WriteResource(c, http.StatusOK, s.logEntry(e))
		})
	}
	// The event log may be cleared by an administrator; the audit log
	// may not (it would erase the trace of the clearing).
	clearURI := logServiceURI(logEvent) + "/Actions/LogService.ClearLog"
	s.Handle(http.MethodPost, clearURI, PrivConfigureManager, func(c echo.Context) error {
		var body struct{}
		if c.Request().ContentLength != 0 {
			if err := s.Decode(c, &body); err != nil {
				return err
			}
		}
		if err := s.IfMatch(c, s.logService(logEvent)); err != nil {
			return err
		}
		if err := s.store.ClearLog(c.Request().Context(), logEvent); err != nil {
			return ErrInternal(err)
		}
		return s.NoContent(c)
	})
}

// logServiceMembers lists the log services, with the Diagnostic one
// (supportbundle.go) where it is served.
func (s *Server) logServiceMembers() []string {
	m := []string{logServiceURI(logAudit)}
	if s.HasRoute(logServiceURI(logDiagnostic)) {
		m = append(m, logServiceURI(logDiagnostic))
	}
	return append(m, logServiceURI(logEvent))
}

func (s *Server) logService(log string) Obj {
	o := Obj{
		"@odata.id":          logServiceURI(log),
		"@odata.type":        "#LogService.v1_9_0.LogService",
		"Id":                 log,
		"ServiceEnabled":     true,
		"MaxNumberOfRecords": s.cfg.LogLimit,
		"OverWritePolicy":    "WrapsWhenFull",
		"Entries":            Link(logServiceURI(log) + "/Entries"),
		"Status":             Obj{"State": "Enabled", "Health": "OK"},
		"LogEntryType":       "Event",
	}
	if log == logEvent {
		o["Name"] = "Event Log"
		o["Description"] = "Capacity, host link and service events"
		o["LogPurposes"] = []string{"Diagnostic", "Operations"}
		o["Actions"] = Obj{"#LogService.ClearLog": Obj{"target": logServiceURI(log) + "/Actions/LogService.ClearLog"}}
	} else {
		o["Name"] = "Audit Log"
		o["Description"] = "Every change request: who, what, when and its result"
		o["LogPurposes"] = []string{"Security"}
		o["LogEntryType"] = "OEM"
	}
	return o
}

func (s *Server) logEntry(e LogEntry) Obj {
	o := Obj{
		"@odata.id":   logEntryURI(e.Log, e.ID),
		"@odata.type": "#LogEntry.v1_21_0.LogEntry",
		"Id":          strconv.FormatInt(e.ID, 10),
		"Name":        e.Log + " Entry " + strconv.FormatInt(e.ID, 10),
		"Created":     e.Created.Format(timeFormat),
		"Severity":    e.Severity,
		"Message":     e.Message,
	}
	if e.Log == logAudit {
		o["EntryType"] = "Oem"
		o["OemRecordFormat"] = "CxlPoolAudit"
		o["Username"] = e.UserName
		o["MessageId"], o["MessageArgs"] = e.MessageID, nonNil(e.Args)
		if e.MessageID == "" { // written before audit entries had one
			o["MessageId"], _ = s.auditMessage(e.Status, nil)
		}
		o["Oem"] = oemschema.Oem("LogEntry", Obj{"Method": e.Method, "URI": e.URI, "StatusCode": e.Status, "Client": e.Client})
		return o
	}
	o["EntryType"] = "Event"
	o["MessageId"] = e.MessageID
	o["MessageArgs"] = nonNil(e.Args)
	o["EventTimestamp"] = e.Created.Format(timeFormat)
	if e.Origin != "" {
		o["Links"] = Obj{"OriginOfCondition": Link(e.Origin)}
	}
	return o
}
