package redfish

import (
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics is the service's Prometheus registry (its own, not the global
// default, so that two servers in one test process do not collide).
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	events   prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cxlpool_http_requests_total",
			Help: "Redfish requests by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cxlpool_http_request_duration_seconds",
			Help:    "Redfish request latency by route pattern and method.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10},
		}, []string{"route", "method"}),
		events: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cxlpool_events_published_total",
			Help: "Events published on the service's event bus.",
		}),
	}
	m.reg.MustRegister(m.requests, m.latency, m.events,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) registerServerGauges(s *Service) error {
	for _, g := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cxlpool_api_sessions", Help: "Open Redfish sessions."},
			func() float64 { return float64(s.auth.SessionCount()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cxlpool_api_tasks_running", Help: "Tasks not yet finished."},
			func() float64 { return float64(s.tasks.running()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cxlpool_api_event_streams", Help: "Open SSE event streams."},
			func() float64 { return float64(s.bus.streamCount()) }),
	} {
		if err := m.reg.Register(g); err != nil {
			return err
		}
	}
	return nil
}

// Metrics is where resources register their own collectors (pool gauges).
func (s *Service) Metrics() prometheus.Registerer { return s.metrics.reg }

// Gatherer reads the service's metrics (what /metrics shows).
func (s *Service) Gatherer() prometheus.Gatherer { return s.metrics.reg }

// middleware counts and times every request by route pattern (bounded
// cardinality: unmatched paths share one label). It is the outermost
// middleware, so it writes the error responses and sees their status.
func (m *metrics) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		if err := next(c); err != nil {
			c.Error(err)
		}
		route := c.Path()
		if route == "/*" || route == "" {
			route = "unmatched"
		}
		method := c.Request().Method
		m.requests.WithLabelValues(route, method, strconv.Itoa(c.Response().Status)).Inc()
		m.latency.WithLabelValues(route, method).Observe(time.Since(start).Seconds())
		return nil
	}
}

func (s *Service) metricsRoutes() {
	h := promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{ErrorLog: nil})
	s.Handle(http.MethodGet, "/metrics", PrivApplianceView, echo.WrapHandler(h))
}
