package stream

import (
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// HandlerConfig configures the WebSocket endpoint.
type HandlerConfig struct {
	// AllowedOrigins lists the browser origins ("https://console.example:8443")
	// that may connect, compared case-insensitively. Empty means the
	// request's own host only. A request without an Origin header (not a
	// browser) is allowed: authentication is the mounting API's job.
	AllowedOrigins []string
	// WriteTimeout bounds one frame write; a client that cannot take a
	// frame in this time is disconnected (default 10 s).
	WriteTimeout time.Duration
	// PingInterval is how often the server pings; a client that answers
	// nothing for two intervals is disconnected (default 30 s).
	PingInterval time.Duration
	Logger       *slog.Logger
}

// NewHandler returns the endpoint: it upgrades the request, subscribes to
// hub and writes every frame as one binary message until the client goes
// or the request's context ends (then with a close frame, 1008). Frames the client is
// too slow for are dropped by the hub (see Hub); the sequence numbers let
// the client see the gap.
func NewHandler(hub *Hub, cfg HandlerConfig) http.Handler {
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	h := &handler{hub: hub, cfg: cfg}
	h.up = websocket.Upgrader{
		ReadBufferSize:  512,
		WriteBufferSize: 8192,
		CheckOrigin:     h.checkOrigin,
	}
	return h
}

type handler struct {
	hub *Hub
	cfg HandlerConfig
	up  websocket.Upgrader
}

func (h *handler) checkOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	if len(h.cfg.AllowedOrigins) > 0 {
		return slices.ContainsFunc(h.cfg.AllowedOrigins, func(o string) bool { return strings.EqualFold(o, origin) })
	}
	u, err := url.Parse(origin)
	return err == nil && strings.EqualFold(u.Host, r.Host)
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	conn, err := h.up.Upgrade(w, r, nil) // answers the client itself on failure
	if err != nil {
		h.cfg.Logger.Debug("telemetry stream: upgrade refused", "remote", r.RemoteAddr, "err", err)
		return
	}
	defer conn.Close()
	sub := h.hub.Subscribe()
	defer sub.Close()

	// The reader only keeps control frames flowing (pongs, close) and
	// notices a dead peer; clients send nothing else.
	conn.SetReadLimit(512)
	wait := 2 * h.cfg.PingInterval
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	conn.SetPongHandler(func(string) error { return conn.SetReadDeadline(time.Now().Add(wait)) })
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		for {
			if _, _, err := conn.NextReader(); err != nil {
				return
			}
		}
	}()

	ping := time.NewTicker(h.cfg.PingInterval)
	defer ping.Stop()
	for {
		select {
		case <-gone:
			return
		case <-r.Context().Done():
			// The mounting API ended the stream (its credentials no
			// longer stand, or the service stops): say why and close.
			_ = conn.WriteControl(websocket.CloseMessage,
				websocket.FormatCloseMessage(websocket.ClosePolicyViolation, "stream ended by the service"),
				time.Now().Add(h.cfg.WriteTimeout))
			return
		case f, ok := <-sub.C():
			if !ok {
				return
			}
			_ = conn.SetWriteDeadline(time.Now().Add(h.cfg.WriteTimeout))
			if err := conn.WriteMessage(websocket.BinaryMessage, f); err != nil {
				h.cfg.Logger.Debug("telemetry stream: client gone", "remote", r.RemoteAddr, "dropped", sub.Dropped(), "err", err)
				return
			}
		case <-ping.C:
			if err := conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(h.cfg.WriteTimeout)); err != nil {
				return
			}
		}
	}
}
