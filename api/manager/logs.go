package manager

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/oemschema"
	"cxlpool/api/redfish"
)

// The manager's log services (LogEvent and LogAudit are in redfish/audit.go).
const logServicesURI = pool.ManagerURI + "/LogServices"

func logServiceURI(log string) string { return logServicesURI + "/" + log }

func logEntryURI(log string, id int64) string {
	return logServiceURI(log) + "/Entries/" + strconv.FormatInt(id, 10)
}

func (s *Server) logRoutes() {
	s.Handle(http.MethodGet, logServicesURI, redfish.PrivApplianceView, func(c echo.Context) error {
		return s.WriteCollection(c, redfish.Collection{
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
	for _, log := range []string{redfish.LogEvent, redfish.LogAudit} {
		s.Handle(http.MethodGet, logServiceURI(log), redfish.PrivApplianceView, func(c echo.Context) error {
			return s.WriteResource(c, http.StatusOK, s.logService(log))
		})
		s.Handle(http.MethodGet, logServiceURI(log)+"/Entries", redfish.PrivApplianceView, func(c echo.Context) error {
			entries, err := s.Store().LogEntries(c.Request().Context(), log, nil)
			if err != nil {
				return redfish.ErrInternal(err)
			}
			byURI := map[string]redfish.LogEntry{}
			uris := make([]string, len(entries))
			for i, e := range entries {
				uris[i] = logEntryURI(log, e.ID)
				byURI[uris[i]] = e
			}
			return s.WriteCollection(c, redfish.Collection{
				ODataID: logServiceURI(log) + "/Entries", ODataType: "#LogEntryCollection.LogEntryCollection",
				Name: log + " Entries", Members: uris,
				Expand:     func(uri string) (any, error) { return s.logEntry(byURI[uri]), nil },
				AutoExpand: true,
			})
		})
		s.Handle(http.MethodGet, logServiceURI(log)+"/Entries/:id", redfish.PrivApplianceView, func(c echo.Context) error {
			id, err := strconv.ParseInt(c.Param("id"), 10, 64)
			if err != nil {
				return redfish.ErrResourceNotFound("LogEntry", c.Param("id"))
			}
			e, ok, err := s.Store().LogEntry(c.Request().Context(), log, id)
			if err != nil {
				return redfish.ErrInternal(err)
			}
			if !ok {
				return redfish.ErrResourceNotFound("LogEntry", c.Param("id"))
			}
			return s.WriteResource(c, http.StatusOK, s.logEntry(e))
		})
	}
	// The event log may be cleared by an administrator; the audit log
	// may not (it would erase the trace of the clearing).
	clearURI := logServiceURI(redfish.LogEvent) + "/Actions/LogService.ClearLog"
	s.Handle(http.MethodPost, clearURI, redfish.PrivConfigureManager, func(c echo.Context) error {
		var body struct{}
		if c.Request().ContentLength != 0 {
			if err := s.Decode(c, &body); err != nil {
				return err
			}
		}
		if err := s.IfMatch(c, s.logService(redfish.LogEvent)); err != nil {
			return err
		}
		if err := s.Store().ClearLog(c.Request().Context(), redfish.LogEvent); err != nil {
			return redfish.ErrInternal(err)
		}
		return s.NoContent(c)
	})
}

// logServiceMembers lists the log services, with the Diagnostic one
// (supportbundle.go) where it is served.
func (s *Server) logServiceMembers() []string {
	m := []string{logServiceURI(redfish.LogAudit)}
	if s.HasRoute(logServiceURI(logDiagnostic)) {
		m = append(m, logServiceURI(logDiagnostic))
	}
	return append(m, logServiceURI(redfish.LogEvent))
}

func (s *Server) logService(log string) redfish.Obj {
	o := redfish.Obj{
		"@odata.id":          logServiceURI(log),
		"@odata.type":        "#LogService.v1_9_0.LogService",
		"Id":                 log,
		"ServiceEnabled":     true,
		"MaxNumberOfRecords": s.cfg.LogLimit,
		"OverWritePolicy":    "WrapsWhenFull",
		"Entries":            redfish.Link(logServiceURI(log) + "/Entries"),
		"Status":             redfish.Obj{"State": "Enabled", "Health": "OK"},
		"LogEntryType":       "Event",
	}
	if log == redfish.LogEvent {
		o["Name"] = "Event Log"
		o["Description"] = "Capacity, host link and service events"
		o["LogPurposes"] = []string{"Diagnostic", "Operations"}
		o["Actions"] = redfish.Obj{"#LogService.ClearLog": redfish.Obj{"target": logServiceURI(log) + "/Actions/LogService.ClearLog"}}
	} else {
		o["Name"] = "Audit Log"
		o["Description"] = "Every change request: who, what, when and its result"
		o["LogPurposes"] = []string{"Security"}
		o["LogEntryType"] = "OEM"
	}
	return o
}

func (s *Server) logEntry(e redfish.LogEntry) redfish.Obj {
	o := redfish.Obj{
		"@odata.id":   logEntryURI(e.Log, e.ID),
		"@odata.type": "#LogEntry.v1_21_0.LogEntry",
		"Id":          strconv.FormatInt(e.ID, 10),
		"Name":        e.Log + " Entry " + strconv.FormatInt(e.ID, 10),
		"Created":     e.Created.Format(redfish.TimeFormat),
		"Severity":    e.Severity,
		"Message":     e.Message,
	}
	if e.Log == redfish.LogAudit {
		o["EntryType"] = "Oem"
		o["OemRecordFormat"] = "CxlPoolAudit"
		o["Username"] = e.UserName
		o["MessageId"], o["MessageArgs"] = e.MessageID, redfish.NonNil(e.Args)
		if e.MessageID == "" { // written before audit entries had one
			o["MessageId"], _ = s.AuditMessage(e.Status, nil)
		}
		o["Oem"] = oemschema.Oem("LogEntry", redfish.Obj{"Method": e.Method, "URI": e.URI, "StatusCode": e.Status, "Client": e.Client})
		return o
	}
	o["EntryType"] = "Event"
	o["MessageId"] = e.MessageID
	o["MessageArgs"] = redfish.NonNil(e.Args)
	o["EventTimestamp"] = e.Created.Format(redfish.TimeFormat)
	if e.Origin != "" {
		o["Links"] = redfish.Obj{"OriginOfCondition": redfish.Link(e.Origin)}
	}
	return o
}
