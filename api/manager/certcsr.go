package manager

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"cxlpool/api/redfish"
)

// GenerateCSR: the request's parameters, its key and the CSR.

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
