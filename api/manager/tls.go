package manager

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"cxlpool/api/redfish"
)

// TLS files inside DataDir/tls. An operator may replace them with a
// certificate of their own; the service uses whatever pair is there.
const (
	tlsDir   = "tls"
	certFile = "cert.pem"
	keyFile  = "key.pem"
)

// Serve serves the API on addr until ctx ends, then shuts down gracefully
// (in-flight requests finish, event streams end). It serves TLS with the
// certificate in DataDir/tls, generating a self-signed ECDSA one on first
// start, unless plainHTTP is set (development and tests).
func (s *Server) Serve(ctx context.Context, addr string, plainHTTP bool) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("api: listen: %w", err)
	}
	return s.ServeListener(ctx, ln, plainHTTP)
}

// ServeListener is Serve on a listener it takes over (and closes). The
// connections it accepts are held to Config.Transport (redfish/limits.go).
func (s *Server) ServeListener(ctx context.Context, ln net.Listener, plainHTTP bool) error {
	tc := s.cfg.Transport
	// HTTP/1.1 only: one request in flight per connection, so the
	// connection caps bound the requests (and the memory) anonymous
	// clients can hold; HTTP/2 would multiply each by its streams.
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: tc.ReadHeaderTimeout,
		IdleTimeout:       tc.IdleTimeout,
		MaxHeaderBytes:    tc.MaxHeaderBytes,
		ConnContext:       redfish.ConnContext,
		Protocols:         protocols,
		// Handshake failures and refused connections are the clients'
		// business; the tracker logs floods.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	ln = s.GuardListener(ln)
	var renewed chan struct{}
	if !plainHTTP {
		if _, err := s.reloadCertificate(); err != nil {
			ln.Close()
			return err
		}
		srv.TLSConfig = s.tlsConfig()
		renewed = make(chan struct{})
		rctx, stop := context.WithCancel(ctx)
		defer func() { stop(); <-renewed }()
		go func() {
			defer close(renewed)
			s.renewLoop(rctx)
		}()
	}
	srv.RegisterOnShutdown(s.StopStreams)
	errc := make(chan error, 1)
	go func() {
		if plainHTTP {
			errc <- srv.Serve(ln)
		} else {
			errc <- srv.ServeTLS(ln, "", "")
		}
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("api: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	if err != nil {
		return fmt.Errorf("api: shutdown: %w", err)
	}
	return nil
}

// tlsConfig is the HTTPS listener's: TLS 1.3, or TLS 1.2 with forward
// secret AEAD suites only (ECDHE with AES-GCM or ChaCha20-Poly1305: no
// CBC, no SHA-1 MAC, no RSA key exchange), for ECDSA certificates (the
// generated one) and RSA ones (a CSR may ask for RSA). Each handshake
// reads the current certificate, so that ReplaceCertificate and renewal
// (certificates.go) need no restart.
func (s *Server) tlsConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		CipherSuites: []uint16{
			tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
			tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
		},
		// The hybrid post-quantum group first, then the classic ones
		// every client has; no P-521 (slow, and nobody needs it).
		CurvePreferences: []tls.CurveID{tls.X25519MLKEM768, tls.X25519, tls.CurveP256, tls.CurveP384},
		NextProtos:       []string{"http/1.1"},
		GetCertificate:   s.servingCertificate,
	}
}

// CertPath is where the TLS certificate is (or will be) kept.
func (s *Server) CertPath() string { return filepath.Join(s.cfg.DataDir, tlsDir, certFile) }

// loadOrCreateCert loads the pair in DataDir/tls, generating it when it is
// missing. A pair that does not load is regenerated (with a warning) only
// when it is the self-signed one this service made: a power cut during the
// first start of older versions left an empty cert.pem, and the box must
// not stay down for that. An operator's own certificate that does not load
// is an error the operator has to see.
func (s *Server) loadOrCreateCert() (tls.Certificate, error) {
	dir := filepath.Join(s.cfg.DataDir, tlsDir)
	cp, kp := filepath.Join(dir, certFile), filepath.Join(dir, keyFile)
	if _, err := os.Stat(cp); err == nil {
		cert, err := tls.LoadX509KeyPair(cp, kp)
		if err == nil {
			s.tidyKeys(dir, cert)
			return cert, nil
		}
		if cert, ok := s.finishReplacement(cp, kp); ok {
			return cert, nil
		}
		if !generatedPair(cp, kp) {
			return cert, fmt.Errorf("api: tls certificate in %s (not the generated one; fix the pair or remove both files to get a new self-signed one): %w", dir, err)
		}
		s.log.Warn("the generated TLS certificate does not load; generating a new one", "path", cp, "err", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return tls.Certificate{}, fmt.Errorf("api: tls: %w", err)
	}
	certPEM, keyPEM, err := selfSigned(s.now())
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("api: tls: %w", err)
	}
	// The key first: a cut between the two renames leaves a new key with
	// the old (or no) certificate, which the next start regenerates.
	if err := writeFileAtomic(kp, keyPEM, 0o600); err != nil {
		return tls.Certificate{}, fmt.Errorf("api: tls: %w", err)
	}
	if err := writeFileAtomic(cp, certPEM, 0o644); err != nil {
		return tls.Certificate{}, fmt.Errorf("api: tls: %w", err)
	}
	s.log.Info("generated a self-signed TLS certificate", "path", cp)
	return tls.X509KeyPair(certPEM, keyPEM)
}

// generatedOrg and generatedUnit mark the certificates selfSigned makes;
// older versions set only the organisation.
const (
	generatedOrg  = "cxlpool"
	generatedUnit = "self-signed by cxlpoold"
)

// generatedPair reports whether the pair at cp, kp is (what is left of)
// one selfSigned made: a certificate issued by itself to the cxlpool
// organisation, or an empty certificate file beside an empty, missing or
// EC key file — the state the old non-atomic writer left after a cut.
func generatedPair(cp, kp string) bool {
	certPEM, err := os.ReadFile(cp)
	if err != nil {
		return false
	}
	if len(bytes.TrimSpace(certPEM)) == 0 {
		keyPEM, err := os.ReadFile(kp)
		if errors.Is(err, fs.ErrNotExist) || (err == nil && len(bytes.TrimSpace(keyPEM)) == 0) {
			return true
		}
		b, _ := pem.Decode(keyPEM)
		return b != nil && b.Type == "EC PRIVATE KEY"
	}
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return false
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return false
	}
	return generatedCert(c)
}

// generatedCert reports whether c is one selfSigned made: issued by
// itself to the cxlpool organisation.
func generatedCert(c *x509.Certificate) bool {
	return bytes.Equal(c.RawIssuer, c.RawSubject) && slices.Equal(c.Subject.Organization, []string{generatedOrg}) &&
		c.CheckSignature(c.SignatureAlgorithm, c.RawTBSCertificate, c.Signature) == nil
}

// writeFileAtomic replaces path with data so that a power cut leaves
// either the old file or the new one, never a torn one: a synced temporary
// file in the same directory, renamed over path, then the directory
// synced so the rename itself is durable.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	return writeFileAtomicFunc(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// writeFileAtomicFunc is writeFileAtomic for contents that write
// themselves (a support bundle streamed through gzip).
func writeFileAtomicFunc(path string, perm os.FileMode, write func(io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if err = write(f); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// selfSignedValidity is how long a generated certificate is valid: under
// the 398 days browsers accept (CA/Browser Forum), renewed by the box
// (certificates.go) 30 days before it ends.
const selfSignedValidity = 397 * 24 * time.Hour

// selfSigned makes a P-256 certificate for localhost and the host name,
// valid for selfSignedValidity.
func selfSigned(now time.Time) (certPEM, keyPEM []byte, err error) {
	return selfSignedTerm(now.Add(-time.Hour), now.Add(-time.Hour).Add(selfSignedValidity))
}

// selfSignedTerm is selfSigned for the given term (tests make the
// ten-year certificates of older versions with it).
func selfSignedTerm(notBefore, notAfter time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, nil, err
	}
	names := []string{"localhost"}
	if h, err := os.Hostname(); err == nil && h != "" && h != "localhost" {
		names = append(names, h)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: names[len(names)-1], Organization: []string{generatedOrg}, OrganizationalUnit: []string{generatedUnit}},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              names,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}
