package manager

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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

// TestRenewSelfSigned: the box's own certificate is renewed (new key,
// files replaced, served at once) within 30 days of its end or when it
// was made for longer than 398 days; nothing else is ever replaced.
func TestRenewSelfSigned(t *testing.T) {
	now := time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)
	gen := func(notBefore, notAfter time.Time) func(t *testing.T) (c, k []byte) {
		return func(t *testing.T) (c, k []byte) {
			c, k, err := selfSignedTerm(notBefore, notAfter)
			if err != nil {
				t.Fatal(err)
			}
			return c, k
		}
	}
	day := 24 * time.Hour
	tests := []struct {
		name        string
		pair        func(t *testing.T) (certPEM, keyPEM []byte)
		diskChanged bool // cert.pem on disk is an operator's, not the one served
		want        bool
	}{
		{"generated, 40 days left", gen(now.Add(-357*day), now.Add(40*day)), false, false},
		{"generated, 29 days left", gen(now.Add(-368*day), now.Add(29*day)), false, true},
		{"generated, expired", gen(now.Add(-400*day), now.Add(-3*day)), false, true},
		{"generated by an older version for ten years", gen(now.Add(-day), now.AddDate(10, 0, 0)), false, true},
		{"operator's, 29 days left", func(t *testing.T) ([]byte, []byte) {
			k, c := keyAndCert(t, "site.example")
			return c, k
		}, false, false},
		{"operator's from a CA", func(t *testing.T) ([]byte, []byte) { return customPair(t) }, false, false},
		{"generated served, operator's on disk", gen(now.Add(-368*day), now.Add(29*day)), true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tdir := filepath.Join(dir, tlsDir)
			if err := os.MkdirAll(tdir, 0o700); err != nil {
				t.Fatal(err)
			}
			certPEM, keyPEM := tt.pair(t)
			cert, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				t.Fatal(err)
			}
			clock := now
			if tt.name == "operator's, 29 days left" || tt.name == "operator's from a CA" {
				clock = leafOf(cert).NotAfter.Add(-29 * day)
			}
			diskCert, diskKey := certPEM, keyPEM
			if tt.diskChanged {
				diskCert, diskKey = customPair(t)
			}
			for name, b := range map[string][]byte{certFile: diskCert, keyFile: diskKey} {
				if err := os.WriteFile(filepath.Join(tdir, name), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			s := &Server{cfg: Config{DataDir: dir, Clock: func() time.Time { return clock }}, log: slog.New(slog.DiscardHandler)}
			s.certs.cur.Store(&cert)
			got, err := s.renewSelfSigned()
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("renewed: got %v, want %v", got, tt.want)
			}
			served := leafOf(*s.certs.cur.Load())
			onDisk, err := tls.LoadX509KeyPair(filepath.Join(tdir, certFile), filepath.Join(tdir, keyFile))
			if err != nil {
				t.Fatalf("the pair on disk does not load: %v", err)
			}
			if !tt.want {
				if !served.Equal(leafOf(cert)) || !slices.Equal(onDisk.Certificate[0], leafOf(mustPair(t, diskCert, diskKey)).Raw) {
					t.Error("a certificate that was not due was changed")
				}
				return
			}
			if served.Equal(leafOf(cert)) || !served.Equal(leafOf(onDisk)) {
				t.Error("the served certificate is not the renewed one on disk")
			}
			if !generatedCert(served) || served.NotAfter.Sub(served.NotBefore) > 398*day || !served.NotAfter.After(clock.Add(360*day)) {
				t.Errorf("renewed certificate %v to %v, want a generated one of at most 398 days from now", served.NotBefore, served.NotAfter)
			}
			if publicKeysEqual(served.PublicKey, leafOf(cert).PublicKey) {
				t.Error("the renewed certificate kept the old key")
			}
			ents, _ := os.ReadDir(tdir)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			if diff := cmp.Diff([]string{certFile, keyFile}, names); diff != "" {
				t.Errorf("files in tls/ (-want +got):\n%s", diff)
			}
			if again, _ := s.renewSelfSigned(); again {
				t.Error("renewed again right after a renewal")
			}
		})
	}
}

func mustPair(t *testing.T, c, k []byte) tls.Certificate {
	t.Helper()
	p, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
