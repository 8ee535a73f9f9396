package api

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"cxlpool/api/redfish"
	"cxlpool/webui"
)

// The web console (package webui) is served at "/" beside the API. Its
// files are public, because the login page must load before there is a
// session; every call the console makes goes through the Redfish routes
// with the session's token, so it can show and do only what the account
// may.
func (s *Server) consoleRoutes() {
	con, err := webui.New()
	if err != nil {
		s.RouteError(fmt.Errorf("api: console: %w", err))
		return
	}
	h := echo.WrapHandler(con)
	for _, p := range webui.Routes() {
		s.Handle(http.MethodGet, p, redfish.Public, h)
	}
}
