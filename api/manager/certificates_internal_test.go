package manager

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// keyAndCert makes a key and a self-signed certificate for it, in PEM.
func keyAndCert(t testing.TB, cn string) (keyPEM, certPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: cn, Organization: []string{"Example"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0), DNSNames: []string{cn}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err = marshalKeyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	return keyPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestCertificateReplacementCrash: the states a power cut can leave in
// the middle of a replacement all load, the interrupted replacement is
// completed, and leftovers are cleaned up; a pending CSR key stays.
func TestCertificateReplacementCrash(t *testing.T) {
	oldKey, oldCert := keyAndCert(t, "old.example")
	newKey, newCert := keyAndCert(t, "new.example")
	pendingKey, _ := keyAndCert(t, "pending.example")
	tests := []struct {
		name      string
		cert, key []byte
		extra     map[string][]byte // other files in tls/
		wantCN    string
		wantKey   []byte
		wantFiles []string
	}{
		{name: "cut after cert.pem, new key from the CSR", cert: newCert, key: oldKey,
			extra: map[string][]byte{csrKeyFile: newKey}, wantCN: "new.example", wantKey: newKey, wantFiles: []string{certFile, keyFile}},
		{name: "cut after cert.pem, new key staged", cert: newCert, key: oldKey,
			extra: map[string][]byte{stagedKeyFile: newKey}, wantCN: "new.example", wantKey: newKey, wantFiles: []string{certFile, keyFile}},
		{name: "cut after key.pem, CSR key not yet removed", cert: newCert, key: newKey,
			extra: map[string][]byte{csrKeyFile: newKey}, wantCN: "new.example", wantKey: newKey, wantFiles: []string{certFile, keyFile}},
		{name: "cut before cert.pem, key staged", cert: oldCert, key: oldKey,
			extra: map[string][]byte{stagedKeyFile: newKey}, wantCN: "old.example", wantKey: oldKey, wantFiles: []string{certFile, keyFile}},
		{name: "a pending CSR stays pending", cert: oldCert, key: oldKey,
			extra: map[string][]byte{csrKeyFile: pendingKey}, wantCN: "old.example", wantKey: oldKey, wantFiles: []string{certFile, csrKeyFile, keyFile}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tdir := filepath.Join(dir, tlsDir)
			if err := os.MkdirAll(tdir, 0o700); err != nil {
				t.Fatal(err)
			}
			files := map[string][]byte{certFile: tt.cert, keyFile: tt.key}
			for k, v := range tt.extra {
				files[k] = v
			}
			for name, b := range files {
				if err := os.WriteFile(filepath.Join(tdir, name), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			s := &Server{cfg: Config{DataDir: dir, Clock: time.Now}, log: slog.New(slog.DiscardHandler)}
			cert, err := s.loadOrCreateCert()
			if err != nil {
				t.Fatalf("got %v, want the pair to load", err)
			}
			if got := leafOf(cert).Subject.CommonName; got != tt.wantCN {
				t.Errorf("served CN: got %s, want %s", got, tt.wantCN)
			}
			if got, _ := os.ReadFile(filepath.Join(tdir, keyFile)); string(got) != string(tt.wantKey) {
				t.Error("key.pem is not the expected key")
			}
			ents, _ := os.ReadDir(tdir)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			if !slices.Equal(names, tt.wantFiles) {
				t.Errorf("files: got %v, want %v", names, tt.wantFiles)
			}
		})
	}
}

// TestKeyUsageEncoding: the KeyUsage extension a CSR asks for decodes to
// the bits requested.
func TestKeyUsageEncoding(t *testing.T) {
	for _, ku := range []x509.KeyUsage{x509.KeyUsageDigitalSignature, x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		x509.KeyUsageCertSign | x509.KeyUsageCRLSign, x509.KeyUsageDecipherOnly | x509.KeyUsageDigitalSignature} {
		der, err := marshalKeyUsage(ku)
		if err != nil {
			t.Fatal(err)
		}
		// Let x509 decode it from a certificate carrying the extension.
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour),
			ExtraExtensions: []pkix.Extension{{Id: oidKeyUsage, Critical: true, Value: der}}}
		c, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := x509.ParseCertificate(c)
		if err != nil {
			t.Fatal(err)
		}
		if parsed.KeyUsage != ku {
			t.Errorf("KeyUsage %b: decoded as %b", ku, parsed.KeyUsage)
		}
	}
}

// FuzzParseCertPEM: whatever an administrator pastes, parsing never
// panics, and anything accepted has a leaf certificate.
func FuzzParseCertPEM(f *testing.F) {
	key, cert := keyAndCert(f, "fuzz.example")
	f.Add(cert)
	f.Add(append(append([]byte{}, cert...), key...))
	f.Add(append(append([]byte{}, cert...), cert...))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Add([]byte("-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n"))
	f.Add([]byte("hello"))
	f.Fuzz(func(t *testing.T, data []byte) {
		pc, ref := parseCertPEM(data)
		if ref != nil {
			return
		}
		if len(pc.chain) == 0 || pc.chain[0] == nil {
			t.Fatal("accepted without a certificate")
		}
		_ = checkServable(pc, time.Now())
	})
}
