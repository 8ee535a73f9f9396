package api_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"cxlpool/api"
	"cxlpool/api/apitest"
	"cxlpool/api/redfish"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestServeTLS: the first start generates a self-signed certificate (key
// 0600) and serves HTTPS with it; the next start reuses it; cancelling the
// context shuts down cleanly.
func TestServeTLS(t *testing.T) {
	env := apitest.NewServer(t)
	var first []byte
	for round := range 2 {
		addr := freeAddr(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- env.Server.Serve(ctx, addr, false) }()
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		var resp *http.Response
		var err error
		for range 200 { // until the listener is up
			if resp, err = client.Get("https://" + addr + "/redfish/v1"); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.TLS == nil {
			t.Errorf("round %d: got %d, TLS %v", round, resp.StatusCode, resp.TLS != nil)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("round %d: Serve returned %v after cancel", round, err)
		}
		cert, err := os.ReadFile(env.Server.CertPath())
		if err != nil {
			t.Fatal(err)
		}
		if round == 0 {
			first = cert
		} else if string(cert) != string(first) {
			t.Error("the certificate was regenerated instead of reused")
		}
	}
	fi, err := os.Stat(filepath.Join(filepath.Dir(env.Server.CertPath()), "key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v, want 0600", fi.Mode().Perm())
	}
}

// TestInitialPassword: without CXLPOOL_ADMIN_PASSWORD the first start
// generates one, prints it once and keeps it in a 0600 file; it works,
// and a restart neither prints nor changes it.
func TestInitialPassword(t *testing.T) {
	dir := t.TempDir()
	var out strings.Builder
	s, err := api.New(api.Config{DataDir: dir, Out: &out, BcryptCost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, redfish.InitialPasswordFile))
	if err != nil {
		t.Fatal(err)
	}
	pw := strings.TrimSpace(string(b))
	if len(pw) != 20 || !strings.Contains(out.String(), pw) {
		t.Errorf("password %q (len %d); printed %q", pw, len(pw), out.String())
	}
	if fi, _ := os.Stat(filepath.Join(dir, redfish.InitialPasswordFile)); fi.Mode().Perm() != 0o600 {
		t.Errorf("password file mode %v, want 0600", fi.Mode().Perm())
	}
	ts := httptest.NewServer(s.Handler())
	req, _ := http.NewRequest(http.MethodGet, ts.URL+"/redfish/v1/AccountService", nil)
	req.SetBasicAuth("admin", pw)
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("admin with the generated password: got %d, want 200", resp.StatusCode)
	}
	ts.Close()
	s.Close()

	out.Reset()
	s2, err := api.New(api.Config{DataDir: dir, Out: &out, BcryptCost: bcrypt.MinCost, AdminPassword: "ignored-now-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if out.Len() != 0 {
		t.Errorf("restart printed %q", out.String())
	}
}
