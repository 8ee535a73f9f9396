package manager

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
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
	httpsCertCollectionURI = pool.ManagerURI + "/NetworkProtocol/HTTPS/Certificates"
	httpsCertMemberURI     = httpsCertCollectionURI + "/1"

	replaceCertAction = "CertificateService.ReplaceCertificate"
	generateCSRAction = "CertificateService.GenerateCSR"
)

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
