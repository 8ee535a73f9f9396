package api_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/api/apitest"
)

const (
	certServiceURI  = "/redfish/v1/CertificateService"
	httpsCertsURI   = "/redfish/v1/Managers/FM/NetworkProtocol/HTTPS/Certificates"
	httpsCertURI    = httpsCertsURI + "/1"
	replaceCertURI  = certServiceURI + "/Actions/CertificateService.ReplaceCertificate"
	generateCSRURI  = certServiceURI + "/Actions/CertificateService.GenerateCSR"
	certLocationURI = certServiceURI + "/CertificateLocations"
)

// testCA signs certificates for the tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T, now time.Time) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Test Site CA", Organization: []string{"Example"}},
		NotBefore: now.Add(-24 * time.Hour), NotAfter: now.AddDate(5, 0, 0), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: c, key: key}
}

// issue signs a server certificate for pub, valid from notBefore to
// notAfter, and returns it in PEM.
func (ca *testCA) issue(t *testing.T, pub crypto.PublicKey, cn string, serial int64, notBefore, notAfter time.Time) []byte {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn, Organization: []string{"Example"}},
		NotBefore: notBefore, NotAfter: notAfter, DNSNames: []string{cn},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func (ca *testCA) pem() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})
}

// servedSerial dials addr and returns the serial number of the
// certificate a new TLS connection gets.
func servedSerial(t *testing.T, addr string) string {
	t.Helper()
	var conn *tls.Conn
	var err error
	for range 200 { // until the listener is up
		if conn, err = tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("TLS dial %s: %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// serveTLS serves env's API over TLS until the returned stop is called.
func serveTLS(t *testing.T, env *apitest.Env) (addr string, stop func()) {
	t.Helper()
	addr = freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- env.Server.Serve(ctx, addr, false) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
	t.Cleanup(stop)
	return addr, stop
}

func generateCSR(t *testing.T, c *apitest.Client, body map[string]any) *x509.CertificateRequest {
	t.Helper()
	r := c.Post(generateCSRURI, body)
	if r.Status != http.StatusOK {
		t.Fatalf("GenerateCSR: got %s, want 200", r)
	}
	res := r.JSON(t)
	if got := get(res, "CertificateCollection", "@odata.id"); got != httpsCertsURI {
		t.Errorf("GenerateCSR CertificateCollection: got %v, want %s", got, httpsCertsURI)
	}
	if len(res) != 2 {
		t.Errorf("GenerateCSR response: got properties %v, want CSRString and CertificateCollection only", res)
	}
	s, _ := res["CSRString"].(string)
	blk, _ := pem.Decode([]byte(s))
	if blk == nil || blk.Type != "CERTIFICATE REQUEST" {
		t.Fatalf("CSRString is not a PEM CERTIFICATE REQUEST: %q", s)
	}
	csr, err := x509.ParseCertificateRequest(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := csr.CheckSignature(); err != nil {
		t.Errorf("CSR signature: %v", err)
	}
	return csr
}

func replaceBody(certPEM []byte) map[string]any {
	return map[string]any{"CertificateString": string(certPEM), "CertificateType": "PEM",
		"CertificateUri": map[string]any{"@odata.id": httpsCertURI}}
}

// TestCertificateResources: the service, its locations, the HTTPS
// collection and certificate validate, ServiceRoot links the service, and
// the certificate shown is the one in tls/cert.pem.
func TestCertificateResources(t *testing.T) {
	env := apitest.NewServer(t)
	if got := get(env.Admin.GetOK("/redfish/v1"), "CertificateService", "@odata.id"); got != certServiceURI {
		t.Errorf("ServiceRoot CertificateService: got %v, want %s", got, certServiceURI)
	}
	svc := env.Admin.GetOK(certServiceURI)
	for _, a := range []string{"#CertificateService.ReplaceCertificate", "#CertificateService.GenerateCSR"} {
		if get(svc, "Actions", a, "target") == nil {
			t.Errorf("CertificateService: no %s target", a)
		}
	}
	if got := linkIDs(get(env.Admin.GetOK(certLocationURI), "Links", "Certificates")); !cmp.Equal(got, []string{httpsCertURI}) {
		t.Errorf("CertificateLocations: got %v, want [%s]", got, httpsCertURI)
	}
	if got := members(t, env.Admin, httpsCertsURI); !cmp.Equal(got, []string{httpsCertURI}) {
		t.Errorf("HTTPS certificates: got %v, want [%s]", got, httpsCertURI)
	}
	r := env.Admin.Get(httpsCertsURI + "?$expand=.")
	apitest.Validate(t, r.Body)
	cert := env.Admin.GetOK(httpsCertURI)
	disk, err := os.ReadFile(filepath.Join(env.Config.DataDir, "tls", "cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if cert["CertificateString"] != string(disk) {
		t.Errorf("CertificateString differs from tls/cert.pem")
	}
	blk, _ := pem.Decode(disk)
	leaf, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(leaf.Raw)
	if got, want := strings.ReplaceAll(cert["Fingerprint"].(string), ":", ""), strings.ToUpper(hex.EncodeToString(sum[:])); got != want {
		t.Errorf("Fingerprint: got %s, want %s", got, want)
	}
	if got := get(cert, "Subject", "Organization"); got != "cxlpool" {
		t.Errorf("Subject.Organization: got %v, want cxlpool", got)
	}
	if got := cert["KeyUsage"]; !cmp.Equal(got, []any{"DigitalSignature", "ServerAuthentication"}) {
		t.Errorf("KeyUsage: got %v", got)
	}
	for _, p := range []string{"ValidNotBefore", "ValidNotAfter", "SerialNumber", "SignatureAlgorithm"} {
		if s, _ := cert[p].(string); s == "" {
			t.Errorf("%s missing", p)
		}
	}
	if strings.Contains(string(r.Body)+cert["CertificateString"].(string), "PRIVATE KEY") {
		t.Error("a private key is shown")
	}
}

// TestCertificateRoles: appliance accounts read, only administrators
// change, host accounts see nothing.
func TestCertificateRoles(t *testing.T) {
	env := apitest.NewServer(t)
	type want struct{ anon, admin, operator, reader, host int }
	const (
		ok     = http.StatusOK
		bad    = http.StatusBadRequest
		unauth = http.StatusUnauthorized
		forbid = http.StatusForbidden
	)
	for _, tc := range []struct {
		method, path string
		body         any
		want         want
	}{
		{"GET", certServiceURI, nil, want{unauth, ok, ok, ok, forbid}},
		{"GET", certLocationURI, nil, want{unauth, ok, ok, ok, forbid}},
		{"GET", httpsCertsURI, nil, want{unauth, ok, ok, ok, forbid}},
		{"GET", httpsCertURI, nil, want{unauth, ok, ok, ok, forbid}},
		{"POST", replaceCertURI, map[string]any{}, want{unauth, bad, forbid, forbid, forbid}},
		{"POST", generateCSRURI, map[string]any{}, want{unauth, bad, forbid, forbid, forbid}},
		{"PATCH", httpsCertURI, map[string]any{}, want{unauth, http.StatusMethodNotAllowed, http.StatusMethodNotAllowed, http.StatusMethodNotAllowed, http.StatusMethodNotAllowed}},
	} {
		for _, cl := range []struct {
			name string
			c    *apitest.Client
			want int
		}{
			{"anonymous", env.Anon, tc.want.anon}, {"Administrator", env.Admin, tc.want.admin},
			{"Operator", env.Operator, tc.want.operator}, {"ReadOnly", env.ReadOnly, tc.want.reader},
			{"HostUser", env.Host0, tc.want.host},
		} {
			r := cl.c.Do(tc.method, tc.path, tc.body)
			wantStatus(t, tc.method+" "+tc.path+" as "+cl.name, r, cl.want, "")
			if r.Status == ok {
				apitest.Validate(t, r.Body)
			}
		}
	}
}

// TestReplaceCertificate: a CSR's key stays on the box until its
// certificate is installed; bad certificates are refused with the old one
// still served; a good one is served to new TLS connections at once, and
// after a restart of the listener (read back from disk).
func TestReplaceCertificate(t *testing.T) {
	env := apitest.NewServer(t)
	now := env.Clock.Now()
	ca := newTestCA(t, now)
	addr, stop := serveTLS(t, env)
	first := servedSerial(t, addr)
	tlsDir := filepath.Join(env.Config.DataDir, "tls")
	oldKey, err := os.ReadFile(filepath.Join(tlsDir, "key.pem"))
	if err != nil {
		t.Fatal(err)
	}

	csr := generateCSR(t, env.Admin, map[string]any{
		"CommonName": "box.example.com", "AlternativeNames": []string{"10.0.0.5", "pool.example.com"},
		"Organization": "Example", "OrganizationalUnit": "Racks", "City": "Berlin", "State": "BE", "Country": "DE",
		"KeyUsage":              []string{"DigitalSignature", "ServerAuthentication"},
		"CertificateCollection": map[string]any{"@odata.id": httpsCertsURI},
	})
	if csr.Subject.CommonName != "box.example.com" || !cmp.Equal(csr.Subject.Country, []string{"DE"}) {
		t.Errorf("CSR subject: got %v", csr.Subject)
	}
	if !cmp.Equal(csr.DNSNames, []string{"box.example.com", "pool.example.com"}) || len(csr.IPAddresses) != 1 || !csr.IPAddresses[0].Equal(net.ParseIP("10.0.0.5")) {
		t.Errorf("CSR alternative names: got %v %v", csr.DNSNames, csr.IPAddresses)
	}
	fi, err := os.Stat(filepath.Join(tlsDir, "csr-key.pem"))
	if err != nil {
		t.Fatalf("the CSR key is not kept: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("CSR key mode %v, want 0600", fi.Mode().Perm())
	}
	if got := servedSerial(t, addr); got != first {
		t.Error("a CSR changed the served certificate")
	}

	otherKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherKeyDER, _ := x509.MarshalPKCS8PrivateKey(otherKey)
	otherKeyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: otherKeyDER})
	good := ca.issue(t, csr.PublicKey, "box.example.com", 1001, now.Add(-time.Hour), now.AddDate(1, 0, 0))
	refusals := []struct {
		name string
		body map[string]any
		msg  string
	}{
		{"not PEM", replaceBody([]byte("hello")), "ActionParameterValueFormatError"},
		{"torn PEM", replaceBody(good[:len(good)/2]), "ActionParameterValueFormatError"},
		{"garbage in a certificate block", replaceBody(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("nope")})), "ActionParameterValueFormatError"},
		{"expired", replaceBody(ca.issue(t, csr.PublicKey, "box.example.com", 1002, now.AddDate(-2, 0, 0), now.Add(-time.Hour))), "ActionParameterValueError"},
		{"for another key", replaceBody(ca.issue(t, otherKey.Public(), "box.example.com", 1003, now.Add(-time.Hour), now.AddDate(1, 0, 0))), "ActionParameterValueError"},
		{"with a key that is not its own", replaceBody(append(slices.Clone(good), otherKeyPEM...)), "ActionParameterValueError"},
		{"chain out of order", replaceBody(append(ca.pem(), good...)), "ActionParameterValueError"},
		{"PKCS7", map[string]any{"CertificateString": string(good), "CertificateType": "PKCS7", "CertificateUri": map[string]any{"@odata.id": httpsCertURI}}, "ActionParameterValueNotInList"},
		{"another certificate URI", map[string]any{"CertificateString": string(good), "CertificateType": "PEM", "CertificateUri": map[string]any{"@odata.id": httpsCertsURI + "/2"}}, "ActionParameterValueError"},
		{"no certificate", map[string]any{"CertificateType": "PEM", "CertificateUri": map[string]any{"@odata.id": httpsCertURI}}, "ActionParameterMissing"},
		{"no URI", map[string]any{"CertificateString": string(good), "CertificateType": "PEM"}, "ActionParameterMissing"},
		{"a password", map[string]any{"CertificateString": string(good), "CertificateType": "PEM", "CertificateUri": httpsCertURI, "Password": "x"}, "ActionParameterNotSupported"},
	}
	before := env.Admin.GetOK(httpsCertURI)
	for _, tc := range refusals {
		r := env.Admin.Post(replaceCertURI, tc.body)
		wantStatus(t, "replace with a certificate "+tc.name, r, http.StatusBadRequest, tc.msg)
		apitest.Validate(t, r.Body)
		if got := servedSerial(t, addr); got != first {
			t.Fatalf("after refusing a certificate %s: served serial %s, want the old %s", tc.name, got, first)
		}
	}
	if after := env.Admin.GetOK(httpsCertURI); !cmp.Equal(before, after) {
		t.Errorf("the refusals changed the certificate resource: %s", cmp.Diff(before, after))
	}

	// The CA-signed certificate for the CSR's key, with its chain.
	r := env.Admin.Post(replaceCertURI, map[string]any{"CertificateString": string(good) + string(ca.pem()),
		"CertificateType": "PEMchain", "CertificateUri": httpsCertURI})
	if r.Status != http.StatusOK {
		t.Fatalf("replace with the CSR's certificate: got %s, want 200", r)
	}
	apitest.Validate(t, r.Body)
	res := r.JSON(t)
	if got := get(res, "Subject", "CommonName"); got != "box.example.com" {
		t.Errorf("new Subject.CommonName: got %v", got)
	}
	if got := get(res, "Issuer", "CommonName"); got != "Test Site CA" {
		t.Errorf("new Issuer.CommonName: got %v", got)
	}
	if res["CertificateType"] != "PEMchain" || r.Header.Get("Location") != httpsCertURI {
		t.Errorf("replace answer: CertificateType %v, Location %q", res["CertificateType"], r.Header.Get("Location"))
	}
	if got := servedSerial(t, addr); got != "1001" {
		t.Errorf("a new connection after the replacement: serial %s, want 1001", got)
	}
	if _, err := os.Stat(filepath.Join(tlsDir, "csr-key.pem")); !os.IsNotExist(err) {
		t.Errorf("the CSR key file is still there after its certificate was installed: %v", err)
	}
	if k, _ := os.ReadFile(filepath.Join(tlsDir, "key.pem")); bytes.Equal(k, oldKey) {
		t.Error("key.pem still holds the old key")
	}

	// A restart of the listener reads the pair back from disk.
	stop()
	addr, stop = serveTLS(t, env)
	if got := servedSerial(t, addr); got != "1001" {
		t.Errorf("after a restart: serial %s, want 1001", got)
	}

	// A certificate for the key in use replaces only the certificate.
	keyPEM, err := os.ReadFile(filepath.Join(tlsDir, "key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(keyPEM)
	key, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	same := ca.issue(t, key.(crypto.Signer).Public(), "renewed.example.com", 1004, now.Add(-time.Hour), now.AddDate(2, 0, 0))
	if r := env.Admin.Post(replaceCertURI, replaceBody(same)); r.Status != http.StatusOK {
		t.Fatalf("replace with a certificate for the key in use: got %s, want 200", r)
	}
	if got := servedSerial(t, addr); got != "1004" {
		t.Errorf("after renewing for the same key: serial %s, want 1004", got)
	}
	if k, _ := os.ReadFile(filepath.Join(tlsDir, "key.pem")); !bytes.Equal(k, keyPEM) {
		t.Error("key.pem changed for a certificate of the same key")
	}

	// A certificate given with its own key.
	withKey := append(ca.issue(t, otherKey.Public(), "own-key.example.com", 1005, now.Add(-time.Hour), now.AddDate(1, 0, 0)), otherKeyPEM...)
	r = env.Admin.Post(replaceCertURI, replaceBody(withKey))
	if r.Status != http.StatusOK {
		t.Fatalf("replace with certificate and key: got %s, want 200", r)
	}
	if strings.Contains(string(r.Body), "PRIVATE KEY") {
		t.Error("the answer shows the private key")
	}
	if got := servedSerial(t, addr); got != "1005" {
		t.Errorf("after installing a certificate with its key: serial %s, want 1005", got)
	}
	ents, _ := os.ReadDir(tlsDir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !cmp.Equal(names, []string{"cert.pem", "key.pem"}) {
		t.Errorf("files in tls/: got %v, want cert.pem and key.pem only", names)
	}
	stop()
	if got := env.Admin.GetOK(httpsCertURI)["SerialNumber"]; got != "03:ed" {
		t.Errorf("SerialNumber: got %v, want 03:ed (1005)", got)
	}
}

// TestGenerateCSRParameters: the parameters are checked one by one with
// the Base messages for action parameters.
func TestGenerateCSRParameters(t *testing.T) {
	env := apitest.NewServer(t)
	coll := map[string]any{"@odata.id": httpsCertsURI}
	for _, tc := range []struct {
		name string
		body map[string]any
		msg  string
	}{
		{"no common name", map[string]any{"CertificateCollection": coll}, "ActionParameterMissing"},
		{"no collection", map[string]any{"CommonName": "box"}, "ActionParameterMissing"},
		{"another collection", map[string]any{"CommonName": "box", "CertificateCollection": map[string]any{"@odata.id": "/redfish/v1/x"}}, "ActionParameterValueError"},
		{"empty common name", map[string]any{"CommonName": " ", "CertificateCollection": coll}, "ActionParameterValueFormatError"},
		{"bad country", map[string]any{"CommonName": "box", "Country": "Germany", "CertificateCollection": coll}, "ActionParameterValueFormatError"},
		{"bad alternative name", map[string]any{"CommonName": "box", "AlternativeNames": []string{"a b"}, "CertificateCollection": coll}, "ActionParameterValueFormatError"},
		{"unknown algorithm", map[string]any{"CommonName": "box", "KeyPairAlgorithm": "TPM_ALG_DSA", "CertificateCollection": coll}, "ActionParameterValueNotInList"},
		{"unknown curve", map[string]any{"CommonName": "box", "KeyCurveId": "TPM_ECC_BN_P256", "CertificateCollection": coll}, "ActionParameterValueNotInList"},
		{"RSA 1024", map[string]any{"CommonName": "box", "KeyPairAlgorithm": "TPM_ALG_RSA", "KeyBitLength": 1024, "CertificateCollection": coll}, "ActionParameterValueNotInList"},
		{"curve and length disagree", map[string]any{"CommonName": "box", "KeyCurveId": "TPM_ECC_NIST_P384", "KeyBitLength": 256, "CertificateCollection": coll}, "ActionParameterValueConflict"},
		{"unknown key usage", map[string]any{"CommonName": "box", "KeyUsage": []string{"Flying"}, "CertificateCollection": coll}, "ActionParameterValueNotInList"},
		{"unknown parameter", map[string]any{"CommonName": "box", "Bogus": 1, "CertificateCollection": coll}, "PropertyUnknown"},
	} {
		r := env.Admin.Post(generateCSRURI, tc.body)
		wantStatus(t, "GenerateCSR with "+tc.name, r, http.StatusBadRequest, tc.msg)
	}
	if _, err := os.Stat(filepath.Join(env.Config.DataDir, "tls", "csr-key.pem")); !os.IsNotExist(err) {
		t.Errorf("a refused CSR left a key: %v", err)
	}
	csr := generateCSR(t, env.Admin, map[string]any{"CommonName": "box.example.com", "KeyPairAlgorithm": "TPM_ALG_ECDSA",
		"KeyCurveId": "TPM_ECC_NIST_P384", "CertificateCollection": httpsCertsURI})
	if k, ok := csr.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P384() {
		t.Errorf("CSR key: got %T, want ECDSA P-384", csr.PublicKey)
	}
	csr = generateCSR(t, env.Admin, map[string]any{"CommonName": "box.example.com", "KeyPairAlgorithm": "TPM_ALG_RSA",
		"KeyBitLength": 2048, "CertificateCollection": coll})
	if csr.PublicKeyAlgorithm != x509.RSA {
		t.Errorf("CSR key algorithm: got %v, want RSA", csr.PublicKeyAlgorithm)
	}
}
