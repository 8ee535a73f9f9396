package api_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"cxlpool/api"
	"cxlpool/api/apitest"
)

// serveOn runs env's server on a loopback listener of its own (with the
// connection caps, unlike env.HTTP) until the test ends, and returns its
// base URL.
func serveOn(t *testing.T, env *apitest.Env, plainHTTP bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- env.Server.ServeListener(ctx, ln, plainHTTP) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeListener: %v", err)
		}
	})
	scheme := "https://"
	if plainHTTP {
		scheme = "http://"
	}
	return scheme + ln.Addr().String()
}

// insecureClient trusts any certificate (the test's self-signed one).
func insecureClient() *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
}

// TestTransportHSTS: every HTTPS response carries Strict-Transport-Security,
// errors included; plain HTTP (--http) never does.
func TestTransportHSTS(t *testing.T) {
	env := apitest.NewServer(t)
	tlsURL, plainURL := serveOn(t, env, false), serveOn(t, env, true)
	tests := []struct {
		name, url, user string
		status          int
		want            string
	}{
		{"https public", tlsURL + "/redfish/v1", "", http.StatusOK, "max-age=31536000; includeSubDomains"},
		{"https 401", tlsURL + "/redfish/v1/Systems", "", http.StatusUnauthorized, "max-age=31536000; includeSubDomains"},
		{"https authenticated", tlsURL + "/redfish/v1/Systems", "admin", http.StatusOK, "max-age=31536000; includeSubDomains"},
		{"https 404", tlsURL + "/redfish/v1/Nothing", "admin", http.StatusNotFound, "max-age=31536000; includeSubDomains"},
		{"https console", tlsURL + "/", "", http.StatusOK, "max-age=31536000; includeSubDomains"},
		{"http public", plainURL + "/redfish/v1", "", http.StatusOK, ""},
		{"http authenticated", plainURL + "/redfish/v1/Systems", "admin", http.StatusOK, ""},
	}
	client := insecureClient()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, tt.url, nil)
			if tt.user != "" {
				req.SetBasicAuth(tt.user, apitest.AdminPassword)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Errorf("status: got %d, want %d", resp.StatusCode, tt.status)
			}
			if got := resp.Header.Get("Strict-Transport-Security"); got != tt.want {
				t.Errorf("Strict-Transport-Security: got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestTransportTLSPolicy: TLS 1.3, or 1.2 with ECDHE and an AEAD; CBC,
// SHA-1 MACs, RSA key exchange and TLS 1.1 are refused; HTTP/2 is not
// offered; the generated certificate is valid for at most 398 days.
func TestTransportTLSPolicy(t *testing.T) {
	env := apitest.NewServer(t)
	addr := strings.TrimPrefix(serveOn(t, env, false), "https://")
	tls12 := func(suites ...uint16) *tls.Config {
		return &tls.Config{MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS12, CipherSuites: suites}
	}
	tests := []struct {
		name   string
		cfg    *tls.Config
		wantOK bool
	}{
		{"TLS 1.3", &tls.Config{MinVersion: tls.VersionTLS13}, true},
		{"TLS 1.2 ECDHE-ECDSA-AES128-GCM", tls12(tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256), true},
		{"TLS 1.2 ECDHE-ECDSA-AES256-GCM", tls12(tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384), true},
		{"TLS 1.2 ECDHE-ECDSA-CHACHA20", tls12(tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256), true},
		{"TLS 1.2 ECDHE-ECDSA-AES128-CBC-SHA", tls12(tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA), false},
		{"TLS 1.2 ECDHE-ECDSA-AES256-CBC-SHA", tls12(tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA), false},
		{"TLS 1.2 ECDHE-ECDSA-AES128-CBC-SHA256", tls12(tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256), false},
		{"TLS 1.2 RSA-AES128-GCM (RSA key exchange)", tls12(tls.TLS_RSA_WITH_AES_128_GCM_SHA256), false},
		{"TLS 1.2 RSA-AES128-CBC-SHA", tls12(tls.TLS_RSA_WITH_AES_128_CBC_SHA), false},
		{"TLS 1.1", &tls.Config{MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg.Clone()
			cfg.InsecureSkipVerify = true
			cfg.NextProtos = []string{"h2", "http/1.1"}
			c, err := tls.Dial("tcp", addr, cfg)
			if gotOK := err == nil; gotOK != tt.wantOK {
				t.Fatalf("handshake: got error %v, want success %v", err, tt.wantOK)
			}
			if err != nil {
				return
			}
			defer c.Close()
			st := c.ConnectionState()
			if st.NegotiatedProtocol == "h2" {
				t.Error("HTTP/2 negotiated, want HTTP/1.1 only")
			}
			leaf := st.PeerCertificates[0]
			if d := leaf.NotAfter.Sub(leaf.NotBefore); d > 398*24*time.Hour {
				t.Errorf("certificate valid for %v, want at most 398 days", d)
			}
		})
	}
}

// TestTransportBodyTimeout: a request body that stops arriving is
// answered 408 OperationTimeout once BodyTimeout has passed, and the
// connection is closed.
func TestTransportBodyTimeout(t *testing.T) {
	env := apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) {
		c.Transport.BodyTimeout = 200 * time.Millisecond
	}})
	base := serveOn(t, env, true)
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The safety net only: the server answers after BodyTimeout.
	c.SetDeadline(time.Now().Add(30 * time.Second))
	io.WriteString(c, "POST /redfish/v1/SessionService/Sessions HTTP/1.1\r\nHost: box\r\nContent-Type: application/json\r\n"+
		"Content-Length: 100\r\n\r\n{\"UserName\":")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "Base.1.22.OperationTimeout") {
		t.Errorf("got %d %s, want 408 OperationTimeout", resp.StatusCode, body)
	}
	if !resp.Close {
		t.Error("the connection stays open after a body timeout")
	}
}

// TestTransportStreamsOutliveDeadlines: an SSE stream stays open past the
// body and write timeouts while it has nothing to send, then delivers.
func TestTransportStreamsOutliveDeadlines(t *testing.T) {
	env := apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) {
		c.Transport.BodyTimeout = 50 * time.Millisecond
		c.Transport.WriteTimeout = 50 * time.Millisecond
	}})
	req, _ := http.NewRequest(http.MethodGet, env.HTTP.URL+"/redfish/v1/EventService/SSE", nil)
	req.Header.Set("X-Auth-Token", env.Admin.Token)
	resp, err := env.HTTP.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	if l := <-lines; !strings.HasPrefix(l, ":") {
		t.Fatalf("first line %q, want the stream's comment", l)
	}
	// Let both deadlines pass while the stream is idle: nothing may
	// cut it for that.
	time.Sleep(300 * time.Millisecond)
	env.Admin.Patch("/redfish/v1/SessionService", map[string]any{"SessionTimeout": 900})
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the stream ended after the deadlines passed")
			}
			if strings.HasPrefix(l, "data:") && strings.Contains(l, "ResourceChanged") {
				return
			}
		case <-timeout:
			t.Fatal("no event on the stream")
		}
	}
}

// pacedBody is a request body written by a goroutine in chunks, a pause
// between them; stallAt > 0 stops it there until the test ends.
func pacedBody(t *testing.T, data []byte, chunk int, pause time.Duration, stallAt int) io.Reader {
	pr, pw := io.Pipe()
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop); pr.Close() })
	go func() {
		for off := 0; off < len(data); off += chunk {
			if stallAt > 0 && off >= stallAt {
				<-stop
				pw.CloseWithError(errors.New("stalled"))
				return
			}
			if _, err := pw.Write(data[off:min(off+chunk, len(data))]); err != nil {
				return
			}
			select {
			case <-time.After(pause):
			case <-stop:
				return
			}
		}
		pw.Close()
	}()
	return pr
}

// TestTransportUploadMinRate: a firmware push may take many times
// BodyTimeout as long as it brings its quota in every window; one that
// stalls fails its task with TransferFailed.
func TestTransportUploadMinRate(t *testing.T) {
	f := newFakeUpdater()
	env := apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) {
		c.Update = f
		c.MaxImageBytes = 64 << 10
		// 1 KiB due per 400 ms; the steady client sends 20 times that.
		c.Transport.BodyTimeout = 400 * time.Millisecond
		c.Transport.UploadMinRate = 2560
	}})
	img := image(48 << 10)
	body, ct := pushBody(t, `{"Targets":[]}`, img)
	tests := []struct {
		name      string
		stallAt   int
		wantState string
	}{
		{"steady push longer than BodyTimeout", 0, "Completed"},
		{"stalled push", len(body) / 2, "Exception"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// 2 KiB every 100 ms: about 2.4 s for the whole body.
			req, _ := http.NewRequest(http.MethodPost, env.HTTP.URL+api.UpdateUploadURI, pacedBody(t, body, 2<<10, 100*time.Millisecond, tt.stallAt))
			req.ContentLength = int64(len(body))
			req.Header.Set("Content-Type", ct)
			req.Header.Set("X-Auth-Token", env.Admin.Token)
			resp, err := env.HTTP.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("push: got %d, want 202", resp.StatusCode)
			}
			done := taskOf(t, env.Admin, waitTask(t, env.Admin, resp.Header.Get("Location")))
			if done["TaskState"] != tt.wantState {
				t.Errorf("task state: got %v, want %s (%v)", done["TaskState"], tt.wantState, done["Messages"])
			}
			if tt.wantState == "Exception" {
				var ids []string
				for _, m := range done["Messages"].([]any) {
					ids = append(ids, m.(map[string]any)["MessageId"].(string))
				}
				if !slices.Contains(ids, "Update.1.3.TransferFailed") {
					t.Errorf("task messages %v, want Update.TransferFailed", ids)
				}
			}
		})
	}
}

// TestBasicRequestRule: state-changing requests authenticated by Basic
// must be JSON (or the firmware push's multipart) and, with an Origin,
// same-origin; session requests are not held to it.
func TestBasicRequestRule(t *testing.T) {
	f := newFakeUpdater()
	env := apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) {
		c.Update = f
		c.MaxImageBytes = 64 << 10
	}})
	self := env.HTTP.URL // http://127.0.0.1:port
	port := self[strings.LastIndex(self, ":")+1:]
	patch := `{"SessionTimeout": 900}`
	push, pushCT := pushBody(t, `{"Targets":[]}`, image(1000))
	tests := []struct {
		name        string
		basic       bool
		method, uri string
		body        string
		ct, origin  string
		status      int
		msg         string
	}{
		{name: "basic json", basic: true, method: http.MethodPatch, uri: "/redfish/v1/SessionService", body: patch, ct: "application/json", status: 200},
		{name: "basic json charset, same origin", basic: true, method: http.MethodPatch, uri: "/redfish/v1/SessionService", body: patch,
			ct: "application/json; charset=utf-8", origin: self, status: 200},
		{name: "basic same origin, host in capitals", basic: true, method: http.MethodPatch, uri: "/redfish/v1/SessionService", body: patch,
			ct: "application/json", origin: "HTTP://127.0.0.1:" + port, status: 200},
		{name: "basic no content type", basic: true, method: http.MethodPatch, uri: "/redfish/v1/SessionService", body: patch, status: 415, msg: "HeaderInvalid"},
		{name: "basic text/plain (a form)", basic: true, method: http.MethodPost, uri: "/redfish/v1/AccountService/Accounts", body: `{}`,
			ct: "text/plain", status: 415, msg: "HeaderInvalid"},
		{name: "basic form-urlencoded", basic: true, method: http.MethodPost, uri: "/redfish/v1/AccountService/Accounts", body: `a=b`,
			ct: "application/x-www-form-urlencoded", status: 415, msg: "HeaderInvalid"},
		{name: "basic multipart outside the push", basic: true, method: http.MethodPost, uri: "/redfish/v1/AccountService/Accounts", body: string(push),
			ct: pushCT, status: 415, msg: "HeaderInvalid"},
		{name: "basic firmware push multipart", basic: true, method: http.MethodPost, uri: api.UpdateUploadURI, body: string(push), ct: pushCT, status: 202},
		{name: "basic other origin", basic: true, method: http.MethodPatch, uri: "/redfish/v1/SessionService", body: patch,
			ct: "application/json", origin: "https://evil.example", status: 403, msg: "HeaderInvalid"},
		{name: "basic other port", basic: true, method: http.MethodPatch, uri: "/redfish/v1/SessionService", body: patch,
			ct: "application/json", origin: "http://127.0.0.1:1", status: 403, msg: "HeaderInvalid"},
		{name: "basic other scheme", basic: true, method: http.MethodPatch, uri: "/redfish/v1/SessionService", body: patch,
			ct: "application/json", origin: "https://127.0.0.1:" + port, status: 403, msg: "HeaderInvalid"},
		{name: "basic null origin", basic: true, method: http.MethodPatch, uri: "/redfish/v1/SessionService", body: patch,
			ct: "application/json", origin: "null", status: 403, msg: "HeaderInvalid"},
		{name: "basic delete, no body, other origin", basic: true, method: http.MethodDelete, uri: "/redfish/v1/SessionService/Sessions/none",
			origin: "https://evil.example", status: 403, msg: "HeaderInvalid"},
		{name: "basic delete, no body", basic: true, method: http.MethodDelete, uri: "/redfish/v1/SessionService/Sessions/none", status: 404},
		{name: "basic GET, other origin", basic: true, method: http.MethodGet, uri: "/redfish/v1/SessionService", origin: "https://evil.example", status: 200},
		{name: "session, no content type", method: http.MethodPatch, uri: "/redfish/v1/SessionService", body: patch, status: 200},
		{name: "session, other origin", method: http.MethodPatch, uri: "/redfish/v1/SessionService", body: patch, ct: "application/json",
			origin: "https://evil.example", status: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := env.Admin
			if tt.basic {
				c = env.Basic("admin", apitest.AdminPassword)
			}
			var body any
			if tt.body != "" {
				body = tt.body
			}
			r := c.Do(tt.method, tt.uri, body, "Content-Type", tt.ct, "Origin", tt.origin)
			wantStatus(t, tt.name, r, tt.status, tt.msg)
			if tt.status == http.StatusAccepted {
				waitTask(t, env.Admin, r.Header.Get("Location"))
			}
		})
	}
}

// TestCertificateRenewal: while serving, the box renews its own
// self-signed certificate once it is within 30 days of its end; new
// connections get the new one and an event says so. (Which certificates
// are renewed and when: TestRenewSelfSigned.)
func TestCertificateRenewal(t *testing.T) {
	env := apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) {
		c.Transport.CertCheckInterval = 10 * time.Millisecond
	}})
	addr := strings.TrimPrefix(serveOn(t, env, false), "https://")
	peer := func() *x509.Certificate {
		t.Helper()
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0]
	}
	first := peer()
	if d := first.NotAfter.Sub(first.NotBefore); d > 398*24*time.Hour {
		t.Fatalf("generated certificate valid for %v, want at most 398 days", d)
	}
	env.Clock.Advance(first.NotAfter.Sub(env.Clock.Now()) - 29*24*time.Hour)
	var renewed *x509.Certificate
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if got := peer(); !got.Equal(first) {
			renewed = got
			break
		}
	}
	if renewed == nil {
		t.Fatal("the certificate was not renewed 29 days before its end")
	}
	if !renewed.NotAfter.After(first.NotAfter) || renewed.NotAfter.Sub(renewed.NotBefore) > 398*24*time.Hour {
		t.Errorf("renewed certificate valid %v to %v, want a new term of at most 398 days", renewed.NotBefore, renewed.NotAfter)
	}
	var events []string
	for _, m := range env.Basic("admin", apitest.AdminPassword).GetOK("/redfish/v1/Managers/FM/LogServices/EventLog/Entries?$expand=.")["Members"].([]any) {
		e := m.(map[string]any)
		if l, ok := e["Links"].(map[string]any); ok && l["OriginOfCondition"].(map[string]any)["@odata.id"] == "/redfish/v1/Managers/FM/NetworkProtocol/HTTPS/Certificates/1" {
			events = append(events, e["MessageId"].(string))
		}
	}
	if !slices.Contains(events, "ResourceEvent.1.4.ResourceChanged") {
		t.Errorf("events about the certificate %v, want ResourceChanged", events)
	}
}
