package redfish

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
)

const (
	SessionServiceURI = "/redfish/v1/SessionService"
	SessionsURI       = SessionServiceURI + "/Sessions"

	// SessionTimeout bounds from the SessionService schema.
	minSessionTimeout = 30
	maxSessionTimeout = 86400
)

type sessionCreate struct {
	UserName string `json:"UserName" rf:"required"`
	Password string `json:"Password" rf:"required"`
	Context  string `json:"Context"`
}

type sessionServicePatch struct {
	SessionTimeout *int   `json:"SessionTimeout"`
	ServiceEnabled *bool  `json:"ServiceEnabled" rf:"readonly"`
	ID             string `json:"Id" rf:"readonly"`
	Name           string `json:"Name" rf:"readonly"`
}

func (s *Service) sessionRoutes() {
	s.Handle(http.MethodGet, SessionServiceURI, PrivLogin, func(c echo.Context) error {
		return s.WriteResource(c, http.StatusOK, s.sessionService())
	})
	s.Handle(http.MethodPatch, SessionServiceURI, PrivConfigureManager, s.patchSessionService)
	s.Handle(http.MethodGet, SessionsURI, PrivLogin, func(c echo.Context) error {
		p := PrincipalOf(c)
		var uris []string
		byURI := map[string]session{}
		for _, sess := range s.auth.listSessions() {
			if s.canSeeSession(p, sess) {
				u := SessionsURI + "/" + sess.ID
				uris = append(uris, u)
				byURI[u] = sess
			}
		}
		return s.WriteCollection(c, Collection{ODataID: SessionsURI, ODataType: "#SessionCollection.SessionCollection",
			Name: "Session Collection", Members: uris,
			Expand: func(uri string) (any, error) { return s.sessionBody(byURI[uri]), nil }})
	})
	s.Handle(http.MethodPost, SessionsURI, Public, s.login)
	// DSP0266 lets a client log in by POST to the collection's Members too.
	s.Handle(http.MethodPost, SessionsURI+"/Members", Public, s.login)
	s.Handle(http.MethodGet, SessionsURI+"/:id", PrivLogin, func(c echo.Context) error {
		sess, err := s.findSession(c)
		if err != nil {
			return err
		}
		return s.WriteResource(c, http.StatusOK, s.sessionBody(sess))
	})
	s.Handle(http.MethodDelete, SessionsURI+"/:id", PrivConfigureSelf|PrivConfigureManager, func(c echo.Context) error {
		sess, err := s.findSession(c)
		if err != nil {
			return err
		}
		p := PrincipalOf(c)
		if sess.accountUID != p.AccountUID && !p.Has(PrivConfigureManager) {
			return ErrInsufficientPrivilege()
		}
		if err := s.IfMatch(c, s.sessionBody(sess)); err != nil {
			return err
		}
		s.auth.deleteSession(sess.ID)
		return s.NoContent(c)
	})
}

// canSeeSession: administrators see every session, others their own.
func (s *Service) canSeeSession(p *Principal, sess session) bool {
	return p.Has(PrivConfigureManager|PrivConfigureUsers) || sess.accountUID == p.AccountUID
}

func (s *Service) findSession(c echo.Context) (session, error) {
	sess, ok := s.auth.session(c.Param("id"))
	if !ok || !s.canSeeSession(PrincipalOf(c), sess) {
		return session{}, ErrResourceNotFound("Session", c.Param("id"))
	}
	return sess, nil
}

// login creates a session: 201 with X-Auth-Token and Location. Failures
// are 401 NoValidSession, alike for an unknown user, a wrong password and
// a disabled account (signInError); the right password for an account
// locked from this address says until when, and attempts too soon after
// failures are 429 with Retry-After. A full session table is 503.
func (s *Service) login(c echo.Context) error {
	var req sessionCreate
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	c.Set(auditUserKey, req.UserName)
	sess, tok, err := s.auth.createSession(req.UserName, req.Password, c.RealIP(), req.Context)
	if errors.Is(err, errSessionLimit) {
		return NewError(http.StatusServiceUnavailable, Msg{Key: "Base.SessionLimitExceeded", Resolution: fmt.Sprintf(
			"The service holds %d sessions, the most it keeps (the last %d of %d only for Administrators). "+
				"Log out sessions that are no longer used (DELETE them), or wait for idle ones to time out.",
			s.auth.SessionCount(), adminSessionReserve, maxSessions)}).WithHeader("Retry-After", "60")
	}
	if err != nil {
		return signInError(c.Request(), err)
	}
	body := s.sessionBody(*sess)
	if acct, ok := s.store.AccountByUID(sess.accountUID); ok {
		SetPrincipal(c, s.auth.Principal(acct, sess.ID))
		if acct.PasswordChangeRequired {
			// DSP0266: the login succeeds and says what must happen
			// before the session may do anything else.
			body["@Message.ExtendedInfo"] = []Message{s.reg.Resolve(M("Base.PasswordChangeRequired", AccountURI(acct.ID)))}
		}
	}
	c.Response().Header().Set("X-Auth-Token", tok)
	return s.WriteCreated(c, SessionsURI+"/"+sess.ID, body)
}

func (s *Service) sessionBody(sess session) Obj {
	user := ""
	if acct, ok := s.store.AccountByUID(sess.accountUID); ok {
		user = acct.UserName
	}
	o := Obj{
		"@odata.id":   SessionsURI + "/" + sess.ID,
		"@odata.type": "#Session.v1_8_0.Session",
		"Id":          sess.ID,
		"Name":        "User Session",
		"UserName":    user,
		"Password":    nil,
		"SessionType": "Redfish",
		"CreatedTime": sess.Created.Format(TimeFormat),
	}
	if sess.Client != "" {
		o["ClientOriginIPAddress"] = sess.Client
	}
	if sess.Context != "" {
		o["Context"] = sess.Context
	}
	return o
}

func (s *Service) sessionService() Obj {
	timeout, _, _ := s.auth.Policy()
	return Obj{
		"@odata.id":      SessionServiceURI,
		"@odata.type":    "#SessionService.v1_2_0.SessionService",
		"Id":             "SessionService",
		"Name":           "Session Service",
		"Description":    "Redfish login sessions",
		"ServiceEnabled": true,
		"SessionTimeout": int(timeout / time.Second),
		"Sessions":       Link(SessionsURI),
		"Status":         Obj{"State": "Enabled", "Health": "OK"},
	}
}

func (s *Service) patchSessionService(c echo.Context) error {
	var req sessionServicePatch
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	if err := s.IfMatch(c, s.sessionService()); err != nil {
		return err
	}
	if req.SessionTimeout != nil {
		n := *req.SessionTimeout
		if n < minSessionTimeout || n > maxSessionTimeout {
			return ErrPropertyValueOutOfRange(strconv.Itoa(n), "SessionTimeout")
		}
		if err := s.store.SetSettings(c.Request().Context(), map[string]string{SettingSessionTimeout: strconv.Itoa(n)}); err != nil {
			return ErrInternal(err)
		}
		d := time.Duration(n) * time.Second
		s.auth.SetPolicy(&d, nil, nil)
		s.Publish(Event{MessageKey: MsgResourceChanged, Origin: SessionServiceURI})
	}
	return s.WriteResource(c, http.StatusOK, s.sessionService())
}
