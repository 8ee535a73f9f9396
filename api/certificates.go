package api

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"cxlpool/api/redfish"
	"encoding/asn1"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
)

// The CertificateService (DMTF DSP8010 CertificateService, Certificate,
// CertificateLocations): the HTTPS certificate the box serves, a CSR whose
// key never leaves the box, and replacement of the certificate without a
// restart.
const (
	certificateServiceURI   = "/redfish/v1/CertificateService"
	certificateLocationsURI = certificateServiceURI + "/CertificateLocations"
	// httpsCertCollectionURI is the HTTPS certificate collection under the
	// Manager's NetworkProtocol (networkprotocol.go links it when this
	// route exists).
	httpsCertCollectionURI = managerURI + "/NetworkProtocol/HTTPS/Certificates"
	httpsCertMemberURI     = httpsCertCollectionURI + "/1"

	replaceCertAction = "CertificateService.ReplaceCertificate"
	generateCSRAction = "CertificateService.GenerateCSR"
)

// Key files beside cert.pem and key.pem in DataDir/tls.
const (
	// csrKeyFile is the private key of the last CSR, waiting for its
	// certificate. A new GenerateCSR replaces it.
	csrKeyFile = "csr-key.pem"
	// stagedKeyFile holds a key that came with a replacement certificate
	// while the replacement is written (see installCertificate).
	stagedKeyFile = "key.pem.next"
)

// certState is the certificate the TLS listener serves. Handshakes read it
// without a lock; loads, replacements and CSRs take mu.
type certState struct {
	mu  sync.Mutex
	cur atomic.Pointer[tls.Certificate]
}

// reloadCertificate loads the pair in DataDir/tls (generating it on first
// start) and serves it to new connections.
func (s *Server) reloadCertificate() (*tls.Certificate, error) {
	s.certs.mu.Lock()
	defer s.certs.mu.Unlock()
	cert, err := s.loadOrCreateCert()
	if err != nil {
		return nil, err
	}
	s.certs.cur.Store(&cert)
	return &cert, nil
}

// tlsCertificate is the certificate served (or, with plain HTTP, the one
// HTTPS would serve), loaded on first use.
func (s *Server) tlsCertificate() (*tls.Certificate, error) {
	if c := s.certs.cur.Load(); c != nil {
		return c, nil
	}
	return s.reloadCertificate()
}

// servingCertificate is tls.Config.GetCertificate: every handshake gets
// the certificate current at that moment, so a replacement applies to new
// connections at once.
func (s *Server) servingCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c := s.certs.cur.Load()
	if c == nil {
		return nil, errors.New("api: tls: no certificate loaded")
	}
	return c, nil
}

func (s *Server) tlsPath(name string) string { return filepath.Join(s.cfg.DataDir, tlsDir, name) }

// finishReplacement completes a replacement a crash interrupted: cert.pem
// is new but key.pem still the old key. The new key is then still in the
// staged or the CSR key file; install it and forget the file.
func (s *Server) finishReplacement(cp, kp string) (tls.Certificate, bool) {
	certPEM, err := os.ReadFile(cp)
	if err != nil {
		return tls.Certificate{}, false
	}
	for _, name := range []string{stagedKeyFile, csrKeyFile} {
		path := filepath.Join(filepath.Dir(cp), name)
		keyPEM, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			continue
		}
		if err := writeFileAtomic(kp, keyPEM, 0o600); err != nil {
			s.log.Error("completing an interrupted certificate replacement", "err", err)
			return tls.Certificate{}, false
		}
		if err := removeSynced(path); err != nil {
			s.log.Warn("removing the installed key's old copy", "path", path, "err", err)
		}
		s.log.Warn("completed an interrupted TLS certificate replacement", "path", cp)
		return cert, true
	}
	return tls.Certificate{}, false
}

// tidyKeys removes what a replacement that did not reach cert.pem left
// behind (a staged key), and a CSR key that is already installed.
func (s *Server) tidyKeys(dir string, cert tls.Certificate) {
	staged := filepath.Join(dir, stagedKeyFile)
	if _, err := os.Stat(staged); err == nil {
		if err := removeSynced(staged); err != nil {
			s.log.Warn("removing a staged key", "path", staged, "err", err)
		}
	}
	csr := filepath.Join(dir, csrKeyFile)
	if b, err := os.ReadFile(csr); err == nil {
		if k, err := parseKeyPEM(b); err == nil && publicKeysEqual(k.Public(), leafOf(cert).PublicKey) {
			if err := removeSynced(csr); err != nil {
				s.log.Warn("removing an installed CSR key", "path", csr, "err", err)
			}
		}
	}
}

// removeSynced removes path and syncs its directory so that the removal
// survives a power cut.
func removeSynced(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func leafOf(c tls.Certificate) *x509.Certificate {
	if c.Leaf != nil {
		return c.Leaf
	}
	if len(c.Certificate) == 0 {
		return &x509.Certificate{}
	}
	l, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return &x509.Certificate{}
	}
	return l
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	k, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && b != nil && k.Equal(b)
}

// parseKeyPEM reads the first private key block of b.
func parseKeyPEM(b []byte) (crypto.Signer, error) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, errors.New("no private key")
		}
		if k, ok, err := parseKeyBlock(blk); ok {
			return k, err
		}
	}
}

// parseKeyBlock parses blk if it is a private key block (ok).
func parseKeyBlock(blk *pem.Block) (k crypto.Signer, ok bool, err error) {
	var key any
	switch blk.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(blk.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(blk.Bytes)
	case "ENCRYPTED PRIVATE KEY":
		return nil, true, errors.New("the private key is encrypted; give it unencrypted")
	default:
		return nil, false, nil
	}
	if err != nil {
		return nil, true, err
	}
	signer, isSigner := key.(crypto.Signer)
	if !isSigner {
		return nil, true, fmt.Errorf("unsupported private key type %T", key)
	}
	return signer, true, nil
}

func marshalKeyPEM(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// certRefusal is why a replacement certificate is refused: format says
// the string does not parse (ActionParameterValueFormatError), otherwise
// it parses but cannot serve (ActionParameterValueError).
type certRefusal struct {
	format bool
	why    string
}

func (r *certRefusal) Error() string { return r.why }

func (r *certRefusal) apiError(value string) *redfish.Error {
	key := "Base.ActionParameterValueError"
	args := []any{"CertificateString", replaceCertAction}
	if r.format {
		key = "Base.ActionParameterValueFormatError"
		args = []any{value, "CertificateString", replaceCertAction}
	}
	m := redfish.M(key, args...).WithRelated("CertificateString")
	m.Resolution = "The certificate was not installed (the previous one is still served): " + r.why +
		". Correct the certificate and resubmit the request."
	return redfish.NewError(http.StatusBadRequest, m)
}

// parsedCert is a replacement certificate: the chain (leaf first) and the
// private key if the PEM carried one.
type parsedCert struct {
	chain []*x509.Certificate
	key   crypto.Signer
}

// parseCertPEM reads a PEM string of CERTIFICATE blocks, leaf first, and
// at most one private key.
func parseCertPEM(data []byte) (parsedCert, *certRefusal) {
	var pc parsedCert
	rest := data
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return pc, &certRefusal{format: true, why: "certificate " + strconv.Itoa(len(pc.chain)+1) + " does not parse: " + err.Error()}
			}
			pc.chain = append(pc.chain, c)
			continue
		}
		k, ok, err := parseKeyBlock(blk)
		if !ok {
			return pc, &certRefusal{format: true, why: "unexpected PEM block " + strconv.Quote(blk.Type)}
		}
		if err != nil {
			return pc, &certRefusal{format: true, why: "the private key does not parse: " + err.Error()}
		}
		if pc.key != nil {
			return pc, &certRefusal{format: true, why: "more than one private key"}
		}
		pc.key = k
	}
	if len(strings.TrimSpace(string(rest))) > 0 && len(pc.chain) > 0 {
		return pc, &certRefusal{format: true, why: "text after the last PEM block"}
	}
	if len(pc.chain) == 0 {
		return pc, &certRefusal{format: true, why: "no PEM CERTIFICATE block"}
	}
	return pc, nil
}

// checkServable refuses a certificate that could not serve HTTPS now.
func checkServable(pc parsedCert, now time.Time) *certRefusal {
	leaf := pc.chain[0]
	if now.After(leaf.NotAfter) {
		return &certRefusal{why: "the certificate expired on " + leaf.NotAfter.UTC().Format(redfish.TimeFormat)}
	}
	if len(leaf.ExtKeyUsage) > 0 && !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) &&
		!slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageAny) {
		return &certRefusal{why: "the certificate's extended key usage does not allow TLS server authentication"}
	}
	for i := 1; i < len(pc.chain); i++ {
		if err := pc.chain[i-1].CheckSignatureFrom(pc.chain[i]); err != nil {
			return &certRefusal{why: "certificate " + strconv.Itoa(i) + " of the chain is not signed by certificate " + strconv.Itoa(i+1)}
		}
	}
	if pc.key != nil && !publicKeysEqual(pc.key.Public(), leaf.PublicKey) {
		return &certRefusal{why: "the private key given does not belong to the certificate"}
	}
	return nil
}

// installCertificate replaces the served certificate with data (PEM):
// the leaf must belong to the key given with it, the pending CSR's key or
// the key in use. The files change so that a power cut at any point
// leaves a pair that loads: a new key is first staged (or already is, as
// the CSR key), then cert.pem is replaced, then key.pem; a cut between the
// two renames leaves the new cert.pem beside the old key.pem, which the
// next start completes from the staged key (finishReplacement). New TLS
// connections get the new certificate as soon as it returns.
func (s *Server) installCertificate(data []byte) (*tls.Certificate, error) {
	pc, ref := parseCertPEM(data)
	if ref != nil {
		return nil, ref
	}
	if ref := checkServable(pc, s.now()); ref != nil {
		return nil, ref
	}
	s.certs.mu.Lock()
	defer s.certs.mu.Unlock()
	leafKey := pc.chain[0].PublicKey
	var chainPEM []byte
	for _, c := range pc.chain {
		chainPEM = append(chainPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	cp, kp := s.tlsPath(certFile), s.tlsPath(keyFile)
	if err := os.MkdirAll(filepath.Dir(cp), 0o700); err != nil {
		return nil, err
	}
	var newKey crypto.Signer
	keyFrom := "" // the file holding the new key until key.pem does
	switch {
	case pc.key != nil:
		newKey, keyFrom = pc.key, s.tlsPath(stagedKeyFile)
	default:
		if b, err := os.ReadFile(s.tlsPath(csrKeyFile)); err == nil {
			if k, err := parseKeyPEM(b); err == nil && publicKeysEqual(k.Public(), leafKey) {
				newKey, keyFrom = k, s.tlsPath(csrKeyFile)
			}
		}
	}
	if newKey == nil {
		cur := s.certs.cur.Load()
		if cur == nil {
			if c, err := s.loadOrCreateCert(); err == nil {
				cur = &c
			}
		}
		var curKey crypto.PublicKey
		if cur != nil {
			if k, ok := cur.PrivateKey.(crypto.Signer); ok {
				curKey = k.Public()
			}
		}
		if !publicKeysEqual(curKey, leafKey) {
			return nil, &certRefusal{why: "the certificate is not for the box's key nor for the key of the last " +
				"certificate signing request (GenerateCSR); have the CSR signed, or give the certificate's private key with it"}
		}
		// The same key: only the certificate changes.
		keyPEM, err := os.ReadFile(kp)
		if err != nil {
			return nil, err
		}
		cert, err := tls.X509KeyPair(chainPEM, keyPEM)
		if err != nil {
			return nil, err
		}
		if err := writeFileAtomic(cp, chainPEM, 0o644); err != nil {
			return nil, err
		}
		s.certs.cur.Store(&cert)
		return &cert, nil
	}
	keyPEM, err := marshalKeyPEM(newKey)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(chainPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	if err := s.writePair(chainPEM, keyPEM, keyFrom, keyFrom == s.tlsPath(stagedKeyFile)); err != nil {
		return nil, err
	}
	s.certs.cur.Store(&cert)
	return &cert, nil
}

// writePair replaces cert.pem and key.pem with a new pair so that a power
// cut at any point leaves a pair that loads: the new key is first in
// keyFrom (written here if stage, else already there: the CSR key), then
// cert.pem is replaced, then key.pem, and keyFrom goes. A cut between the
// two renames leaves the new cert.pem beside the old key.pem, which the
// next start completes from keyFrom (finishReplacement); an error then
// leaves the old pair served from memory.
func (s *Server) writePair(certPEM, keyPEM []byte, keyFrom string, stage bool) error {
	if stage {
		if err := writeFileAtomic(keyFrom, keyPEM, 0o600); err != nil {
			return err
		}
	}
	if err := writeFileAtomic(s.tlsPath(certFile), certPEM, 0o644); err != nil {
		return err
	}
	if err := writeFileAtomic(s.tlsPath(keyFile), keyPEM, 0o600); err != nil {
		return err
	}
	if err := removeSynced(keyFrom); err != nil {
		s.log.Warn("removing the installed key's old copy", "path", keyFrom, "err", err)
	}
	return nil
}

// csrParams is what GenerateCSR turned into a key and a request.
type csrParams struct {
	subject  pkix.Name
	dns      []string
	ips      []net.IP
	keyUsage x509.KeyUsage
	extUsage []asn1.ObjectIdentifier
	newKey   func() (crypto.Signer, error)
}

// generateCSR makes a new key, keeps it (crash-safe, 0600) as the pending
// CSR key and returns the request in PEM. The served certificate does not
// change until a certificate for the key is installed.
func (s *Server) generateCSR(p csrParams) ([]byte, error) {
	key, err := p.newKey()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.CertificateRequest{Subject: p.subject, DNSNames: p.dns, IPAddresses: p.ips}
	if p.keyUsage != 0 {
		v, err := marshalKeyUsage(p.keyUsage)
		if err != nil {
			return nil, err
		}
		tmpl.ExtraExtensions = append(tmpl.ExtraExtensions, pkix.Extension{Id: oidKeyUsage, Critical: true, Value: v})
	}
	if len(p.extUsage) > 0 {
		v, err := asn1.Marshal(p.extUsage)
		if err != nil {
			return nil, err
		}
		tmpl.ExtraExtensions = append(tmpl.ExtraExtensions, pkix.Extension{Id: oidExtKeyUsage, Value: v})
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		return nil, err
	}
	keyPEM, err := marshalKeyPEM(key)
	if err != nil {
		return nil, err
	}
	s.certs.mu.Lock()
	defer s.certs.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(s.tlsPath(csrKeyFile)), 0o700); err != nil {
		return nil, err
	}
	if err := writeFileAtomic(s.tlsPath(csrKeyFile), keyPEM, 0o600); err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

var (
	oidKeyUsage    = asn1.ObjectIdentifier{2, 5, 29, 15}
	oidExtKeyUsage = asn1.ObjectIdentifier{2, 5, 29, 37}
	oidEmail       = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 1}
)

// marshalKeyUsage encodes the KeyUsage extension's BIT STRING (bit 0,
// digitalSignature, is the first byte's most significant bit).
func marshalKeyUsage(ku x509.KeyUsage) ([]byte, error) {
	var b [2]byte
	n := 0
	for i := range 9 {
		if ku&(1<<i) != 0 {
			b[i/8] |= 0x80 >> (i % 8)
			n = i + 1
		}
	}
	return asn1.Marshal(asn1.BitString{Bytes: b[:(n+7)/8], BitLength: n})
}

// Key usages: the Redfish KeyUsage names and their X.509 bits or
// extended key usage OIDs.
var (
	keyUsageNames = []struct {
		name string
		bit  x509.KeyUsage
	}{
		{"DigitalSignature", x509.KeyUsageDigitalSignature},
		{"NonRepudiation", x509.KeyUsageContentCommitment},
		{"KeyEncipherment", x509.KeyUsageKeyEncipherment},
		{"DataEncipherment", x509.KeyUsageDataEncipherment},
		{"KeyAgreement", x509.KeyUsageKeyAgreement},
		{"KeyCertSign", x509.KeyUsageCertSign},
		{"CRLSigning", x509.KeyUsageCRLSign},
		{"EncipherOnly", x509.KeyUsageEncipherOnly},
		{"DecipherOnly", x509.KeyUsageDecipherOnly},
	}
	extUsageNames = []struct {
		name string
		eku  x509.ExtKeyUsage
		oid  asn1.ObjectIdentifier
	}{
		{"ServerAuthentication", x509.ExtKeyUsageServerAuth, asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 3, 1}},
		{"ClientAuthentication", x509.ExtKeyUsageClientAuth, asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 3, 2}},
		{"CodeSigning", x509.ExtKeyUsageCodeSigning, asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 3, 3}},
		{"EmailProtection", x509.ExtKeyUsageEmailProtection, asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 3, 4}},
		{"Timestamping", x509.ExtKeyUsageTimeStamping, asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 3, 8}},
		{"OCSPSigning", x509.ExtKeyUsageOCSPSigning, asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 3, 9}},
	}
)

func keyUsages(c *x509.Certificate) []string {
	out := []string{}
	for _, k := range keyUsageNames {
		if c.KeyUsage&k.bit != 0 {
			out = append(out, k.name)
		}
	}
	for _, e := range extUsageNames {
		if slices.Contains(c.ExtKeyUsage, e.eku) {
			out = append(out, e.name)
		}
	}
	return out
}

// signatureAlgorithms are RFC 5280/5758/8410 names for Go's algorithms.
var signatureAlgorithms = map[x509.SignatureAlgorithm]string{
	x509.SHA256WithRSA:    "sha256WithRSAEncryption",
	x509.SHA384WithRSA:    "sha384WithRSAEncryption",
	x509.SHA512WithRSA:    "sha512WithRSAEncryption",
	x509.SHA256WithRSAPSS: "id-RSASSA-PSS",
	x509.SHA384WithRSAPSS: "id-RSASSA-PSS",
	x509.SHA512WithRSAPSS: "id-RSASSA-PSS",
	x509.ECDSAWithSHA256:  "ecdsa-with-SHA256",
	x509.ECDSAWithSHA384:  "ecdsa-with-SHA384",
	x509.ECDSAWithSHA512:  "ecdsa-with-SHA512",
	x509.PureEd25519:      "id-Ed25519",
}

// colonHex writes bytes as "ab:cd:...", as certificate tools show serial
// numbers and fingerprints.
func colonHex(b []byte) string {
	parts := make([]string, len(b))
	for i, x := range b {
		parts[i] = hex.EncodeToString([]byte{x})
	}
	return strings.Join(parts, ":")
}

// identifier is a Certificate Identifier (Subject, Issuer).
func identifier(n pkix.Name) redfish.Obj {
	o := redfish.Obj{"DisplayString": n.String()}
	if n.CommonName != "" {
		o["CommonName"] = n.CommonName
	}
	set := func(prop string, v []string) {
		if len(v) > 0 && v[0] != "" {
			o[prop] = v[0]
		}
	}
	set("Organization", n.Organization)
	set("OrganizationalUnit", n.OrganizationalUnit)
	set("City", n.Locality)
	set("State", n.Province)
	set("Country", n.Country)
	if len(n.OrganizationalUnit) > 1 {
		o["AdditionalOrganizationalUnits"] = n.OrganizationalUnit[1:]
	}
	for _, a := range n.Names {
		if a.Type.Equal(oidEmail) {
			if e, ok := a.Value.(string); ok {
				o["Email"] = e
			}
		}
	}
	return o
}

// certificateResource is the Certificate resource of the HTTPS certificate.
func (s *Server) certificateResource(cert *tls.Certificate) redfish.Obj {
	leaf := leafOf(*cert)
	var chainPEM strings.Builder
	for _, der := range cert.Certificate {
		chainPEM.Write(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	}
	typ := "PEM"
	if len(cert.Certificate) > 1 {
		typ = "PEMchain"
	}
	subject := identifier(leaf.Subject)
	var alt []string
	alt = append(alt, leaf.DNSNames...)
	for _, ip := range leaf.IPAddresses {
		alt = append(alt, ip.String())
	}
	if len(alt) > 0 {
		subject["AlternativeNames"] = alt
	}
	sum := sha256.Sum256(leaf.Raw)
	sigAlg, ok := signatureAlgorithms[leaf.SignatureAlgorithm]
	if !ok {
		sigAlg = leaf.SignatureAlgorithm.String()
	}
	now := s.now()
	health := "OK"
	switch {
	case now.After(leaf.NotAfter) || now.Before(leaf.NotBefore):
		health = "Critical"
	case now.Add(30 * 24 * time.Hour).After(leaf.NotAfter):
		health = "Warning"
	}
	return redfish.Obj{
		"@odata.id":                httpsCertMemberURI,
		"@odata.type":              "#Certificate.v1_11_0.Certificate",
		"Id":                       "1",
		"Name":                     "HTTPS certificate",
		"Description":              "The certificate the box's HTTPS service (the Redfish API and the web console) presents",
		"CertificateString":        chainPEM.String(),
		"CertificateType":          typ,
		"CertificateUsageTypes":    []string{"Web"},
		"Subject":                  subject,
		"Issuer":                   identifier(leaf.Issuer),
		"ValidNotBefore":           leaf.NotBefore.UTC().Format(redfish.TimeFormat),
		"ValidNotAfter":            leaf.NotAfter.UTC().Format(redfish.TimeFormat),
		"KeyUsage":                 keyUsages(leaf),
		"SerialNumber":             colonHex(leaf.SerialNumber.Bytes()),
		"Fingerprint":              strings.ToUpper(colonHex(sum[:])),
		"FingerprintHashAlgorithm": "TPM_ALG_SHA256",
		"SignatureAlgorithm":       sigAlg,
		"Status":                   redfish.Obj{"State": "Enabled", "Health": health},
	}
}

func (s *Server) certificateService() redfish.Obj {
	return redfish.Obj{
		"@odata.id":            certificateServiceURI,
		"@odata.type":          "#CertificateService.v1_2_1.CertificateService",
		"Id":                   "CertificateService",
		"Name":                 "Certificate Service",
		"Description":          "Replaces the HTTPS certificate and makes certificate signing requests whose key stays on the box",
		"CertificateLocations": redfish.Link(certificateLocationsURI),
		"Actions": redfish.Obj{
			"#" + replaceCertAction: redfish.Obj{
				"target": certificateServiceURI + "/Actions/" + replaceCertAction,
				"CertificateType@Redfish.AllowableValues": []string{"PEM", "PEMchain"},
			},
			"#" + generateCSRAction: redfish.Obj{
				"target":              certificateServiceURI + "/Actions/" + generateCSRAction,
				"@Redfish.ActionInfo": generateCSRActionInfoURI,
				"KeyPairAlgorithm@Redfish.AllowableValues": []string{"TPM_ALG_ECDSA", "TPM_ALG_RSA"},
				"KeyCurveId@Redfish.AllowableValues":       []string{"TPM_ECC_NIST_P256", "TPM_ECC_NIST_P384"},
			},
		},
	}
}

// generateCSRActionInfoURI describes GenerateCSR's parameters (the OCP
// baseline profile asks for it).
const generateCSRActionInfoURI = certificateServiceURI + "/GenerateCSRActionInfo"

// generateCSRActionInfo lists the parameters csrParamsFrom accepts, with
// the values it allows.
func generateCSRActionInfo() redfish.Obj {
	str := func(name string, required bool) redfish.Obj {
		return redfish.Obj{"Name": name, "Required": required, "DataType": "String"}
	}
	var usages []string
	for _, k := range keyUsageNames {
		usages = append(usages, k.name)
	}
	for _, e := range extUsageNames {
		usages = append(usages, e.name)
	}
	alg := str("KeyPairAlgorithm", false)
	alg["AllowableValues"] = []string{"TPM_ALG_ECDSA", "TPM_ALG_ECC", "TPM_ALG_RSA"}
	curve := str("KeyCurveId", false)
	curve["AllowableValues"] = []string{"TPM_ECC_NIST_P256", "TPM_ECC_NIST_P384"}
	return redfish.Obj{
		"@odata.id":   generateCSRActionInfoURI,
		"@odata.type": "#ActionInfo.v1_5_0.ActionInfo",
		"Id":          "GenerateCSRActionInfo",
		"Name":        "GenerateCSR Action Info",
		"Parameters": []redfish.Obj{
			str("CommonName", true),
			{"Name": "CertificateCollection", "Required": true, "DataType": "Object",
				"ObjectDataType":  "#CertificateCollection.CertificateCollection",
				"AllowableValues": []string{httpsCertCollectionURI}},
			{"Name": "AlternativeNames", "Required": false, "DataType": "StringArray"},
			str("Organization", false),
			str("OrganizationalUnit", false),
			str("City", false),
			str("State", false),
			str("Country", false),
			str("Email", false),
			alg,
			{"Name": "KeyBitLength", "Required": false, "DataType": "Number",
				"AllowableNumbers": []string{"256", "384", "2048", "3072", "4096"}},
			curve,
			{"Name": "KeyUsage", "Required": false, "DataType": "StringArray", "AllowableValues": usages},
		},
	}
}

// replaceRequest is ReplaceCertificate's body. CertificateUri is a link
// ({"@odata.id": ...}); the plain string older clients send is accepted.
type replaceRequest struct {
	CertificateString *string `json:"CertificateString"`
	CertificateType   *string `json:"CertificateType"`
	CertificateURI    any     `json:"CertificateUri"`
	Password          *string `json:"Password"`
}

// generateCSRRequest is GenerateCSR's body.
type generateCSRRequest struct {
	CommonName            *string  `json:"CommonName"`
	AlternativeNames      []string `json:"AlternativeNames"`
	Organization          *string  `json:"Organization"`
	OrganizationalUnit    *string  `json:"OrganizationalUnit"`
	City                  *string  `json:"City"`
	State                 *string  `json:"State"`
	Country               *string  `json:"Country"`
	Email                 *string  `json:"Email"`
	KeyPairAlgorithm      *string  `json:"KeyPairAlgorithm"`
	KeyBitLength          *int     `json:"KeyBitLength"`
	KeyCurveID            *string  `json:"KeyCurveId"`
	KeyUsage              []string `json:"KeyUsage"`
	CertificateCollection any      `json:"CertificateCollection"`
}

// linkParam reads an action parameter that names a resource: a link
// object or, from older clients, the URI itself.
func linkParam(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return strings.TrimSuffix(x, "/"), true
	case map[string]any:
		id, ok := x["@odata.id"].(string)
		return strings.TrimSuffix(id, "/"), ok
	}
	return "", false
}

func actionErr(key string, args ...any) *redfish.Error {
	return redfish.NewError(http.StatusBadRequest, redfish.M(key, args...))
}

var (
	hostnamePattern = regexp.MustCompile(`^(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$`)
	countryPattern  = regexp.MustCompile(`^[A-Z]{2}$`)
)

// csrParamsFrom checks GenerateCSR's parameters.
func csrParamsFrom(req generateCSRRequest) (csrParams, *redfish.Error) {
	var p csrParams
	const act = generateCSRAction
	if req.CommonName == nil {
		return p, actionErr("Base.ActionParameterMissing", act, "CommonName")
	}
	if req.CertificateCollection == nil {
		return p, actionErr("Base.ActionParameterMissing", act, "CertificateCollection")
	}
	if uri, ok := linkParam(req.CertificateCollection); !ok || uri != httpsCertCollectionURI {
		return p, actionErr("Base.ActionParameterValueError", "CertificateCollection", act)
	}
	cn := strings.TrimSpace(*req.CommonName)
	if cn == "" || len(cn) > 64 {
		return p, actionErr("Base.ActionParameterValueFormatError", *req.CommonName, "CommonName", act)
	}
	p.subject.CommonName = cn
	str := func(v *string, prop string, max int, dst *[]string) *redfish.Error {
		if v == nil || *v == "" {
			return nil
		}
		if len(*v) > max {
			return actionErr("Base.ActionParameterValueFormatError", *v, prop, act)
		}
		*dst = []string{*v}
		return nil
	}
	for _, f := range []struct {
		v    *string
		prop string
		max  int
		dst  *[]string
	}{
		{req.Organization, "Organization", 64, &p.subject.Organization},
		{req.OrganizationalUnit, "OrganizationalUnit", 64, &p.subject.OrganizationalUnit},
		{req.City, "City", 128, &p.subject.Locality},
		{req.State, "State", 128, &p.subject.Province},
	} {
		if err := str(f.v, f.prop, f.max, f.dst); err != nil {
			return p, err
		}
	}
	if req.Country != nil && *req.Country != "" {
		if !countryPattern.MatchString(*req.Country) {
			return p, actionErr("Base.ActionParameterValueFormatError", *req.Country, "Country", act)
		}
		p.subject.Country = []string{*req.Country}
	}
	if req.Email != nil && *req.Email != "" {
		if !strings.Contains(*req.Email, "@") || len(*req.Email) > 128 {
			return p, actionErr("Base.ActionParameterValueFormatError", *req.Email, "Email", act)
		}
		p.subject.ExtraNames = []pkix.AttributeTypeAndValue{{Type: oidEmail, Value: *req.Email}}
	}
	// The common name goes into the alternative names too: browsers
	// look only there.
	names := append([]string{cn}, req.AlternativeNames...)
	for i, n := range names {
		switch ip := net.ParseIP(n); {
		case ip != nil:
			if !slices.ContainsFunc(p.ips, ip.Equal) {
				p.ips = append(p.ips, ip)
			}
		case hostnamePattern.MatchString(n) && len(n) <= 253:
			if !slices.Contains(p.dns, n) {
				p.dns = append(p.dns, n)
			}
		case i > 0:
			return p, actionErr("Base.ActionParameterValueFormatError", n, "AlternativeNames", act)
		}
	}
	for _, u := range req.KeyUsage {
		found := false
		for _, k := range keyUsageNames {
			if k.name == u {
				p.keyUsage, found = p.keyUsage|k.bit, true
			}
		}
		for _, e := range extUsageNames {
			if e.name == u {
				found = true
				if !slices.ContainsFunc(p.extUsage, e.oid.Equal) {
					p.extUsage = append(p.extUsage, e.oid)
				}
			}
		}
		if !found {
			return p, actionErr("Base.ActionParameterValueNotInList", u, "KeyUsage", act)
		}
	}
	alg := "TPM_ALG_ECDSA"
	if req.KeyPairAlgorithm != nil {
		alg = *req.KeyPairAlgorithm
	}
	switch alg {
	case "TPM_ALG_ECDSA", "TPM_ALG_ECC":
		curves := map[string]elliptic.Curve{"TPM_ECC_NIST_P256": elliptic.P256(), "TPM_ECC_NIST_P384": elliptic.P384()}
		curveID := "TPM_ECC_NIST_P256"
		if req.KeyBitLength != nil && req.KeyCurveID == nil {
			curveID = "TPM_ECC_NIST_P" + strconv.Itoa(*req.KeyBitLength)
		}
		if req.KeyCurveID != nil {
			curveID = *req.KeyCurveID
		}
		curve, ok := curves[curveID]
		if !ok {
			if req.KeyCurveID == nil {
				return p, actionErr("Base.ActionParameterValueNotInList", strconv.Itoa(*req.KeyBitLength), "KeyBitLength", act)
			}
			return p, actionErr("Base.ActionParameterValueNotInList", curveID, "KeyCurveId", act)
		}
		if req.KeyBitLength != nil && *req.KeyBitLength != curve.Params().BitSize {
			return p, actionErr("Base.ActionParameterValueConflict", "KeyBitLength", strconv.Itoa(*req.KeyBitLength))
		}
		p.newKey = func() (crypto.Signer, error) { return ecdsa.GenerateKey(curve, rand.Reader) }
	case "TPM_ALG_RSA":
		if req.KeyCurveID != nil {
			return p, actionErr("Base.ActionParameterValueConflict", "KeyCurveId", *req.KeyCurveID)
		}
		bits := 2048
		if req.KeyBitLength != nil {
			bits = *req.KeyBitLength
		}
		if bits != 2048 && bits != 3072 && bits != 4096 {
			return p, actionErr("Base.ActionParameterValueNotInList", strconv.Itoa(bits), "KeyBitLength", act)
		}
		p.newKey = func() (crypto.Signer, error) { return rsa.GenerateKey(rand.Reader, bits) }
	default:
		return p, actionErr("Base.ActionParameterValueNotInList", alg, "KeyPairAlgorithm", act)
	}
	return p, nil
}

func (s *Server) certificateRoutes() {
	s.Handle(http.MethodGet, certificateServiceURI, redfish.PrivApplianceView, func(c echo.Context) error {
		return s.WriteResource(c, http.StatusOK, s.certificateService())
	})
	s.Handle(http.MethodGet, certificateLocationsURI, redfish.PrivApplianceView, func(c echo.Context) error {
		return s.WriteResource(c, http.StatusOK, redfish.Obj{
			"@odata.id":   certificateLocationsURI,
			"@odata.type": "#CertificateLocations.v1_0_4.CertificateLocations",
			"Id":          "CertificateLocations",
			"Name":        "Certificate Locations",
			"Description": "Every certificate installed on the box",
			"Links":       redfish.Obj{"Certificates": redfish.Links(httpsCertMemberURI), "Certificates@odata.count": 1},
		})
	})
	s.Handle(http.MethodGet, httpsCertCollectionURI, redfish.PrivApplianceView, func(c echo.Context) error {
		return s.WriteCollection(c, redfish.Collection{
			ODataID: httpsCertCollectionURI, ODataType: "#CertificateCollection.CertificateCollection",
			Name: "HTTPS Certificates", Members: []string{httpsCertMemberURI},
			Expand: func(string) (any, error) {
				cert, err := s.tlsCertificate()
				if err != nil {
					return nil, redfish.ErrInternal(err)
				}
				return s.certificateResource(cert), nil
			},
		})
	})
	s.Handle(http.MethodGet, httpsCertMemberURI, redfish.PrivApplianceView, func(c echo.Context) error {
		cert, err := s.tlsCertificate()
		if err != nil {
			return redfish.ErrInternal(err)
		}
		return s.WriteResource(c, http.StatusOK, s.certificateResource(cert))
	})
	s.Handle(http.MethodGet, generateCSRActionInfoURI, redfish.PrivApplianceView, func(c echo.Context) error {
		return s.WriteResource(c, http.StatusOK, generateCSRActionInfo())
	})
	s.Handle(http.MethodPost, certificateServiceURI+"/Actions/"+replaceCertAction, redfish.PrivConfigureManager, s.replaceCertificate)
	s.Handle(http.MethodPost, certificateServiceURI+"/Actions/"+generateCSRAction, redfish.PrivConfigureManager, func(c echo.Context) error {
		var req generateCSRRequest
		if err := s.Decode(c, &req); err != nil {
			return err
		}
		p, aerr := csrParamsFrom(req)
		if aerr != nil {
			return aerr
		}
		csr, err := s.generateCSR(p)
		if err != nil {
			return redfish.ErrInternal(err)
		}
		s.log.Info("generated a certificate signing request; its key waits for the certificate", "subject", p.subject.String())
		return s.WriteResource(c, http.StatusOK, redfish.Obj{
			"CSRString":             string(csr),
			"CertificateCollection": redfish.Link(httpsCertCollectionURI),
		})
	})
}

func (s *Server) replaceCertificate(c echo.Context) error {
	var req replaceRequest
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	const act = replaceCertAction
	switch {
	case req.CertificateString == nil:
		return actionErr("Base.ActionParameterMissing", act, "CertificateString")
	case req.CertificateType == nil:
		return actionErr("Base.ActionParameterMissing", act, "CertificateType")
	case req.CertificateURI == nil:
		return actionErr("Base.ActionParameterMissing", act, "CertificateUri")
	case req.Password != nil:
		return actionErr("Base.ActionParameterNotSupported", "Password", act)
	}
	if t := *req.CertificateType; t != "PEM" && t != "PEMchain" {
		return actionErr("Base.ActionParameterValueNotInList", t, "CertificateType", act)
	}
	uri, ok := linkParam(req.CertificateURI)
	if !ok {
		return actionErr("Base.ActionParameterValueTypeError", redfish.ValueText(req.CertificateURI), "CertificateUri", act)
	}
	if uri != httpsCertMemberURI {
		return actionErr("Base.ActionParameterValueError", "CertificateUri", act)
	}
	cert, err := s.installCertificate([]byte(*req.CertificateString))
	if err != nil {
		var ref *certRefusal
		if errors.As(err, &ref) {
			return ref.apiError(fmt.Sprintf("(%d characters)", len(*req.CertificateString)))
		}
		return redfish.ErrInternal(fmt.Errorf("api: tls: replacing the certificate: %w", err))
	}
	leaf := leafOf(*cert)
	s.log.Info("TLS certificate replaced; new connections get it", "subject", leaf.Subject.String(),
		"issuer", leaf.Issuer.String(), "not_after", leaf.NotAfter)
	s.Publish(redfish.Event{MessageKey: redfish.MsgResourceChanged, Origin: httpsCertMemberURI})
	c.Response().Header().Set("Location", httpsCertMemberURI)
	return s.WriteResource(c, http.StatusOK, s.certificateResource(cert))
}

// certRenewBefore is how long before its end the box renews its own
// self-signed certificate.
const certRenewBefore = 30 * 24 * time.Hour

// renewLoop checks the served certificate for renewal now and every
// Transport.CertCheckInterval until ctx ends.
func (s *Server) renewLoop(ctx context.Context) {
	tick := time.NewTicker(s.cfg.Transport.CertCheckInterval)
	defer tick.Stop()
	for {
		switch renewed, err := s.renewSelfSigned(); {
		case err != nil:
			s.log.Error("renewing the self-signed TLS certificate; the current one is served on", "err", err)
		case renewed:
			s.Publish(redfish.Event{MessageKey: redfish.MsgResourceChanged, Origin: httpsCertMemberURI})
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// renewSelfSigned replaces the box's own self-signed certificate with a
// new one (and a new key) when it ends within certRenewBefore, or was made
// to last longer than selfSignedValidity (older versions made ten-year
// ones); renewLoop publishes ResourceChanged for it. A certificate an operator
// installed is never touched: both the served one and the pair on disk
// must be the generated kind. New connections get the new one at once.
// The files change through writePair, so a power cut leaves a pair the
// next start loads.
func (s *Server) renewSelfSigned() (bool, error) {
	s.certs.mu.Lock()
	defer s.certs.mu.Unlock()
	cur := s.certs.cur.Load()
	if cur == nil {
		return false, nil
	}
	leaf := leafOf(*cur)
	now := s.now()
	due := now.Add(certRenewBefore).After(leaf.NotAfter) || leaf.NotAfter.Sub(leaf.NotBefore) > selfSignedValidity
	cp, kp := s.tlsPath(certFile), s.tlsPath(keyFile)
	if !due || !generatedCert(leaf) || !generatedPair(cp, kp) {
		return false, nil
	}
	certPEM, keyPEM, err := selfSigned(now)
	if err != nil {
		return false, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return false, err
	}
	if err := s.writePair(certPEM, keyPEM, s.tlsPath(stagedKeyFile), true); err != nil {
		return false, err
	}
	s.certs.cur.Store(&cert)
	nl := leafOf(cert)
	s.log.Info("renewed the self-signed TLS certificate; new connections get it", "old_not_after", leaf.NotAfter,
		"not_after", nl.NotAfter, "path", cp)
	return true, nil
}
