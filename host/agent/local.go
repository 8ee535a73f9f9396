package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"cxlpool/api/client"
	"cxlpool/host"
)

// The local API, on a Unix socket only the agent's user may open (0600):
//
//	POST   /v1/attachments        {"size_bytes":N,"name":"kv","share":"kv"} → 201 Attachment
//	GET    /v1/attachments        → 200 [Attachment]
//	DELETE /v1/attachments/TAG[?force=true][&wait=true] → 200 Detached
//
// Errors are {"error": "...", "rule": "..."} with 400 (bad request), 404
// (unknown tag), 409 (in use: host.ErrBusy) or 502 (the box refused or
// failed; its message is passed on).

// localError is the error body of the local API.
type localError struct {
	Error string `json:"error"`
	Rule  string `json:"rule"`
}

// maxLocalBody bounds a local request body.
const maxLocalBody = 1 << 16

// Handler is the local API.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/attachments", func(w http.ResponseWriter, r *http.Request) {
		var req AttachRequest
		dec := json.NewDecoder(io.LimitReader(r.Body, maxLocalBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeErr(w, http.StatusBadRequest, "request body", fmt.Errorf("agent: attach: body: %w", err))
			return
		}
		at, err := a.Attach(r.Context(), req)
		if err != nil {
			writeErr(w, statusOf(err), ruleOf(err), err)
			return
		}
		writeJSON(w, http.StatusCreated, at)
	})
	mux.HandleFunc("GET /v1/attachments", func(w http.ResponseWriter, r *http.Request) {
		list, err := a.List(r.Context())
		if err != nil {
			writeErr(w, statusOf(err), ruleOf(err), err)
			return
		}
		writeJSON(w, http.StatusOK, list)
	})
	mux.HandleFunc("DELETE /v1/attachments/{tag}", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		d, err := a.Detach(r.Context(), r.PathValue("tag"), DetachOptions{Force: q.Get("force") == "true", Wait: q.Get("wait") == "true"})
		if err != nil {
			writeErr(w, statusOf(err), ruleOf(err), err)
			return
		}
		writeJSON(w, http.StatusOK, d)
	})
	return mux
}

func statusOf(err error) int {
	switch {
	case errors.Is(err, host.ErrBusy), errors.Is(err, host.ErrReleasing), errors.Is(err, ErrGaveUp):
		return http.StatusConflict
	case errors.Is(err, ErrNotAttached), errors.Is(err, host.ErrUnknownTag):
		return http.StatusNotFound
	case strings.Contains(err.Error(), "want a positive whole number of MiB"), errors.Is(err, ErrBadMode):
		return http.StatusBadRequest
	case errors.Is(err, host.ErrNoSystemRAM):
		return http.StatusConflict
	}
	if s := client.StatusOf(err); s >= 400 && s < 500 {
		return s // the box refused the request: the caller's mistake or limit
	}
	return http.StatusBadGateway
}

func ruleOf(err error) string {
	switch {
	case errors.Is(err, ErrGaveUp):
		return "a release waits for the last mapping; giving up releases nothing"
	case errors.Is(err, host.ErrBusy):
		return "whole-tag release waits for the last mapping (wait for it, or force to unmap)"
	case errors.Is(err, host.ErrReleasing):
		return "capacity being released cannot be mapped"
	case errors.Is(err, ErrNotAttached), errors.Is(err, host.ErrUnknownTag):
		return "only this host's attachments can be detached"
	case errors.Is(err, ErrBadMode), errors.Is(err, host.ErrNoSystemRAM):
		return "mode devdax, or system-ram on a backend that can online memory (Linux)"
	}
	var ce *client.Error
	if errors.As(err, &ce) {
		return "the box refused the request"
	}
	return "size in whole MiB; the box must grant and the host surface the capacity"
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, rule string, err error) {
	writeJSON(w, status, localError{Error: err.Error(), Rule: rule})
}

// Listen creates the local API socket at path, mode 0600 (a stale socket
// left by a dead agent is replaced; any other file is not).
func Listen(path string) (*net.UnixListener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("agent: %s exists and is not a socket", path)
		}
		if c, err := net.Dial("unix", path); err == nil {
			_ = c.Close()
			return nil, fmt.Errorf("agent: %s: another agent is listening", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("agent: remove stale socket: %w", err)
		}
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("agent: listen: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("agent: chmod socket: %w", err)
	}
	return l, nil
}

// Serve serves the local API on l and reports to the box (RunReports)
// until ctx ends.
func (a *Agent) Serve(ctx context.Context, l net.Listener) error {
	rctx, stopReports := context.WithCancel(ctx)
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		a.RunReports(rctx)
	}()
	defer func() { stopReports(); <-reported }()
	srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	stop := context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	defer stop()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("agent: serve: %w", err)
	}
	return nil
}

// LocalClient talks to an agent's local API.
type LocalClient struct {
	hc *http.Client
}

// NewLocalClient reaches the agent listening at socket path.
func NewLocalClient(path string) *LocalClient {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
	return &LocalClient{hc: &http.Client{Transport: tr}}
}

// LocalError is an error answer of the local API.
type LocalError struct {
	Status int
	Msg    string
	Rule   string
}

func (e *LocalError) Error() string {
	if e.Rule != "" {
		return fmt.Sprintf("%s (rule: %s)", e.Msg, e.Rule)
	}
	return e.Msg
}

func (c *LocalClient) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://cxlhost"+path, rd)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("the host agent (cxlhost) is not reachable: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var le localError
		if json.Unmarshal(data, &le) != nil || le.Error == "" {
			le.Error = fmt.Sprintf("%s %s: %s", method, path, resp.Status)
		}
		return &LocalError{Status: resp.StatusCode, Msg: le.Error, Rule: le.Rule}
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// Attach asks the agent for capacity.
func (c *LocalClient) Attach(ctx context.Context, req AttachRequest) (Attachment, error) {
	var at Attachment
	return at, c.do(ctx, http.MethodPost, "/v1/attachments", req, &at)
}

// List is the agent's attachments.
func (c *LocalClient) List(ctx context.Context) ([]Attachment, error) {
	var out []Attachment
	return out, c.do(ctx, http.MethodGet, "/v1/attachments", nil, &out)
}

// Detach gives a tag back.
func (c *LocalClient) Detach(ctx context.Context, tag string, opt DetachOptions) (Detached, error) {
	q := url.Values{}
	if opt.Force {
		q.Set("force", "true")
	}
	if opt.Wait {
		q.Set("wait", "true")
	}
	p := "/v1/attachments/" + url.PathEscape(tag)
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	var d Detached
	return d, c.do(ctx, http.MethodDelete, p, nil, &d)
}
