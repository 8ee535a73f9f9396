package nats_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cxlpool/appliance"
	"cxlpool/fleet"
	fleetnats "cxlpool/fleet/nats"
	"cxlpool/sim"
)

// testCA issues certificates for the TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // the CA certificate, PEM
}

func newCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, file: filepath.Join(dir, name+".pem")}
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

// issue writes a leaf certificate and key (mode 0600) for a server
// (127.0.0.1) or a client.
func (ca *testCA) issue(t *testing.T, dir, name string, server bool) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kb)
	return certFile, keyFile
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startTLSServer runs one nats-server with JetStream that requires TLS
// and verifies clients' certificates against ca, plus a password.
func startTLSServer(t *testing.T, dir string, ca *testCA) (port int) {
	t.Helper()
	bin := natsServer(t)
	cert, key := ca.issue(t, dir, "server", true)
	port = freePort(t)
	conf := filepath.Join(dir, "tls.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`server_name: tls1
listen: 127.0.0.1:%d
jetstream { store_dir: %q, max_memory_store: 64MB, max_file_store: 1GB }
tls { cert_file: %q, key_file: %q, ca_file: %q, verify: true, timeout: 5 }
authorization { users: [ { user: %s, password: %s } ] }
`, port, filepath.Join(dir, "js"), cert, key, ca.file, testUser, testPassword)), 0o600); err != nil {
		t.Fatal(err)
	}
	nd := &node{name: "tls1", conf: conf, t: t, bin: bin}
	nd.start()
	t.Cleanup(nd.kill)
	// Ready once it takes TCP connections (bounded poll).
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			return port
		}
		if time.Now().After(deadline) {
			t.Fatalf("TLS nats-server not listening within 30s: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
}

// TestExternalTLS: a box joins an external server that requires TLS and
// verifies clients, with the CA and its client certificate; a plain
// connection, a client without a certificate and a client trusting
// another CA are refused, each saying why.
func TestExternalTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, dir, "fleet-ca")
	other := newCA(t, dir, "other-ca")
	port := startTLSServer(t, dir, ca)
	clientCert, clientKey := ca.issue(t, dir, "box", false)
	strangerCert, strangerKey := other.issue(t, dir, "stranger", false)
	creds := credsFile(t, testUser, testPassword)
	tlsURL := fmt.Sprintf("tls://127.0.0.1:%d", port)

	// The server refuses plaintext: its INFO says TLS is required and a
	// CONNECT in the clear gets no further.
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	info, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.Contains(info, `"tls_required":true`) {
		t.Errorf("plain connection: INFO %q (%v), want tls_required", info, err)
	}
	fmt.Fprintf(conn, "CONNECT {\"user\":%q,\"pass\":%q,\"verbose\":false}\r\nPING\r\n", testUser, testPassword)
	rest := make([]byte, 256)
	n, _ := conn.Read(rest)
	if strings.Contains(string(rest[:n]), "PONG") {
		t.Errorf("a plaintext client was answered: %q", rest[:n])
	}
	conn.Close()

	for _, tc := range []struct {
		name string
		cfg  fleetnats.Config
		want string // in the error; empty: connects
	}{
		{"ca and client certificate", fleetnats.Config{CAFile: ca.file, CertFile: clientCert, KeyFile: clientKey}, ""},
		{"no client certificate", fleetnats.Config{CAFile: ca.file}, "--fleet-cert"},
		{"wrong CA", fleetnats.Config{CAFile: other.file, CertFile: clientCert, KeyFile: clientKey}, "--fleet-ca"},
		{"certificate of another CA", fleetnats.Config{CAFile: ca.file, CertFile: strangerCert, KeyFile: strangerKey}, "--fleet-cert"},
		{"system roots", fleetnats.Config{CertFile: clientCert, KeyFile: clientKey}, "--fleet-ca"},
		{"key without certificate", fleetnats.Config{CAFile: ca.file, KeyFile: clientKey}, "both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.URLs, cfg.CredsFile, cfg.Name = []string{tlsURL}, creds, "tls-test"
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			p, err := fleetnats.Connect(ctx, cfg)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("connect: %v", err)
				}
				defer p.Close()
				if err := p.PutInventory(ctx, inv("box-tls", 1<<30)); err != nil {
					t.Errorf("put over TLS: %v", err)
				}
				return
			}
			if err == nil {
				p.Close()
				t.Fatal("connected")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to name %s", err, tc.want)
			}
		})
	}

	// The daemon's path: an appliance joins with the same settings.
	scfg := sim.DefaultConfig()
	scfg.Capacity, scfg.BlockSize, scfg.Heads, scfg.Serial = 4<<30, testBlock, 2, 0x7151
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	app, err := appliance.Open(ctx, appliance.Config{DataDir: t.TempDir(), Sim: scfg, Logger: slog.New(slog.DiscardHandler),
		Fleet: appliance.FleetConfig{Enabled: true, URLs: []string{tlsURL}, CredsFile: creds, CAFile: ca.file,
			CertFile: clientCert, KeyFile: clientKey, TTL: 3 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	if err := app.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-app.Fleet.Joined():
	case <-time.After(60 * time.Second):
		t.Fatalf("appliance did not join over TLS: %+v", app.Fleet.State())
	}
	waitBoxes(t, app.Fleet.Plane(), "the box's record over TLS", 30*time.Second, func(m map[fleet.BoxID]fleet.Inventory) bool {
		_, ok := m[app.Fleet.Service.Box()]
		return ok
	})
}
