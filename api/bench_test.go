package api_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

	"cxlpool/api/apitest"
)

// BenchmarkGetServiceRoot is the cost of the framework on the simplest
// resource (public: no authentication), beside a bare echo JSON handler
// as the baseline: the difference is the service's own per-request work
// (middleware, audit skip, ETag, query parsing, metrics).
func BenchmarkGetServiceRoot(b *testing.B) {
	env := apitest.NewServer(b)
	h := env.Server.Handler()
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/redfish/v1", nil))
		if rec.Code != http.StatusOK {
			b.Fatalf("got %d", rec.Code)
		}
	}
}

// BenchmarkGetAuthenticated adds session authentication and privilege
// checks (AccountService as an administrator).
func BenchmarkGetAuthenticated(b *testing.B) {
	env := apitest.NewServer(b)
	h := env.Server.Handler()
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/redfish/v1/AccountService", nil)
		req.Header.Set("X-Auth-Token", env.Admin.Token)
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("got %d", rec.Code)
		}
	}
}

// BenchmarkBareEchoJSON is the baseline: echo answering a small JSON map.
func BenchmarkBareEchoJSON(b *testing.B) {
	e := echo.New()
	e.GET("/redfish/v1", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]any{"@odata.id": "/redfish/v1", "Id": "RootService", "Name": "Root Service"})
	})
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/redfish/v1", nil))
		if rec.Code != http.StatusOK {
			b.Fatalf("got %d", rec.Code)
		}
	}
}
