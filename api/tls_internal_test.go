package api

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
	"strings"
	"testing"
	"time"
)

// customPair is an operator's certificate: issued by someone else's CA.
func customPair(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Site CA", Organization: []string{"Example"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "box.example", Organization: []string{"Example"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0), DNSNames: []string{"box.example"}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// TestLoadOrCreateCert: a generated pair that no longer loads (the empty
// cert.pem a power cut left, a lost or torn key) is regenerated; an
// operator's certificate that does not load is an error, and its files
// stay as they are.
func TestLoadOrCreateCert(t *testing.T) {
	ours, ourKey, err := selfSigned(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	custom, customKey := customPair(t)
	_, otherKey, err := selfSigned(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	const absent = "\x00absent"
	tests := []struct {
		name      string
		cert, key string
		wantErr   bool
		wantSame  bool // the certificate is kept
	}{
		{name: "generated pair loads", cert: string(ours), key: string(ourKey), wantSame: true},
		{name: "custom pair loads", cert: string(custom), key: string(customKey), wantSame: true},
		{name: "empty cert and key after a cut", cert: "", key: ""},
		{name: "empty cert, key written", cert: "", key: string(ourKey)},
		{name: "empty cert, no key", cert: "", key: absent},
		{name: "generated cert, key missing", cert: string(ours), key: absent},
		{name: "generated cert, key torn", cert: string(ours), key: string(ourKey[:40])},
		{name: "generated cert, key of another pair", cert: string(ours), key: string(otherKey)},
		{name: "custom cert, key missing", cert: string(custom), key: absent, wantErr: true},
		{name: "custom cert, wrong key", cert: string(custom), key: string(otherKey), wantErr: true},
		{name: "custom cert torn", cert: string(custom[:60]), key: string(customKey), wantErr: true},
		{name: "empty cert beside an RSA key", cert: "", key: "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tdir := filepath.Join(dir, tlsDir)
			if err := os.MkdirAll(tdir, 0o700); err != nil {
				t.Fatal(err)
			}
			cp, kp := filepath.Join(tdir, certFile), filepath.Join(tdir, keyFile)
			if err := os.WriteFile(cp, []byte(tt.cert), 0o644); err != nil {
				t.Fatal(err)
			}
			if tt.key != absent {
				if err := os.WriteFile(kp, []byte(tt.key), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			s := &Server{cfg: Config{DataDir: dir, Clock: time.Now}, log: slog.New(slog.DiscardHandler)}
			_, err := s.loadOrCreateCert()
			if gotErr := err != nil; gotErr != tt.wantErr {
				t.Fatalf("got error %v, want error %v", err, tt.wantErr)
			}
			got, rerr := os.ReadFile(cp)
			if rerr != nil {
				t.Fatal(rerr)
			}
			if tt.wantErr {
				if string(got) != tt.cert {
					t.Error("a custom certificate that does not load was replaced")
				}
				return
			}
			if same := string(got) == tt.cert; same != tt.wantSame {
				t.Errorf("got certificate kept %v, want %v", same, tt.wantSame)
			}
			if _, err := s.loadOrCreateCert(); err != nil {
				t.Errorf("second start: got %v, want the pair to load", err)
			}
			if again, _ := os.ReadFile(cp); string(again) != string(got) {
				t.Error("second start: the certificate changed again")
			}
			if !generatedPair(cp, kp) && !tt.wantSame {
				t.Error("a regenerated pair is not recognised as generated")
			}
			ents, _ := os.ReadDir(tdir)
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), ".") {
					t.Errorf("temporary file %s left behind", e.Name())
				}
			}
		})
	}
}
