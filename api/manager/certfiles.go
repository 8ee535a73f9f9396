package manager

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cxlpool/api/redfish"
)

// The served certificate: its files in DataDir/tls, loading and
// checking them, installing a replacement, and renewing the box's own.

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
